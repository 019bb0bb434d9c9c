"""Recovery policies in study files (engine ``recovery``): validation, rows that are the simulator's own
numbers, resume to identical bytes, and the winners figure over MTBF x job size."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.experiments.study.journal import JOURNAL
from flexcomm.experiments.study.runner import run_study
from flexcomm.experiments.study.spec import build_spec, load_spec
from flexcomm.planner.llm.recovery import TransformerRecoveryPlanner, nic_Bps_per_node, recovery_workloads
from flexcomm.sim.recovery import RecoveryConfig, checkpoint_write_s, simulate_recovery, young_daly_s

STUDY: dict[str, Any] = {
    "name": "t-recovery", "engine": "recovery", "cluster": "dgx-a100-80g", "workload": "gpt-1.7b",
    "strategies": ["restart", "shrink", "replan", "replan+grow"],
    "sweep": {"mtbf": ["12h", "4d"], "nodes": [4, 8], "checkpoint_interval": ["30min", "young-daly"],
              "horizon": ["2d"], "planning_time": ["2s"]},
    "seed": 5,
}
POINTS = 4 * 2 * 2 * 2


def _with(**sweep: Any) -> dict[str, Any]:
    data = copy.deepcopy(STUDY)
    for key, value in sweep.items():
        if value is None:
            data["sweep"].pop(key, None)
        else:
            data["sweep"][key] = value
    return data


@pytest.mark.parametrize("data, field", [
    (_with(mtbf=None), "sweep.mtbf"),
    (_with(mtbf=["12h", "0s"]), "sweep.mtbf[1]"),
    (_with(mtbf=["-2d"]), "sweep.mtbf[0]"),
    (_with(checkpoint_interval=["0s"]), "sweep.checkpoint_interval[0]"),
    (_with(checkpoint_interval=["30min", "daily"]), "sweep.checkpoint_interval[1]"),
    (_with(storage_bandwidth=["0GB/s"]), "sweep.storage_bandwidth[0]"),
    (_with(nodes=[4, 0]), "sweep.nodes[1]"),
    (_with(planning_time=["soon"]), "sweep.planning_time[0]"),
    (_with(ranks=[8]), "sweep.ranks"),  # a training axis, not a recovery one
    ({**STUDY, "strategies": ["restart", "dense"]}, "strategies[1]"),
    ({**STUDY, "workload": "resnet50"}, "workload"),
    ({**STUDY, "metrics": ["step_time_s"]}, "metrics[0]"),
])
def test_bad_recovery_studies_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as info:
        build_spec(data)
    assert info.value.field == field and info.value.expected


def test_a_training_axis_on_the_recovery_engine_says_whose_axis_it_is() -> None:
    with pytest.raises(InputError, match="model or sim or emulated engine"):
        build_spec(_with(ranks=[8]))


def test_points_share_failures_across_policies_and_default_to_the_cluster() -> None:
    spec = build_spec(STUDY)
    assert len(spec.points) == POINTS
    by_setting: dict[tuple, set[int]] = {}
    for p in spec.points:
        by_setting.setdefault((p.params["nodes"], p.params["mtbf_s"]), set()).add(p.params["seed"])
    # one seed per job size (the same failure draws for every policy, MTBF and interval: common random numbers)
    assert {n: len(s) for (n, _), s in by_setting.items()} == {4: 1, 8: 1}
    assert spec.winner_metric == "goodput_samples_per_s"
    plain = build_spec({k: v for k, v in STUDY.items() if k != "cluster"} | {"sweep": {"mtbf": ["2d"]}})
    p = plain.points[0].params
    assert plain.cluster["name"] == "dgx-a100-80g" and p["nodes"] == load_cluster("dgx-a100-80g").nodes
    assert (p["checkpoint_interval"], p["horizon_s"], p["planning_time"]) == ("1h", 7 * 86400.0, "measured")


def test_a_job_no_plan_fits_fails_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = {**copy.deepcopy(STUDY), "workload": "gpt-529.6b"}
    data["sweep"]["nodes"] = [1]
    import yaml

    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["study", str(path), "--out", str(tmp_path / "out"), "--workers", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nodes" in err and "gpt-529.6b" in err
    assert not (tmp_path / "out" / JOURNAL).exists() or (tmp_path / "out" / JOURNAL).read_text().count("\n") <= 1


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recovery") / "out"
    run = run_study(build_spec(STUDY), out, workers=0, progress=False)
    assert run.complete and len(run.ran) == POINTS
    return out


def test_rows_are_the_recovery_simulators_numbers(finished: Path) -> None:
    table = pd.read_csv(finished / JOURNAL)
    row = table[(table["strategy"] == "replan") & (table["nodes"] == 8) & (table["mtbf_s"] == 43200.0)
                & (table["checkpoint_interval"] == "young-daly")].iloc[0]
    workload = recovery_workloads()["gpt-1.7b"]
    cluster = load_cluster("dgx-a100-80g").with_nodes(8)
    planner = TransformerRecoveryPlanner(workload.model, cluster, workload.batch)
    storage = cluster.storage_bandwidth_Bps or RecoveryConfig.storage_Bps
    interval = young_daly_s(checkpoint_write_s(workload.model.parameters, storage), 43200.0 / 8)
    config = RecoveryConfig(policy="replan", horizon_s=2 * 86400.0, mtbf_s=43200.0, checkpoint_every_s=interval,
                            storage_Bps=storage, seed=int(row["seed"]), planning_s=2.0)
    result = simulate_recovery(planner, 8, cluster.devices_per_node, workload.model.parameters, config,
                               nic_Bps_per_node(cluster))
    assert row["checkpoint_interval_s"] == pytest.approx(interval, rel=1e-12)
    assert row["goodput_samples_per_s"] == pytest.approx(result.goodput, rel=1e-12)
    assert row["failures"] == result.failures > 0
    for cause, seconds in result.lost_s.items():
        assert row[f"lost_{cause}_s"] == pytest.approx(seconds, rel=1e-12, abs=1e-9)
    assert row["lost_planning_s"] == pytest.approx(2.0 * sum(1 for e in result.events if e["kind"] == "replan"))


def test_more_failures_cost_goodput_and_restart_waits_for_repairs(finished: Path) -> None:
    table = pd.read_csv(finished / JOURNAL)
    for (policy, nodes, interval), rows in table.groupby(["strategy", "nodes", "checkpoint_interval"]):
        by_mtbf = rows.set_index("mtbf_s")["goodput_samples_per_s"]
        assert by_mtbf[43200.0] < by_mtbf[4 * 86400.0], (policy, nodes, interval)
    restart = table[table["strategy"] == "restart"]
    assert ((restart["lost_repair_wait_s"] > 0) == (restart["failures"] > 0)).all()
    assert (table.loc[table["strategy"] != "restart", "lost_repair_wait_s"] == 0).all()
    # every second of the horizon is either useful or charged to one cause
    lost = table.filter(like="lost_").sum(axis=1)
    assert (lost <= table["horizon_s"] * (1 + 1e-9)).all()


def test_resumed_recovery_study_writes_the_same_bytes(finished: Path, tmp_path: Path) -> None:
    spec = build_spec(STUDY)
    first = run_study(spec, tmp_path / "out", workers=0, max_points=11, progress=False, figures=False)
    assert len(first.ran) == 11 and not first.complete
    second = run_study(spec, tmp_path / "out", workers=2, progress=False, figures=False)
    assert second.complete and second.skipped == 11
    # wall_s and planner_search_s are measurements of this machine; with a fixed planning charge nothing else is
    measured = ["wall_s", "planner_search_s"]
    fresh = pd.read_csv(finished / JOURNAL)
    resumed = pd.read_csv(tmp_path / "out" / JOURNAL)
    pd.testing.assert_frame_equal(fresh.drop(columns=measured), resumed.drop(columns=measured))
    replanned = fresh[fresh["strategy"].str.startswith("replan") & (fresh["failures"] > 0)]
    assert (replanned["planner_search_s"] > 0).all()


def test_winners_figure_and_summary_cover_mtbf_by_job_size(finished: Path) -> None:
    winners = pd.read_csv(finished / "winners.csv")
    assert len(winners) == 2 * 2 * 2  # one per (nodes, MTBF, interval)
    assert set(winners["winner"]) <= set(STUDY["strategies"])
    best = pd.read_csv(finished / JOURNAL).loc[lambda t: t["nodes"] == 4].groupby(
        ["mtbf_s", "checkpoint_interval"])["goodput_samples_per_s"].max()
    assert winners.loc[winners["nodes"] == 4, "goodput_samples_per_s"].sort_values().tolist() == pytest.approx(
        sorted(best.tolist()))
    summary = (finished / "summary.md").read_text(encoding="utf-8")
    assert "engine `recovery`" in summary and "replan+grow" in summary
    for name in ("winners.png", "metrics.png", "results.parquet"):
        assert (finished / name).stat().st_size > 0


def test_the_shipped_recovery_study_validates_with_young_daly() -> None:
    spec = load_spec("recovery-small")
    assert spec.engine == "recovery" and "young-daly" in spec.axes["checkpoint_interval"]
    assert math.prod(len(v) for v in spec.axes.values()) * len(spec.strategies) == len(spec.points)


def test_the_winners_title_calls_never_best_only_what_never_wins() -> None:
    """recovery-small's title said "never best: restart, replan, replan+grow" while its summary gave replan
    16.7 % of the wins: a strategy that wins configurations but no cell's majority is named with its share."""
    from flexcomm.experiments.study.report import winners_note

    winners = pd.Series(["restart-elastic"] * 13 + ["replan"] * 3 + ["replan+grow"] * 2)
    note = winners_note(["restart", "restart-elastic", "replan", "replan+grow"], winners, {"restart-elastic"})
    assert note == ("\nnever best: restart\nbest in some configurations, no cell's most often: replan (16.7%), "
                    "replan+grow (11.1%)")
    assert winners_note(["a", "b"], pd.Series(["a", "b"]), {"a", "b"}) == ""


def test_a_study_cell_where_nothing_trains_is_not_coloured_as_a_policy(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.colors as mcolors
    from figure_check import figure_problems

    from flexcomm.sim import recovery_plots
    from flexcomm.sim.recovery_plots import NOTHING_TRAINS_COLOUR, plot_study

    drawn = []
    monkeypatch.setattr(recovery_plots, "save_figure_atomic", lambda fig, path: drawn.append(fig) or path)
    rows = [{"mtbf_h": m, "nodes": n, "policy": policy, "interval_label": "10 min",
             "efficiency": 0.0 if (m, n) == (1, 4) else share}
            for m in (1, 10) for n in (2, 4) for policy, share in (("restart", 0.5), ("replan", 0.6))]
    plot_study(pd.DataFrame(rows), tmp_path / "recovery_study.png")
    (fig,) = drawn
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts].count("nothing\ntrains") == 1
    grey = [p for p in ax.patches if mcolors.to_hex(p.get_facecolor()) == NOTHING_TRAINS_COLOUR]
    assert len(grey) == 1 and grey[0].get_xy() == (-0.5, 0.5)  # MTBF 1 h, 4 nodes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["replan", "no policy trains"]
    assert not figure_problems(fig)
