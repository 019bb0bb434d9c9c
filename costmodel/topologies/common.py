"""What the topology modules share: a node's ranks as one island behind one host, and link classes with
overrides (``topology.links``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from flexcomm.costmodel.topologies.fabric import LinkValues


def host_endpoints(cluster: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Islands and endpoints when every node is one host: rank r is on node r // devices_per_node, its
    node's devices share the intra-node fabric, and its inter-node traffic leaves from host ``node{i}``."""
    node_of = np.arange(cluster.world_size, dtype=np.int64) // cluster.devices_per_node
    return node_of, node_of.copy(), [f"node{i}" for i in range(cluster.nodes)]


def link_class(topology: Any, name: str, bandwidth_Bps: float, latency_s: float, duplex: str) -> LinkValues:
    """The links of class ``name``: the topology's default values, replaced field by field by
    ``topology.links[name]`` where the file sets them."""
    spec = topology.links.get(name)
    if spec is None:
        return LinkValues(float(bandwidth_Bps), float(latency_s), duplex)
    return LinkValues(
        float(spec.bandwidth_Bps if spec.bandwidth_Bps is not None else bandwidth_Bps),
        float(spec.latency_s if spec.latency_s is not None else latency_s),
        spec.duplex or duplex,
    )
