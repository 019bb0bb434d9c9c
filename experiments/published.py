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
described hardware) rather than dropped. Output, written atomically: ``errors.csv`` (one line per row, with
the predicted time's parts), ``errors.md`` and ``figures/<id>.png`` (busbw against size, measured and
predicted, the algorithm NCCL would choose marked, and the relative error beneath).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.collective_libraries.logs import read_nccl_tests
from flexcomm.costmodel.collective_libraries.validation import validate_log
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.documents import read_document
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.published_plots import plot_run
from flexcomm.experiments.published_summary import summaries_section
from flexcomm.experiments.published_targets import MIN_ROWS, SUMMARY_MIN_BYTES, TARGET_MEDIAN, TARGET_WORST

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


def validate_published(folder: Path, out: Path, progress: bool = True, figures: bool = True) -> list[RunResult]:
    """Predict every ``*.txt`` run of ``folder``; write errors.csv, errors.md and a figure per run to ``out``."""
    if not folder.is_dir():
        raise InputError("published", str(folder), "a folder of nccl-tests logs with a clusters/ folder beside them")
    logs = sorted(folder.glob("*.txt"))
    if not logs:
        raise InputError("published", str(folder), "a folder holding nccl-tests logs (*.txt)")
    out.mkdir(parents=True, exist_ok=True)
    results = [predict_run(path, folder / "clusters" / f"{path.stem}.yaml") for path in _bar(logs, progress)]
    leave_one_run_out(results)
    _write_csv(results, out / "errors.csv")
    if figures:

        for r in results:
            if r.rows:
                plot_run(r, out / "figures" / f"{r.run_id}.png")
    write_text_atomic(out / "errors.md", errors_markdown(results, folder))
    return results


def _bar(items: list[Path], progress: bool) -> Iterable[Path]:
    if not progress:
        return items
    from tqdm import tqdm

    return tqdm(items, desc="published runs", unit="run", leave=False, disable=None)


def _write_csv(results: list[RunResult], path: Path) -> None:
    import pandas as pd


    columns = ["run", "hardware_class", "collective", "ranks", "line", "bytes", "measured_s", "predicted_s",
               "rel_error", "algorithm", "protocol", "library", "version", "channels", "threads", "chunk_bytes",
               "launch_s", "latency_s", "fill_s", "bandwidth_s", "mechanism", "stated_version", "loro_predicted_s",
               "loro_rel_error", "baseline_s", "baseline_rel_error"]
    records = [{"run": r.run_id, "hardware_class": r.hardware_class, "collective": r.collective, "ranks": r.ranks,
                **{k: row.get(k) for k in columns[4:]}} for r in results for row in r.rows]
    write_csv_atomic(pd.DataFrame.from_records(records, columns=columns), path)


def _pct(values: list[float], how: str) -> str:
    if not values:
        return "-"
    return f"{(statistics.median(values) if how == 'median' else max(values)):.1%}"


def _large_algorithms(r: RunResult) -> str:
    seen: list[str] = []
    for row in r.large:
        label = row["algorithm"] if row["protocol"] in (None, "p2p") else f"{row['algorithm']}/{row['protocol']}"
        if label not in seen:
            seen.append(label)
    return ", ".join(seen) or "-"


def _baseline_cell(r: RunResult) -> str:
    model, baseline = r.errors(), r.errors("baseline_rel_error")
    if not model or not baseline:
        return "-"
    text = _pct(baseline, "median")
    return f"**{text}**" if statistics.median(baseline) <= statistics.median(model) else text


def _regime_cell(r: RunResult, low: float, high: float) -> str:
    median, mechanism = r.regime_summary(low, high)
    return "-" if median is None else f"{median:.1%} ({mechanism})"


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


def errors_markdown(results: list[RunResult], folder: Path) -> str:
    """The report: one line per run with its three regimes, then per class, then what was not predicted."""
    predicted = [r for r in results if r.status == "predicted" and r.rows]
    try:
        shown = folder.resolve().relative_to(Path.cwd())
    except ValueError:
        shown = folder
    met, judged, short = target_counts(results)
    closer, compared = baseline_counts(results)
    lines = [
        "# Published nccl-tests runs predicted from their hardware description",
        "",
        f"Runs: {len(results)} in `{shown}`; predicted: {len(predicted)}. Per-run targets (rows >= 1 MiB): median "
        f"|error| <= {TARGET_MEDIAN:.0%} and worst <= {TARGET_WORST:.0%}, judged on runs with at least {MIN_ROWS} "
        f"such rows whose hardware is described: **met by {met} of {judged}** (goal {TARGET_SHARE:.0%}); "
        f"{short} runs have fewer than {MIN_ROWS} rows >= 1 MiB and are shown, not judged. Each regime cell is "
        "the median |error| of its rows and, in brackets, the mechanism that dominates most of their predicted "
        "times. \"loro\" scales by the median measured/predicted ratio of the other runs of the same hardware "
        "class, collective and regime (a calibration kept apart from the run it predicts).",
        "",
        f"Naive baseline: the plain alpha-beta formula at the cluster's datasheet rates (each GPU's NVLink inside a "
        f"domain, its share of the node's NICs across domains, nccl-tests' bus bytes, a ring's steps at the link's "
        f"latency). **The NCCL model is closer than it on {closer} of {compared} runs** (median |error| over rows "
        f">= 1 MiB); where it is not, the row's `alpha-beta` cell is in bold.",
        "",
        "| run | class | collective | ranks | library | NCCL would run (>= 1 MiB) | rows >= 1 MiB | median | worst "
        "| alpha-beta median | target | < 1 MiB | 1-256 MiB | >= 256 MiB | loro median |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in predicted:
        met_text = {True: "met", False: "missed", None: f"too few rows ({len(r.large)})"}[r.meets_targets]
        if r.undescribed and r.meets_targets is not None:
            met_text += " (undescribed)"
        library = r.rows[0].get("library") or "-"
        version = r.rows[0].get("version")
        stated = r.rows[0].get("stated_version")
        if stated and version and stated != version:
            version = f"{version} (its log states {stated})"
        lines.append(
            f"| {r.run_id} | {r.hardware_class} | {r.collective} | {r.ranks} | "
            f"{library}{f' {version}' if version else ''} | {_large_algorithms(r)} | {len(r.large)} | "
            f"{_pct(r.errors(), 'median')} | {_pct(r.errors(), 'worst')} | {_baseline_cell(r)} | {met_text} | "
            + " | ".join(_regime_cell(r, low, high) for _, low, high in REGIMES)
            + f" | {_pct(r.errors('loro_rel_error'), 'median')} |")
    undescribed_runs = [r for r in predicted if r.undescribed]
    if undescribed_runs:
        lines += ["", "Runs whose header leaves out what decides the result (predicted, not judged): "
                  + "; ".join(f"{r.run_id}: {r.undescribed}" for r in undescribed_runs) + "."]
    lines += ["", "## Per hardware class, collective and regime", "",
              f"Goals: 1-256 MiB median <= {REGIME_GOALS['1-256 MiB']:.0%} for every class; {SMALL_BAND[0]} median "
              f"<= {SMALL_BAND[3]:.0%}. Medians are over all rows of the class's runs in that size range.", "",
              "| class | collective | placement | runs | targets met | < 1 MiB | 64 KiB-1 MiB | 1-256 MiB | "
              ">= 256 MiB | loro median of run medians |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    classes: dict[tuple[str, str, str], list[RunResult]] = {}
    for r in predicted:
        classes.setdefault(r.calibration_group, []).append(r)
    for (name, collective, regime), runs in sorted(classes.items()):
        cells = []
        for _, low, high in (*REGIMES[:1], SMALL_BAND[:3], *REGIMES[1:]):
            rows = [row for run in runs for row in run.in_regime(low, high)]
            if not rows:
                cells.append("-")
                continue
            cells.append(f"{statistics.median(abs(row['rel_error']) for row in rows):.1%} "
                         f"({most_common([row.get('mechanism') for row in rows])})")
        loro = [statistics.median(e) for r in runs if (e := r.errors("loro_rel_error"))]
        judged_runs = [r for r in runs if r.meets_targets is not None]
        met_here = sum(1 for r in judged_runs if r.meets_targets)
        lines.append(f"| {name} | {collective} | {regime} | {len(runs)} | {met_here}/{len(judged_runs)} | "
                     + " | ".join(cells) + f" | {f'{statistics.median(loro):.1%}' if loro else '-'} |")
    others = [r for r in results if r not in predicted]
    if others:
        lines += ["", "## Not predicted", "", "| run | why |", "|---|---|"]
        lines += [f"| {r.run_id} | {r.reason or 'no rows'} |" for r in others]

    lines += summaries_section(folder)
    return "\n".join(lines) + "\n"
