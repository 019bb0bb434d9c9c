"""Independent flows (Network.send) and the sharing options: the vectorised engine against the one-coflow-per-
flow engine, max-min monotonicity when coflows and flows mix, RTT weighting, and bad options."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.sim.network import Network

CLUSTERS = ["16x8-h100-2to1", "fat-tree-k8", "torus-4x4x4", "dgx-h100-rail-pod", "8x1-ring-1g"]


def _flows(seed: int, world: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, world, n)
    dst = (src + rng.integers(1, world, n)) % world
    return np.stack([src, dst], axis=1), rng.uniform(1e5, 5e7, n), rng.uniform(0, 2e-3, n)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(CLUSTERS), seed=st.integers(0, 2**16), n=st.integers(1, 60))
def test_send_equals_one_coflow_per_flow(which: str, seed: int, n: int) -> None:
    """Two implementations of independent max-min flows: the sparse filling and the coflow engine."""
    cluster = load_cluster(which)
    pairs, sizes, starts = _flows(seed, cluster.world_size, n)

    def run(vectorised: bool) -> np.ndarray:
        env = simpy.Environment()
        net = Network(env, cluster)
        ends = np.zeros(n)

        def flow(i: int) -> object:
            yield env.timeout(starts[i])
            event = net.send(pairs[i: i + 1], sizes[i]) if vectorised else net.transfer([tuple(pairs[i])], sizes[i])
            value = yield event
            ends[i] = (value[0] if vectorised else value).end

        for i in range(n):
            env.process(flow(i))
        env.run()
        return ends

    np.testing.assert_allclose(run(True), run(False), rtol=1e-9)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(CLUSTERS), seed=st.integers(0, 2**16), n=st.integers(1, 30))
def test_adding_independent_flows_never_speeds_up_a_collective(which: str, seed: int, n: int) -> None:
    cluster = load_cluster(which)
    ranks = np.random.default_rng(seed).choice(cluster.world_size, size=min(8, cluster.world_size), replace=False)
    pairs, sizes, _ = _flows(seed + 1, cluster.world_size, n)

    def ring_end(extra: bool) -> float:
        env = simpy.Environment()
        net = Network(env, cluster)
        event = net.transfer(np.stack([ranks, np.roll(ranks, -1)], axis=1), 2e8)
        if extra:
            net.send(pairs, sizes)
        env.run()
        return event.value.end

    assert ring_end(True) >= ring_end(False) * (1 - 1e-12)


def test_rtt_sharing_gives_the_short_route_the_larger_share() -> None:
    cluster = load_cluster("16x8-h100-2to1")
    # into GPU 0 of node 0: one flow from the same leaf (2 hops), one across the spine (4 hops)
    pairs = np.array([[8, 0], [8 * 12, 0]])
    rates = {}
    for sharing in ("max-min", "rtt"):
        env = simpy.Environment()
        net = Network(env, cluster, sharing=sharing)
        net.send(pairs, 1e9)
        rates[sharing] = net.rates.flowsets[0].rate.copy()
    assert rates["max-min"][0] == pytest.approx(rates["max-min"][1])
    assert rates["rtt"][0] == pytest.approx(2 * rates["rtt"][1])  # route latencies 1 : 2
    assert rates["rtt"].sum() == pytest.approx(rates["max-min"].sum())  # the shared link stays full


def test_flow_coupling_lets_a_collective_steps_flows_finish_apart() -> None:
    cluster = load_cluster("16x8-h100-2to1")
    pairs = np.array([[0, 8], [16, 96]])  # one flow inside leaf 0, one across the spine with others
    ends = {}
    for coupling in ("coflow", "flow"):
        env = simpy.Environment()
        net = Network(env, cluster, coupling=coupling)
        event = net.transfer(pairs, 1e9)
        net.send(np.array([[24, 104], [25, 105]]), 1e9)  # load the spine
        env.run()
        ends[coupling] = event.value
    assert ends["flow"].end == pytest.approx(ends["coflow"].end)  # the slowest flow decides the step
    assert ends["flow"].flows == 2


def test_link_load_adds_up_what_moves() -> None:
    cluster = load_cluster("fat-tree-k8")
    env = simpy.Environment()
    net = Network(env, cluster)
    net.send(np.array([[0, 127], [1, 126]]), 1e9, latency_s=0.0)  # moving at once
    load = net.link_load()
    host_links = [net.routes.link_index[n] for n in ("node0->leaf0.0", "node1->leaf0.0")]
    assert load[host_links].sum() == pytest.approx(2 * cluster.inter_link.bandwidth_Bps)


@pytest.mark.parametrize(("option", "value"), [("coupling", "packet"), ("sharing", "fifo")])
def test_bad_sharing_options_are_one_error(option: str, value: str) -> None:
    with pytest.raises(InputError) as info:
        Network(simpy.Environment(), "4x8-a100-ib", **{option: value})
    assert info.value.field == option


def test_send_refuses_bad_sizes() -> None:
    net = Network(simpy.Environment(), "4x8-a100-ib")
    with pytest.raises(InputError, match="nbytes"):
        net.send([(0, 1)], -5)


def test_a_flow_set_of_zero_bytes_and_no_latency_ends_once() -> None:
    """Over the moment it is sent, it used to stay listed with the allocator, which finished it a second time at
    the next settle (simpy: event already triggered) when other traffic followed."""
    env = simpy.Environment()
    net = Network(env, load_cluster("8x1-10gbe"))
    ends: list[tuple[str, float]] = []

    def job() -> object:
        yield net.send([(0, 1), (2, 3)], 0.0, latency_s=0.0)
        ends.append(("empty", env.now))
        yield net.send([(0, 1)], 1e6)
        ends.append(("1 MB", env.now))

    env.process(job())
    env.run()
    assert [name for name, _ in ends] == ["empty", "1 MB"] and ends[0][1] == 0.0 and ends[1][1] > 0
    assert not net.rates.flowsets
