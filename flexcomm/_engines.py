"""``flexcomm.plan``, ``place``, ``scenario``, ``recovery``, ``validate_nccl_tests``, ``validate_published``.

Why these are thin: each is its CLI command run in-process (:func:`flexcomm._commands.run_command`), so a
keyword is the flag of the same name (``batch_size=64`` is ``--batch-size 64``, units as strings or numbers,
``True`` for a switch, lists for comma lists) with the same defaults and the same one-line
:class:`~flexcomm.InputError`. Each returns a :class:`~flexcomm.CommandResult`: ``frame`` (the main table),
``tables``, ``figures`` (paths of the PNGs drawn), ``summaries`` (JSON written) and ``report`` (what the
command prints). ``flexcomm <command> --help`` lists every keyword.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from flexcomm._commands import CommandResult, run_command

__all__ = ["place", "plan", "recovery", "scenario", "validate_nccl_tests", "validate_published"]


def plan(model: str | None = None, cluster: str | Path | None = None, **options: Any) -> CommandResult:
    """Parallel plans of ``model`` on ``cluster``, ranked (``flexcomm plan``); ``frame``: every plan priced
    (``plans.csv``), ``summaries["best_plan"]``, figure ``plans``. ``model="gpt"`` plans a transformer."""
    return run_command("plan", main_table="plans", model=model, cluster=cluster, **options)


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
    from flexcomm.experiments.published_plots import plot_run

    printed = result.summaries["printed"]
    run = SimpleNamespace(run_id=Path(log).stem, collective=printed["collective"], ranks=printed["ranks"],
                          hardware_class=str(cluster), rows=printed["rows"])
    figure = plot_run(run, Path(out) / f"{Path(log).stem}.png")
    return CommandResult(command=result.command, out=Path(out), frame=result.frame, tables=result.tables,
                         figures={figure.stem: figure}, summaries=result.summaries, report=result.report,
                         exit_status=result.exit_status)
