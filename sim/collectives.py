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
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import simpy

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.collective_libraries.algorithms import is_nccl_algorithm
from flexcomm.costmodel.collectives import SCHEDULES, collective_plan  # noqa: F401 - re-exported
from flexcomm.costmodel.compressed import (
    DEFAULT_ALGORITHMS,
    DEFAULT_PAYLOAD,
    SchemeAlgorithms,
    SparsePayload,
    scheme_messages,
)
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.schedules import (  # noqa: F401 - re-exported: the schedules moved to the cost model
    Group,
    Schedule,
    Segment,
    Step,
    _arange,
    _ceil_log2,
    _is_pow2,
    allgather_bruck,
    allgather_recursive_doubling,
    allgather_ring,
    allreduce_rabenseifner,
    allreduce_recursive_doubling,
    allreduce_ring,
    allreduce_tree,
    alltoall_pairwise,
    binomial_broadcast,
    binomial_reduce,
    binomial_scatter,
    broadcast_binomial,
    broadcast_pipelined_ring,
    broadcast_scatter_allgather,
    bruck_allgather,
    bruck_reduce_scatter,
    reduce_scatter_ring,
    ring_allgather,
    ring_reduce_scatter,
)
from flexcomm.costmodel.units import parse_size
from flexcomm.sim.nccl_flows import channel_pairs
from flexcomm.sim.network import CountingEnvironment, Network
from flexcomm.sim.records import explain

GRANULARITIES = ("aggregate", "steps")


# --- running schedules ------------------------------------------------------------------------




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
    """The plan of one collective: segments of steps over rank matrices (see :func:`_execute` and
    :func:`costmodel.schedules.collective_plan`, which the cost model prices the same way)."""
    return collective_plan(network.cluster, collective, algorithm, ranks, nbytes, _check_granularity(granularity),
                           inter_algorithm, tag)


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
    is seconds per reduced byte, as in :class:`~costmodel.cost_model.CostModel`. ``inter_algorithm``
    is the inter-node allreduce of ``("allreduce", "hierarchical")``. The process's value is the
    collective's simulated duration in seconds.
    """
    group = _check_ranks(network, ranks)
    size = parse_size(nbytes, "nbytes")
    gamma = _check_gamma(gamma)
    if is_nccl_algorithm(algorithm):
        _check_granularity(granularity)
        return env.process(_execute_nccl(env, network, collective, algorithm, group, size, tag))
    segments = collective_segments(network, collective, algorithm, group, size, granularity, inter_algorithm, tag)
    return env.process(_execute(env, network, segments, gamma))


def _nccl_model(network: Network, ranks: np.ndarray):  # -> (CostModel, ranks to price), cached per network
    """The model NCCL's choice for ``ranks`` is priced with, and the rank count it prices: the cluster's for a
    group packed onto nodes; for a group over several nodes with g < devices_per_node ranks on the fullest, a
    view of the cluster whose nodes hold g GPUs and the NICs nearest them (what NCCL's topology search sees for
    that communicator; the cost model prices ranks packed onto nodes, which such a group is not). A group over
    several nodes is priced as g ranks on each (an uneven one, 8 + 4, as its fullest node repeated: NCCL's
    rings then run at the pace of the fullest node)."""
    cluster = network.cluster
    per_node = cluster.devices_per_node
    counts = np.unique(ranks // per_node, return_counts=True)[1]
    g, nodes = int(counts.max()), len(counts)
    fabric = cluster.gpu_fabric
    domain = fabric.nvlink_domain if fabric is not None else None
    spread = nodes > 1 and g < per_node and domain in (None, per_node)
    key = (g, nodes) if spread else None
    models = network.cost_models
    if key not in models:
        view = cluster
        if spread:
            nics = max(1, round((cluster.nics_per_node or 1) * g / per_node))
            view = cluster.model_copy(update={
                "devices_per_node": g, "nodes": nodes, "nics_per_node": nics,
                "gpu_fabric": fabric.model_copy(update={"nvlink_domain": None})})
        models[key] = CostModel.from_cluster(view)
    return models[key], (g * nodes if nodes > 1 and domain in (None, per_node) else len(ranks))


def _execute_nccl(env: simpy.Environment, network: Network, collective: str, algorithm: str, ranks: np.ndarray,
                  nbytes: float, tag: str) -> Generator[Any, Any, float]:
    """One NCCL call: the cost model's latency, then its channels' flows over the fabric (:mod:`sim.nccl_flows`).

    Every channel is a flow on each link it crosses (rings through each node's rail GPU, trees over the
    nodes), so jobs sharing NICs or uplinks meet channel by channel. The flows carry the bytes that take
    exactly the model's bandwidth term at their uncontended rate, so with nothing else on the fabric the
    simulator equals :meth:`CostModel.nccl_choice` to rounding; slower links (traces, jitter) or other
    jobs slow them: rates are recomputed at every change of the network or of what shares it, so a fluid
    model needs no chunks for a change to act inside the call."""
    start = env.now
    model, priced_ranks = _nccl_model(network, ranks)
    choice = model.nccl_choice(collective, algorithm, nbytes, priced_ranks)
    if choice.latency_s > 0:
        yield env.timeout(choice.latency_s)
    if len(ranks) < 2 or choice.bandwidth_s <= 0:
        return env.now - start
    run = choice.execution
    channels = max(1, run.channels) if run is not None else 1
    key = ("nccl", ranks.tobytes(), channels, choice.algorithm)
    pattern = network.cached(key)
    if pattern is None:
        pairs = channel_pairs(ranks, network.cluster.devices_per_node, channels,
                              "p2p" if collective == "alltoall" else choice.algorithm)
        pattern = network.pattern(pairs, key=key)
    rate = float((network.cluster_bandwidth[pattern.res] / pattern.cnt).min()) if len(pattern.res) else math.inf
    if not math.isfinite(rate):  # nothing the fabric models (a PCIe box): the model's time, alone
        yield env.timeout(choice.bandwidth_s)
        return env.now - start
    label = f"{tag}:{collective}/nccl" if tag else f"{collective}/nccl"
    yield network.transfer(pattern, choice.bandwidth_s * rate, label, latency_s=0.0)
    return env.now - start


def _check_gamma(gamma: float) -> float:
    gamma = float(gamma)
    if not math.isfinite(gamma) or gamma < 0:
        raise InputError("gamma", gamma, "non-negative seconds per reduced byte")
    return gamma


# --- compressed schemes -----------------------------------------------------------------------


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
    """Start one gradient exchange (a :data:`~costmodel.compressed.PRICED_SCHEMES` scheme) of ``numel``
    elements kept at ``ratio``; with ``SchemeAlgorithms(allreduce="nccl")`` every call runs as NCCL does.

    Runs the scheme's calls one after the other (:func:`costmodel.compressed.scheme_messages`, which the
    cost model prices the same way), each followed
    by its extra reduction work; the process's value is the simulated duration in seconds.
    """
    group = _check_ranks(network, ranks)
    gamma = _check_gamma(gamma)
    plan = [(m.collective, m.algorithm, m.nbytes, m.extra_reduce_bytes)
            for m in scheme_messages(scheme, numel, len(group), ratio, payload, algorithms)]
    prefix = f"{tag}:{scheme}" if tag else scheme

    def run() -> Generator[Any, Any, float]:
        start = env.now
        for collective, algorithm, nbytes, extra in plan:
            if is_nccl_algorithm(algorithm):
                yield from _execute_nccl(env, network, collective, algorithm, group, nbytes, prefix)
                if gamma * extra > 0:
                    yield env.timeout(gamma * extra)
                continue
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
