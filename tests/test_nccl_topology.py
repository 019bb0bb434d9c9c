"""NCCL's topology search by capacity (costmodel.collective_libraries.topology) and the NCCL-grade model on clusters
(costmodel.collective_libraries.call_cost): the graphs the search's passes give on the shipped nodes, walked by hand
from search.cc, NVIDIA's own per-NIC figures, overrides, the simulator agreeing with the model, and errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.collective_libraries.algorithms import parse_nccl_algorithm
from flexcomm.costmodel.collective_libraries.call_cost import predict
from flexcomm.costmodel.collective_libraries.topology import NodeLinks, nccl_system, ring_channels
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError

GiB = 1 << 30


def _graphs(cluster: Cluster, ranks: int | None = None) -> dict[str, tuple[int, float, float]]:
    system = nccl_system(cluster, ranks or cluster.world_size)
    return {k: (g.channels, g.bw_intra_GBps, g.bw_inter_GBps) for k, g in system.graphs.items()}


def _busbw(cluster: Cluster, size: float, ranks: int, algorithm: str = "nccl") -> float:
    choice = predict(cluster, "allreduce", size, ranks, algorithm)
    return size / choice.seconds * 2 * (ranks - 1) / ranks / 1e9


def test_one_dgx_a100_gets_twelve_rings_of_20_gbps() -> None:
    # 12 NVLinks x 20 GB/s = 240: pass 1 finds 6 x 40 (= totalBw, stop); 40 >= 25 doubles to 12 x 20;
    # pass 2 cannot carry 12 channels at 30
    assert _graphs(load_cluster("dgx-a100-80g").with_nodes(1))["ring"] == (12, 20.0, 20.0)


def test_one_dgx_h100_rings_and_nvls_follow_the_passes() -> None:
    graphs = _graphs(load_cluster("dgx-h100").with_nodes(1))
    # 18 x 20.6 = 370.8: 6 x 60 = 360 is the most any speed reaches, then doubled to 12 x 30
    assert graphs["ring"] == (12, 30.0, 30.0)
    # NVLS: every GPU carries (channels + 1) x speed (the head twice): 8 heads fit at 40, not at 42+
    assert graphs["nvls"][:2] == (8, 40.0)
    assert "nvls_tree" not in graphs  # one node: no NVLS tree


def test_nic_bound_rings_match_nvidias_per_nic_figures() -> None:
    # NVIDIA's engineers: ~24 GB/s of allreduce busbw per 200G HDR NIC, 46-48 GB/s per 400G NDR NIC
    a100 = load_cluster("dgx-a100-80g").with_nodes(2)
    assert _graphs(a100)["ring"] == (8, 24.0, 24.0)
    assert _busbw(a100, 8 * GiB, 16, "nccl:ring/simple") / 8 == pytest.approx(24.0, rel=0.01)
    h100 = load_cluster("dgx-h100")
    assert _graphs(h100)["ring"] == (8, 48.0, 48.0)
    assert 46.0 <= _busbw(h100, 8 * GiB, 16, "nccl:ring/simple") / 8 <= 48.0


def test_nvls_on_eight_h100s_peaks_near_480_gbps_busbw() -> None:
    one = load_cluster("dgx-h100").with_nodes(1)
    choice = predict(one, "allreduce", 8 * GiB, 8)
    assert choice.algorithm == "nvls"
    assert 440 <= _busbw(one, 8 * GiB, 8) <= 500  # NVIDIA: "near 480 GB/s"


def test_half_the_nics_double_the_channels_per_nic() -> None:
    four = Cluster.from_dict({**load_cluster("dgx-h100").to_dict(), "nics_per_node": 4, "nodes": 5})
    # 4 NICs x 1 channel at 48 = 192, doubled (4 channels is not > 4) to 8 x 24
    assert _graphs(four)["ring"] == (8, 24.0, 24.0)


def test_a_pcie_box_without_p2p_is_bound_by_the_host() -> None:
    box = load_cluster("pcie-4x-rtx4090")  # one AMD socket: the GPU's Gen4 x16 link (24 GB/s) binds
    # maxBw 24: 1 x 20 first, then 2 x 12 = 24 = totalBw stops the search; 12 < 25 is not doubled
    assert _graphs(box)["ring"] == (2, 12.0, 12.0)
    two = Cluster.from_dict({**box.to_dict(), "gpu_fabric": {**box.gpu_fabric.model_dump(), "sockets": 2}})
    assert _graphs(two)["ring"][1] <= 16.0  # AMD_BW between the sockets


@settings(max_examples=60, deadline=None)
@given(nvlink=st.floats(20, 800), nics=st.integers(0, 16), path=st.floats(1, 60), gpus=st.integers(1, 8),
       intra=st.sampled_from(["nvswitch", "pcie"]), s1=st.floats(0.1, 90), s2=st.floats(0.1, 90))
def test_more_speed_never_fits_more_channels(nvlink: float, nics: int, path: float, gpus: int, intra: str,
                                             s1: float, s2: float) -> None:
    node = NodeLinks(gpus, nvlink if intra != "pcie" else 0.0, intra, 24.0, nics, path, None, False)
    low, high = sorted((s1, s2))
    net = nics > 0
    assert ring_channels(node, high, net, 16) <= ring_channels(node, low, net, 16)
    c = ring_channels(node, low, net, 16)
    if net and c:
        assert c <= nics * math.floor(path / low + 1e-9)


def test_algorithm_names_and_overrides() -> None:
    assert parse_nccl_algorithm("nccl") == (None, None)
    assert parse_nccl_algorithm("nccl:ring/ll128") == ("Ring", "LL128")
    assert parse_nccl_algorithm("nccl:/simple") == (None, "Simple")
    for bad in ("nccl:", "nccl:ring/ll256", "nccl:nvlsx", "ncclring"):
        with pytest.raises(InputError, match="nccl:ALGO/PROTO"):
            parse_nccl_algorithm(bad)
    h100 = load_cluster("dgx-h100")
    forced = predict(h100, "allreduce", 64 << 20, 16, "nccl:ring/ll128")
    assert (forced.algorithm, forced.protocol) == ("ring", "ll128")
    from_env = predict(h100, "allreduce", 64 << 20, 16, env={"NCCL_ALGO": "Tree"})
    assert from_env.algorithm == "tree"
    assert predict(h100, "allreduce", 64 << 20, 16, "nccl:ring", env={"NCCL_ALGO": "Tree"}).algorithm == "ring"


def test_cost_model_and_simulator_price_nccl_alike() -> None:
    from flexcomm.sim.collectives import simulate_collective

    h100 = load_cluster("dgx-h100")
    model = CostModel.from_cluster(h100)
    for size in (1 << 20, 256 << 20):
        expected = model.nccl_choice("allreduce", "nccl", size, 16).seconds
        assert float(model.collective("allreduce", "nccl", size, 16).total) == pytest.approx(expected)
        simulated = simulate_collective(h100, "allreduce", "nccl", size).seconds
        assert simulated == pytest.approx(expected, rel=1e-9)


def test_the_simulated_nccl_call_slows_when_its_links_do() -> None:
    from flexcomm.sim.collectives import simulate_collective
    from flexcomm.sim.dynamics import TraceDynamics, TraceEvent

    h100 = load_cluster("dgx-h100")
    size = 1 << 30
    plain = simulate_collective(h100, "allreduce", "nccl", size).seconds
    half = TraceDynamics([TraceEvent(0.0, "*", bandwidth_Bps=h100.inter_link.bandwidth_Bps / 2)])
    slowed = simulate_collective(h100, "allreduce", "nccl", size, dynamics=half).seconds
    latency = CostModel.from_cluster(h100).nccl_choice("allreduce", "nccl", size, 16).latency_s
    assert slowed - latency == pytest.approx(2 * (plain - latency), rel=1e-6)


def test_clusters_without_a_gpu_fabric_are_refused_and_rccl_is_priced_as_rccl() -> None:
    with pytest.raises(InputError, match="cluster.gpu_fabric"):
        CostModel.from_cluster(load_cluster("16x8-h100-2to1")).collective("allreduce", "nccl", 1 << 20, 8)
    amd = Path(__file__).parent.parent / "validation" / "nccl-tests" / "clusters" / "_amd-mi300x.yaml"
    run = predict(Cluster.from_file(amd), "allreduce", 1 << 30, 8).execution
    assert run is not None and run.library == "rccl" and (run.algorithm, run.protocol) == ("ring", "simple")
    # RCCL's ring on one MI300X node carries 7 xGMI links x 48 GB/s: 1 GiB in about 2 x 7/8 x 1 GiB / 336 GB/s
    assert run.bandwidth_s == pytest.approx(2 * 7 / 8 * (1 << 30) / 336e9, rel=1e-9)
    with pytest.raises(InputError, match="collective"):
        predict(Cluster.from_file(amd), "alltoall", 1 << 20, 8)


def test_gpu_fabric_errors_name_the_field() -> None:
    base = load_cluster("dgx-h100").to_dict()
    cases = [({"compute_capability": 90, "intra": "nvswitch"}, "nvlinks_per_gpu"),
             ({"compute_capability": 90, "intra": "pcie", "pcie": "gen9x16"}, "pcie"),
             ({"compute_capability": 80, "intra": "nvswitch", "nvlinks_per_gpu": 12, "nvls": True}, "nvls"),
             ({"compute_capability": 90, "intra": "mesh"}, "intra")]
    for fabric, field in cases:
        with pytest.raises(InputError) as info:
            Cluster.from_dict({**base, "gpu_fabric": fabric})
        assert info.value.field == f"cluster.gpu_fabric.{field}"


def test_extends_merges_over_a_shipped_cluster_and_refuses_cycles(tmp_path: Path) -> None:
    child = tmp_path / "run.yaml"
    child.write_text("extends: dgx-h100\nname: run\nnodes: 5\nnics_per_node: 4\ngpu_fabric:\n  nvls: false\n",
                     encoding="utf-8")
    cluster = Cluster.from_file(child)
    assert (cluster.nodes, cluster.nics_per_node, cluster.gpu_fabric.nvls) == (5, 4, False)
    assert cluster.gpu_fabric.nvlinks_per_gpu == 18  # kept from the base, key by key
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nname: a\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\nname: b\n", encoding="utf-8")
    with pytest.raises(InputError, match="cycle"):
        Cluster.from_file(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("extends: no-such-cluster\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        Cluster.from_file(tmp_path / "c.yaml")
    assert info.value.field == "cluster.extends"


def test_every_shipped_gpu_cluster_prices_every_tuned_collective() -> None:
    from flexcomm.costmodel.cluster import cluster_names

    priced = 0
    for name in cluster_names():
        cluster = load_cluster(name)
        if cluster.gpu_fabric is None:
            continue
        for collective in ("allreduce", "allgather", "reduce-scatter", "broadcast", "alltoall"):
            choice = predict(cluster, collective, 1 << 28, cluster.world_size)
            assert choice.seconds > 0 and choice.bandwidth_s > 0
            priced += 1
    assert priced >= 50
