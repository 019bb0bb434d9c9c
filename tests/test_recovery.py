"""The long-horizon recovery engine: every second accounted for, policies that differ as they should, the CLI."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.planner.llm import recovery_run
from flexcomm.sim.recovery import (
    CAUSES,
    POLICIES,
    Plan,
    Planner,
    RecoveryConfig,
    failure_times,
    simulate_recovery,
    young_daly_s,
)

HOUR = 3600.0


class LinearPlanner(Planner):
    """A job whose throughput is proportional to its nodes (8 GPUs each); replans change the split when the
    GPU count is odd in nodes, so resharding is exercised."""

    def __init__(self, search_s: float = 0.25) -> None:
        self.search_s = search_s

    def best(self, gpus: int) -> tuple[Plan | None, float]:
        if gpus < 16:
            return None, self.search_s
        nodes = gpus // 8
        tp = 8 if nodes % 2 == 0 else 4
        return Plan(f"t{tp}-n{nodes}", tp, 1, gpus // tp, 1.0, float(nodes)), self.search_s

    def shrunk(self, plan: Plan, gpus: int) -> Plan | None:
        dp = gpus // (plan.tp * plan.pp)
        if dp < 1:
            return None
        return Plan(f"{plan.label}-d{dp}", plan.tp, plan.pp, dp, 1.0, float(dp * plan.tp / 8))


def _run(policy: str, failures=None, nodes: int = 16, **config):
    defaults = {"horizon_s": 48 * HOUR, "mtbf_s": 24 * HOUR, "repair_s": 4 * HOUR, "checkpoint_every_s": HOUR,
                "detection_s": 600.0, "restart_s": 120.0, "storage_Bps": 1e9, "seed": 3}
    cfg = RecoveryConfig(policy, **{**defaults, **config})
    return simulate_recovery(LinearPlanner(), nodes, 8, 1e9, cfg, 25e9, failures=failures)


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(POLICIES), seed=st.integers(0, 10**6), mtbf_h=st.floats(2, 400),
       interval_h=st.floats(0.05, 6), repair_h=st.floats(0, 24))
def test_every_second_of_the_horizon_is_useful_work_or_a_named_loss(policy: str, seed: int, mtbf_h: float,
                                                                    interval_h: float, repair_h: float) -> None:
    r = _run(policy, seed=seed, mtbf_s=mtbf_h * HOUR, checkpoint_every_s=interval_h * HOUR, repair_s=repair_h * HOUR)
    useful_s = r.samples / r.ideal_samples_per_s
    assert useful_s + sum(r.lost_s.values()) == pytest.approx(r.horizon_s, rel=1e-9)
    assert all(v >= -1e-9 for v in r.lost_s.values()) and set(r.lost_s) == set(CAUSES)
    assert 0 <= r.efficiency <= 1 + 1e-12


def test_failures_are_seeded_and_the_same_for_every_policy() -> None:
    cfg = RecoveryConfig("restart", 7 * 24 * HOUR, 48 * HOUR, seed=5)
    again = RecoveryConfig("replan", 7 * 24 * HOUR, 48 * HOUR, seed=5)
    assert failure_times(32, cfg) == failure_times(32, again)
    assert failure_times(32, cfg) != failure_times(32, RecoveryConfig("restart", 7 * 24 * HOUR, 48 * HOUR, seed=6))
    assert _run("shrink").summary() | {"wall_s": 0} == _run("shrink").summary() | {"wall_s": 0}
    racks = failure_times(32, RecoveryConfig("restart", 7 * 24 * HOUR, 1e12, rack_mtbf_s=24 * HOUR, rack_nodes=8))
    assert racks and all(len(nodes) == 8 for _, nodes in racks)  # correlated: a rack fails whole


def test_without_failures_only_checkpoints_cost() -> None:
    r = _run("restart", failures=[], checkpoint_every_s=HOUR)
    save_s = 1e9 * 14 / 1e9  # CHECKPOINT_BYTES_PER_PARAM at 1 GB/s
    assert r.efficiency == pytest.approx(HOUR / (HOUR + save_s), rel=1e-3)


def test_one_failure_costs_what_each_policy_says() -> None:
    fail = [(10 * HOUR + 600.0, (3,))]  # 10 min after a checkpoint
    restart = _run("restart", failures=fail)
    shrink = _run("shrink", failures=fail)
    replan = _run("replan", failures=fail)
    for r in (restart, shrink, replan):
        assert r.lost_s["detection"] == pytest.approx(600.0) and r.lost_s["restart"] >= 120.0
    assert restart.lost_s["repair_wait"] == pytest.approx(4 * HOUR - 600.0)  # waits for the node
    assert shrink.lost_s["repair_wait"] == 0 and shrink.lost_s["reduced_throughput"] > 0
    assert replan.lost_s["planning"] == pytest.approx(0.25) and replan.lost_s["reshard"] > 0  # 15 nodes: t8 -> t4
    assert shrink.goodput > restart.goodput
    grown = _run("replan+grow", failures=fail)
    assert any(e["kind"] == "grow" for e in grown.events) and grown.goodput > replan.goodput


def test_young_daly_is_sqrt_two_delta_m() -> None:
    assert young_daly_s(30.0, 3600.0) == pytest.approx(math.sqrt(2 * 30 * 3600))


@pytest.mark.parametrize("changes, field", [
    ({"mtbf_s": 0.0}, "mtbf"), ({"mtbf_s": -1.0}, "mtbf"), ({"checkpoint_every_s": 0.0}, "checkpoint-interval"),
    ({"storage_Bps": 0.0}, "storage-bandwidth"), ({"policy": "pray"}, "recovery"),
    ({"planning_s": -1.0}, "planning-time"),
])
def test_bad_configs_name_their_field(changes: dict, field: str) -> None:
    base = {"policy": "restart", "horizon_s": HOUR, "mtbf_s": HOUR}
    with pytest.raises(InputError) as info:
        RecoveryConfig(**{**base, **changes})
    assert info.value.field == field


# --- the command line --------------------------------------------------------------------------

BASE = ["simulate", "--workload", "gpt-1.7b", "--cluster", "dgx-a100-80g", "--nodes", "8", "--horizon", "2d"]


def test_cli_compares_policies_and_draws_goodput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*BASE, "--recovery", "all", "--mtbf", "1d", "--checkpoint-interval", "young-daly",
                 "--out", str(tmp_path)])
    assert code == 0
    text = capsys.readouterr().out
    assert all(p in text for p in POLICIES) and "failure-free plan" in text
    table = pd.read_csv(tmp_path / "recovery.csv")
    assert list(table["policy"]) == list(POLICIES) and (table["efficiency"] <= 1).all()
    assert {"timeline.csv", "events.csv", "goodput.png"} <= {p.name for p in tmp_path.iterdir()}


def test_cli_mtbf_study_maps_the_best_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(recovery_run, "STUDY_MTBF_H", (12.0, 96.0))
    monkeypatch.setattr(recovery_run, "STUDY_NODES", (4, 8))
    monkeypatch.setattr(recovery_run, "STUDY_INTERVALS_S", (600.0,))
    assert main([*BASE, "--mtbf-study", "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "recovery_study.csv")
    assert set(table["nodes"]) == {4, 8} and set(table["interval_label"]) == {"10 min", "Young/Daly"}
    assert (tmp_path / "recovery_study.png").exists() and "best policy" in capsys.readouterr().out


@pytest.mark.parametrize("argv, field", [
    (["--recovery", "all", "--mtbf", "0s"], "mtbf"),
    (["--recovery", "all", "--mtbf", "1d", "--checkpoint-interval", "0s"], "checkpoint-interval"),
    (["--recovery", "all", "--mtbf", "1d", "--storage-bandwidth", "0GB/s"], "storage-bandwidth"),
    (["--recovery", "sometimes", "--mtbf", "1d"], "recovery"),
    (["--recovery", "all", "--mtbf", "soon"], "mtbf"),
    (["--recovery", "all", "--mtbf", "1d", "--nodes", "0"], "nodes"),
    (["--recovery", "replan", "--mtbf", "1d", "--planning-time", "soon"], "planning-time"),
])
def test_cli_refuses_bad_recovery_input_in_one_line(argv: list[str], field: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"flexcomm: error: {field}:"), err
    assert not (tmp_path / "o").exists()


def test_cli_refuses_a_workload_the_recovery_engine_cannot_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--workload", "resnet50", "--cluster", "dgx-a100-80g", "--recovery", "all",
                 "--mtbf", "1d"]) == 2
    assert "gpt-18.4b" in capsys.readouterr().err


# --- a mixed pool: uneven stages, and what replan chose -----------------------------------------


def test_a_mixed_pool_gets_uneven_stages_that_beat_its_fast_half_alone() -> None:
    import dataclasses

    from flexcomm.costmodel.cluster import load_cluster
    from flexcomm.planner.llm.hetero import DeviceGroup, search_hetero
    from flexcomm.planner.llm.megatron import TABLE_1
    from flexcomm.planner.llm.timing import Hardware

    hw = Hardware.of(load_cluster("4x4-a100-v100"))
    a100 = DeviceGroup("A100-80GB", 8, dataclasses.replace(hw, peak_flops=312e12), 80 * 2**30)
    v100 = DeviceGroup("V100-32GB", 8, dataclasses.replace(hw, peak_flops=125e12), 32 * 2**30)
    model = TABLE_1[0].model
    mixed = search_hetero(model, [a100, v100], 512)
    alone = search_hetero(model, [a100], 512)
    layers = {kind: [n for k, n in mixed.stages if k == kind] for kind, _ in mixed.stages}
    assert set(layers) == {"A100-80GB", "V100-32GB"} and sum(n for _, n in mixed.stages) == model.layers
    assert max(layers["A100-80GB"]) > max(layers["V100-32GB"])  # the faster device takes more layers
    assert mixed.samples_per_step / mixed.step_s > alone.samples_per_step / alone.step_s
    v_only = search_hetero(model, [v100], 512)
    assert v_only.peak_memory_bytes <= 32 * 2**30 and {k for k, _ in v_only.stages} == {"V100-32GB"}


def test_replan_on_a_mixed_cluster_reports_the_device_split_it_chose(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--workload", "gpt-1.7b", "--cluster", "4x4-a100-v100", "--recovery", "replan+grow",
                 "--mtbf", "1d", "--horizon", "2d", "--checkpoint-interval", "young-daly", "--out", str(tmp_path)])
    assert code == 0
    text = capsys.readouterr().out
    assert "replan+grow ran:" in text and "A100-80GB:" in text and "V100-32GB:" in text
    timeline = pd.read_csv(tmp_path / "timeline.csv")
    assert timeline["plan"].dropna().nunique() > 1  # the split changed as nodes failed and came back
