"""The measurements flexcomm is checked against, shipped with the package as ``flexcomm.validation``.

Commands find a corpus (published nccl-tests runs, published training throughput, GPU compute runs) through
:mod:`importlib.resources`, never through the checkout's path: a wheel installed anywhere reads the same files
as an editable checkout. The testbed runs under ``network-trace/`` and ``from-trace/`` are documents for the
docs and tests, not package data (see ``README.md`` here).
"""

from __future__ import annotations

import csv
from importlib.resources import files
from pathlib import Path


def data_path(*parts: str) -> Path:
    """A shipped corpus or table as a path on disk (``data_path("nccl-tests")``)."""
    target = files(__name__).joinpath(*parts)
    if not isinstance(target, Path):  # a zipped install: the readers take folders on disk
        raise RuntimeError(f"flexcomm.validation is not installed as files on disk ({target!r}); reinstall it "
                           "from a wheel or a checkout")
    return target


def reference_rows(name: str) -> list[dict[str, str]]:
    """A published reference table of ``references/`` (``megatron-table1``, ``korthikanti-2023``, ...) as its
    rows, each with its ``provenance`` (paper, table) and, where a value was fitted, what it was fitted on."""
    with data_path("references", f"{name}.csv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))
