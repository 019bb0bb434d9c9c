"""``flexcomm.scenario`` and ``flexcomm.recovery``: the simulator's multi-job and failure studies as Python calls.

Why direct calls: the engines (:func:`sim.scenario.simulate_scenario`, :mod:`planner.llm.recovery_run`) return
their tables and what the figures need; the command ``flexcomm simulate`` and these calls only turn them into
lines and files (:mod:`sim.scenario_report`, :mod:`planner.llm.recovery_report`), with no argv, no captured
stdout and no file read back. Keywords are the command's flags (``batch_size`` is ``--batch-size``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from flexcomm._result import CommandResult, refuse_empty_values, refuse_unknown_keywords, switch
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.commands.simulate_recovery import study_bar
from flexcomm.planner.llm import recovery_report
from flexcomm.planner.llm.recovery_run import FailureModel, compare_policies, mtbf_study
from flexcomm.sim import scenario_report
from flexcomm.sim.scenario import Scenario, simulate_scenario

__all__ = ["recovery", "scenario"]

_SCENARIO_KEYWORDS = ("sharing", "coupling", "no_progress")
_FAILURE_KEYWORDS = tuple(f.name for f in fields(FailureModel))
_RECOVERY_KEYWORDS = (*_FAILURE_KEYWORDS, "nodes", "batch_size", "mtbf_study", "no_progress")


def _check_keywords(call: str, options: Mapping[str, Any], known: tuple[str, ...]) -> None:
    """An unknown keyword, or a switch that is not True/False, is one error naming it."""
    refuse_unknown_keywords(f"{call}(...)", options, known)
    for keyword in ("no_progress", "mtbf_study"):
        if keyword in options:
            switch(keyword, options[keyword])


def scenario(file: str | Path | Mapping[str, Any] | Scenario, out: str | Path | None = "results/scenario",
             **options: Any) -> CommandResult:
    """Several jobs sharing one cluster, together and each alone (``flexcomm simulate --scenario FILE``);
    ``frame``: per job, slowdown from sharing (``jobs.csv``), figure ``link_utilization``. ``sharing`` and
    ``coupling`` replace the file's; with ``out=None`` nothing is written (and no figure drawn)."""
    refuse_empty_values({"file": file, "out": out, **options})
    _check_keywords("scenario", options, _SCENARIO_KEYWORDS)
    spec = dict(file) if isinstance(file, Mapping) else file
    result = simulate_scenario(spec, sharing=options.get("sharing"), coupling=options.get("coupling"))
    written = scenario_report.write_scenario(result, out) if out is not None else []
    lines = scenario_report.report_lines(result)
    if written:
        lines.append(scenario_report.written_line(out, written))
    frame = result.summary()
    tables = {"iterations": result.iterations, "alone": result.alone, "jobs": frame,
              "utilization": result.utilization_table()}
    return CommandResult(command="scenario", out=None if out is None else Path(out), frame=frame, tables=tables,
                         figures={p.stem: p for p in written if p.suffix == ".png"},
                         summaries={"summary": result.info(), "trace": scenario_report.chrome_trace(result)},
                         report="\n".join(lines) + "\n")


def recovery(workload: str, cluster: str | Path, policies: str | list[str] = "all",
             out: str | Path | None = "results/recovery", **options: Any) -> CommandResult:
    """Goodput of a transformer job over days of node failures, per recovery policy (``flexcomm simulate
    --recovery POLICIES``); ``frame``: one row per policy (``recovery.csv``), figure ``goodput``. ``mtbf``
    (one node's mean time between failures) defaults to a large fleet's measured rate (Llama 3's).
    ``mtbf_study=True`` runs the study instead (``recovery_study.csv``, figure ``recovery_study``; needs ``out``)."""
    refuse_empty_values({"cluster": cluster, "out": out, **options})
    _check_keywords("recovery", options, _RECOVERY_KEYWORDS)
    failures = FailureModel(**{k: v for k, v in options.items() if k in _FAILURE_KEYWORDS})
    job = {"nodes": options.get("nodes"), "batch_size": options.get("batch_size")}
    if options.get("mtbf_study"):
        return _study(workload, cluster, out, job, failures, shown=not options.get("no_progress", False))
    comparison = compare_policies(workload, cluster, policies, failures=failures, **job)
    lines = recovery_report.report_lines(comparison)
    written = recovery_report.write_files(comparison, out) if out is not None else []
    if written:
        lines.append(recovery_report.written_line(written))
    frame = comparison.table()
    tables = {"recovery": frame, "timeline": comparison.timeline(), "events": comparison.events()}
    return CommandResult(command="recovery", out=None if out is None else Path(out), frame=frame, tables=tables,
                         figures={p.stem: p for p in written if p.suffix == ".png"}, report="\n".join(lines) + "\n")


def _study(workload: str, cluster: str | Path, out: str | Path | None, job: dict[str, Any],
           failures: FailureModel, shown: bool) -> CommandResult:
    """``flexcomm.recovery(..., mtbf_study=True)``: the best policy per (node MTBF, job nodes) cell."""
    if out is None:
        raise InputError("out", None, "an output directory for the study, e.g. out='results/recovery'")
    with study_bar(shown) as progress:
        study = mtbf_study(workload, cluster, failures=failures, progress=progress, **job)
    written = recovery_report.write_study(study, out)
    lines = [*recovery_report.study_lines(study), recovery_report.written_line(written)]
    return CommandResult(command="recovery", out=Path(out), frame=study.table(),
                         tables={"recovery_study": study.table()}, figures={p.stem: p for p in written
                                                                             if p.suffix == ".png"},
                         report="\n".join(lines) + "\n")
