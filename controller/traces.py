"""Network traces for the controller: piecewise-constant (latency, bandwidth) over a run, seeded.

Why: a learned controller is only worth something on networks it was not trained on, so traces come in
two disjoint seeded families, ``train`` and ``heldout`` (different ``SeedSequence`` streams), plus the
paper's dynamic scenarios C1/C2 (held out: never used for training) and simple static links for tests.

A trace is step-indexed like :class:`emulation.network.NetworkClock`'s C1/C2: each phase starts at a
*fraction* of the run, so the same trace stretches over any number of iterations. :class:`TraceClock` is a
drop-in replacement for an :class:`~emulation.engine.EmulatedRun`'s clock.

CLI spec (``--traces``): comma-separated items, each ``c1``, ``c2``, ``static:LATENCY:BANDWIDTH`` (units
allowed, e.g. ``static:1ms:1Gbit/s``), ``train:K`` / ``heldout:K`` (K random traces of that family) or a
CSV file with columns ``start`` (fraction of the run in [0, 1), first row 0), ``latency``, ``bandwidth``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import read_text_bounded
from flexcomm.costmodel.units import parse_bandwidth, parse_time
from flexcomm.emulation.network import DYNAMIC_NETWORKS, NetworkClock

FAMILIES = {"train": 1, "heldout": 2}
GBIT = 1.25e8  #: bytes/s in one Gbit/s

#: Ranges of the random traces: the paper's latencies (1-50 ms) widened down to data-centre values and
#: its bandwidths (1-25 Gbit/s), both log-uniform.
LATENCY_RANGE_S = (2e-4, 50e-3)
BANDWIDTH_RANGE_BPS = (1 * GBIT, 25 * GBIT)


@dataclass(frozen=True)
class NetworkTrace:
    """``phases``: (start fraction of the run, latency s, bandwidth bytes/s), starts increasing from 0."""

    name: str
    phases: tuple[tuple[float, float, float], ...]

    def __post_init__(self) -> None:
        if not self.phases or self.phases[0][0] != 0:
            raise InputError(f"trace {self.name}", self.phases, "phases starting at fraction 0")
        starts = [p[0] for p in self.phases]
        if any(b <= a for a, b in zip(starts, starts[1:], strict=False)) or starts[-1] >= 1:
            raise InputError(f"trace {self.name}", starts, "strictly increasing start fractions in [0, 1)")
        for _, latency, bandwidth in self.phases:
            if not (math.isfinite(latency) and latency >= 0 and math.isfinite(bandwidth) and bandwidth > 0):
                raise InputError(f"trace {self.name}", (latency, bandwidth), "latency >= 0 s and bandwidth > 0 B/s")

    def at(self, fraction: float) -> tuple[float, float]:
        """(latency s, bandwidth B/s) at ``fraction`` of the run."""
        current = self.phases[0]
        for phase in self.phases:
            if phase[0] <= fraction:
                current = phase
        return current[1], current[2]

    def rows(self) -> list[dict[str, float | str]]:
        return [{"trace": self.name, "start": s, "latency_s": lat, "bandwidth_Bps": bw} for s, lat, bw in self.phases]


def static_trace(latency_s: float, bandwidth_Bps: float, name: str | None = None) -> NetworkTrace:
    """One link for the whole run (the simple trace of the tests)."""
    label = name or f"static-{latency_s * 1e3:g}ms-{bandwidth_Bps / GBIT:g}G"
    return NetworkTrace(label, ((0.0, float(latency_s), float(bandwidth_Bps)),))


def paper_trace(name: str) -> NetworkTrace:
    """Tyagi & Swany's C1 or C2 (the schedules of :data:`emulation.network.DYNAMIC_NETWORKS`)."""
    if name not in DYNAMIC_NETWORKS:
        raise InputError("trace", name, "one of " + ", ".join(DYNAMIC_NETWORKS))
    phases, epochs = DYNAMIC_NETWORKS[name]
    return NetworkTrace(name, tuple((start / epochs, lat, gbit * GBIT) for start, lat, gbit in phases))


def random_trace(rng: np.random.Generator, name: str, max_phases: int = 4) -> NetworkTrace:
    """1..``max_phases`` phases at random fractions, each link log-uniform in the ranges above."""
    count = int(rng.integers(1, max_phases + 1))
    starts = [0.0] + sorted(float(round(x, 3)) for x in rng.uniform(0.1, 0.9, size=count - 1))
    starts = [s for i, s in enumerate(starts) if i == 0 or s > starts[i - 1]]
    lat = np.exp(rng.uniform(*np.log(LATENCY_RANGE_S), size=len(starts)))
    bw = np.exp(rng.uniform(*np.log(BANDWIDTH_RANGE_BPS), size=len(starts)))
    return NetworkTrace(name, tuple((s, float(a), float(b)) for s, a, b in zip(starts, lat, bw, strict=True)))


def family(kind: str, count: int, seed: int = 0) -> list[NetworkTrace]:
    """``count`` random traces of family ``train`` or ``heldout``; disjoint streams, same seed same traces."""
    if kind not in FAMILIES:
        raise InputError("trace family", kind, "train or heldout")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InputError(f"{kind} traces", count, "an integer >= 1")
    rng = np.random.default_rng(np.random.SeedSequence([seed, FAMILIES[kind]]))
    return [random_trace(rng, f"{kind}-{i}") for i in range(count)]


def load_trace_csv(path: str | Path) -> NetworkTrace:
    """A CSV with ``start`` (fraction of the run), ``latency`` and ``bandwidth`` (units allowed)."""
    path = Path(path)
    rows = list(csv.DictReader(read_text_bounded(path, "trace", "CSV file").splitlines()))  # bounded, regular
    if not rows or any(c not in rows[0] for c in ("start", "latency", "bandwidth")):
        raise InputError("trace", str(path), "a CSV with columns start, latency, bandwidth and at least one row")
    phases = []
    for number, row in enumerate(rows, start=2):
        where = f"({path.name} line {number})"
        try:
            start = float(row["start"])
        except (TypeError, ValueError):
            raise InputError(f"start {where}", row["start"], "a fraction of the run in [0, 1)") from None
        phases.append((start, parse_time(row["latency"], f"latency {where}"),
                       parse_bandwidth(row["bandwidth"], f"bandwidth {where}")))
    return NetworkTrace(path.stem, tuple(phases))


def parse_traces(spec: str, seed: int = 0) -> list[NetworkTrace]:
    """The ``--traces`` spec (see the module docstring) as a list of traces."""
    out: list[NetworkTrace] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in DYNAMIC_NETWORKS:
            out.append(paper_trace(item))
        elif item.startswith("static:"):
            parts = item.split(":")
            if len(parts) != 3:
                raise InputError("traces", item, "static:LATENCY:BANDWIDTH, e.g. static:1ms:1Gbit/s")
            latency = parse_time(parts[1], "traces latency")
            out.append(static_trace(latency, parse_bandwidth(parts[2], "traces bandwidth")))
        elif item.split(":")[0] in FAMILIES:
            kind, _, count = item.partition(":")
            try:
                number = int(count) if count else 1
            except ValueError:
                raise InputError("traces", item, f"{kind}:K with an integer K >= 1") from None
            out.extend(family(kind, number, seed))
        elif Path(item).is_file():
            out.append(load_trace_csv(item))
        else:
            raise InputError("traces", item, "c1, c2, static:LATENCY:BANDWIDTH, train:K, heldout:K or a CSV file")
    if not out:
        raise InputError("traces", spec, "at least one trace")
    return out


class TraceClock(NetworkClock):
    """A :class:`NetworkClock` whose phases come from a :class:`NetworkTrace` stretched over ``steps``."""

    def __init__(self, trace: NetworkTrace, steps: int, price_scale: float = 1.0, jitter: float = 0.0,
                 seed: int = 0) -> None:
        self.trace = trace
        super().__init__([(int(round(start * steps)), CostModel.from_link(lat, bw), lat, bw)
                          for start, lat, bw in trace.phases], price_scale, jitter, seed)


def describe(traces: Sequence[NetworkTrace]) -> str:
    """One line per trace: its phases in ms and Gbit/s."""
    lines = []
    for t in traces:
        parts = [f"{s:.2f}: {lat * 1e3:.3g}ms/{bw / GBIT:.3g}G" for s, lat, bw in t.phases]
        lines.append(f"{t.name}: " + ", ".join(parts))
    return "\n".join(lines)
