"""Figures of emulated training: accuracy against simulated time and steps, and what adaptive runs chose."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.plotting import use_file_backend  # noqa: E402

use_file_backend()  # files only, unless a notebook's pyplot is already in use
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from flexcomm.costmodel.atomic import save_figure_atomic  # noqa: E402
from flexcomm.costmodel.plotting import readable_log_axis, strategy_style  # noqa: E402

SCHEME_MARKERS = {"dense": "s", "topk-ag": "o", "topk-ar": "^"}


def plot_emulation(frames: dict[str, pd.DataFrame], path: str | Path, title: str = "",
                   bands: dict[str, pd.DataFrame] | None = None) -> Path:
    """Four panels: test accuracy vs simulated time and vs step, simulated time vs step, ratio/scheme vs step.

    Why both x axes: compression changes time per step *and* progress per step; only accuracy against
    time says which strategy is faster to a given accuracy. Strategies that coincide (flexible choosing
    Allgather every step is topk-ag) are drawn thin and dashed over thick and solid, so both show.
    ``bands`` (per strategy, from :func:`emulation.seeds.accuracy_bands`): the accuracy panels draw the mean
    over seeds with its 95 % band instead of one run; the clock and ratio panels show ``frames`` (one seed).
    """
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    (ax_time, ax_step), (ax_clock, ax_ratio) = axes
    fixed: dict[tuple, list[str]] = {}  # static strategies by their ratio series: identical ones share a line
    for name, frame in frames.items():
        style = strategy_style(name)
        evals = frame.dropna(subset=["test_acc"])
        if bands is not None and name in bands:
            band = bands[name]
            seeds = int(band["seeds"].max())
            for ax, x in ((ax_time, band["sim_time_s"]), (ax_step, band["step"])):
                ax.fill_between(x, band["test_acc_lo"], band["test_acc_hi"], color=style["color"], alpha=0.18,
                                lw=0, label=f"{name}: 95 % band ({seeds} seeds)")
                ax.plot(x, band["test_acc"], ms=4, label=f"{name} (mean)", **style)
        else:
            ax_time.plot(evals["sim_time_s"], evals["test_acc"], ms=4, label=name, **style)
            ax_step.plot(evals["step"], evals["test_acc"], ms=4, label=name, **style)
        ax_clock.plot(frame["step"], frame["sim_time_s"], label=name, **strategy_style(name, markers=False))
        if name in ("flexible", "moo"):
            for scheme, part in frame.groupby("scheme"):
                ax_ratio.scatter(part["step"], part["ratio"], s=16 if scheme == "topk-ar" else 6,
                                 color=style["color"], marker=SCHEME_MARKERS.get(str(scheme), "x"),
                                 label=f"{name}: {scheme}", zorder=3)
        elif name != "dense":
            fixed.setdefault(tuple(frame["ratio"].round(12)), []).append(name)
    for ratios, names in fixed.items():
        first = frames[names[0]]
        ax_ratio.plot(first["step"], ratios, color=strategy_style(names[0])["color"], lw=10, alpha=0.45,
                      solid_capstyle="butt", zorder=1, label=f"{', '.join(names)} (fixed c)")
    ax_ratio.margins(y=0.15)  # a band at the panel's edge would be half clipped
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
    for ax, which in ((ax_time, "x"), (ax_clock, "y"), (ax_ratio, "y")):
        readable_log_axis(ax, which)
    return save_figure_atomic(fig, path)


def plot_pareto_fronts(fronts: pd.DataFrame, path: str | Path, max_panels: int = 4) -> Path:
    """One panel per ratio decision: the NSGA-II front (step time vs compression gain), coloured by the
    ratio c, with the operating point the rule picked starred.

    Why: the choice of c is a trade-off between time per step and gradient information kept; the front
    shows how much of one each unit of the other costs, and whether the chosen point sits at the knee.
    """
    import numpy as np
    from matplotlib.colors import LogNorm

    steps = list(dict.fromkeys(fronts["step"]))
    if len(steps) > max_panels:  # first, last and evenly spaced ones between
        steps = [steps[int(i)] for i in np.linspace(0, len(steps) - 1, max_panels).round()]
    fig, axes = plt.subplots(1, len(steps), figsize=(4.4 * len(steps) + 1, 3.8), squeeze=False, layout="constrained")
    norm = LogNorm(vmin=float(fronts["c"].min()), vmax=float(fronts["c"].max()))
    points = None
    for ax, step in zip(axes[0], steps, strict=True):
        front = fronts[fronts["step"] == step].sort_values("step_s")
        points = ax.scatter(front["step_s"] * 1e3, front["gain"], c=front["c"], cmap="viridis", norm=norm, s=16,
                            zorder=2)
        chosen = front[front["chosen"].astype(bool)]
        ax.scatter(chosen["step_s"] * 1e3, chosen["gain"], marker="*", s=180, color="#d62728", zorder=3,
                   label=", ".join(f"c = {c:.3g}" for c in chosen["c"]))
        reason = str(front["reason"].iloc[0]) if "reason" in front else ""
        ax.set_title(f"step {step} ({reason})", fontsize=9)
        ax.set_xlabel("predicted step time (ms)")
        ax.set_ylabel("compression gain")
        ax.legend(fontsize=8, loc="lower right")
    if points is not None:
        fig.colorbar(points, ax=axes[0].tolist(), label="compression ratio c (fraction kept)")
    fig.suptitle("Pareto fronts of the compression ratio: time per step vs statistical efficiency", fontsize=10)
    return save_figure_atomic(fig, Path(path))
