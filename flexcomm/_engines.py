"""``flexcomm.plan``, ``place``, ``scenario``, ``recovery``, ``validate_nccl_tests``, ``validate_published``.

``flexcomm.plan("gpt", ...)`` calls the transformer planner itself (no argv, no printed text, no file read back:
its keywords are the engine function's). The others still run their CLI command in-process
(:func:`flexcomm._commands.run_command`), so a keyword is the flag of the same name (``batch_size=64`` is
``--batch-size 64``, units as strings or numbers, ``True`` for a switch, lists for comma lists) with the same
defaults and the same one-line :class:`~flexcomm.InputError`. Each returns a :class:`~flexcomm.CommandResult`:
``frame`` (the main table), ``tables``, ``figures`` (paths of the PNGs drawn), ``summaries`` (JSON written) and
``report`` (what the command prints). ``flexcomm <command> --help`` lists every keyword.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from flexcomm._commands import CommandResult, run_command
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.commands.plan_gpt import printed
from flexcomm.experiments.published_plots import plot_run
from flexcomm.planner.llm.transformer_plan import plan_transformer
from flexcomm.planner.llm.transformer_report import write_files

if TYPE_CHECKING:
    from flexcomm.costmodel.cluster import Cluster

__all__ = ["place", "plan", "recovery", "scenario", "validate_nccl_tests", "validate_published"]


def plan(model: str | None = None, cluster: str | Path | Cluster | None = None, **options: Any) -> CommandResult:
    """Parallel plans of ``model`` on ``cluster``, ranked (``flexcomm plan``); ``frame``: every plan priced
    (``plans.csv``), ``summaries["best_plan"]``, figure ``plans``.

    ``model="gpt"`` plans a transformer by calling the planner itself
    (:func:`flexcomm.planner.llm.transformer_plan.plan_transformer`: no argv, no printed text, no file read back);
    its keywords are that function's (``batch_size``, ``layers``, ``hidden``, ``heads``, ``seq_len``, ``vocab``,
    ``precision``, ``tp``, ``pp``, ...), ``cluster`` may be a :class:`~flexcomm.Cluster`, and files are written
    only when ``out`` is given (``top`` plans in its table and figure). Other models run the command in-process.
    """
    if model == "gpt" and "job" not in options:
        return _plan_transformer(cluster, **options)
    return run_command("plan", main_table="plans", model=model, cluster=cluster, **options)


#: ``flexcomm plan``'s default cluster, which the transformer planner's Python call takes too.
_PLAN_CLUSTER = "4x8-a100-ib"


def _plan_transformer(cluster: str | Path | Cluster | None, out: str | Path | None = None, top: int = 10,
                      no_progress: bool = False, **options: Any) -> CommandResult:
    """``flexcomm.plan("gpt", ...)``: the engine's result as a :class:`CommandResult` (``no_progress`` is accepted
    for the command's sake: the transformer planner draws no progress bar)."""
    known = inspect.signature(plan_transformer).parameters
    for keyword, value in options.items():
        if keyword not in known or keyword == "cluster":
            expected = ", ".join(sorted([*(k for k in known if k != "cluster"), "out", "top", "no_progress"]))
            raise InputError(keyword, value, f"a keyword of flexcomm.plan('gpt', ...): {expected}")
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InputError("top", top, "an integer >= 1")
    result = plan_transformer(_PLAN_CLUSTER if cluster is None else cluster, **options)
    written = write_files(result, Path(out), top) if out is not None else []
    frame = result.table()
    figures = {p.stem: p for p in written if p.suffix == ".png"}
    return CommandResult(command="plan", out=None if out is None else Path(out), frame=frame,
                         tables={"plans": frame}, figures=figures, summaries={"best_plan": result.summary()},
                         report=printed(result, top, written))


def place(model: str | None = None, cluster: str | Path | None = None, **options: Any) -> CommandResult:
    """Device placement of an operator graph by every placer (``flexcomm place``); ``frame``: the placers
    compared (``comparison.csv``), ``tables["placement"]`` the chosen one, figures ``search_curves``,
    ``timeline``."""
    return run_command("place", main_table="comparison", model=model, cluster=cluster, **options)


def scenario(file: str | Path, out: str | Path = "results/scenario", **options: Any) -> CommandResult:
    """Several jobs sharing one cluster, together and each alone (``flexcomm simulate --scenario FILE``);
    ``frame``: per job, slowdown from sharing (``jobs.csv``), figure ``link_utilization``."""
    return run_command("simulate", main_table="jobs", name="scenario", scenario=file, out=out, **options)


def recovery(workload: str, cluster: str | Path, policies: str | list[str] = "all",
             out: str | Path = "results/recovery", **options: Any) -> CommandResult:
    """Goodput of a transformer job over days of node failures, per recovery policy (``flexcomm simulate
    --recovery POLICIES``); ``frame``: one row per policy (``recovery.csv``), figure ``goodput``. ``mtbf``
    (one node's mean time between failures) defaults to a large fleet's measured rate (Llama 3's)."""
    return run_command("simulate", main_table="recovery", name="recovery", workload=workload, cluster=cluster,
                       recovery=policies, out=out, **options)


def validate_published(folder: str | Path | None = None, out: str | Path = "results/published",
                       **options: Any) -> CommandResult:
    """Every published nccl-tests run of ``folder`` (default: the corpus shipped with flexcomm) predicted
    from its hardware description (``flexcomm validate --published``); ``frame``: one line per row
    (``errors.csv``), a figure per run keyed by its id."""
    return run_command("validate", main_table="errors", name="validate_published",
                       published="" if folder is None else folder, out=out, **options)


def validate_nccl_tests(log: str | Path, cluster: str | Path, out: str | Path | None = None,
                        **options: Any) -> CommandResult:
    """Your pasted nccl-tests output predicted row by row on ``cluster`` (``flexcomm validate --nccl-tests LOG
    --cluster C``); ``frame``: measured and predicted time and error per row, ``summaries["printed"]`` the
    summary. With ``out``, draws the run's figure there (busbw and predicted / measured against size)."""
    result = run_command("validate", name="validate_nccl_tests", nccl_tests=log, cluster=cluster, json=True, **options)
    if out is None:
        return result

    printed = result.summaries["printed"]
    run = SimpleNamespace(run_id=Path(log).stem, collective=printed["collective"], ranks=printed["ranks"],
                          hardware_class=str(cluster), rows=printed["rows"])
    figure = plot_run(run, Path(out) / f"{Path(log).stem}.png")
    return CommandResult(command=result.command, out=Path(out), frame=result.frame, tables=result.tables,
                         figures={figure.stem: figure}, summaries=result.summaries, report=result.report,
                         exit_status=result.exit_status)
