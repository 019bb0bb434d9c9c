"""Helpers shared by the benchmark scripts (imported as ``_common`` when a script runs from this folder)."""

from __future__ import annotations

import os


def pin_one_cpu() -> int | None:
    """Pin this process to its lowest allowed CPU, so "one core" means one core; None where unsupported."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def require_flexcomm() -> None:
    """Exit with one line, not a traceback, where flexcomm is not installed (a bare checkout)."""
    import importlib.util
    import sys

    if importlib.util.find_spec("flexcomm") is None or importlib.util.find_spec("flexcomm.costmodel") is None:
        sys.exit("benchmarks need flexcomm installed: run `make install` (or `pip install -e .`)")
