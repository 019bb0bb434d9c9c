"""``flexcomm.scenario`` / ``flexcomm.recovery`` call the engines the command calls (issue 45): the same tables,
the same printed lines, and one-line errors naming the keyword, from the engine's own checks."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import flexcomm
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.planner.llm.recovery_report import report_lines
from flexcomm.planner.llm.recovery_run import FailureModel, compare_policies
from flexcomm.sim.scenario import simulate_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "experiments" / "studies" / "scenario-two-jobs.yaml"
JOB = ("gpt-1.7b", "4x4-a100-v100")
FAILURES = {"mtbf": "1d", "horizon": "2d", "planning_time": "2s"}
#: What differs between two runs of the same recovery: the wall time each policy took.
WALL = re.compile(r"simulated in [0-9.]+s")


def test_scenario_api_is_the_engine_and_prints_what_the_command_prints(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scenario"
    api = flexcomm.scenario(SCENARIO, out=out, sharing="rtt")
    engine = simulate_scenario(SCENARIO, sharing="rtt")
    pd.testing.assert_frame_equal(api.frame, engine.summary())
    pd.testing.assert_frame_equal(api.tables["utilization"], engine.utilization_table())
    assert api.summaries["summary"]["sharing"] == "rtt" and "link_utilization" in api.figures
    assert main(["simulate", "--scenario", str(SCENARIO), "--sharing", "rtt", "--out", str(out)]) == 0
    assert capsys.readouterr().out == api.report
    quiet = flexcomm.scenario(SCENARIO, out=None)  # nothing written, the tables all the same
    assert quiet.out is None and not quiet.figures and "wrote" not in quiet.report
    assert list(quiet.frame["job"]) == list(api.frame["job"])


def test_recovery_api_is_the_engine_and_prints_what_the_command_prints(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "recovery"
    api = flexcomm.recovery(*JOB, "restart,shrink", out=out, **FAILURES)
    engine = compare_policies(*JOB, ["restart", "shrink"], failures=FailureModel(**FAILURES))
    timing = ["wall_s", "planner_search_s"]
    pd.testing.assert_frame_equal(api.frame.drop(columns=timing), engine.table().drop(columns=timing))
    pd.testing.assert_frame_equal(api.tables["events"], engine.events())
    assert WALL.sub("", "\n".join(report_lines(engine))) in WALL.sub("", api.report)
    assert set(api.figures) == {"goodput"} and (out / "recovery.csv").is_file()
    argv = ["simulate", "--workload", JOB[0], "--cluster", JOB[1], "--recovery", "restart,shrink", "--mtbf", "1d",
            "--horizon", "2d", "--planning-time", "2s", "--out", str(out)]
    assert main(argv) == 0
    assert WALL.sub("", capsys.readouterr().out) == WALL.sub("", api.report)
    quiet = flexcomm.recovery(*JOB, ["restart"], out=None, **FAILURES)
    assert quiet.out is None and not quiet.figures and list(quiet.frame["policy"]) == ["restart"]


@pytest.mark.parametrize(("call", "field"), [
    (lambda: flexcomm.scenario(SCENARIO, out=None, iterations=3), "iterations"),
    (lambda: flexcomm.scenario(SCENARIO, out=None, sharing="fast"), "sharing"),
    (lambda: flexcomm.scenario(SCENARIO, out=None, coupling="glued"), "coupling"),
    (lambda: flexcomm.scenario(SCENARIO, out=None, no_progress="yes"), "no_progress"),
    (lambda: flexcomm.recovery(*JOB, out=None, colour="red"), "colour"),
    (lambda: flexcomm.recovery(*JOB, "sometimes", out=None), "recovery"),
    (lambda: flexcomm.recovery(*JOB, out=None, mtbf="soon"), "mtbf"),
    (lambda: flexcomm.recovery(*JOB, out=None, mtbf="1d", rack_nodes=0), "rack-nodes"),
    (lambda: flexcomm.recovery(*JOB, out=None, nodes=0), "nodes"),
    (lambda: flexcomm.recovery(*JOB, out=None, batch_size=True), "batch-size"),
    (lambda: flexcomm.recovery("resnet50", JOB[1], out=None), "workload"),
    (lambda: flexcomm.recovery(*JOB, out=None, mtbf_study=True), "out"),
])
def test_bad_keywords_and_values_are_one_line_naming_the_field(call, field: str) -> None:  # noqa: ANN001
    with pytest.raises(InputError) as info:
        call()
    assert info.value.field == field and "\n" not in str(info.value)
