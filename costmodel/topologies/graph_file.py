"""Any topology from a file: named hosts and switches, cables with their own bandwidth, latency and duplex.

``hosts`` lists one host per node in node order: that is the GPU-to-host map (node i's devices, ranks
i*d .. i*d+d-1, live on ``hosts[i]``). ``links`` are cables (both directions; ``duplex: half`` shares one
capacity between them). ``routes`` may pin the path between two hosts (``from``, ``to``, ``via``: the
vertices in between; the reverse direction takes the reverse path unless it has its own route); every
other pair routes over the shortest paths by hop count, all of them equal-cost (``routing``). A host no
path reaches is reported when a job uses it.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.topologies.common import host_endpoints
from flexcomm.costmodel.topologies.fabric import Fabric, LinkValues, Path


class GraphFabric(Fabric):
    def __init__(self, cluster) -> None:  # noqa: ANN001 - Cluster (import cycle)
        topo = cluster.topology
        spec = topo.graph
        if len(spec.hosts) != cluster.nodes:
            raise InputError("topology.graph.hosts", len(spec.hosts),
                             f"one host per node: {cluster.nodes} names for the cluster's {cluster.nodes} nodes")
        islands, endpoint_of, _ = host_endpoints(cluster)
        super().__init__(cluster.name, "graph", islands, endpoint_of, list(spec.hosts), topo.routing,
                         topo.ecmp_seed)
        for i, host in enumerate(spec.hosts):
            self.add_vertex(host, "host", index=i)
        for name in spec.switches:
            self.add_vertex(name, "switch")
        for i, link in enumerate(spec.links):
            u, v = link.between
            if self.graph.has_edge(u, v):
                raise InputError(f"topology.graph.links.{i}.between", [u, v], "each pair of vertices cabled once")
            self.add_link(u, v, LinkValues(link.bandwidth_Bps, link.latency_s, link.duplex), "cable")
        switches = {name: i for i, name in enumerate(spec.switches)}
        self.rack_of_node = np.array([min((switches[v] for v in self.graph.successors(h) if v in switches),
                                          default=-1 - i) for i, h in enumerate(spec.hosts)], dtype=np.int64)
        self.pinned: dict[tuple[str, str], Path] = {}
        for i, route in enumerate(spec.routes):
            hops = [route.source, *route.via, route.target]
            path = tuple(zip(hops, hops[1:], strict=False))
            for u, v in path:
                if not self.graph.has_edge(u, v):
                    raise InputError(f"topology.graph.routes.{i}.via", [u, v], "consecutive vertices joined by a link")
            self.pinned[(route.source, route.target)] = path
            reverse = tuple((v, u) for u, v in reversed(path))
            self.pinned.setdefault((route.target, route.source), reverse)

    def _paths(self, a: int, b: int) -> list[Path]:
        src, dst = self.endpoints[a], self.endpoints[b]
        pinned = self.pinned.get((src, dst))
        if pinned is not None:
            return [pinned]
        try:
            nodes = list(nx.all_shortest_paths(self.graph, src, dst))
        except nx.NetworkXNoPath:
            return []
        return [tuple(zip(p, p[1:], strict=False)) for p in nodes]
