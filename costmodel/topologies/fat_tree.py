"""Fat-tree (folded Clos) of 2 or 3 switch tiers.

Shape. ``k``-ary (Al-Fares, Loukissas & Vahdat, SIGCOMM 2008): 3 tiers give k pods of k/2 leaf (edge)
and k/2 aggregation switches, (k/2)^2 core switches and k^3/4 hosts (k = 8: 128 hosts); 2 tiers give k
leaves of k/2 hosts under k/2 spines (k^2/2 hosts). Or explicit counts: ``hosts_per_leaf`` and, for 2
tiers, ``leaves`` = ceil(nodes / hosts_per_leaf) under ``spines``; for 3 tiers ``leaves_per_pod``,
``aggregations_per_pod`` and ``spines`` (core switches per aggregation switch). Hosts fill leaves in node
order; a fabric larger than the cluster keeps its empty ports.

Links (defaults, each overridable in ``links``): ``host`` = the cluster's ``inter_link`` bandwidth with
half its latency (so two hosts under one leaf see ``inter_link.latency``, as in ``flat``); ``uplink``
(leaf-aggregation or leaf-spine) and ``core`` (aggregation-core) carry the bandwidth that makes each
switch's up capacity equal its down capacity divided by that tier's ``oversubscription`` (full bisection
at 1), with half the inter latency per hop.

Routes: up to the lowest common tier and down; every choice of upper switch is an equal-cost path (same
leaf: 1; same pod: one per aggregation switch; across pods: aggregation x core), used per ``routing``.
"""

from __future__ import annotations

import math

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.topologies.common import host_endpoints, link_class
from flexcomm.costmodel.topologies.fabric import Fabric, Path


class FatTree(Fabric):
    def __init__(self, cluster) -> None:  # noqa: ANN001 - Cluster (import cycle)
        topo = cluster.topology
        islands, endpoint_of, endpoints = host_endpoints(cluster)
        super().__init__(cluster.name, "fat-tree", islands, endpoint_of, endpoints, topo.routing, topo.ecmp_seed)
        tiers = topo.tiers or 3
        k = topo.k
        if k is not None:
            half = k // 2
            self.hosts_per_leaf = half
            self.leaves_per_pod = half if tiers == 3 else k
            self.aggs_per_pod = half
            self.pods = k if tiers == 3 else 1
            self.cores_per_agg = half
            self.spines = half
        else:
            self.hosts_per_leaf = topo.hosts_per_leaf or 1
            if tiers == 3:
                self.leaves_per_pod = topo.leaves_per_pod or 1
                self.aggs_per_pod = topo.aggregations_per_pod or 1
                self.cores_per_agg = topo.spines or 1
                self.pods = topo.pods or math.ceil(cluster.nodes / (self.hosts_per_leaf * self.leaves_per_pod))
            else:
                self.leaves_per_pod = math.ceil(cluster.nodes / self.hosts_per_leaf)
                self.pods = 1
                self.spines = topo.spines or 1
        self.tiers = tiers
        leaves = np.arange(cluster.nodes) // self.hosts_per_leaf
        self.rack_of_node = leaves.astype(np.int64)
        capacity = self.pods * self.leaves_per_pod * self.hosts_per_leaf
        if cluster.nodes > capacity:
            raise InputError("nodes", cluster.nodes, f"at most {capacity}, the hosts of this fat-tree "
                             f"({self.describe()})")
        nic = cluster.inter_link
        host = link_class(topo, "host", nic.bandwidth_Bps, nic.latency_s / 2, nic.duplex)
        leaf_up = self.aggs_per_pod if tiers == 3 else self.spines
        uplink = link_class(topo, "uplink", self.hosts_per_leaf * host.bandwidth_Bps / (
            topo.oversubscription_of(0) * leaf_up), nic.latency_s / 2, nic.duplex)
        for i in range(cluster.nodes):
            self.add_vertex(endpoints[i], "host", index=i)
        for pod in range(self.pods):
            for leaf in range(self.leaves_per_pod):
                self.add_vertex(self._leaf(pod, leaf), "switch", tier=1)
        for i in range(cluster.nodes):
            pod, leaf = self._place(i)
            self.add_link(endpoints[i], self._leaf(pod, leaf), host, "host")
        if tiers == 2:
            for s in range(self.spines):
                self.add_vertex(f"spine{s}", "switch", tier=2)
                for leaf in range(self.leaves_per_pod):
                    self.add_link(self._leaf(0, leaf), f"spine{s}", uplink, "uplink")
            return
        core = link_class(topo, "core", self.leaves_per_pod * uplink.bandwidth_Bps / (
            topo.oversubscription_of(1) * self.cores_per_agg), nic.latency_s / 2, nic.duplex)
        for pod in range(self.pods):
            for a in range(self.aggs_per_pod):
                self.add_vertex(self._agg(pod, a), "switch", tier=2)
                for leaf in range(self.leaves_per_pod):
                    self.add_link(self._leaf(pod, leaf), self._agg(pod, a), uplink, "uplink")
                for c in range(self.cores_per_agg):
                    name = self._core(a, c)
                    if name not in self.graph:
                        self.add_vertex(name, "switch", tier=3)
                    self.add_link(self._agg(pod, a), name, core, "core")

    def describe(self) -> str:
        if self.tiers == 2:
            return f"2 tiers, {self.leaves_per_pod} leaves x {self.hosts_per_leaf} hosts, {self.spines} spines"
        return (f"3 tiers, {self.pods} pods x {self.leaves_per_pod} leaves x {self.hosts_per_leaf} hosts, "
                f"{self.aggs_per_pod} aggregation switches per pod, {self.cores_per_agg} cores each")

    def _place(self, node: int) -> tuple[int, int]:
        leaf = node // self.hosts_per_leaf
        return leaf // self.leaves_per_pod, leaf % self.leaves_per_pod

    @staticmethod
    def _leaf(pod: int, leaf: int) -> str:
        return f"leaf{pod}.{leaf}"

    @staticmethod
    def _agg(pod: int, a: int) -> str:
        return f"agg{pod}.{a}"

    def _core(self, a: int, c: int) -> str:
        return f"core{a * self.cores_per_agg + c}"

    def _paths(self, a: int, b: int) -> list[Path]:
        src, dst = self.endpoints[a], self.endpoints[b]
        (pa, la), (pb, lb) = self._place(a), self._place(b)
        up, down = (src, self._leaf(pa, la)), (self._leaf(pb, lb), dst)
        if (pa, la) == (pb, lb):
            return [(up, down)]
        if self.tiers == 2:
            return [(up, (self._leaf(pa, la), f"spine{s}"), (f"spine{s}", self._leaf(pb, lb)), down)
                    for s in range(self.spines)]
        if pa == pb:
            return [(up, (self._leaf(pa, la), self._agg(pa, g)), (self._agg(pa, g), self._leaf(pb, lb)), down)
                    for g in range(self.aggs_per_pod)]
        return [(up, (self._leaf(pa, la), self._agg(pa, g)), (self._agg(pa, g), self._core(g, c)),
                 (self._core(g, c), self._agg(pb, g)), (self._agg(pb, g), self._leaf(pb, lb)), down)
                for g in range(self.aggs_per_pod) for c in range(self.cores_per_agg)]
