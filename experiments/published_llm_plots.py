"""The figure of ``validate --published-llm``: predicted against published tokens/s/GPU (the model and the naive
baseline), and where each row's predicted step goes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.plotting import use_file_backend

#: The step's parts in the order they are stacked, as ``predict`` names their columns.
PARTS = ("compute", "memory-bound", "recompute", "TP", "CP", "EP", "PP p2p", "PP imbalance", "bubble", "DP/FSDP",
         "optimizer")



def _part_colours(plt) -> list:  # noqa: ANN001 - matplotlib.pyplot
    """One colour per step part: tab10 has ten, PARTS eleven (the eleventh took compute's blue), so dark grey
    is added."""
    return [*plt.get_cmap("tab10").colors, "0.3"][:len(PARTS)]

def plot_published_llm(frame: pd.DataFrame, path: Path) -> Path:
    """Left: published (x) against predicted (y), log axes, the model filled and the naive baseline hollow,
    the 10 % band shaded. Right: each row's predicted step as shares of its parts."""
    use_file_backend()
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D


    height = max(6.0, 0.13 * len(frame) + 1.5)  # one readable tick label per row on the right
    fig, (ax, parts) = plt.subplots(1, 2, figsize=(14, height), gridspec_kw={"width_ratios": [1, 1.3]})
    low = 0.7 * float(min(frame["published_tokens_per_s"].min(), frame["predicted_tokens_per_s"].min()))
    high = 1.4 * float(max(frame["published_tokens_per_s"].max(), frame["predicted_tokens_per_s"].max(),
                           frame["naive_tokens_per_s"].max()))
    line = [low, high]
    ax.plot(line, line, color="k", lw=0.8, label="predicted = published")
    ax.fill_between(line, [v * 0.9 for v in line], [v * 1.1 for v in line], color="0.85", label="within 10 %")
    colours = dict(zip(sorted(frame["system"].unique()), plt.get_cmap("tab10").colors, strict=False))
    markers = {"dense": "o", "MoE": "s"}
    for (system, kind), rows in frame.groupby(["system", "class"], sort=True):
        ax.scatter(rows["published_tokens_per_s"], rows["predicted_tokens_per_s"], color=colours[system],
                   marker=markers[kind], s=28, zorder=3, label=f"model: {system}, {kind}")
        ax.scatter(rows["published_tokens_per_s"], rows["naive_tokens_per_s"], facecolors="none",
                   edgecolors=colours[system], marker=markers[kind], s=28, zorder=2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("published tokens/s per GPU")
    ax.set_ylabel("predicted tokens/s per GPU")
    ax.set_title(f"NVIDIA's published LLM pre-training ({len(frame)} rows), each at its own layout", fontsize=9)
    handles, _ = ax.get_legend_handles_labels()
    hollow = Line2D([], [], marker="o", ls="", markerfacecolor="none", markeredgecolor="k",
                    label="hollow: naive baseline (FLOPs at measured BF16 rate)")
    ax.legend(handles=[*handles, hollow], fontsize=6, loc="lower right")
    ordered = frame.sort_values(["class", "system", "model"]).reset_index(drop=True)
    shares = pd.DataFrame({p: ordered[f"{p}_s"] / ordered["step_s"] for p in PARTS})
    left = [0.0] * len(ordered)
    for part, colour in zip(PARTS, _part_colours(plt), strict=True):
        parts.barh(range(len(ordered)), shares[part], left=left, color=colour, label=part, height=0.8)
        left = [a + b for a, b in zip(left, shares[part], strict=True)]
    labels = [f"{r.model} {r.system} {r.precision} {r.layout}" for r in ordered.itertuples()]
    parts.set_yticks(range(len(ordered)), labels, fontsize=5)
    parts.invert_yaxis()
    parts.set_xlabel("share of the predicted step")
    parts.set_xlim(0, 1)
    parts.set_title("where the predicted step goes (exposed communication only)", fontsize=9)
    parts.legend(fontsize=6, ncols=5, loc="lower center", bbox_to_anchor=(0.5, 1.04))
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def plot_layout_parts(costs: list, path: Path, title: str) -> Path:  # list[LayoutCost]
    """Each layout's predicted step as stacked seconds of its parts, fastest first (``plan --model <preset>``)."""
    use_file_backend()
    import matplotlib.pyplot as plt


    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.35 * len(costs) + 1.5)))
    left = [0.0] * len(costs)
    for part, colour in zip(PARTS, _part_colours(plt), strict=True):
        values = [c.parts()[part] for c in costs]
        if not any(values):
            continue
        ax.barh(range(len(costs)), values, left=left, color=colour, label=part, height=0.7)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_yticks(range(len(costs)), [c.layout.label for c in costs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("predicted step (s)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return save_figure_atomic(fig, path)
