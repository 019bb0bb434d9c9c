"""Bandwidth sharing, topologies and records of the flow-level network, against hand calculations."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.sim.collectives import simulate_collective
from flexcomm.sim.network import Network

GBIT = 1e9 / 8  # bytes/s in one Gbit/s


def _run(cluster: Cluster | str, transfers: list[tuple[list[tuple[int, int]], float]]) -> tuple[list, Network]:
    """Start every (pairs, bytes) at time 0; return their records in start order."""
    env = simpy.Environment()
    net = Network(env, cluster)
    events = [net.transfer(pairs, nbytes, tag=str(i)) for i, (pairs, nbytes) in enumerate(transfers)]
    env.run()
    return [e.value for e in events], net


def _with(name: str, **changes: object) -> Cluster:
    data = load_cluster(name).to_dict()
    for dotted, value in changes.items():
        target = data
        *path, last = dotted.split("__")
        for part in path:
            target = target[part]
        target[last] = value
    return Cluster.from_dict(data)


def test_two_coflows_sharing_a_link_each_get_half() -> None:
    n, lat, bw = 1.25e9, 25e-6, 10 * GBIT  # 8x1-10gbe: 1 s alone
    (a, b), _ = _run("8x1-10gbe", [([(0, 1)], n), ([(0, 2)], n)])
    assert a.end == pytest.approx(lat + 2 * n / bw, rel=1e-12)
    assert b.end == pytest.approx(lat + 2 * n / bw, rel=1e-12)
    assert a.bottleneck == "node0->switch" and a.bottleneck_flows == 2


def test_the_survivor_speeds_up_when_the_other_coflow_ends() -> None:
    n, lat, bw = 1.25e9, 25e-6, 10 * GBIT
    (a, b), _ = _run("8x1-10gbe", [([(0, 1)], n), ([(0, 2)], n / 2)])
    assert b.end == pytest.approx(lat + (n / 2) / (bw / 2), rel=1e-12)  # half rate until done
    assert a.end == pytest.approx(b.end + (n - n / 2) / bw, rel=1e-12)  # then the whole link


def test_max_min_gives_the_unused_share_to_the_other_flow() -> None:
    """Into node 0 come a flow capped at 1 Gbit/s by node 5's NIC and a free one: 1 + 9 Gbit/s."""
    n = 1e8
    (slow, fast), _ = _run("8x1-10gbe-slow-node", [([(5, 0)], n), ([(1, 0)], 9 * n)])
    assert slow.end - slow.latency_end == pytest.approx(n / GBIT, rel=1e-12)
    assert fast.end - fast.latency_end == pytest.approx(9 * n / (9 * GBIT), rel=1e-12)
    assert slow.bottleneck in ("node5->switch", "switch->node0") and "node5" in slow.bottleneck


def test_a_coflow_demand_counts_its_flows() -> None:
    """Two flows of one coflow and one flow of another cross node0->switch: bw/3 per flow, so the
    two-flow coflow gets 2/3 of the link; when the other ends its flows get bw/2 each."""
    n, bw = 1e8, 10 * GBIT
    (two, one), _ = _run("8x1-10gbe", [([(0, 1), (0, 2)], n), ([(0, 3)], n / 2)])
    assert one.end - one.latency_end == pytest.approx((n / 2) / (bw / 3), rel=1e-12)
    assert two.end - one.end == pytest.approx((n / 2) / (bw / 2), rel=1e-12)
    assert two.bottleneck_flows == 3


def test_oversubscribed_uplink_slows_cross_leaf_flows_by_its_factor() -> None:
    """16x8-h100-2to1: 4 nodes per leaf, uplink 4 x 400 Gbit/s / 2. Four nodes sending across leaves at
    once get 200 Gbit/s each (half the NIC); inside a leaf they keep 400 Gbit/s."""
    cluster = load_cluster("16x8-h100-2to1")
    nic = 400 * GBIT
    n = 1e9
    leaf0 = [8 * i for i in range(4)]
    cross, _ = _run(cluster, [([(r, r + 32)], n) for r in leaf0])  # node i -> node i + 4 (next leaf)
    for rec in cross:
        assert rec.latency_s == pytest.approx(2 * cluster.inter_link.latency_s)
        assert rec.end - rec.latency_end == pytest.approx(n / (nic / 2), rel=1e-12)
        assert rec.bottleneck == "leaf0->spine" and rec.bottleneck_flows == 4
    alone, _ = _run(cluster, [([(0, 32)], n)])
    assert alone[0].end - alone[0].latency_end == pytest.approx(n / nic, rel=1e-12)
    inside, _ = _run(cluster, [([(0, 8)], n), ([(16, 24)], n)])  # nodes 0->1 and 2->3, same leaf
    for rec in inside:
        assert rec.end - rec.latency_end == pytest.approx(n / nic, rel=1e-12)


def test_slow_node_sets_the_ring_pace_and_is_named_as_bottleneck() -> None:
    cluster = load_cluster("8x1-10gbe-slow-node")
    n, p = 64 * 2.0**20, 8
    for granularity in ("aggregate", "steps"):
        result = simulate_collective(cluster, "allreduce", "ring", n, granularity=granularity)
        expected = 2 * (p - 1) * cluster.inter_link.latency_s + 2 * (p - 1) / p * n / GBIT
        assert result.seconds == pytest.approx(expected, rel=1e-9)
        assert result.flows["bottleneck"].str.contains("node5").all()
        assert (result.flows["bottleneck_Bps"] == GBIT).all()
        assert "node5" in result.explain()
    # the cost model prices the group's slowest link too, so here they agree
    model = CostModel.from_cluster(cluster).collective("allreduce", "ring", n, p)
    assert result.seconds == pytest.approx(float(model.total), rel=1e-9)


def test_ring_on_an_oversubscribed_two_level_network_runs_at_the_nic_rate() -> None:
    """A packed ring crosses each leaf uplink once per direction, so it runs at the NIC's rate, not
    at the uplink's fair share per node; the cost model prices rings on their own hops
    (Cluster.ring_link) and agrees with the simulator, while the group's slowest link (what the
    logarithmic algorithms see, every node sending at once) is the uplink share, 2x slower here.
    The record names the NIC, not the uplink, as bottleneck."""
    cluster = load_cluster("16x8-h100-2to1")
    n = 256 * 2.0**20
    p = cluster.world_size
    result = simulate_collective(cluster, "allreduce", "ring", n)
    model = CostModel.from_cluster(cluster).collective("allreduce", "ring", n, p)
    expected = float(model.latency) + 2 * (p - 1) / p * n / (400 * GBIT)
    assert result.seconds == pytest.approx(expected, rel=1e-9)
    assert float(model.total) == pytest.approx(expected, rel=1e-9)
    _, slowest = cluster.group_link()
    assert slowest.bandwidth_Bps == pytest.approx(200 * GBIT)
    assert result.flows["bottleneck"].str.match(r"(node\d+->leaf\d+|leaf\d+->node\d+)$").all()


def test_half_duplex_link_is_shared_by_both_directions() -> None:
    full = load_cluster("8x1-10gbe")
    half = _with("8x1-10gbe", inter_link__duplex="half")
    n = 1e8
    (a_full, b_full), _ = _run(full, [([(0, 1)], n), ([(1, 0)], n)])
    (a_half, b_half), net = _run(half, [([(0, 1)], n), ([(1, 0)], n)])
    assert a_full.end - a_full.latency_end == pytest.approx(n / (10 * GBIT), rel=1e-12)
    assert a_half.end - a_half.latency_end == pytest.approx(2 * n / (10 * GBIT), rel=1e-12)
    assert "node0<->switch" in net.link_names and "node0->switch" not in net.link_names
    assert a_half.bottleneck_flows == 2
    ring_full = simulate_collective(full, "allreduce", "ring", n).seconds
    ring_half = simulate_collective(half, "allreduce", "ring", n).seconds
    latency = 14 * full.inter_link.latency_s
    assert ring_half - latency == pytest.approx(2 * (ring_full - latency), rel=1e-9)


def test_intra_node_fabric_is_non_blocking_but_device_ports_are_shared() -> None:
    cluster = load_cluster("4x8-a100-ib")
    bw, n = cluster.intra_link.bandwidth_Bps, 3e9
    disjoint, _ = _run(cluster, [([(0, 1)], n), ([(2, 3)], n)])
    shared, _ = _run(cluster, [([(0, 1)], n), ([(0, 2)], n)])
    assert disjoint[0].end == pytest.approx(cluster.intra_link.latency_s + n / bw, rel=1e-12)
    assert shared[0].end == pytest.approx(cluster.intra_link.latency_s + 2 * n / bw, rel=1e-12)
    assert shared[0].bottleneck == "dev0->fabric0"


def test_devices_of_a_node_share_its_nic() -> None:
    """Inter-node flows from the 8 GPUs of a node all cross node0->switch: 1/8 of it each."""
    cluster = load_cluster("4x8-a100-ib")
    nic, n = cluster.inter_link.bandwidth_Bps, 1e8
    (rec,), _ = _run(cluster, [([(r, r + 8) for r in range(8)], n)])
    assert rec.end - rec.latency_end == pytest.approx(n / (nic / 8), rel=1e-12)
    assert rec.bottleneck_flows == 8


def test_ring_topology_routes_hop_by_hop() -> None:
    cluster = load_cluster("8x1-ring-1g")
    (rec,), net = _run(cluster, [([(0, 3)], 1e6)])
    assert rec.latency_s == pytest.approx(3 * cluster.inter_link.latency_s)
    assert net.pattern([(0, 3)]).links() == ["node0->node1", "node1->node2", "node2->node3"]


def test_zero_bytes_cost_only_latency_and_explicit_latency_is_honoured() -> None:
    (rec,), _ = _run("8x1-10gbe", [([(0, 1)], 0.0)])
    assert rec.end == pytest.approx(25e-6)
    env = simpy.Environment()
    net = Network(env, "8x1-10gbe")
    event = net.transfer([(0, 1)], 1.25e9, latency_s=0.5)
    env.run()
    assert event.value.end == pytest.approx(1.5, rel=1e-12)


def test_records_frame_has_one_row_per_coflow() -> None:
    _, net = _run("8x1-10gbe", [([(0, 1), (1, 2)], 1e6), ([(3, 4)], 2e6)])
    frame = net.recorder.frame()
    assert list(frame["flows"]) == [2, 1] and list(frame["total_bytes"]) == [2e6, 2e6]
    assert np.allclose(frame["mean_rate_Bps"], 10 * GBIT) and np.all(frame["duration_s"] > 0)


@pytest.mark.parametrize("pairs", [[(0, 0)], [(0, 8)], [(-1, 2)], [], [(1, 2, 3)]])
def test_bad_pairs_are_input_errors(pairs: list) -> None:
    net = Network(simpy.Environment(), "8x1-10gbe")
    with pytest.raises(InputError, match="pairs"):
        net.transfer(pairs, 1.0)


def test_bad_inputs_name_their_field() -> None:
    net = Network(simpy.Environment(), "8x1-10gbe")
    with pytest.raises(InputError, match="nbytes"):
        net.transfer([(0, 1)], -1.0)
    with pytest.raises(InputError, match="link"):
        net.resources("node99")
    with pytest.raises(InputError, match="granularity"):
        simulate_collective("8x1-10gbe", "allreduce", "ring", 1e6, granularity="packets")
    with pytest.raises(InputError, match="algorithm"):
        simulate_collective("8x1-10gbe", "allreduce", "butterfly", 1e6)
    with pytest.raises(InputError, match="ranks"):
        simulate_collective("8x1-10gbe", "allreduce", "ring", 1e6, ranks=[0, 0, 1])
    with pytest.raises(InputError, match="ranks"):
        simulate_collective("4x8-a100-ib", "allreduce", "hierarchical", 1e6, ranks=12)


def test_link_specs_resolve_to_the_documented_edges() -> None:
    net = Network(simpy.Environment(), "8x1-10gbe")
    names = lambda spec: sorted(net.link_names[i] for i in net.resources(spec))  # noqa: E731
    assert names("node3") == ["node3->switch", "switch->node3"]
    assert names("node3->switch") == ["node3->switch"]
    assert names("node3<->switch") == ["node3->switch", "switch->node3"]
    assert len(names("*")) == 16 and len(names("intra")) == 16
    assert names("dev2") == ["dev2->fabric2", "fabric2->dev2"]


def test_steps_and_aggregate_agree_under_steady_contention() -> None:
    """Aggregating a ring phase is exact when the network is steady: heterogeneous, oversubscribed."""
    for name in ("8x1-10gbe-slow-node", "16x8-h100-2to1", "8x1-ring-1g"):
        for key in (("allreduce", "ring"), ("allgather", "ring"), ("allreduce", "hierarchical")):
            agg = simulate_collective(name, *key, 32 * 2.0**20, granularity="aggregate").seconds
            steps = simulate_collective(name, *key, 32 * 2.0**20, granularity="steps").seconds
            assert steps == pytest.approx(agg, rel=1e-9), (name, key)


def test_explicit_rank_lists_route_over_their_own_nodes() -> None:
    """A ring over one GPU per node of 4x8 uses the NICs only: 2(p-1) inter latencies, NIC bandwidth."""
    cluster = load_cluster("4x8-a100-ib")
    n = 64 * 2.0**20
    result = simulate_collective(cluster, "allreduce", "ring", n, ranks=[0, 8, 16, 24])
    expected = 6 * cluster.inter_link.latency_s + 2 * 3 / 4 * n / cluster.inter_link.bandwidth_Bps
    assert result.seconds == pytest.approx(expected, rel=1e-12)
    assert result.flows["bottleneck"].str.contains(r"node\d->switch|switch->node\d").all()


def test_concurrent_collectives_share_the_network() -> None:
    """Two identical rings at once: same latency, twice the bandwidth time (one NIC, two flows)."""
    from flexcomm.sim.collectives import run_collective

    cluster = load_cluster("8x1-10gbe")
    n, p = 32 * 2.0**20, 8
    latency = 2 * (p - 1) * cluster.inter_link.latency_s
    bandwidth = 2 * (p - 1) / p * n / cluster.inter_link.bandwidth_Bps
    for granularity in ("aggregate", "steps"):
        env = simpy.Environment()
        net = Network(env, cluster)
        first = run_collective(env, net, "allreduce", "ring", None, n, tag="bucket0", granularity=granularity)
        second = run_collective(env, net, "allreduce", "ring", None, n, tag="bucket1", granularity=granularity)
        env.run(until=env.all_of([first, second]))
        assert first.value == pytest.approx(latency + 2 * bandwidth, rel=1e-9)
        assert second.value == pytest.approx(first.value, rel=1e-12)
        assert set(net.recorder.frame()["tag"].str.split(":").str[0]) == {"bucket0", "bucket1"}
