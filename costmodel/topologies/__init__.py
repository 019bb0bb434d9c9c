"""Explicit network topologies: one module per kind, each building a :class:`~.fabric.Fabric`.

================ =============================================================================== =====================
kind             what                                                                             module
================ =============================================================================== =====================
flat, two-level, the original kinds (one switch, leaves under one spine, a ring of cables)        :mod:`.legacy`
ring
fat-tree         folded Clos of 2 or 3 tiers, k-ary or by counts, oversubscription per tier       :mod:`.fat_tree`
rail-optimized   NIC i of every node on rail i's leaves, rails joined by spines                   :mod:`.rail`
nvlink-domain    NVLink domains of G GPUs (several nodes) joined by a scale-out fabric            :mod:`.nvlink_domain`
torus            2-D / 3-D torus with wrap-around, dimension-order routing                        :mod:`.torus`
graph            any hosts, switches and cables from a file; shortest paths with ECMP             :mod:`.graph_file`
================ =============================================================================== =====================

The simulator (:class:`sim.network.Network`) shares bandwidth on a fabric's links and the cost model
(:mod:`costmodel.paths`) prices collectives on its routes, so both see the same wiring.
"""

from __future__ import annotations

from typing import Any

from flexcomm.costmodel.topologies.fabric import ROUTINGS, Fabric, LinkValues, hash_choice
from flexcomm.costmodel.topologies.fat_tree import FatTree
from flexcomm.costmodel.topologies.graph_file import GraphFabric
from flexcomm.costmodel.topologies.legacy import LegacyFabric
from flexcomm.costmodel.topologies.nvlink_domain import NvlinkDomain
from flexcomm.costmodel.topologies.rail import RailOptimized
from flexcomm.costmodel.topologies.size import check_fabric_size
from flexcomm.costmodel.topologies.torus import Torus

__all__ = ["build_fabric", "Fabric", "LinkValues", "ROUTINGS", "hash_choice"]


def build_fabric(cluster: Any) -> Fabric:
    """The fabric of ``cluster`` (a :class:`~costmodel.cluster.Cluster`); use ``cluster.fabric``, which caches it."""
    check_fabric_size(cluster)  # a cluster built without validation (model_construct) is checked here too
    kind = cluster.topology.kind
    if kind == "nvlink-domain":
        return NvlinkDomain(cluster, build_fabric)
    return _FABRICS.get(kind, LegacyFabric)(cluster)


#: The fabric each topology kind builds; flat, two-level and ring are the cluster's own edge table (legacy).
_FABRICS: dict[str, type[Fabric]] = {"fat-tree": FatTree, "rail-optimized": RailOptimized, "torus": Torus,
                                     "graph": GraphFabric}
