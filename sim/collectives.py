"""The message schedules of collective algorithms, run on :class:`sim.network.Network` as coflows.

Each algorithm is a *schedule*: a sequence of synchronous steps, a step being one or more
coflows started together (flows between ranks, the same bytes per flow within a coflow) and
optionally a reduction of some bytes afterwards (``gamma`` seconds per byte, a device delay where
the cost model has a gamma term). Schedules are written over local indices 0..p-1 and lifted to
the cluster's ranks, so one schedule serves a plain group and the q parallel instances of the
hierarchical allreduce. On an uncontended uniform network every step costs ``alpha + bytes *
beta`` and the schedules below reproduce :mod:`costmodel.collectives` term by term:

============================== ===================================================================
allreduce ring                 p-1 reduce-scatter + p-1 allgather steps of n/p to the ring successor
allreduce recursive-doubling   lg p' exchanges of n with rank xor 2^k; p not a power of two: the
                               p-p' extra ranks fold into neighbours first and unfold at the end
allreduce tree                 binomial reduce to rank 0 then binomial broadcast, n per round
allreduce rabenseifner         p a power of two: recursive halving reduce-scatter then recursive
                               doubling allgather. Otherwise the Bruck-style dissemination pair
                               (reduce-scatter = Bruck allgather reversed), which keeps ceil(lg p)
                               rounds each way and (p-1)/p n bytes, as the formula prices.
                               (MPICH folds instead, which costs 2 n beta more.)
allgather ring / bruck         p-1 steps of m / ceil(lg p) rounds of min(2^k, p-2^k) m to rank-2^k
allgather recursive-doubling   exchanges of 2^k m with rank xor 2^k (Bruck if p is no power of 2)
reduce-scatter ring            p-1 steps of n/p
broadcast binomial             ceil(lg p) rounds of n
broadcast pipelined-ring       S segments down the chain 0->1->..->p-1 in S+p-2 steps
broadcast scatter-allgather    binomial scatter (root's share halves each round) + ring allgather
alltoall pairwise              p-1 steps of n/p, partner rank xor k (p a power of 2) or rank+k
allreduce hierarchical         intra-node ring reduce-scatter, q inter-node allreduces of n/q at
                               once (local rank j of every node; they share each NIC), intra ring
                               allgather
============================== ===================================================================

``granularity="aggregate"`` (default) runs each ring phase (and the pipelined broadcast) as ONE
coflow carrying all its steps' bytes, paying all its steps' latencies up front. Every step of a
ring phase has the same flows and bytes, so under max-min sharing with coupled rates this is exact
whenever the network is steady during the phase (uncontended, heterogeneous or under constant
contention), and it costs two coflows instead of 2(p-1). ``granularity="steps"`` simulates every
step as its own coflow: use it when links change during a phase (traces, jitter, congestion,
cross traffic). Logarithmic schedules always run round by round; all-to-all always runs step by
step (its steps use different partners, so aggregating them would not be exact).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import simpy

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.collectives import FORMULAS, HIERARCHICAL, PIPELINE_SEGMENT_BYTES, formula
from flexcomm.costmodel.compressed import (
    DEFAULT_ALGORITHMS,
    DEFAULT_PAYLOAD,
    SchemeAlgorithms,
    SparsePayload,
    scheme_parts,
    topk_count,
)
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.nccl_model import is_nccl_algorithm
from flexcomm.costmodel.units import parse_size
from flexcomm.sim.network import Network
from flexcomm.sim.records import explain

GRANULARITIES = ("aggregate", "steps")

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

#: The schedule of every (collective, algorithm) of :data:`costmodel.collectives.FORMULAS`.
SCHEDULES: dict[tuple[str, str], Schedule] = {
    ("allreduce", "ring"): allreduce_ring,
    ("allreduce", "recursive-doubling"): allreduce_recursive_doubling,
    ("allreduce", "tree"): allreduce_tree,
    ("allreduce", "rabenseifner"): allreduce_rabenseifner,
    ("allgather", "ring"): allgather_ring,
    ("allgather", "recursive-doubling"): allgather_recursive_doubling,
    ("allgather", "bruck"): allgather_bruck,
    ("reduce-scatter", "ring"): reduce_scatter_ring,
    ("broadcast", "binomial"): broadcast_binomial,
    ("broadcast", "pipelined-ring"): broadcast_pipelined_ring,
    ("broadcast", "scatter-allgather"): broadcast_scatter_allgather,
    ("alltoall", "pairwise"): alltoall_pairwise,
}
assert set(SCHEDULES) == set(FORMULAS), "every cost-model formula needs a schedule"


# --- running schedules ------------------------------------------------------------------------


#: One piece of a plan: (rank matrix instances x size, steps over local indices, tag prefix).
Segment = tuple[np.ndarray, Iterator[Step], str]


def _execute(env: simpy.Environment, network: Network, segments: Sequence[Segment], gamma: float,
             extra_compute_s: float = 0.0) -> Generator[Any, Any, float]:
    """Run the segments' steps in order; returns the elapsed simulated seconds."""
    start = env.now
    for ranks, steps, prefix in segments:
        gkey = (ranks.shape, ranks.tobytes())
        tags: dict[str, str] = {}
        for groups, reduce_bytes, rounds, phase in steps:
            tag = tags.get(phase)
            if tag is None:
                tag = tags[phase] = f"{prefix}:{phase}"
            events = []
            for local_key, src, dst, nbytes in groups:
                key = (gkey, local_key)
                pattern = network.cached(key)
                if pattern is None:
                    pairs = np.stack([ranks[:, src].ravel(), ranks[:, dst].ravel()], axis=1)
                    pattern = network.pattern(pairs, key=key)
                latency = None if rounds == 1 else rounds * pattern.latency()
                events.append(network.transfer(pattern, nbytes, tag, latency))
            if len(events) == 1:
                yield events[0]
            elif events:
                yield env.all_of(events)
            if gamma > 0 and reduce_bytes > 0:
                yield env.timeout(gamma * reduce_bytes)
    if extra_compute_s > 0:
        yield env.timeout(extra_compute_s)
    return env.now - start


def _check_ranks(network: Network, ranks: Sequence[int] | int | None) -> np.ndarray:
    world = network.world_size
    if ranks is None:
        return _arange(world)
    if isinstance(ranks, (int, np.integer)) and not isinstance(ranks, bool):
        if not 1 <= ranks <= world:
            raise InputError("ranks", ranks, f"a rank count 1..{world} of cluster {network.cluster.name}")
        return _arange(int(ranks))
    arr = np.asarray(list(ranks), dtype=np.int64)
    if arr.ndim != 1 or len(arr) == 0:
        raise InputError("ranks", ranks, f"a non-empty list of ranks 0..{world - 1}")
    if arr.min() < 0 or arr.max() >= world:
        raise InputError("ranks", list(ranks), f"ranks 0..{world - 1} of cluster {network.cluster.name}")
    if len(np.unique(arr)) != len(arr):
        raise InputError("ranks", list(ranks), "distinct ranks")
    return arr


def _check_granularity(granularity: str) -> bool:
    if granularity not in GRANULARITIES:
        raise InputError("granularity", granularity, "one of " + ", ".join(GRANULARITIES))
    return granularity == "steps"


def _node_groups(network: Network, ranks: np.ndarray) -> np.ndarray:
    """The ranks as a (nodes x q) matrix, nodes in order of first appearance."""
    order: dict[int, list[int]] = {}
    for r in ranks.tolist():
        order.setdefault(network.node_of(r), []).append(r)
    sizes = {len(v) for v in order.values()}
    if len(sizes) != 1:
        raise InputError("ranks", ranks.tolist(),
                         "the same number of ranks on every node for the hierarchical allreduce")
    return np.array(list(order.values()), dtype=np.int64)


def collective_segments(
    network: Network,
    collective: str,
    algorithm: str,
    ranks: np.ndarray,
    nbytes: float,
    granularity: str = "aggregate",
    inter_algorithm: str = "ring",
    tag: str = "",
) -> list[Segment]:
    """The plan of one collective: segments of steps over rank matrices (see :func:`_execute`)."""
    steps = _check_granularity(granularity)
    prefix = f"{tag}:" if tag else ""
    if (collective, algorithm) == HIERARCHICAL:
        formula("allreduce", inter_algorithm)  # validates the name
        nodes = _node_groups(network, ranks)
        n_nodes, q = nodes.shape
        name = f"{prefix}allreduce/hierarchical"
        return [
            (nodes, ring_reduce_scatter(q, nbytes, steps, "intra-reduce-scatter"), name),
            (nodes.T.copy(), SCHEDULES[("allreduce", inter_algorithm)](n_nodes, nbytes / q, steps),
             f"{name}/inter-{inter_algorithm}"),
            (nodes, ring_allgather(q, nbytes / q, steps, "intra-allgather"), name),
        ]
    formula(collective, algorithm)  # clear InputError for unknown names
    schedule = SCHEDULES[(collective, algorithm)]
    return [(ranks[None, :], schedule(len(ranks), nbytes, steps), f"{prefix}{collective}/{algorithm}")]


def run_collective(
    env: simpy.Environment,
    network: Network,
    collective: str,
    algorithm: str,
    ranks: Sequence[int] | int | None,
    nbytes: float | str,
    tag: str = "",
    gamma: float = 0.0,
    granularity: str = "aggregate",
    inter_algorithm: str = "ring",
) -> simpy.Process:
    """Start one collective over ``ranks`` (their order is the algorithm's rank order) as a process.

    Sizes follow :mod:`costmodel.collectives` (allgather: bytes each rank contributes). ``gamma``
    is seconds per reduced byte, as in :class:`~costmodel.model.CostModel`. ``inter_algorithm``
    is the inter-node allreduce of ``("allreduce", "hierarchical")``. The process's value is the
    collective's simulated duration in seconds.
    """
    group = _check_ranks(network, ranks)
    size = parse_size(nbytes, "nbytes")
    gamma = _check_gamma(gamma)
    if is_nccl_algorithm(algorithm):
        return env.process(_execute_nccl(env, network, collective, algorithm, group, size, tag))
    segments = collective_segments(network, collective, algorithm, group, size, granularity, inter_algorithm, tag)
    return env.process(_execute(env, network, segments, gamma))


def _execute_nccl(env: simpy.Environment, network: Network, collective: str, algorithm: str, ranks: np.ndarray,
                  nbytes: float, tag: str) -> Generator[Any, Any, float]:
    """One NCCL call: the NCCL-grade model's latency, then its bandwidth term as one ring coflow.

    NCCL's channels are not flows the network graph knows (NVLink, per-rail NICs), so the call carries the
    bytes that take exactly the model's bandwidth time on the *uncontended* ring of these ranks; when links
    slow down (traces, jitter) or other jobs share them, the coflow slows with them. Uncontended, the
    simulator therefore equals :meth:`CostModel.nccl_choice` to rounding."""
    from flexcomm.costmodel.model import CostModel

    start = env.now
    choice = CostModel.from_cluster(network.cluster).nccl_choice(collective, algorithm, nbytes, len(ranks))
    if choice.latency_s > 0:
        yield env.timeout(choice.latency_s)
    if len(ranks) > 1 and choice.bandwidth_s > 0:
        pairs = np.stack([ranks, np.roll(ranks, -1)], axis=1)
        pattern = network.pattern(pairs, key=("nccl-ring", ranks.tobytes()))
        rate = float((network.cluster_bandwidth[pattern.res] / pattern.cnt).min()) if len(pattern.res) else math.inf
        if math.isfinite(rate):
            yield network.transfer(pattern, choice.bandwidth_s * rate, f"{tag}:{collective}/nccl" if tag
                                   else f"{collective}/nccl", latency_s=0.0)
        else:  # ranks of one node: no modelled link to share
            yield env.timeout(choice.bandwidth_s)
    return env.now - start


def _check_gamma(gamma: float) -> float:
    gamma = float(gamma)
    if not math.isfinite(gamma) or gamma < 0:
        raise InputError("gamma", gamma, "non-negative seconds per reduced byte")
    return gamma


# --- compressed schemes -----------------------------------------------------------------------


def scheme_collectives(
    scheme: str,
    numel: float,
    ranks: int,
    ratio: float,
    payload: SparsePayload = DEFAULT_PAYLOAD,
    algorithms: SchemeAlgorithms = DEFAULT_ALGORITHMS,
) -> list[tuple[str, str, float, float]]:
    """The scheme's collectives in order as (collective, algorithm, nbytes, extra reduced bytes).

    The list and its order come from :func:`costmodel.compressed.scheme_parts`; the message sizes
    are the payload's (values n*vb for dense; k (vb + ib) per rank for topk-ag; k ib indices and
    k vb values for topk-ar, 4-byte norms for VAR's owner election), checked against the parts'
    beta coefficients so the simulator cannot drift from the cost model. Reduction work the
    collective itself does not account for (topk-ag's scatter-add) is the extra reduced bytes.
    """
    parts = scheme_parts(scheme, numel, ranks, ratio, payload, algorithms)
    vb, ib = payload.value_bytes, payload.index_bytes
    if scheme == "dense":
        sizes = [float(numel) * vb]
    else:
        k = float(topk_count(numel, ratio))
        sizes = [k * (vb + ib)] if scheme == "topk-ag" else [k * ib, k * vb]
        if scheme == "topk-ar" and algorithms.index_owner == "var":
            sizes.append(4.0)  # one fp32 norm per rank to elect the owner
    if len(sizes) != len(parts):
        raise AssertionError(f"costmodel.compressed lists {len(parts)} collectives for {scheme}, sim {len(sizes)}")
    plan = []
    for (collective, algorithm, coef), nbytes in zip(parts, sizes, strict=True):
        own = formula(collective, algorithm)(nbytes, ranks)
        if not (np.allclose(own.beta, coef.beta) and np.allclose(own.alpha, coef.alpha)):
            raise AssertionError(f"sim and costmodel.compressed disagree on the size of {scheme}'s {collective}")
        plan.append((collective, algorithm, nbytes, float(coef.gamma - own.gamma)))
    return plan


def run_scheme(
    env: simpy.Environment,
    network: Network,
    scheme: str,
    numel: float,
    ranks: Sequence[int] | int | None,
    ratio: float,
    payload: SparsePayload = DEFAULT_PAYLOAD,
    algorithms: SchemeAlgorithms = DEFAULT_ALGORITHMS,
    tag: str = "",
    gamma: float = 0.0,
    granularity: str = "aggregate",
) -> simpy.Process:
    """Start one gradient exchange (dense, topk-ag or topk-ar) of ``numel`` elements kept at ``ratio``.

    Runs the scheme's collectives one after the other (:func:`scheme_collectives`), each followed
    by its extra reduction work; the process's value is the simulated duration in seconds.
    """
    group = _check_ranks(network, ranks)
    gamma = _check_gamma(gamma)
    plan = scheme_collectives(scheme, numel, len(group), ratio, payload, algorithms)
    prefix = f"{tag}:{scheme}" if tag else scheme

    def run() -> Generator[Any, Any, float]:
        start = env.now
        for collective, algorithm, nbytes, extra in plan:
            segments = collective_segments(network, collective, algorithm, group, nbytes, granularity, tag=prefix)
            yield from _execute(env, network, segments, gamma, gamma * extra)
        return env.now - start

    return env.process(run())


# --- one-shot convenience ---------------------------------------------------------------------


@dataclass
class SimResult:
    """Simulated seconds of one run and its per-coflow record (:data:`sim.records.COLUMNS`)."""

    seconds: float
    flows: pd.DataFrame = field(repr=False)
    events: int | None = None

    def explain(self, predicted: float | None = None) -> str:
        """Where the time went, and the difference from ``predicted`` (e.g. the cost model's) if given."""
        return explain(self.flows, self.seconds, predicted)


def _simulate(cluster: Cluster | str, dynamics: Any, start: Any) -> SimResult:
    from flexcomm.sim.network import CountingEnvironment

    env = CountingEnvironment()
    network = Network(env, load_cluster(cluster), dynamics=dynamics)
    process = start(env, network)
    env.run(until=process)
    return SimResult(float(process.value), network.recorder.frame(), env.events_processed)


def simulate_collective(
    cluster: Cluster | str,
    collective: str,
    algorithm: str,
    nbytes: float | str,
    ranks: Sequence[int] | int | None = None,
    dynamics: Any = None,
    **kw: Any,
) -> SimResult:
    """Build an environment and a network, run one collective, return its time and record.

    ``ranks``: None for every rank of the cluster, a count p for ranks 0..p-1 (the group the cost
    model prices), or an explicit list. ``kw`` goes to :func:`run_collective` (gamma, granularity,
    inter_algorithm, tag).
    """
    return _simulate(cluster, dynamics,
                     lambda env, net: run_collective(env, net, collective, algorithm, ranks, nbytes, **kw))


def simulate_scheme(
    cluster: Cluster | str,
    scheme: str,
    numel: float,
    ranks: Sequence[int] | int | None = None,
    ratio: float = 1.0,
    dynamics: Any = None,
    **kw: Any,
) -> SimResult:
    """As :func:`simulate_collective` for one gradient exchange (``kw`` goes to :func:`run_scheme`)."""
    return _simulate(cluster, dynamics, lambda env, net: run_scheme(env, net, scheme, numel, ranks, ratio, **kw))
