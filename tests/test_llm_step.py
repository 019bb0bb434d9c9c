"""One step of a 3-D parallel transformer plan on the simulator: equal to the planner's closed form where
nothing contends, slower where rings share links, MoE adds its all-to-alls, bad plans refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

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
