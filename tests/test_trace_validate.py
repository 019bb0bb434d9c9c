"""``flexcomm validate --network-trace``: bad input first, then a small end-to-end run on a traced testbed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import needs_netns

from flexcomm.experiments.cli import main
from flexcomm.real_backend import trace_validate
from flexcomm.real_backend.trace_validate import analyze_trace, run_trace_validation


@pytest.fixture(autouse=True)
def _private_state_dir(private_testbed_state: Path) -> None:
    """Every test here keeps its testbed state files to itself."""


@pytest.mark.parametrize(("argv", "field"), [
    (["--network-trace", "c3"], "trace"),
    (["--network-trace", "missing.csv"], "trace"),
    (["--network-trace", "c1", "--trace-duration=-5s"], "trace-duration"),
    (["--network-trace", "c1", "--trace-max-bandwidth", "fast"], "trace-max-bandwidth"),
    (["--network-trace", "c1", "--ranks", "1"], "ranks"),
    (["--network-trace", "c1", "--strategies", "topk-ag,zip"], "strategy"),
    (["--replay-only"], "folder"),
])
def test_bad_requests_are_one_line_errors(argv: list[str], field: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"flexcomm: error: {field}"), err


@needs_netns
def test_a_small_traced_validation_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """2 ranks, two phases (40 -> 10 Mbit/s), static topk-ag and flexible: every step replayed, a report."""
    monkeypatch.setattr(trace_validate, "FAST_SIZES", "4KiB:256KiB")
    monkeypatch.setattr(trace_validate, "CALIBRATION_ITERS", {"fast": 2, "far": 1})
    monkeypatch.setattr(trace_validate, "SOLO_STEPS", 4)
    trace = tmp_path / "two.csv"
    trace.write_text("time_s,link,bandwidth\n0,*,40Mbit/s\n4,*,10Mbit/s\n8,*,,\n")
    result = run_trace_validation(str(trace), tmp_path / "out", ranks=2, strategies="topk-ag,flexible",
                                  hidden="256", timeout_s=300, quiet=True)
    assert result.failures == []
    out = tmp_path / "out"
    for name in ("calibration.json", "replay.csv", "errors.md", "summary.json", "trace_validation.png",
                 "trace_log.jsonl"):
        assert (out / name).exists(), name
    replay = pd.read_csv(out / "replay.csv")
    for label in ("topk-ag", "flexible"):
        steps = pd.read_csv(out / "ddp" / label / "steps.csv")
        assert steps["trace_s"].max() < 9.0 and steps["trace_s"].iloc[-1] >= 7.0  # trained the trace's length
        phases = steps["trace_phase"].value_counts()
        assert {0, 1} <= set(phases.index) <= {0, 1, 2} and phases.get(2, 0) <= 1  # at most the step that saw the end
        for mode in ("open", "closed"):
            part = replay[(replay["label"] == label) & (replay["mode"] == mode)]
            assert len(part) == len(steps) and (part["predicted_s"] > 0).all()
    summary = json.loads((out / "summary.json").read_text())
    agreement = summary["strategies"]["flexible"]["open"]["decision_agreement"]
    assert 0.0 <= agreement <= 1.0
    assert summary["lag"]["changes"] == 6 and summary["lag"]["worst_s"] < 0.5  # 3 lines x 2 runs
    assert math.isfinite(summary["strategies"]["topk-ag"]["open"]["median_abs_error"])
    again = analyze_trace(out)  # the replay is deterministic: re-running the analysis changes nothing
    assert json.loads(json.dumps(again.summary["strategies"])) == summary["strategies"]
