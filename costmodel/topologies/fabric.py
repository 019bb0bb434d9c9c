"""A cluster's wiring made explicit: every link, and every path a flow between two ranks may take.

Why one object for all topologies: the simulator shares bandwidth over links and the cost model prices a
collective on the links its flows cross; both must see the *same* links and the *same* routes, whatever the
topology. A :class:`Fabric` is that: a directed graph (one edge per direction of a link, with
``bandwidth_Bps``, ``latency_s``, ``duplex``, ``kind``, ``name``), the *island* of every rank (ranks of one
island talk through their own device ports into a non-blocking crossbar: NVLink inside a node, or inside an
NVLink domain) and the *endpoint* where a rank's traffic leaves its island (its node's NIC, or on a
rail-optimized fabric the NIC of its own rail).

Routes between endpoints are the topology's shortest paths, computed by each topology in closed form (a
fat-tree's up-down paths, a torus's dimension order) so that 16,384 GPUs route in milliseconds; a graph from a
file routes with networkx. Where several equal-cost paths exist, ``routing`` says how a flow uses them:

* ``ecmp-hash`` (default): each flow takes one path chosen by a hash of (seed, source rank, destination
  rank), as switches hash a flow's 5-tuple: the same flow always takes the same path, different flows
  spread, and two flows may collide on one uplink.
* ``ecmp-split``: each flow is split evenly over all the paths (a fluid, perfectly balanced spray), so a
  full-bisection fabric never congests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from flexcomm.costmodel.errors import InputError

ROUTINGS = ("ecmp-hash", "ecmp-split")
Edge = tuple[str, str]
Path = tuple[Edge, ...]


@dataclass(frozen=True)
class LinkValues:
    """Bandwidth (bytes/s), latency (s) and duplex of one class of links."""

    bandwidth_Bps: float
    latency_s: float
    duplex: str = "full"


def hash_choice(seed: int, src: np.ndarray, dst: np.ndarray, n_paths: np.ndarray) -> np.ndarray:
    """Which of ``n_paths`` equal-cost paths each flow (src rank, dst rank) takes: splitmix64 of the three.

    Vectorised and stable across runs and platforms (no Python ``hash``), so a seed gives the same routes
    everywhere, and the cost model and the simulator pick the same path for the same flow.
    """
    with np.errstate(over="ignore"):
        x = (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
             ^ src.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
             ^ dst.astype(np.uint64) * np.uint64(0x94D049BB133111EB))
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return (x % n_paths.astype(np.uint64)).astype(np.int64)


class Fabric:
    """Links, islands, endpoints and routes of one cluster (built by a topology module; see the module doc).

    Subclasses implement :meth:`_paths` (equal-cost paths between two endpoint indices); everything else,
    caching, ECMP and the per-flow view the engines use, lives here.
    """

    def __init__(self, name: str, kind: str, island_of_rank: np.ndarray, endpoint_of_rank: np.ndarray,
                 endpoints: Sequence[str], routing: str = "ecmp-hash", seed: int = 0) -> None:
        if routing not in ROUTINGS:
            raise InputError("topology.routing", routing, "one of " + ", ".join(ROUTINGS))
        self.name = name
        self.kind = kind
        self.graph = nx.DiGraph(name=name, topology=kind)
        self.island_of_rank = np.asarray(island_of_rank, dtype=np.int64)
        self.endpoint_of_rank = np.asarray(endpoint_of_rank, dtype=np.int64)
        self.endpoints = list(endpoints)
        self.routing = routing
        self.seed = int(seed)
        self._paths_cache: dict[tuple[int, int], tuple[Path, ...]] = {}
        #: The rack of every node (its leaf, domain, plane...): what rack-major ring orders group by.
        self.rack_of_node = np.zeros(0, dtype=np.int64)  # set by each topology

    # --- building ------------------------------------------------------------------------------
    def add_vertex(self, name: str, kind: str, **attrs: object) -> None:
        self.graph.add_node(name, kind=kind, **attrs)

    def add_link(self, u: str, v: str, values: LinkValues, kind: str) -> None:
        """Both directions of one cable: full duplex gives each direction its own capacity, half duplex one
        shared resource (the simulator joins the twin edges)."""
        for a, b in ((u, v), (v, u)):
            self.graph.add_edge(a, b, bandwidth_Bps=float(values.bandwidth_Bps), latency_s=float(values.latency_s),
                                duplex=values.duplex, kind=kind, name=f"{a}->{b}")

    @property
    def islands(self) -> int:
        return int(self.island_of_rank.max()) + 1 if len(self.island_of_rank) else 0

    # --- routing -------------------------------------------------------------------------------
    def _paths(self, a: int, b: int) -> list[Path]:  # pragma: no cover - every topology overrides it
        raise NotImplementedError

    def paths(self, a: int, b: int) -> tuple[Path, ...]:
        """The equal-cost paths from endpoint ``a`` to endpoint ``b`` (cached)."""
        key = (a, b)
        found = self._paths_cache.get(key)
        if found is None:
            found = tuple(self._paths(a, b)) if a != b else ((),)
            if not found:
                raise InputError("topology", f"{self.endpoints[a]} -> {self.endpoints[b]}",
                                 "a connected topology (no path joins these two endpoints)")
            self._paths_cache[key] = found
        return found

    def flow_paths(self, src_rank: int, dst_rank: int) -> list[tuple[Path, float]]:
        """The path(s) one flow between two ranks of different islands takes, each with its share of the
        flow's bytes (one path with share 1 under ``ecmp-hash``; every path with 1/m under ``ecmp-split``)."""
        a, b = int(self.endpoint_of_rank[src_rank]), int(self.endpoint_of_rank[dst_rank])
        paths = self.paths(a, b)
        if len(paths) == 1:
            return [(paths[0], 1.0)]
        if self.routing == "ecmp-split":
            return [(p, 1.0 / len(paths)) for p in paths]
        pick = hash_choice(self.seed, np.array([src_rank]), np.array([dst_rank]), np.array([len(paths)]))[0]
        return [(paths[int(pick)], 1.0)]

    def path_count(self, a: int, b: int) -> int:
        return len(self.paths(a, b))

    def link(self, u: str, v: str) -> LinkValues:
        data = self.graph.edges[u, v]
        return LinkValues(data["bandwidth_Bps"], data["latency_s"], data["duplex"])

    def check_connected(self, ranks: Sequence[int]) -> None:
        """Every pair of ``ranks`` in different islands has a path (else one error naming the two)."""
        endpoints = sorted({int(self.endpoint_of_rank[r]) for r in ranks})
        if len(endpoints) < 2:
            return
        undirected = self.graph.to_undirected(as_view=True)
        first = self.endpoints[endpoints[0]]
        reach = nx.node_connected_component(undirected, first)
        for e in endpoints[1:]:
            if self.endpoints[e] not in reach:
                raise InputError("topology", f"{first} -> {self.endpoints[e]}",
                                 "a connected topology (no path joins these two endpoints of the job)")


