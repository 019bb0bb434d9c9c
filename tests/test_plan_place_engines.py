"""``flexcomm plan`` (traced models) and ``flexcomm place`` as engine functions returning data (issue 45, items 1-2):
the Python API returns the engine's own result, the CLI prints what it printed before, and a bad keyword or value
is one InputError naming the field, the same from both."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import flexcomm
from flexcomm.experiments.cli import main
from flexcomm.experiments.commands.place import write_and_report
from flexcomm.experiments.commands.plan import printed
from flexcomm.placement.run import place_graph
from flexcomm.planner import graph_plan
from flexcomm.planner.graph_plan import NoPlanFits, plan_graph

SMALL = {"cluster": "8x1-10gbe", "model": "eca-resnet20", "batch_size": 64}


def test_the_torch_free_name_lists_are_the_ones_the_engines_act_on() -> None:
    from flexcomm.planner.graphs import GRAPH_NAMES
    from flexcomm.planner.plans import BALANCES
    from flexcomm.planner.search import SEARCHES

    assert graph_plan.GRAPH_NAMES == GRAPH_NAMES and graph_plan.SEARCHES == SEARCHES
    assert graph_plan.BALANCES == tuple(BALANCES)


def test_plan_api_is_the_graph_engine_and_the_cli_prints_its_report(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    engine = plan_graph(SMALL["cluster"], SMALL["model"], SMALL["batch_size"], simulate_top=1)
    api = flexcomm.plan(SMALL["model"], SMALL["cluster"], batch_size=SMALL["batch_size"], simulate_top=1, out=None,
                        no_progress=True)
    assert api.out is None and api.figures == {}
    pd.testing.assert_frame_equal(api.frame, engine.table())
    assert api.summaries["best_plan"]["best"] == engine.summary()["best"]
    assert api.summaries["best_plan"]["batch_size"] == 64 and engine.summary()["model"] == "eca-resnet20"
    assert main(["plan", "--model", "eca-resnet20", "--cluster", "8x1-10gbe", "--batch-size", "64", "--simulate-top",
                 "1", "--out", str(tmp_path), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = printed(engine, 10, [tmp_path / name for name in ("plans.csv", "plans.md", "best_plan.json",
                                                                 "plans.png")]).splitlines()
    assert [x for x in lines if not x.startswith("priced ")] == [x for x in expected if not x.startswith("priced ")]
    assert lines[-1].startswith("wrote ") and (tmp_path / "plans.png").is_file()


def test_a_plan_that_fits_nowhere_keeps_its_evidence_where_there_is_a_folder(tmp_path: Path) -> None:
    asked = {"batch_size": 64, "memory_fraction": 1e-6, "no_progress": True}
    with pytest.raises(NoPlanFits, match="cluster: .*all \\d+ plans rejected, closest: memory") as in_memory:
        flexcomm.plan("eca-resnet20", "8x1-10gbe", out=None, **asked)
    assert "(see" not in str(in_memory.value) and len(in_memory.value.table) > 0
    with pytest.raises(flexcomm.InputError, match=f"\\(see {tmp_path / 'plans.csv'}\\)"):
        flexcomm.plan("eca-resnet20", "8x1-10gbe", out=tmp_path, **asked)
    assert len(pd.read_csv(tmp_path / "plans.csv")) == len(in_memory.value.table)


@pytest.mark.parametrize(("keywords", "message"), [
    ({"batch_sise": 64}, "batch_sise: got 64; expected a keyword of flexcomm.plan\\('resnet18', ...\\): .*batch_size"),
    ({"tp": 2}, "tp: got 2; expected a keyword of flexcomm.plan"),
    ({"batch_size": 0}, "batch-size: got 0; expected an integer >= 1"),
    ({"ratio": 0.1}, "ratio: got 0.1; expected --scheme topk-ag or topk-ar"),
    ({"memory_fraction": float("nan")}, "memory-fraction: got nan"),
    ({"search": "greedy"}, "search: got 'greedy'; expected exhaustive or random"),
    ({"top": 0}, "top: got 0"),
])
def test_plan_refuses_a_bad_keyword_or_value_in_one_line_before_any_work(keywords: dict, message: str,
                                                                          tmp_path: Path) -> None:
    with pytest.raises(flexcomm.InputError, match=message) as error:
        flexcomm.plan("resnet18", out=tmp_path / "out", **keywords)
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()


def test_the_cli_and_the_api_refuse_a_plan_value_with_the_same_line(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    assert main(["plan", "--model", "resnet18", "--scheme", "dense", "--ratio", "0.1", "--out", str(tmp_path)]) == 2
    with pytest.raises(flexcomm.InputError) as error:
        flexcomm.plan("resnet18", scheme="dense", ratio=0.1)
    assert capsys.readouterr().err.strip().endswith(str(error.value))


def test_place_api_is_the_engine_and_the_cli_writes_what_it_reports(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    asked = {"batch_size": 32, "devices": 4, "method": "dp-chain"}
    engine = place_graph(SMALL["cluster"], SMALL["model"], **asked)
    api = flexcomm.place(SMALL["model"], SMALL["cluster"], out=None, no_progress=True, **asked)
    assert api.out is None and api.figures == {}
    columns = ["method", "step_time_ms", "feasible", "speedup_vs_single", "devices_used"]
    pd.testing.assert_frame_equal(api.frame[columns], engine.table()[columns])
    pd.testing.assert_frame_equal(api.tables["placement"], engine.placement_table())
    assert api.summaries["placement"]["placement"] == engine.summary()["placement"]
    assert api.report.splitlines()[-1].startswith("best: ") and "wrote" not in api.report
    assert main(["place", "--model", "eca-resnet20", "--cluster", "8x1-10gbe", "--batch-size", "32", "--devices", "4",
                 "--method", "dp-chain", "--no-progress", "--out", str(tmp_path / "cli")]) == 0
    printed_lines = capsys.readouterr().out
    assert printed_lines.splitlines()[-1].endswith(f"wrote {tmp_path / 'cli'}/")
    report = write_and_report(engine, tmp_path / "engine", plot=False)

    def stable(text: str, folder: Path) -> list[str]:  # the table's rows carry each run's own search seconds
        return [line for line in text.replace(str(folder), "OUT").splitlines() if not line.startswith("| ")]

    assert stable(printed_lines, tmp_path / "cli") == stable(report, tmp_path / "engine")
    assert sorted(p.name for p in (tmp_path / "cli").iterdir() if not p.name.startswith(".")) == [
        "comparison.csv", "comparison.md", "curves.csv", "placement.csv", "placement.json", "timeline.png"]


@pytest.mark.parametrize(("keywords", "message"), [
    ({"budget": 5}, "budget: got 5; expected a keyword of flexcomm.place\\(...\\): .*budget_s"),
    ({"budget_s": 0}, "budget-s: got 0; expected seconds > 0"),
    ({"devices": 99}, "devices: got 99; expected 0 \\(all\\) or 1..32"),
    ({"method": ["dp-chain", "magic"]}, "method: got 'dp-chain,magic'"),
    ({"no_plot": "yes"}, "no_plot: got 'yes'; expected True or False"),
    ({"seed": -1}, "seed: got -1; expected an integer >= 0"),
])
def test_place_refuses_a_bad_keyword_or_value_in_one_line_before_any_work(keywords: dict, message: str,
                                                                           tmp_path: Path) -> None:
    with pytest.raises(flexcomm.InputError, match=message) as error:
        flexcomm.place("inception", "4x8-a100-ib", out=tmp_path / "out", **keywords)
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()
