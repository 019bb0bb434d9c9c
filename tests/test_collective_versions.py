"""NCCL releases (costmodel.collective_libraries.versions): versions parse as people write them, and the tuner
changes at the releases the source changed it, each checked against the formula at that tag."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.collective_libraries.algorithms import parse_nccl_algorithm
from flexcomm.costmodel.collective_libraries.call_cost import explain
from flexcomm.costmodel.collective_libraries.tuner import Graph, NcclSystem, tune
from flexcomm.costmodel.collective_libraries.versions import (
    NcclVersion,
    arch_index,
    parse_version,
    version_in_text,
)
from flexcomm.costmodel.errors import InputError

G = Graph(channels=8, bw_intra_GBps=40.0, bw_inter_GBps=40.0)


def _system(version: tuple[int, int, int], ranks: int = 16, nodes: int = 2, cc: int = 90, **more) -> NcclSystem:
    graphs = {"ring": G, "tree": G, **more.pop("graphs", {})}
    return NcclSystem(ranks, nodes, cc, graphs, version=NcclVersion(*version), **more)


@given(st.integers(19, 30), st.integers(0, 20))
def test_every_release_from_2_19_to_2_30_parses_in_every_spelling(minor: int, patch: int) -> None:
    expected = NcclVersion(2, minor, patch)
    for text in (f"2.{minor}.{patch}", f"v2.{minor}.{patch}-1", f"2.{minor}.{patch}+cuda12.9",
                 f"2{minor:02d}{patch:02d}"):
        assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["2.12", "3.0", "2.31.0", "latest", "", "2.x", True, None])
def test_other_versions_are_one_line_errors_naming_the_field(text: object) -> None:
    with pytest.raises(InputError) as info:
        parse_version(text, "nccl_version")
    assert info.value.field == "nccl_version" and "2.19 to 2.30" in info.value.expected


@pytest.mark.parametrize(("line", "version"), [
    ("node1:11:11 [0] NCCL INFO NCCL version 2.18.3+cuda12.2", (2, 18, 3)),
    ("# nccl-tests version 2.17.9 nccl-headers=22602 nccl-library=22602", (2, 26, 2)),
    ("# nccl_version: Dockerfile at the data commit pins NCCL v2.27.7-1, nccl-tests v2.16.9", (2, 27, 7)),
    ("# nccl_version: NOT stated for this table. defaults: NCCL 2.20.3", None),
])
def test_versions_are_read_from_log_and_header_lines(line: str, version: tuple | None) -> None:
    found = version_in_text(line)
    assert (found.key if found else None) == version


def test_tree_simple_latency_fell_at_2_23_as_the_source_changed_it() -> None:
    # 2 nodes x 8 GPUs: 2 x ((ppn - 1) x hwLat[NVLink][Tree][Simple] + log2(2) x hwLat[NET][Tree][Simple])
    old = tune(_system((2, 20, 3)), "allreduce").cells[("tree", "simple")].latency_us
    new = tune(_system((2, 23, 4)), "allreduce").cells[("tree", "simple")].latency_us
    assert old == pytest.approx(0.0 + 2 * (7 * 28.0 + 1 * 28.0))  # v2.20.3-1: baseLat 0, hwLat 28 / 28
    assert new == pytest.approx(8.4 + 2 * (7 * 4.0 + 1 * 14.0))  # v2.23.4-1: baseLat 8.4, hwLat 4 / 14


def test_ring_ll_bandwidth_and_inter_node_steps_changed_at_2_21_and_2_23() -> None:
    one = dict(ranks=8, nodes=1)
    old = tune(_system((2, 20, 3), **one), "allreduce").cells[("ring", "ll")].bandwidth_GBps
    new = tune(_system((2, 21, 5), **one), "allreduce").cells[("ring", "ll")].bandwidth_GBps
    ratio = 8 / 14
    assert old == pytest.approx(min(87.7, 8 * 40.0 / 4) * ratio)  # a quarter, Hopper's 87.7 cap
    assert new == pytest.approx(min(141.0, 8 * 40.0 * 0.5) * ratio)  # a half, Hopper's cap raised to 141
    # ring allreduce latency: 2 nNodes network steps until 2.22, 2 (nNodes - 1) from 2.23
    lat_old = tune(_system((2, 22, 3)), "allreduce").cells[("ring", "ll")].latency_us
    lat_new = tune(_system((2, 23, 4)), "allreduce").cells[("ring", "ll")].latency_us
    overhead = 1.0  # Intel CPU, LL
    assert lat_old == pytest.approx(6.6 + (30 - 4) * max(0.6, overhead) + 4 * 2.7)
    assert lat_new == pytest.approx(6.6 + (30 - 2) * max(0.6, overhead) + 2 * 2.7)


def test_pat_exists_from_2_23_for_one_gpu_per_node_only() -> None:
    per_node = dict(ranks=8, nodes=8)
    assert ("pat", "simple") not in tune(_system((2, 20, 3), **per_node), "allgather").cells
    cell = tune(_system((2, 23, 4), **per_node), "allgather").cells[("pat", "simple")]
    assert cell.latency_us == pytest.approx(8 + 3 * 14.0 / 3.5 + 8 * 2.8)  # log2i(8) x treeNet/3.5 + 2.8 nRanks
    assert cell.bandwidth_GBps == pytest.approx(8 * 40.0 * 0.85)  # 0.85 until 2.24.3, no algbw ratio
    assert tune(_system((2, 26, 2), **per_node), "allgather").cells[("pat", "simple")].bandwidth_GBps == \
        pytest.approx(8 * 40.0 * 0.75)
    assert ("pat", "simple") not in tune(_system((2, 26, 2)), "allgather").cells  # 8 GPUs a node: no PAT
    with pytest.raises(InputError, match="PAT arrived in 2.23"):
        parse_nccl_algorithm("nccl:pat", NcclVersion(2, 20, 3))


def test_blackwell_reads_hopper_rows_before_2_25_and_its_own_after() -> None:
    assert arch_index(NcclVersion(2, 23, 4), 100) == 2
    assert arch_index(NcclVersion(2, 26, 2), 100) == 3
    wide = Graph(channels=8, bw_intra_GBps=90.0, bw_inter_GBps=90.0)
    one = dict(ranks=8, nodes=1, cc=100, graphs={"ring": wide})
    cell = {v: tune(_system(v, **one), "allreduce", proto_env="LL128").cells[("ring", "ll128")].bandwidth_GBps
            for v in ((2, 23, 4), (2, 26, 2), (2, 29, 2), (2, 29, 7))}
    ratio = 8 / 14  # the per-channel LL128 cap: Hopper's 36.7, Blackwell's 73.4 (2.25), 34.5 (2.29.2), 40 (2.29.7)
    assert cell[(2, 23, 4)] == pytest.approx(8 * 36.7 * ratio)
    assert cell[(2, 26, 2)] == pytest.approx(8 * 73.4 * ratio)
    assert cell[(2, 29, 2)] == pytest.approx(8 * 34.5 * ratio)
    assert cell[(2, 29, 7)] == pytest.approx(8 * 40.0 * ratio)
    assert explain(load_cluster("dgx-b200"), "allreduce", 8 << 30, 16, version="2.23.4").version == "2.23.4"


def test_versions_compare_with_tuples_in_every_direction() -> None:
    v = NcclVersion(2, 28, 0)
    assert v <= (2, 28, 0) and v >= (2, 28) and v == (2, 28) and not v > (2, 28, 0) and v < (2, 28, 1)
    assert sorted([NcclVersion(2, 30, 7), NcclVersion(2, 20, 3)])[0] == NcclVersion(2, 20, 3)


def test_a_cluster_names_its_release_and_a_bad_one_is_refused_by_field() -> None:
    data = load_cluster("dgx-h100").to_dict()
    data["gpu_fabric"]["nccl_version"] = "2.20.3"
    from flexcomm.costmodel.cluster import Cluster

    assert explain(Cluster.from_dict(data), "allreduce", 1 << 20, 16).version == "2.20.3"
    data["gpu_fabric"]["nccl_version"] = "2.12.12"
    with pytest.raises(InputError) as info:
        Cluster.from_dict(data)
    assert info.value.field == "cluster.gpu_fabric.nccl_version" and "2.19 to 2.30" in info.value.expected
