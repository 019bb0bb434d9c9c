"""7. Tyagi & Swany's Table IV step times predicted by the cost model (see :mod:`experiments.tyagi_table4`)."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.experiments.reproductions.base import Outcome, Reproduction, Settings
from flexcomm.experiments.tyagi_table4 import (
    ALL_VARIANTS,
    CALIBRATED,
    MODELS,
    NAIVE,
    plot,
    reproduce_table_iv,
    summary,
    to_markdown,
)


def run(settings: Settings, out: Path) -> Outcome:
    table = reproduce_table_iv()
    stats = summary(table)
    write_text_atomic(out / "table4_detail.md", to_markdown(table, stats))
    figure = plot(table, out / "table4.png")
    lines = [f"{r.rows} rows, {r.variant}: median |error| {r.median_abs_error:.1%}, worst {r.worst_abs_error:.1%} "
             f"over {r.points} entries" for r in stats.itertuples()]
    indexed = stats.set_index(["rows", "variant"])
    for kind in ("dense", "sparse"):
        naive = float(indexed.loc[(kind, NAIVE), "median_abs_error"])
        beaten = [v for v in ALL_VARIANTS if v != NAIVE and indexed.loc[(kind, v), "median_abs_error"] < naive]
        lines.append(f"Against the naive baseline ({NAIVE}, {naive:.1%} median on {kind} rows): "
                     + (f"closer: {', '.join(beaten)}" if beaten else "no variant is closer")
                     + (f"; not closer: {', '.join(v for v in ALL_VARIANTS if v != NAIVE and v not in beaten)}"
                        if len(beaten) < len(ALL_VARIANTS) - 1 else "") + ".")
    fitted = table[table["fitted_on_this_row"]]
    if len(fitted):
        lines.append("Left out of these statistics, as fits: " + "; ".join(
            f"{r.model} {r.scheme} ({MODELS[r.model].params_source})" for r in fitted.itertuples()) + ".")
    sparse = table[table["scheme"] != "dense"]["implied_latency_terms"]
    cal = stats.set_index(["rows", "variant"]).loc[("sparse", CALIBRATED)]
    lines.append(f"The measured sparse steps leave room for {sparse.min():.1f}-{sparse.max():.1f} latencies of 4 ms "
                 "where the paper's ring form charges 17. With alpha per (collective, algorithm) calibrated on the "
                 f"other entries (leave one out), STAR steps are within {cal.median_abs_error:.1%} median "
                 f"(goal 15 %: {'met' if cal.median_abs_error <= 0.15 else 'not met'}), worst "
                 f"{cal.worst_abs_error:.1%}. Full table: `table4_detail.md`.")
    return Outcome(table, [figure], lines, {"summary": stats})


REPRODUCTION = Reproduction(
    id="table4", number=7,
    title="Table IV step times (8 x V100, 4 ms, 20 Gbit/s) predicted by the cost model",
    literature="Tyagi & Swany (2023), Table IV: ResNet-18 dense 146.2 ms, STAR c=0.1 64.8 ms, c=0.01 49.7 ms, "
    "c=0.001 48.2 ms; ResNet-50 dense 294.4 ms, STAR 100.8 / 64.4 ms; AlexNet dense 614 ms, STAR 42.4 ms; 'ViT' "
    "dense 1348.5 ms, STAR 86.9 ms.",
    run=run, engine="cost model with the paper's measured compute and compression times",
)
