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
# # flexcomm 3: Pareto fronts and the compression-ratio controller
#
# A smaller compression ratio c sends less (parallel efficiency) but keeps less of each gradient
# (statistical efficiency, the *compression gain*). Neither objective alone picks c. Here we draw the front for
# one workload, see which (c, collective) candidates are dominated and where each selection rule operates, then
# watch the online controller re-pick c and the collective while the network changes.

# %%
import matplotlib.pyplot as plt

from flexcomm.emulation.engine import EmulatedRun, EmulationConfig
from flexcomm.experiments.pareto import pareto_study, plot_pareto, summary_lines

plt.rcParams.update({"figure.dpi": 72})  # inline figures small enough to commit with the notebook

# %% [markdown]
# ## The front: measured gains, priced times
# The MLP trains for real on 4 workers (its gradients give the gain); its exchange is priced as ResNet-18's
# 11.69M parameters on the paper's 8 x V100, 40 Gbit/s testbed. Same as
# `flexcomm pareto --workload mlp-digits --workers 4 --price-params 11.69M`.

# %%
front = pareto_study("mlp-digits", "8x1-v100-40g", workers=4, warmup_steps=20, probe_steps=3, grid_points=25,
                     price_params=11_690_000, seed=0)
print("\n".join(summary_lines(front)))
fig, ax = plt.subplots(figsize=(7.5, 5))
plot_pareto(front, "", ax=ax)

# %% [markdown]
# Hollow points are dominated: at the same c the other collective is both as informative and faster. The
# paper's ASF rule (weights 0.6 time / 0.4 gain) sits at lower c than the knee; pass `--rule knee` to choose
# differently.
#
# ## The controller online, on the paper's dynamic C1 network
# Bandwidth drops from 25 to 1 Gbit/s, then latency jumps from 1 to 50 ms. The controller probes the gain at
# the candidate ratios from a saved state, re-runs NSGA-II when the network estimate moves, and the flexible
# compressor picks the collective every step.

# %%
run = EmulatedRun(EmulationConfig(workload="mlp-digits", workers=4, strategy="moo", steps=120, network="c1",
                                  price_params=11_690_000, compute_time_s=15e-3, eval_every=20, seed=0))
result = run.run()
frame = result.frame
fig, (ax_net, ax_c) = plt.subplots(2, 1, figsize=(7.5, 5), sharex=True)
ax_net.step(frame["step"], frame["net_bandwidth_Bps"] * 8 / 1e9, where="post", label="bandwidth (Gbit/s)")
ax_net.step(frame["step"], frame["net_latency_s"] * 1e3, where="post", label="latency (ms)")
ax_net.legend(fontsize=8)
for scheme, part in frame.groupby("scheme"):
    ax_c.scatter(part["step"], part["ratio"], s=6, label=scheme)
ax_c.set(yscale="log", xlabel="step", ylabel="chosen c")
ax_c.legend(fontsize=8)
result.moo_events[["step", "reason", "ratio", "pred_step_s", "pred_gain"]]

# %% [markdown]
# `flexcomm reproduce adaptation` runs this on C1 and C2 for a small and a large model, and
# `flexcomm reproduce accuracy-time` compares it with dense and static ratios in accuracy against time.
# A learned alternative to the optimizer, trained with state-dependent exploration, is `flexcomm controller`.
