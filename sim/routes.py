"""The simulator's links and routes: a cluster's fabric as numbered links, and flows routed onto them once.

Why a module of its own: routing depends only on the cluster, never on time or on what else is moving, so
it is built once per network and each set of flows is routed once (a :class:`Pattern`, cached by key), while
:mod:`sim.rate_allocation` shares the links and :mod:`sim.network` moves the bytes.

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
    resource that both directions' flows share. Edges are what latencies and link specs name; resources
    (``link_names``) are what capacities and rates are counted on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.topologies import hash_choice
from flexcomm.sim.rate_allocation import Demand

#: Route keys hold the equal-cost path a flow takes in their low digits; _SPLIT means all of them, evenly.
_MAX_PATHS = 1 << 20
_SPLIT = _MAX_PATHS - 1

_LINK_FORM = (
    "an edge such as node0->switch (or node0<->switch for both directions), a vertex such as node0 or "
    "dev3 (every edge touching it), * (every inter-node link) or intra (every device port)"
)


class Pattern(Demand):
    """A set of flows (src, dst ranks) routed once: the links they cross and how many of them cross each.

    Built by :meth:`Routes.pattern` (through :meth:`sim.network.Network.pattern`) and reusable for any
    number of transfers (the p-1 steps of a ring all use one pattern), so routing is paid once.
    """

    __slots__ = ("_net", "src", "dst", "n_flows", "_edges", "_lat_version", "_all_edges", "_all_weights", "_matrix")

    def __init__(self, net: Routes, src: np.ndarray, dst: np.ndarray, edges: np.ndarray, weights: np.ndarray,
                 lat_edges: np.ndarray) -> None:
        counts = np.bincount(net.edge_res[edges].ravel(), weights=weights.ravel(),
                             minlength=net.n_resources + 1)[: net.n_resources]
        res = np.flatnonzero(counts > 1e-12)
        super().__init__(res, counts[res].astype(float))
        self._net = net
        self.src = src
        self.dst = dst
        self.n_flows = len(src)
        self._edges = lat_edges  # (flows, hops) edge ids of each flow's first path, padded with the pad edge
        self._all_edges, self._all_weights = edges, weights  # every path's edges and their shares
        self._matrix = None
        self._lat_version = -1

    def first_path_edges(self, flow: int) -> list[int]:
        """Edge ids of ``flow``'s first path, pad edges left out (what the SimGrid referee routes it over)."""
        return [int(e) for e in self._edges[flow] if e != self._net.pad_edge]

    def flow_latencies(self) -> np.ndarray:
        """Each flow's route latency (its first path), at the network's current latencies."""
        return self._net.edge_lat[self._edges].sum(axis=1) if self.n_flows else np.zeros(0)

    def flow_matrix(self) -> Any:
        """Sparse flows x resources matrix of each flow's use of each link (its share of the flow's bytes)."""
        from scipy import sparse

        if self._matrix is None:
            net = self._net
            rows = np.repeat(np.arange(self.n_flows), self._all_edges.shape[1])
            res = net.edge_res[self._all_edges].ravel()
            keep = (self._all_weights.ravel() > 0) & (res < net.n_resources)
            self._matrix = sparse.csr_matrix((self._all_weights.ravel()[keep], (rows[keep], res[keep])),
                                             shape=(self.n_flows, net.n_resources))
            self._matrix.sum_duplicates()
        return self._matrix

    def latency(self) -> float:
        """The largest route latency among the flows, at the network's current latencies."""
        net = self._net
        if self._lat_version != net.lat_version:
            self._lat = float(net.edge_lat[self._edges].sum(axis=1).max()) if self.n_flows else 0.0
            self._lat_version = net.lat_version
        return self._lat

    def links(self) -> list[str]:
        """Names of the links (resources) the pattern crosses."""
        return [self._net.link_names[i] for i in self.res]


def _fabric_edges(cluster: Cluster) -> tuple[list[tuple[str, str]], list[str], list[float], list[float], list[str],
                                              int]:
    """Every directed edge: the fabric's, then each device's two crossbar ports; (u, v), name, bandwidth,
    latency and duplex of each, and how many are the fabric's."""
    fabric = cluster.fabric
    names: list[str] = []
    uv: list[tuple[str, str]] = []
    bandwidth: list[float] = []
    latency: list[float] = []
    duplex: list[str] = []
    for u, v, data in fabric.graph.edges(data=True):
        uv.append((u, v))
        names.append(data.get("name", f"{u}->{v}"))
        bandwidth.append(float(data["bandwidth_Bps"]))
        latency.append(float(data["latency_s"]))
        duplex.append(data.get("duplex", "full"))
    n_inter = len(uv)
    intra = cluster.intra_link
    island_of = fabric.island_of_rank
    for r in range(cluster.world_size):
        crossbar = f"fabric{int(island_of[r])}"
        for u, v in ((f"dev{r}", crossbar), (crossbar, f"dev{r}")):
            uv.append((u, v))
            names.append(f"{u}->{v}")
            bandwidth.append(float(intra.bandwidth_Bps))
            latency.append(float(intra.latency_s) / 2)
            duplex.append(intra.duplex)
    return uv, names, bandwidth, latency, duplex, n_inter


def _resources(uv: list[tuple[str, str]], names: list[str], bandwidth: list[float], duplex: list[str],
               edge_id: dict[tuple[str, str], int]) -> tuple[np.ndarray, list[str], list[float]]:
    """The resource of every edge (a half-duplex pair shares one; the pad edge gets the pad resource), and each
    resource's name and bandwidth."""
    n_edges = len(uv)
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
    edge_res[n_edges] = len(res_names)  # the pad edge maps to a pad resource, never counted
    return edge_res, res_names, res_bw


class Routes:
    """The links of a cluster (edges and the resources they count on) and the routes of flows between ranks.

    Attributes read by the other layers: ``edge_res`` (each edge's resource, the pad edge's last),
    ``edge_lat`` (each edge's latency, changed in place through :meth:`set_latency`), ``bandwidth`` (each
    resource's bandwidth as the cluster describes it), ``link_names``, ``edge_names``, ``n_resources``.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.fabric = fabric = cluster.fabric
        uv, names, bandwidth, latency, duplex, self.n_inter_edges = _fabric_edges(cluster)
        n_edges = len(uv)
        self.edge_id = edge_id = {pair: i for i, pair in enumerate(uv)}
        self.edge_res, self.link_names, res_bw = _resources(uv, names, bandwidth, duplex, edge_id)
        self.n_resources = len(self.link_names)
        self.pad_edge = n_edges
        self.edge_lat = np.array([*latency, 0.0])
        self.lat_version = 0
        self.edge_names = names
        self.link_index = {name: i for i, name in enumerate(self.link_names)}
        self.edge_index = {name: i for i, name in enumerate(names)}
        self.bandwidth = np.array(res_bw, dtype=float)
        world = self.world_size = cluster.world_size
        self.island_of_rank = np.asarray(fabric.island_of_rank, dtype=np.int64)
        self.endpoint_of = np.asarray(fabric.endpoint_of_rank, dtype=np.int64)
        self.n_endpoints = len(fabric.endpoints)
        self.dev_out = self.n_inter_edges + 2 * np.arange(world, dtype=np.int64)
        self.dev_in = self.dev_out + 1
        # routes between endpoints (and, under ecmp-hash, the path chosen), filled lazily
        self._routes: list[tuple[tuple[int, ...], tuple[float, ...], tuple[int, ...]]] = []
        self._route_width = 2
        self._lat_width = 2
        self._route_mat = np.full((0, 2), n_edges, dtype=np.int64)
        self._route_w = np.zeros((0, 2))
        self._lat_mat = np.full((0, 2), n_edges, dtype=np.int64)
        self._route_filled = 0
        self._route_dict: dict[int, int] = {}
        #: Patterns cached by the key their caller gave (:meth:`pattern`).
        self.patterns: dict[Any, Pattern] = {}
        #: The node each endpoint vertex (a host, or a rail NIC) belongs to: what a node failure takes down.
        self.vertex_node = self._vertex_nodes()
        self.vertex_edges: dict[str, list[int]] = {}
        for i, (u, v) in enumerate(uv):
            self.vertex_edges.setdefault(u, []).append(i)
            self.vertex_edges.setdefault(v, []).append(i)

    def _vertex_nodes(self) -> dict[str, int]:
        """The node of each endpoint vertex (a host, or a rail NIC)."""
        dpn = self.cluster.devices_per_node
        endpoints = self.fabric.endpoints
        vertex_node: dict[str, int] = {}
        for r in range(0, self.world_size, dpn):
            vertex_node.setdefault(endpoints[int(self.endpoint_of[r])], r // dpn)
            for k in range(r, r + dpn):
                vertex_node.setdefault(endpoints[int(self.endpoint_of[k])], r // dpn)
        return vertex_node

    # --- route tables ---------------------------------------------------------------------------
    def _route_id(self, key: int) -> int:
        """A route for key = (endpoint a * E + endpoint b) * _MAX_PATHS + path choice (-1 + _MAX_PATHS: all
        paths, each with an equal share, for ecmp-split)."""
        pair, choice = divmod(key, _MAX_PATHS)
        a, b = divmod(pair, self.n_endpoints)
        paths = self.fabric.paths(a, b)
        chosen = list(paths) if choice == _SPLIT else [paths[choice]]
        weight = 1.0 / len(chosen)
        use: dict[int, float] = {}
        for path in chosen:
            for e in path:
                eid = self.edge_id[e]
                use[eid] = use.get(eid, 0.0) + weight
        lat = tuple(self.edge_id[e] for e in chosen[0])
        rid = len(self._routes)
        self._routes.append((tuple(use), tuple(use.values()), lat))
        self._route_width = max(self._route_width, len(use))
        self._lat_width = max(self._lat_width, len(lat))
        return rid

    def _route_keys(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The route key of every flow (ranks of different islands)."""
        a, b = self.endpoint_of[src], self.endpoint_of[dst]
        pair = a * self.n_endpoints + b
        choice = np.zeros(len(src), dtype=np.int64)
        uniq, inverse = np.unique(pair, return_inverse=True)
        counts = np.array([self.fabric.path_count(*divmod(int(k), self.n_endpoints)) for k in uniq.tolist()],
                          dtype=np.int64)[inverse]
        multi = counts > 1
        if multi.any():
            if self.fabric.routing == "ecmp-split":
                choice[multi] = _SPLIT
            else:
                choice[multi] = hash_choice(self.fabric.seed, src[multi], dst[multi], counts[multi])
        return pair * _MAX_PATHS + choice

    def _grow_tables(self) -> None:
        """Copy the routes found since the last call into the padded matrices (widened or lengthened first)."""
        n = len(self._route_mat)
        if len(self._routes) > n:
            n = max(len(self._routes), 2 * n)
        if n > len(self._route_mat) or self._route_mat.shape[1] < self._route_width \
                or self._lat_mat.shape[1] < self._lat_width:
            mat = np.full((n, self._route_width), self.pad_edge, dtype=np.int64)
            wts = np.zeros((n, self._route_width))
            lat = np.full((n, self._lat_width), self.pad_edge, dtype=np.int64)
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
            self._grow_tables()
        return self._route_mat[ids][inverse], self._route_w[ids][inverse], self._lat_mat[ids][inverse]

    # --- patterns -------------------------------------------------------------------------------
    def _checked_pairs(self, pairs: Sequence[tuple[int, int]] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Source and destination ranks of ``pairs``, refused unless every flow joins two ranks of the cluster."""
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
        return src, dst

    def pattern(self, pairs: Sequence[tuple[int, int]] | np.ndarray | Pattern, key: Any = None) -> Pattern:
        """Route the flows ``pairs`` (src_rank, dst_rank) once; with ``key``, cache the result under it."""
        if isinstance(pairs, Pattern):
            return pairs
        if key is not None:
            cached = self.patterns.get(key)
            if cached is not None:
                return cached
        src, dst = self._checked_pairs(pairs)
        inter = self.island_of_rank[src] != self.island_of_rank[dst]
        width = lat_width = 2
        rows = None
        if inter.any():
            rows = self._route_rows(self._route_keys(src[inter], dst[inter]))
            width = max(2, rows[0].shape[1])
            lat_width = max(2, rows[2].shape[1])
        edges = np.full((len(src), width), self.pad_edge, dtype=np.int64)
        weights = np.zeros((len(src), width))
        lat_edges = np.full((len(src), lat_width), self.pad_edge, dtype=np.int64)
        if rows is not None:
            edges[inter, : rows[0].shape[1]] = rows[0]
            weights[inter, : rows[1].shape[1]] = rows[1]
            lat_edges[inter, : rows[2].shape[1]] = rows[2]
        intra = ~inter
        for column, ports in ((0, self.dev_out[src[intra]]), (1, self.dev_in[dst[intra]])):
            edges[intra, column] = ports
            weights[intra, column] = 1.0
            lat_edges[intra, column] = ports
        pattern = Pattern(self, src, dst, edges, weights, lat_edges)
        if key is not None:
            self.patterns[key] = pattern
        return pattern

    def cached(self, key: Any) -> Pattern | None:
        """The pattern cached under ``key`` by :meth:`pattern`, or None."""
        return self.patterns.get(key)

    # --- link specs and the ranks' places -------------------------------------------------------
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
        if text in self.edge_index:
            return np.array([self.edge_index[text]], dtype=np.int64)
        if "<->" in text:
            u, _, v = text.partition("<->")
            ids = [self.edge_id[p] for p in ((u.strip(), v.strip()), (v.strip(), u.strip())) if p in self.edge_id]
            if ids:
                return np.array(sorted(ids), dtype=np.int64)
        if text in self.vertex_edges:
            return np.array(sorted(self.vertex_edges[text]), dtype=np.int64)
        nics = [e for vertex, ids in self.vertex_edges.items() if vertex.startswith(text + ".") for e in ids]
        if nics:  # a node of a rail-optimized fabric: every one of its NICs
            return np.array(sorted(set(nics)), dtype=np.int64)
        raise InputError("link", spec, _LINK_FORM)

    def resources(self, spec: str | Iterable[str]) -> np.ndarray:
        """Link (resource) ids named by a link spec: what capacities and factors act on."""
        return np.unique(self.edge_res[self.edges(spec)])

    def set_latency(self, ids: np.ndarray, latency_s: np.ndarray) -> None:
        """New latencies of edges ``ids``: patterns price them from their next :meth:`Pattern.latency` on."""
        self.edge_lat[ids] = latency_s
        self.lat_version += 1

    def node_of(self, rank: int) -> int:
        """The node of ``rank``."""
        return int(rank) // self.cluster.devices_per_node

    def node_vertices(self, node: int) -> list[str]:
        """The fabric vertices that are node ``node``'s own (its host, or its NICs on a rail-optimized
        fabric; on an NVLink-domain fabric the scale-out's): what failing the node takes down."""
        return [v for v, n in self.vertex_node.items() if n == node]

    def island_of(self, rank: int) -> int:
        """The island of ``rank``: its node, or its NVLink domain (ranks of one island use device ports)."""
        return int(self.island_of_rank[rank])
