"""``flexcomm validate --published --transfer``: calibrate on one run of a system, predict its other runs.

A *system* is one set of machines that several published runs measured (the ``# system:`` line of the runs'
cluster files: AWS p5 over EFA at 2, 8 and 32 nodes, OCI's GB300 racks, ...). For every ordered pair of runs
of a system, the fabric parameters are fitted on the first alone (:mod:`costmodel.collective_libraries.fabric_fit`)
and the second is predicted with them: another collective, another node count, another NCCL release, another
algorithm. Nothing of the predicted run is seen by the fit.

Beside each prediction stands what a user would do by hand: take the calibration run's measured bus bandwidth at
the same message size (interpolated in log size between its rows, its first or last row's beyond them) and apply
it unchanged to the predicted run (its collective's and rank count's nccl-tests bus factor). The report says,
pair by pair and per system, where the calibrated model beats that baseline and where it does not, and how the
description alone (no calibration) did on the same rows.

Output (atomically): ``transfer.csv`` (one line per pair), ``transfer.md`` (per system, then per pair),
``transfer.png`` (every pair's median error, model against baseline) and ``calibrations/<run>.yaml`` (each run's
own calibration file, as ``flexcomm calibrate --cluster`` writes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.cluster import Cluster, calibration_mismatch
from flexcomm.costmodel.collective_libraries.fabric_calibration import save_calibration
from flexcomm.costmodel.collective_libraries.fabric_fit import calibrate_fabric, described_values, price_logs, seconds
from flexcomm.costmodel.collective_libraries.logs import bus_factor, read_nccl_tests
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.published_plots import plot_transfer
from flexcomm.experiments.published_targets import MIN_ROWS, SUMMARY_MIN_BYTES, TARGET_MEDIAN, TARGET_WORST

#: Median |error| over a predicted run's rows below 1 MiB that a pair must also meet (where it has such rows).
TARGET_SMALL = 0.15
#: Share of pairs that should meet the targets.
TARGET_SHARE = 0.80
COLUMNS = ["system", "calibrated_on", "predicted_run", "change", "rows", "rows_small", "median_abs_error",
           "worst_abs_error", "small_median_abs_error", "baseline_median_abs_error", "baseline_worst_abs_error",
           "baseline_small_median_abs_error", "described_median_abs_error", "meets_target", "judged",
           "beats_baseline", "note"]


def system_of(cluster_file: Path) -> str:
    """The system a run's cluster file names (``# system: NAME: why``), or ''."""
    for line in cluster_file.read_text(encoding="utf-8").splitlines():
        if line.lower().startswith("# system:"):
            return line.split(":", 2)[1].strip()
    return ""


@dataclass
class SystemRun:
    """One run of a system: its cluster, log and the rows priced from its description (or why it is unusable)."""

    run_id: str
    cluster: Any = None
    log: Any = None
    rows: Any = None
    reason: str = ""

    @property
    def setting(self) -> dict[str, Any]:
        return {"collective": self.log.collective, "ranks": int(self.rows.ranks[0]),
                "version": self.log.nccl_version or self.cluster.gpu_fabric.nccl_version,
                "algorithm": self.log.env.get("NCCL_ALGO", "")}


def load_run(folder: Path, run_id: str) -> SystemRun:
    try:
        cluster = Cluster.from_file(folder / "clusters" / f"{run_id}.yaml")
        log = read_nccl_tests(str(folder / f"{run_id}.txt"))
        return SystemRun(run_id, cluster, log, price_logs(cluster, [log]))
    except InputError as exc:
        return SystemRun(run_id, reason=str(exc))


def baseline_seconds(calibration: SystemRun, predicted: SystemRun) -> np.ndarray:
    """The calibration run's measured bus bandwidth at each predicted size, applied to the predicted run."""
    c = calibration.rows
    bus = c.size / c.measured_s * bus_factor(calibration.log.collective, int(c.ranks[0]))
    order = np.argsort(c.size)
    at = np.interp(np.log2(predicted.rows.size), np.log2(c.size[order]), bus[order])
    return predicted.rows.size / (at / bus_factor(predicted.log.collective, int(predicted.rows.ranks[0])))


def _change(a: dict[str, Any], b: dict[str, Any]) -> str:
    changed = [name for name, key in (("collective", "collective"), ("nodes", "ranks"), ("NCCL release", "version"),
                                      ("NCCL_ALGO", "algorithm")) if a[key] != b[key]]
    return ", ".join(changed) or "a repeat"


def _errors(predicted_s: np.ndarray, rows: Any) -> tuple[float | None, float | None, float | None, int, int]:
    error = np.abs(predicted_s / rows.measured_s - 1.0)
    large, small = error[rows.size >= SUMMARY_MIN_BYTES], error[rows.size < SUMMARY_MIN_BYTES]
    return (float(np.median(large)) if len(large) else None, float(np.max(large)) if len(large) else None,
            float(np.median(small)) if len(small) else None, len(large), len(small))


def transfer_pair(system: str, calibrated: SystemRun, fitted: Any, predicted: SystemRun) -> dict[str, Any]:
    """One (calibration run, predicted run) pair as a row of ``transfer.csv``."""
    row: dict[str, Any] = {"system": system, "calibrated_on": calibrated.run_id, "predicted_run": predicted.run_id,
                           "change": _change(calibrated.setting, predicted.setting), "note": ""}
    mismatch = calibration_mismatch(fitted.made_for, predicted.cluster)
    if mismatch:
        return {**row, "note": f"not comparable: {mismatch}", "judged": False}
    values = fitted.values_for(predicted.rows.described_step_us)
    model = _errors(seconds(predicted.rows, values), predicted.rows)
    base = _errors(baseline_seconds(calibrated, predicted), predicted.rows)
    described = _errors(seconds(predicted.rows, described_values(predicted.cluster)), predicted.rows)
    median, worst, small, rows, rows_small = model
    judged = rows >= MIN_ROWS
    meets = judged and median <= TARGET_MEDIAN and worst <= TARGET_WORST and (small is None or small <= TARGET_SMALL)
    model_median = median if median is not None else small
    base_median = base[0] if base[0] is not None else base[2]
    return {**row, "rows": rows, "rows_small": rows_small, "median_abs_error": median, "worst_abs_error": worst,
            "small_median_abs_error": small, "baseline_median_abs_error": base[0], "baseline_worst_abs_error": base[1],
            "baseline_small_median_abs_error": base[2], "described_median_abs_error": described[0],
            "meets_target": bool(meets), "judged": judged,
            "beats_baseline": bool(model_median is not None and base_median is not None and model_median < base_median),
            "note": "" if judged else f"fewer than {MIN_ROWS} rows >= 1 MiB: shown, not judged"}


def validate_transfer(folder: Path, out: Path, progress: bool = True) -> pd.DataFrame:
    """Every ordered pair of runs inside each system of ``folder``; writes the report to ``out``."""
    if not (folder / "clusters").is_dir():
        raise InputError("published", str(folder), "a folder of nccl-tests logs with a clusters/ folder beside them")
    systems: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.txt")):
        cluster_file = folder / "clusters" / f"{path.stem}.yaml"
        name = system_of(cluster_file) if cluster_file.is_file() else ""
        if name:
            systems.setdefault(name, []).append(path.stem)
    if not systems:
        raise InputError("published", str(folder), "runs whose cluster files name their system (# system: NAME)")
    pairs: list[dict[str, Any]] = []
    unusable: list[tuple[str, str, str]] = []
    out.mkdir(parents=True, exist_ok=True)
    for system, run_ids in _bar(sorted(systems.items()), progress):
        runs = [load_run(folder, run_id) for run_id in run_ids]
        unusable += [(system, r.run_id, r.reason) for r in runs if r.reason]
        usable = [r for r in runs if not r.reason]
        for calibrated in usable:
            try:
                fit = calibrate_fabric(calibrated.cluster, [calibrated.log])
            except InputError as exc:
                unusable.append((system, calibrated.run_id, f"cannot calibrate: {exc}"))
                continue
            save_calibration(fit.calibration, out / "calibrations" / f"{calibrated.run_id}.yaml")
            pairs += [transfer_pair(system, calibrated, fit.calibration, predicted) for predicted in usable
                      if predicted is not calibrated]
    frame = pd.DataFrame.from_records(pairs, columns=COLUMNS)
    write_csv_atomic(frame, out / "transfer.csv")
    write_text_atomic(out / "transfer.md", "\n".join(report_lines(frame, unusable)) + "\n")

    plot_transfer(frame, out / "transfer.png")
    return frame


def _bar(items: list[Any], progress: bool) -> Any:
    if not progress:
        return items
    from tqdm import tqdm

    return tqdm(items, desc="systems", unit="system", leave=False, disable=None)


def _pct(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.1%}"


def system_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per system: pairs judged and meeting the targets, and on the pairs where the node count or the collective
    changes the median over pairs of the model's and the baseline's median |error|."""
    rows = []
    for system, pairs in frame.groupby("system", sort=True):
        judged = pairs[pairs["judged"] == True]  # noqa: E712 (a column of bools and NaN)
        moved = pairs[pairs["median_abs_error"].notna() & pairs["change"].str.contains("nodes|collective")]
        model = moved["median_abs_error"].median() if len(moved) else None
        base = moved["baseline_median_abs_error"].median() if len(moved) else None
        rows.append({"system": system, "pairs": len(pairs), "judged": len(judged),
                     "meeting_target": int(judged["meets_target"].sum()), "changed_pairs": len(moved),
                     "model_median_of_medians": model, "baseline_median_of_medians": base,
                     "beats_baseline": None if model is None else bool(model < base),
                     "described_median_of_medians": moved["described_median_abs_error"].median() if len(moved)
                     else None})
    return pd.DataFrame(rows)


def system_table(summary: pd.DataFrame) -> list[str]:
    """The per-system table (markdown), as ``transfer.md`` and the command print it."""
    lines = ["| system | pairs | judged | meeting target | changed pairs | model | baseline | model beats baseline | "
             "described |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summary.itertuples():
        verdict = "-" if s.beats_baseline is None else ("yes" if s.beats_baseline else "**no**")
        lines.append(f"| {s.system} | {s.pairs} | {s.judged} | {s.meeting_target} | {s.changed_pairs} | "
                     f"{_pct(s.model_median_of_medians)} | {_pct(s.baseline_median_of_medians)} | {verdict} | "
                     f"{_pct(s.described_median_of_medians)} |")
    return lines


def report_lines(frame: pd.DataFrame, unusable: list[tuple[str, str, str]] = ()) -> list[str]:
    summary = system_summary(frame)
    judged = frame[frame["judged"] == True]  # noqa: E712
    met = int(judged["meets_target"].sum())
    lines = [
        "# Calibrate on one run, predict the others of the same system",
        "",
        f"Each run's fabric parameters fitted on that run alone (`flexcomm calibrate --cluster`), then every other "
        f"run of its system predicted with them. Target per pair: rows >= 1 MiB median |error| <= "
        f"{TARGET_MEDIAN:.0%} and worst <= {TARGET_WORST:.0%}, rows < 1 MiB median <= {TARGET_SMALL:.0%}, judged on "
        f"predicted runs with at least {MIN_ROWS} rows >= 1 MiB. Baseline: the calibration run's measured bus "
        "bandwidth at the same size, applied unchanged. Described: the model with no calibration.",
        "",
        f"**{met} of {len(judged)} judged pairs meet the targets ({met / max(len(judged), 1):.0%}; goal "
        f"{TARGET_SHARE:.0%}).** The model beats the baseline's median error in {int(judged['beats_baseline'].sum())} "
        f"of {len(judged)} judged pairs.",
        "",
        "## Per system",
        "",
        "Model, baseline and described: medians of the pairs' median |error| over rows >= 1 MiB, on the pairs "
        "where the node count or the collective changes (judged or not: a run with fewer than "
        f"{MIN_ROWS} such rows is shown, not judged).",
        "",
        *system_table(summary),
    ]
    lines += ["", "## Every pair", "",
              "| system | calibrated on | predicted | change | rows >= 1 MiB | median | worst | < 1 MiB | baseline "
              "median | baseline worst | baseline < 1 MiB | described median | target | beats baseline |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in frame.itertuples():
        if not p.judged and str(p.note).startswith("not comparable"):
            lines.append(f"| {p.system} | {p.calibrated_on} | {p.predicted_run} | {p.change} | {p.note} |"
                         + " |" * 9)
            continue
        target = "met" if p.meets_target else ("missed" if p.judged else "not judged")
        lines.append(f"| {p.system} | {p.calibrated_on} | {p.predicted_run} | {p.change} | {p.rows} | "
                     f"{_pct(p.median_abs_error)} | {_pct(p.worst_abs_error)} | {_pct(p.small_median_abs_error)} | "
                     f"{_pct(p.baseline_median_abs_error)} | {_pct(p.baseline_worst_abs_error)} | "
                     f"{_pct(p.baseline_small_median_abs_error)} | {_pct(p.described_median_abs_error)} | {target} | "
                     f"{'yes' if p.beats_baseline else 'no'} |")
    if unusable:
        lines += ["", "## Runs left out", "", "| system | run | why |", "|---|---|---|"]
        lines += [f"| {system} | {run} | {why} |" for system, run, why in unusable]
    return lines


def headline(frame: pd.DataFrame) -> str:
    judged = frame[frame["judged"] == True]  # noqa: E712
    summary = system_summary(frame)
    beaten = summary[summary["beats_baseline"] == True]["system"].tolist()  # noqa: E712
    lost = summary[summary["beats_baseline"] == False]["system"].tolist()  # noqa: E712
    return (f"transfer: {int(judged['meets_target'].sum())} of {len(judged)} judged pairs meet the targets; the "
            f"model beats the bus-bandwidth baseline where nodes or the collective change on "
            f"{len(beaten)} of {len(beaten) + len(lost)} systems" + (f" (not on {', '.join(lost)})" if lost else ""))
