"""``flexcomm simulate`` end to end: table, JSON, CSVs, trace, and one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from flexcomm.experiments.cli import main
from flexcomm.sim.trace import validate_chrome_trace

BASE = ["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet18", "--iterations", "3"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_a_table_and_the_median_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *BASE, "--straggler", "3=1.5")
    assert code == 0 and err == ""
    assert "resnet18 (11.7M parameters) on 8x1-10gbe: 8 ranks x batch 256" in out
    assert "attempt" in out and "exposed" in out and "stall" in out
    assert "median iteration" in out and "samples/s" in out
    assert len([line for line in out.splitlines() if line.strip().endswith("ms") and " ok " in line]) == 3


def test_json_output_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.json"
    code, out, _ = run_cli(capsys, *BASE, "--scheme", "topk-ag", "--ratio", "0.01", "--buckets", "3", "--json",
                           "--out", str(tmp_path / "out"), "--trace", str(trace), "--fail", "node1@100ms",
                           "--checkpoint-every", "1", "--timeout", "1s", "--restart-cost", "2s",
                           "--repair-time", "10s", "--elastic")
    assert code == 0
    payload = json.loads(out)
    assert payload["summary"]["iterations"] == 3 and payload["summary"]["buckets"] == 3
    assert payload["config"]["scheme"] == "topk-ag" and payload["config"]["policy"]["elastic"] is True
    statuses = [row["status"] for row in payload["iterations"]]
    assert "failed" in statuses and statuses[-1] == "ok"
    assert payload["faults"][0]["effect"] == "caused restart"
    assert payload["summary"]["time_lost"]["detection_s"] > 0
    assert min(row["world_size"] for row in payload["iterations"]) == 7
    frame = pd.read_csv(tmp_path / "out" / "iterations.csv")
    assert frame["time_s"].tolist() == pytest.approx([row["time_s"] for row in payload["iterations"]])
    for name in ("buckets.csv", "events.csv", "faults.csv", "summary.json"):
        assert (tmp_path / "out" / name).exists()
    assert validate_chrome_trace(json.loads(trace.read_text())) > 0


def test_network_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "trace.csv"
    csv.write_text("time_s,link,bandwidth\n0.01,node0->switch,1Gbit/s\n")
    code, out, _ = run_cli(capsys, *BASE, "--network-trace", str(csv), "--jitter", "0.1", "--congestion", "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["config"]["granularity"] == "steps"
    quiet = json.loads(run_cli(capsys, *BASE, "--json")[1])
    assert payload["summary"]["median_time_s"] > quiet["summary"]["median_time_s"]  # 1 Gbit/s NIC


def test_a_fault_after_the_end_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *BASE, "--fail", "node2@1h")
    assert code == 0 and "fault node2@1h: after the job ended" in out


@pytest.mark.parametrize("extra,field", [
    (["--workload", "resnet51"], "workload"),
    (["--fail", "node3"], "fail"),
    (["--fail", "node3@soon"], "fail"),
    (["--fail", "node99@1s"], "fail"),
    (["--iterations", "0"], "iterations"),
    (["--cluster", "no-such-cluster"], "cluster"),
    (["--straggler", "3:1.5"], "straggler"),
    (["--ranks", "0"], "ranks"),
    (["--scheme", "lossy"], "scheme"),
    (["--buckets", "0"], "buckets"),
    (["--congestion", "good=1s,worse=2s"], "congestion"),
    (["--timeout=-5s"], "timeout"),
    (["--checkpoint-every", "-1"], "checkpoint-every"),
])
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], extra: list[str], field: str) -> None:
    code, out, err = run_cli(capsys, *BASE, *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"error: {field}" in err


def test_malformed_trace_csv_names_the_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,link,bandwidth\n0.5,node0->switch,fast\n")
    code, _, err = run_cli(capsys, *BASE, "--network-trace", str(bad))
    assert code == 2 and "bandwidth (bad.csv line 2)" in err and len(err.strip().splitlines()) == 1
    missing = tmp_path / "wrong.csv"
    missing.write_text("when,where\n1,2\n")
    code, _, err = run_cli(capsys, *BASE, "--network-trace", str(missing))
    assert code == 2 and "error: network-trace" in err  # the flag, not the engine's parameter
    unknown_link = tmp_path / "link.csv"
    unknown_link.write_text("time_s,link,bandwidth\n0.5,node42->switch,1Gbit/s\n")
    code, _, err = run_cli(capsys, *BASE, "--network-trace", str(unknown_link))
    assert code == 2 and "link" in err


@pytest.mark.parametrize(("fault", "said"), [("node3@1h", "after the job ended"),
                                             ("random:mtbf=1000h", "none drawn before job end")])
def test_a_fault_that_never_fires_is_reported(capsys: pytest.CaptureFixture[str], fault: str, said: str) -> None:
    code, out, _ = run_cli(capsys, "simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50",
                           "--iterations", "2", "--fail", fault)
    assert code == 0 and f"fault {fault}: {said}" in out and "no effect" in out


def test_a_slow_node_is_one_flag_and_a_model_that_does_not_fit_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--cluster", "4x8-a100-ib", "--workload", "resnet50", "--iterations", "2", "--json"]
    assert main([*base, "--straggler", "node1=1.3"]) == 0
    node = json.loads(capsys.readouterr().out)
    assert main([*base, *[x for r in range(8, 16) for x in ("--straggler", f"{r}=1.3")]]) == 0
    ranks = json.loads(capsys.readouterr().out)
    assert node["summary"]["median_time_s"] == ranks["summary"]["median_time_s"]
    assert node["config"]["stragglers"] == ranks["config"]["stragglers"]
    assert main([*base]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["median_time_s"] < node["summary"]["median_time_s"]
    assert main([*base, "--straggler", "nodeX=1.3"]) == 2
    # 1.3B parameters with Adam (16 B each) and Top-k's fp32 error feedback: 26 GB on a 24 GiB RTX 4090
    assert main(["simulate", "--cluster", "pcie-4x-rtx4090", "--workload", "transformer-1.3b", "--scheme",
                 "topk-ag", "--iterations", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "straggler" in err[0]
    assert err[1].startswith("flexcomm: error: memory: got 'transformer-1.3b: 26.3 GB per GPU'")
