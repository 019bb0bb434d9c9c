# %% [md]
# # flexcomm 1: the cost model and the what-if study
#
# One cost model prices every collective as `a*alpha + b*beta + g*gamma`. This notebook prices a
# few collectives, compares the paper's tree allreduce with ring and Rabenseifner, prices the two
# sparse Top-k exchanges, and reruns the default what-if study on a cluster.

# %%
import matplotlib.pyplot as plt
import numpy as np

from costmodel import CostModel, load_cluster, predict
from costmodel.units import format_time
from experiments.whatif import run_whatif, winners

# %% [md]
# ## Ring vs tree vs Rabenseifner on 10 Gbit/s, 25 us, 64 ranks
# Vectorised: one call per algorithm prices all sizes at once.

# %%
sizes = np.logspace(3, 9, 61)  # 1 kB .. 1 GB per rank
fig, ax = plt.subplots(figsize=(6, 4))
for algorithm in ["ring", "tree", "rabenseifner", "recursive-doubling"]:
    t = predict("allreduce", algorithm, sizes, 64, latency_s=25e-6, bandwidth_Bps=1.25e9).total
    ax.loglog(sizes, t, label=algorithm)
ax.set_xlabel("bytes per rank")
ax.set_ylabel("predicted seconds")
ax.legend()
ax.set_title("allreduce, 64 ranks, 10 Gbit/s, 25 us")

# %% [md]
# ## The same question on a real cluster description
# The two-level hierarchical allreduce uses NVLink inside a node and InfiniBand between nodes.

# %%
model = CostModel.from_cluster(load_cluster("4x8-a100-ib"))
for algorithm in ["ring", "rabenseifner", "hierarchical"]:
    cost = model.collective("allreduce", algorithm, 256 * 2**20, 32)
    print(f"{algorithm:14s} {format_time(float(cost.total))}")

# %% [md]
# ## Sparse exchanges: Top-k over Allgather vs Allreduce-compatible Top-k (ResNet-50, 1%)

# %%
paper = CostModel.from_link(latency_s=4e-3, bandwidth_Bps=20e9 / 8)  # the paper's 4 ms, 20 Gbit/s
for ranks in [2, 8, 32, 128]:
    row = {s: float(paper.scheme(s, 25.56e6, 0.01, ranks).total) for s in ["dense", "topk-ag", "topk-ar"]}
    print(ranks, {k: format_time(v) for k, v in row.items()})

# %% [md]
# ## The default what-if study, on the paper's 8 x V100 testbed

# %%
table = run_whatif(cluster=load_cluster("8x1-v100-40g"))
winners(table).groupby(["model", "best_scheme"]).size().unstack(fill_value=0)
