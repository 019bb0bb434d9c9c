"""Rank orders for rings (and every other schedule that follows its group's order) that fit the topology.

Why: a ring's time is set by its worst hop. In rank order a ring over the GPUs of several racks may cross
a rack boundary at every hop and load each uplink with many of its own flows; ordered rack by rack it
crosses each boundary once. On a rail-optimized fabric a ring that leaves node k at local GPU j and enters
node k+1 at local GPU j stays on rail j's leaf and never touches a spine, which is how NCCL lays its rings
out there (each channel's ring enters and leaves a node on one NIC).

* ``rank``: as given.
* ``rack-major``: ranks sorted by (rack, node, local index); a rack is the node's leaf switch, NVLink
  domain, torus plane or first graph switch (:meth:`Cluster.leaf_of`).
* ``rail-aligned``: rack-major over nodes, each node's GPUs in alternating direction (a snake: 0..q-1,
  then q-1..0), so consecutive nodes meet on the same local index; with an even number of nodes the
  closing hop also does, with an odd one it is the only cross-rail hop.
* ``random``: a seeded shuffle, for studies of how much order matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flexcomm.costmodel.errors import InputError

ORDERS = ("rank", "rack-major", "rail-aligned", "random")


def ring_order(cluster: Any, ranks: Sequence[int], order: str = "rack-major", seed: int = 0) -> list[int]:
    """``ranks`` rearranged by ``order`` (one of :data:`ORDERS`) on ``cluster``."""
    if order not in ORDERS:
        raise InputError("order", order, "one of " + ", ".join(ORDERS) + " (or an explicit list of ranks)")
    members = [int(r) for r in ranks]
    if order == "rank":
        return members
    if order == "random":
        return [int(r) for r in np.random.default_rng(seed).permutation(members)]
    dpn = cluster.devices_per_node
    nodes: dict[int, list[int]] = {}
    for r in members:
        nodes.setdefault(cluster.node_of(r), []).append(r)
    ordered_nodes = sorted(nodes, key=lambda n: (cluster.leaf_of(n), n))
    result: list[int] = []
    for i, node in enumerate(ordered_nodes):
        local = sorted(nodes[node], key=lambda r: r % dpn)
        if order == "rail-aligned" and i % 2 == 1:
            local.reverse()
        result.extend(local)
    return result
