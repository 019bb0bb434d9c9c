"""The transformer planner: memory against published figures, the search, Megatron's table, the CLI's refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.planner.llm import korthikanti, megatron
from flexcomm.planner.llm.gpt import Transformer
from flexcomm.planner.llm.memory import in_flight, layer_activation_bytes, model_state_bytes
from flexcomm.planner.llm.pricing import LLMPlan, LLMPricer
from flexcomm.planner.llm.search import enumerate_plans, search
from flexcomm.planner.llm.timing import Hardware

GB = 1e9


# --- memory and size, against published figures --------------------------------------------------


@pytest.mark.parametrize("row", megatron.TABLE_1, ids=lambda r: r.label)
def test_parameter_count_matches_the_published_size(row: megatron.MegatronRow) -> None:
    # the closed form gives 1.65B for the "1.7B" row and 3.56B for "3.6B" (0.3 % or closer from 7.5B up)
    assert row.model.parameters / 1e9 == pytest.approx(row.billions, rel=0.03)


@pytest.mark.parametrize("zero, published_GB", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_model_states_match_zero_papers_figure_1(zero: int, published_GB: float) -> None:
    """Rajbhandari et al. (SC'20), Figure 1: 7.5B parameters, 64-way data parallelism, Adam (K = 12)."""
    assert model_state_bytes(7.5e9, "fp16", zero, 64) / GB == pytest.approx(published_GB, abs=0.05)


@pytest.mark.parametrize("model, reduction", [
    (Transformer(96, 12288, 96, 2048), 0.70),    # GPT-3 175B: "a 70% reduction"
    (Transformer(105, 20480, 128, 2048), 0.65),  # MT-NLG 530B: "65%"
])
def test_selective_recomputation_saves_what_korthikanti_et_al_report(model: Transformer, reduction: float) -> None:
    full = layer_activation_bytes(model, 1, 8, True, "none")
    selective = layer_activation_bytes(model, 1, 8, True, "selective")
    assert 1 - selective / full == pytest.approx(reduction, abs=0.01)


def test_activation_formulas_are_table_2_of_korthikanti_et_al() -> None:
    m = Transformer(1, 1024, 16, 2048)
    sbh = 2048 * 4 * 1024
    attention = 5 * 16 * 2048 / 1024
    assert layer_activation_bytes(m, 4, 1, False, "none") == pytest.approx(sbh * (34 + attention))
    assert layer_activation_bytes(m, 4, 8, False, "none") == pytest.approx(sbh * (10 + 24 / 8 + attention / 8))
    assert layer_activation_bytes(m, 4, 8, True, "none") == pytest.approx(sbh / 8 * (34 + attention))
    assert layer_activation_bytes(m, 4, 8, True, "full") == pytest.approx(2 * sbh / 8)
    assert layer_activation_bytes(m, 4, 8, False, "full") == pytest.approx(2 * sbh)


def test_interleaving_holds_more_micro_batches_in_flight() -> None:
    assert in_flight(8, 64, 1) == 8 and in_flight(8, 4, 1) == 4
    assert in_flight(8, 64, 2) == pytest.approx(8 * (1 + 7 / 16))


# --- pricing and search ------------------------------------------------------------------------


def _pricer(row: megatron.MegatronRow) -> LLMPricer:
    return megatron.pricer(row, 0.65)


@settings(max_examples=40, deadline=None)
@given(index=st.integers(0, len(megatron.TABLE_1) - 1), pick=st.integers(0, 10**6))
def test_a_step_is_the_sum_of_its_parts_and_recomputation_trades_time_for_memory(index: int, pick: int) -> None:
    pricer = _pricer(megatron.TABLE_1[index])
    plans = list(enumerate_plans(pricer))
    plan = plans[pick % len(plans)]
    cost = pricer.price(plan)
    parts = (cost.compute_s + cost.recompute_s + cost.memory_bound_s + cost.tp_comm_s + cost.p2p_s + cost.bubble_s
             + cost.dp_exposed_s + cost.optimizer_s)
    assert parts == pytest.approx(cost.step_s, rel=1e-9)
    costs = {rc: pricer.price(LLMPlan(plan.tp, plan.pp, plan.dp, plan.micro_batch_size, plan.virtual_stages,
                                      plan.sequence_parallel, rc, plan.zero)) for rc in ("none", "selective", "full")}
    assert costs["none"].step_s <= costs["selective"].step_s <= costs["full"].step_s
    assert costs["none"].peak_memory_bytes >= costs["selective"].peak_memory_bytes >= costs["full"].peak_memory_bytes


def test_the_18b_model_that_fitted_no_plan_now_fits_on_the_hardware_that_trained_it() -> None:
    row = megatron.TABLE_1[3]
    result = search(_pricer(row))
    assert result.best.peak_memory_bytes <= 80 * 2**30 and result.best.fits
    published = megatron.as_published(search(_pricer(row), tp=row.tp, pp=row.pp))
    assert (published.plan.tp, published.plan.pp, published.plan.dp) == (8, 1, 32) and published.fits


def test_search_respects_heads_layers_and_batch() -> None:
    pricer = _pricer(megatron.TABLE_1[4])  # 96 heads, 80 layers, 1,536 GPUs, batch 2,304
    for plan in enumerate_plans(pricer):
        assert 96 % plan.tp == 0 and 80 % (plan.pp * plan.virtual_stages) == 0
        assert plan.tp * plan.pp * plan.dp == 1536 and 2304 % (plan.dp * plan.micro_batch_size) == 0


def test_several_nics_speed_up_the_gradient_exchange() -> None:
    row = megatron.TABLE_1[0]
    cluster = megatron.row_cluster(row)
    plan = LLMPlan(1, 1, 32, 16, recompute="full")
    times = {}
    for nics in (1, 8):
        hw = Hardware.of(cluster.model_copy(update={"nics_per_node": nics}), 0.65)
        cost = LLMPricer(row.model, hw, 32, 512, cluster.device.memory_bytes, overlap_dp=False).price(plan)
        times[nics] = cost.dp_exposed_s
    assert times[8] == pytest.approx(times[1] / 8, rel=0.05)


# --- Megatron's table --------------------------------------------------------------------------


def test_megatron_is_predicted_from_the_catalog_and_the_table_fitted_ceiling_is_labelled_as_a_fit(
        tmp_path: Path) -> None:
    """Issue 42: the number that leads is the unfitted one, bounded here; the leave-one-out ceiling is labelled
    as fitted on this same table and reported as such, never as a prediction."""
    from flexcomm.experiments.reproductions import run_reproductions
    from flexcomm.experiments.reproductions.base import Settings

    outcome = run_reproductions(["megatron"], tmp_path, Settings(progress=False))["megatron"]
    table = pd.read_csv(tmp_path / "megatron.csv")
    assert len(table) == len(megatron.TABLE_1) and (tmp_path / "megatron.png").exists()
    unfitted = table["catalog_rel_error"]
    # measured: +13.1 % to +18.6 %, median 14.1 % (2021's software reached less of the A100 than 2025's matmuls)
    assert (unfitted > 0).all() and unfitted.abs().median() <= 0.20 and unfitted.abs().max() <= 0.25
    # the naive baseline (the paper's FLOPs at the measured matmul rate) is further off than the planner, per row
    assert (table["naive_rel_error"].abs() > unfitted.abs()).all()
    # the unstated knobs are a spread with the prediction inside it, and the published number placed in it
    assert (table["catalog_slowest_tflops"] <= table["catalog_tflops"]).all()
    assert (table["catalog_tflops"] <= table["catalog_fastest_tflops"]).all()
    assert set(table["published_place"]) <= {"inside", "slower than every plausible value",
                                             "faster than every plausible value"}
    # the calibration: fitted on the other rows of this table, said so
    assert table["gemm_ceiling_loo"].between(0.3, 1.0).all()
    assert (table["fitted_on"] == "the other rows of this table (leave one out)").all()
    assert (table["plans_per_s"] >= 1000).all()
    findings = "\n".join(outcome.findings)
    assert findings.index("nothing fitted") < findings.index("Calibrated on this same table, not a prediction")


# --- the CLI -----------------------------------------------------------------------------------


def test_plan_gpt_writes_the_best_plan_with_the_transformer_fields(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--model", "gpt", "--layers", "24", "--hidden", "2304", "--heads", "24", "--seq-len", "2048",
                 "--vocab", "51200", "--cluster", "dgx-a100-80g", "--batch-size", "512", "--out", str(tmp_path),
                 "--no-progress"])
    assert code == 0
    # where the GEMM rate came from is said, not assumed: the A100's measured MAMF from the catalog
    assert "GEMMs: 0.902 of A100-SXM4-80GB's 312 TFLOP/s" in capsys.readouterr().out
    best = json.loads((tmp_path / "best_plan.json").read_text())["best"]
    for key in ("tp", "pp", "dp", "step_s", "micro_batch_size", "virtual_stages", "recompute", "sequence_parallel",
                "tflops_per_gpu", "peak_memory_bytes"):
        assert key in best
    assert best["tp"] * best["pp"] * best["dp"] == load_cluster("dgx-a100-80g").world_size
    assert math.isfinite(best["step_s"]) and best["peak_memory_bytes"] <= 80 * 2**30
    assert {"plans.csv", "plans.md", "plans.png"} <= {p.name for p in tmp_path.iterdir()}


@pytest.mark.parametrize("argv, field, words", [
    (["--heads", "7", "--hidden", "70", "--tp", "2"], "tp", "divisor of the 7 attention heads"),
    (["--batch-size", "3"], "batch-size", "splits into the data-parallel replicas"),
    (["--seq-len", "0"], "seq-len", ">= 1"),
    (["--cluster", "8x1-v100-40g", "--precision", "bf16"], "precision", "V100"),
    (["--layers", "200", "--hidden", "16384", "--heads", "128", "--cluster", "8x1-10gbe", "--precision", "fp16"],
     "model", "the smallest need is"),
])
def test_plan_gpt_refuses_in_one_line(argv: list[str], field: str, words: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "gpt", "--out", str(tmp_path / "o"), "--no-progress"]
    if "--cluster" not in argv:
        base += ["--cluster", "4x8-a100-ib"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"flexcomm: error: {field}:") and words in err, err


def test_the_default_precision_is_what_every_gpu_of_the_pool_runs(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "gpt", "--no-progress"]
    assert main([*base, "--cluster", "8x1-v100-40g", "--out", str(tmp_path / "v100")]) == 0  # no bf16 on Volta
    assert capsys.readouterr().out.splitlines()[0].endswith("batch 512 sequences, fp16, fused attention")
    assert main([*base, "--cluster", "4x8-a100-ib", "--out", str(tmp_path / "a100")]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("batch 512 sequences, bf16, fused attention")


# --- Korthikanti et al.'s table: a second paper, nothing fitted -----------------------------------


@pytest.mark.parametrize(("row", "mfu"), list(zip(korthikanti.TABLE, (0.415, 0.514, 0.560, 0.563), strict=True)),
                         ids=lambda v: getattr(v, "label", str(v)))
def test_the_transcribed_times_give_the_papers_model_flops_utilization(row: korthikanti.KorthikantiRow,
                                                                         mfu: float) -> None:
    """The paper's MFU (present work) follows from its times, configurations and FLOP count: a typo in any of the
    transcribed numbers would show here."""
    assert row.model_flops() / (row.present_work_s * row.gpus * 312e12) == pytest.approx(mfu, abs=0.002)


def test_korthikanti_reproduction_predicts_without_fitting(tmp_path: Path) -> None:
    from flexcomm.experiments.reproductions import run_reproductions
    from flexcomm.experiments.reproductions.base import Settings

    outcome = run_reproductions(["korthikanti"], tmp_path, Settings(progress=False))["korthikanti"]
    table = pd.read_csv(tmp_path / "korthikanti.csv")
    assert len(table) == 2 * len(korthikanti.TABLE) and (tmp_path / "korthikanti.png").exists()
    assert table["fits"].all()
    # the catalog's achievable fraction, not a fitted one: the same for every run, from the A100's MAMF
    assert table["gemm_ceiling"].nunique() == 1 and table["gemm_ceiling"].iloc[0] > 0.8
    # measured: mean 5.7 %, worst 8.5 % (22B, present work), at the unstated micro-batch's median; the guard is
    # looser than the measurement
    assert table["rel_error"].abs().max() <= 0.15
    assert (table["naive_rel_error"].abs() > table["rel_error"].abs()).all()
    assert ((table["fastest_s"] <= table["predicted_s"]) & (table["predicted_s"] <= table["slowest_s"])).all()
    # selective recomputation with sequence parallelism is faster than full recomputation, as published
    for label in table["model"].unique():
        runs = table[table["model"] == label].set_index("setting")
        assert runs.loc["present work", "predicted_s"] < runs.loc["full recompute", "predicted_s"]
    assert "mean |error|" in (tmp_path / "korthikanti.md").read_text() and outcome.findings


def test_throughput_is_reported_as_tokens_mfu_and_hfu_with_megatrons_count_labelled() -> None:
    """MFU counts the model's FLOPs (no recomputation), HFU adds what the plan recomputes, and Megatron's count
    is the model's FLOPs plus a full recompute whether the plan runs one or not."""
    pricer = _pricer(megatron.TABLE_1[0])
    model, batch = pricer.model, pricer.batch_size
    assert model.model_flops(batch) == pytest.approx(model.training_flops(batch) + model.recompute_flops(batch, "full"))
    peak = pricer.hw.peak_flops * pricer.world
    for recompute in ("none", "selective", "full"):
        plan = next(p for p in enumerate_plans(pricer) if p.recompute == recompute)
        cost = pricer.price(plan)
        assert cost.extra["tokens_per_s"] == pytest.approx(batch * model.seq_len / cost.step_s)
        assert cost.extra["mfu"] == pytest.approx(model.training_flops(batch) / (cost.step_s * peak))
        assert (cost.extra["hfu"] > cost.extra["mfu"]) == (recompute != "none")
        assert cost.tflops_per_gpu * 1e12 * pricer.world * cost.step_s == pytest.approx(model.model_flops(batch))


@pytest.mark.parametrize("scheme", ["powersgd", "topk-ar"])
def test_plan_scheme_prices_the_data_parallel_exchange_its_device_work_and_memory(scheme: str) -> None:
    """``plan --scheme``: the data-parallel groups' exchange as whatif and simulate price it, the compressor's
    device work on the step and its fp32 error feedback in memory; the step is still the sum of its parts."""
    from flexcomm.costmodel.gradient_exchange import GradientScheme

    def pricer(exchange: GradientScheme | None) -> LLMPricer:
        cluster = load_cluster("dgx-h100-rail-pod")
        return LLMPricer(Transformer(layers=8, hidden=2048, heads=16, seq_len=2048, vocab=51200),
                         Hardware.of(cluster), 32, 64, cluster.device.memory_bytes, exchange=exchange)

    plan = LLMPlan(tp=1, pp=1, dp=32, micro_batch_size=1, recompute="none")
    dense, compressed = pricer(None).price(plan), pricer(GradientScheme(scheme)).price(plan)
    assert compressed.dp_device_s > 0 == dense.dp_device_s
    assert compressed.extra["dp_allreduce_s"] < dense.extra["dp_allreduce_s"]  # fewer bytes on the wire
    params = dense.extra["parameters_per_gpu"]
    assert compressed.extra["error_feedback_bytes"] >= 4 * params
    assert compressed.peak_memory_bytes == pytest.approx(dense.peak_memory_bytes
                                                         + compressed.extra["error_feedback_bytes"])
    parts = sum(getattr(compressed, part) for part in ("compute_s", "recompute_s", "memory_bound_s", "tp_comm_s",
                                                        "p2p_s", "bubble_s", "dp_exposed_s", "dp_device_s",
                                                        "optimizer_s"))
    assert parts == pytest.approx(compressed.step_s, rel=1e-9)


def test_plan_scheme_in_the_cli_says_what_it_priced_and_refuses_what_means_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "gpt", "--layers", "8", "--hidden", "2048", "--heads", "16", "--seq-len", "2048",
            "--cluster", "dgx-h100-rail-pod", "--batch-size", "64", "--out", str(tmp_path), "--no-progress"]
    assert main([*base, "--scheme", "topk-ar", "--ratio", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "data-parallel exchange: topk-ar at ratio 0.01" in out and "measured on Fashion-MNIST" in out
    assert json.loads((tmp_path / "best_plan.json").read_text())["scheme"] == "topk-ar"
    assert main([*base, "--scheme", "bf16"]) == 2  # bf16 gradients already: a cast means nothing
    assert main([*base, "--ratio", "0.1"]) == 2  # a ratio without Top-k
    assert main([*base, "--scheme", "gzip"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[2].strip() for line in err] == ["scheme", "ratio", "scheme"]


def test_the_flagship_plan_simulates_and_says_why_its_tensor_groups_span_nodes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GPT-3 175B, batch 1,536, on 16,384 H100s: the planner picks interleaved stages, which now simulate; its
    tensor groups span nodes only where the numbers say so, and it prints why."""
    assert main(["plan", "--model", "gpt", "--layers", "96", "--hidden", "12288", "--heads", "96", "--seq-len",
                 "2048", "--batch-size", "1536", "--cluster", "superpod-h100-16k", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    best = json.loads((tmp_path / "best_plan.json").read_text())["best"]
    if best["tp"] > 8:
        assert "tensor groups span" in out and "the best plan with them inside a node" in out
    else:
        assert "tensor groups span" not in out
    assert "tokens/s, MFU" in out and "by Megatron's count" in out
    assert main(["simulate", "--llm-plan", str(tmp_path / "best_plan.json"), "--cluster", "superpod-h100-16k",
                 "--json"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["step_s"] == pytest.approx(best["step_s"], rel=0.1)


def test_fused_attention_keeps_no_scores_and_recomputes_them_in_the_backward() -> None:
    """FlashAttention (the default): none of Korthikanti's 5 a s / h activation bytes per layer are stored or
    move through memory, and the backward recomputes QK^T; unfused (the 2021-2022 papers' software) keeps them."""
    fused, unfused = (LLMPricer(Transformer(layers=8, hidden=2048, heads=16, seq_len=4096, vocab=51200),
                                Hardware.of(load_cluster("dgx-h100")), 8, 8, 80e9, attention=a)
                      for a in ("fused", "unfused"))
    plan = LLMPlan(tp=8, pp=1, dp=1, micro_batch_size=1, recompute="none")
    f, u = fused.price(plan), unfused.price(plan)
    assert f.memory_bound_s < u.memory_bound_s and f.peak_memory_bytes < u.peak_memory_bytes
    gemm, core, _, _ = fused._layer(1, 8, False)
    fwd_f, bwd_f, _ = fused.layer_passes_s(1, 8, False, "none")
    fwd_u, bwd_u, _ = unfused.layer_passes_s(1, 8, False, "none")
    assert (bwd_f - fwd_f) - (bwd_u - fwd_u) == pytest.approx(core / 2 + (fwd_f - fwd_u), rel=1e-9)
    with pytest.raises(InputError):
        LLMPricer(Transformer(layers=8, hidden=2048, heads=16, seq_len=4096, vocab=51200),
                  Hardware.of(load_cluster("dgx-h100")), 8, 8, 80e9, attention="flash")
