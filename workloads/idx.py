"""A small reader of IDX files (LeCun's MNIST format, which Fashion-MNIST keeps), gzipped or not.

Why our own: the format is eight lines of spec (a 4-byte magic 0x00 0x00 TYPE NDIM, NDIM big-endian
uint32 sizes, then the data row-major), and a reader we own can say exactly what is wrong with a
damaged file (its name, and which of magic, sizes or length) instead of a numpy reshape error.
Only what MNIST-style sets use is accepted: unsigned bytes (type 0x08).
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from flexcomm.costmodel.errors import InputError

UNSIGNED_BYTE = 0x08
MAX_NDIM = 4


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(str(path), "no such file", "an IDX file") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(str(path), f"unreadable ({exc})", "an IDX file, gzipped or not") from None


def read_idx(path: str | Path, ndim: int | None = None) -> np.ndarray:
    """The array an IDX file holds (uint8), checked against its own header; ``ndim`` if given must match."""
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise InputError(str(path), f"magic {raw[:4].hex() or 'missing'}",
                         "an IDX file starting 0x0000TTNN (TT: data type, NN: dimensions)")
    dtype, dims = raw[2], raw[3]
    if dtype != UNSIGNED_BYTE:
        raise InputError(str(path), f"data type 0x{dtype:02x}", "unsigned bytes (0x08), as MNIST-style sets use")
    if not 1 <= dims <= MAX_NDIM or (ndim is not None and dims != ndim):
        raise InputError(str(path), f"{dims} dimensions", f"{ndim if ndim is not None else f'1-{MAX_NDIM}'} "
                         "dimensions (images 3, labels 1)")
    header = 4 + 4 * dims
    if len(raw) < header:
        raise InputError(str(path), f"{len(raw)} bytes", f"a header of {header} bytes: truncated")
    shape = struct.unpack(f">{dims}I", raw[4:header])
    expected = int(np.prod(shape, dtype=np.int64))
    found = len(raw) - header
    if found != expected:
        what = "truncated" if found < expected else "trailing bytes"
        raise InputError(str(path), f"{found:,} data bytes", f"{expected:,} bytes for shape {tuple(shape)}: {what}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def write_idx(path: str | Path, array: np.ndarray) -> Path:
    """The inverse of :func:`read_idx` (uint8 arrays), for tests and hand-made sets."""
    path = Path(path)
    data = np.ascontiguousarray(array, dtype=np.uint8)
    blob = bytes([0, 0, UNSIGNED_BYTE, data.ndim]) + struct.pack(f">{data.ndim}I", *data.shape) + data.tobytes()
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as handle:
            handle.write(blob)
    else:
        path.write_bytes(blob)
    return path


def read_image_set(images: str | Path, labels: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, H, W) and labels (N,) of one split, refusing a pair whose counts differ."""
    x = read_idx(images, ndim=3)
    y = read_idx(labels, ndim=1)
    if len(x) != len(y):
        raise InputError(str(labels), f"{len(y):,} labels", f"{len(x):,}, one per image of {Path(images).name}")
    return x, y
