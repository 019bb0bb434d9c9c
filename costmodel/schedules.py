"""Collective algorithms as message schedules: synchronous steps of flows between ranks.

Both engines run the same schedules: the simulator (:mod:`sim.collectives`) starts each step's flows as
coflows on its network, and the cost model (:mod:`costmodel.paths`) prices each step on the same links and
routes. Schedules are written over local indices 0..p-1 and lifted to a cluster's ranks by the caller, so
one schedule serves a plain group and the q parallel instances of the hierarchical allreduce. On an
uncontended uniform network every step costs ``alpha + bytes * beta`` and the schedules reproduce
:mod:`costmodel.collective_formulas` term by term; :mod:`costmodel.collectives` pairs each algorithm's formula
with its schedule here and checks that they agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from flexcomm.costmodel.collective_formulas import PIPELINE_SEGMENT_BYTES, binomial_async_children

#: One coflow of a step: (cache key of its local pairs, local src, local dst, bytes per flow).
Group = tuple[Any, np.ndarray, np.ndarray, float]
#: One synchronous step: (coflows started together, bytes reduced afterwards, latencies it stands for, phase).
Step = tuple[list[Group], float, int, str]


def _is_pow2(p: int) -> bool:
    return p & (p - 1) == 0


def _ceil_log2(p: int) -> int:
    return (p - 1).bit_length()


def _arange(p: int) -> np.ndarray:
    return np.arange(p, dtype=np.int64)


# --- schedules over local indices 0..p-1 -------------------------------------------------------


def ring_reduce_scatter(p: int, nbytes: float, steps: bool, phase: str = "reduce-scatter") -> Iterator[Step]:
    """p-1 steps: every rank sends a chunk of n/p to its successor and reduces the one it receives."""
    if p <= 1:
        return
    src = _arange(p)
    dst = (src + 1) % p
    chunk = nbytes / p
    if steps:
        for _ in range(p - 1):
            yield [(("ring",), src, dst, chunk)], chunk, 1, phase
    else:
        yield [(("ring",), src, dst, (p - 1) * chunk)], (p - 1) * chunk, p - 1, phase


def ring_allgather(p: int, block: float, steps: bool, phase: str = "allgather") -> Iterator[Step]:
    """p-1 steps: every rank forwards a block of ``block`` bytes to its successor."""
    if p <= 1:
        return
    src = _arange(p)
    dst = (src + 1) % p
    if steps:
        for _ in range(p - 1):
            yield [(("ring",), src, dst, block)], 0.0, 1, phase
    else:
        yield [(("ring",), src, dst, (p - 1) * block)], 0.0, p - 1, phase


def allreduce_ring(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    yield from ring_reduce_scatter(p, nbytes, steps)
    yield from ring_allgather(p, nbytes / p, steps)


def allreduce_recursive_doubling(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    """MPICH's recursive doubling, with the fold/unfold of the p - 2^floor(lg p) extra ranks."""
    if p <= 1:
        return
    lg = p.bit_length() - 1
    p2 = 1 << lg
    extra = p - p2
    if extra:
        odd = 2 * _arange(extra) + 1
        yield [(("fold",), odd - 1, odd, nbytes)], nbytes, 1, "fold"
    # participant j of the power-of-two group is rank 2j+1 for j < extra, else j + extra
    j = _arange(p2)
    member = np.where(j < extra, 2 * j + 1, j + extra)
    for k in range(lg):
        yield [(("rd", k), member, member[j ^ (1 << k)], nbytes)], nbytes, 1, "exchange"
    if extra:
        odd = 2 * _arange(extra) + 1
        yield [(("unfold",), odd, odd - 1, nbytes)], 0.0, 1, "unfold"


def binomial_reduce(p: int, nbytes: float, phase: str = "reduce") -> Iterator[Step]:
    """ceil(lg p) rounds towards rank 0: in round k ranks (2j+1) 2^k send n to (2j) 2^k, which reduce it."""
    for k in range(_ceil_log2(p)):
        mask = 1 << k
        src = np.arange(mask, p, 2 * mask, dtype=np.int64)
        yield [(("reduce", k), src, src - mask, nbytes)], nbytes, 1, phase


def binomial_broadcast(p: int, nbytes: float, phase: str = "broadcast") -> Iterator[Step]:
    """ceil(lg p) rounds from rank 0, largest distance first (MPICH): rank 2j 2^k sends n to (2j+1) 2^k."""
    for k in reversed(range(_ceil_log2(p))):
        mask = 1 << k
        src = np.arange(0, p - mask, 2 * mask, dtype=np.int64)
        yield [(("bcast", k), src, src + mask, nbytes)], 0.0, 1, phase


def allreduce_tree(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    yield from binomial_reduce(p, nbytes)
    yield from binomial_broadcast(p, nbytes)


def bruck_allgather(p: int, block: float, phase: str = "allgather") -> Iterator[Step]:
    """ceil(lg p) rounds: in round k rank i sends min(2^k, p - 2^k) blocks to rank i - 2^k."""
    src = _arange(p)
    for k in range(_ceil_log2(p)):
        d = 1 << k
        yield [(("bruck", k), src, (src - d) % p, min(d, p - d) * block)], 0.0, 1, phase


def bruck_reduce_scatter(p: int, nbytes: float, phase: str = "reduce-scatter") -> Iterator[Step]:
    """Bruck's allgather run backwards: rank i sends (and i + 2^k reduces) min(2^k, p - 2^k) blocks of n/p."""
    src = _arange(p)
    block = nbytes / p
    for k in reversed(range(_ceil_log2(p))):
        d = 1 << k
        size = min(d, p - d) * block
        yield [(("bruck-rs", k), src, (src + d) % p, size)], size, 1, phase


def allreduce_rabenseifner(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    if p <= 1:
        return
    if not _is_pow2(p):
        yield from bruck_reduce_scatter(p, nbytes)
        yield from bruck_allgather(p, nbytes / p)
        return
    lg = p.bit_length() - 1
    i = _arange(p)
    for k in range(lg):  # recursive halving: partner at distance p/2, p/4, ..., 1; half the data each time
        d = p >> (k + 1)
        size = nbytes / (1 << (k + 1))
        yield [(("xor", d), i, i ^ d, size)], size, 1, "reduce-scatter"
    for k in range(lg):  # recursive doubling: distance 1, 2, ..., p/2; twice the data each time
        d = 1 << k
        yield [(("xor", d), i, i ^ d, nbytes / p * d)], 0.0, 1, "allgather"


def allgather_recursive_doubling(p: int, block: float, steps: bool) -> Iterator[Step]:
    if not _is_pow2(p):
        yield from bruck_allgather(p, block)  # as MPICH does for p not a power of two
        return
    i = _arange(p)
    for k in range(p.bit_length() - 1):
        d = 1 << k
        yield [(("xor", d), i, i ^ d, block * d)], 0.0, 1, "allgather"


def allgather_ring(p: int, block: float, steps: bool) -> Iterator[Step]:
    yield from ring_allgather(p, block, steps)


def allgather_bruck(p: int, block: float, steps: bool) -> Iterator[Step]:
    yield from bruck_allgather(p, block)


def reduce_scatter_ring(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    yield from ring_reduce_scatter(p, nbytes, steps)


def broadcast_binomial(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    yield from binomial_broadcast(p, nbytes)


def broadcast_pipelined_ring(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    """S = ceil(n/s) segments down the chain 0 -> 1 -> ... -> p-1; hop h forwards segment t-h at step t.

    The last segment may be shorter; a step where it travels alone costs only its bytes, which is
    the formula's (n + (p-2) min(n, s)) beta. Aggregated: one coflow over the whole chain carrying
    that many bytes and paying S + p - 2 latencies.
    """
    if p <= 1:
        return
    seg = float(PIPELINE_SEGMENT_BYTES)
    n_seg = max(1, math.ceil(nbytes / seg))
    largest = min(nbytes, seg)
    last = nbytes - (n_seg - 1) * seg
    hops = p - 1
    hop = _arange(hops)
    if not steps:
        yield [(("chain",), hop, hop + 1, nbytes + (hops - 1) * largest)], 0.0, n_seg + hops - 1, "broadcast"
        return
    for t in range(n_seg + hops - 1):
        lo, hi = max(0, t - n_seg + 1), min(t, hops - 1)  # hops busy at step t carry segment t - h
        groups: list[Group] = []
        if last == largest or n_seg == 1:
            groups.append((("chain", lo, hi), hop[lo: hi + 1], hop[lo: hi + 1] + 1, largest if n_seg > 1 else last))
        else:  # the last (short) segment is at the lowest busy hop once it has left the root
            short = lo if t >= n_seg - 1 else -1
            if hi > short:
                first = max(lo, short + 1)
                groups.append((("chain", first, hi), hop[first: hi + 1], hop[first: hi + 1] + 1, largest))
            if short >= 0:
                groups.append((("chain", short, short), hop[short: short + 1], hop[short: short + 1] + 1, last))
        yield groups, 0.0, 1, "broadcast"


def broadcast_binomial_async(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    """gloo's binomial broadcast: every rank that has the data sends to all its children at once (one coflow
    per level of the receive order; a level ends when the rank with the most children is done)."""
    children = binomial_async_children(p)
    level = [0]
    depth = 0
    while True:
        senders = [v for v in level if children[v]]
        if not senders:
            return
        src = np.array([v for v in senders for _ in children[v]], dtype=np.int64)
        dst = np.array([c for v in senders for c in children[v]], dtype=np.int64)
        yield [(("bcast-async", depth), src, dst, nbytes)], 0.0, 1, "broadcast"
        level = dst.tolist()
        depth += 1


def binomial_scatter(p: int, nbytes: float, phase: str = "scatter") -> Iterator[Step]:
    """Rank 0 scatters n/p to each rank down a binomial tree: rank r hands its subtree's blocks on."""
    block = nbytes / p
    for k in reversed(range(_ceil_log2(p))):
        mask = 1 << k
        src = np.arange(0, p - mask, 2 * mask, dtype=np.int64)
        count = np.minimum(mask, p - src - mask)
        groups: list[Group] = []
        for c in np.unique(count)[::-1]:
            sel = src[count == c]
            groups.append((("scatter", k, int(c)), sel, sel + mask, float(c) * block))
        yield groups, 0.0, 1, phase


def broadcast_scatter_allgather(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    if p <= 1:
        return
    yield from binomial_scatter(p, nbytes)
    yield from ring_allgather(p, nbytes / p, steps)


def alltoall_pairwise(p: int, nbytes: float, steps: bool) -> Iterator[Step]:
    """p-1 steps of n/p each: partner rank xor k when p is a power of two, else send to rank+k."""
    i = _arange(p)
    pow2 = _is_pow2(p)
    for k in range(1, p):
        yield [(("a2a", k), i, (i ^ k) if pow2 else (i + k) % p, nbytes / p)], 0.0, 1, "exchange"


Schedule = Any  # Callable[[int, float, bool], Iterator[Step]]

#: One piece of a plan: (rank matrix instances x size, steps over local indices, tag prefix).
Segment = tuple[np.ndarray, Iterator[Step], str]
