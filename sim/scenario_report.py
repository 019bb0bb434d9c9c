"""What ``flexcomm simulate --scenario`` prints and writes, made from a :class:`~sim.scenario.ScenarioResult`,
so the command and ``flexcomm.scenario`` say and write the same (the figure is drawn by :mod:`sim.scenario_plots`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.sim.scenario import ScenarioResult
from flexcomm.sim.scenario_plots import plot_utilization
from flexcomm.sim.trace import _Events, trace_json


def report_lines(result: ScenarioResult) -> list[str]:
    """The scenario's settings and when it ended, then one row per job: shared, alone, slowdown."""
    scenario = result.scenario
    lines = [f"{scenario.name}: {len(scenario.jobs)} jobs on {scenario.cluster.name}, {scenario.sharing} sharing, "
             f"{scenario.coupling} coupling; all done at {result.end_s * 1e3:.4g} ms simulated",
             f"{'job':20s} {'GPUs':>5s} {'iterations':>10s} {'shared (ms)':>12s} {'alone (ms)':>11s} {'slowdown':>9s}"]
    for r in result.summary().itertuples():
        lines.append(f"{r.job:20s} {r.gpus:5d} {r.iterations:10d} {r.mean_iteration_s * 1e3:12.4g} "
                     f"{r.alone_iteration_s * 1e3:11.4g} {r.slowdown:9.3f}")
    return lines


def json_report(result: ScenarioResult) -> dict[str, Any]:
    """What ``--json`` prints: the scenario, when it ended and every job's summary."""
    return {"scenario": result.scenario.name, "end_s": result.end_s, "jobs": result.summary().to_dict("records")}


def chrome_trace(result: ScenarioResult) -> dict[str, Any]:
    """One process per job (``pid`` = job index): iterations on thread 0, compute and collectives below."""
    events = _Events()
    index = {job.name: k for k, job in enumerate(result.scenario.jobs)}
    for job in result.scenario.jobs:
        pid = index[job.name]
        events.meta("process_name", pid, 0, {"name": f"job {job.name} ({len(job.ranks)} GPUs)"})
        for tid, name in ((0, "iterations"), (1, "compute"), (2, "communication")):
            events.meta("thread_name", pid, tid, {"name": name})
    for r in result.iterations.itertuples():
        events.span(f"iteration {r.iteration}", index[r.job], 0, r.start_s, r.end_s, {"seconds": r.seconds})
    for r in result.spans.itertuples():
        events.span(r.kind, index[r.job], 1 if r.kind == "compute" else 2, r.start_s, r.end_s)
    return {"traceEvents": events.items, "displayTimeUnit": "ms"}


def write_scenario(result: ScenarioResult, out: str | Path) -> list[Path]:
    """``iterations.csv``, ``alone.csv``, ``jobs.csv``, ``utilization.csv``, ``summary.json``,
    ``link_utilization.png`` and ``trace.json`` under ``out`` (each written atomically)."""
    folder = Path(out)
    return [write_csv_atomic(result.iterations, folder / "iterations.csv"),
            write_csv_atomic(result.alone, folder / "alone.csv"),
            write_csv_atomic(result.summary(), folder / "jobs.csv"),
            write_csv_atomic(result.utilization_table(), folder / "utilization.csv"),
            write_text_atomic(folder / "summary.json", json.dumps(result.info(), indent=2, default=float) + "\n"),
            plot_utilization(result, folder / "link_utilization.png"),
            write_text_atomic(folder / "trace.json", trace_json(chrome_trace(result)))]


def written_line(out: str | Path, written: list[Path]) -> str:
    """``wrote OUT/: a.csv, b.png, ...``, the files in name order."""
    folder = Path(out)
    return f"wrote {folder}/: " + ", ".join(sorted(str(p.relative_to(folder)) for p in written))
