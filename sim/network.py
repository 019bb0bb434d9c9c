"""Flow-level network of the discrete-event simulator: transfers as simpy events on max-min fairly shared links.

Why three modules: the simulator's network is routing (:mod:`sim.routes`: the cluster's links and each set of
flows routed once), a sharing rule (:mod:`sim.rate_allocation`: max-min fair rates, checked on its own) and this
process layer, which alone knows about time: it starts and finishes transfers, advances the bytes moved
between events, and schedules the next completion. :class:`Network` is the three composed; its methods are
the simulator's whole network interface.

Coflows
    A transfer is a *coflow*: flows ``(src_rank, dst_rank)`` that all carry the same bytes and
    advance at one common rate. The steps of a collective are synchronous (a step ends when its
    slowest flow ends), so coupling the rates changes no step time and keeps the simulation at one
    rate per step instead of one per flow. Rates are recomputed only when a coflow starts or ends or a
    link changes, and only the next completion is scheduled (one simpy timeout, not a process per flow).

Independent flows
    :meth:`Network.send` starts flows that each move at their own fair rate (all-to-all traffic, MoE
    dispatch, pipeline sends; and every transfer under ``coupling="flow"``). ``sharing="rtt"`` weights every
    row's share by the inverse of its route latency, SimGrid CM02's sharing penalty (see :mod:`sim.referee`).

Latency
    A coflow's bytes start to move after its latency: the largest route latency of its flows
    (or ``latency_s`` when the caller gives one, e.g. k steps aggregated into one coflow pay
    k latencies). On an uncontended link a coflow of n bytes per flow therefore takes exactly
    ``alpha + n beta``, the cost model's step.

Speed
    Routing happens once per :class:`~sim.routes.Pattern` (cache it with ``key``; the collectives do), so a
    step of a 1024-rank ring costs a few simpy events and no numpy work when it runs alone (its
    rate is cached per capacity version); see :mod:`sim.rate_allocation` for the filling with several.

Dynamics (:mod:`sim.dynamics`) change a link's bandwidth through :meth:`Network.set_bandwidth`
(absolute, e.g. a trace) or a multiplicative *factor slot* (:meth:`add_factor_slot`,
:meth:`set_factors`, e.g. jitter, congestion, a fault taking a link down with factor 0); the
capacity is base x product of the factors, so several sources compose. Latency changes
(:meth:`set_latency`) apply to coflows that start afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import simpy
from simpy.events import Event, Timeout

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.sim.rate_allocation import SHARINGS, CoflowShare, FlowShares, RateAllocator
from flexcomm.sim.records import CoflowRecord, Recorder
from flexcomm.sim.routes import Pattern, Routes

#: A coflow is finished when less than this fraction of its bytes is left (float round-off).
_DONE_FRACTION = 1e-9
#: How a collective step's flows share: one rate for all (coflow) or each its own (flow); between rows, see
#: :data:`sim.rate_allocation.SHARINGS` (re-exported here for the commands that offer both).
COUPLINGS = ("coflow", "flow")

__all__ = ["COUPLINGS", "SHARINGS", "CountingEnvironment", "Network", "Pattern"]


class CountingEnvironment(simpy.Environment):
    """A simpy Environment that counts the events it processes (for benchmarks)."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


class _Coflow(CoflowShare):
    """A transfer in flight: its share of the links (the base class) plus its bytes, event and record data."""

    __slots__ = ("net", "nbytes", "remaining", "tag", "event", "start", "lat_end", "binfo")

    demand: Pattern

    def __init__(self, net: Network, pattern: Pattern, nbytes: float, tag: str, event: Event, start: float) -> None:
        # CoflowShare.__init__ inlined (keep the two in step): one of these is made per collective step, and the
        # extra call cost a few percent of the simulator's per-step time
        self.demand = pattern
        self.rate = 0.0
        self.bneck = -1
        self.bcap = 0.0
        self.bflows = 0.0
        self.sh = (pattern.res, pattern.cnt)
        self.sh_lists = ([], [])
        self.pv = None
        self.pv_version = -1
        self.pv_min = (0.0, -1, 0.0)
        self.net = net
        self.nbytes = nbytes
        self.remaining = nbytes
        self.tag = tag
        self.event = event
        self.start = start
        self.lat_end = start
        self.binfo: dict[int, list[float]] = {}

    def activate(self, _event: Event | None = None) -> None:
        self.net._activate(self)


class _FlowSet(FlowShares):
    """Independent flows started together (see :meth:`Network.send`): per-flow bytes left, rate, latency."""

    __slots__ = ("net", "pattern", "nbytes", "remaining", "tag", "event", "start", "merge", "pending", "done",
                 "end", "moved_from")

    def __init__(self, net: Network, pattern: Pattern, nbytes: np.ndarray, latency: np.ndarray, tag: str,
                 event: Event, start: float, merge: bool) -> None:
        n = pattern.n_flows
        super().__init__(pattern.flow_matrix(), latency, np.zeros(n, dtype=bool))
        self.net, self.pattern, self.tag, self.event, self.start, self.merge = net, pattern, tag, event, start, merge
        self.nbytes = nbytes
        self.remaining = nbytes.copy()
        self.pending = np.ones(n, dtype=bool)
        self.done = np.zeros(n, dtype=bool)
        self.end = np.full(n, np.nan)
        self.moved_from = start + latency

    def activate_due(self, now: float) -> bool:
        """Flows whose latency has passed start moving (zero-byte ones end at once); True if any did."""
        due = self.pending & (self.moved_from <= now + 1e-15)
        if not due.any():
            return False
        self.pending &= ~due
        empty = due & (self.nbytes <= 0)
        self.done |= empty
        self.end[empty] = now
        self.moving |= due & ~empty
        return True

    def advance(self, dt: float) -> None:
        if self.moving.any():
            self.remaining = np.where(self.moving, self.remaining - self.rate * dt, self.remaining)

    def settle(self, now: float) -> bool:
        """Finish flows that are done and start those due; True if the set of moving flows changed."""
        over = self.moving & (self.remaining <= _DONE_FRACTION * np.maximum(self.nbytes, 1.0))
        if over.any():
            self.moving &= ~over
            self.done |= over
            self.remaining[over] = 0.0
            self.end[over] = now
        started = self.activate_due(now)
        return bool(over.any() or started)

    def finished(self) -> bool:
        return bool(self.done.all())

    def next_event(self, now: float) -> float:
        """Seconds to this set's next completion or activation."""
        best = math.inf
        go = self.moving & (self.rate > 0)
        if go.any():
            best = float((self.remaining[go] / self.rate[go]).min())
        if self.pending.any():
            best = min(best, float(self.moved_from[self.pending].min()) - now)
        return max(best, 0.0)

    def records(self) -> list[CoflowRecord]:
        net, pattern = self.net, self.pattern
        out = []
        for i in range(pattern.n_flows):
            res = int(self.bneck[i])
            name = net.link_names[res] if res >= 0 else ""
            cap = float(net.rates.cap[res]) if res >= 0 else 0.0
            out.append(CoflowRecord(self.tag, self.start, float(self.moved_from[i]), float(self.end[i]),
                                    float(self.nbytes[i]), 1, name, cap, 1.0))
        return out

    def merged(self, records: list[CoflowRecord]) -> CoflowRecord:
        """One record for the whole set (what :meth:`Network.transfer` hands back under flow coupling)."""
        last = max(records, key=lambda r: r.end)
        return CoflowRecord(self.tag, self.start, max(r.latency_end for r in records), last.end,
                            float(self.nbytes.max()), len(records), last.bottleneck, last.bottleneck_Bps,
                            last.bottleneck_flows)


class Network:
    """Links of a cluster, the coflows on them and their max-min fair rates (see the module doc).

    ``dynamics`` is one object or a sequence of objects with an ``attach(network)`` method
    (:mod:`sim.dynamics`); ``recorder`` collects one :class:`~sim.records.CoflowRecord` per
    finished coflow (a fresh :class:`~sim.records.Recorder` if not given). ``routes``
    (:class:`~sim.routes.Routes`) holds the links and routes, ``rates``
    (:class:`~sim.rate_allocation.RateAllocator`) the sharing.
    """

    def __init__(
        self,
        env: simpy.Environment,
        cluster: Cluster | str,
        dynamics: Any = None,
        recorder: Recorder | None = None,
        coupling: str = "coflow",
        sharing: str = "max-min",
    ) -> None:
        if coupling not in COUPLINGS:
            raise InputError("coupling", coupling, "one of " + ", ".join(COUPLINGS))
        if sharing not in SHARINGS:
            raise InputError("sharing", sharing, "one of " + ", ".join(SHARINGS))
        self.env = env
        self.cluster = load_cluster(cluster)
        self.recorder = recorder if recorder is not None else Recorder()
        self.coupling = coupling
        self.sharing = sharing
        self._build()
        self._observers: list[Any] = []
        self._cancelled: tuple[str, ...] = ()
        self._last = env.now
        self._gen = 0
        self._timer_at: float | None = None
        self._on_timer_cb = self._on_timer
        #: cost models of the communicator views NCCL calls are priced on (sim.collectives fills it per view)
        self.cost_models: dict[Any, Any] = {}
        if dynamics is not None:
            for source in dynamics if isinstance(dynamics, (list, tuple)) else [dynamics]:
                source.attach(self)

    # --- construction -------------------------------------------------------------------------
    def _build(self) -> None:
        """Route tables from the cluster, capacities at the cluster's bandwidths, the allocator over them."""
        routes = self.routes = Routes(self.cluster)
        self.fabric = routes.fabric
        self.n_inter_edges = routes.n_inter_edges
        self.n_resources = routes.n_resources
        self.edge_names = routes.edge_names
        self.link_names = routes.link_names
        self.world_size = routes.world_size
        self.vertex_node = routes.vertex_node
        self._base = routes.bandwidth.copy()
        self.cluster_bandwidth = self._base.copy()  # as the cluster file describes it, before any trace
        self._factors: list[np.ndarray] = []
        self.rates = RateAllocator(self._base.copy(), self.sharing)

    # --- routing (sim.routes) -----------------------------------------------------------------
    def pattern(self, pairs: Sequence[tuple[int, int]] | np.ndarray | Pattern, key: Any = None) -> Pattern:
        """Route the flows ``pairs`` (src_rank, dst_rank) once; with ``key``, cache the result under it."""
        return self.routes.pattern(pairs, key)

    def cached(self, key: Any) -> Pattern | None:
        """The pattern cached under ``key`` by :meth:`pattern`, or None."""
        return self.routes.patterns.get(key)  # Routes.cached without its call: asked once per collective step

    def edges(self, spec: str | Iterable[str]) -> np.ndarray:
        """Edge ids named by a link spec (an edge ``u->v`` or ``u<->v``, a vertex, ``*`` or ``intra``) or a list."""
        return self.routes.edges(spec)

    def resources(self, spec: str | Iterable[str]) -> np.ndarray:
        """Link (resource) ids named by a link spec: what :meth:`set_bandwidth` and factors act on."""
        return self.routes.resources(spec)

    def node_of(self, rank: int) -> int:
        """The node of ``rank``."""
        return self.routes.node_of(rank)

    def node_vertices(self, node: int) -> list[str]:
        """The fabric vertices that are node ``node``'s own (its host, or its NICs on a rail-optimized
        fabric; on an NVLink-domain fabric the scale-out's): what failing the node takes down."""
        return self.routes.node_vertices(node)

    def island_of(self, rank: int) -> int:
        """The island of ``rank``: its node, or its NVLink domain (ranks of one island use device ports)."""
        return self.routes.island_of(rank)

    # --- flows --------------------------------------------------------------------------------
    def transfer(
        self,
        pairs: Sequence[tuple[int, int]] | np.ndarray | Pattern,
        nbytes: float,
        tag: str = "",
        latency_s: float | None = None,
    ) -> Event:
        """Start a coflow of ``nbytes`` per flow; the returned event fires with its :class:`CoflowRecord`.

        ``latency_s`` replaces the flows' route latency (the largest one) that is paid before any
        byte moves.
        """
        pattern = pairs if isinstance(pairs, Pattern) else self.pattern(pairs)
        nbytes = float(nbytes)
        if not nbytes >= 0 or not math.isfinite(nbytes):
            raise InputError("nbytes", nbytes, "non-negative finite bytes per flow")
        if self.coupling == "flow":
            return self.send(pattern, nbytes, tag, latency_s, merge=True)
        env = self.env
        latency = pattern.latency() if latency_s is None else float(latency_s)
        if not latency >= 0:
            raise InputError("latency_s", latency_s, "a non-negative latency")
        event = Event(env)
        coflow = _Coflow(self, pattern, nbytes, tag, event, env.now)
        if latency > 0:
            Timeout(env, latency).callbacks.append(coflow.activate)
        else:
            self._activate(coflow)
        return event

    def send(self, pairs: Sequence[tuple[int, int]] | np.ndarray | Pattern, nbytes: float | np.ndarray,
             tag: str = "", latency_s: float | None = None, merge: bool = False) -> Event:
        """Start independent flows: each moves at its own max-min (or RTT-weighted) fair rate after its own
        route's latency (``latency_s`` replaces it for every flow), as TCP connections do.

        ``nbytes`` is one size for all flows or one per flow. The event fires when the last flow ends, with
        the list of their :class:`~sim.records.CoflowRecord` (``merge``: one record spanning them all, what
        :meth:`transfer` returns). All-to-all traffic, MoE dispatch and pipeline sends are flows of this kind;
        rates are filled over a sparse flow x link matrix, so thousands of flows cost one numpy pass per
        bottleneck level, not a Python loop per flow.
        """
        pattern = pairs if isinstance(pairs, Pattern) else self.pattern(pairs)
        sizes = np.broadcast_to(np.asarray(nbytes, dtype=float), (pattern.n_flows,)).copy()
        if np.any(~np.isfinite(sizes)) or np.any(sizes < 0):
            raise InputError("nbytes", nbytes, "non-negative finite bytes per flow")
        latency = pattern.flow_latencies() if latency_s is None else np.full(pattern.n_flows, float(latency_s))
        if np.any(latency < 0):
            raise InputError("latency_s", latency_s, "a non-negative latency")
        event = Event(self.env)
        fs = _FlowSet(self, pattern, sizes, latency, tag, event, self.env.now, merge)
        self._advance(self.env.now)
        self.rates.flowsets.append(fs)
        fs.activate_due(self.env.now)
        if fs.finished():  # zero bytes, zero latency: over now, and no longer the allocator's to settle again
            self.rates.flowsets.remove(fs)
            self._finish_flowset(fs)
            return event
        self.rates.struct_version += 1
        self.rates.reallocate()
        self._reschedule()
        return event

    def cancel(self, prefix: str) -> int:
        """Drop every coflow whose tag starts with ``prefix``, now and when it would start later.

        What NCCL's communicator abort does: without it a collective abandoned after a timeout
        would resume when its link is repaired and steal bandwidth from the restarted job. The
        dropped coflows' events never fire. Returns how many active coflows were dropped.
        """
        rates = self.rates
        self._cancelled = (*self._cancelled, prefix)
        self._advance(self.env.now)
        keep = [c for c in rates.coflows if not c.tag.startswith(prefix)]
        kept_sets = [f for f in rates.flowsets if not f.tag.startswith(prefix)]
        dropped = len(rates.coflows) - len(keep) + len(rates.flowsets) - len(kept_sets)
        if dropped:
            rates.coflows = keep
            rates.flowsets = kept_sets
            rates.struct_version += 1
            rates.reallocate()
            self._reschedule()
        return dropped

    # --- the event loop -----------------------------------------------------------------------
    def _activate(self, coflow: _Coflow) -> None:
        if self._cancelled and coflow.tag.startswith(self._cancelled):
            return  # its collective was aborted while the coflow paid its latency
        now = self.env.now
        coflow.lat_end = now
        if coflow.nbytes <= 0:
            self._finish(coflow, now)
            return
        self._advance(now)
        rates = self.rates
        rates.coflows.append(coflow)
        rates.struct_version += 1
        rates.reallocate()
        self._reschedule()

    def _advance(self, now: float) -> None:
        """Move every row's bytes at its rate from the last event until ``now`` (observers see the interval)."""
        dt = now - self._last
        self._last = now
        if dt <= 0:
            return
        for observer in self._observers:
            observer.interval(now - dt, now, self)
        rates = self.rates
        for fs in rates.flowsets:
            fs.advance(dt)
        for c in rates.coflows:
            moved = c.rate * dt
            if moved > 0:
                c.remaining -= moved
                info = c.binfo.get(c.bneck)
                if info is None:
                    c.binfo[c.bneck] = [moved, c.bcap, c.bflows]
                else:
                    info[0] += moved
                    if c.bcap < info[1]:
                        info[1] = c.bcap
                    if c.bflows > info[2]:
                        info[2] = c.bflows

    def _finish_flowset(self, fs: _FlowSet) -> None:
        records = fs.records()
        for record in records:
            self.recorder.add(record)
        fs.event.succeed(fs.merged(records) if fs.merge else records)

    def observe(self, observer: Any) -> None:
        """Call ``observer.interval(t0, t1, network)`` for every interval the rates were constant (e.g. a
        link-utilization recorder: each resource carries sum of its rows' rate x demand in [t0, t1))."""
        self._observers.append(observer)

    def link_load(self) -> np.ndarray:
        """Bytes/s each link (resource) carries now: every coflow's and moving flow's rate times its use."""
        return self.rates.link_load()

    def _reschedule(self) -> None:
        """One simpy timeout for the next completion (or flow activation); a newer one supersedes it."""
        best = math.inf
        rates = self.rates
        for c in rates.coflows:
            if c.rate > 0:
                t = c.remaining / c.rate
                if t < best:
                    best = t
        for fs in rates.flowsets:
            best = min(best, fs.next_event(self.env.now))
        if best == math.inf:
            self._gen += 1  # nothing can finish (links down): invalidate any pending timer
            self._timer_at = None
            return
        if best < 0:
            best = 0.0
        at = self.env.now + best
        if at == self._timer_at:
            return
        self._gen += 1
        self._timer_at = at
        Timeout(self.env, best, self._gen).callbacks.append(self._on_timer_cb)

    def _settle_flowsets(self, now: float) -> bool:
        """Finish the flows that are done and start those due; True if any flow set's moving flows changed."""
        rates = self.rates
        changed = False
        for fs in list(rates.flowsets):
            changed |= fs.settle(now)
            if fs.finished():
                rates.flowsets.remove(fs)
                self._finish_flowset(fs)
        if changed:
            rates.struct_version += 1
        return changed

    def _on_timer(self, event: Event) -> None:
        if event._value != self._gen:
            return  # superseded by a later reallocation
        self._timer_at = None
        now = self.env.now
        self._advance(now)
        rates = self.rates
        changed = self._settle_flowsets(now) if rates.flowsets else False
        active = rates.coflows
        done = [c for c in active if c.remaining <= _DONE_FRACTION * c.nbytes]
        if not done and not changed and active:
            # round-off left a sliver on the coflow the timer was for: finish the closest
            done = [min((c for c in active if c.rate > 0), key=lambda c: c.remaining / c.rate)]
        if not done:
            if active or rates.flowsets:
                rates.reallocate()
                self._reschedule()
            return
        rates.coflows = [c for c in active if c not in done] if len(done) < len(active) else []
        rates.struct_version += 1
        for c in done:
            c.remaining = 0.0
            self._finish(c, now)
        if rates.coflows or rates.flowsets:
            rates.reallocate()
            self._reschedule()

    def _finish(self, c: _Coflow, now: float) -> None:
        if c.binfo:
            res, info = max(c.binfo.items(), key=lambda item: item[1][0])
            name, cap, flows = self.link_names[res], info[1], info[2]
        else:  # no byte moved (zero-byte coflow): name the pattern's own narrowest link
            _, res, cap, flows = c.demand.solo_rate(self.rates.cap, self.rates.cap_version)
            name = self.link_names[res] if c.nbytes > 0 else ""
        record = CoflowRecord(c.tag, c.start, c.lat_end, now, c.nbytes, c.demand.n_flows, name, cap, flows)
        self.recorder.add(record)
        c.event.succeed(record)

    # --- link state for dynamics and faults ---------------------------------------------------
    def bandwidth(self, spec: str | Iterable[str]) -> np.ndarray:
        """Current capacities (bytes/s) of the links named by ``spec``."""
        return self.rates.cap[self.resources(spec)].copy()

    def base_bandwidth(self, spec: str | Iterable[str]) -> np.ndarray:
        """Capacities before multiplicative factors (the cluster's, or a trace's last value)."""
        return self._base[self.resources(spec)].copy()

    def latency(self, spec: str | Iterable[str]) -> np.ndarray:
        """Current latencies (s) of the edges named by ``spec``."""
        return self.routes.edge_lat[self.edges(spec)].copy()

    def set_bandwidth(self, spec: str | Iterable[str] | np.ndarray, bandwidth_Bps: float | np.ndarray) -> None:
        """Set the base capacity of links (by spec or resource ids); rates are recomputed now."""
        ids = spec if isinstance(spec, np.ndarray) else self.resources(spec)
        value = np.asarray(bandwidth_Bps, dtype=float)
        if np.any(~np.isfinite(value)) or np.any(value < 0):
            raise InputError("bandwidth", bandwidth_Bps, "a non-negative finite bandwidth in bytes/s")
        self._base[ids] = value
        self._capacity_changed(ids)

    def set_latency(self, spec: str | Iterable[str] | np.ndarray, latency_s: float | np.ndarray) -> None:
        """Set the latency of edges (by spec or edge ids); coflows starting from now on see it."""
        ids = spec if isinstance(spec, np.ndarray) else self.edges(spec)
        value = np.asarray(latency_s, dtype=float)
        if np.any(~np.isfinite(value)) or np.any(value < 0):
            raise InputError("latency", latency_s, "a non-negative finite latency in seconds")
        self.routes.set_latency(ids, value)

    def add_factor_slot(self) -> int:
        """A new multiplicative factor per link (all 1.0) for one source of dynamics; returns its index."""
        self._factors.append(np.ones(self.n_resources))
        return len(self._factors) - 1

    def set_factors(self, slot: int, ids: np.ndarray, factors: float | np.ndarray) -> None:
        """Set slot ``slot``'s factor of resources ``ids``; rates are recomputed now."""
        self._factors[slot][ids] = factors
        self._capacity_changed(ids)

    def _capacity_changed(self, ids: np.ndarray) -> None:
        """Capacity = base x every factor on links ``ids``; refill unless the rates stay max-min fair."""
        cap = self._base[ids].copy()
        for factor in self._factors:
            cap *= factor[ids]
        rates = self.rates
        rates.set_capacity(ids, cap)
        if not rates.coflows and not rates.flowsets:
            return
        if not rates.flowsets and self.sharing == "max-min" and len(ids) <= 4 and rates.still_fair(ids):
            return
        self._advance(self.env.now)
        rates.reallocate()
        self._reschedule()

    @property
    def active_coflows(self) -> int:
        """Coflows moving bytes now (not those still paying their latency)."""
        return len(self.rates.coflows)
