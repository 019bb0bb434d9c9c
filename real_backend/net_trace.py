"""A network trace for the testbed: the simulator's trace format, checked and turned into tc and delay changes.

The format is the simulator's (:class:`sim.dynamics.TraceDynamics`): ``time_s, link, bandwidth, latency``,
units allowed, an empty cell leaving that value unchanged. On a testbed of N ranks the link names are those
of the simulator's cluster for it (N nodes of one device behind one switch, :func:`testbed_cluster`):

* ``*``: every rank's link; ``node3``: both directions of rank 3's link; ``node3->switch``: what rank 3
  sends (the tbf on its own veth end); ``switch->node3``: what it receives (the tbf on the bridge's end).
* ``bandwidth``: the tc rate of those links (> 0). The simulator replays it as the TCP goodput on them
  (:data:`real_backend.testbed.GOODPUT_FACTOR` x the rate) when it models the testbed.
* ``latency``: one hop's latency, as the simulator's edges carry it, so a path rank -> rank is two hops;
  the testbed has one delay line for every packet, so latency is set on ``*`` only and the line then delays
  every packet by two hops' worth.

Stricter than the simulator, because a testbed cannot undo a change: times must not decrease down the file,
and the trace must end within the run that applies it. A run under a trace lasts until its last line; a line
on ``*`` with neither bandwidth nor latency marks that end without changing anything (the built-in C1 and
C2 end so).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from flexcomm.costmodel.cluster import MEASURED_HOST_DEVICE
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import read_text_bounded
from flexcomm.costmodel.units import parse_bandwidth, parse_time
from flexcomm.emulation.network import DYNAMIC_NETWORKS

#: The paper's dynamic networks, from the emulation's table, as testbed traces: (duration, fastest rate).
DEFAULT_DURATION_S = 120.0
DEFAULT_MAX_RATE = "200Mbit/s"
_LINK = re.compile(r"^(?:\*|node(\d+)|node(\d+)->switch|switch->node(\d+))$")


@dataclass(frozen=True)
class TestbedChange:
    """One change at ``time_s``: new rates per (rank, direction) and/or a new one-way delay (whole path)."""

    time_s: float
    rates: tuple[tuple[int, str, float], ...]  #: (rank, "egress" | "ingress", bytes/s)
    delay_s: float | None
    line: int


@dataclass(frozen=True)
class TestbedTrace:
    name: str
    changes: tuple[TestbedChange, ...]
    csv_text: str

    @property
    def duration_s(self) -> float:
        """The time of the last line: a run under the trace lasts this long."""
        return self.changes[-1].time_s if self.changes else 0.0

    @property
    def has_latency(self) -> bool:
        return any(c.delay_s is not None for c in self.changes)

    def state_at(self, time_s: float, initial_rate_Bps: float = math.nan, initial_delay_s: float = 0.0
                 ) -> tuple[int, float, float]:
        """(phase index, slowest rate in B/s, one-way delay s) in force ``time_s`` after the start.

        The phase is the index of the last change at or before ``time_s`` (0 before the first one)."""
        phase, rate, delay = 0, initial_rate_Bps, initial_delay_s
        for index, change in enumerate(self.changes):
            if change.time_s > time_s and index > 0:
                break
            phase = index
            if change.rates:
                rate = min(r for _, _, r in change.rates)
            if change.delay_s is not None:
                delay = change.delay_s
        return phase, rate, delay


def builtin_trace(name: str, duration_s: float = DEFAULT_DURATION_S, max_rate: str | float = DEFAULT_MAX_RATE
                  ) -> str:
    """The CSV text of the paper's ``c1`` or ``c2`` scaled to ``duration_s`` and to ``max_rate`` for its
    fastest phase (every rate scaled by the same factor: C1's 25 -> 1 Gbit/s becomes 200 -> 8 Mbit/s)."""
    key = name.strip().lower()
    if key not in DYNAMIC_NETWORKS:
        raise InputError("trace", name, "c1, c2 or a CSV file with time_s, link, bandwidth, latency")
    schedule, epochs = DYNAMIC_NETWORKS[key]
    top = max(gbits for _, _, gbits in schedule)
    scale = parse_bandwidth(max_rate, "max-bandwidth") / (top * 1.25e8)
    lines = ["time_s,link,bandwidth,latency"]
    for start, latency, gbits in schedule:
        rate_bits = gbits * 1e9 * scale
        lines.append(f"{start / epochs * duration_s:.3f},*,{rate_bits / 1e6:.6g}Mbit/s,{latency / 2 * 1e3:.6g}ms")
    lines.append(f"{duration_s:.3f},*,,")  # the end of the run: nothing changes, the last state holds until then
    return "\n".join(lines) + "\n"


def testbed_cluster(ranks: int, rate_Bps: float, latency_s: float) -> dict:
    """The simulator's model of a testbed (one device per node, one switch): a cluster mapping."""
    return {"name": f"testbed-{ranks}", "nodes": ranks, "devices_per_node": 1,
            "device": dict(MEASURED_HOST_DEVICE),
            "intra_link": {"latency": "1us", "bandwidth": "10GB/s"},
            "inter_link": {"latency": max(latency_s, 1e-9), "bandwidth": rate_Bps}, "topology": "flat"}


def load_trace(spec: str | Path, ranks: int, duration_s: float = DEFAULT_DURATION_S,
               max_rate: str | float = DEFAULT_MAX_RATE, lifetime_s: float | None = None) -> TestbedTrace:
    """``c1``, ``c2`` or a CSV file, checked for a testbed of ``ranks`` ranks (one-line errors naming the
    line and column); ``lifetime_s``: the run that applies it, which the trace must end within."""
    text_spec = str(spec)
    if text_spec.strip().lower() in ("c1", "c2"):
        text, name = builtin_trace(text_spec, duration_s, max_rate), text_spec.strip().lower()
    else:
        path = Path(text_spec)
        try:
            text = read_text_bounded(path, "trace", "CSV file")  # no FIFO, no device, bounded size
        except InputError as exc:
            if not exc.expected.startswith("a "):
                raise
            raise InputError("trace", text_spec, f"c1, c2 or {exc.expected}") from None
        name = path.name
    trace = parse_trace(text, name, ranks)
    if lifetime_s is not None and trace.duration_s > lifetime_s:
        raise InputError("trace", f"{name} lasts {trace.duration_s:g} s", f"a trace ending within the run's "
                         f"{lifetime_s:g} s (shorten it or raise --timeout)")
    return trace


def parse_trace(text: str, source: str, ranks: int) -> TestbedTrace:
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or "time_s" not in reader.fieldnames or "link" not in reader.fieldnames or not (
            "bandwidth" in reader.fieldnames or "latency" in reader.fieldnames):
        raise InputError("trace", f"{source} columns {reader.fieldnames}",
                         "a header with time_s, link and bandwidth and/or latency")
    changes: list[TestbedChange] = []
    last = 0.0
    for number, row in enumerate(reader, start=2):
        cells = {k: (v or "").strip() for k, v in row.items() if k is not None}
        if not any(cells.values()):
            continue
        where = f"({source} line {number})"
        time_s = parse_time(cells.get("time_s", ""), f"time_s {where}")
        if time_s < last:
            raise InputError(f"time_s {where}", cells["time_s"], f"a time >= the previous line's {last:g} s "
                             "(a testbed applies changes in file order)")
        last = time_s
        link = cells.get("link", "")
        match = _LINK.match(link)
        if not match:
            raise InputError(f"link {where}", link,
                             f"*, nodeR, nodeR->switch or switch->nodeR with R in 0..{ranks - 1}")
        rank_text = next((g for g in match.groups() if g is not None), None)
        targets = range(ranks) if rank_text is None else [int(rank_text)]
        if rank_text is not None and not 0 <= int(rank_text) < ranks:
            raise InputError(f"link {where}", link, f"a link of one of the testbed's ranks 0..{ranks - 1}")
        directions = ("egress",) if "->switch" in link else ("ingress",) if link.startswith("switch->") else (
            "egress", "ingress")
        rates: tuple[tuple[int, str, float], ...] = ()
        if cells.get("bandwidth"):
            rate = parse_bandwidth(cells["bandwidth"], f"bandwidth {where}")
            if rate <= 0:
                raise InputError(f"bandwidth {where}", cells["bandwidth"], "a positive rate such as 100Mbit/s")
            rates = tuple((r, d, rate) for r in targets for d in directions)
        delay = None
        if cells.get("latency"):
            if link != "*":
                raise InputError(f"link {where}", link, "* for a latency (the testbed has one delay line for "
                                 "every packet)")
            delay = 2 * parse_time(cells["latency"], f"latency {where}")  # two hops, rank -> switch -> rank
            if delay > 1.0:
                raise InputError(f"latency {where}", cells["latency"], "at most 500ms per hop")
        if not rates and delay is None and link != "*":
            raise InputError(f"bandwidth {where}", "", "a bandwidth and/or a latency to set (a line with "
                             "neither, on *, only marks the end of the run)")
        changes.append(TestbedChange(time_s, rates, delay, number))
    if not changes:
        raise InputError("trace", source, "at least one change")
    return TestbedTrace(source, tuple(changes), text)
