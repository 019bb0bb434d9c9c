"""``flexcomm reproduce``: the paper's Table IV step times, predicted by the shared cost model."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "reproduce",
        help="predict Tyagi & Swany 2023's Table IV step times and report the errors",
        description="Prices every Table IV entry (8 x V100, 4 ms, 20 Gbit/s; dense tree allreduce and STAR "
        "Allreduce-compatible Top-k) with the cost model plus the paper's measured compute and compression "
        "times, three ways, and writes the table (CSV, markdown) and a bar chart.",
    )
    parser.add_argument("--out", default="results/reproduce", help="output directory (default results/reproduce)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from costmodel.atomic import write_csv_atomic, write_text_atomic
    from experiments.reproduce import plot, reproduce_table_iv, summary, to_markdown

    out = Path(args.out)
    table = reproduce_table_iv()
    stats = summary(table)
    write_csv_atomic(table, out / "table_iv.csv")
    write_text_atomic(out / "table_iv.md", to_markdown(table, stats))
    figure = plot(table, out / "table_iv.png")
    for row in stats.itertuples():
        print(f"{row.rows:6s} {row.variant:14s} median |error| {row.median_abs_error:6.1%}, "
              f"worst {row.worst_abs_error:6.1%} over {row.points} entries")
    print(f"wrote {out / 'table_iv.csv'}, {out / 'table_iv.md'}, {figure}")
    return 0
