"""The figure of a multi-job scenario: who ran when, above which links were busy when.

Why one figure: a job's slowdown is explained by the links it shared; the heat map of link utilization
(rows: the busiest links, columns: time) lined up under the jobs' iterations shows where and when two jobs
met, which a table of slowdowns cannot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flexcomm.costmodel.plotting import use_file_backend

#: At most this many links get a row (the busiest by mean utilization).
MAX_LINKS = 40


def plot_utilization(result: Any, path: str | Path) -> Path:
    use_file_backend()
    import matplotlib.pyplot as plt

    from flexcomm.costmodel.atomic import save_figure_atomic

    util = result.utilization
    busy = np.flatnonzero(util.max(axis=1) > 0)
    order = busy[np.argsort(-util[busy].mean(axis=1), kind="stable")][:MAX_LINKS]
    order = order[np.argsort([result.link_names[i] for i in order], kind="stable")]
    jobs = result.scenario.jobs
    rows = max(len(order), 8)
    fig, (ax_jobs, ax_heat) = plt.subplots(2, 1, figsize=(12, 3.0 + 0.18 * rows + 0.35 * len(jobs)), sharex=True,
                                           height_ratios=[0.6 + 0.35 * len(jobs), 0.22 * rows], layout="constrained")
    scale = 1e3  # ms
    colours = plt.get_cmap("tab10")
    for k, job in enumerate(jobs):
        part = result.iterations[result.iterations["job"] == job.name]
        bars = [(s * scale, (e - s) * scale) for s, e in zip(part["start_s"], part["end_s"], strict=True)]
        ax_jobs.broken_barh(bars, (k - 0.35, 0.7), facecolors=[colours(k % 10)] * len(bars), edgecolors="white",
                            linewidth=0.6)
    ax_jobs.set_yticks(range(len(jobs)), [f"{j.name} ({len(j.ranks)} GPUs)" for j in jobs], fontsize=8)
    ax_jobs.set_ylim(len(jobs) - 0.5, -0.5)
    ax_jobs.set_title("iterations of each job (one bar each)", fontsize=9, loc="left")
    ax_jobs.tick_params(labelbottom=True)  # shared time axis: readable on both panels
    ax_jobs.grid(True, axis="x", alpha=0.3)
    edges = result.bin_edges * scale
    image = ax_heat.pcolormesh(edges, np.arange(len(order) + 1), util[order], cmap="magma", vmin=0, vmax=1,
                               shading="flat")
    ax_heat.set_yticks(np.arange(len(order)) + 0.5, [result.link_names[i] for i in order], fontsize=6)
    ax_heat.set_ylim(len(order), 0)
    ax_heat.set_xlabel("simulated time (ms)")
    ax_heat.set_title(f"link utilization (fraction of capacity; the {len(order)} busiest of {len(busy)} used links)",
                      fontsize=9, loc="left")
    fig.colorbar(image, ax=ax_heat, label="utilization", fraction=0.025, pad=0.01)
    fig.suptitle(f"{result.scenario.name} on {result.scenario.cluster.name} ({result.scenario.sharing} sharing, "
                 f"{result.scenario.coupling} coupling)", fontsize=10)
    return save_figure_atomic(fig, path)
