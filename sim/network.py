"""Flow-level network of the discrete-event simulator: coflows sharing links max-min fairly.

Links
    Every directed edge of the cluster's fabric (:attr:`costmodel.cluster.Cluster.fabric`: NICs, leaf,
    spine and core uplinks, rail leaves, torus cables, a graph's cables) plus, for traffic inside an
    *island* (a node, or a multi-node NVLink domain), one out-edge and one in-edge per *device*:
    ``dev{r}->fabric{i}`` and ``fabric{i}->dev{r}`` with the cluster's ``intra_link`` bandwidth and
    half its latency each. The crossbar itself is non-blocking (an NVSwitch), so traffic inside an
    island contends only at the devices' own ports. Traffic between islands leaves from the rank's
    *endpoint* (its node's host, or on a rail-optimized fabric the NIC of its own rail) and takes the
    fabric's route (:meth:`Fabric.paths`; among equal-cost paths one hashed per flow, ``ecmp-hash``, or
    all of them with equal shares, ``ecmp-split``); the device-to-NIC hop is not modelled
    (GPU-direct RDMA). The latencies along a route add up to what the cost model prices.
    A full-duplex link has one capacity per direction; a half-duplex one (``duplex: half``) is *one*
    resource that both directions' flows share.

Coflows
    A transfer is a *coflow*: flows ``(src_rank, dst_rank)`` that all carry the same bytes and
    advance at one common rate. The steps of a collective are synchronous (a step ends when its
    slowest flow ends), so coupling the rates changes no step time and keeps the simulation at one
    rate per step instead of one per flow. Bandwidth is shared max-min fairly between coflows by
    progressive filling, where a coflow's demand on a link is (its flows crossing that link) x its
    rate, i.e. flows are treated fairly one by one, as TCP-like transports do. Rates are
    recomputed only when a coflow starts or ends or a link changes, and only the next completion
    is scheduled (one simpy timeout, not a process per flow).

Independent flows
    :meth:`Network.send` starts flows that each move at their own fair rate (all-to-all traffic, MoE
    dispatch, pipeline sends; and every transfer under ``coupling="flow"``). Their rates are filled together
    with the coflows' over a sparse row x link matrix (scipy), one numpy pass per bottleneck level, so a
    thousand flows cost a few passes rather than a thousand coflows. ``sharing="rtt"`` weights every row's
    share by the inverse of its route latency, SimGrid CM02's sharing penalty (see :mod:`sim.referee`).

Latency
    A coflow's bytes start to move after its latency: the largest route latency of its flows
    (or ``latency_s`` when the caller gives one, e.g. k steps aggregated into one coflow pay
    k latencies). On an uncontended link a coflow of n bytes per flow therefore takes exactly
    ``alpha + n beta``, the cost model's step.

Speed
    Routing happens once per :class:`Pattern` (cache it with ``key``; the collectives do), so a
    step of a 1024-rank ring costs a few simpy events and no numpy work when it runs alone (its
    rate is cached per capacity version). With several coflows, links only one of them crosses
    collapse into one virtual link per coflow and the filling runs as a heap over the shared
    links in plain Python (numpy above ``_SMALL_FILL`` entries). A capacity change on links that
    are nobody's bottleneck and still carry their load keeps the rates (they stay max-min fair),
    so most congestion flips cost no reallocation.

Dynamics (:mod:`sim.dynamics`) change a link's bandwidth through :meth:`Network.set_bandwidth`
(absolute, e.g. a trace) or a multiplicative *factor slot* (:meth:`add_factor_slot`,
:meth:`set_factors`, e.g. jitter, congestion, a fault taking a link down with factor 0); the
capacity is base x product of the factors, so several sources compose. Latency changes
(:meth:`set_latency`) apply to coflows that start afterwards.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import simpy
from simpy.events import Event, Timeout

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.topologies import hash_choice
from flexcomm.sim.records import CoflowRecord, Recorder

#: A coflow is finished when less than this fraction of its bytes is left (float round-off).
_DONE_FRACTION = 1e-9
#: Links whose fair share is within this relative distance of the bottleneck's freeze together.
_TIE = 1e-12
#: Below this many (coflow, link) pairs rates are filled in plain Python, above it with numpy.
_SMALL_FILL = 256
#: How a collective step's flows share: one rate for all (coflow) or each its own (flow); and between rows:
#: plain max-min, or RTT-weighted (share inversely proportional to route latency, SimGrid CM02).
COUPLINGS = ("coflow", "flow")
SHARINGS = ("max-min", "rtt")
#: Route keys hold the equal-cost path a flow takes in their low digits; _SPLIT means all of them, evenly.
_MAX_PATHS = 1 << 20
_SPLIT = _MAX_PATHS - 1

_LINK_FORM = (
    "an edge such as node0->switch (or node0<->switch for both directions), a vertex such as node0 or "
    "dev3 (every edge touching it), * (every inter-node link) or intra (every device port)"
)


class CountingEnvironment(simpy.Environment):
    """A simpy Environment that counts the events it processes (for benchmarks)."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


class Pattern:
    """A set of flows (src, dst ranks) routed once: the links they cross and how many of them cross each.

    Built by :meth:`Network.pattern` and reusable for any number of transfers (the p-1 steps of a
    ring all use one pattern), so routing is paid once.
    """

    __slots__ = (
        "_net", "src", "dst", "n_flows", "res", "cnt", "_edges", "_lat", "_lat_version",
        "_solo_version", "_solo", "_lists", "_all_edges", "_all_weights", "_matrix",
    )

    def __init__(self, net: Network, src: np.ndarray, dst: np.ndarray, edges: np.ndarray, weights: np.ndarray,
                 lat_edges: np.ndarray) -> None:
        self._net = net
        self.src = src
        self.dst = dst
        self.n_flows = len(src)
        self._edges = lat_edges  # (flows, hops) edge ids of each flow's first path, padded with the pad edge
        self._all_edges, self._all_weights = edges, weights  # every path's edges and their shares
        self._matrix = None
        counts = np.bincount(net._edge_res[edges].ravel(), weights=weights.ravel(),
                             minlength=net.n_resources + 1)[: net.n_resources]
        self.res = np.flatnonzero(counts > 1e-12)
        self.cnt = counts[self.res].astype(float)
        self._lat = 0.0
        self._lat_version = -1
        self._solo_version = -1
        self._solo: tuple[float, int, float, float] = (0.0, -1, 0.0, 0.0)
        self._lists: tuple[list[int], list[float]] | None = None

    def flow_latencies(self) -> np.ndarray:
        """Each flow's route latency (its first path), at the network's current latencies."""
        return self._net._edge_lat[self._edges].sum(axis=1) if self.n_flows else np.zeros(0)

    def flow_matrix(self) -> Any:
        """Sparse flows x resources matrix of each flow's use of each link (its share of the flow's bytes)."""
        from scipy import sparse

        if self._matrix is None:
            net = self._net
            rows = np.repeat(np.arange(self.n_flows), self._all_edges.shape[1])
            res = net._edge_res[self._all_edges].ravel()
            keep = (self._all_weights.ravel() > 0) & (res < net.n_resources)
            self._matrix = sparse.csr_matrix((self._all_weights.ravel()[keep], (rows[keep], res[keep])),
                                             shape=(self.n_flows, net.n_resources))
            self._matrix.sum_duplicates()
        return self._matrix

    def latency(self) -> float:
        """The largest route latency among the flows, at the network's current latencies."""
        net = self._net
        if self._lat_version != net._lat_version:
            self._lat = float(net._edge_lat[self._edges].sum(axis=1).max()) if self.n_flows else 0.0
            self._lat_version = net._lat_version
        return self._lat

    def solo_rate(self) -> tuple[float, int, float, float]:
        """Rate per flow, bottleneck resource, its capacity and its flow count when this runs alone."""
        net = self._net
        if self._solo_version != net._cap_version:
            share = net._cap[self.res] / self.cnt
            j = int(share.argmin())
            res = int(self.res[j])
            self._solo = (float(share[j]), res, float(net._cap[res]), float(self.cnt[j]))
            self._solo_version = net._cap_version
        return self._solo

    def lists(self) -> tuple[list[int], list[float]]:
        """The resources and counts as Python lists (for the small-problem filling loop)."""
        if self._lists is None:
            self._lists = (self.res.tolist(), self.cnt.tolist())
        return self._lists

    def links(self) -> list[str]:
        """Names of the links (resources) the pattern crosses."""
        return [self._net.link_names[i] for i in self.res]


class _Coflow:
    __slots__ = (
        "net", "pattern", "nbytes", "remaining", "tag", "event", "start", "lat_end", "rate",
        "bneck", "bcap", "bflows", "binfo", "sh", "sh_lists", "pv", "pv_version", "pv_min",
    )

    def __init__(self, net: Network, pattern: Pattern, nbytes: float, tag: str, event: Event, start: float) -> None:
        self.net = net
        self.pattern = pattern
        self.nbytes = nbytes
        self.remaining = nbytes
        self.tag = tag
        self.event = event
        self.start = start
        self.lat_end = start
        self.rate = 0.0
        self.bneck = -1
        self.bcap = 0.0
        self.bflows = 0.0
        self.binfo: dict[int, list[float]] = {}
        # links shared with other active coflows, and the private rest (set by Network._reallocate)
        self.sh: tuple[np.ndarray, np.ndarray] = (pattern.res, pattern.cnt)
        self.sh_lists: tuple[list[int], list[float]] = ([], [])
        self.pv: tuple[np.ndarray, np.ndarray] | None = None
        self.pv_version = -1
        self.pv_min: tuple[float, int, float] = (0.0, -1, 0.0)

    def activate(self, _event: Event | None = None) -> None:
        self.net._activate(self)


class _FlowSet:
    """Independent flows started together (see :meth:`Network.send`): per-flow bytes left, rate, latency."""

    __slots__ = ("net", "pattern", "nbytes", "remaining", "latency", "tag", "event", "start", "merge", "matrix",
                 "rate", "bneck", "moving", "pending", "done", "end", "moved_from")

    def __init__(self, net: Network, pattern: Pattern, nbytes: np.ndarray, latency: np.ndarray, tag: str,
                 event: Event, start: float, merge: bool) -> None:
        self.net, self.pattern, self.tag, self.event, self.start, self.merge = net, pattern, tag, event, start, merge
        self.nbytes = nbytes
        self.remaining = nbytes.copy()
        self.latency = latency
        self.matrix = pattern.flow_matrix()
        n = pattern.n_flows
        self.rate = np.zeros(n)
        self.bneck = np.full(n, -1, dtype=np.int64)
        self.moving = np.zeros(n, dtype=bool)
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
            cap = float(net._cap[res]) if res >= 0 else 0.0
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
    finished coflow (a fresh :class:`~sim.records.Recorder` if not given).
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
        self._active: list[_Coflow] = []
        self._flowsets: list[_FlowSet] = []
        self._observers: list[Any] = []
        self._cancelled: tuple[str, ...] = ()
        self._last = env.now
        self._gen = 0
        self._timer_at: float | None = None
        self._on_timer_cb = self._on_timer
        self._patterns: dict[Any, Pattern] = {}
        #: cost models of the communicator views NCCL calls are priced on (sim.collectives fills it per view)
        self.cost_models: dict[Any, Any] = {}
        self._lat_version = 0
        self._cap_version = 0
        self._struct_version = 0
        self._split_version = -1
        if dynamics is not None:
            for source in dynamics if isinstance(dynamics, (list, tuple)) else [dynamics]:
                source.attach(self)

    # --- construction -------------------------------------------------------------------------
    def _build(self) -> None:
        cluster = self.cluster
        fabric = cluster.fabric
        self.fabric = fabric
        graph = fabric.graph
        names: list[str] = []
        uv: list[tuple[str, str]] = []
        bandwidth: list[float] = []
        latency: list[float] = []
        duplex: list[str] = []
        for u, v, data in graph.edges(data=True):
            uv.append((u, v))
            names.append(data.get("name", f"{u}->{v}"))
            bandwidth.append(float(data["bandwidth_Bps"]))
            latency.append(float(data["latency_s"]))
            duplex.append(data.get("duplex", "full"))
        self.n_inter_edges = len(uv)
        intra = cluster.intra_link
        world = cluster.world_size
        island_of = fabric.island_of_rank
        for r in range(world):
            crossbar = f"fabric{int(island_of[r])}"
            for u, v in ((f"dev{r}", crossbar), (crossbar, f"dev{r}")):
                uv.append((u, v))
                names.append(f"{u}->{v}")
                bandwidth.append(float(intra.bandwidth_Bps))
                latency.append(float(intra.latency_s) / 2)
                duplex.append(intra.duplex)
        n_edges = len(uv)
        edge_id = {pair: i for i, pair in enumerate(uv)}
        edge_res = np.empty(n_edges + 1, dtype=np.int64)
        res_names: list[str] = []
        res_bw: list[float] = []
        for i, (u, v) in enumerate(uv):
            twin = edge_id.get((v, u))
            if duplex[i] == "half" and twin is not None and twin < i:
                edge_res[i] = edge_res[twin]
                continue
            edge_res[i] = len(res_names)
            res_names.append(f"{u}<->{v}" if duplex[i] == "half" and twin is not None else names[i])
            res_bw.append(bandwidth[i])
        self.n_resources = len(res_names)
        edge_res[n_edges] = self.n_resources  # the pad edge maps to a pad resource, never counted
        self._pad_edge = n_edges
        self._edge_res = edge_res
        self._edge_lat = np.array([*latency, 0.0])
        self._edge_id = edge_id
        self.edge_names = names
        self.link_names = res_names
        self._link_index = {name: i for i, name in enumerate(res_names)}
        self._edge_index = {name: i for i, name in enumerate(names)}
        self._base = np.array(res_bw, dtype=float)
        self.cluster_bandwidth = self._base.copy()  # as the cluster file describes it, before any trace
        self._factors: list[np.ndarray] = []
        self._cap = self._base.copy()
        self.world_size = world
        self._island_of = np.asarray(island_of, dtype=np.int64)
        self._endpoint_of = np.asarray(fabric.endpoint_of_rank, dtype=np.int64)
        self._n_endpoints = len(fabric.endpoints)
        self._dev_out = self.n_inter_edges + 2 * np.arange(world, dtype=np.int64)
        self._dev_in = self._dev_out + 1
        # routes between endpoints (and, under ecmp-hash, the path chosen), filled lazily
        self._routes: list[tuple[tuple[int, ...], tuple[float, ...], tuple[int, ...]]] = []
        self._route_width = 2
        self._lat_width = 2
        self._route_mat = np.full((0, 2), n_edges, dtype=np.int64)
        self._route_w = np.zeros((0, 2))
        self._lat_mat = np.full((0, 2), n_edges, dtype=np.int64)
        self._route_filled = 0
        self._route_dict: dict[int, int] = {}
        #: The node each endpoint vertex (a host, or a rail NIC) belongs to: what a node failure takes down.
        dpn = cluster.devices_per_node
        self.vertex_node: dict[str, int] = {}
        for r in range(0, world, dpn):
            self.vertex_node.setdefault(fabric.endpoints[int(self._endpoint_of[r])], r // dpn)
            for k in range(r, r + dpn):
                self.vertex_node.setdefault(fabric.endpoints[int(self._endpoint_of[k])], r // dpn)
        self._vertex_edges: dict[str, list[int]] = {}
        for i, (u, v) in enumerate(uv):
            self._vertex_edges.setdefault(u, []).append(i)
            self._vertex_edges.setdefault(v, []).append(i)

    def _route_id(self, key: int) -> int:
        """A route for key = (endpoint a * E + endpoint b) * _MAX_PATHS + path choice (-1 + _MAX_PATHS: all
        paths, each with an equal share, for ecmp-split)."""
        pair, choice = divmod(key, _MAX_PATHS)
        a, b = divmod(pair, self._n_endpoints)
        paths = self.fabric.paths(a, b)
        chosen = list(paths) if choice == _SPLIT else [paths[choice]]
        weight = 1.0 / len(chosen)
        use: dict[int, float] = {}
        for path in chosen:
            for e in path:
                eid = self._edge_id[e]
                use[eid] = use.get(eid, 0.0) + weight
        lat = tuple(self._edge_id[e] for e in chosen[0])
        rid = len(self._routes)
        self._routes.append((tuple(use), tuple(use.values()), lat))
        self._route_width = max(self._route_width, len(use))
        self._lat_width = max(self._lat_width, len(lat))
        return rid

    def _route_keys(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The route key of every flow (ranks of different islands)."""
        a, b = self._endpoint_of[src], self._endpoint_of[dst]
        pair = a * self._n_endpoints + b
        choice = np.zeros(len(src), dtype=np.int64)
        uniq, inverse = np.unique(pair, return_inverse=True)
        counts = np.array([self.fabric.path_count(*divmod(int(k), self._n_endpoints)) for k in uniq.tolist()],
                          dtype=np.int64)[inverse]
        multi = counts > 1
        if multi.any():
            if self.fabric.routing == "ecmp-split":
                choice[multi] = _SPLIT
            else:
                choice[multi] = hash_choice(self.fabric.seed, src[multi], dst[multi], counts[multi])
        return pair * _MAX_PATHS + choice

    def _route_rows(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded (edge ids, shares, latency edge ids) rows of the routes ``keys``."""
        uniq, inverse = np.unique(keys, return_inverse=True)
        table = self._route_dict
        ids = np.empty(len(uniq), dtype=np.int64)
        for j, key in enumerate(uniq.tolist()):
            rid = table.get(key)
            if rid is None:
                rid = table[key] = self._route_id(key)
            ids[j] = rid
        if len(self._routes) > self._route_filled:
            n = len(self._route_mat)
            if len(self._routes) > n:
                n = max(len(self._routes), 2 * n)
            if n > len(self._route_mat) or self._route_mat.shape[1] < self._route_width \
                    or self._lat_mat.shape[1] < self._lat_width:
                mat = np.full((n, self._route_width), self._pad_edge, dtype=np.int64)
                wts = np.zeros((n, self._route_width))
                lat = np.full((n, self._lat_width), self._pad_edge, dtype=np.int64)
                done = self._route_filled
                mat[:done, : self._route_mat.shape[1]] = self._route_mat[:done]
                wts[:done, : self._route_w.shape[1]] = self._route_w[:done]
                lat[:done, : self._lat_mat.shape[1]] = self._lat_mat[:done]
                self._route_mat, self._route_w, self._lat_mat = mat, wts, lat
            for i in range(self._route_filled, len(self._routes)):
                edges, shares, lat_edges = self._routes[i]
                self._route_mat[i, : len(edges)] = edges
                self._route_w[i, : len(shares)] = shares
                self._lat_mat[i, : len(lat_edges)] = lat_edges
            self._route_filled = len(self._routes)
        return self._route_mat[ids][inverse], self._route_w[ids][inverse], self._lat_mat[ids][inverse]

    # --- flows --------------------------------------------------------------------------------
    def pattern(self, pairs: Sequence[tuple[int, int]] | np.ndarray | Pattern, key: Any = None) -> Pattern:
        """Route the flows ``pairs`` (src_rank, dst_rank) once; with ``key``, cache the result under it."""
        if isinstance(pairs, Pattern):
            return pairs
        if key is not None:
            cached = self._patterns.get(key)
            if cached is not None:
                return cached
        arr = np.asarray(pairs, dtype=np.int64)
        if arr.size == 0:
            arr = arr.reshape(0, 2)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise InputError("pairs", pairs, "a sequence of (src_rank, dst_rank) pairs")
        src, dst = arr[:, 0].copy(), arr[:, 1].copy()
        if len(src) == 0:
            raise InputError("pairs", [], "at least one (src_rank, dst_rank) pair")
        bad = (src < 0) | (src >= self.world_size) | (dst < 0) | (dst >= self.world_size)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise InputError("pairs", (int(src[j]), int(dst[j])),
                             f"ranks 0..{self.world_size - 1} of cluster {self.cluster.name}")
        if (src == dst).any():
            j = int(np.flatnonzero(src == dst)[0])
            raise InputError("pairs", (int(src[j]), int(dst[j])), "a flow between two different ranks")
        inter = self._island_of[src] != self._island_of[dst]
        width = lat_width = 2
        rows = None
        if inter.any():
            rows = self._route_rows(self._route_keys(src[inter], dst[inter]))
            width = max(2, rows[0].shape[1])
            lat_width = max(2, rows[2].shape[1])
        edges = np.full((len(src), width), self._pad_edge, dtype=np.int64)
        weights = np.zeros((len(src), width))
        lat_edges = np.full((len(src), lat_width), self._pad_edge, dtype=np.int64)
        if rows is not None:
            edges[inter, : rows[0].shape[1]] = rows[0]
            weights[inter, : rows[1].shape[1]] = rows[1]
            lat_edges[inter, : rows[2].shape[1]] = rows[2]
        intra = ~inter
        for column, ports in ((0, self._dev_out[src[intra]]), (1, self._dev_in[dst[intra]])):
            edges[intra, column] = ports
            weights[intra, column] = 1.0
            lat_edges[intra, column] = ports
        pattern = Pattern(self, src, dst, edges, weights, lat_edges)
        if key is not None:
            self._patterns[key] = pattern
        return pattern

    def cached(self, key: Any) -> Pattern | None:
        """The pattern cached under ``key`` by :meth:`pattern`, or None."""
        return self._patterns.get(key)

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
        self._flowsets.append(fs)
        fs.activate_due(self.env.now)
        if fs.finished():
            self._finish_flowset(fs)
            return event
        self._struct_version += 1
        self._reallocate()
        self._reschedule()
        return event

    def cancel(self, prefix: str) -> int:
        """Drop every coflow whose tag starts with ``prefix``, now and when it would start later.

        What NCCL's communicator abort does: without it a collective abandoned after a timeout
        would resume when its link is repaired and steal bandwidth from the restarted job. The
        dropped coflows' events never fire. Returns how many active coflows were dropped.
        """
        self._cancelled = (*self._cancelled, prefix)
        self._advance(self.env.now)
        keep = [c for c in self._active if not c.tag.startswith(prefix)]
        kept_sets = [f for f in self._flowsets if not f.tag.startswith(prefix)]
        dropped = len(self._active) - len(keep) + len(self._flowsets) - len(kept_sets)
        if dropped:
            self._active = keep
            self._flowsets = kept_sets
            self._struct_version += 1
            self._reallocate()
            self._reschedule()
        return dropped

    # --- the rate engine ------------------------------------------------------------------------
    def _activate(self, coflow: _Coflow) -> None:
        if self._cancelled and coflow.tag.startswith(self._cancelled):
            return  # its collective was aborted while the coflow paid its latency
        now = self.env.now
        coflow.lat_end = now
        if coflow.nbytes <= 0:
            self._finish(coflow, now)
            return
        self._advance(now)
        self._active.append(coflow)
        self._struct_version += 1
        self._reallocate()
        self._reschedule()

    def _advance(self, now: float) -> None:
        dt = now - self._last
        self._last = now
        if dt <= 0:
            return
        for observer in self._observers:
            observer.interval(now - dt, now, self)
        for fs in self._flowsets:
            fs.advance(dt)
        for c in self._active:
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

    def _reallocate(self) -> None:
        """Max-min fair rates of the active coflows (progressive filling).

        Links that only one active coflow crosses cannot be shared, so each coflow's private links
        collapse into one virtual link carrying its private minimum (capacity / its flows there);
        filling then runs over the links coflows really share plus one virtual link per coflow,
        which keeps a 1024-rank ring plus a few background flows a problem of a few dozen links.
        """
        active = self._active
        if self._flowsets or (self.sharing == "rtt" and active):
            self._fill_rows()
            return
        if not active:
            return
        if len(active) == 1:
            c = active[0]
            c.rate, c.bneck, c.bcap, c.bflows = c.pattern.solo_rate()
            return
        if sum(len(c.pattern.res) for c in active) <= _SMALL_FILL:
            self._fill_small(active, split=False)  # small enough as it is
            return
        if self._split_version != self._struct_version:  # coflows came or went: who shares what
            users = np.bincount(np.concatenate([c.pattern.res for c in active]), minlength=self.n_resources)
            for c in active:
                res, cnt = c.pattern.res, c.pattern.cnt
                shared = users[res] > 1
                if shared.all():
                    c.sh = (res, cnt)
                    c.pv = None
                else:
                    c.sh = (res[shared], cnt[shared])
                    c.pv = (res[~shared], cnt[~shared])
                c.sh_lists = (c.sh[0].tolist(), c.sh[1].tolist())
                c.pv_version = -1
            self._split_version = self._struct_version
        if sum(len(c.sh[0]) for c in active) + len(active) <= _SMALL_FILL:
            self._fill_small(active, split=True)
        else:
            self._fill(active)

    def _private_min(self, c: _Coflow) -> tuple[float, int, float] | None:
        """(fair share, link, flows there) of the coflow's narrowest private link, or None."""
        if c.pv is None:
            return None
        if c.pv_version != self._cap_version:
            res, cnt = c.pv
            share = self._cap[res] / cnt
            j = int(share.argmin())
            c.pv_min = (float(share[j]), int(res[j]), float(cnt[j]))
            c.pv_version = self._cap_version
        return c.pv_min

    def _set_rate(self, c: _Coflow, level: float, key: int, meta: dict, load0: float) -> None:
        c.rate = level
        if key < 0:  # a coflow's virtual link: name its narrowest private link
            _, res, flows = meta[key]
            c.bneck, c.bcap, c.bflows = res, float(self._cap[res]), flows
        else:
            c.bneck, c.bcap, c.bflows = key, float(self._cap[key]), load0

    def _fill_small(self, active: list[_Coflow], split: bool) -> None:
        """Progressive filling in plain Python: faster than numpy for a few dozen links.

        ``split``: use the coflows' shared links plus one virtual link for their private ones
        (see :meth:`_reallocate`); otherwise every link of every coflow.
        """
        cap = self._cap
        remaining: dict[int, float] = {}
        load: dict[int, float] = {}  # only links with live coflows left on them
        meta: dict[int, tuple[float, int, float]] = {}
        entries: list[tuple[list[int], list[float]]] = []
        users: dict[int, list[int]] = {}
        for k, c in enumerate(active):
            keys, counts = c.sh_lists if split else c.pattern.lists()
            for r, n in zip(keys, counts, strict=True):
                if r in load:
                    load[r] += n
                    users[r].append(k)
                else:
                    load[r] = n
                    remaining[r] = float(cap[r])
                    users[r] = [k]
            private = self._private_min(c) if split else None
            if private is not None:
                key = -1 - k
                remaining[key], load[key], meta[key] = private[0], 1.0, private
                users[key] = [k]
                keys, counts = [*keys, key], [*counts, 1.0]
            entries.append((keys, counts))
        load0 = dict(load)
        # Pop links in order of fair share; a link's share never drops below the level already
        # reached (rem >= level * load before, so (rem - n level) / (load - n) >= level), so a heap
        # of (share, link) with stale entries skipped is exact: O(entries log links), not
        # O(levels x links).
        heap = [(remaining[r] / n, r) for r, n in load.items()]
        heapq.heapify(heap)
        frozen = [False] * len(active)
        level = 0.0
        while heap:
            share, link = heapq.heappop(heap)
            n = load.get(link)
            if n is None or share != remaining[link] / n:
                continue  # drained, or an outdated entry of a link that changed since
            if share > level:
                level = share
            for k in users[link]:
                if frozen[k]:
                    continue
                frozen[k] = True
                self._set_rate(active[k], level, link, meta, load0[link])
                keys, counts = entries[k]
                for r, m in zip(keys, counts, strict=True):
                    left = load[r] - m
                    if left > 0:
                        load[r] = left
                        rest = remaining[r] - m * level
                        remaining[r] = rest if rest > 0 else 0.0
                        if r != link:
                            heapq.heappush(heap, (remaining[r] / left, r))
                    else:
                        del load[r]

    def _fill(self, active: list[_Coflow]) -> None:
        """Progressive filling with numpy, for many shared links (e.g. concurrent collectives)."""
        n = len(active)
        meta: dict[int, tuple[float, int, float]] = {}
        key_parts: list[np.ndarray] = []
        cnt_parts: list[np.ndarray] = []
        for k, c in enumerate(active):
            keys, counts = c.sh
            private = self._private_min(c)
            if private is not None:
                meta[-1 - k] = private
                keys, counts = np.append(keys, -1 - k), np.append(counts, 1.0)
            key_parts.append(keys)
            cnt_parts.append(counts)
        keys_all = np.concatenate(key_parts)
        cnt_all = np.concatenate(cnt_parts)
        rows = np.repeat(np.arange(n), [len(p) for p in key_parts])
        touched, cols = np.unique(keys_all, return_inverse=True)
        remaining = np.empty(len(touched))
        real = touched >= 0
        remaining[real] = self._cap[touched[real]]
        remaining[~real] = [meta[int(key)][0] for key in touched[~real]]
        load = np.bincount(cols, weights=cnt_all, minlength=len(touched))
        load0 = load.copy()
        rate = np.zeros(n)
        bneck = np.full(n, -1, dtype=np.int64)
        live = np.ones(n, dtype=bool)
        entry_live = np.ones(len(rows), dtype=bool)
        share = np.empty(len(touched))
        while live.any():
            share.fill(np.inf)
            np.divide(remaining, load, out=share, where=load > 0)
            level = float(share.min())
            tight = share <= level * (1 + _TIE)
            hit = entry_live & tight[cols]
            hit_rows, first = np.unique(rows[hit], return_index=True)
            rate[hit_rows] = level
            bneck[hit_rows] = cols[np.flatnonzero(hit)[first]]
            frozen = np.zeros(n, dtype=bool)
            frozen[hit_rows] = True
            leaving = entry_live & frozen[rows]
            dec = np.bincount(cols[leaving], weights=cnt_all[leaving], minlength=len(touched))
            remaining -= dec * level
            np.maximum(remaining, 0.0, out=remaining)
            load -= dec
            live &= ~frozen
            entry_live &= ~leaving
        for k, c in enumerate(active):
            col = int(bneck[k])
            self._set_rate(c, float(rate[k]), int(touched[col]), meta, float(load0[col]))

    def _fill_rows(self) -> None:
        """Max-min fair rates of every coflow and every moving independent flow together, by progressive
        filling over a sparse row x link matrix (a row: one coflow, or one flow of a flow set).

        With ``sharing="rtt"`` a row's share is inversely proportional to its route latency (rate = level /
        latency), SimGrid CM02's sharing penalty; coflows take their slowest route's latency.
        """
        from scipy import sparse

        coflows = self._active
        row_res: list[np.ndarray] = [c.pattern.res for c in coflows]
        row_cnt: list[np.ndarray] = [c.pattern.cnt for c in coflows]
        weights = [c.pattern.latency() for c in coflows] if self.sharing == "rtt" else [1.0] * len(coflows)
        n_cof = len(coflows)
        blocks = [sparse.csr_matrix((np.concatenate(row_cnt) if row_cnt else np.zeros(0),
                                     np.concatenate(row_res) if row_res else np.zeros(0, dtype=np.int64),
                                     np.concatenate([[0], np.cumsum([len(r) for r in row_res])]).astype(np.int64)),
                                    shape=(n_cof, self.n_resources))]
        w = [np.asarray(weights, dtype=float)]
        moving_sets = []
        for fs in self._flowsets:
            rows = np.flatnonzero(fs.moving)
            if len(rows):
                blocks.append(fs.matrix[rows])
                w.append(fs.latency[rows] if self.sharing == "rtt" else np.ones(len(rows)))
                moving_sets.append((fs, rows))
        matrix = sparse.vstack(blocks, format="csr")
        weight = np.concatenate(w)
        weight[weight <= 0] = 1e-12  # a zero-latency route under RTT sharing: the largest share
        n = matrix.shape[0]
        rate = np.zeros(n)
        bneck = np.full(n, -1, dtype=np.int64)
        if n:
            scaled = sparse.diags(1.0 / weight) @ matrix  # demand per unit of level
            scaled_t = scaled.T.tocsr()
            remaining = self._cap.astype(float).copy()
            live = np.ones(n)
            load = scaled_t @ live
            while live.any():
                share = np.full(len(remaining), np.inf)
                np.divide(remaining, load, out=share, where=load > 1e-15)
                level = float(share.min())
                if not math.isfinite(level):
                    break  # rows on no link (cannot happen for real flows)
                tight = (share <= level * (1 + _TIE)).astype(float)
                hit = (matrix @ tight > 0) & (live > 0)
                frozen = np.flatnonzero(hit)
                rate[frozen] = level / weight[frozen]
                on = (matrix[frozen] @ sparse.diags(tight)).tocsr()  # each frozen row's tight links
                on.eliminate_zeros()
                first = on.indptr[:-1]
                has = np.diff(on.indptr) > 0
                bneck[frozen[has]] = on.indices[first[has]]  # the link its record names
                leaving = np.zeros(n)
                leaving[frozen] = 1.0
                dec = scaled_t @ leaving
                remaining = np.maximum(remaining - dec * level, 0.0)
                load = load - dec
                live[frozen] = 0.0
        for k, c in enumerate(coflows):
            res = int(bneck[k])
            c.rate, c.bneck = float(rate[k]), res
            c.bcap = float(self._cap[res]) if res >= 0 else 0.0
            c.bflows = float(c.pattern.cnt[np.searchsorted(c.pattern.res, res)]) if res >= 0 else 0.0
        offset = n_cof
        for fs, rows in moving_sets:
            fs.rate[:] = 0.0
            fs.rate[rows] = rate[offset: offset + len(rows)]
            fs.bneck[rows] = bneck[offset: offset + len(rows)]
            offset += len(rows)

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
        load = np.zeros(self.n_resources)
        for c in self._active:
            if c.rate > 0:
                np.add.at(load, c.pattern.res, c.pattern.cnt * c.rate)
        for fs in self._flowsets:
            if fs.moving.any():
                load += fs.matrix.T @ np.where(fs.moving, fs.rate, 0.0)
        return load

    def _reschedule(self) -> None:
        best = math.inf
        for c in self._active:
            if c.rate > 0:
                t = c.remaining / c.rate
                if t < best:
                    best = t
        for fs in self._flowsets:
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

    def _on_timer(self, event: Event) -> None:
        if event._value != self._gen:
            return  # superseded by a later reallocation
        self._timer_at = None
        now = self.env.now
        self._advance(now)
        changed = False
        if self._flowsets:
            for fs in list(self._flowsets):
                changed |= fs.settle(now)
                if fs.finished():
                    self._flowsets.remove(fs)
                    self._finish_flowset(fs)
            if changed:
                self._struct_version += 1
        active = self._active
        done = [c for c in active if c.remaining <= _DONE_FRACTION * c.nbytes]
        if not done and not changed and active:
            # round-off left a sliver on the coflow the timer was for: finish the closest
            done = [min((c for c in active if c.rate > 0), key=lambda c: c.remaining / c.rate)]
        if not done:
            if active or self._flowsets:
                self._reallocate()
                self._reschedule()
            return
        self._active = [c for c in active if c not in done] if len(done) < len(active) else []
        self._struct_version += 1
        for c in done:
            c.remaining = 0.0
            self._finish(c, now)
        if self._active or self._flowsets:
            self._reallocate()
            self._reschedule()

    def _finish(self, c: _Coflow, now: float) -> None:
        if c.binfo:
            res, info = max(c.binfo.items(), key=lambda item: item[1][0])
            name, cap, flows = self.link_names[res], info[1], info[2]
        else:  # no byte moved (zero-byte coflow): name the pattern's own narrowest link
            _, res, cap, flows = c.pattern.solo_rate()
            name = self.link_names[res] if c.nbytes > 0 else ""
        record = CoflowRecord(c.tag, c.start, c.lat_end, now, c.nbytes, c.pattern.n_flows, name, cap, flows)
        self.recorder.add(record)
        c.event.succeed(record)

    # --- link state for dynamics and faults ---------------------------------------------------
    def edges(self, spec: str | Iterable[str]) -> np.ndarray:
        """Edge ids named by a link spec (see ``_LINK_FORM``) or a list of specs."""
        if not isinstance(spec, str):
            parts = [self.edges(s) for s in spec]
            return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        text = spec.strip()
        if text == "*":
            return np.arange(self.n_inter_edges, dtype=np.int64)
        if text == "intra":
            return np.arange(self.n_inter_edges, len(self.edge_names), dtype=np.int64)
        if text in self._edge_index:
            return np.array([self._edge_index[text]], dtype=np.int64)
        if "<->" in text:
            u, _, v = text.partition("<->")
            ids = [self._edge_id[p] for p in ((u.strip(), v.strip()), (v.strip(), u.strip())) if p in self._edge_id]
            if ids:
                return np.array(sorted(ids), dtype=np.int64)
        if text in self._vertex_edges:
            return np.array(sorted(self._vertex_edges[text]), dtype=np.int64)
        nics = [e for vertex, ids in self._vertex_edges.items() if vertex.startswith(text + ".") for e in ids]
        if nics:  # a node of a rail-optimized fabric: every one of its NICs
            return np.array(sorted(set(nics)), dtype=np.int64)
        raise InputError("link", spec, _LINK_FORM)

    def resources(self, spec: str | Iterable[str]) -> np.ndarray:
        """Link (resource) ids named by a link spec: what :meth:`set_bandwidth` and factors act on."""
        return np.unique(self._edge_res[self.edges(spec)])

    def bandwidth(self, spec: str | Iterable[str]) -> np.ndarray:
        """Current capacities (bytes/s) of the links named by ``spec``."""
        return self._cap[self.resources(spec)].copy()

    def base_bandwidth(self, spec: str | Iterable[str]) -> np.ndarray:
        """Capacities before multiplicative factors (the cluster's, or a trace's last value)."""
        return self._base[self.resources(spec)].copy()

    def latency(self, spec: str | Iterable[str]) -> np.ndarray:
        """Current latencies (s) of the edges named by ``spec``."""
        return self._edge_lat[self.edges(spec)].copy()

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
        self._edge_lat[ids] = value
        self._lat_version += 1

    def add_factor_slot(self) -> int:
        """A new multiplicative factor per link (all 1.0) for one source of dynamics; returns its index."""
        self._factors.append(np.ones(self.n_resources))
        return len(self._factors) - 1

    def set_factors(self, slot: int, ids: np.ndarray, factors: float | np.ndarray) -> None:
        """Set slot ``slot``'s factor of resources ``ids``; rates are recomputed now."""
        self._factors[slot][ids] = factors
        self._capacity_changed(ids)

    def _capacity_changed(self, ids: np.ndarray) -> None:
        cap = self._base[ids].copy()
        for factor in self._factors:
            cap *= factor[ids]
        self._cap[ids] = cap
        self._cap_version += 1
        if not self._active and not self._flowsets:
            return
        if not self._flowsets and self.sharing == "max-min" and len(ids) <= 4 and self._still_fair(ids):
            return
        self._advance(self.env.now)
        self._reallocate()
        self._reschedule()

    def _still_fair(self, ids: np.ndarray) -> bool:
        """Whether the current rates stay max-min fair after links ``ids`` changed capacity.

        True when none of them is a coflow's bottleneck and each still carries what crosses it:
        every coflow is then still saturated at its unchanged bottleneck with the largest rate
        there, which characterises the (unique) max-min fair allocation. Saves a reallocation
        for most changes on links with slack or unused (a congestion flip, a trace on an idle path).
        """
        active = self._active
        bottlenecks = {c.bneck for c in active}
        cap = self._cap
        for link in ids.tolist():
            if link in bottlenecks:
                return False
            carried = 0.0
            for c in active:
                res = c.pattern.res
                j = int(np.searchsorted(res, link))
                if j < len(res) and res[j] == link:
                    carried += c.pattern.cnt[j] * c.rate
            if carried > cap[link] * (1 + _TIE):
                return False
        return True

    @property
    def active_coflows(self) -> int:
        """Coflows moving bytes now (not those still paying their latency)."""
        return len(self._active)

    def node_of(self, rank: int) -> int:
        return int(rank) // self.cluster.devices_per_node

    def node_vertices(self, node: int) -> list[str]:
        """The fabric vertices that are node ``node``'s own (its host, or its NICs on a rail-optimized
        fabric; on an NVLink-domain fabric the scale-out's): what failing the node takes down."""
        return [v for v, n in self.vertex_node.items() if n == node]

    def island_of(self, rank: int) -> int:
        """The island of ``rank``: its node, or its NVLink domain (ranks of one island use device ports)."""
        return int(self._island_of[rank])
