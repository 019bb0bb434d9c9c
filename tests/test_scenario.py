"""Several jobs on one fabric: placements, slowdown against running alone, the files, determinism, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.sim.scenario import run_scenario, scenario_from_dict
from flexcomm.sim.trace import validate_chrome_trace

STUDY = Path(__file__).resolve().parents[1] / "experiments" / "studies" / "scenario-two-jobs.yaml"


def scenario(*jobs: dict, cluster: str = "16x8-h100-2to1", **extra: object) -> dict:
    return {"cluster": cluster, "jobs": list(jobs), **extra}


def test_jobs_apart_run_as_alone_and_jobs_on_one_uplink_slow_each_other() -> None:
    ring = {"collective": "allreduce", "size": "128MiB"}
    apart = scenario({"name": "a", "pattern": ring, "placement": {"nodes": [0, 1]}, "iterations": 3},
                     {"name": "b", "pattern": ring, "placement": {"nodes": [2, 3]}, "iterations": 3})
    result = run_scenario(scenario_from_dict(apart))
    assert result.summary()["slowdown"].tolist() == pytest.approx([1.0, 1.0])  # leaf 0 only, own NICs
    # three rings over one node of each leaf: 3 x 50 GB/s of NICs onto each 100 GB/s (2:1) uplink
    across = scenario(*({"name": name, "pattern": {"collective": "allreduce", "size": "128MiB"},
                         "placement": {"gpus": [8 * k, 32 + 8 * k, 64 + 8 * k, 96 + 8 * k]}, "iterations": 3}
                        for k, name in enumerate("abc")))
    summary = run_scenario(scenario_from_dict(across)).summary().set_index("job")
    assert summary["slowdown"].tolist() == pytest.approx([1.5, 1.5, 1.5], rel=0.02)


def test_placements_packed_spread_random_and_explicit() -> None:
    gather = {"collective": "allgather", "size": "1MiB"}
    spec = scenario({"name": "p", "pattern": gather, "gpus": 8, "iterations": 1},
                    {"name": "s", "pattern": gather, "gpus": 4, "placement": "spread", "iterations": 1},
                    {"name": "r", "pattern": gather, "gpus": 4, "placement": "random", "iterations": 1},
                    {"name": "e", "pattern": gather, "placement": {"nodes": [15]}, "iterations": 1})
    jobs = {j.name: j for j in scenario_from_dict(spec).jobs}
    assert jobs["p"].ranks == list(range(8))
    assert sorted({r // 8 for r in jobs["s"].ranks}) == [1, 4, 8, 12]  # one per node, one per leaf first
    assert len(set(jobs["r"].ranks) & set(range(8))) == 0 and len(jobs["r"].ranks) == 4
    assert jobs["e"].ranks == list(range(120, 128))
    again = {j.name: j.ranks for j in scenario_from_dict(spec).jobs}
    assert again["r"] == jobs["r"].ranks  # seeded


def test_the_shipped_scenario_writes_every_file_and_is_deterministic(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a", "b"):
        assert main(["simulate", "--scenario", str(STUDY), "--out", str(tmp_path / name)]) == 0
    out = capsys.readouterr().out
    assert "slowdown" in out and "resnet50" in out
    for file in ("iterations.csv", "alone.csv", "jobs.csv", "summary.json", "utilization.csv", "link_utilization.png",
                 "trace.json"):
        assert (tmp_path / "a" / file).is_file(), file
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / "iterations.csv"),
                                  pd.read_csv(tmp_path / "b" / "iterations.csv"))
    trace = json.loads((tmp_path / "a" / "trace.json").read_text())
    assert validate_chrome_trace(trace) > 0
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert len(names) == 3  # one process per job
    jobs = pd.read_csv(tmp_path / "a" / "jobs.csv")
    assert (jobs["slowdown"] >= 1 - 1e-9).all() and jobs["slowdown"].max() > 1.05  # measured: 1.077 at most
    util = pd.read_csv(tmp_path / "a" / "utilization.csv")
    assert util.drop(columns="time_s").to_numpy().max() <= 1 + 1e-9


@pytest.mark.parametrize(("jobs", "field"), [
    ([{"name": "a", "workload": "resnet50", "placement": {"gpus": [0, 1]}},
      {"name": "b", "workload": "resnet50", "placement": {"gpus": [1, 2]}}], "scenario.jobs.1.placement"),
    ([{"name": "a", "workload": "resnet50", "placement": {"gpus": [0, 999]}}], "scenario.jobs.0.placement.gpus"),
    ([{"name": "a", "workload": "resnet50", "placement": {"nodes": [16]}}], "scenario.jobs.0.placement.nodes"),
    ([{"name": "a", "workload": "resnet50", "gpus": 129}], "scenario.jobs.0.gpus"),
    ([{"name": "a", "workload": "resnet50", "pattern": {"collective": "allreduce"}}], "scenario.jobs.0.workload"),
    ([{"name": "a", "pattern": {"collective": "gossip"}}], "scenario.jobs.0.pattern.collective"),
    ([{"name": "a", "workload": "resnet50", "placement": "diagonal"}], "scenario.jobs.0.placement"),
    ([{"name": "a", "workload": "resnet50", "iterations": 0}], "scenario.jobs.0.iterations"),
    ([{"name": "a", "workload": "resnet50", "gpus": 2}, {"name": "a", "workload": "resnet50", "gpus": 2}],
     "scenario.jobs.1.name"),
    ([{"name": "a", "workload": "resnet50", "start": "-1s"}], "scenario.jobs.0.start"),
    ([{"name": "a", "workload": "resnet50", "colour": "red"}], "scenario.jobs.0.colour"),
])
def test_bad_scenarios_are_one_error_naming_the_field(jobs: list, field: str) -> None:
    with pytest.raises(InputError) as info:
        scenario_from_dict(scenario(*jobs))
    assert info.value.field == field, info.value


def test_bad_scenario_file_on_the_cli_is_one_line_and_writes_nothing(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(scenario({"name": "a", "workload": "resnet50", "placement": {"gpus": [0, 0]}})))
    assert main(["simulate", "--scenario", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flexcomm: error: scenario.jobs.0.placement")
    assert not (tmp_path / "out").exists()
    assert main(["simulate", "--scenario", str(STUDY), "--cluster", "4x8-a100-ib"]) == 2


def test_link_rows_fold_both_directions_and_put_the_busiest_first() -> None:
    """Figure defect 25: rows by load, not by name; a link and its reverse that carried the same load are one
    ``a<->b`` row (half the rows, so the names can be read); an asymmetric pair stays two rows."""
    from types import SimpleNamespace

    import numpy as np

    from flexcomm.sim.scenario_plots import link_rows

    util = np.array([[0.2, 0.2], [0.2, 0.2], [0.9, 0.7], [0.9, 0.7], [0.5, 0.0], [0.0, 0.1], [0.0, 0.0]])
    names = ["n0->leaf0", "leaf0->n0", "leaf0->spine", "spine->leaf0", "n1->leaf0", "leaf0->n1", "n2->leaf0"]
    rows = link_rows(SimpleNamespace(utilization=util, link_names=names))
    assert rows == [("leaf0<->spine", [2, 3]), ("n1->leaf0", [4]), ("n0<->leaf0", [0, 1]), ("leaf0->n1", [5])]


def test_the_utilization_figure_marks_whose_links_and_the_uplinks(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped scenario's heat map: rows busiest first, the leaf-spine rows named in red, and beside each
    row which jobs have a route over it (the MoE job on leaves 0-1 only, the spread jobs on every leaf)."""
    from flexcomm.sim import scenario_plots
    from flexcomm.sim.scenario import load_scenario
    from flexcomm.sim.scenario_plots import UPLINK_COLOUR, job_links, plot_utilization

    result = run_scenario(load_scenario(STUDY))
    routes = job_links(result)
    assert "leaf0->spine" in routes["moe-alltoall"] and "leaf2->spine" not in routes["moe-alltoall"]
    assert {f"leaf{k}->spine" for k in range(4)} <= routes["resnet50"] & routes["allreduce-loop"]
    drawn = []
    original = scenario_plots.save_figure_atomic
    monkeypatch.setattr(scenario_plots, "save_figure_atomic",
                        lambda fig, path: drawn.append(fig) or original(fig, path))
    plot_utilization(result, tmp_path / "link_utilization.png")  # checked as it is saved (tests/figure_check.py)
    (fig,) = drawn
    heat = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("link utilization"))
    ticks = heat.get_yticklabels()
    names = [t.get_text() for t in ticks]
    assert min(t.get_fontsize() for t in ticks) >= 8
    red = [t.get_text() for t in ticks if t.get_color() == UPLINK_COLOUR]
    assert sorted(red) == [f"leaf{k}<->spine" for k in range(4)]
    who = next(ax for ax in fig.axes if ax.get_title() == "jobs\nrouted")
    assert [t.get_text() for t in who.get_xticklabels()] == ["resnet50", "allreduce-loop", "moe-alltoall"]
    shown = [float(t.get_text().rstrip(" %")) for t in who.get_yticklabels()]
    assert shown == sorted(shown, reverse=True) and len(shown) == len(names)  # busiest first
