"""Time-varying and unpredictable networks: traces, seeded random processes and background traffic.

Every source has ``attach(network)``, which :class:`sim.network.Network` calls when it is built
with ``dynamics=[...]``; it starts a simpy process (one per source, not one per link) that changes
the network at the right times. Random sources draw everything from a ``numpy.random.Generator``
seeded by ``seed``, in a fixed order, so the same seed gives the same run bit for bit and
different seeds give different runs. The processes run forever: run the environment ``until`` the
workload's process (as :func:`sim.collectives.simulate_collective` does), not until it is empty.

Link specs (the ``link``/``links`` arguments and the trace's ``link`` column): an edge name such as
``node3->switch``; ``node3<->switch`` for both directions; a vertex such as ``node3`` (both
directions of node 3's NIC on a switched network, its two cables on a ring) or ``dev5``; ``*``
for every inter-node link; ``intra`` for every device port.

Bandwidth changes act on the network at once (the rates of coflows in flight are recomputed);
latency changes apply to coflows that start afterwards.
"""

from __future__ import annotations

import csv
import math
from collections import deque
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_EVENTS_PER_SIM_SECOND, read_text_bounded
from flexcomm.costmodel.units import parse_bandwidth, parse_size, parse_time

if TYPE_CHECKING:
    from flexcomm.sim.network import Network

#: Largest lognormal jitter sigma (see JitterDynamics).
MAX_JITTER_SIGMA = 3.0

TRACE_COLUMNS = ("time_s", "link", "bandwidth", "latency")


def _links(links: str | Sequence[str]) -> str | list[str]:
    return links if isinstance(links, str) else list(links)


def _positive(field: str, value: float, expected: str) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise InputError(field, value, expected)
    return value


# --- traces -----------------------------------------------------------------------------------

#: Changes over which a trace's rate is measured: a burst of a few close rows is not a rate, and a lone row
#: far away must not dilute 200,000 rows 1 ns apart.
RATE_WINDOW = 1000


class _ChangeRate:
    """The densest rate of a trace's changes, as :data:`MAX_EVENTS_PER_SIM_SECOND` counts them: distinct
    change times per simulated second over :data:`RATE_WINDOW` consecutive ones (rows at one time are one
    change of several links, as a jitter redraw is). A trace of 200,000 rows 1 ns apart is 10^9 a second."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.recent: deque[float] = deque(maxlen=RATE_WINDOW)
        self.in_order = True

    def add(self, time_s: float) -> None:
        if not self.in_order or (self.recent and time_s == self.recent[-1]):
            return
        if self.recent and time_s < self.recent[-1]:
            self.in_order = False  # check_all measures it once the file is sorted
            return
        self.recent.append(time_s)
        if len(self.recent) == RATE_WINDOW:
            self._check(len(self.recent) - 1, self.recent[-1] - self.recent[0])

    def check_all(self, times: list[float]) -> None:
        distinct = np.unique(np.asarray(times, dtype=float))
        if len(distinct) < 2:
            return
        window = min(RATE_WINDOW, len(distinct))
        spans = distinct[window - 1:] - distinct[:len(distinct) - window + 1]
        self._check(window - 1, float(spans.min()))

    def _check(self, changes: int, span_s: float) -> None:
        rate = changes / span_s if span_s > 0 else math.inf
        MAX_EVENTS_PER_SIM_SECOND.check(f"trace ({self.source})", rate,
                                        f"{changes + 1:,} changes within {span_s:.3g} s")


@dataclass(frozen=True)
class TraceEvent:
    """At ``time_s``, set ``link``'s bandwidth (bytes/s) and/or latency (s); None leaves it unchanged."""

    time_s: float
    link: str
    bandwidth_Bps: float | None = None
    latency_s: float | None = None


class TraceDynamics:
    """Replays measured or scripted link changes (``TraceDynamics.from_csv("trace.csv")``).

    Events are applied in time order (rows with equal times in file order). A bandwidth is the
    link's new base capacity (jitter or congestion factors still multiply it).
    """

    def __init__(self, events: Iterable[TraceEvent], source: str = "trace") -> None:
        self.events = sorted(events, key=lambda e: e.time_s)  # stable: equal times keep their order
        self.source = source

    @classmethod
    def from_csv(cls, path: str | Path) -> TraceDynamics:
        """Read a CSV with columns ``time_s, link, bandwidth, latency`` (units allowed, empty = unchanged).

        Malformed input raises :class:`InputError` naming the column and line, e.g.
        ``bandwidth (trace.csv line 4)``.
        """
        path = Path(path)
        text = read_text_bounded(path, "trace", "CSV file")  # a regular file of bounded size: no FIFO, no device
        return cls.from_rows(csv.DictReader(text.splitlines()), source=path.name)

    @classmethod
    def from_rows(cls, rows: Iterable[dict[str, Any]], source: str = "trace") -> TraceDynamics:
        """Build from mappings with the CSV's keys (e.g. ``csv.DictReader`` or a list of dicts)."""
        events: list[TraceEvent] = []
        rate = _ChangeRate(source)
        header_checked = False
        for number, row in enumerate(rows, start=2):  # line 1 is the header
            if not header_checked:
                missing = [c for c in ("time_s", "link") if c not in row]
                if missing or not ("bandwidth" in row or "latency" in row):
                    raise InputError(
                        "trace", f"{source} columns {sorted(k for k in row if k is not None)}",
                        "a header with time_s, link and bandwidth and/or latency",
                    )
                header_checked = True
            if None in row:  # csv.DictReader puts surplus cells under None
                raise InputError(f"{source} line {number}", row[None], f"at most {len(TRACE_COLUMNS)} cells")

            def cell(name: str, row: dict[str, Any] = row) -> str:
                value = row.get(name)
                return "" if value is None else str(value).strip()

            where = f"({source} line {number})"
            if not any(cell(c) for c in TRACE_COLUMNS):
                continue  # blank line
            time_text = cell("time_s")
            if not time_text:
                raise InputError(f"time_s {where}", time_text, "a time in seconds such as 0.5 or 500ms")
            time_s = parse_time(time_text, f"time_s {where}")
            link = cell("link")
            if not link:
                raise InputError(f"link {where}", link, "a link such as node3->switch, node3 or *")
            bandwidth = parse_bandwidth(cell("bandwidth"), f"bandwidth {where}") if cell("bandwidth") else None
            latency = parse_time(cell("latency"), f"latency {where}") if cell("latency") else None
            if bandwidth is None and latency is None:
                raise InputError(f"bandwidth {where}", "", "a bandwidth and/or a latency to set")
            events.append(TraceEvent(time_s, link, bandwidth, latency))
            rate.add(time_s)  # a file in time order is refused at its first dense stretch, not after parsing
        if not header_checked:
            raise InputError("trace", source, "a header with time_s, link and bandwidth and/or latency")
        rate.check_all([e.time_s for e in events])
        return cls(events, source)

    def attach(self, network: Network) -> None:
        resolved = []
        for event in self.events:
            try:
                edges = network.edges(event.link)
            except InputError as exc:
                raise InputError(f"link ({self.source})", event.link, exc.expected) from None
            resolved.append((event, edges, np.unique(network.routes.edge_res[edges])))
        network.env.process(self._run(network, resolved))

    @staticmethod
    def _run(network: Network, resolved: list[tuple[TraceEvent, np.ndarray, np.ndarray]]) -> Generator:
        env = network.env
        for event, edges, resources in resolved:
            if event.time_s > env.now:
                yield env.timeout(event.time_s - env.now)
            if event.latency_s is not None:
                network.set_latency(edges, event.latency_s)
            if event.bandwidth_Bps is not None:
                network.set_bandwidth(resources, event.bandwidth_Bps)


# --- seeded random processes ------------------------------------------------------------------


class JitterDynamics:
    """Every ``period_s`` each link's bandwidth is its base times an independent lognormal factor.

    The factor is exp(N(-sigma^2/2, sigma^2)), so its mean is 1 (the average bandwidth is the
    nominal one) and its coefficient of variation is sqrt(exp(sigma^2) - 1) ~ sigma.
    """

    def __init__(self, sigma: float = 0.1, period_s: float = 1e-3, links: str | Sequence[str] = "*",
                 seed: int = 0) -> None:
        # sigma 3 already makes half the periods run below 1/20 of the bandwidth; beyond it almost every
        # period is stalled and the simulated job never ends
        if not math.isfinite(sigma) or not 0 <= sigma <= MAX_JITTER_SIGMA:
            raise InputError("sigma", sigma, f"a standard deviation of log bandwidth in [0, {MAX_JITTER_SIGMA:g}]")
        self.sigma = float(sigma) + 0.0  # -0.0 -> 0.0 (numpy refuses a negative zero scale)
        self.period_s = _positive("period_s", period_s, "a positive period in seconds")
        # one redraw of every link per period
        MAX_EVENTS_PER_SIM_SECOND.check("period_s", 1.0 / self.period_s, period_s)
        self.links = _links(links)
        self.seed = seed

    def attach(self, network: Network) -> None:
        ids = network.resources(self.links)
        slot = network.add_factor_slot()
        network.env.process(self._run(network, ids, slot, np.random.default_rng(self.seed)))

    def _run(self, network: Network, ids: np.ndarray, slot: int, rng: np.random.Generator) -> Generator:
        mu = -0.5 * self.sigma**2
        while True:
            network.set_factors(slot, ids, rng.lognormal(mu, self.sigma, size=len(ids)))
            yield network.env.timeout(self.period_s)


class MarkovCongestion:
    """Two-state (good / congested) continuous-time Markov chain per link.

    A link stays good for an exponential time of mean ``mean_good_s`` and congested for one of mean
    ``mean_congested_s``; while congested its bandwidth is ``congested_factor`` x its base.
    Initial states are drawn from the stationary distribution (congested with probability
    mean_congested / (mean_good + mean_congested)) unless ``start_good``.
    """

    def __init__(self, mean_good_s: float = 0.05, mean_congested_s: float = 0.01, congested_factor: float = 0.25,
                 links: str | Sequence[str] = "*", seed: int = 0, start_good: bool = False) -> None:
        self.mean_good_s = _positive("mean_good_s", mean_good_s, "a positive mean time in seconds")
        self.mean_congested_s = _positive("mean_congested_s", mean_congested_s, "a positive mean time in seconds")
        # each link switches twice per good + congested cycle, on average
        cycle = self.mean_good_s + self.mean_congested_s
        MAX_EVENTS_PER_SIM_SECOND.check("mean_congested_s", 2.0 / cycle, cycle)
        if not 0 <= congested_factor <= 1:
            raise InputError("congested_factor", congested_factor, "a fraction of the bandwidth in [0, 1]")
        self.congested_factor = float(congested_factor)
        self.links = _links(links)
        self.seed = seed
        self.start_good = start_good

    def attach(self, network: Network) -> None:
        ids = network.resources(self.links)
        slot = network.add_factor_slot()
        network.env.process(self._run(network, ids, slot, np.random.default_rng(self.seed)))

    def _run(self, network: Network, ids: np.ndarray, slot: int, rng: np.random.Generator) -> Generator:
        env = network.env
        n = len(ids)
        p_congested = self.mean_congested_s / (self.mean_good_s + self.mean_congested_s)
        congested = np.zeros(n, dtype=bool) if self.start_good else rng.random(n) < p_congested
        mean = np.where(congested, self.mean_congested_s, self.mean_good_s)
        next_switch = env.now + rng.exponential(mean)
        network.set_factors(slot, ids, np.where(congested, self.congested_factor, 1.0))
        while n:
            when = float(next_switch.min())
            if when > env.now:
                yield env.timeout(when - env.now)
            flip = np.flatnonzero(next_switch <= when)
            congested[flip] = ~congested[flip]
            mean = np.where(congested[flip], self.mean_congested_s, self.mean_good_s)
            next_switch[flip] = when + rng.exponential(mean)
            network.set_factors(slot, ids[flip], np.where(congested[flip], self.congested_factor, 1.0))


class CrossTraffic:
    """Background flows of other jobs: Poisson arrivals between random pairs of different nodes.

    Flows arrive at ``rate_per_s`` on average; each goes from one node to another (drawn uniformly
    from ``nodes``, default all) and carries an exponentially distributed size of mean
    ``mean_bytes`` (``size="fixed"`` for exactly ``mean_bytes``). Each is a one-flow coflow tagged
    ``tag`` that shares links max-min fairly with everything else, so a collective's records show
    the links it had to share. ``start_s``/``stop_s`` bound the arrivals in simulated time.
    """

    def __init__(self, rate_per_s: float, mean_bytes: float | str, seed: int = 0, nodes: Sequence[int] | None = None,
                 size: str = "exponential", tag: str = "cross-traffic", start_s: float = 0.0,
                 stop_s: float = math.inf) -> None:
        self.rate_per_s = _positive("rate_per_s", rate_per_s, "a positive arrival rate in flows per second")
        MAX_EVENTS_PER_SIM_SECOND.check("rate_per_s", self.rate_per_s)
        self.mean_bytes = _positive("mean_bytes", parse_size(mean_bytes, "mean_bytes"), "a positive size")
        if size not in ("exponential", "fixed"):
            raise InputError("size", size, "exponential or fixed")
        self.size = size
        self.seed = seed
        self.nodes = None if nodes is None else [int(n) for n in nodes]
        self.tag = tag
        self.start_s = float(start_s)
        self.stop_s = float(stop_s)

    def attach(self, network: Network) -> None:
        nodes = np.arange(network.cluster.nodes) if self.nodes is None else np.asarray(self.nodes)
        if len(nodes) < 2:
            raise InputError("nodes", self.nodes, "at least two nodes for cross traffic")
        if nodes.min() < 0 or nodes.max() >= network.cluster.nodes:
            raise InputError("nodes", self.nodes, f"node indices 0..{network.cluster.nodes - 1}")
        network.env.process(self._run(network, nodes, np.random.default_rng(self.seed)))

    def _run(self, network: Network, nodes: np.ndarray, rng: np.random.Generator) -> Generator:
        env = network.env
        dpn = network.cluster.devices_per_node
        if self.start_s > env.now:
            yield env.timeout(self.start_s - env.now)
        while True:
            yield env.timeout(rng.exponential(1.0 / self.rate_per_s))
            if env.now >= self.stop_s:
                return
            a, b = rng.choice(len(nodes), size=2, replace=False)
            nbytes = rng.exponential(self.mean_bytes) if self.size == "exponential" else self.mean_bytes
            # the first device of each node: every device of a node reaches the network through its NIC
            src, dst = int(nodes[a]) * dpn, int(nodes[b]) * dpn
            pattern = network.cached(("cross-traffic", src, dst)) or network.pattern(
                [(src, dst)], key=("cross-traffic", src, dst))
            network.transfer(pattern, nbytes, tag=self.tag)
