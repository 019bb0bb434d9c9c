"""The simulator agrees with the cost model where the cost model's assumptions hold.

On an uncontended uniform network (one device per node behind one switch, or the devices of one
node on a non-blocking fabric; a ring across nodes, where each NIC carries one flow each way)
every schedule's simulated time must equal CostModel.from_cluster(...)'s prediction within 1%
(in practice to ~1e-12), for every algorithm of FORMULAS, the hierarchical allreduce and the three
compressed schemes, at 1 KiB..256 MiB, power-of-two and other rank counts, with and without
reduction cost, in both granularities. Before any network, each schedule's step count, bytes and
reduced bytes are checked against the formula's coefficients for p = 1..40.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.collectives import ALGORITHMS as REGISTRY
from flexcomm.costmodel.collectives import FORMULAS, HIERARCHICAL
from flexcomm.costmodel.compressed import SchemeAlgorithms
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.sim.collectives import simulate_collective, simulate_scheme

SIZES = [1024.0, 1e6 + 3, 64 * 2.0**20, 256 * 2.0**20]
GAMMA = 2e-11  # s per reduced byte: small but visible in the totals
ALGORITHMS = [*FORMULAS, HIERARCHICAL]
TOLERANCE = 0.01  # the acceptance bound; observed errors are ~1e-12
#: Schedules whose ranks send several messages at once (gloo's broadcast feeds all its children together).
SHARED_UPLINK = {("broadcast", "binomial-async")}


def _ids(case: tuple) -> str:
    return "-".join(str(x) for x in case)


def _check(sim_seconds: float, predicted: float, what: str) -> None:
    if predicted == 0:
        assert sim_seconds == 0, what
        return
    assert abs(sim_seconds / predicted - 1) < TOLERANCE, f"{what}: sim {sim_seconds} vs model {predicted}"


# --- schedules against the formulas, without a network -----------------------------------------


@pytest.mark.parametrize("key", list(REGISTRY), ids=_ids)
@settings(max_examples=3, deadline=None)
@given(extra=st.integers(0, 2**24))
def test_each_registered_algorithm_s_schedule_counts_its_formula_s_coefficients(key: tuple[str, str],
                                                                                extra: int) -> None:
    """Per registry entry: its schedule's steps = its formula's alpha coefficient, the sum of per-step bytes =
    beta, the reduced bytes = gamma, for p = 1..40 (the sizes: odd, not a multiple of p)."""
    entry = REGISTRY[key]
    n = 3 * 2.0**20 + 12345.0 + extra
    for steps in (True, False):
        for p in range(1, 41):
            coef = entry.formula(n, p)
            rounds = total = reduced = 0.0
            for groups, reduce_bytes, k, _ in entry.schedule(p, n, steps):
                rounds += k
                # a rank sending several messages at once shares its uplink: the step costs them all
                total += max(g[3] * np.bincount(g[1]).max() for g in groups)
                reduced += reduce_bytes
                src = np.concatenate([g[1] for g in groups])
                dst = np.concatenate([g[2] for g in groups])
                assert np.all((src >= 0) & (src < p) & (dst >= 0) & (dst < p) & (src != dst))
                if steps and k == 1:  # one step: every rank receives at most one message
                    assert len(np.unique(dst)) == len(dst), (key, p)
                    if key not in SHARED_UPLINK:  # and sends at most one
                        assert len(np.unique(src)) == len(src), (key, p)
            assert rounds == pytest.approx(float(coef.alpha), abs=1e-9), (key, p)
            assert total == pytest.approx(float(coef.beta), rel=1e-12, abs=1e-6), (key, p)
            assert reduced == pytest.approx(float(coef.gamma), rel=1e-12, abs=1e-6), (key, p)


# --- simulated times against CostModel ----------------------------------------------------------

UNIFORM = [
    # (cluster, ranks): one device per node behind one switch, or inside one node's fabric
    ("8x1-10gbe", 8),
    ("8x1-10gbe", 6),
    ("4x8-a100-ib", 8),
    ("4x8-a100-ib", 5),
]
# Across nodes of 4x8 only schedules that put one flow on each NIC are uncontended: the rings.
ACROSS_NODES = [
    ("allreduce", "ring"), ("allgather", "ring"), ("reduce-scatter", "ring"), ("allreduce", "hierarchical"),
    ("broadcast", "pipelined-ring"),
]


@pytest.mark.parametrize("granularity", ["aggregate", "steps"])
@pytest.mark.parametrize("key", ALGORITHMS, ids=_ids)
@pytest.mark.parametrize("cluster_name,ranks", UNIFORM, ids=[_ids(c) for c in UNIFORM])
def test_collectives_agree_on_uniform_networks(cluster_name: str, ranks: int, key: tuple[str, str],
                                               granularity: str) -> None:
    cluster = load_cluster(cluster_name)
    model = CostModel.from_cluster(cluster, gamma=GAMMA)
    for n in SIZES:
        result = simulate_collective(cluster, *key, n, ranks=ranks, gamma=GAMMA, granularity=granularity)
        predicted = float(model.collective(*key, n, ranks).total)
        _check(result.seconds, predicted, f"{cluster_name} p={ranks} {key} n={n}")


@pytest.mark.parametrize("granularity", ["aggregate", "steps"])
@pytest.mark.parametrize("key", ACROSS_NODES, ids=_ids)
@pytest.mark.parametrize("ranks", [32, 16])
def test_rings_and_hierarchical_agree_across_nodes(ranks: int, key: tuple[str, str], granularity: str) -> None:
    cluster = load_cluster("4x8-a100-ib")
    if key == ("broadcast", "pipelined-ring") and granularity == "steps":
        # step by step, the pipeline's fill and drain steps use only NVLink hops and are faster
        # than the inter-node step the model charges for every step: the sim is below the model
        result = simulate_collective(cluster, *key, 64 * 2.0**20, ranks=ranks, granularity=granularity)
        assert result.seconds < float(CostModel.from_cluster(cluster).collective(*key, 64 * 2.0**20, ranks).total)
        return
    model = CostModel.from_cluster(cluster, gamma=GAMMA)
    for n in SIZES:
        result = simulate_collective(cluster, *key, n, ranks=ranks, gamma=GAMMA, granularity=granularity)
        _check(result.seconds, float(model.collective(*key, n, ranks).total), f"p={ranks} {key} n={n}")


SCHEME_ALGORITHMS = [
    SchemeAlgorithms(),
    SchemeAlgorithms(allreduce="tree", index_owner="var"),
    SchemeAlgorithms(allreduce="rabenseifner", allgather="ring", broadcast="scatter-allgather"),
    SchemeAlgorithms(allreduce="recursive-doubling", allgather="recursive-doubling", broadcast="pipelined-ring"),
]

SCHEME_GROUPS = [("8x1-v100-40g", 8), ("8x1-v100-40g", 7), ("4x8-a100-ib", 8)]


@pytest.mark.parametrize("granularity", ["aggregate", "steps"])
@pytest.mark.parametrize("algorithms", SCHEME_ALGORITHMS, ids=lambda a: f"{a.allreduce}-{a.allgather}-{a.broadcast}")
@pytest.mark.parametrize("scheme", ["dense", "topk-ag", "topk-ar"])
@pytest.mark.parametrize("cluster_name,ranks", SCHEME_GROUPS, ids=[_ids(c) for c in SCHEME_GROUPS])
def test_schemes_agree_on_uniform_networks(cluster_name: str, ranks: int, scheme: str,
                                           algorithms: SchemeAlgorithms, granularity: str) -> None:
    cluster = load_cluster(cluster_name)
    model = CostModel.from_cluster(cluster, gamma=GAMMA)
    for numel in (1000, 25_000_000):
        for ratio in (0.01, 0.001):
            result = simulate_scheme(cluster, scheme, numel, ranks, ratio, algorithms=algorithms,
                                     gamma=GAMMA, granularity=granularity)
            predicted = float(model.scheme(scheme, numel, ranks, ratio, algorithms=algorithms).total)
            _check(result.seconds, predicted, f"{scheme} numel={numel} ratio={ratio}")


def test_one_rank_costs_nothing() -> None:
    for key in ALGORITHMS:
        assert simulate_collective("8x1-10gbe", *key, 2**20, ranks=1).seconds == 0.0


def test_every_step_is_recorded_with_its_latency() -> None:
    """Step granularity: 2(p-1) coflows, each paying one inter-node latency and n/p bytes per flow."""
    cluster = load_cluster("8x1-10gbe")
    result = simulate_collective(cluster, "allreduce", "ring", 8e6, granularity="steps")
    flows = result.flows
    assert len(flows) == 14 and (flows["flows"] == 8).all()
    assert np.allclose(flows["latency_s"], cluster.inter_link.latency_s)
    assert np.allclose(flows["bytes"], 1e6)
    assert set(flows["tag"]) == {"allreduce/ring:reduce-scatter", "allreduce/ring:allgather"}
    assert math.isclose(flows["end"].max(), result.seconds)


@pytest.mark.parametrize("cluster_name", ["16x8-h100-2to1", "8x1-ring-1g", "8x1-10gbe-slow-node", "4x8-a100-ib"])
@pytest.mark.parametrize(
    "collective,algorithm",
    [("allreduce", "ring"), ("allgather", "ring"), ("reduce-scatter", "ring"), ("allreduce", "hierarchical")],
)
def test_ring_algorithms_agree_on_heterogeneous_and_oversubscribed_clusters(
    cluster_name: str, collective: str, algorithm: str
) -> None:
    """Rings are priced on their own hops (Cluster.ring_link): one hop of latency on a ring topology,
    the NIC rate under an oversubscribed uplink, the slow node's rate: exactly what the flows see."""
    cluster = load_cluster(cluster_name)
    if algorithm == "hierarchical" and cluster.devices_per_node == 1:
        pytest.skip("hierarchical needs several ranks per node")
    n = 64 * 2.0**20
    simulated = simulate_collective(cluster, collective, algorithm, n).seconds
    predicted = float(CostModel.from_cluster(cluster).collective(collective, algorithm, n, cluster.world_size).total)
    assert simulated == pytest.approx(predicted, rel=0.01)
