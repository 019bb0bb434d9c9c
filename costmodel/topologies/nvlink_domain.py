"""NVLink domains larger than a node (GB200/GB300 NVL72 racks), joined by a scale-out fabric.

Shape. ``domain_size`` consecutive GPUs (a multiple of ``devices_per_node``; 72 = 18 trays of 4 GPUs)
share one switched NVLink domain: inside it, every GPU reaches every other through its own NVLink port
into a non-blocking crossbar (the cluster's ``intra_link``: bandwidth per GPU per direction), exactly as
the GPUs of one node do elsewhere; the domain is the *island*. Between domains, traffic leaves through
the nodes' NICs onto ``scale_out``, a topology of kind flat, two-level, fat-tree or rail-optimized built
over the same nodes (default ``flat``), with its own links and routes.
"""

from __future__ import annotations

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.topologies.fabric import Fabric, Path


class NvlinkDomain(Fabric):
    def __init__(self, cluster, build) -> None:  # noqa: ANN001 - Cluster and build_fabric (import cycle)
        topo = cluster.topology
        size = topo.domain_size
        if size % cluster.devices_per_node or cluster.world_size % size:
            raise InputError("topology.domain_size", size, f"a multiple of devices_per_node "
                             f"({cluster.devices_per_node}) that divides the cluster's {cluster.world_size} GPUs")
        scale_out = topo.scale_out if topo.scale_out is not None else type(topo)(kind="flat")
        self.scale_out = build(cluster.model_copy(update={"topology": scale_out}))
        islands = np.arange(cluster.world_size, dtype=np.int64) // size
        super().__init__(cluster.name, "nvlink-domain", islands, self.scale_out.endpoint_of_rank,
                         self.scale_out.endpoints, self.scale_out.routing, self.scale_out.seed)
        self.domain_size = size
        self.rack_of_node = np.arange(cluster.nodes, dtype=np.int64) * cluster.devices_per_node // size
        self.graph = self.scale_out.graph.copy()
        self.graph.graph.update(topology="nvlink-domain", domain_size=size)
        for _vertex, data in self.graph.nodes(data=True):
            node = data.get("index", data.get("node"))
            if node is not None:
                data["domain"] = int(node) * cluster.devices_per_node // size

    def _paths(self, a: int, b: int) -> list[Path]:
        return list(self.scale_out.paths(a, b))
