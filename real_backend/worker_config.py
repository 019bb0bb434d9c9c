"""A worker process's options as one JSON argument: the parent writes a frozen dataclass, the child reads it back.

Why one argument and not flags: the ranks, the delay line and the trace supervisor are started by flexcomm
itself (through :mod:`real_backend.launch`, ``ip netns exec`` or the elastic launcher, which pass the command
through untouched and hand the rank its torchrun environment variables), so their options need no parser: the
dataclass that the parent built and validated crosses the process boundary whole, and the child validates it
again by constructing the same dataclass (its ``__post_init__``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any, TypeVar

from flexcomm.costmodel.errors import InputError

Config = TypeVar("Config")


def to_argument(config: Any) -> str:
    """``config`` (a dataclass instance) as the one JSON argument its worker reads."""
    return json.dumps(dataclasses.asdict(config), sort_keys=True)


def from_argument(cls: type[Config], text: str) -> Config:
    """The ``cls`` instance a JSON argument holds; a malformed or foreign argument is one :class:`InputError`."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    expected = f"a JSON object of {cls.__name__} fields ({', '.join(names)})"
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise InputError("config", text, expected)
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise InputError("config", ", ".join(unknown), expected)
    values = {key: tuple(value) if isinstance(value, list) else value for key, value in data.items()}
    try:
        return cls(**values)
    except TypeError as error:  # a required field missing
        raise InputError("config", text, f"{expected}: {error}") from None


def config_from_argv(cls: type[Config], label: str, argv: Sequence[str] | None = None) -> Config:
    """A worker's ``__main__``: its one argument read into ``cls``; anything else is one line on stderr
    (``LABEL: error: ...``, as the worker's own errors), exit 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(args) != 1:
            raise InputError("argv", " ".join(args), f"one argument, a JSON object of {cls.__name__} fields")
        return from_argument(cls, args[0])
    except InputError as error:
        print(f"{label}: error: {error}", file=sys.stderr)
        sys.exit(2)
