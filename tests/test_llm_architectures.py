"""Current transformer architectures: presets against their published sizes, FLOPs per token against every
published row's own ratio, HuggingFace config.json reading, layouts and ``validate --published-llm``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.experiments.published_llm import FLOP_TARGET, read_corpus, read_tables
from flexcomm.planner.llm.hf_config import architecture_from_config, load_config, model_architecture
from flexcomm.planner.llm.layout import Layout
from flexcomm.planner.llm.layout_search import search_layouts
from flexcomm.planner.llm.layout_step import LayoutPricer, cluster_of, min_max_split, uniform_split
from flexcomm.planner.llm.presets import preset, resolve_table_name

#: Parameter counts as their makers publish them (model cards): (total, active).
PUBLISHED_SIZES = {
    "llama3-8b": (8.03e9, None), "llama3.1-405b": (405e9, None), "mixtral-8x7b": (46.7e9, 12.9e9),
    "qwen3-30b-a3b": (30.5e9, 3.3e9), "qwen3-235b-a22b": (235e9, 22e9), "deepseek-v3": (671e9, 37e9),
    "gpt-oss-120b": (116.8e9, None), "nemotron-4-340b": (341e9, None), "gpt3-175b": (175e9, None),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_SIZES))
def test_presets_have_their_published_parameter_counts(name: str) -> None:
    total, active = PUBLISHED_SIZES[name]
    arch = preset(name)
    assert arch.parameters == pytest.approx(total, rel=0.015)
    if active is not None:
        assert arch.active_parameters == pytest.approx(active, rel=0.03)
    assert arch.source


def test_every_published_row_has_its_flops_per_token() -> None:
    rows = read_corpus()
    assert len(rows) == 77  # 73 table rows, 4 of them with a second FP8 recipe in parentheses
    worst = 0.0
    for row in rows:
        arch = resolve_table_name(row.model)
        counted = arch.counted_flops_per_token(row.seq_len, row.convention, row.tp)
        published = row.tflops * 1e12 / row.tokens_per_s
        worst = max(worst, abs(counted / published - 1))
    assert worst <= FLOP_TARGET


def test_conventions_differ_where_the_releases_do() -> None:
    """NeMo 24.07 counted the whole s x s matrix; Megatron-Bridge counts the causal half; GPT-OSS's clamped GLU is
    counted ungated by Megatron-Bridge but runs three matrices."""
    llama = preset("llama3-8b")
    assert llama.counted_flops_per_token(8192, "nemo-2024") > llama.counted_flops_per_token(8192)
    oss = preset("gpt-oss-120b")
    assert oss.gemm_flops_per_token(4096) > 1.2 * oss.counted_flops_per_token(4096)
    with pytest.raises(InputError, match="convention"):
        llama.counted_flops_per_token(8192, "palm")


def test_table_names_resolve() -> None:
    assert resolve_table_name("DeepSeekV3 (w/o MTP)").mtp_layers == 0
    assert resolve_table_name("DeepSeekV3").mtp_layers == 1
    assert resolve_table_name("LLAMA3.1_405B") == preset("llama3.1-405b")
    assert resolve_table_name("Nemotron-340B") == preset("nemotron-4-340b")
    with pytest.raises(InputError, match="model"):
        resolve_table_name("GPT-5")


def _hf(arch_name: str, **fields: object) -> dict[str, object]:
    return {"architectures": [arch_name], **fields}


LLAMA3_8B = _hf("LlamaForCausalLM", num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                num_key_value_heads=8, intermediate_size=14336, vocab_size=128256, hidden_act="silu",
                tie_word_embeddings=False)
DEEPSEEK_V3 = _hf("DeepseekV3ForCausalLM", num_hidden_layers=61, hidden_size=7168, num_attention_heads=128,
                  num_key_value_heads=128, intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256,
                  n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=3, q_lora_rank=1536,
                  kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280,
                  num_nextn_predict_layers=1, hidden_act="silu")
QWEN3_30B = _hf("Qwen3MoeForCausalLM", num_hidden_layers=48, hidden_size=2048, num_attention_heads=32,
                num_key_value_heads=4, head_dim=128, intermediate_size=6144, moe_intermediate_size=768,
                num_experts=128, num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[], vocab_size=151936)


@pytest.mark.parametrize(("config", "name"), [(LLAMA3_8B, "llama3-8b"), (DEEPSEEK_V3, "deepseek-v3"),
                                              (QWEN3_30B, "qwen3-30b-a3b")])
def test_a_config_json_reads_as_its_preset(config: dict, name: str, tmp_path: Path) -> None:
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    arch = model_architecture(str(path))
    assert arch == preset(name)  # names and sources are not compared
    assert arch.name == name


@pytest.mark.parametrize(("config", "field"), [
    (_hf("FalconForCausalLM", num_hidden_layers=2), "config.architectures"),
    ({"architectures": "LlamaForCausalLM"}, "config.architectures"),
    ({k: v for k, v in LLAMA3_8B.items() if k != "intermediate_size"}, "config.intermediate_size"),
    ({**LLAMA3_8B, "hidden_act": "gelu"}, "config.hidden_act"),
    ({**LLAMA3_8B, "num_hidden_layers": -1}, "config.num_hidden_layers"),
    ({**QWEN3_30B, "mlp_only_layers": [0, 1]}, "config.mlp_only_layers"),
    (_hf("GptOssForCausalLM", num_hidden_layers=36, hidden_size=2880, num_attention_heads=64, intermediate_size=2880,
         vocab_size=201088, num_local_experts=128, num_experts_per_tok="four"), "config.num_experts_per_tok"),
    ([1, 2], "config"),
])
def test_a_config_it_cannot_price_is_one_error_naming_the_field(config: object, field: str) -> None:
    with pytest.raises(InputError) as error:
        architecture_from_config(config)
    assert error.value.field == field


def test_a_config_file_is_json_only(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("!!python/object/apply:os.system ['touch pwned']")
    with pytest.raises(InputError, match="model"):
        load_config(path)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(("model", "cluster", "fields", "field"), [
    ("llama3-70b", "dgx-h100", {"gpus": 64, "tp": 3}, "layout"),
    ("qwen3-30b-a3b", "dgx-h100", {"gpus": 64, "ep": 48}, "ep"),
    ("qwen3-30b-a3b", "dgx-h100", {"gpus": 48, "ep": 48, "global_batch": 48}, "ep"),
    ("llama3-8b", "dgx-h100", {"gpus": 6, "cp": 3, "seq_len": 8191}, "cp"),
    ("llama3-70b", "dgx-h100", {"gpus": 64, "tp": 8, "precision": "nvfp4"}, "precision"),
    ("llama3-70b", "dgx-h100", {"gpus": 64, "tp": 8, "precision": "mxfp8"}, "precision"),
    ("llama3-8b", "dgx-h100", {"gpus": 8, "ep": 2}, "ep"),
    ("llama3-8b", "dgx-h100", {"gpus": 8, "global_batch": 12}, "global_batch"),
    ("llama3-8b", "dgx-h100", {"gpus": 64, "tp": 8, "cp": 8, "cp_comm": "a2a"}, "cp_comm"),
    ("llama3-70b", "dgx-h100", {"gpus": 64, "tp": 8, "cp": 2, "cp_comm": "a2a"}, "cp_comm"),
    ("gpt-oss-120b", "dgx-h100", {"gpus": 16, "cp": 2, "ep": 8}, "cp_comm"),
    ("llama3-8b", "dgx-h100", {"gpus": 8, "cp": 2, "cp_comm": "ring"}, "cp_comm"),
    ("llama3-8b", "dgx-h100", {"gpus": 8, "dispatcher": "allgather"}, "dispatcher"),
    ("llama3-8b", "dgx-h100", {"gpus": 8, "capacity_factor": 1.0}, "capacity_factor"),
    ("mixtral-8x7b", "dgx-h100", {"gpus": 8, "ep": 8, "dispatcher": "flex"}, "dispatcher"),
    ("mixtral-8x7b", "dgx-h100", {"gpus": 8, "ep": 8, "capacity_factor": 0}, "capacity_factor"),
    ("mixtral-8x7b", "dgx-h100", {"gpus": 8, "ep": 8, "capacity_factor": True}, "capacity_factor"),
])
def test_bad_layouts_are_refused_naming_the_field(model: str, cluster: str, fields: dict, field: str) -> None:
    base = {"global_batch": 128, "micro_batch": 1, "seq_len": 4096, **fields}
    with pytest.raises(InputError) as error:
        LayoutPricer(preset(model), cluster_of(load_cluster(cluster), base["gpus"])).price(Layout(**base))
    assert error.value.field == field


def test_a_layout_prices_every_part_it_uses() -> None:
    """A 405B run with TP, CP, PP and DP across nodes pays every one; a single-node Qwen3 MoE run pays EP."""
    dense = LayoutPricer(preset("llama3.1-405b"), cluster_of(load_cluster("dgx-h100"), 1024)).price(
        Layout(gpus=1024, global_batch=1536, micro_batch=1, seq_len=8192, tp=8, pp=8, cp=2, vp=8, precision="fp8-cs"))
    assert dense.bubble_s > 0 and dense.pp_p2p_s > 0 and dense.compute_s > 0
    assert sum(dense.parts().values()) == pytest.approx(dense.step_s, rel=1e-9)
    moe = LayoutPricer(preset("qwen3-30b-a3b"), load_cluster("dgx-b200")).price(
        Layout(gpus=8, global_batch=512, micro_batch=1, seq_len=4096, ep=8, precision="mxfp8"))
    assert moe.ep_s > 0 and moe.tp_exposed_s == 0 and moe.bubble_s == 0
    assert sum(moe.parts().values()) == pytest.approx(moe.step_s, rel=1e-9)


def _moe_step(model: str, ep: int = 8, **fields: object):  # -> LayoutCost
    layout = Layout(gpus=8, global_batch=64, micro_batch=1, seq_len=4096, ep=ep, **fields)
    return LayoutPricer(preset(model), load_cluster("dgx-h100")).price(layout)


def test_cp_exchanges_differ_as_their_traffic_does() -> None:
    """Ring attention hides its K/V steps behind a long sequence's core; gathering K/V or exchanging Q/K/V
    all-to-all waits for the exchange. CP 1 has nothing to exchange, whichever is named."""
    pricer = LayoutPricer(preset("llama3-8b"), load_cluster("dgx-h100"))
    cost = {c: pricer.price(Layout(gpus=8, global_batch=8, micro_batch=1, seq_len=65536, tp=2, cp=4, cp_comm=c))
            for c in ("p2p", "all_gather", "a2a")}
    assert cost["p2p"].cp_exposed_s < cost["all_gather"].cp_exposed_s
    assert cost["a2a"].cp_exposed_s > 0
    assert sum(cost["a2a"].parts().values()) == pytest.approx(cost["a2a"].step_s, rel=1e-9)
    single = {pricer.price(Layout(gpus=8, global_batch=8, micro_batch=1, seq_len=8192, tp=8, cp_comm=c)).step_s
              for c in ("p2p", "all_gather", "a2a")}
    assert len(single) == 1


def test_the_dispatchers_trade_as_top_k_against_ep() -> None:
    """All-gather brings a GPU every other rank's tokens (EP - 1 of its own share), all-to-all each of its
    top-k routed copies bound elsewhere (top-k x (EP - 1) / EP): the gather moves less when EP < top-k (Qwen3,
    top-8, over 2 ranks), more when EP > top-k (Mixtral, top-2, over 8)."""
    qwen = {d: _moe_step("qwen3-30b-a3b", ep=2, dispatcher=d).ep_s for d in ("alltoall", "allgather")}
    mixtral = {d: _moe_step("mixtral-8x7b", dispatcher=d).ep_s for d in ("alltoall", "allgather")}
    assert qwen["allgather"] < qwen["alltoall"]
    assert mixtral["allgather"] > mixtral["alltoall"]


def test_a_capacity_factor_pads_or_drops_the_experts_work() -> None:
    """Under balanced routing capacity 1.0 is dropless; 1.25 pads every expert (more compute, traffic, memory)
    and 0.5 drops half its tokens."""
    costs = {f: _moe_step("mixtral-8x7b", capacity_factor=f) for f in (None, 1.0, 1.25, 0.5)}
    assert costs[1.0].step_s == pytest.approx(costs[None].step_s, rel=1e-12)
    assert costs[0.5].compute_s < costs[None].compute_s < costs[1.25].compute_s
    assert costs[0.5].ep_s < costs[None].ep_s < costs[1.25].ep_s
    assert costs[None].memory.activations < costs[1.25].memory.activations


def test_the_search_takes_each_layouts_fastest_exchange() -> None:
    """Each searched layout carries the CP exchange and dispatcher whose layer pass is fastest: no allowed
    alternative prices its layers faster."""
    pricer = LayoutPricer(preset("qwen3-30b-a3b"), load_cluster("dgx-h100"))
    found = search_layouts(pricer, 8, 64, 8192, "bf16")
    chosen = [c.layout for c in found.costs if c.layout.ep > 1 and c.layout.cp > 1][:40]
    assert chosen
    assert any(c.layout.dispatcher != "alltoall" or c.layout.cp_comm != "p2p" for c in found.costs)

    def layers(layout: Layout) -> float:
        return sum(n * (x.forward + x.backward) for n, x in pricer._passes(layout))

    for layout in chosen:
        for cp_comm in ("p2p", "all_gather", "a2a"):
            for dispatcher in ("alltoall", "allgather"):
                other = dataclasses.replace(layout, cp_comm=cp_comm, dispatcher=dispatcher)
                try:
                    other.check_model(pricer.arch)
                except InputError:
                    continue
                assert layers(layout) <= layers(other) * (1 + 1e-12)


def test_a_file_may_name_the_exchange_dispatcher_and_capacity(tmp_path: Path) -> None:
    table = tmp_path / "mine.md"
    header = ("| Model | System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | EP | CP comm | "
              "Dispatcher | Capacity factor | Tokens / sec / GPU | Model TFLOP / sec / GPU |")
    table.write_text("# My runs, Megatron-Bridge NeMo container 26.02\n\n" + header + "\n|" + "---|" * 16 + "\n"
                     "| Qwen3_30B_a3B | DGX-H100 | 8 | BF16 | 64 | 1 | 8192 | 1 | 1 | 2 | 8 | a2a | allgather | 1.25 "
                     "| 5000 | 100 |\n"
                     "| Qwen3_30B_a3B tokendrop | DGX-H100 | 8 | BF16 | 64 | 1 | 4096 | 1 | 1 | 1 | 8 | n/a | n/a |  "
                     "| 5000 | 100 |\n")
    first, second = read_tables(table)
    assert (first.cp_comm, first.dispatcher, first.capacity_factor) == ("a2a", "allgather", 1.25)
    assert (second.cp_comm, second.dispatcher, second.capacity_factor) == ("p2p", "alltoall", 1.0)
    assert resolve_table_name(second.model).name == "qwen3-30b-a3b"


def test_lower_precision_is_never_slower() -> None:
    pricer = LayoutPricer(preset("llama3-70b"), load_cluster("gb300-nvl72"))
    speeds = [pricer.price(Layout(gpus=64, global_batch=256, micro_batch=1, seq_len=8192, pp=4, vp=5,
                                  precision=p)).tokens_per_s_per_gpu for p in ("bf16", "mxfp8", "nvfp4")]
    assert speeds == sorted(speeds)


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.text(alphabet="|-:# abcdefgnMoelSystem0123456789()/.\n", max_size=40), max_size=8))
def test_the_table_reader_takes_any_text_without_a_traceback(lines: list[str], tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("t") / "table.md"
    path.write_text("# Megatron-Bridge performance summary, NeMo container 26.02\n" + "\n".join(lines))
    try:
        read_tables(path)
    except InputError:
        pass


def test_validate_published_llm_writes_its_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "llm"
    assert main(["validate", "--published-llm", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "FLOPs per token within 2% of the published ratio: 77 of 77 rows" in printed
    assert "naive baseline" in printed
    for name in ("llm.csv", "llm.md", "llm.png"):
        assert (out / name).stat().st_size > 0


def test_validate_published_llm_refuses_a_bad_file_in_one_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.md"
    bad.write_text("# Megatron-Bridge performance summary, NeMo container 26.02\n\n| Model | #-GPUs |\n|---|---|\n"
                   "| LLAMA3_8B | 8 |\n")
    assert main(["validate", "--published-llm", str(bad), "--out", str(tmp_path / "o")]) == 2
    stderr = capsys.readouterr().err
    assert stderr.count("\n") == 1 and "published-llm" in stderr


def test_the_layout_search_holds_the_published_layout_and_ranks_it() -> None:
    """DeepSeek-V3 on 256 GB200s as Megatron-Bridge 26.02 ran it is one of the layouts searched."""
    pricer = LayoutPricer(preset("deepseek-v3"), cluster_of(load_cluster("gb200-nvl72"), 256))
    found = search_layouts(pricer, 256, 4096, 4096, "mxfp8")
    published = Layout(gpus=256, global_batch=4096, micro_batch=1, seq_len=4096, pp=4, vp=4, ep=64,
                       precision="mxfp8", recompute="moe")
    plain = [dataclasses.replace(c.layout, cp_comm="p2p", dispatcher="alltoall") for c in found.costs]
    assert published in plain  # with whichever dispatcher the search found faster
    place = found.rank_of(published)
    assert place is not None and 1 <= place <= len(found.ranked)
    assert found.ranked == sorted(found.ranked, key=lambda c: (c.step_s, c.layout.label))
    assert all(c.fits for c in found.ranked)
    assert {c.layout.ep for c in found.costs} >= {1, 8, 64} and {c.layout.fsdp for c in found.costs} == {False, True}


def test_a_model_no_layout_fits_is_one_error_naming_need_and_limit() -> None:
    pricer = LayoutPricer(preset("llama3.1-405b"), cluster_of(load_cluster("dgx-h100"), 8))
    with pytest.raises(InputError, match="smallest need") as error:
        search_layouts(pricer, 8, 64, 8192, "bf16")
    assert error.value.field == "model"


def test_plan_takes_a_preset_and_a_config_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--gpus", "16", "--batch-size", "256",
                 "--precision", "fp8", "--out", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    assert "best: " in printed and "tokens/s per GPU" in printed
    best = json.loads((tmp_path / "a" / "best_layout.json").read_text())
    assert best["model"] == "qwen3-30b-a3b" and best["gpus"] == 16 and best["precision"] == "fp8-cs"
    config = tmp_path / "my-llama" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(LLAMA3_8B))
    assert main(["plan", "--model", str(config), "--cluster", "dgx-h100", "--gpus", "8", "--batch-size", "64",
                 "--seq-len", "8192", "--out", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / "best_layout.json").read_text())["model"] == "my-llama"


@pytest.mark.parametrize(("words", "field"), [
    (["--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "64", "--precision", "nvfp4"], "precision"),
    (["--model", "llama3-70b", "--cluster", "dgx-h100", "--precision", "fp6"], "precision"),
    (["--model", "llama3-70b", "--cluster", "dgx-h100", "--layers", "3"], "layers"),
    (["--model", "nope.json", "--cluster", "dgx-h100"], "model"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--batch-size", "0"], "batch-size"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--batch-size", "-4"], "batch-size"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--seq-len", "0"], "seq-len"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "0"], "gpus"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--capacity-factor", "1"], "capacity-factor"),
    (["--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--capacity-factor", "-1"], "capacity-factor"),
    (["--model", "resnet18", "--cluster", "dgx-h100", "--capacity-factor", "1.25"], "capacity-factor"),
])
def test_plan_refuses_bad_llm_input_in_one_line(words: list[str], field: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", *words, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{field}:" in err


def test_the_python_api_calls_the_engines() -> None:
    import flexcomm

    found = flexcomm.plan_layouts("llama3-8b", "dgx-h100", gpus=8, batch_size=64, seq_len=8192, precision="fp8")
    assert found.best.fits and found.best.tokens_per_s_per_gpu > 0
    assert flexcomm.architecture("deepseek-v3").active_parameters == pytest.approx(37e9, rel=0.03)
    frame = flexcomm.validate_published_llm(rank=False)
    assert len(frame) == 77 and {"rel_error", "naive_rel_error", "flops_rel_error"} <= set(frame.columns)


@settings(max_examples=200, deadline=None)
@given(layers=st.lists(st.floats(0.001, 10.0), min_size=1, max_size=40), head=st.floats(0.0, 20.0),
       pp=st.integers(1, 8), vp=st.integers(1, 4))
def test_the_ideal_split_is_never_slower_than_megatrons_default(layers: list[float], head: float, pp: int,
                                                                vp: int) -> None:
    ideal = min_max_split([*layers, head], pp)
    total = sum(layers) + head
    assert ideal >= max(max(layers), head) * (1 - 1e-9) and ideal >= total / pp * (1 - 1e-9)
    assert ideal <= total * (1 + 1e-9)
    if vp == 1 and len(layers) >= pp:  # (interleaved chunks are not contiguous: the ideal cut does not bound them)
        assert ideal <= uniform_split(layers, head, pp, 1) * (1 + 1e-9)
    assert uniform_split(layers, head, 1, 1) == pytest.approx(total)


@settings(max_examples=150, deadline=None)
@given(config=st.fixed_dictionaries({"architectures": st.sampled_from(
    [["LlamaForCausalLM"], ["MixtralForCausalLM"], ["Qwen3MoeForCausalLM"], ["DeepseekV3ForCausalLM"],
     ["GptOssForCausalLM"], ["BertModel"], "Llama", []])}, optional={
    key: st.one_of(st.integers(-2, 300), st.none(), st.text(max_size=3), st.booleans(), st.lists(st.integers(0, 3)))
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "intermediate_size", "vocab_size", "num_local_experts", "num_experts_per_tok", "num_experts",
                "moe_intermediate_size", "n_routed_experts", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
                "qk_rope_head_dim", "v_head_dim", "mlp_only_layers", "hidden_act", "sliding_window")}))
def test_any_config_mapping_reads_or_is_one_input_error(config: dict) -> None:
    try:
        arch = architecture_from_config(config)
    except InputError as error:
        assert error.field.startswith(("config", "moe.", "mla.", "kv_heads", "activation", "layers", "hidden",
                                       "heads", "head_dim", "ffn_hidden", "vocab"))
    else:
        assert arch.parameters > 0 and arch.counted_flops_per_token(128) > 0
