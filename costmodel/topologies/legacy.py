"""The original kinds (``flat``, ``two-level``, ``ring``) as a :class:`Fabric`: their edge table and routes
(:class:`costmodel.cluster_network.LinkNetwork`, including ``overrides``) seen through the same interface as the new
topologies, so the engines have one way to ask for links and paths."""

from __future__ import annotations

import numpy as np

from flexcomm.costmodel.topologies.common import host_endpoints
from flexcomm.costmodel.topologies.fabric import Fabric, Path


class LegacyFabric(Fabric):
    def __init__(self, cluster) -> None:  # noqa: ANN001 - Cluster (import cycle)
        islands, endpoint_of, endpoints = host_endpoints(cluster)
        super().__init__(cluster.name, cluster.topology.kind, islands, endpoint_of, endpoints)
        self._network = cluster._network
        self.rack_of_node = np.array([self._network.leaf_of(i) for i in range(cluster.nodes)], dtype=np.int64)
        graph = cluster.to_graph()
        self.graph.add_nodes_from(graph.nodes(data=True))
        self.graph.add_edges_from(graph.edges(data=True))

    def _paths(self, a: int, b: int) -> list[Path]:
        return [tuple(self._network.route(a, b))]
