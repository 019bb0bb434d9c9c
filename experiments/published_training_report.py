"""The report of ``validate --published-training``: a table a reader can scan and one figure.

Kept apart from the prediction (:mod:`experiments.published_training`) so the numbers can be computed and
tested without matplotlib.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic, write_csv_atomic, write_text_atomic
from flexcomm.costmodel.plotting import square_log_axes, use_file_backend
from flexcomm.experiments import published_compute
from flexcomm.experiments.published_training import TARGET_SCALING_POINTS, TARGET_THROUGHPUT
from flexcomm.experiments.published_training_validation import TrainingValidation


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


def write_files(result: TrainingValidation, out: Path) -> list[str]:
    """``training.csv``/``.md``/``.png`` and ``compute.csv``/``.md`` (with ``compute.png`` when the corpus holds
    one-GPU rows) in ``out``; the names written, in that order."""
    skipped = [f"- {where}: {why}" for where, why in result.skipped]
    write_csv_atomic(result.frame, out / "training.csv")
    write_text_atomic(out / "training.md", "\n".join(
        [*report_lines(result.frame), "",
         "Per class (median |error|; the naive baseline is linear scaling of each row's reference):", "",
         *class_lines(result.classes), *(["", "Tables not predicted:", *skipped] if skipped else [])]) + "\n")
    figure = plot_training(result.frame, out / "training.png")
    write_csv_atomic(result.compute, out / "compute.csv")
    write_text_atomic(out / "compute.md", "\n".join(published_compute.report_lines(result.compute)) + "\n")
    written = ["training.csv", "training.md", figure.name, "compute.csv", "compute.md"]
    if len(result.compute):
        written.insert(5, published_compute.plot_compute(result.compute, out / "compute.png").name)
    return written


def console_lines(result: TrainingValidation) -> list[str]:
    """What ``validate --published-training`` prints: every row, each class, the counts against the targets, the
    multi-node verdict, the tables skipped and the one-GPU catalog check."""
    frame = result.frame
    within, linear_within, met = result.within_target()
    lines = [*report_lines(frame), "",
             "per class, the model against linear scaling of the reference row (median |error|):",
             *class_lines(result.classes),
             f"rows within {TARGET_THROUGHPUT:.0%}: model {within} of {len(frame)}, linear scaling {linear_within} of "
             f"{len(frame)}; targets (throughput within {TARGET_THROUGHPUT:.0%}, scaling within "
             f"{TARGET_SCALING_POINTS:g} points) met by {met}"]
    medians = result.multi_node_medians()
    if medians is not None:
        model, linear = medians
        lines.append(f"multi-node rows: model median |error| {model:.1%}, linear scaling {linear:.1%}: the model is "
                     + ("closer" if model < linear else "NOT closer"))
    if result.skipped:
        lines.append(f"{len(result.skipped)} tables not predicted (model, hardware or framework not priced; listed in "
                     "training.md)")
    compute = result.compute
    if len(compute):
        lines += ["", "1-GPU rows from the device catalog alone (nothing measured or fitted):",
                  *published_compute.report_lines(compute),
                  f"target (within {published_compute.TARGET:.0%}): met by {int(compute['within_target'].sum())} of "
                  f"{len(compute)} rows"]
    else:
        lines += ["", "no 1-GPU rows: the catalog's compute is checked only through the rows predicted from the "
                  "description"]
    return lines
