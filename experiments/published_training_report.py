"""The report of ``validate --published-training``: a table a reader can scan and one figure.

Kept apart from the prediction (:mod:`experiments.published_training`) so the numbers can be computed and
tested without matplotlib.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.plotting import square_log_axes, use_file_backend


def _scaling(value: object) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.2f}x"


def report_lines(frame: pd.DataFrame) -> list[str]:
    """A markdown table: one line per multi-GPU row, predicted against published, beside the naive baseline
    (linear scaling of the row's reference, or of the catalog's compute where it has none)."""
    lines = ["| hardware | model | precision | seq | GPUs | batch x acc | exchange | published | predicted | error "
             "| linear baseline error | from the description | scaling published | scaling predicted | gap (points) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in frame.itertuples():
        seq = "" if pd.isna(r.seq_len) else f"{int(r.seq_len)}"
        gap = "-" if r.scaling_gap_points is None or pd.isna(r.scaling_gap_points) else f"{r.scaling_gap_points:+.1f}"
        lines.append(f"| {r.hardware} | {r.model} | {r.precision} | {seq} | {r.gpus} | {r.batch} x {r.accumulation} "
                     f"| {r.exchange} | {r.published_throughput:,.1f} | {r.predicted_throughput:,.1f} "
                     f"| {r.rel_error:+.1%} | {r.baseline_rel_error:+.1%} | {r.description_rel_error:+.1%} "
                     f"| {_scaling(r.published_scaling)} | {_scaling(r.predicted_scaling)} | {gap} |")
    return lines


def class_lines(summary: pd.DataFrame) -> list[str]:
    """Per class: the model's median |error| beside the linear baseline's, and which is closer."""
    lines = ["| scale | hardware | model | precision | rows | model median | linear baseline median | model closer |",
             "|---|---|---|---|---|---|---|---|"]
    for r in summary.itertuples():
        lines.append(f"| {r.scale} | {r.hardware} | {r.model} | {r.precision} | {r.rows} | "
                     f"{r.model_median_abs_error:.1%} | {r.baseline_median_abs_error:.1%} | "
                     f"{'yes' if r.model_closer else '**no**'} |")
    return lines


def plot_training(frame: pd.DataFrame, path: Path) -> Path:
    """Published against predicted scaling efficiency, one marker per row; the 3-point band shaded."""
    use_file_backend()
    import matplotlib.pyplot as plt


    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    if not (frame["predicted_scaling"].notna() & frame["published_scaling"].notna()).any():
        return _plot_throughput(fig, ax, frame, path)
    frame = frame[frame["predicted_scaling"].notna() & frame["published_scaling"].notna()]
    widening = frame["gpus"] / frame["reference_gpus"].astype(float)
    published = 100 * frame["published_scaling"].astype(float) / widening
    predicted = 100 * frame["predicted_scaling"].astype(float) / widening
    low = float(min(published.min(), predicted.min())) - 4
    high = max(101.0, float(max(published.max(), predicted.max())) + 2)
    line = [low, high]
    ax.plot(line, line, color="k", lw=0.8, label="predicted = published")
    ax.fill_between(line, [v - 3 for v in line], [v + 3 for v in line], color="0.85", label="within 3 points")
    ax.axhline(100.0, color="#7f7f7f", ls="--", lw=1.0, label="naive baseline: linear scaling (every row at 100 %)")
    markers = {"resnet50": "o", "bert-pretraining": "s", "bert-squad": "^"}
    colours = {"DGX A100": "#1f77b4", "DGX-1": "#d62728"}
    for (model, hardware), rows in frame.groupby(["model", "hardware"], sort=False):
        ax.scatter(published[rows.index], predicted[rows.index], marker=markers.get(model, "D"),
                   color=colours.get(hardware, "#555555"), label=f"{model}, {hardware}", zorder=3)
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("published scaling efficiency (% of linear from the reference row)")
    ax.set_ylabel("predicted scaling efficiency (% of linear)")
    ax.set_title("Published DDP training (NVIDIA DeepLearningExamples), 8 to 256 GPUs\n"
                 "predicted from each reference row (1 GPU or 1 node) with NCCL on the fabric", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def _plot_throughput(fig, ax, frame: pd.DataFrame, path: Path) -> Path:  # noqa: ANN001 (matplotlib objects)
    """Rows predicted from the description alone (no row of theirs on fewer GPUs): throughput against published,
    and the naive baseline (the catalog's compute scaled linearly) beside it."""
    values = pd.concat([frame["published_throughput"], frame["predicted_throughput"], frame["baseline_throughput"]])
    low, high = 0.5 * float(values.min()), 2.0 * float(values.max())
    ax.plot([low, high], [low, high], color="k", lw=0.8, label="predicted = published")
    ax.scatter(frame["published_throughput"], frame["predicted_throughput"], marker="o", color="#1f77b4",
               label="predicted from the description", zorder=3)
    ax.scatter(frame["published_throughput"], frame["baseline_throughput"], marker="x", color="#7f7f7f",
               label="naive: the catalog's compute, scaled linearly", zorder=3)
    square_log_axes(ax, low, high, "published samples/s", "predicted samples/s")
    ax.set_title("Published DDP training without a reference row: predicted from the description", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return save_figure_atomic(fig, path)
