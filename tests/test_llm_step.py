"""One step of a 3-D parallel transformer plan on the simulator: equal to the planner's closed form where
nothing contends, slower where rings share links, MoE adds its all-to-alls, bad plans refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.planner.llm.step_sim import Experts, load_step_plan, simulate_step

CLUSTER = "dgx-h100-rail-pod"  # 4 nodes x 8 H100, 8 rails


def plan_file(tmp_path: Path, tp: int, pp: int, dp: int, **extra: object) -> Path:
    data = {"best": {"tp": tp, "pp": pp, "dp": dp, "micro_batch_size": 1, "virtual_stages": 1,
                     "sequence_parallel": True, "recompute": "none", "zero": 1},
            "options": {"layers": 8, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 51200},
            "batch_size": 32, "precision": "bf16", **extra}
    path = tmp_path / f"plan-{tp}-{pp}-{dp}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_one_stage_with_tensor_groups_inside_nodes_equals_the_closed_form(tmp_path: Path) -> None:
    step = load_step_plan(plan_file(tmp_path, tp=8, pp=1, dp=4))
    result = simulate_step(load_cluster(CLUSTER), step)
    assert result.step_s == pytest.approx(result.analytical_s, rel=0.01)


@pytest.mark.parametrize("nic", ["400Gbit/s", "100Gbit/s"])
def test_plain_data_parallelism_over_whole_nodes_equals_the_closed_form(tmp_path: Path, nic: str) -> None:
    """A t1-p1 plan's gradient allreduce over whole nodes is priced by the planner as NCCL runs it (every NIC);
    the step simulator's ring carries what takes that time, so the two agree (its single ring through one NIC
    made the step 12 % slower at 400G and 65 % at 100G)."""
    cluster_file = tmp_path / "h100x4.yaml"
    cluster_file.write_text(yaml.safe_dump({"extends": "dgx-h100", "name": "h100x4", "nodes": 4,
                                            "inter_link": {"bandwidth": nic}}))
    step = load_step_plan(plan_file(tmp_path, tp=1, pp=1, dp=32))
    result = simulate_step(load_cluster(cluster_file), step)
    assert result.busy_s["dp"] > 0
    assert result.step_s == pytest.approx(result.analytical_s, rel=0.01)


def test_pipelines_and_wide_tensor_groups_are_simulated_and_deterministic(tmp_path: Path) -> None:
    cluster = load_cluster(CLUSTER)
    step = load_step_plan(plan_file(tmp_path, tp=16, pp=2, dp=1))
    first, again = simulate_step(cluster, step), simulate_step(cluster, step)
    assert first.step_s == again.step_s and first.events == again.events
    assert first.busy_s["tp"] > 0 and first.busy_s["pp_send"] > 0
    assert first.step_s >= 0.5 * first.analytical_s  # the same order as the closed form
    moe = simulate_step(cluster, replace(load_step_plan(plan_file(tmp_path, tp=8, pp=1, dp=4)),
                                         experts=Experts(ep=4, top_k=2, every=2)))
    dense = simulate_step(cluster, load_step_plan(plan_file(tmp_path, tp=8, pp=1, dp=4)))
    assert moe.busy_s["moe"] > 0 and moe.step_s > dense.step_s


@pytest.mark.parametrize(("change", "field"), [
    ({"best": {"tp": 8, "pp": 1, "dp": 2}}, "llm-plan"),  # 16 GPUs for a 32-GPU cluster
    ({"experts": {"ep": 3}}, "llm-plan.experts.ep"),
])
def test_bad_plans_are_one_error(tmp_path: Path, change: dict, field: str) -> None:
    path = plan_file(tmp_path, tp=8, pp=1, dp=4)
    data = yaml.safe_load(path.read_text())
    for key, value in change.items():
        data[key] = {**data[key], **value} if isinstance(data.get(key), dict) else value
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as info:
        simulate_step(load_cluster(CLUSTER), load_step_plan(path))
    assert info.value.field == field


def test_cli_prints_the_step_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = plan_file(tmp_path, tp=8, pp=2, dp=2)
    assert main(["simulate", "--llm-plan", str(path), "--cluster", CLUSTER, "--experts", "ep=2,top_k=2",
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "simulated with contention" in out and "moe" in out
    saved = json.loads((tmp_path / "out" / "llm_step.json").read_text())
    assert saved["step_s"] > 0 and saved["coflows"] > 0
    assert main(["simulate", "--llm-plan", str(path), "--cluster", CLUSTER, "--experts", "top_k=2"]) == 2
    assert main(["simulate", "--llm-plan", str(tmp_path / "missing.json"), "--cluster", CLUSTER]) == 2
    assert main(["simulate", "--llm-plan", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("flexcomm: error: ") for line in err)


def _with(path: Path, **best: object) -> Path:
    data = yaml.safe_load(path.read_text())
    data["best"].update(best)
    path.write_text(yaml.safe_dump(data))
    return path


def test_interleaved_stages_are_simulated_with_megatrons_schedule(tmp_path: Path) -> None:
    """Every plan the planner outputs simulates: v chunks per GPU in Megatron-LM's interleaved 1F1B order
    shrink the bubble as the closed form says, and cost v times the pipeline sends."""
    cluster = load_cluster(CLUSTER)
    plain = simulate_step(cluster, load_step_plan(plan_file(tmp_path, tp=8, pp=4, dp=1)))
    interleaved = simulate_step(cluster, load_step_plan(_with(plan_file(tmp_path, tp=8, pp=4, dp=1),
                                                              virtual_stages=2)))
    again = simulate_step(cluster, load_step_plan(tmp_path / "plan-8-4-1.yaml"))
    assert interleaved.step_s == again.step_s and interleaved.events == again.events
    assert interleaved.step_s < plain.step_s and interleaved.analytical_s < plain.analytical_s
    assert interleaved.busy_s["pp_send"] > plain.busy_s["pp_send"]  # each micro-batch crosses v x as often
    assert interleaved.busy_s["compute"] == pytest.approx(plain.busy_s["compute"])  # the same layers per GPU
    assert interleaved.step_s == pytest.approx(interleaved.analytical_s, rel=0.1)


def test_a_slow_node_slows_the_plan_as_one_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--straggler node1=1.3 is every GPU of node 1; a stage computes at its slowest GPU's speed."""
    path = plan_file(tmp_path, tp=8, pp=2, dp=2)
    ranks = [f"{r}=1.5" for r in range(16, 24)]  # node 2: one tensor group of the last stage
    runs = {}
    for name, flags in (("none", []), ("node", ["--straggler", "node2=1.5"]),
                        ("ranks", [x for r in ranks for x in ("--straggler", r)])):
        assert main(["simulate", "--llm-plan", str(path), "--cluster", CLUSTER, "--json", *flags]) == 0
        runs[name] = {k: v for k, v in json.loads(capsys.readouterr().out).items() if k != "wall_s"}
    assert runs["node"] == runs["ranks"]
    assert runs["node"]["step_s"] > runs["none"]["step_s"]
    everywhere = simulate_step(load_cluster(CLUSTER), load_step_plan(path), stragglers=dict.fromkeys(range(32), 1.5))
    assert everywhere.busy_s["compute"] == pytest.approx(1.5 * runs["none"]["busy_s"]["compute"])
    assert main(["simulate", "--llm-plan", str(path), "--cluster", CLUSTER, "--straggler", "node9=1.5"]) == 2
    assert main(["simulate", "--llm-plan", str(path), "--cluster", CLUSTER, "--iterations", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "straggler" in err[0] and "--iterations with --llm-plan" in err[1]


def test_plan_prints_the_simulated_step_of_its_best_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """plan --model gpt runs its best plan on the step simulator (its help said it did; nothing did), the same
    step `simulate --llm-plan` gives; a mixed pool says why it is not simulated."""
    out = tmp_path / "plan"
    assert main(["plan", "--model", "gpt", "--layers", "8", "--hidden", "2048", "--heads", "16", "--seq-len", "2048",
                 "--cluster", CLUSTER, "--batch-size", "64", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "best_plan.json").read_text())
    simulated = simulate_step(load_cluster(CLUSTER), load_step_plan(out / "best_plan.json")).step_s
    assert summary["simulated_step_s"] == pytest.approx(simulated, rel=1e-9)
    assert "simulated with contention" in printed
    plans = pd.read_csv(out / "plans.csv")
    assert plans["simulated_step_s"].notna().sum() >= 1
    assert main(["plan", "--model", "gpt", "--cluster", "4x4-a100-v100", "--out", str(tmp_path / "mixed"),
                 "--no-progress"]) == 0
    assert "not simulated: the step simulator runs one device type" in capsys.readouterr().out


@pytest.mark.parametrize("scheme", ["powersgd", "topk-ag"])
def test_a_plan_made_with_a_scheme_simulates_with_it(scheme: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """plan --scheme prices the data-parallel groups' compressed exchange; simulate --llm-plan ran the same plan
    as dense (634 ms against the plan's 703 ms, a 7B model with PowerSGD on 32 H100s). The plan file carries the
    scheme and ratio, and the step simulator runs its calls and device work as the closed form prices them."""
    base = ["plan", "--model", "gpt", "--layers", "8", "--hidden", "2048", "--heads", "16", "--seq-len", "2048",
            "--cluster", CLUSTER, "--batch-size", "64", "--tp", "1", "--pp", "1", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "dense")]) == 0
    assert main([*base, "--scheme", scheme, "--ratio", "0.01", "--out", str(tmp_path / "c")]) == 0
    capsys.readouterr()
    plan = json.loads((tmp_path / "c" / "best_plan.json").read_text())
    assert plan["scheme"] == scheme and plan["ratio"] == 0.01
    step = load_step_plan(tmp_path / "c" / "best_plan.json")
    assert step.exchange.scheme == scheme
    compressed = simulate_step(load_cluster(CLUSTER), step).step_s
    dense = simulate_step(load_cluster(CLUSTER), load_step_plan(tmp_path / "dense" / "best_plan.json")).step_s
    assert compressed == pytest.approx(plan["best"]["step_s"], rel=0.02)
    assert compressed != pytest.approx(dense, rel=1e-3)  # the scheme reached the simulator
