"""One job, one compute price (issue 46, part 1): ``plan`` and ``simulate`` price the same model at the same batch
per GPU within 2 %, because both read the kernels a forward pass runs the same way (:mod:`costmodel.torch_kernels`)
and price them with one function (:meth:`costmodel.device_compute.DeviceCompute.kernels`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.compute import get_model, per_sample, resnet_spec, transformer_spec
from flexcomm.costmodel.device_compute import DeviceCompute
from flexcomm.costmodel.gemm_efficiency import GemmShape
from flexcomm.costmodel.torch_kernels import KernelCounter, KernelTally, RecordedGemm
from flexcomm.experiments.cli import main
from flexcomm.planner import zoo


def _traced(module: torch.nn.Module, example: torch.Tensor):  # -> KernelTally
    counter = KernelCounter()
    with torch.no_grad(), counter:
        module(example)
    return counter.by_key().get("", KernelTally())  # nothing recorded (views only): an empty tally


def test_a_traced_resnet50_runs_the_kernels_of_the_hand_built_spec() -> None:
    """The same GEMMs (54, 8.18 GFLOP a sample) and the same element accesses within 1 %: what the hand-built
    spec charges batch norm, ReLU, residual adds and pooling is what the aten-level count finds."""
    with torch.device("meta"):
        module = zoo.ImageNetResNet(50)
    tally = _traced(module.eval(), torch.empty(4, 3, 224, 224, device="meta"))
    spec = resnet_spec(50)
    assert len(tally.gemms) == sum(len(layer.gemms) for layer in spec.layers)
    assert tally.gemm_flops / 4 == pytest.approx(spec.forward_flops, rel=1e-9)
    assert tally.memory_accesses / 4 == pytest.approx(sum(layer.memory_accesses for layer in spec.layers), rel=0.01)


def test_kernel_rules_read_linear_attention_norm_and_gather_as_documented() -> None:
    """A linear with bias is a GEMM plus a bias add; a layer norm reads its input twice; an embedding reads the
    rows it returns, not its table; a view moves nothing; fused attention is two batched GEMMs."""
    x = torch.empty(8, 16, 64, device="meta")
    with torch.device("meta"):
        linear, norm, embed = torch.nn.Linear(64, 32), torch.nn.LayerNorm(64), torch.nn.Embedding(50_000, 64)
    tally = _traced(linear, x)
    assert [g.shape for g in tally.gemms] == [GemmShape(128, 32, 64)] and tally.memory_accesses == 2 * 8 * 16 * 32
    # input twice, output once, weight and bias, and the per-row mean and reciprocal deviation it saves
    assert _traced(norm, x).memory_accesses == 3 * x.numel() + 2 * 64 + 2 * 8 * 16
    tokens = torch.zeros(8, 16, dtype=torch.long, device="meta")
    assert _traced(embed, tokens).memory_accesses == 2 * 8 * 16 * 64 + 8 * 16
    assert _traced(lambda t: t.view(128, 64).transpose(0, 1), x).memory_accesses == 0
    q = torch.empty(2, 4, 32, 16, device="meta")
    attention = _traced(lambda t: torch.nn.functional.scaled_dot_product_attention(t, t, t), q)
    flops = 2 * (2 * 4) * 32 * 32 * 16 * 2
    assert attention.gemm_flops == flops


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 512), n=st.integers(1, 512), k=st.integers(1, 512), count=st.integers(1, 16),
       batch=st.integers(1, 64), dim=st.sampled_from(["rows", "count"]))
def test_a_gemm_recorded_at_a_batch_comes_back_at_that_batch(m: int, n: int, k: int, count: int, batch: int,
                                                               dim: str) -> None:
    """per_sample divides the batch dimension out; at_batch multiplies it back: the shape the pass ran."""
    recorded = GemmShape(m * batch, n, k, count) if dim == "rows" else GemmShape(m, n, k, count * batch)
    one = per_sample(RecordedGemm(recorded, dim), batch)
    assert one is not None and one.at_batch(batch) == recorded
    if batch > 1:  # a batch dimension the batch does not divide is not given a shape
        odd = GemmShape(m * batch + 1, n, k, count) if dim == "rows" else GemmShape(m, n, k, count * batch + 1)
        assert per_sample(RecordedGemm(odd, dim), batch) is None


def test_fused_attention_drops_the_stored_scores_and_recomputes_them_backward() -> None:
    """The zoo transformer prices attention as the transformer planner does: fused by default (no s x s traffic,
    one more scores GEMM in the backward), unfused on request; the forward GEMMs are the same."""
    fused, unfused = (transformer_spec("t", 2, 1024, 2048, heads=8, attention=a) for a in ("fused", "unfused"))
    assert fused.forward_flops == unfused.forward_flops
    device = DeviceCompute.of(load_cluster("dgx-h100").rank_devices[0])
    f_fwd, f_bwd = device.layer_seconds(fused, 4)
    u_fwd, u_bwd = device.layer_seconds(unfused, 4)
    assert f_fwd.sum() < u_fwd.sum()
    attn = [i for i, layer in enumerate(fused.layers) if layer.name.endswith(".attn")]
    assert all(len(fused.layers[i].backward_gemms) == 1 for i in attn)
    assert all(not unfused.layers[i].backward_gemms for i in attn)


def _simulated_compute_s(workload: str, cluster: str, batch: int, capsys: pytest.CaptureFixture[str]) -> float:
    assert main(["simulate", "--cluster", cluster, "--workload", workload, "--batch", str(batch), "--iterations",
                 "1", "--json", "--no-progress"]) == 0
    return float(json.loads(capsys.readouterr().out)["summary"]["median_compute_s"])


@pytest.mark.parametrize("model", ["resnet50", "resnet18"])
def test_plan_and_simulate_price_a_zoo_cnn_alike(model: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The graph planner's pure data-parallel plan and the simulator, same model, same batch per GPU: within 2 %
    (they differed 4x: the planner priced FLOPs alone, the simulator batch norm, ReLU and adds too)."""
    simulated = _simulated_compute_s(model, "dgx-a100-80g", 256, capsys)
    assert main(["plan", "--cluster", "dgx-a100-80g", "--model", model, "--batch-size", str(256 * 32), "--out",
                 str(tmp_path), "--no-progress", "--simulate-top", "0"]) == 0
    printed = capsys.readouterr().out
    plans = pd.read_csv(tmp_path / "plans.csv")
    pure = plans[(plans["dp"] == 32) & (plans["tp"] == 1) & (plans["pp"] == 1) & (plans["micro_batches"] == 1)]
    assert float(pure["compute_s"].iloc[0]) == pytest.approx(simulated, rel=0.02)
    assert "batch 8,192 (256 a device)" in printed


def test_plan_and_simulate_default_to_the_same_batch_for_a_model_both_name(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--cluster", "dgx-a100-80g", "--model", "resnet50", "--out", str(tmp_path),
                 "--no-progress", "--simulate-top", "0"]) == 0
    assert "batch 8,192 (256 a device, the default)" in capsys.readouterr().out  # simulate's for resnet50
    assert main(["simulate", "--cluster", "dgx-a100-80g", "--workload", "resnet50", "--iterations", "1"]) == 0
    assert "32 ranks x batch 256" in capsys.readouterr().out


def test_simulate_and_the_transformer_planner_price_a_gpt_alike(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """transformer-1.3b (GPT-3 XL's shape) simulated at 8 sequences a GPU and planned as ``--model gpt`` of the
    same shape at that batch: one compute price within 2 %, fused attention in both by default."""
    simulated = _simulated_compute_s("transformer-1.3b", "dgx-h100", 8, capsys)
    assert main(["plan", "--model", "gpt", "--layers", "24", "--hidden", "2048", "--heads", "16", "--seq-len",
                 "2048", "--cluster", "dgx-h100", "--batch-size", "128", "--tp", "1", "--pp", "1", "--out",
                 str(tmp_path), "--no-progress"]) == 0
    capsys.readouterr()
    plans = pd.read_csv(tmp_path / "plans.csv")
    best = plans.iloc[0]
    planned = float(best["compute_s"] + best["memory_bound_s"] + best["recompute_s"])
    assert get_model("transformer-1.3b").description.endswith("fused attention")
    assert planned == pytest.approx(simulated, rel=0.02)
