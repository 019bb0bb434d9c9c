"""Rail-optimized fabric (DGX SuperPOD style): NIC i of every node on rail i's leaf switches, rails joined by
spines.

Shape. Every node has ``nics_per_node`` NICs (the cluster's field; required); GPU j of a node uses NIC
j mod nics_per_node, so with one NIC per GPU each GPU has its own rail. Rail i has one leaf switch per
``hosts_per_leaf`` nodes (default: all nodes on one leaf per rail); every leaf has an uplink to each of
``spines`` spine switches (default: one per rail).

Links (defaults, overridable in ``links``): ``rail`` (NIC-leaf) = ``inter_link`` per NIC with half its
latency; ``spine`` (leaf-spine) = hosts_per_leaf x NIC bandwidth / (oversubscription x spines), half the
inter latency per hop.

Routes: two GPUs with the same local index on nodes under one rail leaf meet at that leaf (one hop, no
spine: the point of rails); any other pair goes NIC -> its leaf -> a spine -> the other leaf -> NIC, one
equal-cost path per spine. NCCL's PXN (first crossing NVLink to the GPU on the destination's rail) is not
modelled: a collective that wants rail-local traffic arranges it (the rail-aligned ring orders and the
rail-aware hierarchical allreduce do).
"""

from __future__ import annotations

import math

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.topologies.common import link_class
from flexcomm.costmodel.topologies.fabric import Fabric, Path


class RailOptimized(Fabric):
    def __init__(self, cluster) -> None:  # noqa: ANN001 - Cluster (import cycle)
        topo = cluster.topology
        nics = cluster.nics_per_node
        if nics is None:
            raise InputError("nics_per_node", None, "NICs per node (an integer >= 1): a rail-optimized fabric has "
                             "one rail per NIC")
        self.nics = nics
        dpn = cluster.devices_per_node
        ranks = np.arange(cluster.world_size, dtype=np.int64)
        node_of = ranks // dpn
        endpoint_of = node_of * nics + (ranks % dpn) % nics
        endpoints = [f"node{n}.nic{i}" for n in range(cluster.nodes) for i in range(nics)]
        super().__init__(cluster.name, "rail-optimized", node_of, endpoint_of, endpoints, topo.routing,
                         topo.ecmp_seed)
        self.hosts_per_leaf = topo.hosts_per_leaf or topo.nodes_per_switch or cluster.nodes
        self.leaves_per_rail = math.ceil(cluster.nodes / self.hosts_per_leaf)
        self.spines = topo.spines or nics
        self.rack_of_node = np.arange(cluster.nodes, dtype=np.int64) // self.hosts_per_leaf
        nic = cluster.inter_link
        rail = link_class(topo, "rail", nic.bandwidth_Bps, nic.latency_s / 2, nic.duplex)
        spine = link_class(topo, "spine", self.hosts_per_leaf * rail.bandwidth_Bps / (
            topo.oversubscription_of(0) * self.spines), nic.latency_s / 2, nic.duplex)
        for n in range(cluster.nodes):
            for i in range(nics):
                self.add_vertex(endpoints[n * nics + i], "nic", node=n, rail=i)
        for i in range(nics):
            for g in range(self.leaves_per_rail):
                self.add_vertex(self._leaf(i, g), "switch", tier=1, rail=i)
        for s in range(self.spines):
            self.add_vertex(f"spine{s}", "switch", tier=2)
        for n in range(cluster.nodes):
            for i in range(nics):
                self.add_link(endpoints[n * nics + i], self._leaf(i, n // self.hosts_per_leaf), rail, "rail")
        if self.leaves_per_rail * nics > 1:
            for i in range(nics):
                for g in range(self.leaves_per_rail):
                    for s in range(self.spines):
                        self.add_link(self._leaf(i, g), f"spine{s}", spine, "spine")

    @staticmethod
    def _leaf(rail: int, group: int) -> str:
        return f"rail{rail}.leaf{group}"

    def _paths(self, a: int, b: int) -> list[Path]:
        (na, ia), (nb, ib) = divmod(a, self.nics), divmod(b, self.nics)
        la, lb = self._leaf(ia, na // self.hosts_per_leaf), self._leaf(ib, nb // self.hosts_per_leaf)
        src, dst = self.endpoints[a], self.endpoints[b]
        if la == lb:
            return [((src, la), (la, dst))]
        return [((src, la), (la, f"spine{s}"), (f"spine{s}", lb), (lb, dst)) for s in range(self.spines)]
