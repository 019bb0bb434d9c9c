"""Atomic file writes: results appear whole or not at all, and an old file survives a crash."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def write_atomic(path: str | Path, write: Callable[[IO], None], mode: str = "w") -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, fsync it, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results should be as readable as any file
        with os.fdopen(fd, mode, **({} if "b" in mode else {"newline": ""})) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda handle: handle.write(text))


def write_csv_atomic(frame, path: str | Path) -> Path:  # frame: pandas.DataFrame (pandas imported lazily)
    return write_atomic(path, lambda handle: frame.to_csv(handle, index=False))


def save_figure_atomic(figure, path: str | Path, dpi: int = 130) -> Path:  # figure: matplotlib Figure
    fmt = Path(path).suffix.lstrip(".") or "png"
    return write_atomic(path, lambda handle: figure.savefig(handle, format=fmt, dpi=dpi, bbox_inches="tight"), "wb")
