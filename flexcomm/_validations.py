"""``flexcomm.validate_published`` and ``flexcomm.validate_nccl_tests``: the NCCL model against measured runs.

Both call their engine directly (:func:`experiments.published.validate_published`,
:func:`costmodel.collective_libraries.log_check.check_nccl_tests`): no argv, no redirected stdout, no file read
back; the files are written from the result, as the command writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flexcomm._result import CommandResult, refuse_empty_values, refuse_unknown_keywords, switch
from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.collective_libraries.log_check import check_nccl_tests, report_lines
from flexcomm.experiments.commands.common import json_safe, output_folder
from flexcomm.experiments.published import validate_published as predict_published
from flexcomm.experiments.published_plots import plot_run
from flexcomm.experiments.published_report import summary_lines, write_files

__all__ = ["validate_nccl_tests", "validate_published"]


def validate_published(folder: str | Path | None = None, out: str | Path | None = "results/published",
                       **options: Any) -> CommandResult:
    """Every published nccl-tests run of ``folder`` (default: the corpus shipped with flexcomm) predicted
    from its hardware description (``flexcomm validate --published``); ``frame``: one line per row
    (``errors.csv``), a figure per run keyed by its id, ``summaries["summary"]`` the summary lines' numbers.
    ``no_progress=True`` hides the progress bar; ``out=None`` writes nothing."""
    refuse_empty_values({"out": out, **options})
    refuse_unknown_keywords("validate_published(...)", options, ("folder", "out", "no_progress"))
    no_progress = switch("no_progress", options.get("no_progress", False))
    result = predict_published(folder, progress=not no_progress,
                               before_work=None if out is None else lambda: output_folder(Path(out)))
    figures = write_files(result, Path(out)) if out is not None else {}
    frame = result.table()
    report = summary_lines(result)
    if out is not None:
        report.append(f"wrote {Path(out)}/: errors.md, errors.csv, figures/ ({len(figures)} runs)")
    return CommandResult(command="validate_published", out=None if out is None else Path(out), frame=frame,
                         tables={"errors": frame}, figures=figures, summaries={"summary": result.summary()},
                         report="\n".join(report) + "\n")


def validate_nccl_tests(log: str | Path, cluster: str | Path | Cluster, out: str | Path | None = None,
                        **options: Any) -> CommandResult:
    """Your pasted nccl-tests output predicted row by row on ``cluster`` (``flexcomm validate --nccl-tests LOG
    --cluster C``); ``frame``: measured and predicted time and error per row, ``summaries["printed"]`` what
    ``--json`` prints (rows and summary), ``report`` the command's table. Keywords ``profile``, ``collective``,
    ``algorithm`` are the command's flags. With ``out``, draws the run's figure there (busbw and predicted /
    measured against size)."""
    refuse_empty_values({"log": log, "cluster": cluster, "out": out, **options})
    refuse_unknown_keywords("validate_nccl_tests(...)", options,
                            ("log", "cluster", "out", "profile", "collective", "algorithm"))
    check = check_nccl_tests(log, cluster, **options)
    figures: dict[str, Path] = {}
    if out is not None:
        figure = plot_run(check, Path(out) / f"{check.run_id}.png")
        figures[figure.stem] = figure
    return CommandResult(command="validate_nccl_tests", out=None if out is None else Path(out), frame=check.table(),
                         figures=figures, summaries={"printed": json_safe(check.to_dict())},
                         report="\n".join(report_lines(check)) + "\n")
