"""Chrome trace of a simulated job: schema, content, atomic writes, bit-for-bit determinism."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from flexcomm.sim.dynamics import JitterDynamics, MarkovCongestion
from flexcomm.sim.faults import FaultPolicy
from flexcomm.sim.trace import (
    COMM,
    COMPRESSION,
    COMPUTE,
    chrome_trace,
    trace_json,
    validate_chrome_trace,
    write_chrome_trace,
)
from flexcomm.sim.training import TrainingResult, simulate_training
from flexcomm.sim.training_config import TrainingConfig


def _noisy(seed: int = 5) -> TrainingResult:
    """Everything random at once: compute jitter, a straggler, network jitter and congestion, random failures."""
    config = TrainingConfig(workload="resnet18", iterations=12, scheme="topk-ar", ratio=0.05, stragglers={2: 1.3},
                            compute_jitter=0.1, seed=seed)
    policy = FaultPolicy(checkpoint_every=4, checkpoint_write_s=0.01, checkpoint_load_s=0.01, restart_s=0.05,
                         timeout_s=0.05, repair_s=0.2, elastic=True)
    dynamics = [JitterDynamics(0.2, 5e-3, seed=seed), MarkovCongestion(0.02, 0.005, 0.3, seed=seed + 1)]
    return simulate_training("4x8-a100-ib", config, dynamics=dynamics, policy=policy,
                             faults=["random:mtbf=8s", "link:node1->switch@0.05s"])


@pytest.fixture(scope="module")
def noisy() -> TrainingResult:
    return _noisy()


def test_trace_follows_the_trace_event_format(noisy: TrainingResult) -> None:
    trace = json.loads(trace_json(chrome_trace(noisy)))
    count = validate_chrome_trace(trace)
    events = trace["traceEvents"]
    assert count == len(events) > 100
    complete = [e for e in events if e["ph"] == "X"]
    ranks = {e["pid"] for e in complete} - {32}
    assert ranks == set(range(32))
    assert {e["tid"] for e in complete if e["pid"] < 32} == {COMPUTE, COMM, COMPRESSION}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[(0, COMPUTE)] == "compute" and names[(0, COMM)] == "comm" and names[(0, COMPRESSION)] == "compression"
    assert any(e["name"] == "forward" for e in complete)
    assert any(e["name"].startswith("topk-ar b") and e["args"]["bytes"] > 0 for e in complete)
    assert any(e["name"].startswith("wait b") for e in complete)  # the straggler makes the others wait
    instants = [e for e in events if e["ph"] == "i"]
    assert any(e["name"].startswith("failure") for e in instants)
    assert any(e["name"].startswith("timeout") for e in instants)
    assert any(e["name"].startswith("restart") for e in complete)
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in complete)


def test_comm_spans_match_the_bucket_frame() -> None:
    result = simulate_training("8x1-10gbe", workload="resnet18", iterations=2)
    trace = chrome_trace(result, ranks=[0])
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"].startswith("allreduce b")]
    assert {e["pid"] for e in spans} == {0}
    assert [e["ts"] for e in spans] == [round(s * 1e6, 3) for s in result.buckets["start_s"]]
    assert [e["dur"] for e in spans] == pytest.approx([c * 1e6 for c in result.buckets["comm_s"]], abs=1e-3)
    last = max(e["ts"] + e["dur"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert last == pytest.approx(result.job_time_s * 1e6, abs=1e-3)


def test_same_seed_same_result_bit_for_bit(tmp_path: Path) -> None:
    a, b, c = _noisy(5), _noisy(5), _noisy(6)
    for name in ("iterations", "buckets", "events", "faults", "flows"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.lost.as_dict() == b.lost.as_dict() and a.sim_events == b.sim_events
    write_chrome_trace(a, tmp_path / "a.json")
    write_chrome_trace(b, tmp_path / "b.json")
    write_chrome_trace(c, tmp_path / "c.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.json").read_bytes() != (tmp_path / "c.json").read_bytes()
    assert not a.iterations["time_s"].equals(c.iterations["time_s"])


def test_writes_are_atomic_and_replace_the_old_file(tmp_path: Path, noisy: TrainingResult) -> None:
    path = tmp_path / "out" / "trace.json"
    path.parent.mkdir()
    path.write_text("old contents")
    write_chrome_trace(noisy, path)
    assert validate_chrome_trace(json.loads(path.read_text())) > 0
    assert sorted(p.name for p in path.parent.iterdir()) == ["trace.json"]  # no temporary left behind


@pytest.mark.parametrize("event,problem", [
    ({"name": "x", "ph": "X", "pid": 0, "tid": 0, "ts": 1.0}, "dur"),
    ({"name": "x", "ph": "X", "pid": 0, "tid": 0, "ts": -1.0, "dur": 1.0}, "ts"),
    ({"name": "x", "ph": "X", "pid": 0, "tid": 0, "ts": math.nan, "dur": 1.0}, "ts"),
    ({"name": "x", "ph": "Q", "pid": 0, "tid": 0, "ts": 1.0}, "ph"),
    ({"name": "x", "ph": "X", "pid": "0", "tid": 0, "ts": 1.0, "dur": 1.0}, "pid"),
    ({"name": 3, "ph": "X", "pid": 0, "tid": 0, "ts": 1.0, "dur": 1.0}, "name"),
    ({"name": "x", "ph": "i", "s": "z", "pid": 0, "tid": 0, "ts": 1.0}, "scope"),
    ({"name": "bogus", "ph": "M", "pid": 0, "tid": 0, "args": {}}, "metadata"),
])
def test_validator_rejects_malformed_events(event: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        validate_chrome_trace({"traceEvents": [event]})
    with pytest.raises(ValueError):
        validate_chrome_trace({"events": []})
