# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # flexcomm 2: calibrate the cost model on your own hardware, then compare it with the simulator
#
# The cost model's alpha (latency per message) and beta (seconds per byte) come from a cluster file's
# nominal links until you measure them. Here we measure real `torch.distributed` collectives (gloo on this
# machine's loopback; NCCL on GPUs), fit alpha and beta robustly per (collective, algorithm, link class),
# and check the calibrated model and the flow-level simulator against what was measured.
#
# On your cluster: `flexcomm bench-collectives --nproc 8 --out m.csv` on one node (link class `intra`), or
# across nodes with `flexcomm launch` / torchrun (`inter`); shape a local network with
# `flexcomm testbed up --ranks 4 --bandwidth 1Gbit/s` and add `--testbed ID`. Then
# `flexcomm calibrate m.csv -o profile.json` and pass `--profile profile.json` to any command that takes
# `--cluster`.

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from flexcomm.costmodel import CostModel
from flexcomm.costmodel.calibration import CalibrationProfile, calibrated_cluster, fit, load_measurements
from flexcomm.costmodel.cluster import Cluster
from flexcomm.real_backend.bench import run_benchmark
from flexcomm.sim.collectives import simulate_collective

plt.rcParams.update({"figure.dpi": 72})  # inline figures small enough to commit with the notebook
work = Path(tempfile.mkdtemp(prefix="flexcomm-nb2-"))

# %% [markdown]
# ## Measure: two gloo ranks on loopback
# Every repetition is appended to the CSV as it is measured (a crash loses nothing). Small settings here;
# use more sizes and `--iters 20` for a real calibration.

# %%
result = run_benchmark(2, "64KiB:4MiB:4", work / "measurements.csv", collectives="allreduce,allgather",
                       warmup=2, iters=5, quiet=True, timeout_s=240)
assert result.returncode == 0, result
measured = load_measurements(work / "measurements.csv")
measured.groupby(["collective", "bytes"])["seconds"].median().unstack(0)

# %% [markdown]
# ## Fit: robust least squares on log-ratio residuals
# One (alpha, beta) per collective and algorithm; R^2 and residuals say how well an alpha-beta line fits.

# %%
profile = fit(measured)
profile.save(work / "profile.json")
profile.summary()

# %% [markdown]
# ## Compare: measured vs calibrated cost model vs simulator on the calibrated links
# A one-node, two-device cluster whose intra-node link carries the fitted allreduce/ring parameters.

# %%
nominal = Cluster.from_dict({
    "name": "this-machine", "nodes": 1, "devices_per_node": 2,
    "device": {"name": "cpu", "peak_flops": "100GFLOP/s", "memory": "8GiB"},
    "intra_link": {"latency": "10us", "bandwidth": "10GB/s"},
    "inter_link": {"latency": "50us", "bandwidth": "10Gbit/s"}, "topology": {"kind": "flat"}})
cluster = calibrated_cluster(nominal, CalibrationProfile.load(work / "profile.json"))
model = CostModel.from_cluster(cluster, profile=profile)
rows = []
for (collective, nbytes), part in measured.groupby(["collective", "bytes"]):
    algorithm = part["algorithm"].iloc[0]
    rows.append({
        "collective": collective, "bytes": nbytes, "measured_s": part["seconds"].median(),
        "cost_model_s": float(model.collective(collective, algorithm, nbytes, 2).total),
        "simulator_s": simulate_collective(cluster, collective, algorithm, nbytes, 2).seconds,
    })
comparison = pd.DataFrame(rows)
comparison["model_error"] = comparison["cost_model_s"] / comparison["measured_s"] - 1
comparison["sim_error"] = comparison["simulator_s"] / comparison["measured_s"] - 1
comparison.round(6)

# %%
fig, ax = plt.subplots(figsize=(6, 3.8))
for collective, part in comparison.groupby("collective"):
    ax.plot(part["bytes"], part["measured_s"], "o", label=f"{collective} measured")
    ax.plot(part["bytes"], part["cost_model_s"], "-", label=f"{collective} calibrated model")
    ax.plot(part["bytes"], part["simulator_s"], "x", label=f"{collective} simulator")
ax.set(xscale="log", yscale="log", xlabel="bytes", ylabel="seconds", title="loopback gloo, 2 ranks")
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# The simulator prices every collective on the link fitted to allreduce/ring (a cluster has one link per
# class), while the model uses each collective's own fit: that is why allgather parts ways more.
# Loopback is noisy (a shared CPU moves the bytes), so errors of tens of percent are normal here; on a
# shaped testbed `flexcomm validate --testbed` measured a median 1.6% (model) and 1.7% (simulator) at
# 100 Mbit/s for collectives of 1 MiB and more (see docs/real-backend.md). Where the simulator and the model part
# ways on a real cluster (contention, oversubscribed uplinks, a slow node), `SimResult.explain()` names the
# bottleneck link of each coflow.
