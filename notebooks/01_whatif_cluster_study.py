# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # flexcomm 1: a what-if cluster study
#
# *On this cluster, with this model and this network, which gradient exchange is fastest, and by how much?*
# The shared cost model answers a single configuration in microseconds; a **study file** sweeps many
# (bandwidth, latency, ranks, compression ratio, strategy) and writes a tidy table and plots; the same
# file runs on a laptop's process pool or on a Dask cluster (`--scheduler tcp://...`), and an
# interrupted study resumes where it stopped.

# %%
import os
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from flexcomm import experiments
from flexcomm.costmodel import CostModel, load_cluster
from flexcomm.costmodel.units import format_time
from flexcomm.experiments.cli import main as flexcomm
from flexcomm.experiments.reproductions.crossover import SCHEME_COLOURS, VARIANTS, paper_threshold, price

plt.rcParams.update({"figure.dpi": 72})  # inline figures small enough to commit with the notebook
os.chdir(tempfile.mkdtemp(prefix="flexcomm-nb1-"))  # a scratch folder: outputs below are relative to it

# %% [markdown]
# ## One configuration: ResNet-50's gradient on the cluster's own links
# Dense ring allreduce against Top-k over Allgather and Allreduce-compatible Top-k at c = 1%.

# %%
cluster = load_cluster("8x1-10gbe")
model = CostModel.from_cluster(cluster)
params = 25.56e6
for scheme in ("dense", "topk-ag", "topk-ar"):
    cost = model.scheme(scheme, params, cluster.world_size, 0.01)
    print(f"{scheme:8s} {format_time(float(cost.total)):>10s}  (latency {format_time(float(cost.latency))}, "
          f"bandwidth {format_time(float(cost.bandwidth))})")

# %% [markdown]
# ## A study file: the sweep, validated, run in a process pool
# `experiments/studies/whatif-small.yaml` prices 3 strategies over 4 bandwidths x 2 latencies x 2 rank counts x
# 3 ratios. A typo in the file is one line naming the field (try `bandwidth: [fast]`).

# %%
print((Path(experiments.__file__).parent / "studies" / "whatif-small.yaml").read_text())
assert flexcomm(["study", "whatif-small", "--out", "study", "--workers", "0", "--no-progress"]) == 0
results = pd.read_parquet("study/results.parquet")
results.head()

# %% [markdown]
# ## Which strategy wins where
# Speedup over dense of each sparse exchange, by bandwidth, for 64 ranks and 1 ms latency.

# %%
view = results[(results["ranks"] == 64) & np.isclose(results["latency_s"], 1e-3)]
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for (strategy, ratio), part in view[view["strategy"] != "dense"].groupby(["strategy", "ratio"]):
    part = part.sort_values("bandwidth_Bps")
    ax.plot(part["bandwidth_Bps"] * 8 / 1e9, part["speedup_vs_dense"], marker="o",
            color=SCHEME_COLOURS[strategy], alpha=0.4 + 0.2 * -np.log10(ratio), label=f"{strategy} c={ratio:g}")
ax.axhline(1, color="k", lw=0.8)
ax.set(xscale="log", yscale="log", xlabel="bandwidth (Gbit/s)", ylabel="speedup over dense",
       title="ResNet-50, 64 ranks, 1 ms")
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# ## The crossover map on this cluster's link
# Where Allgather Top-k, AR-compatible Top-k or dense wins as c and the latency vary (10 Gbit/s, 8 ranks);
# the dashed line is the paper's closed-form threshold.

# %%
ratios, latencies = np.logspace(-4, 0, 60), np.logspace(-6, -1, 40)
grid = price(ratios, latencies, np.array([1.25e9]), np.array([8]), params, *VARIANTS["paper forms (int32 indices)"])
codes = {"dense": 0, "topk-ag": 1, "topk-ar": 2}
z = grid["winner"].map(codes).to_numpy().reshape(len(ratios), len(latencies)).T
fig, ax = plt.subplots(figsize=(5.5, 3.8))
ax.pcolormesh(ratios, latencies, z, cmap=plt.matplotlib.colors.ListedColormap(list(SCHEME_COLOURS.values())),
              vmin=-0.5, vmax=2.5, shading="nearest")
ax.plot(paper_threshold(latencies, 1.25e9, 8, params), latencies, "k--")
ax.set(xscale="log", yscale="log", xlim=(1e-4, 1), xlabel="compression ratio c", ylabel="latency (s)",
       title="grey dense, blue Allgather Top-k, orange AR-Top-k")
plt.show()

# %% [markdown]
# ## Scaling the sweep out
# The same study on a Dask cluster: `flexcomm study FILE --out DIR --scheduler tcp://HOST:8786`.
# Points carry their own seeds, so results do not depend on which worker ran them; rerunning into the same
# directory skips every point already in `results.csv`.
