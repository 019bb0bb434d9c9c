"""NCCL's tuner (costmodel.collective_libraries.tuner): the table cells follow tuning.cc's formulas, overrides act as
NCCL_ALGO / NCCL_PROTO do, and the choice is the minimum predicted time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.collective_libraries.tuner import (
    ALGORITHMS,
    PROTOCOLS,
    Graph,
    NcclSystem,
    algo_time_us,
    choose,
    parse_list,
    tune,
)
from flexcomm.costmodel.collective_libraries.versions import NcclVersion
from flexcomm.costmodel.errors import InputError

GRAPH = Graph(channels=16, bw_intra_GBps=20.0, bw_inter_GBps=20.0)
#: The release these cells were first re-derived from (tuning.cc at v2.20.3-1 = b6475625); newer ones below.
V220 = NcclVersion(2, 20, 3)


def _node(**changes) -> NcclSystem:
    base = {"ranks": 8, "nodes": 1, "compute_capability": 90, "version": V220,
            "graphs": {"ring": GRAPH, "tree": GRAPH, "nvls": Graph(16, 30.0, 30.0)}, "nvswitch": True}
    return NcclSystem(**{**base, **changes})


def test_single_node_ring_allreduce_cells_follow_the_source() -> None:
    table = tune(_node(), "allreduce")
    nsteps = 2 * (8 - 1)
    # latency = baseLat + nsteps x hwLat[NVLink][Ring]; bandwidth = channels x bwIntra x nRanks / nsteps
    assert table.cells[("ring", "ll")].latency_us == pytest.approx(6.6 + nsteps * 0.6)
    assert table.cells[("ring", "simple")].latency_us == pytest.approx(8.4 + nsteps * 3.4)
    assert table.cells[("ring", "simple")].bandwidth_GBps == pytest.approx(16 * 20.0 * 8 / nsteps)
    # LL: a quarter of the bus bandwidth for allreduce, capped by llMaxBws (Hopper, one node: 87.7)
    assert table.cells[("ring", "ll")].bandwidth_GBps == pytest.approx(min(87.7, 16 * 20.0 / 4) * 8 / nsteps)
    # LL128: 0.92 of it, capped by 36.7 GB/s per channel on Hopper
    assert table.cells[("ring", "ll128")].bandwidth_GBps == pytest.approx(min(16 * 20 * 0.92, 16 * 36.7) * 8 / nsteps)
    # tree: min(0.92 x bus, channels x perChMaxTreeBw) and half of it as algorithm bandwidth
    assert table.cells[("tree", "simple")].bandwidth_GBps == pytest.approx(min(16 * 20 * 0.92, 16 * 38.7) * 0.5)
    # NVLS: Simple only, 5/6 of the bus bandwidth, latency hwLat[NVLink][NVLS][Simple] = 23 us
    assert ("nvls", "ll") not in table.cells
    assert table.cells[("nvls", "simple")].latency_us == 23.0
    assert table.cells[("nvls", "simple")].bandwidth_GBps == pytest.approx(16 * 30.0 * 5 / 6)


def test_multi_node_ring_adds_network_steps_and_the_plateau() -> None:
    system = NcclSystem(16, 2, 80, {"ring": GRAPH, "tree": GRAPH}, cpu_vendor="amd", version=V220)
    table = tune(system, "allreduce")
    nsteps, inter = 2 * 15, 2 * 2
    # intra latency raised to the net overhead (AMD: 2 us, x3 for Simple); network steps at hwLat[NET]
    expected = 8.4 + (nsteps - inter) * max(3.4, 2.0 * 3) + inter * 14.0
    assert table.cells[("ring", "simple")].latency_us == pytest.approx(expected)
    big = 1 << 30
    assert algo_time_us(table, "ring", "simple", big) == pytest.approx(
        expected * 1.4 + big / (1000 * table.cells[("ring", "simple")].bandwidth_GBps))


def test_tree_bandwidth_is_corrected_for_mid_sizes() -> None:
    table = tune(_node(), "allreduce")
    bw = table.cells[("tree", "simple")].bandwidth_GBps
    lat = table.cells[("tree", "simple")].latency_us
    nbytes = 64 << 12  # log2(bytes / 64) = 12: the source's factor .5 for Simple
    assert algo_time_us(table, "tree", "simple", nbytes) == pytest.approx(lat + nbytes / (1000 * bw * 0.5))


def test_overrides_act_like_nccl_algo_and_nccl_proto() -> None:
    assert parse_list("^ring", ALGORITHMS, "NCCL_ALGO") == set(ALGORITHMS) - {"ring"}
    assert parse_list("Tree,ring", ALGORITHMS, "NCCL_ALGO") == {"tree", "ring"}
    forced = tune(_node(), "allreduce", algo_env="Ring", proto_env="LL128")
    assert {choose(forced, n).label for n in (8, 1 << 20, 1 << 32)} == {"Ring/LL128"}
    assert choose(tune(_node(), "allreduce", algo_env="^NVLS"), 1 << 32).algorithm != "nvls"
    with pytest.raises(InputError) as info:
        tune(_node(), "allreduce", algo_env="Ring,Butterfly")
    assert info.value.field == "NCCL_ALGO"


def test_nvls_tree_needs_nodes_and_nvls_needs_collnet_across_nodes() -> None:
    one = tune(_node(graphs={"ring": GRAPH, "nvls_tree": GRAPH}), "allreduce")
    assert one.cells[("nvls_tree", "simple")].bandwidth_GBps == 0
    two = tune(NcclSystem(16, 2, 90, {"ring": GRAPH, "nvls": GRAPH}, version=V220), "allreduce")
    assert two.cells[("nvls", "simple")].bandwidth_GBps == 0


def test_small_messages_use_a_low_latency_protocol_and_large_ones_simple_or_nvls() -> None:
    table = tune(_node(), "allreduce")
    assert choose(table, 8).protocol == "ll"
    assert choose(table, 1 << 33).protocol == "simple"


@settings(max_examples=80, deadline=None)
@given(nbytes=st.integers(1, 1 << 34), ranks=st.sampled_from([2, 4, 8]), cc=st.sampled_from([70, 80, 90]),
       collective=st.sampled_from(["allreduce", "allgather", "reduce-scatter", "broadcast"]))
def test_the_choice_is_the_minimum_over_enabled_cells(nbytes: int, ranks: int, cc: int, collective: str) -> None:
    table = tune(NcclSystem(ranks, 1, cc, {"ring": GRAPH, "tree": GRAPH}, version=V220), collective)
    pick = choose(table, nbytes)
    times = [algo_time_us(table, a, p, nbytes) for a in ALGORITHMS for p in PROTOCOLS]
    assert pick.seconds == pytest.approx(min(t for t in times if t is not None) * 1e-6)
    assert pick.seconds > 0


def test_bad_systems_name_their_field() -> None:
    with pytest.raises(InputError) as info:
        NcclSystem(8, 1, 90, {"tree": GRAPH})
    assert info.value.field == "graphs"
    with pytest.raises(InputError) as info:
        Graph(0, 20.0, 20.0)
    assert info.value.field == "channels"
    with pytest.raises(InputError) as info:
        tune(_node(), "gather")
    assert info.value.field == "collective"
