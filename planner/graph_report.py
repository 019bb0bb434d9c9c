"""What the operator-graph planner's result says in lines and files: the report ``flexcomm plan --model resnet50``
prints (and ``flexcomm.plan("resnet50", ...)`` keeps as its ``report``), and ``plans.csv``/``plans.md``/
``best_plan.json``/``plans.png``. Kept apart from the engine, which returns data and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flexcomm.costmodel.atomic import write_csv_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_size, format_time
from flexcomm.planner.graph_plan import GraphPlanResult, NoPlanFits
from flexcomm.planner.report import write_outputs
from flexcomm.planner.search import signature


def report_lines(result: GraphPlanResult, top: int) -> list[str]:
    """The job, the search's size and speed, the best plan and the ``min(top, 5)`` best distinct schedules, as
    ``flexcomm plan`` prints them (the markdown table and the figure take ``top``)."""
    graph, cluster, search = result.graph.graph, result.cluster, result.search
    best = search.best
    rate = len(search.costs) / search.pricing_s if search.pricing_s > 0 else float("inf")
    described = f"; {graph['description']}" if graph.get("description") else ""
    lines = [f"{graph['name']} ({graph['parameters']:,} parameters, {len(result.units)} pipeline units{described}) "
             f"on {cluster.name} ({cluster.world_size:,} devices), batch {result.batch_size:,} "
             f"({result.batch_size / cluster.world_size:,.4g} a device"
             f"{', the default' if result.batch_defaulted else ''})"]
    if graph.get("input_text"):  # what was assumed about the user's model: said, not hidden
        lines.append(f"  your model: {result.model}, {graph['input_text']} (one sample of it per sample of the "
                     "batch)")
    lines += [f"priced {len(search.costs)} plans in {search.pricing_s:.2f}s ({rate:,.0f} plans/s); "
              f"{len(search.ranked)} fit in memory",
              f"best: {best.config.label}: {format_time(best.step_s)} per step "
              f"({best.extra.get('samples_per_s', 0):,.0f} samples/s), peak memory "
              f"{format_size(best.peak_memory_bytes)}"
              + (f", simulated {format_time(search.simulated[best.config.label])}"
                 if best.config.label in search.simulated else ""),
              "top schedules (fastest ZeRO stage and micro-batch count where only memory differs; numbered as in "
              "plans.png):"]
    table = result.table()
    keys = {c.config.label: signature(c.config) for c in search.ranked}
    rows = table[table["feasible"]]
    distinct = rows[~rows["plan"].map(keys).duplicated()]
    for place, row in enumerate(distinct.head(min(top, 5)).itertuples(), start=1):
        simulated = (f"  simulated {format_time(float(row.simulated_step_s)):>9s}"
                     if pd.notna(row.simulated_step_s) else "")  # None/NaN when not simulated
        lines.append(f"  {place:3d}. {row.plan:32s} model {format_time(row.step_s):>9s}{simulated}  "
                     f"loses on {row.loses_on}")
    return lines


def write_files(result: GraphPlanResult, out: Path, top: int) -> list[Path]:
    """``plans.csv``, ``plans.md``, ``best_plan.json`` and ``plans.png`` under ``out``, each written atomically."""
    return write_outputs(result.search, result.pricer, out, top, extra=result.settings())


def keep_rejected(error: NoPlanFits, out: Path) -> InputError:
    """Where no plan fits: write every plan and why it did not fit to ``out/plans.csv`` (the evidence), and return
    the error saying where it is."""
    path = write_csv_atomic(error.table, out / "plans.csv")
    return InputError(error.field, error.got, f"{error.expected} (see {path})")
