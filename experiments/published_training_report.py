"""The report of ``validate --published-training``: a table a reader can scan and one figure.

Kept apart from the prediction (:mod:`experiments.published_training`) so the numbers can be computed and
tested without matplotlib.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flexcomm.costmodel.plotting import use_file_backend


def report_lines(frame: pd.DataFrame) -> list[str]:
    """A markdown table: one line per multi-GPU row, predicted against published."""
    lines = ["| hardware | model | precision | seq | GPUs | batch x acc | exchange | published | predicted | error "
             "| scaling published | scaling predicted | gap (points) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in frame.itertuples():
        seq = "" if pd.isna(r.seq_len) else f"{int(r.seq_len)}"
        lines.append(f"| {r.hardware} | {r.model} | {r.precision} | {seq} | {r.gpus} | {r.batch} x {r.accumulation} "
                     f"| {r.exchange} | {r.published_throughput:,.1f} | {r.predicted_throughput:,.1f} "
                     f"| {r.rel_err:+.1%} | {r.published_scaling:.2f}x | {r.predicted_scaling:.2f}x "
                     f"| {r.scaling_gap_points:+.1f} |")
    return lines


def plot_training(frame: pd.DataFrame, path: Path) -> Path:
    """Published against predicted scaling efficiency, one marker per row; the 3-point band shaded."""
    use_file_backend()
    import matplotlib.pyplot as plt

    from flexcomm.costmodel.atomic import save_figure_atomic

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    published = 100 * frame["published_scaling"] / frame["gpus"]
    predicted = 100 * frame["predicted_scaling"] / frame["gpus"]
    low = float(min(published.min(), predicted.min())) - 4
    line = [low, 101]
    ax.plot(line, line, color="k", lw=0.8, label="predicted = published")
    ax.fill_between(line, [v - 3 for v in line], [v + 3 for v in line], color="0.85", label="within 3 points")
    markers = {"resnet50": "o", "bert-pretraining": "s", "bert-squad": "^"}
    colours = {"DGX A100": "#1f77b4", "DGX-1": "#d62728"}
    for (model, hardware), rows in frame.groupby(["model", "hardware"], sort=False):
        ax.scatter(published[rows.index], predicted[rows.index], marker=markers.get(model, "D"),
                   color=colours.get(hardware, "#555555"), label=f"{model}, {hardware}", zorder=3)
    ax.set_xlim(low, 101)
    ax.set_ylim(low, 101)
    ax.set_xlabel("published scaling efficiency (% of linear)")
    ax.set_ylabel("predicted scaling efficiency (% of linear)")
    ax.set_title("Published DDP training (NVIDIA DeepLearningExamples), 8 GPUs\n"
                 "predicted from each 1-GPU row with NCCL on the node's fabric", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return save_figure_atomic(fig, path)
