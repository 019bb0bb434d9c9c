"""The size of the fabric a topology describes, counted from its numbers before anything is built.

Why: ``nodes`` is limited, but a topology's own numbers describe switches and cables whether or not nodes
use them (a fat-tree keeps its empty ports): ``k: 100000`` passed ``flexcomm clusters`` and then took
2-3 GB and never finished building in ``flexcomm cost`` (10^15 cables; 2.5 x 10^9 equal-cost paths between
two pods). So the cables and the equal-cost paths between two hosts are counted here, in closed form, and
checked against :data:`~costmodel.limits.MAX_FABRIC_LINKS` and :data:`~costmodel.limits.MAX_EQUAL_COST_PATHS`
when the cluster is validated and again before a fabric is built.
"""

from __future__ import annotations

import math
from typing import Any

from flexcomm.costmodel.limits import MAX_EQUAL_COST_PATHS, MAX_FABRIC_LINKS


def fat_tree_size(topology: Any, nodes: int) -> tuple[int, int]:
    """(cables, equal-cost paths between two hosts) of a fat-tree, with the counts :class:`.FatTree` uses."""
    tiers = topology.tiers or 3
    if topology.k is not None:
        half = topology.k // 2
        if tiers == 2:
            return nodes + topology.k * half, half
        return nodes + 2 * topology.k * half * half, half * half
    per_leaf = topology.hosts_per_leaf or 1
    if tiers == 2:
        leaves, spines = math.ceil(nodes / per_leaf), topology.spines or 1
        return nodes + leaves * spines, spines
    leaves = topology.leaves_per_pod or 1
    aggs = topology.aggregations_per_pod or 1
    cores = topology.spines or 1
    pods = topology.pods or math.ceil(nodes / (per_leaf * leaves))
    return nodes + pods * leaves * aggs + pods * aggs * cores, max(aggs, aggs * cores)


def rail_size(topology: Any, nodes: int, nics: int | None) -> tuple[int, int]:
    """(cables, equal-cost paths) of a rail-optimized fabric (:class:`.RailOptimized`)."""
    nics = nics or 1
    per_leaf = topology.hosts_per_leaf or topology.nodes_per_switch or nodes
    spines = topology.spines or nics
    return nodes * nics + math.ceil(nodes / per_leaf) * nics * spines, spines


def fabric_size(cluster: Any) -> tuple[int, int]:
    """(cables, equal-cost paths between two hosts) of ``cluster``'s topology; kinds whose size follows from
    ``nodes`` alone (flat, ring, torus, a graph listed cable by cable) count their nodes."""
    topology = cluster.topology
    if topology.kind == "nvlink-domain":
        topology = topology.scale_out if topology.scale_out is not None else None
    if topology is None:
        return cluster.nodes, 1
    if topology.kind == "fat-tree":
        return fat_tree_size(topology, cluster.nodes)
    if topology.kind == "rail-optimized":
        return rail_size(topology, cluster.nodes, getattr(cluster, "nics_per_node", None))
    return cluster.nodes, 1


def check_fabric_size(cluster: Any, field: str = "topology") -> None:
    """Refuse a topology whose fabric is past the limits, naming the limit and how to raise it."""
    topology = cluster.topology
    if topology.kind not in ("fat-tree", "rail-optimized", "nvlink-domain"):
        return
    links, paths = fabric_size(cluster)
    shape = f"{topology.kind}" + (f" k={topology.k}" if topology.k is not None else "")
    MAX_FABRIC_LINKS.check(field, links, shape)
    MAX_EQUAL_COST_PATHS.check(field, paths, shape)
