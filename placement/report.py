"""What ``flexcomm place`` writes and prints from a :class:`placement.run.PlacementRun`: ``comparison.csv``/
``.md``, ``curves.csv``, ``placement.csv``, ``placement.json`` and the console report (the figures are
:func:`placement.plots.draw`'s). Kept apart from the engine, which returns data and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.placement.compare import markdown
from flexcomm.placement.run import PlacementRun


def write_tables(run: PlacementRun, out: Path) -> list[Path]:
    """comparison.csv/.md, curves.csv, placement.csv and placement.json under ``out``, each written atomically."""
    return [write_csv_atomic(run.table(), out / "comparison.csv"),
            write_text_atomic(out / "comparison.md", markdown(run.table(), run.title)),
            write_csv_atomic(run.curves(), out / "curves.csv"),
            write_csv_atomic(run.placement_table(), out / "placement.csv"),
            write_text_atomic(out / "placement.json", json.dumps(run.summary(), indent=2) + "\n")]


def report_text(run: PlacementRun, out: Path | None) -> str:
    """The comparison table in markdown and the chosen placement, as ``flexcomm place`` prints them (``out``:
    where the files went, said on the last line; None: nothing was written)."""
    chosen = run.chosen
    wrote = f"; wrote {out}/" if out is not None else ""
    return (markdown(run.table(), run.title) + "\n"
            + f"best: {chosen.method} {chosen.step_time_s * 1e3:.4g} ms "
            f"({run.speedup_vs_single:.2f}x over single device){wrote}\n")
