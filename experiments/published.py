"""``flexcomm validate --published [DIR]``: predict every published nccl-tests run from its hardware alone.

Each run ``DIR/<id>.txt`` has its hardware in ``DIR/clusters/<id>.yaml`` (usually ``extends:`` a shipped
cluster, whose name is the run's *hardware class*). Every row is priced by the collective-library model
(:mod:`costmodel.collective_libraries.call_cost`: NCCL's choice, then its runtime; RCCL on AMD clusters) with
the log's own NCCL_ALGO / NCCL_PROTO, NCCL version, GPUs per thread and CUDA-graph mode; nothing is fitted.
Then, as a second and separate figure, a leave-one-run-out calibration inside each hardware class: the
run's predictions are scaled by the median measured/predicted ratio of the *other* runs of its class with
the same collective and regime (inside one NVLink domain, or across NICs; rows >= 1 MiB), so a class-wide
miss (the same NIC efficiency everywhere) can be told from a run-specific one.

Every run and class is reported in three size regimes (< 1 MiB, 1-256 MiB, >= 256 MiB) with the mechanism
that dominates each row's predicted time (launch, latency, pipeline fill, bandwidth), so a miss points at a
mechanism. A run needs five rows >= 1 MiB to count for the per-run targets; one with fewer is reported as
such. A cluster file whose header leaves out what decides the result says so in a ``# undescribed: ...``
comment; such runs are predicted and shown but kept out of the target's denominator.

A run that cannot be predicted is listed with the reason (unreadable log, ranks disagreeing with the
described hardware) rather than dropped. This module predicts and returns a :class:`PublishedValidation`;
:mod:`experiments.published_report` writes it atomically: ``errors.csv`` (one line per row, with the predicted
time's parts), ``errors.md`` and ``figures/<id>.png`` (busbw against size, measured and predicted, the
algorithm NCCL would choose marked, and the relative error beneath).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.collective_libraries.logs import read_nccl_tests
from flexcomm.costmodel.collective_libraries.validation import validate_log
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.documents import read_document
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.published_targets import MIN_ROWS, SUMMARY_MIN_BYTES, TARGET_MEDIAN, TARGET_WORST
from flexcomm.validation import data_path

if TYPE_CHECKING:
    import pandas as pd

#: share of described runs that should meet the per-run targets
TARGET_SHARE = 0.80
#: size regimes (bytes, [low, high)) and the median goal of each where the issue sets one
REGIMES = (("< 1 MiB", 0, 1 << 20), ("1-256 MiB", 1 << 20, 256 << 20), (">= 256 MiB", 256 << 20, float("inf")))
REGIME_GOALS = {"1-256 MiB": 0.10}
SMALL_BAND = ("64 KiB-1 MiB", 64 << 10, 1 << 20, 0.15)


@dataclass
class RunResult:
    """One published run: what was predicted, or why nothing was."""

    run_id: str
    hardware_class: str
    status: str  # predicted | not predicted
    reason: str = ""
    collective: str = ""
    ranks: int | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    loro_factor: float | None = None
    regime: str = ""  # "in-node" (one NVLink domain / PCIe box) or "network" (NCCL nodes joined by NICs)
    undescribed: str = ""  # what the run's header leaves out that decides the result (its cluster file says)

    @property
    def calibration_group(self) -> tuple[str, str, str]:
        """Runs that share a bottleneck: same hardware class, collective and regime."""
        return self.hardware_class, self.collective, self.regime

    @property
    def large(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["bytes"] >= SUMMARY_MIN_BYTES]

    @property
    def partial(self) -> bool:
        return bool(self.rows) and min(r["bytes"] for r in self.rows) > SUMMARY_MIN_BYTES

    def errors(self, key: str = "rel_error", min_bytes: int = SUMMARY_MIN_BYTES) -> list[float]:
        return [abs(r[key]) for r in self.rows if r["bytes"] >= min_bytes and r.get(key) is not None]

    def median_ratio(self) -> float | None:
        ratios = [r["measured_s"] / r["predicted_s"] for r in self.large if r["predicted_s"] > 0]
        return statistics.median(ratios) if ratios else None

    @property
    def enough_rows(self) -> bool:
        return len(self.large) >= MIN_ROWS

    @property
    def meets_targets(self) -> bool | None:
        """Median and worst |error| over rows >= 1 MiB within the targets; None with fewer than five such rows."""
        errs = self.errors()
        if len(errs) < MIN_ROWS:
            return None
        return statistics.median(errs) <= TARGET_MEDIAN and max(errs) <= TARGET_WORST

    def in_regime(self, low: float, high: float) -> list[dict[str, Any]]:
        return [r for r in self.rows if low <= r["bytes"] < high]

    def regime_summary(self, low: float, high: float) -> tuple[float | None, str]:
        """Median |error| of the rows in [low, high) and the mechanism most of them are dominated by."""
        rows = self.in_regime(low, high)
        if not rows:
            return None, ""
        return statistics.median(abs(r["rel_error"]) for r in rows), most_common([r.get("mechanism") for r in rows])


def most_common(labels: list[Any]) -> str:
    """The most frequent label, ties broken by name (the same report for the same rows, whatever the hash seed)."""
    from collections import Counter

    counts = Counter(str(label or "-") for label in labels)
    return min(counts, key=lambda k: (-counts[k], k)) if counts else "-"


def undescribed(cluster_file: Path) -> str:
    """What a run's cluster file says its header leaves out (``# undescribed: ...``), or ''."""
    for line in cluster_file.read_text(encoding="utf-8").splitlines():
        if line.lower().startswith("# undescribed:"):
            return line.split(":", 1)[1].strip()
    return ""


def hardware_class(cluster_file: Path) -> str:
    """The shipped cluster a run's file extends (its class), or the file's own name."""
    data = read_document(cluster_file, "cluster", "cluster file")
    base = data.get("extends") if isinstance(data, dict) else None
    return str(base).removesuffix(".yaml").lstrip("_") if base else cluster_file.stem


def predict_run(log_path: Path, cluster_file: Path) -> RunResult:
    """Every row of one published log, priced from its cluster file alone."""
    run_id = log_path.stem
    if not cluster_file.is_file():
        return RunResult(run_id, "-", "not predicted", f"no cluster file {cluster_file.name}")
    try:
        klass = hardware_class(cluster_file)
        cluster = Cluster.from_file(cluster_file)
    except InputError as exc:
        return RunResult(run_id, "-", "not predicted", f"cluster file unreadable: {exc}")
    try:
        log = read_nccl_tests(log_path)
    except InputError as exc:
        return RunResult(run_id, klass, "not predicted", f"log unreadable: {exc}")
    result = RunResult(run_id, klass, "not predicted", collective=log.collective, ranks=cluster.world_size,
                       undescribed=undescribed(cluster_file))
    try:
        report = validate_log(log, CostModel.from_cluster(cluster), cluster.world_size)
    except InputError as exc:
        result.reason = f"inconsistent: {exc}"
        return result
    result.status, result.rows = "predicted", report.rows
    domain = (cluster.gpu_fabric.nvlink_domain if cluster.gpu_fabric else None) or cluster.devices_per_node
    result.regime = "network" if cluster.world_size > domain else "in-node"
    if not result.large:
        result.reason = "no rows of 1 MiB or more (latency-only run)"
    return result


def leave_one_run_out(results: list[RunResult]) -> None:
    """Scale each run by the median measured/predicted ratio of the other runs of its calibration group
    (rows >= 1 MiB): same class, collective and regime, so an NVLink efficiency never prices a NIC."""
    by_class: dict[tuple[str, str, str], list[RunResult]] = {}
    for r in results:
        if r.status == "predicted" and r.large:
            by_class.setdefault(r.calibration_group, []).append(r)
    for runs in by_class.values():
        for run in runs:
            others = [ratio for other in runs if other is not run and (ratio := other.median_ratio()) is not None]
            if not others:
                continue
            run.loro_factor = statistics.median(others)
            for row in run.rows:
                row["loro_predicted_s"] = row["predicted_s"] * run.loro_factor
                row["loro_rel_error"] = row["loro_predicted_s"] / row["measured_s"] - 1.0


#: errors.csv's columns: the run's identity, then each row's fields as the NCCL model and the calibration left them
ERRORS_COLUMNS = ("run", "hardware_class", "collective", "ranks", "line", "bytes", "measured_s", "predicted_s",
                  "rel_error", "algorithm", "protocol", "library", "version", "channels", "threads", "chunk_bytes",
                  "launch_s", "latency_s", "fill_s", "bandwidth_s", "mechanism", "stated_version",
                  "loro_predicted_s", "loro_rel_error", "baseline_s", "baseline_rel_error")


@dataclass(frozen=True)
class PublishedValidation:
    """Every run of one corpus folder, predicted or not, and the counts the report is judged by.

    ``runs`` keep their rows for the per-run figures (:func:`experiments.published_plots.plot_run`);
    :meth:`table` is ``errors.csv``; the counts are the summary lines' numbers."""

    folder: Path
    runs: tuple[RunResult, ...]

    @property
    def predicted(self) -> list[RunResult]:
        return [r for r in self.runs if r.status == "predicted" and r.rows]

    @property
    def drawn(self) -> list[RunResult]:
        """The runs with rows to draw (one figure each)."""
        return [r for r in self.runs if r.rows]

    def targets(self) -> tuple[int, int, int]:
        """(runs meeting the per-run targets, described runs judged, runs too short to judge)."""
        return target_counts(list(self.runs))

    def baseline(self) -> tuple[int, int]:
        """(runs where the NCCL model is closer than the naive alpha-beta baseline, runs compared)."""
        return baseline_counts(list(self.runs))

    def table(self) -> pd.DataFrame:
        """One line per predicted row (``errors.csv``), with the predicted time's parts."""
        import pandas as pd

        records = [{"run": r.run_id, "hardware_class": r.hardware_class, "collective": r.collective,
                    "ranks": r.ranks, **{k: row.get(k) for k in ERRORS_COLUMNS[4:]}} for r in self.runs
                   for row in r.rows]
        return pd.DataFrame.from_records(records, columns=list(ERRORS_COLUMNS))

    def summary(self) -> dict[str, Any]:
        """The summary lines' numbers: runs, predicted, targets met of judged, baseline closer of compared."""
        met, judged, short = self.targets()
        closer, compared = self.baseline()
        return {"runs": len(self.runs), "predicted": len(self.predicted), "targets_met": met, "judged": judged,
                "too_short": short, "model_closer_than_baseline": closer, "compared_with_baseline": compared,
                "target_median": TARGET_MEDIAN, "target_worst": TARGET_WORST, "min_rows": MIN_ROWS}


def corpus_folder(folder: str | Path | None) -> Path:
    """The folder a caller named, or (None or empty) the corpus shipped beside the package."""
    return Path(folder) if folder else data_path("nccl-tests")


def validate_published(folder: str | Path | None = None, *, progress: bool = True,
                       before_work: Callable[[], object] | None = None) -> PublishedValidation:
    """Predict every ``*.txt`` run of ``folder`` (default: the shipped corpus) from its cluster file alone, then
    calibrate each on the other runs of its group; nothing is written (see
    :func:`experiments.published_report.write_files`). ``before_work`` is called once the folder is checked and
    before any run is predicted (a caller makes its output folder there: refused early, not after the corpus)."""
    path = corpus_folder(folder)
    if not path.is_dir():
        raise InputError("published", str(path), "a folder of nccl-tests logs with a clusters/ folder beside them")
    logs = sorted(path.glob("*.txt"))
    if not logs:
        raise InputError("published", str(path), "a folder holding nccl-tests logs (*.txt)")
    if before_work is not None:
        before_work()
    results = [predict_run(log, path / "clusters" / f"{log.stem}.yaml") for log in _bar(logs, progress)]
    leave_one_run_out(results)
    return PublishedValidation(path, tuple(results))


def _bar(items: list[Path], progress: bool) -> Iterable[Path]:
    if not progress:
        return items
    from tqdm import tqdm

    return tqdm(items, desc="published runs", unit="run", leave=False, disable=None)


def baseline_counts(results: list[RunResult]) -> tuple[int, int]:
    """(runs whose median |error| over rows >= 1 MiB is below the datasheet alpha-beta formula's, runs with such
    rows)."""
    compared = [r for r in results if r.status == "predicted" and r.errors() and r.errors("baseline_rel_error")]
    closer = sum(1 for r in compared
                 if statistics.median(r.errors()) < statistics.median(r.errors("baseline_rel_error")))
    return closer, len(compared)


def target_counts(results: list[RunResult]) -> tuple[int, int, int]:
    """(runs meeting the per-run targets, described runs with five rows >= 1 MiB, runs too short to judge)."""
    predicted = [r for r in results if r.status == "predicted" and r.large]
    judged = [r for r in predicted if r.enough_rows and not r.undescribed]
    return sum(1 for r in judged if r.meets_targets), len(judged), sum(1 for r in predicted if not r.enough_rows)
