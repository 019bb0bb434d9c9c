"""The flow network of a ``flat``, ``two-level`` or ``ring`` cluster: one edge table for path_link, group_link and
to_graph, so the simulator's route and the cost model's link are the same edges (see :mod:`costmodel.cluster`'s
docstring for each topology's rule). The other kinds build a fabric (:mod:`costmodel.topologies`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from flexcomm.costmodel.cluster_parts import Duplex, Link, LinkOverride, Topology


@dataclass(frozen=True)
class _Edge:
    bandwidth_Bps: float
    latency_s: float
    kind: str  # "nic" (host<->switch), "uplink" (leaf<->spine), "ring", "override" (between a pair)


def host_vertex(i: int) -> str:
    return f"node{i}"


_T = TypeVar("_T")


def _pick(override: float | None, default: _T) -> float | _T:
    """An override's value where it gives one, else what was there."""
    return default if override is None else override


class LinkNetwork:
    """Edges and routes of one cluster, computed once (the cluster is frozen)."""

    def __init__(self, topology: Topology, nodes: int, inter_link: Link, uplink_Bps: float,
                 overrides: Sequence[LinkOverride]) -> None:
        self.kind = topology.kind
        self.nodes = nodes
        self.nodes_per_switch = topology.nodes_per_switch or nodes
        self.duplex: Duplex = inter_link.duplex
        self.uplink_Bps = uplink_Bps
        inter = inter_link
        self.inter_latency = inter.latency_s
        nic: dict[int, tuple[float, float]] = {}
        pair: dict[tuple[int, int], tuple[float | None, float | None]] = {}
        for o in overrides:
            if o.node is not None:
                bw, lat = nic.get(o.node, (inter.bandwidth_Bps, inter.latency_s))
                nic[o.node] = (_pick(o.bandwidth_Bps, bw), _pick(o.latency_s, lat))
            else:
                assert o.between is not None
                key = (min(o.between), max(o.between))
                bw_o, lat_o = pair.get(key, (None, None))
                pair[key] = (_pick(o.bandwidth_Bps, bw_o), _pick(o.latency_s, lat_o))
        self.nic = [nic.get(i, (inter.bandwidth_Bps, inter.latency_s)) for i in range(self.nodes)]
        self.edges: dict[tuple[str, str], _Edge] = {}
        self._build_physical(pair)
        self.virtual: set[tuple[int, int]] = set()
        for (a, b), (bw, lat) in pair.items():
            if self.kind == "ring" and self._adjacent(a, b):
                continue  # already applied to the cable in _build_physical
            route = self.physical_route(a, b)
            edge = _Edge(
                _pick(bw, min(self.edges[e].bandwidth_Bps for e in route)),
                _pick(lat, sum(self.edges[e].latency_s for e in route)),
                "override",
            )
            self.edges[(host_vertex(a), host_vertex(b))] = self.edges[(host_vertex(b), host_vertex(a))] = edge
            self.virtual.update({(a, b), (b, a)})
        self.path_cache: dict[tuple[int, int], Link] = {}
        self.group_cache: dict[object, tuple[str, Link]] = {}  # frozenset of nodes, or ("ring", ranks)
        # Per-node arrays for row(): NIC half-latency and bandwidth, leaf, ring cable a -> a+1.
        self.half_latency = np.array([lat / 2 for _, lat in self.nic])
        self.nic_bandwidth = np.array([bw for bw, _ in self.nic])
        self.leaves = np.array([self.leaf_of(i) for i in range(self.nodes)])
        if self.kind == "ring" and self.nodes > 1:
            cables = [self.edges[(host_vertex(i), host_vertex((i + 1) % self.nodes))] for i in range(self.nodes)]
            self.cable_latency = np.array([c.latency_s for c in cables])
            self.cable_bandwidth = np.array([c.bandwidth_Bps for c in cables])

    def _adjacent(self, a: int, b: int) -> bool:
        return (b - a) % self.nodes in (1, self.nodes - 1)

    def leaf_of(self, node: int) -> int:
        return node // self.nodes_per_switch if self.kind == "two-level" else 0

    def _build_physical(self, pair: dict[tuple[int, int], tuple[float | None, float | None]]) -> None:
        def both(u: str, v: str, edge: _Edge) -> None:
            self.edges[(u, v)] = self.edges[(v, u)] = edge

        if self.kind in ("flat", "two-level"):
            for i, (bw, lat) in enumerate(self.nic):
                switch = "switch" if self.kind == "flat" else f"leaf{self.leaf_of(i)}"
                both(host_vertex(i), switch, _Edge(bw, lat / 2, "nic"))
            if self.kind == "two-level":
                assert self.uplink_Bps is not None
                half = self.inter_latency / 2
                for leaf in range(math.ceil(self.nodes / self.nodes_per_switch)):
                    both(f"leaf{leaf}", "spine", _Edge(self.uplink_Bps, half, "uplink"))
            return
        for i in range(self.nodes if self.nodes > 2 else self.nodes - 1):  # 2 nodes: one cable
            j = (i + 1) % self.nodes
            bw = min(self.nic[i][0], self.nic[j][0])
            lat = max(self.nic[i][1], self.nic[j][1])
            bw_o, lat_o = pair.get((min(i, j), max(i, j)), (None, None))
            both(host_vertex(i), host_vertex(j), _Edge(_pick(bw_o, bw), _pick(lat_o, lat), "ring"))

    def physical_route(self, a: int, b: int) -> list[tuple[str, str]]:
        """Hop-count shortest route over physical links; ring ties go clockwise."""
        if a == b:
            return []
        if self.kind == "flat":
            return [(host_vertex(a), "switch"), ("switch", host_vertex(b))]
        if self.kind == "two-level":
            la, lb = f"leaf{self.leaf_of(a)}", f"leaf{self.leaf_of(b)}"
            if la == lb:
                return [(host_vertex(a), la), (la, host_vertex(b))]
            return [(host_vertex(a), la), (la, "spine"), ("spine", lb), (lb, host_vertex(b))]
        n = self.nodes
        step = 1 if (b - a) % n <= (a - b) % n else -1
        route, here = [], a
        while here != b:
            nxt = (here + step) % n
            route.append((host_vertex(here), host_vertex(nxt)))
            here = nxt
        return route

    def route(self, a: int, b: int) -> list[tuple[str, str]]:
        if (a, b) in self.virtual:
            return [(host_vertex(a), host_vertex(b))]
        return self.physical_route(a, b)

    def row(self, a: int) -> tuple[np.ndarray, np.ndarray]:
        """Latency and bandwidth of path_link(a, b) for every b at once (entry a is meaningless).

        The same sums in the same order as path_link over route(a, b), vectorised so that
        group_link over k nodes costs k numpy passes instead of k^2 Python routes.
        """
        n = self.nodes
        if self.kind == "ring":
            steps = np.arange(1, n)
            cw_lat = np.cumsum(self.cable_latency[(a + steps - 1) % n])  # to a+1, a+2, ...
            cw_bw = np.minimum.accumulate(self.cable_bandwidth[(a + steps - 1) % n])
            ccw_lat = np.cumsum(self.cable_latency[(a - steps) % n])  # to a-1, a-2, ...
            ccw_bw = np.minimum.accumulate(self.cable_bandwidth[(a - steps) % n])
            d = (np.arange(n) - a) % n  # clockwise hops to each node
            clockwise = d <= n - d
            cw_i, ccw_i = np.maximum(d - 1, 0), np.minimum(n - d - 1, n - 2)
            latency = np.where(clockwise, cw_lat[cw_i], ccw_lat[ccw_i])
            bandwidth = np.where(clockwise, cw_bw[cw_i], ccw_bw[ccw_i])
        else:
            latency = self.half_latency[a] + self.half_latency
            bandwidth = np.minimum(self.nic_bandwidth[a], self.nic_bandwidth)
            if self.kind == "two-level":
                assert self.uplink_Bps is not None
                across = self.leaves != self.leaves[a]
                half = self.inter_latency / 2
                latency = np.where(across, self.half_latency[a] + half + half + self.half_latency, latency)
                bandwidth = np.where(
                    across, np.minimum(min(self.nic_bandwidth[a], self.uplink_Bps), self.nic_bandwidth), bandwidth
                )
        for x, b in self.virtual:
            if x == a:
                edge = self.edges[(host_vertex(a), host_vertex(b))]
                latency[b], bandwidth[b] = edge.latency_s, edge.bandwidth_Bps
        return latency, bandwidth

    def path_link(self, a: int, b: int) -> Link:
        key = (a, b)
        if key not in self.path_cache:
            edges = [self.edges[e] for e in self.route(a, b)]
            self.path_cache[key] = Link(
                latency_s=sum(e.latency_s for e in edges),
                bandwidth_Bps=min(e.bandwidth_Bps for e in edges),
                duplex=self.duplex,
            )
        return self.path_cache[key]


