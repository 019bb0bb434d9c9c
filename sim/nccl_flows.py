"""The flows one NCCL call puts on the fabric: its channels, each a ring or tree over the ranks' nodes.

Why: the cost model prices an NCCL call from the tuner and the runtime (:mod:`costmodel.collective_libraries`);
the simulator must run the *same* call, but as traffic other jobs can meet. NCCL splits a call over
``channels`` (thread blocks, each with its own connections); a channel's ring enters and leaves a node
through one NIC, channel c through NIC c mod (NICs a node's ranks use), so channels spread over the rails
and every channel is its own flow on each link it crosses. This module says which (src, dst) rank pairs a
call's channels use; :func:`sim.collectives.run_collective` moves the call's bytes over them.

* **ring** (Ring, and every choice inside one island): per channel, node-local chain from the channel's
  rail GPU through the node's other ranks, then that rail GPU to the next node's (ring order of nodes);
* **tree-like** (Tree, NVLSTree, CollNet, NVLS across nodes, PAT): per channel, a binary tree over the
  nodes on the channel's rail, each edge both ways (reduce up, broadcast down), plus the node-local chain;
* **all-to-all** (``p2p``): every rank to every other (NCCL's grouped sends), once, not per channel; above
  :data:`MAX_ALLTOALL_RANKS` ranks, the shifts by powers of two (a sample of the pairs every link sees).

Nothing here sets a time: the pairs decide only *who shares which link*. The bytes each flow carries are
chosen so that, with nothing else on the fabric, the call takes exactly the cost model's bandwidth term.
"""

from __future__ import annotations

import numpy as np

#: Choices whose inter-node traffic is a tree over the nodes rather than a ring.
TREE_LIKE = frozenset({"tree", "nvls_tree", "collnet_chain", "collnet_direct", "nvls", "pat"})


def _by_node(ranks: np.ndarray, per_node: int) -> list[np.ndarray]:
    """The group's ranks split by node, in the order the group first meets each node."""
    nodes = ranks // per_node
    order = list(dict.fromkeys(nodes.tolist()))
    return [ranks[nodes == node] for node in order]


#: Ranks above which an all-to-all's every pair is sampled by power-of-two shifts (p^2 flows would dominate).
MAX_ALLTOALL_RANKS = 256


def all_pairs(ranks: np.ndarray) -> np.ndarray:
    """Every (src, dst) pair of distinct ranks, one row each: an all-to-all sent flow by flow."""
    src, dst = np.meshgrid(ranks, ranks, indexing="ij")
    off = src != dst
    return np.stack([src[off], dst[off]], axis=1)


def _alltoall_pairs(ranks: np.ndarray) -> np.ndarray:
    p = len(ranks)
    if p <= MAX_ALLTOALL_RANKS:
        return all_pairs(ranks)
    shifts = [1 << k for k in range(p.bit_length()) if (1 << k) < p]
    return np.concatenate([np.stack([ranks, np.roll(ranks, -s)], axis=1) for s in shifts])


def channel_pairs(ranks: np.ndarray, per_node: int, channels: int, algorithm: str) -> np.ndarray:
    """(src, dst) pairs of every channel of one call over ``ranks`` (see the module doc); one row per flow."""
    ranks = np.asarray(ranks, dtype=np.int64)
    if len(ranks) < 2:
        return np.empty((0, 2), dtype=np.int64)
    if algorithm == "p2p":
        return _alltoall_pairs(ranks)
    channels = max(1, int(channels))
    groups = _by_node(ranks, per_node)
    pairs: list[np.ndarray] = []
    for c in range(channels):
        # the node-local chain from the channel's rail GPU through the others (a ring within one node)
        for local in groups:
            if len(local) < 2:
                continue
            chain = np.roll(local, -(c % len(local)))
            pairs.append(np.stack([chain[:-1], chain[1:]], axis=1))
            if len(groups) == 1:  # one node: the ring closes inside it
                pairs.append(np.array([[chain[-1], chain[0]]]))
        if len(groups) < 2:
            continue
        rail = [local[c % len(local)] for local in groups]
        if algorithm in TREE_LIKE:
            child = np.arange(1, len(rail))
            parent = (child - 1) // 2
            up = np.stack([np.asarray(rail)[child], np.asarray(rail)[parent]], axis=1)
            pairs += [up, up[:, ::-1]]
        else:
            heads = np.asarray(rail)
            pairs.append(np.stack([heads, np.roll(heads, -1)], axis=1))
    return np.concatenate(pairs) if pairs else np.empty((0, 2), dtype=np.int64)
