"""Files read so that they can neither hang nor grow past a limit: as a stream (gunzipped on the way when it is
gzip), or whole as JSON or CSV.

Why: :func:`costmodel.limits.read_bytes_bounded` reads a whole file, which is right for kilobyte logs but not
for profiler traces of hundreds of megabytes, and a few kilobytes of gzip expand to gigabytes. Here the file's
kind is checked before it is opened (a FIFO blocks ``open``, ``/dev/zero`` never ends), the compressed bytes
are inflated a chunk at a time, and the bytes produced are counted: one past the limit ends the read with a
one-line :class:`InputError`, so memory stays at one chunk plus what the parser keeps. A gzip file is one
stream, as ``gzip.open`` writes it: a second member or bytes after its end are refused, not read on silently.
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import (
    MAX_DOCUMENT_FLOW_DEPTH,
    MAX_FILE_BYTES,
    MAX_RUN_FILE_BYTES,
    Limit,
    open_regular,
    read_text_bounded,
)

if TYPE_CHECKING:
    import pandas as pd

#: Bytes read from the file at a time (and the most one inflate call produces beyond what was asked).
CHUNK_BYTES = 1 << 16
GZIP_MAGIC = b"\x1f\x8b"


class _NestingGuard:
    """Refuses JSON nested deeper than :data:`MAX_DOCUMENT_FLOW_DEPTH`, counted on the raw bytes a chunk at a
    time (numpy, so a 35 MB trace costs ~30 ms). Why: a streaming parser names every value by its path, so a
    few hundred kilobytes of ``[[[[...`` cost it memory quadratic in the depth (100,000 levels: killed at 24 GB).
    Brackets inside strings are counted too: an over-count, which only a string of hundreds of unmatched
    brackets could push past the limit."""

    def __init__(self, field: str, name: str) -> None:
        self._field, self._name, self._depth = field, name, 0
        self._cap = MAX_DOCUMENT_FLOW_DEPTH.value

    def feed(self, data: bytes) -> None:
        import numpy as np

        if not data:
            return
        raw = np.frombuffer(data, dtype=np.uint8)
        steps = (raw == 0x5B).astype(np.int32) + (raw == 0x7B) - (raw == 0x5D) - (raw == 0x7D)
        depths = self._depth + np.cumsum(steps)
        if int(depths.max()) > self._cap:
            limit = MAX_DOCUMENT_FLOW_DEPTH
            raise InputError(self._field, self._name, f"JSON nested at most {self._cap:,} {limit.what} deep (set "
                             f"{limit.env} to raise the limit)")
        self._depth = int(depths[-1])


class _BoundedRaw(io.RawIOBase):
    """The file's bytes, inflated when ``gzipped``; at most ``limit`` bytes produced."""

    def __init__(self, handle: BinaryIO, field: str, name: str, what: str, limit: Limit, gzipped: bool,
                 guard: _NestingGuard | None = None) -> None:
        super().__init__()
        self._handle, self._field, self._name, self._what, self._limit = handle, field, name, what, limit
        self._cap = limit.value
        self._inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS) if gzipped else None
        self._produced = 0
        self._guard = guard

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._next(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def _next(self, wanted: int) -> bytes:
        try:
            data = self._handle.read(wanted) if self._inflate is None else self._inflated(wanted)
        except OSError as exc:
            raise InputError(self._field, self._name, f"a readable {self._what} "
                             f"({exc.strerror or exc.__class__.__name__})") from None
        self._produced += len(data)
        if self._produced > self._cap:
            state = " once decompressed" if self._inflate is not None else ""
            raise InputError(self._field, self._name, f"at most {self._cap:,} {self._limit.what}{state} (set "
                             f"{self._limit.env} to raise the limit)")
        if self._guard is not None:
            self._guard.feed(data)
        return data

    def _inflated(self, wanted: int) -> bytes:
        inflate = self._inflate
        assert inflate is not None
        while True:
            if inflate.eof:
                if inflate.unused_data or self._handle.read(1):
                    raise InputError(self._field, self._name, f"one gzip stream as a {self._what} (this has "
                                     "more after its end: a second member or trailing bytes)")
                return b""
            source = inflate.unconsumed_tail or self._handle.read(CHUNK_BYTES)
            if not source:
                raise InputError(self._field, self._name, f"a whole gzip {self._what} (it ends early)")
            try:
                data = inflate.decompress(source, max(1, wanted))
            except zlib.error as exc:
                raise InputError(self._field, self._name, f"a gzip {self._what} that inflates ({exc})") from None
            if data:
                return data


@contextmanager
def open_bounded(path: str | os.PathLike, field: str, what: str = "file", limit: Limit = MAX_FILE_BYTES,
                 json_nesting: bool = False) -> Iterator[io.BufferedReader]:
    """A buffered binary stream of ``path``'s bytes (gunzipped when they start with gzip's magic), never more
    than ``limit`` of them; read it with any streaming parser (``json_nesting``: JSON for a streaming parser,
    its nesting depth checked as it is read)."""
    handle = open_regular(path, field, what, limit)
    try:
        gzipped = handle.read(2) == GZIP_MAGIC
        handle.seek(0)
        guard = _NestingGuard(field, os.fspath(path)) if json_nesting else None
        raw = _BoundedRaw(handle, field, os.fspath(path), what, limit, gzipped, guard)
        yield io.BufferedReader(raw, CHUNK_BYTES)
    finally:
        handle.close()


def read_json_bounded(path: str | os.PathLike, field: str, what: str = "JSON file",
                      limit: Limit = MAX_RUN_FILE_BYTES) -> object:
    """A JSON document from a regular file of at most ``limit`` bytes (a run's summary, a profile, a lock):
    a FIFO, a device, a damaged or oversized file is a one-line InputError naming ``field``."""
    import json

    text = read_text_bounded(path, field, what, limit)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(field, os.fspath(path), f"a {what} that parses ({str(exc)[:100]})") from None


def read_csv_bounded(path: str | os.PathLike, field: str, what: str = "CSV file",
                     limit: Limit = MAX_RUN_FILE_BYTES, encoding_errors: str = "replace",
                     **options: object) -> pd.DataFrame:
    """A CSV table from a regular file of at most ``limit`` bytes, read as :func:`read_json_bounded` reads
    JSON (``encoding_errors="strict"`` refuses bytes that are not UTF-8; ``options`` go to
    :func:`pandas.read_csv`)."""
    import pandas as pd

    text = read_text_bounded(path, field, what, limit, errors=encoding_errors)
    try:
        return pd.read_csv(io.StringIO(text), **options)  # type: ignore[arg-type]
    except (ValueError, pd.errors.ParserError) as exc:
        raise InputError(field, os.fspath(path), f"a {what} that parses ({str(exc).splitlines()[0][:100]})") \
            from None
