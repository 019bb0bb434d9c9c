"""Operator graphs traced from torch models: parameter counts, FLOPs, bytes, calibration, pipeline units."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.compute import transformer_spec
from flexcomm.costmodel.errors import InputError
from flexcomm.planner import zoo
from flexcomm.planner.graphs import (
    GRAPH_NAMES,
    VIEW_KINDS,
    build_graph,
    calibrate_op_times,
    measure_op_times,
    op_time_s,
    trace,
)
from flexcomm.planner.pipeline_units import build_units, clean_cuts
from flexcomm.workloads.models import ECAResNet

SMALL_GPT = {"layers": 2, "hidden": 64, "heads": 4, "seq_len": 16, "vocab": 100}


def _module(name: str, **options: object) -> torch.nn.Module:
    gm, _ = trace(name, batch_size=2, **options)
    return gm


@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_graph_parameters_equal_the_torch_modules(name: str) -> None:
    options = SMALL_GPT if name == "gpt" else {}
    graph = build_graph(name, batch_size=2, **options)
    module = _module(name, **options)
    assert graph.graph["parameters"] == sum(p.numel() for p in module.parameters())
    assert sum(d["param_bytes"] for _, d in graph.nodes(data=True)) == 4 * graph.graph["parameters"]
    assert nx.is_directed_acyclic_graph(graph)
    assert graph.graph["name"] == name and graph.graph["batch_size"] == 2
    for _, attrs in graph.nodes(data=True):
        assert {"kind", "flops", "param_bytes", "activation_bytes", "grad_bytes"} <= set(attrs)
        assert attrs["grad_bytes"] == attrs["param_bytes"]
    assert all(b > 0 for _, _, b in graph.edges(data="bytes"))


def test_parameter_counts_match_published_figures_and_real_cpu_modules() -> None:
    # torchvision: resnet18 11,689,512; resnet50 25,557,032; googlenet (no aux heads) 6,624,904; GPT-2 124,439,808
    expected = {"resnet18": 11_689_512, "resnet50": 25_557_032, "inception": 6_624_904, "gpt": 124_439_808}
    for name, count in expected.items():
        assert build_graph(name, batch_size=1).graph["parameters"] == count
    real = ECAResNet(depth=20, width=16)  # the workloads' module, on the CPU
    assert build_graph("eca-resnet20", batch_size=1).graph["parameters"] == sum(p.numel() for p in real.parameters())
    small = zoo.GPT(**SMALL_GPT)  # real tensors, tied head counted once
    traced = build_graph("gpt", batch_size=1, **SMALL_GPT)
    assert traced.graph["parameters"] == sum(p.numel() for p in small.parameters())


def test_eca_resnet50_adds_only_the_eca_kernels() -> None:
    plain = build_graph("resnet50", batch_size=1).graph["parameters"]
    eca = build_graph("eca-resnet50", batch_size=1).graph["parameters"]
    assert eca - plain == 3 * 3 + 4 * 5 + 6 * 5 + 3 * 7  # one k-wide kernel per block, k = 3, 5, 5, 7 per stage


def test_multi_billion_gpt_traces_without_allocating() -> None:
    options = {"layers": 40, "hidden": 5120, "heads": 40, "seq_len": 2048, "vocab": 50257}  # ~13B
    graph = build_graph("gpt", batch_size=4, **options)
    count = graph.graph["parameters"]
    assert count == zoo.gpt_parameters(40, 5120, 2048, 50257)
    assert count == pytest.approx(12 * 40 * 5120**2, rel=0.03)  # the 12 L h^2 rule of thumb
    assert count > 1e10


def test_gpt_flops_match_the_cost_models_closed_form() -> None:
    options = {"layers": 3, "hidden": 128, "heads": 4, "seq_len": 64, "vocab": 500}
    graph = build_graph("gpt", batch_size=2, **options)
    spec = transformer_spec("t", 3, 128, 64, vocab=500)
    assert sum(f for _, f in graph.nodes(data="flops")) == pytest.approx(2 * spec.forward_flops, rel=1e-12)


def test_resnet_flops_and_activation_bytes() -> None:
    graph = build_graph("resnet50", batch_size=2)
    assert sum(f for _, f in graph.nodes(data="flops")) / 2 == pytest.approx(2 * 4.09e9, rel=0.01)  # torchvision GMACs
    conv1 = graph.nodes["conv1"]
    assert conv1["kind"] == "conv2d" and conv1["activation_bytes"] == 2 * 64 * 112 * 112 * 4
    assert graph.edges["conv1", "bn1"]["bytes"] == conv1["activation_bytes"]


def test_inception_is_multi_branch() -> None:
    graph = build_graph("inception", batch_size=1)
    cats = [n for n, k in graph.nodes(data="kind") if k == "cat"]
    assert len(cats) == 9 and all(graph.in_degree(n) == 4 for n in cats)
    order, cuts = clean_cuts(graph)
    for cat in cats:  # every Inception block ends at a clean pipeline cut
        assert order.index(cat) in cuts or order.index(cat) + 1 in cuts


def test_unknown_model_and_option_are_input_errors() -> None:
    with pytest.raises(InputError) as err:
        build_graph("alexnet")
    assert err.value.field == "model" and "gpt" in err.value.expected
    with pytest.raises(InputError) as err:
        build_graph("resnet18", layers=3)
    assert err.value.field == "layers"
    with pytest.raises(InputError):
        build_graph("gpt", hidden=100, heads=3)
    with pytest.raises(InputError):
        build_graph("gpt", batch_size=0)


def test_op_time_from_flops_and_from_calibration() -> None:
    graph = build_graph("eca-resnet20", batch_size=4)
    device = load_cluster("8x1-10gbe").device
    flops = graph.nodes["conv1"]["flops"]
    assert op_time_s(graph, "conv1", device) == pytest.approx(flops / (0.65 * device.peak_flops))
    assert op_time_s(graph, "conv1", 1e12, efficiency=0.5) == pytest.approx(graph.nodes["conv1"]["flops"] / 5e11)
    calibrate_op_times(graph, {"conv1": 2e-3}, device=1e12)
    assert op_time_s(graph, "conv1", 1e12) == pytest.approx(2e-3)
    assert op_time_s(graph, "conv1", 2e12) == pytest.approx(1e-3)  # scaled by the peak ratio
    with pytest.raises(InputError):
        calibrate_op_times(graph, {"no-such-op": 1.0})
    with pytest.raises(InputError):
        calibrate_op_times(graph, {"conv1": -1.0})


def test_measured_op_times_cover_the_graph_and_calibrate_it() -> None:
    torch.set_num_threads(1)
    measured = measure_op_times("eca-resnet20", batch_size=2, repeats=2)
    graph = build_graph("eca-resnet20", batch_size=2)
    assert set(measured) == set(graph.nodes)
    assert all(t >= 0 for t in measured.values()) and measured["conv1"] > 0
    calibrate_op_times(graph, measured)
    assert op_time_s(graph, "conv1", 1e15) == measured["conv1"]  # no reference device: used as measured
    with pytest.raises(InputError):
        measure_op_times("gpt", batch_size=1)  # 124M parameters: too big to time here


def test_calibrated_units_take_the_measured_times(tmp_path: object) -> None:
    graph = build_graph("eca-resnet20", batch_size=4)
    calibrate_op_times(graph, dict.fromkeys(graph.nodes, 1e-3), device=1e12)
    units = build_units(graph)
    per_sample = graph.number_of_nodes() * 1e-3 * 1e12 / 4  # seconds x peak, per sample
    assert units.work_shard.sum() + units.work_rep.sum() == pytest.approx(per_sample)
    bare = build_graph("eca-resnet20", batch_size=4)
    calibrate_op_times(bare, {"conv1": 1e-3})  # no measuring device recorded
    with pytest.raises(InputError):
        build_units(bare)
    assert build_units(bare, reference_peak_flops=1e12).work_shard[0] >= 1e-3 * 1e12 / 4


def test_units_conserve_work_params_and_cut_where_one_tensor_crosses() -> None:
    graph = build_graph("gpt", batch_size=2, **SMALL_GPT)
    units = build_units(graph)
    assert units.param_bytes == 4 * graph.graph["parameters"]
    flops = sum(f for _, f in graph.nodes(data="flops")) / 2
    assert (units.work_shard.sum() + units.work_rep.sum()) == pytest.approx(flops / 0.65)
    acts = sum(d["activation_bytes"] for _, d in graph.nodes(data=True) if d["kind"] not in VIEW_KINDS) / 2
    assert units.act_shard.sum() + units.act_rep.sum() == pytest.approx(acts)
    # two units per block (attention, MLP: each ends at its residual add) + embeddings and head
    assert len(units) == 2 * SMALL_GPT["layers"] + 4
    assert units.boundary[3] == 16 * 64 * 4  # one sample's hidden states, fp32
    resnet = build_units(build_graph("resnet18", batch_size=1))
    assert len(resnet) >= 8  # at least one unit per basic block


@settings(max_examples=8, deadline=None)
@given(layers=st.integers(1, 3), heads=st.sampled_from([1, 2, 4]), width=st.integers(1, 4),
       seq=st.integers(2, 16), vocab=st.integers(5, 60))
def test_gpt_parameter_closed_form(layers: int, heads: int, width: int, seq: int, vocab: int) -> None:
    hidden = heads * width * 4
    graph = build_graph("gpt", batch_size=1, layers=layers, hidden=hidden, heads=heads, seq_len=seq, vocab=vocab)
    assert graph.graph["parameters"] == zoo.gpt_parameters(layers, hidden, seq, vocab)
