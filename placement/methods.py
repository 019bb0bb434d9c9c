"""The placers by name, without torch: the baselines (:data:`placement.baselines.BASELINES`) and the searches
(:mod:`placement.compare` runs them), so a mistyped method is refused before torch loads."""

from __future__ import annotations

from flexcomm.costmodel.errors import InputError
from flexcomm.placement.baselines import BASELINES

SEARCHES = ("ppo", "es", "async-es")
#: the name a method's result carries where it differs from the option's (``--method es`` runs ``sync-es``)
RESULT_NAMES = {"es": "sync-es"}
METHODS = (*BASELINES, *SEARCHES)


def parse_methods(text: str) -> list[str]:
    """``all`` or a comma-separated subset of :data:`METHODS`, in the order given, without repeats."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    if names == ["all"]:
        return list(METHODS)
    bad = [m for m in names if m not in METHODS]
    if not names or bad:
        raise InputError("method", text, "all, or a comma-separated list of " + ", ".join(METHODS))
    return list(dict.fromkeys(names))
