"""The device catalog: what a cluster file leaves out of its ``device`` comes from the vendor's datasheet.

Why: a cluster file that names an A100 but gives only its peak FLOP/s and memory made every GEMM run at peak
and every memory-bound kernel free (the planner's roofline needs HBM bandwidth and SMs). With the catalog,
``device: {name: A100-SXM4-80GB}`` (or an alias as people write it: ``A100-80GB``, ``H100 80GB HBM3``) takes
every value the file does not state from ``costmodel/devices.yaml`` (each entry cites its datasheet); a value
the file states wins. ``peak_flops``, when left out, is the catalog's rate for ``precision`` (default bf16,
fp16 where a device has no bf16).

A device the catalog does not know and whose file gives no memory bandwidth is never priced at silent peak:
one warning line names the closest catalog names, and its bandwidth is taken as ``peak_flops /``
:data:`CONSERVATIVE_RIDGE_FLOP_PER_BYTE`: an unknown device is assumed no better balanced than the least
balanced one the catalog knows (so memory-bound kernels cost at least what they would cost there).
"""

from __future__ import annotations

import difflib
import functools
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_bandwidth, parse_flops, parse_size

CATALOG_PATH = Path(__file__).resolve().parent / "devices.yaml"
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
DEFAULT_PRECISION = "bf16"
#: FLOP per byte of HBM traffic at which the least balanced catalog device turns compute-bound (L40S:
#: 362 TFLOP/s over 864 GB/s = 419), rounded up: the bandwidth assumed for a device the catalog does not know.
CONSERVATIVE_RIDGE_FLOP_PER_BYTE = 500.0
_WARNED: set[str] = set()


@dataclass(frozen=True)
class Mamf:
    """A measured Maximum Achievable Matmul FLOPS: the rate, the best shape (M, N, K) and the software; where the
    device itself was not measured, the sibling whose rate it borrows (``flexcomm constants`` lists it)."""

    tflops: float
    shape: tuple[int, int, int]
    software: str
    borrowed_from: str = ""


@dataclass(frozen=True)
class CatalogDevice:
    """One catalog entry (units: FLOP/s, bytes, bytes/s)."""

    name: str
    peak_flops: dict[str, float]
    memory_bytes: float
    memory_bandwidth_Bps: float
    units: int | None
    l2_bytes: float | None
    link: str
    source: str
    aliases: tuple[str, ...]
    mamf: Mamf | None = None
    #: who makes it (``nvidia``, ``amd``, ``google``): which collective library can drive it (NCCL, RCCL)
    vendor: str = "nvidia"
    #: the same table's FP8 measurement, where one was made
    mamf_fp8: Mamf | None = None

    def peak(self, precision: str = DEFAULT_PRECISION) -> float:
        if precision not in PRECISIONS:
            raise InputError("device.precision", precision, "a precision, one of " + ", ".join(PRECISIONS))
        if precision == "bf16" and "bf16" not in self.peak_flops:
            precision = "fp16"  # Volta has no bf16: its tensor-core rate is fp16's
        if precision not in self.peak_flops:
            raise InputError("device.precision", precision, f"a precision {self.name}'s datasheet rates: "
                             + ", ".join(self.peak_flops))
        return self.peak_flops[precision]


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name).lower().replace("nvidia", "").replace("tesla", ""))


@functools.cache
def catalog() -> dict[str, CatalogDevice]:
    """Every catalog device by its name (read once from ``devices.yaml``)."""
    data = yaml.safe_load(CATALOG_PATH.read_text(encoding="utf-8"))
    out = {}
    for name, entry in data.items():
        out[name] = CatalogDevice(
            name, {p: float(v) * 1e12 for p, v in entry["peak"].items()}, parse_size(entry["memory"], "memory"),
            parse_bandwidth(entry["bandwidth"], "bandwidth"), entry.get("units"),
            parse_size(entry["l2"], "l2") if "l2" in entry else None, entry["link"], entry["source"],
            tuple(entry.get("aliases", ())), _mamf(entry.get("mamf")), str(entry["vendor"]),
            _mamf(entry.get("mamf_fp8"), "fp8"))
    return out


def _mamf(entry: dict[str, Any] | None, precision: str = "bf16") -> Mamf | None:
    if entry is None:
        return None
    m, n, k = (int(x) for x in str(entry["shape"]).split("x"))
    return Mamf(float(entry[precision]), (m, n, k), str(entry["software"]), str(entry.get("borrowed_from", "")))


@functools.cache
def _index() -> dict[str, str]:
    index = {}
    for name, device in catalog().items():
        for alias in (name, *device.aliases):
            index[_key(alias)] = name
    return index


def lookup(name: str) -> CatalogDevice | None:
    """The catalog device a name means (its own name or an alias, case and punctuation ignored), or None."""
    found = _index().get(_key(name))
    return catalog()[found] if found else None


def closest(name: str, count: int = 3) -> list[str]:
    """Catalog names nearest to ``name`` (for the warning on an unknown device)."""
    keys = _index()
    near = difflib.get_close_matches(_key(name), list(keys), n=count * 3, cutoff=0.4)
    return list(dict.fromkeys(keys[k] for k in near))[:count] or list(catalog())[:count]


def fill(data: dict[str, Any], field_names: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """A cluster file's ``device`` mapping with what it leaves out taken from the catalog; records which keys
    came from where in ``sources`` (``file``, ``catalog: <datasheet>``, ``conservative``). ``field_names``: the
    keys a file may write each ``Device`` field as (its declared aliases, the first as files write it), passed
    by the model so the two cannot drift."""
    names_of = dict(field_names or {})
    if not isinstance(data, dict) or data.get("name") is None:
        return data  # no name: the model says what is missing
    data = {k: v for k, v in data.items() if v is not None}  # a key set to null is a key left out
    if not str(data["name"]).strip():
        raise InputError("device.name", data["name"], "a device's name: a catalog device (such as "
                         f"{', '.join(list(catalog())[:3])}) or one that states its peak_flops and memory")
    stated = {k for k in data if k not in ("name", "precision", "sources")}
    sources = {k: "file" for k in stated}
    device = lookup(str(data["name"]))
    precision = str(data.get("precision", DEFAULT_PRECISION))
    if precision not in PRECISIONS:
        raise InputError("device.precision", precision, "a precision, one of " + ", ".join(PRECISIONS))
    if device is not None:
        device.peak(precision)  # a precision the datasheet rates (no fp8 on a V100), even where peak_flops is stated
        wanted = {"peak_flops": lambda: device.peak(precision), "memory_bytes": lambda: device.memory_bytes,
                  "memory_bandwidth_Bps": lambda: device.memory_bandwidth_Bps, "sms": lambda: device.units}
        for field, value in wanted.items():
            names = names_of.get(field, (field,))
            if any(k in data for k in names):
                continue
            got = value()
            if got is not None:
                data[names[0]] = got
                sources[names[0]] = f"catalog {device.name}: {device.source}"
    elif "peak_flops" not in data:
        name = str(data["name"])
        raise InputError("device.name", name, f"a catalog device (closest: {', '.join(closest(name))}) or a "
                         "device that states its peak_flops and memory")
    has_bandwidth = any(k in data for k in names_of.get("memory_bandwidth_Bps", ("memory_bandwidth_Bps",)))
    if not has_bandwidth and "peak_flops" in data:

        peak = parse_flops(data["peak_flops"], "peak_flops")
        data["memory_bandwidth"] = peak / CONSERVATIVE_RIDGE_FLOP_PER_BYTE
        sources["memory_bandwidth"] = (f"conservative: peak / {CONSERVATIVE_RIDGE_FLOP_PER_BYTE:g} FLOP/byte "
                                       "(device not in the catalog)")
    data["sources"] = sources
    return data


#: Warnings held back while a file is still being checked (None: print at once); see :func:`warnings_if_valid`.
_DEFERRED: list[tuple[str, str]] | None = None


@contextmanager
def warnings_if_valid() -> Iterator[None]:
    """Hold device warnings back until the block ends without an error: a file that is then refused gets the
    refusal alone, one line, not a warning about a device it will never price and then the error."""
    global _DEFERRED
    outer, _DEFERRED = _DEFERRED, []
    held = _DEFERRED
    try:
        yield
    except BaseException:
        for name, _ in held:
            _WARNED.discard(name)
        raise
    finally:
        _DEFERRED = outer
    for _, line in held:
        print(line, file=sys.stderr)


def warn_if_assumed(name: str, bandwidth_Bps: float | None, sources: dict[str, str]) -> None:
    """The one warning line for a device priced with the conservative bandwidth (once per name a process)."""
    if not sources.get("memory_bandwidth", "").startswith("conservative") or name in _WARNED:
        return
    _WARNED.add(name)
    line = (f"flexcomm: warning: device.name: {name!r} is not in the device catalog and its file gives no "
            f"memory_bandwidth; assuming {(bandwidth_Bps or 0) / 1e9:.0f} GB/s (peak / "
            f"{CONSERVATIVE_RIDGE_FLOP_PER_BYTE:g}); closest catalog devices: {', '.join(closest(name))}")
    if _DEFERRED is not None:
        _DEFERRED.append((name, line))
    else:
        print(line, file=sys.stderr)
