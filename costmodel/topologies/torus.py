"""2-D and 3-D torus with wrap-around links (TPU-pod style).

Shape. ``dims`` = [X, Y] or [X, Y, Z]; node i sits at the row-major coordinate of i (the last dimension
fastest) and the product of ``dims`` must equal the cluster's nodes. Each node is cabled to its +1 and -1
neighbour in every dimension, wrapping around (in a dimension of 2 the two neighbours are one node: one
cable).

Links (default, overridable as ``links.torus``): ``inter_link``'s bandwidth per cable and its full latency
per hop (as the ``ring`` topology, of which a 1-D torus is the special case).

Routes: dimension order (first dimension first), each dimension the shorter way round, the positive
direction on a tie: one path per pair, as TPU interconnects route deterministically.
"""

from __future__ import annotations

import math

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.topologies.common import host_endpoints, link_class
from flexcomm.costmodel.topologies.fabric import Fabric, Path


class Torus(Fabric):
    def __init__(self, cluster) -> None:  # noqa: ANN001 - Cluster (import cycle)
        topo = cluster.topology
        self.dims = list(topo.dims)
        if math.prod(self.dims) != cluster.nodes:
            raise InputError("topology.dims", self.dims, f"sizes whose product is the cluster's {cluster.nodes} nodes")
        islands, endpoint_of, endpoints = host_endpoints(cluster)
        super().__init__(cluster.name, "torus", islands, endpoint_of, endpoints, topo.routing, topo.ecmp_seed)
        nic = cluster.inter_link
        cable = link_class(topo, "torus", nic.bandwidth_Bps, nic.latency_s, nic.duplex)
        self.coords = np.array(np.unravel_index(np.arange(cluster.nodes), self.dims)).T
        self.rack_of_node = self.coords[:, 0].astype(np.int64)  # a plane of the first dimension
        for i in range(cluster.nodes):
            self.add_vertex(endpoints[i], "host", index=i, coord=tuple(int(c) for c in self.coords[i]))
        for i in range(cluster.nodes):
            for d in range(len(self.dims)):
                j = self._neighbour(i, d, +1)
                if not self.graph.has_edge(endpoints[i], endpoints[j]):
                    self.add_link(endpoints[i], endpoints[j], cable, "torus")

    def _neighbour(self, node: int, dim: int, step: int) -> int:
        coord = list(self.coords[node])
        coord[dim] = (coord[dim] + step) % self.dims[dim]
        return int(np.ravel_multi_index(coord, self.dims))

    def _paths(self, a: int, b: int) -> list[Path]:
        hops: list[tuple[str, str]] = []
        here = a
        for d, size in enumerate(self.dims):
            forward = (int(self.coords[b][d]) - int(self.coords[here][d])) % size
            step = 1 if forward <= size - forward else -1
            for _ in range(forward if step == 1 else size - forward):
                nxt = self._neighbour(here, d, step)
                hops.append((self.endpoints[here], self.endpoints[nxt]))
                here = nxt
        return [tuple(hops)]
