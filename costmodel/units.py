"""Parse and format the units people write in cluster files and on the command line.

Sizes are bytes, bandwidths bytes per second and times seconds everywhere inside flexcomm;
strings such as ``64MiB``, ``10Gbit/s`` or ``10us`` are converted at the edge, here.
Decimal prefixes (k, M, G, T) are powers of 1000, binary ones (Ki, Mi, Gi, Ti) powers of 1024,
``b``/``bit`` is a bit and ``B`` a byte, as in IEC 80000-13.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from flexcomm.costmodel.errors import InputError

_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_PREFIX = {
    "": 1.0,
    "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50,
}
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<prefix>Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?(?P<unit>B|bytes?|b|bits?)?\s*$")
# The unit is optional as a whole so that a bare number ("1e9", which YAML 1.1 reads as a string) is
# bytes/s, as for the other parsers; a prefix without a unit ("10G") is still rejected.
_BW_RE = re.compile(
    rf"^\s*{_NUMBER}\s*(?:(?P<prefix>Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?(?P<unit>B|bytes?|b|bits?|bit)"
    r"(?:\s*/\s*s|ps))?\s*$"
)
# Seconds per unit as multiplier / divisor: dividing by an exact 1e6 makes "10us" exactly the float
# 1e-5 (10 * 1e-6 is not). "\u00b5s" is the micro sign, "\u03bcs" the Greek mu; keyboards produce either.
_TIME_UNITS: dict[str, tuple[float, float]] = {
    "s": (1.0, 1.0), "sec": (1.0, 1.0), "min": (60.0, 1.0), "h": (3600.0, 1.0), "d": (86400.0, 1.0),
    "ms": (1.0, 1e3), "us": (1.0, 1e6), "\u00b5s": (1.0, 1e6), "\u03bcs": (1.0, 1e6), "ns": (1.0, 1e9),
}
_TIME_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>s|sec|ms|us|\u00b5s|\u03bcs|ns|min|h|d)?\s*$")
_FLOPS_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<prefix>k|K|M|G|T|P|E)?\s*(?:FLOP/s|FLOPS|flops|flop/s)?\s*$")


def _unit_bytes(unit: str | None) -> float:
    if unit is None or unit.startswith("B") or unit.startswith("byte"):
        return 1.0
    return 1.0 / 8.0  # b, bit, bits


def _plain_number(value: int | float, field: str, expected: str) -> float:
    """float(value), but an int too large for a float is bad input, not an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        raise InputError(field, value, expected) from None


def _mantissa_is_nonzero(number: str) -> bool:
    """Whether a typed number such as ``1e-400`` has a nonzero digit before its exponent."""
    return any(digit in "123456789" for digit in re.split("[eE]", number, maxsplit=1)[0])


def _no_underflow(value: float, match: re.Match[str], field: str, raw: object, expected: str) -> float:
    """``1e-400s`` is no typo for 0: a nonzero literal too small for a float is refused, not silently 0."""
    if value == 0 and _mantissa_is_nonzero(match["num"]):
        raise InputError(field, raw, f"{expected} (this one is nonzero but below the smallest float, so it "
                         "would silently become 0)")
    return value


def _finite_nonnegative(value: float, field: str, raw: object, expected: str) -> float:
    # A typed "-0" is refused too (a typo for something; it printed as "-0ns"); a computed -0.0 becomes 0.0.
    if not math.isfinite(value) or value < 0 or (isinstance(raw, str) and raw.strip().startswith("-")):
        raise InputError(field, raw, expected)
    return value + 0.0


def parse_size(value: str | float | int, field: str = "size") -> float:
    """Bytes from ``64MiB``, ``1GB``, ``512``, ``8kb`` (bits) or a plain number of bytes."""
    expected = "a non-negative size such as 64MiB, 1GB or 4096"
    if isinstance(value, bool):
        raise InputError(field, value, expected)
    if isinstance(value, (int, float)):
        return _finite_nonnegative(_plain_number(value, field, expected), field, value, expected)
    match = _SIZE_RE.match(str(value))
    if not match:
        raise InputError(field, value, expected)
    number = float(match["num"]) * _PREFIX[match["prefix"] or ""] * _unit_bytes(match["unit"])
    return _finite_nonnegative(_no_underflow(number, match, field, value, expected), field, value, expected)


#: The slowest link a price is made for: 1 bit/s (1e-300 bit/s priced a 1 GiB allreduce at infinity, after a
#: numpy overflow warning, and exited 0).
MIN_BANDWIDTH_BPS = 0.125


def parse_bandwidth(value: str | float | int, field: str = "bandwidth") -> float:
    """Bytes per second from ``10Gbit/s``, ``1.25GB/s``, ``100Mbps`` or a plain number of bytes/s."""
    expected = "a positive bandwidth such as 10Gbit/s, 1.25GB/s or 100Mbps"
    if isinstance(value, bool):
        raise InputError(field, value, expected)
    if isinstance(value, (int, float)):
        number = _plain_number(value, field, expected)
    else:
        match = _BW_RE.match(str(value))
        if not match:
            raise InputError(field, value, expected)
        number = _no_underflow(float(match["num"]) * _PREFIX[match["prefix"] or ""] * _unit_bytes(match["unit"]),
                               match, field, value, expected)
    if not math.isfinite(number) or number <= 0:
        raise InputError(field, value, expected)
    if number < MIN_BANDWIDTH_BPS:
        raise InputError(field, value, "a bandwidth of at least 1bit/s (slower prices every collective in "
                         "centuries and overflows to infinity)")
    return number


def parse_time(value: str | float | int, field: str = "time") -> float:
    """Seconds from ``10us``, ``2ms``, ``1.5s`` or a plain number of seconds."""
    expected = "a non-negative time such as 10us, 2ms or 0.5s"
    if isinstance(value, bool):
        raise InputError(field, value, expected)
    if isinstance(value, (int, float)):
        return _finite_nonnegative(_plain_number(value, field, expected), field, value, expected)
    match = _TIME_RE.match(str(value))
    if not match:
        raise InputError(field, value, expected)
    multiplier, divisor = _TIME_UNITS[match["unit"] or "s"]
    number = float(match["num"]) * multiplier / divisor
    return _finite_nonnegative(_no_underflow(number, match, field, value, expected), field, value, expected)


def parse_flops(value: str | float | int, field: str = "peak_flops") -> float:
    """FLOP/s from ``312TFLOP/s``, ``19.5T`` or a plain number."""
    expected = "a positive FLOP/s rate such as 312TFLOP/s or 1.5e13"
    prefixes = {**_PREFIX, "E": 1e18}
    if isinstance(value, bool):
        raise InputError(field, value, expected)
    if isinstance(value, (int, float)):
        number = _plain_number(value, field, expected)
    else:
        match = _FLOPS_RE.match(str(value))
        if not match:
            raise InputError(field, value, expected)
        number = _no_underflow(float(match["num"]) * prefixes[match["prefix"] or ""], match, field, value, expected)
    if not math.isfinite(number) or number <= 0:
        raise InputError(field, value, expected)
    return number


RATIO_FORM = "a fraction of elements kept in (0, 1], e.g. 0.01"


def parse_ratio(value: object, field: str = "ratio") -> float:
    """A compression ratio (fraction of elements kept) in (0, 1], from a number or a string such as ``0.01``.

    Why one parser: ``--ratio 0`` or ``1e-400`` is never a ratio, whether or not this run's strategy uses it
    (a typo in a flag that does nothing this time is still a typo).
    """
    if isinstance(value, bool):
        raise InputError(field, value, RATIO_FORM)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise InputError(field, value, RATIO_FORM) from None
    if not (math.isfinite(number) and 0 < number <= 1):
        raise InputError(field, value, RATIO_FORM)
    return number


def _scaled(value: float, steps: list[tuple[float, str]], fmt: str = "{:.3g}") -> str:
    for scale, suffix in steps:
        if abs(value) >= scale:
            return fmt.format(value / scale) + suffix
    scale, suffix = steps[-1]
    return fmt.format(value / scale) + suffix


def format_size(nbytes: float) -> str:
    """``67108864`` -> ``64MiB``: binary prefixes, three significant digits."""
    return _scaled(nbytes, [(2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B")])


def format_time(seconds: float) -> str:
    """``0.0123`` -> ``12.3ms``."""
    return _scaled(seconds, [(1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")])


def format_duration(seconds: float, sep: str = " ") -> str:
    """A human duration for hours-to-days scales: ``7 d``, ``48 h``, ``4.4 min``, ``30 s`` (``sep=""``: parseable)."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g}{sep}{unit}"
    return f"{seconds:.3g}{sep}s"


def format_percent(fraction: Any) -> str:
    """``0.123`` -> ``12.3 %``; ``-`` for a missing or non-finite value (a table cell with nothing measured)."""
    if isinstance(fraction, (int, float)) and math.isfinite(fraction):
        return f"{100 * float(fraction):.1f} %"
    return "-"


def format_bandwidth(bytes_per_second: float) -> str:
    """Bytes/s -> ``10Gbit/s`` (network people think in bits)."""
    bits = bytes_per_second * 8.0
    return _scaled(bits, [(1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s"), (1.0, "bit/s")])


def format_bus_bandwidth(bytes_per_second: float) -> str:
    """Bytes/s -> ``busbw 1.25 GB/s``: a collective's bus bandwidth as nccl-tests prints it (GB/s, 1e9 bytes)."""
    return f"busbw {bytes_per_second / 1e9:.3g} GB/s"


_COUNT = re.compile(r"^\s*(?P<num>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<suffix>[kKmMgGbB]?)\s*$")
_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}


def parse_count(value: str | float | int, field: str = "count") -> int:
    """An element or parameter count such as ``11.69M``, ``25557032`` or ``1.3B`` (k, M, G/B suffixes)."""
    match = _COUNT.match(str(value))
    number = float(match["num"]) * _COUNT_SUFFIX[match["suffix"].lower()] if match else math.nan
    if not (math.isfinite(number) and number >= 1):
        raise InputError(field, value, "a positive count such as 11.69M or 25557032")
    return int(round(number))


# --- unit strings or numbers, at the API's edge --------------------------------------------------


def coerce(value: Any, parser: Callable[[Any, str], float], field: str) -> Any:
    """``parser(value)`` for a unit string (or a list of them); numbers and numpy arrays pass through unchanged.

    Why: every public function takes ``"64MiB"`` as well as ``67108864``, while the vectorised paths keep
    taking arrays without a per-element parse.
    """
    if isinstance(value, bool):  # True is 1 to Python, never a size, time or bandwidth to a user
        raise InputError(field, value, "a number or a unit string, not True/False")
    if isinstance(value, str):
        return parser(value, field)
    if isinstance(value, (list, tuple)) and any(isinstance(v, str) for v in value):
        return [parser(v, field) for v in value]
    return value


def format_count(count: float) -> str:
    """A parameter or element count as people write it: 3 significant digits and K, M, B or T (25.6M, 1.3B)."""
    value = float(count)
    for factor, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{float(f'{value / factor:.3g}'):g}{suffix}"
    return f"{value:.3g}"
