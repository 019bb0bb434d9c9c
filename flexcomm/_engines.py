"""``flexcomm.plan`` and ``flexcomm.place``: the planners and the placer called directly.

``flexcomm.plan("gpt", ...)``, ``flexcomm.plan("resnet50", ...)`` (any traced model) and ``flexcomm.place(...)``
call their engine functions (no argv, no printed text, no file read back): their keywords are the engine's, named
as the command's flags (``batch_size=64`` is ``--batch-size 64``), with the same defaults and the same one-line
:class:`~flexcomm.InputError`; so does a current LLM's preset or config.json (the layout search), and a job file
(``job=``) gives its fields as keywords. Each returns a :class:`~flexcomm.CommandResult`: ``frame``
(the main table), ``tables``, ``figures`` (paths of the PNGs drawn), ``summaries`` and ``report`` (what the
command prints).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm._result import CommandResult, refuse_empty_values, refuse_unknown_keywords, switch
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.job import load_job
from flexcomm.experiments.commands.common import output_folder
from flexcomm.experiments.commands.job_options import plan_job_fields
from flexcomm.experiments.commands.place import search_bars
from flexcomm.experiments.commands.plan import pricing_progress
from flexcomm.experiments.commands.plan import printed as graph_printed
from flexcomm.experiments.commands.plan_gpt import printed
from flexcomm.experiments.commands.plan_layouts import is_layout_model
from flexcomm.experiments.commands.plan_layouts import report_lines as layout_report_lines
from flexcomm.experiments.commands.plan_layouts import write_files as write_layout_files
from flexcomm.placement.run import place_graph
from flexcomm.planner.graph_plan import NoPlanFits, plan_graph
from flexcomm.planner.llm.layout_plan import plan_layout_model
from flexcomm.planner.llm.transformer_plan import plan_transformer
from flexcomm.planner.llm.transformer_report import write_files
from flexcomm.planner.plan_options import check_top

if TYPE_CHECKING:
    from flexcomm.costmodel.cluster import Cluster

__all__ = ["place", "plan"]


def plan(model: str | None = None, cluster: str | Path | Cluster | None = None, **options: Any) -> CommandResult:
    """Parallel plans of ``model`` on ``cluster``, ranked (``flexcomm plan``); ``frame``: every plan priced
    (``plans.csv``), ``summaries["best_plan"]``, figure ``plans``.

    ``model="gpt"`` calls the transformer planner
    (:func:`flexcomm.planner.llm.transformer_plan.plan_transformer`), a traced model (``resnet50``,
    ``module:factory``, ...) the operator-graph planner (:func:`flexcomm.planner.graph_plan.plan_graph`): no argv,
    no printed text, no file read back. The keywords are that function's (``batch_size``, ``simulate_top``, ...),
    ``cluster`` may be a :class:`~flexcomm.Cluster`; ``top`` plans go in the table and figure written to ``out``
    (the transformer planner: only when ``out`` is given; a traced model: ``results/plan`` unless ``out=None``).
    A current LLM's preset or config.json calls the layout search
    (:func:`flexcomm.planner.llm.layout_plan.plan_layout_model`; ``results/plan`` unless ``out=None``). A job file
    (``job=PATH``) gives the model, cluster and options it holds (``flexcomm plan --job``'s), a keyword given as
    well wins.
    """
    refuse_empty_values({"cluster": cluster, **options})
    if "job" in options:
        model, cluster, options = _with_job(options.pop("job"), model, cluster, options)
    if isinstance(model, Path):
        model = str(model)
    if not isinstance(model, str) or not model:
        raise InputError("model", model, "a model to plan: a traced model (resnet50, module:factory, ...), 'gpt', "
                         "a current LLM's preset (llama3-70b, ...) or a config.json path")
    if is_layout_model(model):
        return _plan_layouts(model, cluster, **options)
    if model == "gpt":
        return _plan_transformer(cluster, **options)
    return _plan_graph(model, cluster, **options)


#: ``flexcomm plan``'s and ``flexcomm place``'s default cluster, which their Python calls take too.
_PLAN_CLUSTER = "4x8-a100-ib"


def _with_job(path: object, model: str | None, cluster: str | Path | Cluster | None,
              options: dict[str, Any]) -> tuple[str, str | Path | Cluster, dict[str, Any]]:
    """The job file's model, cluster and options, under those given with it (a keyword typed as well wins)."""
    if not isinstance(path, (str, Path)) or not str(path):
        raise InputError("job", path, "a job file (YAML or JSON)")
    fields = plan_job_fields(load_job(path))
    job_model, job_cluster = fields.pop("model"), fields.pop("cluster")
    model = job_model if model is None else model
    # the fields the chosen planner prices, as `flexcomm plan --job` does (a gpt shape has no seed to use)
    engine = (plan_layout_model if isinstance(model, str) and is_layout_model(model)
              else plan_transformer if model == "gpt" else plan_graph)
    priced = inspect.signature(engine).parameters
    return (model, job_cluster if cluster is None else cluster,
            {**{k: v for k, v in fields.items() if k in priced}, **options})


def _plan_layouts(model: str, cluster: str | Path | Cluster | None, out: str | Path | None = "results/plan",
                  top: int = 10, no_progress: bool = False, **options: Any) -> CommandResult:
    """``flexcomm.plan("llama3-70b", ...)``: the layout search's result as a :class:`CommandResult` (the search
    draws no progress bar: ``no_progress`` is accepted for the command's sake)."""
    _check_keywords(options, plan_layout_model, f"plan({model!r}, ...)", ("model", "cluster"),
                    ("out", "top", "no_progress"))
    switch("no_progress", no_progress)
    check_top(top)
    result = plan_layout_model(model, _PLAN_CLUSTER if cluster is None else cluster, **options)
    written = write_layout_files(result, Path(out), top) if out is not None else []
    frame = result.table()
    return CommandResult(command="plan", out=None if out is None else Path(out), frame=frame,
                         tables={"layouts": frame}, figures={p.stem: p for p in written if p.suffix == ".png"},
                         summaries={"best_layout": result.summary()},
                         report="\n".join(layout_report_lines(result, written)) + "\n")


def _check_keywords(options: dict[str, Any], engine: Any, call: str, own: tuple[str, ...],
                    extra: tuple[str, ...]) -> None:
    """Every keyword is the engine's (less the ``own`` ones this call fills in) or one of ``extra``."""
    known = [k for k in inspect.signature(engine).parameters if k not in own]
    refuse_unknown_keywords(call, options, [*known, *extra])


def _plan_transformer(cluster: str | Path | Cluster | None, out: str | Path | None = None, top: int = 10,
                      no_progress: bool = False, **options: Any) -> CommandResult:
    """``flexcomm.plan("gpt", ...)``: the engine's result as a :class:`CommandResult` (``no_progress`` is accepted
    for the command's sake: the transformer planner draws no progress bar)."""
    _check_keywords(options, plan_transformer, "plan('gpt', ...)", ("cluster",), ("out", "top", "no_progress"))
    check_top(top)
    result = plan_transformer(_PLAN_CLUSTER if cluster is None else cluster, **options)
    written = write_files(result, Path(out), top) if out is not None else []
    frame = result.table()
    figures = {p.stem: p for p in written if p.suffix == ".png"}
    return CommandResult(command="plan", out=None if out is None else Path(out), frame=frame,
                         tables={"plans": frame}, figures=figures, summaries={"best_plan": result.summary()},
                         report=printed(result, top, written))


def _plan_graph(model: str, cluster: str | Path | Cluster | None, out: str | Path | None = "results/plan",
                top: int = 10, no_progress: bool = False, **options: Any) -> CommandResult:
    """``flexcomm.plan("resnet50", ...)``: the operator-graph planner's result as a :class:`CommandResult`."""
    _check_keywords(options, plan_graph, f"plan({model!r}, ...)", ("cluster", "model", "progress", "before_work"),
                    ("out", "top", "no_progress"))
    shown = not switch("no_progress", no_progress)
    check_top(top)
    folder = None if out is None else Path(out)
    try:
        result = plan_graph(_PLAN_CLUSTER if cluster is None else cluster, model, **options,
                            progress=pricing_progress(shown),
                            before_work=None if folder is None else lambda: output_folder(folder))
    except NoPlanFits as error:
        if folder is None:
            raise
        from flexcomm.planner.graph_report import keep_rejected  # torch, as the planner's pricing

        raise keep_rejected(error, folder) from None
    from flexcomm.planner.graph_report import write_files as write_graph_files

    written = write_graph_files(result, folder, top) if folder is not None else []
    frame = result.table()
    return CommandResult(command="plan", out=folder, frame=frame, tables={"plans": frame},
                         figures={p.stem: p for p in written if p.suffix == ".png"},
                         summaries={"best_plan": result.summary()}, report=graph_printed(result, top, written))


def place(model: str | None = None, cluster: str | Path | Cluster | None = None,
          out: str | Path | None = "results/place", no_progress: bool = False, no_plot: bool = False,
          no_contention: bool = False, **options: Any) -> CommandResult:
    """Device placement of an operator graph by every placer (``flexcomm place``), calling
    :func:`flexcomm.placement.run.place_graph` (keywords: its own, as the command's flags); ``frame``: the placers
    compared (``comparison.csv``), ``tables["placement"]`` the chosen one, ``tables["curves"]``, figures
    ``search_curves``, ``timeline`` (written to ``out``, ``results/place`` unless ``out=None``)."""
    refuse_empty_values({"cluster": cluster, "out": out, **options})
    _check_keywords(options, place_graph, "place(...)", ("cluster", "model", "progress", "before_work", "contention"),
                    ("out", "no_progress", "no_plot", "no_contention"))
    shown, plot = not switch("no_progress", no_progress), not switch("no_plot", no_plot)
    folder = None if out is None else Path(out)
    with search_bars(shown) as progress:
        run = place_graph(_PLAN_CLUSTER if cluster is None else cluster, "inception" if model is None else model,
                          **options, contention=not switch("no_contention", no_contention), progress=progress,
                          before_work=None if folder is None else lambda: output_folder(folder))
    from flexcomm.placement.plots import draw  # torch and matplotlib, as the whole placement engine
    from flexcomm.placement.report import report_text, write_tables

    figures = []
    if folder is not None:
        write_tables(run, folder)
        figures = draw(run, folder) if plot else []
    frame = run.table()
    return CommandResult(command="place", out=folder, frame=frame,
                         tables={"comparison": frame, "placement": run.placement_table(), "curves": run.curves()},
                         figures={p.stem: p for p in figures}, summaries={"placement": run.summary()},
                         report=report_text(run, folder))
