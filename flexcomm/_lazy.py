"""Module attributes imported on first use (PEP 562), so a light import stays light.

Why: ``flexcomm``, ``flexcomm.compression`` and ``flexcomm.workloads`` re-export names whose modules import
torch (about 2 s on a small machine). A command that only needs an option list or a validation must not
pay for that, and neither should ``import flexcomm``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_getattr(package: str, names: Mapping[str, str], namespace: dict[str, Any],
                 submodules: Iterable[str] = ()) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``names`` maps attribute -> defining module; ``submodules`` import by name."""
    subs = frozenset(submodules)

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            namespace[name] = value  # later lookups skip this function
            return value
        if name in subs:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
