"""``flexcomm validate --published [DIR]``: predict every published nccl-tests run from its hardware alone.

Each run ``DIR/<id>.txt`` has its hardware in ``DIR/clusters/<id>.yaml`` (usually ``extends:`` a shipped
cluster, whose name is the run's *hardware class*). Every row is priced by the NCCL-grade model
(:mod:`costmodel.collective_libraries.model`) with the log's own NCCL_ALGO / NCCL_PROTO; nothing is fitted. Then, as a
second and separate figure, a leave-one-run-out calibration inside each hardware class: the run's
predictions are scaled by the median measured/predicted ratio of the *other* runs of its class with the
same collective and regime (inside one NVLink domain, or across NICs; rows >= 1 MiB), so a class-wide
miss (the same NIC efficiency everywhere) can be told from a run-specific one.

A run that cannot be predicted is listed with the reason (unreadable log, RCCL, ranks disagreeing with
the described hardware) rather than dropped. Output, written atomically: ``errors.csv`` (one line per
row), ``errors.md`` (per run, per class, targets met or not) and ``figures/<id>.png`` (busbw against
size, measured and predicted, the algorithm NCCL would choose marked).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexcomm.costmodel.errors import InputError

SUMMARY_MIN_BYTES = 1 << 20
TARGET_MEDIAN = 0.05
TARGET_WORST = 0.15


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

    def errors(self, key: str = "rel_err", min_bytes: int = SUMMARY_MIN_BYTES) -> list[float]:
        return [abs(r[key]) for r in self.rows if r["bytes"] >= min_bytes and r.get(key) is not None]

    def median_ratio(self) -> float | None:
        ratios = [r["measured_s"] / r["predicted_s"] for r in self.large if r["predicted_s"] > 0]
        return statistics.median(ratios) if ratios else None

    @property
    def meets_targets(self) -> bool | None:
        errs = self.errors()
        if not errs:
            return None
        return statistics.median(errs) <= TARGET_MEDIAN and max(errs) <= TARGET_WORST


def hardware_class(cluster_file: Path) -> str:
    """The shipped cluster a run's file extends (its class), or the file's own name."""
    from flexcomm.costmodel.documents import read_document

    data = read_document(cluster_file, "cluster", "cluster file")
    base = data.get("extends") if isinstance(data, dict) else None
    return str(base).removesuffix(".yaml").lstrip("_") if base else cluster_file.stem


def predict_run(log_path: Path, cluster_file: Path) -> RunResult:
    """Every row of one published log, priced from its cluster file alone."""
    from flexcomm.costmodel.cluster import Cluster
    from flexcomm.costmodel.collective_libraries.logs import read_nccl_tests
    from flexcomm.costmodel.collective_libraries.validation import validate_log
    from flexcomm.costmodel.model import CostModel

    run_id = log_path.stem
    if not cluster_file.is_file():
        return RunResult(run_id, "-", "not predicted", f"no cluster file {cluster_file.name}")
    klass = hardware_class(cluster_file)
    try:
        log = read_nccl_tests(log_path)
    except InputError as exc:
        return RunResult(run_id, klass, "not predicted", f"log unreadable: {exc}")
    cluster = Cluster.from_file(cluster_file)
    result = RunResult(run_id, klass, "not predicted", collective=log.collective, ranks=cluster.world_size)
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
                row["loro_rel_err"] = row["loro_predicted_s"] / row["measured_s"] - 1.0


def validate_published(folder: Path, out: Path, progress: bool = True, figures: bool = True) -> list[RunResult]:
    """Predict every ``*.txt`` run of ``folder``; write errors.csv, errors.md and a figure per run to ``out``."""
    from flexcomm.costmodel.atomic import write_text_atomic

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
        from flexcomm.experiments.published_plots import plot_run

        for r in results:
            if r.rows:
                plot_run(r, out / "figures" / f"{r.run_id}.png")
    write_text_atomic(out / "errors.md", errors_markdown(results, folder))
    return results


def _bar(items: list[Path], progress: bool) -> Iterable[Path]:
    if not progress:
        return items
    from tqdm import tqdm

    return tqdm(items, desc="published runs", unit="run", leave=False)


def _write_csv(results: list[RunResult], path: Path) -> None:
    import pandas as pd

    from flexcomm.costmodel.atomic import write_csv_atomic

    columns = ["run", "hardware_class", "collective", "ranks", "line", "bytes", "measured_s", "predicted_s",
               "rel_err", "algorithm", "protocol", "loro_predicted_s", "loro_rel_err"]
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


def errors_markdown(results: list[RunResult], folder: Path) -> str:
    """The report: one line per run, then per class, then what was not predicted and why."""
    predicted = [r for r in results if r.status == "predicted" and r.large]
    try:
        shown = folder.resolve().relative_to(Path.cwd())
    except ValueError:
        shown = folder
    lines = [
        "# Published nccl-tests runs predicted from their hardware description",
        "",
        f"Runs: {len(results)} in `{shown}`; predicted with rows >= 1 MiB: {len(predicted)}. Targets per run "
        f"(rows >= 1 MiB): median |error| <= {TARGET_MEDIAN:.0%}, worst <= {TARGET_WORST:.0%}. "
        "\"from description\" uses nothing measured; \"leave-one-run-out\" scales by the median "
        "measured/predicted ratio of the other runs of the same hardware class, collective and regime. "
        "\"median >= 1 GiB\" is the bandwidth plateau alone, where NCCL's latency terms no longer matter.",
        "",
        "| run | class | collective | ranks | rows >= 1 MiB | partial | NCCL would run (>= 1 MiB) | median | worst "
        "| target | median >= 1 GiB | leave-one-run-out median | worst |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in predicted:
        met = {True: "met", False: "missed", None: "-"}[r.meets_targets]
        lines.append(f"| {r.run_id} | {r.hardware_class} | {r.collective} | {r.ranks} | {len(r.large)} | "
                     f"{'yes' if r.partial else 'no'} | {_large_algorithms(r)} | {_pct(r.errors(), 'median')} | "
                     f"{_pct(r.errors(), 'worst')} | {met} | {_pct(r.errors(min_bytes=1 << 30), 'median')} | "
                     f"{_pct(r.errors('loro_rel_err'), 'median')} | "
                     f"{_pct(r.errors('loro_rel_err'), 'worst')} |")
    lines += ["", "## Per hardware class, collective and regime", "",
              "| class | collective | regime | runs | targets met | median of run medians "
              "| leave-one-run-out median of run medians |",
              "|---|---|---|---|---|---|---|"]
    classes: dict[tuple[str, str, str], list[RunResult]] = {}
    for r in predicted:
        classes.setdefault(r.calibration_group, []).append(r)
    for (name, collective, regime), runs in sorted(classes.items()):
        medians = [statistics.median(r.errors()) for r in runs]
        loro = [statistics.median(e) for r in runs if (e := r.errors("loro_rel_err"))]
        met = sum(1 for r in runs if r.meets_targets)
        lines.append(f"| {name} | {collective} | {regime} | {len(runs)} | {met}/{len(runs)} | "
                     f"{statistics.median(medians):.1%} | "
                     f"{f'{statistics.median(loro):.1%}' if loro else '- (one run)'} |")
    others = [r for r in results if r not in predicted]
    if others:
        lines += ["", "## Not summarised", "", "| run | why |", "|---|---|"]
        lines += [f"| {r.run_id} | {r.reason or 'no rows of 1 MiB or more'} |" for r in others]
    return "\n".join(lines) + "\n"
