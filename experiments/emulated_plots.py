"""Figures of emulated training: accuracy against simulated time and steps, and what adaptive runs chose."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers or in CI
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from costmodel.atomic import save_figure_atomic  # noqa: E402

STRATEGY_COLOURS = {"dense": "#7f7f7f", "topk-ag": "#1f77b4", "topk-ar": "#ff7f0e", "flexible": "#2ca02c",
                    "moo": "#d62728"}
SCHEME_MARKERS = {"dense": "s", "topk-ag": "o", "topk-ar": "^"}


def plot_emulation(frames: dict[str, pd.DataFrame], path: str | Path, title: str = "") -> Path:
    """Four panels: test accuracy vs simulated time and vs step, simulated time vs step, ratio/scheme vs step.

    Why both x axes: compression changes time per step *and* progress per step; only accuracy against
    time says which strategy is faster to a given accuracy.
    """
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    (ax_time, ax_step), (ax_clock, ax_ratio) = axes
    for name, frame in frames.items():
        colour = STRATEGY_COLOURS.get(name)
        evals = frame.dropna(subset=["test_acc"])
        ax_time.plot(evals["sim_time_s"], evals["test_acc"], marker=".", color=colour, label=name)
        ax_step.plot(evals["step"], evals["test_acc"], marker=".", color=colour, label=name)
        ax_clock.plot(frame["step"], frame["sim_time_s"], color=colour, label=name)
        if name in ("flexible", "moo"):
            for scheme, part in frame.groupby("scheme"):
                ax_ratio.scatter(part["step"], part["ratio"], s=14 if scheme == "topk-ar" else 5, color=colour,
                                 marker=SCHEME_MARKERS.get(str(scheme), "x"), label=f"{name}: {scheme}")
        elif name != "dense":
            ax_ratio.plot(frame["step"], frame["ratio"], color=colour, lw=0.8, ls="--", label=name)
    ax_time.set_xscale("log")
    ax_time.set_xlabel("simulated time (s, log)")
    ax_time.set_ylabel("test accuracy")
    ax_time.set_title("accuracy vs simulated time")
    ax_step.set_xlabel("step")
    ax_step.set_ylabel("test accuracy")
    ax_step.set_title("accuracy vs steps")
    ax_clock.set_xlabel("step")
    ax_clock.set_ylabel("simulated time (s)")
    ax_clock.set_yscale("log")
    ax_clock.set_title("simulated clock (compute + communication + compression + probes)")
    ax_ratio.set_xlabel("step")
    ax_ratio.set_ylabel("compression ratio c (fraction kept)")
    ax_ratio.set_yscale("log")
    ax_ratio.set_title("ratio and scheme used (o Allgather, ^ AR-compatible Top-k)")
    for ax in axes.flat:
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = save_figure_atomic(fig, path)
    plt.close(fig)
    return out
