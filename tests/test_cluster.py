"""The cluster object: embedded clusters, round trips, links seen by groups, graph routes, bad input."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import Cluster, cluster_names, load_cluster
from flexcomm.costmodel.cluster_parts import Link
from flexcomm.costmodel.errors import InputError

EXPECTED_CLUSTERS = {
    "8x1-10gbe",
    "4x8-a100-ib",
    "8x1-v100-40g",
    "16x8-h100-2to1",
    "8x1-ring-1g",
    "8x1-10gbe-slow-node",
}
GBIT = 1e9 / 8


def small(**changes: Any) -> dict[str, Any]:
    """A valid 8-node flat cluster dict, with top-level keys replaced."""
    base: dict[str, Any] = {
        "name": "t",
        "nodes": 8,
        "devices_per_node": 2,
        "device": {"name": "gpu", "peak_flops": "100TFLOP/s", "memory": "16GiB"},
        "intra_link": {"latency": "5us", "bandwidth": "100GB/s"},
        "inter_link": {"latency": "20us", "bandwidth": "10Gbit/s"},
    }
    base.update(changes)
    return base


def check_routes_match_graph(cluster: Cluster) -> None:
    """Every pair's route is a walk in to_graph whose edges add up to path_link."""
    graph = cluster.to_graph()
    for a, b in itertools.permutations(range(cluster.nodes), 2):
        route = cluster.path(a, b)
        assert route[0][0] == f"node{a}" and route[-1][1] == f"node{b}"
        assert all(u2 == v1 for (_, v1), (u2, _) in itertools.pairwise(route))
        link = cluster.path_link(a, b)
        assert sum(graph.edges[e]["latency_s"] for e in route) == pytest.approx(link.latency_s, rel=1e-12)
        assert min(graph.edges[e]["bandwidth_Bps"] for e in route) == link.bandwidth_Bps
        if not cluster.overrides or all(o.between is None for o in cluster.overrides):
            assert len(route) == nx.shortest_path_length(graph, f"node{a}", f"node{b}")


# --- embedded clusters and round trips --------------------------------------------------------


def test_embedded_names():
    assert EXPECTED_CLUSTERS <= set(cluster_names())


@pytest.mark.parametrize("name", sorted(EXPECTED_CLUSTERS))
def test_embedded_cluster_loads_and_round_trips(name: str, tmp_path: Path):
    cluster = load_cluster(name)
    assert cluster.name == name and cluster.description
    data = cluster.to_dict()
    assert json.loads(json.dumps(data)) == data  # plain JSON types, SI numbers
    assert isinstance(data["inter_link"]["bandwidth_Bps"], float)
    assert Cluster.from_dict(data) == cluster

    yaml_path = tmp_path / "c.yaml"
    yaml_path.write_text(yaml.safe_dump(data))
    json_path = tmp_path / "c.json"
    json_path.write_text(json.dumps(data))
    assert Cluster.from_file(yaml_path) == cluster
    assert Cluster.from_file(json_path) == cluster
    assert load_cluster(str(json_path)) == cluster
    assert load_cluster(yaml_path) == cluster
    check_routes_match_graph(cluster)


def test_embedded_values_are_in_si():
    a100 = load_cluster("4x8-a100-ib")
    assert a100.world_size == 32
    assert a100.device.peak_flops == 312e12 and a100.device.memory_bytes == 80 * 2**30
    assert a100.intra_link.bandwidth_Bps == 300e9 and a100.intra_link.latency_s == 3e-6
    assert a100.inter_link.bandwidth_Bps == 200 * GBIT and a100.inter_link.latency_s == 5e-6
    gbe = load_cluster("8x1-10gbe")
    assert gbe.inter_link.bandwidth_Bps == 1.25e9 and gbe.inter_link.latency_s == 25e-6
    assert gbe.inter_link.alpha == 25e-6 and gbe.inter_link.beta == 1 / 1.25e9
    assert load_cluster("8x1-v100-40g").inter_link.bandwidth_Bps == 5e9
    h100 = load_cluster("16x8-h100-2to1")
    assert h100.topology.kind == "two-level" and h100.uplink_bandwidth_Bps == 4 * 50e9 / 2


def test_load_cluster_passes_a_cluster_through_and_rejects_unknown_names():
    cluster = load_cluster("8x1-10gbe")
    assert load_cluster(cluster) is cluster
    for spec in ["no-such-cluster", "missing.yaml", Path("missing.json")]:
        with pytest.raises(InputError) as info:
            load_cluster(spec)
        assert info.value.field == "cluster"
        assert "8x1-10gbe" in info.value.expected and "YAML/JSON" in info.value.expected


def test_python_construction_and_aliases():
    link = Link(latency="10us", bandwidth="10Gbit/s")
    assert link == Link(latency_s=1e-5, bandwidth_Bps=1.25e9)
    assert Cluster.from_dict(small(topology="ring")).topology.kind == "ring"
    dev = Cluster.from_dict(small()).device
    assert dev.memory_bytes == 16 * 2**30


# --- ranks, nodes and group links -------------------------------------------------------------


def test_ranks_are_packed_onto_nodes():
    cluster = load_cluster("4x8-a100-ib")
    assert [cluster.node_of(r) for r in (0, 7, 8, 31)] == [0, 0, 1, 3]
    assert cluster.ranks_on_node(3) == list(range(24, 32))
    for bad in (-1, 32, 1.5, True):
        with pytest.raises(InputError):
            cluster.node_of(bad)
    with pytest.raises(InputError):
        cluster.ranks_on_node(4)


def test_group_link_intra_vs_inter():
    cluster = load_cluster("4x8-a100-ib")
    assert cluster.group_link(range(8)) == ("intra", cluster.intra_link)
    assert cluster.group_link([9, 10]) == ("intra", cluster.intra_link)
    kind, link = cluster.group_link([0, 8])
    assert kind == "inter"
    assert (link.bandwidth_Bps, link.latency_s) == (cluster.inter_link.bandwidth_Bps, cluster.inter_link.latency_s)
    assert cluster.group_link() == cluster.group_link(range(32))
    for bad in ([], [32], [-1]):
        with pytest.raises(InputError):
            cluster.group_link(bad)


def test_group_link_sees_the_slow_node():
    cluster = load_cluster("8x1-10gbe-slow-node")
    assert cluster.node_link(5).bandwidth_Bps == 1 * GBIT
    assert cluster.node_link(5).latency_s == cluster.inter_link.latency_s  # only bandwidth overridden
    assert cluster.node_link(4) == cluster.inter_link
    assert cluster.path_link(0, 5).bandwidth_Bps == 1 * GBIT
    assert cluster.path_link(0, 4).bandwidth_Bps == 10 * GBIT
    assert cluster.group_link()[1].bandwidth_Bps == 1 * GBIT
    assert cluster.group_link([0, 1, 2, 3])[1].bandwidth_Bps == 10 * GBIT
    assert cluster.group_link([4, 5])[1].bandwidth_Bps == 1 * GBIT


def test_two_level_latency_and_uplink_share():
    cluster = load_cluster("16x8-h100-2to1")
    nic = 400 * GBIT
    assert cluster.path_link(0, 3) == Link(latency_s=5e-6, bandwidth_Bps=nic)  # same leaf
    assert cluster.path_link(0, 4).latency_s == pytest.approx(10e-6)  # across leaves
    assert cluster.path_link(0, 4).bandwidth_Bps == nic  # uplink capacity 2*nic is not the bottleneck
    assert cluster.group_link(range(32))[1].bandwidth_Bps == nic  # one leaf: no uplink
    assert cluster.group_link([0, 32])[1].bandwidth_Bps == nic  # one node per leaf: share = 2*nic
    assert cluster.group_link([0, 8, 32, 40])[1].bandwidth_Bps == nic  # two per leaf: share = nic
    assert cluster.group_link()[1].bandwidth_Bps == nic / 2  # four per leaf: share = nic/2
    assert cluster.leaf_of(15) == 3


@pytest.mark.parametrize(("oversubscription", "expected_gbit"), [(1, 10), (2, 5), (4, 2.5), (8, 1.25)])
def test_oversubscription_lowers_group_bandwidth(oversubscription, expected_gbit):
    topo = {"kind": "two-level", "nodes_per_switch": 4, "oversubscription": oversubscription}
    cluster = Cluster.from_dict(small(topology=topo))
    _, link = cluster.group_link()
    assert link.bandwidth_Bps == pytest.approx(expected_gbit * GBIT)
    assert cluster.group_link(range(8))[1].bandwidth_Bps == 10 * GBIT  # nodes 0-3 under one leaf


def test_two_level_partial_last_leaf():
    cluster = Cluster.from_dict(small(nodes=6, topology={"kind": "two-level", "nodes_per_switch": 4}))
    graph = cluster.to_graph()
    assert {"leaf0", "leaf1", "spine"} <= set(graph) and "leaf2" not in graph
    check_routes_match_graph(cluster)


# --- rings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "hops", "via"),
    [
        (0, 1, 1, []),
        (1, 0, 1, []),
        (0, 4, 4, [1, 2, 3]),
        (4, 0, 4, [5, 6, 7]),
        (0, 5, 3, [7, 6]),
        (6, 1, 3, [7, 0]),
        (2, 7, 3, [1, 0]),
        (3, 6, 3, [4, 5]),
    ],
)
def test_ring_takes_the_shorter_way(a, b, hops, via):
    cluster = load_cluster("8x1-ring-1g")
    route = cluster.path(a, b)
    assert len(route) == hops
    assert [int(v.removeprefix("node")) for _, v in route[:-1]] == via
    link = cluster.path_link(a, b)
    assert link.latency_s == pytest.approx(hops * 50e-6)
    assert link.bandwidth_Bps == 1 * GBIT
    assert cluster.group_link()[1].latency_s == pytest.approx(4 * 50e-6)  # farthest pair


def test_ring_graph_and_node_override():
    data = load_cluster("8x1-ring-1g").to_dict()
    data["overrides"] = [{"node": 3, "bandwidth": "100Mbit/s"}]
    cluster = Cluster.from_dict(data)
    graph = cluster.to_graph()
    assert set(graph) == {f"node{i}" for i in range(8)}  # no switch
    assert graph.number_of_edges() == 16
    slow = {e for e in graph.edges if graph.edges[e]["bandwidth_Bps"] == 100e6 / 8}
    assert slow == {("node2", "node3"), ("node3", "node2"), ("node3", "node4"), ("node4", "node3")}
    assert cluster.path_link(1, 5).bandwidth_Bps == 100e6 / 8  # 1-2-3-4-5 crosses node 3
    assert cluster.path_link(5, 1).bandwidth_Bps == 1 * GBIT  # tie: clockwise 5-6-7-0-1 avoids node 3
    assert cluster.path_link(0, 2).bandwidth_Bps == 1 * GBIT
    check_routes_match_graph(cluster)


@pytest.mark.parametrize(("nodes", "edges"), [(1, 0), (2, 2), (3, 6)])
def test_tiny_rings(nodes, edges):
    cluster = Cluster.from_dict(small(nodes=nodes, topology="ring"))
    assert cluster.to_graph().number_of_edges() == edges
    if nodes > 1:
        check_routes_match_graph(cluster)
    else:
        assert cluster.group_link() == ("intra", cluster.intra_link)


# --- graph and between overrides --------------------------------------------------------------


def test_flat_graph_shape_and_edge_attributes():
    cluster = load_cluster("8x1-10gbe-slow-node")
    graph = cluster.to_graph()
    assert set(graph) == {f"node{i}" for i in range(8)} | {"switch"}
    assert graph.number_of_edges() == 16
    edge = graph.edges["node5", "switch"]
    assert edge["name"] == "node5->switch" and edge["bandwidth_Bps"] == 1 * GBIT
    assert edge["latency_s"] + graph.edges["switch", "node5"]["latency_s"] == cluster.inter_link.latency_s
    assert graph.nodes["switch"]["kind"] == "switch" and graph.nodes["node0"]["kind"] == "host"
    assert cluster.path(2, 2) == []
    with pytest.raises(InputError):
        cluster.path_link(2, 2)
    with pytest.raises(InputError):
        cluster.path(0, 8)


def test_two_level_graph_shape():
    graph = load_cluster("16x8-h100-2to1").to_graph()
    assert graph.number_of_nodes() == 16 + 4 + 1
    assert graph.number_of_edges() == 2 * (16 + 4)
    assert graph.edges["leaf2", "spine"]["bandwidth_Bps"] == 4 * 400 * GBIT / 2


def test_between_override_on_a_switch_is_a_dedicated_pair_edge():
    cluster = Cluster.from_dict(small(overrides=[{"between": [5, 2], "bandwidth": "1Mbit/s"}]))
    assert cluster.path(2, 5) == [("node2", "node5")]
    assert cluster.path(5, 2) == [("node5", "node2")]
    assert cluster.path_link(2, 5) == Link(latency_s=20e-6, bandwidth_Bps=125e3)  # latency kept
    assert cluster.path_link(2, 4).bandwidth_Bps == 10 * GBIT
    assert cluster.group_link([4, 10])[1].bandwidth_Bps == 125e3  # 2 devices per node: nodes 2 and 5
    assert cluster.group_link([0, 4])[1].bandwidth_Bps == 10 * GBIT  # nodes 0 and 2
    assert cluster.to_graph().edges["node2", "node5"]["kind"] == "override"
    check_routes_match_graph(cluster)


def test_between_override_on_adjacent_ring_nodes_changes_the_cable():
    data = small(topology="ring", overrides=[{"between": [2, 3], "latency": "1ms"}])
    cluster = Cluster.from_dict(data)
    assert cluster.path(1, 4) == [("node1", "node2"), ("node2", "node3"), ("node3", "node4")]
    assert cluster.path_link(1, 4).latency_s == pytest.approx(20e-6 + 1e-3 + 20e-6)
    assert cluster.to_graph().number_of_edges() == 16  # no extra edge
    check_routes_match_graph(cluster)


def test_overrides_apply_in_order_field_by_field():
    overrides = [{"node": 1, "bandwidth": "1Gbit/s", "latency": "1ms"}, {"node": 1, "bandwidth": "2Gbit/s"}]
    cluster = Cluster.from_dict(small(overrides=overrides))
    assert cluster.node_link(1) == Link(latency_s=1e-3, bandwidth_Bps=2 * GBIT)
    assert cluster.path_link(0, 1).latency_s == pytest.approx((20e-6 + 1e-3) / 2)


@pytest.mark.timeout(60)  # a hang guard, not a speed bound: speed lives in benchmarks/
def test_group_link_of_a_large_cluster_is_the_slowest_path():
    # CostModel asks for every group size; k nodes must not mean k^2 Python routes.
    for topology in ("flat", "ring", {"kind": "two-level", "nodes_per_switch": 32, "oversubscription": 4}):
        cluster = Cluster.from_dict(small(nodes=512, devices_per_node=1, topology=topology))
        _, link = cluster.group_link()
        assert link.bandwidth_Bps <= 10 * GBIT


def test_model_copy_does_not_reuse_the_old_network():
    cluster = load_cluster("8x1-10gbe")
    before = cluster.group_link()[1]
    faster = cluster.model_copy(update={"inter_link": Link(latency="1us", bandwidth="100Gbit/s")})
    assert faster.group_link()[1].bandwidth_Bps == 100 * GBIT
    assert cluster.group_link()[1] == before


# --- random clusters --------------------------------------------------------------------------


@st.composite
def cluster_dicts(draw: st.DrawFn) -> dict[str, Any]:
    nodes = draw(st.integers(1, 10))
    kind = draw(st.sampled_from(["flat", "two-level", "ring"]))
    topology: dict[str, Any] = {"kind": kind}
    if kind == "two-level":
        topology["nodes_per_switch"] = draw(st.integers(1, 5))
        topology["oversubscription"] = draw(st.sampled_from([1, 1.5, 2, 4]))
    overrides = []
    for _ in range(draw(st.integers(0, 3)) if nodes > 1 else 0):
        target = (
            {"node": draw(st.integers(0, nodes - 1))}
            if draw(st.booleans())
            else {"between": draw(st.lists(st.integers(0, nodes - 1), min_size=2, max_size=2, unique=True))}
        )
        values = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "bandwidth": st.sampled_from(["1Gbit/s", "40Gbit/s"]),
                    "latency": st.sampled_from(["1us", "1ms"]),
                },
            )
        )
        if not values:
            values = {"bandwidth": "100Mbit/s"}
        overrides.append({**target, **values})
    return small(nodes=nodes, devices_per_node=draw(st.integers(1, 4)), topology=topology, overrides=overrides)


@settings(max_examples=60, deadline=None)
@given(data=cluster_dicts())
def test_random_clusters_round_trip_and_routes_match_graph(data):
    cluster = Cluster.from_dict(data)
    assert Cluster.from_dict(json.loads(json.dumps(cluster.to_dict()))) == cluster
    if cluster.nodes == 1:
        return
    check_routes_match_graph(cluster)
    # group_link is vectorised; it must agree exactly with the per-pair routes, for every subset.
    for nodes in itertools.islice(itertools.combinations(range(cluster.nodes), 3), 20):
        ranks = [node * cluster.devices_per_node for node in (*nodes, nodes[0])]
        kind, link = cluster.group_link(ranks)
        assert kind == "inter"
        pairs = [cluster.path_link(a, b) for a, b in itertools.permutations(nodes, 2)]
        expected_bw = min(p.bandwidth_Bps for p in pairs)
        leaves = {cluster.leaf_of(n) for n in nodes}
        if cluster.topology.kind == "two-level" and len(leaves) > 1:
            crowd = max(sum(cluster.leaf_of(n) == leaf for n in nodes) for leaf in leaves)
            expected_bw = min(expected_bw, cluster.uplink_bandwidth_Bps / crowd)
        assert link.bandwidth_Bps == expected_bw
        assert link.latency_s == max(p.latency_s for p in pairs)
    all_pairs = [cluster.path_link(a, b) for a, b in itertools.permutations(range(cluster.nodes), 2)]
    assert cluster.group_link()[1].latency_s == max(p.latency_s for p in all_pairs)


# --- malformed input --------------------------------------------------------------------------

DELETE = object()


def mutated(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(load_cluster("16x8-h100-2to1").to_dict())
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return data


@pytest.mark.parametrize(
    ("data", "field", "says"),
    [
        (mutated("inter_link.bandwidth_Bps", DELETE), "cluster.inter_link.bandwidth", "10Gbit/s"),
        (mutated("inter_link.bandwidth_Bps", "10 parsecs"), "cluster.inter_link.bandwidth_Bps", "10Gbit/s"),
        (
            {**mutated("inter_link.bandwidth_Bps", DELETE), "inter_link": {"latency": "1us", "bandwidth": "-1Gbit/s"}},
            "cluster.inter_link.bandwidth",
            "positive bandwidth",
        ),
        (mutated("intra_link.latency_s", "soon"), "cluster.intra_link.latency_s", "10us"),
        (mutated("nodes", 0), "cluster.nodes", ">= 1"),
        (mutated("nodes", "many"), "cluster.nodes", ">= 1"),
        (mutated("nodes", True), "cluster.nodes", ">= 1"),
        (mutated("devices_per_node", DELETE), "cluster.devices_per_node", ">= 1"),
        (mutated("topology.kind", "hypercube"), "cluster.topology.kind", "'two-level'"),
        (mutated("topology", "mesh"), "cluster.topology.kind", "'torus'"),
        (mutated("topology", "torus"), "cluster.topology.dims", "[4, 4, 4]"),
        (mutated("topology.nodes_per_switch", DELETE), "cluster.topology.nodes_per_switch", "two-level"),
        (mutated("topology.oversubscription", 0.5), "cluster.topology.oversubscription", ">= 1"),
        (mutated("device.memory_bytes", "lots"), "cluster.device.memory_bytes", "80GiB"),
        (mutated("device.peak_flops", 0), "cluster.device.peak_flops", "312TFLOP/s"),
        (mutated("device", "H100"), "cluster.device", "peak_flops"),
        (mutated("inter_link.bandwith", "1Gbit/s"), "cluster.inter_link.bandwith", "bandwidth"),
        (mutated("inter_link.duplex", "simplex"), "cluster.inter_link.duplex", "'half'"),
        (mutated("overrides", [{"node": 16, "bandwidth": "1Gbit/s"}]), "cluster.overrides.0.node", "0..15"),
        (mutated("overrides", [{"between": [1, 16], "latency": "1ms"}]), "cluster.overrides.0.between", "0..15"),
        (mutated("overrides", [{"between": [3, 3], "latency": "1ms"}]), "cluster.overrides.0.between", "different"),
        (
            mutated("overrides", [{"node": 1, "between": [1, 2], "latency": "1ms"}]),
            "cluster.overrides.0.node",
            "exactly one",
        ),
        (mutated("overrides", [{"node": 1}]), "cluster.overrides.0.bandwidth", "bandwidth and/or a latency"),
        (mutated("overrides", [{"node": 1, "bandwidth": "fast"}]), "cluster.overrides.0.bandwidth", "10Gbit/s"),
        (mutated("name", ""), "cluster.name", "non-empty"),
        ([1, 2], "cluster", "mapping"),
    ],
)
def test_malformed_dicts_and_files_name_the_field(data, field, says, tmp_path: Path):
    with pytest.raises(InputError) as info:
        Cluster.from_dict(data)
    assert info.value.field == field
    assert says in info.value.expected
    for suffix, dump in ((".yaml", yaml.safe_dump), (".json", json.dumps)):
        path = tmp_path / f"bad{suffix}"
        path.write_text(dump(data))
        with pytest.raises(InputError) as info:
            load_cluster(path)
        assert info.value.field == field


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("bad.yaml", "name: [unclosed\nnodes: 2\n", "valid YAML"),
        ("bad.yml", "name: a\n  nodes: 2\n bad", "valid YAML"),
        ("bad.json", '{"name": "a",}', "valid JSON"),
        ("empty.yaml", "", "mapping"),
        ("cluster.txt", "name: a", ".json"),
    ],
)
def test_unreadable_files(name, text, says, tmp_path: Path):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as info:
        Cluster.from_file(path)
    assert info.value.field == "cluster"
    assert says in info.value.expected


def test_missing_file():
    with pytest.raises(InputError) as info:
        Cluster.from_file("/nonexistent/cluster.yaml")
    assert info.value.field == "cluster"


def _leaf_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [p for key, value in node.items() for p in _leaf_paths(value, (*prefix, key))] or [prefix]
    if isinstance(node, list):
        return [p for i, value in enumerate(node) for p in _leaf_paths(value, (*prefix, i))] or [prefix]
    return [prefix]


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(),
    st.text(max_size=8),
    st.lists(st.integers(-3, 20), max_size=3),
    st.dictionaries(st.sampled_from(["node", "between", "kind", "bandwidth", "x"]), st.integers(-1, 3), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_corrupted_value_is_accepted_or_an_input_error(data):
    base = load_cluster("8x1-10gbe-slow-node").to_dict()
    path = data.draw(st.sampled_from(_leaf_paths(base)))
    node = base
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = data.draw(JUNK)
    try:
        cluster = Cluster.from_dict(base)
    except InputError as exc:
        assert exc.field.startswith("cluster") and exc.expected
    else:
        assert Cluster.from_dict(cluster.to_dict()) == cluster
