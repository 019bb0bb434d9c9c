"""Explicit topologies: their shape, their routes, their bad input, their pictures, and the property that the
cost model (priced on real paths) and the simulator agree on every uncontended collective of every embedded
topology."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import Cluster, cluster_names, load_cluster
from flexcomm.costmodel.collectives import SCHEDULES
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.ring_orders import ring_order
from flexcomm.experiments.cli import main
from flexcomm.sim.collectives import simulate_collective

EMBEDDED = ["fat-tree-k8", "dgx-h100-rail-pod", "nvl72-pair", "torus-4x4x4", "graph-dumbbell"]
BASE = {"name": "t", "nodes": 16, "devices_per_node": 1,
        "device": {"name": "A", "peak_flops": "100TFLOP/s", "memory": "80GiB"},
        "intra_link": {"latency": "1us", "bandwidth": "300GB/s"},
        "inter_link": {"latency": "2us", "bandwidth": "100Gbit/s"}}


def cluster(topology: dict, **fields: object) -> Cluster:
    return Cluster.from_dict({**BASE, **fields, "topology": topology})


# --- shapes and routes -------------------------------------------------------------------------


def test_k8_fat_tree_has_the_textbook_counts_and_path_diversity() -> None:
    fabric = load_cluster("fat-tree-k8").fabric
    kinds = [d["kind"] for _, d in fabric.graph.nodes(data=True)]
    assert kinds.count("host") == 128 and kinds.count("switch") == 32 + 32 + 16  # leaves, aggregations, cores
    assert fabric.graph.number_of_edges() == 2 * (128 + 8 * 4 * 4 + 8 * 4 * 4)
    assert len(fabric.paths(0, 1)) == 1  # same leaf
    assert len(fabric.paths(0, 4)) == 4  # same pod: one per aggregation switch
    assert len(fabric.paths(0, 127)) == 16  # across pods: (k/2)^2 cores
    assert all(len(p) == 6 for p in fabric.paths(0, 127))


def test_torus_routes_dimension_order_the_short_way_with_wraparound() -> None:
    fabric = load_cluster("torus-4x4x4").fabric
    (path,) = fabric.paths(0, 63)  # (0,0,0) -> (3,3,3): one wrap hop per dimension
    assert [e[1] for e in path] == ["node48", "node60", "node63"]
    (path,) = fabric.paths(0, 2 * 16)  # (0,0,0) -> (2,0,0): a tie, two hops the positive way
    assert [e[1] for e in path] == ["node16", "node32"]
    assert fabric.graph.out_degree("node0") == 6
    two = cluster({"kind": "torus", "dims": [2, 8]}).fabric
    assert two.graph.out_degree("node0") == 3  # a dimension of 2 has one cable, not two


def test_rail_optimized_keeps_same_rail_traffic_on_its_leaf_and_rail_aligned_rings_use_no_spine() -> None:
    c = load_cluster("dgx-h100-rail-pod")
    fabric = c.fabric
    (same_rail,) = fabric.flow_paths(3, 8 + 3)  # GPU 3 of node 0 -> GPU 3 of node 1
    assert [v for _, v in same_rail[0]] == ["rail3.leaf0", "node1.nic3"]
    assert all("spine" in path[1][1] for path, _ in fabric.flow_paths(3, 8 + 4))
    order = ring_order(c, range(32), "rail-aligned")
    hops = list(zip(order, order[1:] + order[:1], strict=True))
    crossing = [(a, b) for a, b in hops if a // 8 != b // 8]
    assert len(crossing) == 4 and all(a % 8 == b % 8 for a, b in crossing)
    assert sorted(order) == list(range(32))


def test_nvlink_domains_are_islands_and_cross_domain_traffic_uses_the_scale_out_rails() -> None:
    c = load_cluster("nvl72-pair")
    fabric = c.fabric
    assert fabric.islands == 2 and c.world_size == 144
    model = CostModel.from_cluster(c)
    inside = float(model.on_ranks("allreduce", "ring", 2**30, range(72)).total)
    across = float(model.on_ranks("allreduce", "ring", 2**30, range(36, 108)).total)
    assert inside < across / 5  # 900 GB/s NVLink vs 400 Gbit/s NICs


def test_graph_topology_pins_routes_and_hashes_flows_onto_equal_cost_cores() -> None:
    c = load_cluster("graph-dumbbell")
    fabric = c.fabric
    assert len(fabric.paths(0, 4)) == 2  # via core0 or core1
    pinned = cluster({"kind": "graph", "graph": {
        "hosts": ["a", "b"], "switches": ["s", "t"],
        "links": [{"between": ["a", "s"], "bandwidth": "10Gbit/s", "latency": "1us"},
                  {"between": ["s", "b"], "bandwidth": "10Gbit/s", "latency": "1us"},
                  {"between": ["a", "t"], "bandwidth": "1Gbit/s", "latency": "1us"},
                  {"between": ["t", "b"], "bandwidth": "1Gbit/s", "latency": "1us"}],
        "routes": [{"from": "a", "to": "b", "via": ["t"]}]}}, nodes=2)
    assert pinned.fabric.paths(0, 1) == ((("a", "t"), ("t", "b")),)
    assert pinned.fabric.paths(1, 0) == ((("b", "t"), ("t", "a")),)  # the reverse follows the pin
    split = c.model_copy(update={"topology": c.topology.model_copy(update={"routing": "ecmp-split"})})
    shares = [share for _, share in split.fabric.flow_paths(0, 4)]
    assert shares == [0.5, 0.5]


def test_ecmp_hash_is_seeded_and_collisions_cost_what_the_split_does_not() -> None:
    hashed = load_cluster("fat-tree-k8")
    split = hashed.model_copy(update={"topology": hashed.topology.model_copy(update={"routing": "ecmp-split"})})
    reseeded = hashed.model_copy(update={"topology": hashed.topology.model_copy(update={"ecmp_seed": 7})})
    order = ring_order(hashed, range(128), "random", seed=3)
    t = {name: float(CostModel.from_cluster(c).on_ranks("allreduce", "ring", 2**28, order).total)
         for name, c in (("hash", hashed), ("split", split), ("seed7", reseeded))}
    assert t["split"] < t["hash"]  # full bisection: only hash collisions congest
    assert t["seed7"] != t["hash"]
    assert t["hash"] == float(CostModel.from_cluster(load_cluster("fat-tree-k8")).on_ranks(
        "allreduce", "ring", 2**28, order).total)  # same seed, same routes


# --- the agreement property ----------------------------------------------------------------------


def _variants() -> list[Cluster]:
    out = [load_cluster(name) for name in cluster_names()]  # the new kinds and flat, two-level, ring
    for name in ("fat-tree-k8", "graph-dumbbell"):
        c = load_cluster(name)
        out.append(c.model_copy(update={"topology": c.topology.model_copy(update={"routing": "ecmp-split"})}))
    return out


VARIANTS = _variants()
ALGORITHMS = sorted(SCHEDULES)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(VARIANTS) - 1), algorithm=st.sampled_from(ALGORITHMS),
       size=st.floats(1e3, 2e8), seed=st.integers(0, 2**16), group=st.integers(2, 24))
def test_cost_model_on_real_paths_equals_the_simulator_on_every_embedded_topology(
        which: int, algorithm: tuple[str, str], size: float, seed: int, group: int) -> None:
    c = VARIANTS[which]
    rng = np.random.default_rng(seed)
    ranks = [int(r) for r in rng.choice(c.world_size, size=min(group, c.world_size), replace=False)]
    predicted = float(CostModel.from_cluster(c).on_ranks(*algorithm, size, ranks).total)
    simulated = simulate_collective(c, *algorithm, size, ranks=ranks).seconds
    assert simulated == pytest.approx(predicted, rel=0.01), (c.name, c.topology.routing, algorithm, ranks)


@pytest.mark.parametrize("name", ["dgx-h100-rail-pod", "nvl72-pair"])
def test_hierarchical_allreduce_agrees_and_rails_carry_its_instances_apart(name: str) -> None:
    c = load_cluster(name)
    ranks = list(range(min(c.world_size, 64)))
    model = CostModel.from_cluster(c)
    predicted = float(model.on_ranks("allreduce", "hierarchical", 2**28, ranks).total)
    assert simulate_collective(c, "allreduce", "hierarchical", 2**28, ranks=ranks).seconds == pytest.approx(
        predicted, rel=0.01)


# --- bad input -----------------------------------------------------------------------------------


GRAPH = {"hosts": ["a", "b"], "switches": ["s"],
         "links": [{"between": ["a", "s"], "bandwidth": "10Gbit/s", "latency": "1us"},
                   {"between": ["s", "b"], "bandwidth": "10Gbit/s", "latency": "1us"}]}


def _graph(**changes: object) -> dict:
    spec = copy.deepcopy(GRAPH)
    spec.update(changes)
    return {"kind": "graph", "graph": spec}


@pytest.mark.parametrize(("topology", "fields", "field"), [
    ({"kind": "fat-tree", "k": 7}, {}, "cluster.topology.k"),
    ({"kind": "fat-tree", "k": 4}, {"nodes": 17}, "nodes"),
    ({"kind": "torus", "dims": [4, 1]}, {}, "cluster.topology.dims"),
    ({"kind": "torus", "dims": [4, 4, 4]}, {}, "topology.dims"),
    ({"kind": "rail-optimized"}, {}, "nics_per_node"),
    ({"kind": "nvlink-domain", "domain_size": 3}, {"devices_per_node": 2, "nodes": 8}, "topology.domain_size"),
    ({"kind": "nvlink-domain", "domain_size": 4, "scale_out": {"kind": "torus", "dims": [2, 2]}}, {},
     "cluster.topology.scale_out.kind"),
    (_graph(links=[{"between": ["a", "x"], "bandwidth": "1Gbit/s", "latency": "1us"}]), {"nodes": 2},
     "cluster.topology.graph.links.0.between"),
    (_graph(links=[{"between": ["a", "s"], "bandwidth": "0Gbit/s", "latency": "1us"}]), {"nodes": 2},
     "bandwidth"),
    (_graph(links=[{"between": ["a", "s"], "bandwidth": "1Gbit/s", "latency": "0us"}]), {"nodes": 2},
     "latency"),
    (_graph(links=[{"between": ["a", "s"], "bandwidth": "1Gbit/s", "latency": "-1us"}]), {"nodes": 2},
     "latency"),
    (_graph(routes=[{"from": "a", "to": "b", "via": ["s", "a"]}]), {"nodes": 2},
     "cluster.topology.graph.routes.0.via"),
    (_graph(), {"nodes": 3}, "topology.graph.hosts"),
    ({"kind": "fat-tree", "k": 4, "routing": "spray"}, {}, "cluster.topology.routing"),
])
def test_bad_topologies_are_one_error_naming_the_field(topology: dict, fields: dict, field: str) -> None:
    with pytest.raises(InputError) as info:
        cluster(topology, **fields).fabric  # noqa: B018 - building the fabric is the check
    assert info.value.field == field or info.value.field.endswith(field), info.value


def test_a_job_across_a_disconnected_graph_is_refused_naming_the_two_ends() -> None:
    c = cluster(_graph(hosts=["a", "b", "c"], links=GRAPH["links"]), nodes=3)
    with pytest.raises(InputError, match="no path joins"):
        simulate_collective(c, "allreduce", "ring", 1e6, ranks=[0, 2])


def test_overrides_are_refused_on_explicit_fabrics() -> None:
    with pytest.raises(InputError) as info:
        cluster({"kind": "fat-tree", "k": 4}, overrides=[{"node": 1, "bandwidth": "1Gbit/s"}])
    assert info.value.field == "cluster.overrides"


# --- pictures and the CLI ------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*EMBEDDED, "16x8-h100-2to1"])
def test_every_embedded_topology_renders(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"topo_{name}.png"  # docs/figures.md: topo_<name>.png
    assert main(["clusters", name, "--draw", str(out)]) == 0
    assert out.stat().st_size > 10_000 and "cables" in capsys.readouterr().out


def test_cost_cli_prices_orders_and_refuses_bad_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--cluster", "16x8-h100-2to1", "--ranks", "16", "--size", "256MiB", "--order",
                 ",".join(str(r) for r in [0, 32, 64, 96, 8, 40, 72, 104, 16, 48, 80, 112, 24, 56, 88, 120])]) == 0
    crossing = capsys.readouterr().out
    assert main(["cost", "--cluster", "16x8-h100-2to1", "--ranks", "16", "--size", "256MiB", "--order",
                 ",".join(str(8 * n) for n in range(16))]) == 0
    packed = capsys.readouterr().out
    seconds = [float(text.split(": ")[1].split("ms")[0]) for text in (crossing, packed)]
    assert seconds[0] > 1.9 * seconds[1]  # every hop crosses a 2:1 uplink that the rack-major ring crosses once
    assert main(["cost", "--cluster", "fat-tree-k8", "--ranks", "4", "--size", "1MiB", "--order", "zigzag"]) == 2
    assert main(["cost", "--cluster", "fat-tree-k8", "--ranks", "4", "--size", "1MiB", "--order", "1,2"]) == 2
    assert main(["clusters", "fat-tree-k8", "--draw", "topo.gif"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("flexcomm: error: ") for line in err)


@pytest.mark.parametrize("name", ["graph-dumbbell", "dgx-h100-rail-pod", "nvl72-pair"])
def test_a_node_failure_takes_down_that_nodes_own_links_on_every_fabric(name: str) -> None:
    import simpy

    from flexcomm.sim.network import Network

    c = load_cluster(name)
    net = Network(simpy.Environment(), c)
    vertices = net.node_vertices(1)
    assert vertices and all(net.vertex_node[v] == 1 for v in vertices)
    assert len(vertices) == (c.nics_per_node if c.fabric.kind in ("rail-optimized", "nvlink-domain") else 1)
    assert len(net.resources(vertices)) >= 2 * len(vertices)  # both directions of each of its cables
