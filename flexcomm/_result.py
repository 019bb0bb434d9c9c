"""What ``flexcomm.plan``, ``place``, ``scenario``, ``recovery`` and the ``validate_*`` calls return.

Why one shape: a notebook reads every engine's answer the same way (``frame`` first, then ``tables``,
``figures``, ``summaries`` and the ``report`` the command would print), whichever engine made it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm.costmodel.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CommandResult"]


@dataclass(frozen=True)
class CommandResult:
    """What one engine call produced: its main table, every table it made and figure it drew, and what its
    command prints.

    ``frame`` is the table a reader looks at first (what ``plans.csv`` holds for ``plan``); ``tables`` and
    ``figures`` map each table's and figure's name (its file's stem) to its content or path, ``summaries`` each
    JSON document's name to its data.
    """

    command: str
    out: Path | None
    frame: pd.DataFrame
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    figures: Mapping[str, Path] = field(default_factory=dict)
    summaries: Mapping[str, Any] = field(default_factory=dict)
    report: str = ""

    def __str__(self) -> str:
        return self.report.rstrip("\n")

    def __repr__(self) -> str:
        figures = ", ".join(self.figures) or "none"
        return (f"<flexcomm {self.command}: {len(self.frame)} rows x {len(self.frame.columns)} columns; "
                f"figures: {figures}; out: {self.out}>")

    def show(self, name: str | None = None) -> Any:
        """Display a figure it drew (the first one by default) in a notebook; returns the IPython image."""
        if not self.figures:
            raise InputError("figure", name, f"a figure of this {self.command} run: it drew none")
        if name is None:
            name = next(iter(self.figures))
        if name not in self.figures:
            raise InputError("figure", name, "one of " + ", ".join(self.figures))
        from IPython.display import Image, display

        image = Image(filename=str(self.figures[name]))
        display(image)
        return image


def refuse_unknown_keywords(call: str, options: Mapping[str, Any], known: Iterable[str]) -> None:
    """A keyword ``call`` (``"scenario(...)"``) does not take is one error naming it and the ones it takes: a typo
    must not pass silently as a default."""
    known = sorted(known)
    for keyword, value in options.items():
        if keyword not in known:
            raise InputError(keyword, value, f"a keyword of flexcomm.{call}: " + ", ".join(known))


def switch(name: str, value: object) -> bool:
    """A switch keyword's value: True or False, nothing truthy."""
    if not isinstance(value, bool):
        raise InputError(name, value, "True or False")
    return value


def refuse_empty_values(values: Mapping[str, Any]) -> None:
    """``out=""`` (an unset variable) must not mean "the current folder", nor ``profile=""`` "no profile": an
    empty string, alone or in a list, is refused by its keyword, as the command line refuses ``--out ''``."""
    for keyword, value in values.items():
        if isinstance(value, str) and value == "" or isinstance(value, (list, tuple)) and "" in value:
            raise InputError(keyword, "", "a non-empty value")
