"""The study journal: ``DIR/results.csv``, one row per finished point, appended and flushed as each arrives.

Why a module of its own: the runner appends to it and the report reads it; both need its name and its
reader, and neither should import the other for that.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from flexcomm.costmodel.atomic import cut_torn_tail
from flexcomm.costmodel.errors import InputError

JOURNAL = "results.csv"
STUDY_JSON = "study.json"


def read_journal(path: Path, columns: Sequence[str]) -> dict[str, dict[str, str]]:
    """Rows of ``results.csv`` by point id, after cutting off a torn last line (no trailing newline)."""
    if not path.exists():
        return {}
    cut_torn_tail(path)
    data = path.read_bytes()
    if not data:
        return {}
    lines = data.decode("utf-8").splitlines()
    reader = csv.reader(lines)
    header = next(reader)
    if header != list(columns):
        raise InputError("out", str(path), f"a journal with columns {','.join(columns)} (it has {','.join(header)})")
    rows: dict[str, dict[str, str]] = {}
    for number, cells in enumerate(reader, start=2):
        if len(cells) != len(columns):
            raise InputError("out", f"{path}:{number}", f"{len(columns)} cells per row (it has {len(cells)})")
        row = dict(zip(columns, cells, strict=True))
        rows.setdefault(row["point_id"], row)
    return rows
