"""Result files that survive crashes: atomic replacement, and CSVs appended and flushed row by row.

Whole files (tables, profiles, figures) are written to a temporary file and renamed, so they
appear whole or not at all and an old file survives a crash; measurements taken one by one are
appended and flushed as they are taken, so a crash loses nothing already measured.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from flexcomm.costmodel.errors import InputError


def write_atomic(path: str | Path, write: Callable[[IO], None], mode: str = "w") -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, fsync it, then rename over ``path``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:  # name the file the user asked for, not our temporary one
        raise OSError(error.errno, error.strerror, str(path)) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results should be as readable as any file
        with os.fdopen(fd, mode, **({} if "b" in mode else {"newline": ""})) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(path)) from None
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


def save_figure_atomic(figure, path: str | Path, dpi: int | None = None) -> Path:  # figure: matplotlib Figure
    """Write the figure atomically, then close it: figures are saved once, and open ones pile up in long runs.

    ``dpi`` defaults to ``FLEXCOMM_FIGURE_DPI`` or 130 (the docs' copies are drawn at 80 to stay small)."""
    import matplotlib.pyplot as plt

    if dpi is None:
        try:
            dpi = int(os.environ.get("FLEXCOMM_FIGURE_DPI", "130"))
        except ValueError:
            dpi = 130

    fmt = Path(path).suffix.lstrip(".") or "png"
    try:
        return write_atomic(path, lambda handle: figure.savefig(handle, format=fmt, dpi=dpi, bbox_inches="tight"),
                            "wb")
    finally:
        plt.close(figure)


def cut_torn_tail(path: str | Path) -> int:
    """Cut a torn last line (a kill mid-write leaves a row without its newline) off a line-oriented file, so
    the next append starts a row of its own instead of finishing someone else's; the bytes cut (0: whole).
    Reads backwards a block at a time: a long log is not read whole."""
    path = Path(path)
    if not path.exists():
        return 0
    with open(path, "r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        end = size
        keep = 0
        while end > 0:
            start = max(0, end - 65536)
            handle.seek(start)
            found = handle.read(end - start).rfind(b"\n")
            if found >= 0:
                keep = start + found + 1
                break
            end = start
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return size - keep


class AppendingCsv:
    """Fixed columns, header once, every row flushed at once; fsync at most every ``fsync_every_s``.

    Why row by row: a run that dies (a peer killed, a timeout) keeps every row it measured, and a long
    sweep can be watched (``tail -f``) while it runs. Missing cells, None and NaN are written empty. An
    existing file is appended to after its torn last row (if any) is cut off, and only if its header is
    these columns (8 cells under a 7-column header is what appending to a torn or foreign file gave).
    """

    def __init__(self, path: str | Path, columns: Sequence[str], fsync_every_s: float = 1.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.columns = tuple(columns)
        self.cut_bytes = cut_torn_tail(self.path)
        _check_header(self.path, self.columns)
        self._handle = open(self.path, "a", newline="", encoding="utf-8")  # closed in close()
        self._csv = csv.writer(self._handle, lineterminator="\n")
        self._fsync_every_s = fsync_every_s
        self._last_sync = time.monotonic()
        self.rows = 0
        if self._handle.tell() == 0:
            self._csv.writerow(self.columns)
            self._sync()

    def write(self, row: Mapping[str, Any]) -> None:
        self._csv.writerow([_cell(row.get(c)) for c in self.columns])
        self._handle.flush()
        self.rows += 1
        if time.monotonic() - self._last_sync >= self._fsync_every_s:
            self._sync()

    def _sync(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._last_sync = time.monotonic()

    def close(self) -> None:
        if not self._handle.closed:
            self._sync()
            self._handle.close()


def _check_header(path: Path, columns: tuple[str, ...]) -> None:
    """An existing CSV is appended to only under the same header."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, newline="", encoding="utf-8", errors="replace") as handle:
        header = next(csv.reader([handle.readline(1 << 16)]), [])
    if header != list(columns):
        shown = ",".join(header)[:120]
        raise InputError("out", str(path), f"a CSV with columns {','.join(columns)} to append to (it has {shown})")


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


#: The lock a run takes on its output folder: a hidden file left in place (the flock on it is the lock, held
#: until the run ends or dies; the kernel drops it with the process).
RUN_LOCK = ".flexcomm.lock"


@contextmanager
def output_folder_lock(out: str | Path, field: str = "out", name: str = RUN_LOCK,
                       what: str = "flexcomm run") -> Iterator[None]:
    """Hold ``out`` for one run: a second run on the same folder is refused in one line instead of both
    exiting 0 with the second's files over the first's. A folder this call had to create is removed again
    when the run wrote nothing there (a refused run leaves nothing behind)."""
    out = Path(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / name, "w")  # noqa: SIM115 (closed below: the lock lives as long as the run)
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise InputError(field, str(out), f"an output folder no other {what} is writing to (one is running "
                         "there now; wait for it or use another folder)") from None
    try:
        yield
    finally:
        handle.close()
        if created and {p.name for p in out.iterdir()} <= {name}:
            (out / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                out.rmdir()
