"""A testbed whose network follows a trace: applied on time, followed by TCP, and always cleaned up.

Needs root and iproute2 (skipped otherwise); every testbed has its own random id and state directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import needs_netns

from flexcomm.experiments.cli import main
from flexcomm.real_backend.net_trace import parse_trace
from flexcomm.real_backend.testbed import Testbed, list_namespaces, list_testbeds
from flexcomm.real_backend.trace_control import read_log, trace_file


@pytest.fixture(autouse=True)
def _private_state_dir(private_testbed_state: Path) -> None:
    """Every test here keeps its testbed state files to itself."""


def _qdisc_rates(namespace: str) -> dict[str, str]:
    out = subprocess.run(["tc", "-n", namespace, "qdisc", "show"], capture_output=True, text=True).stdout
    rates = {}
    for line in out.splitlines():
        words = line.split()
        if "tbf" in words:
            rates[words[words.index("dev") + 1]] = words[words.index("rate") + 1]
    return rates


@needs_netns
def test_up_with_a_trace_applies_each_change_on_time_and_down_removes_everything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "steps.csv"
    trace.write_text("time_s,link,bandwidth\n0,*,50Mbit/s\n0.6,node1->switch,5Mbit/s\n1.2,*,20Mbit/s\n")
    assert main(["testbed", "up", "--ranks", "2", "--bandwidth", "100Mbit/s", "--trace", str(trace), "--json"]) == 0
    testbed = Testbed.load(json.loads(capsys.readouterr().out)["id"])
    try:
        assert testbed.trace_pid and testbed.trace_name == "steps.csv"
        time.sleep(0.9)
        assert _qdisc_rates(testbed.namespaces[1]) == {"fxr1": "5Mbit"}  # what rank 1 sends
        assert _qdisc_rates(testbed.namespaces[0]) == {"fxr0": "50Mbit"}
        assert _qdisc_rates(testbed.bridge_namespace) == {"fxp0": "50Mbit", "fxp1": "50Mbit"}  # what they receive
        time.sleep(1.0)
        assert set(_qdisc_rates(testbed.bridge_namespace).values()) == {"20Mbit"}
        log = read_log(testbed.id)
        assert [e["time_s"] for e in log] == [0.0, 0.6, 1.2]
        assert all(0 <= e["lag_s"] < 0.5 for e in log)  # measured ~5-35 ms on 2 cores
        deadline = time.time() + 5
        while _alive(testbed.trace_pid) and time.time() < deadline:
            time.sleep(0.05)
        assert not _alive(testbed.trace_pid)  # a trace that is done ends its supervisor
    finally:
        assert main(["testbed", "down", testbed.id]) == 0
    assert not [p for p in Path(os.environ["FLEXCOMM_TESTBED_DIR"]).glob(f"*{testbed.id}*")]
    assert not [n for n in list_namespaces() if testbed.id in n]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


RECEIVER = textwrap.dedent("""
    import socket, sys, time, json
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 5001))
    s.listen(1); c, _ = s.accept(); c.settimeout(5); marks = []
    try:
        while True:
            b = c.recv(1 << 16)
            if not b: break
            marks.append((time.time(), len(b)))
    except OSError:
        pass
    print(json.dumps(marks))
""")
SENDER = textwrap.dedent("""
    import socket, sys, time
    time.sleep(0.3); c = socket.create_connection((sys.argv[1], 5001)); end = time.time() + float(sys.argv[2])
    chunk = b"x" * 65536
    while time.time() < end: c.sendall(chunk)
    c.close()
""")


@needs_netns
def test_tcp_throughput_follows_the_trace() -> None:
    """A bulk TCP stream carries the trace's rate in each phase (goodput ~0.95 x the rate)."""
    trace = parse_trace("time_s,link,bandwidth\n0,*,40Mbit/s\n2,*,4Mbit/s\n4,*,\n", "follow.csv", 2)
    with Testbed.up(2, "40Mbit/s", trace=trace, trace_repeat=True) as testbed:
        receiver = subprocess.Popen(testbed.exec_prefix(1) + [sys.executable, "-c", RECEIVER, testbed.addresses[1]],
                                    stdout=subprocess.PIPE, text=True)
        time.sleep(0.2)
        sender = subprocess.Popen(testbed.exec_prefix(0) + [sys.executable, "-c", SENDER, testbed.addresses[1], "4.3"])
        from flexcomm.real_backend.trace_control import request_start

        time.sleep(0.3)
        zero = request_start(testbed.id, "follow")  # epoch of the trace's time zero
        sender.wait(timeout=30)
        marks = json.loads(receiver.communicate(timeout=30)[0])

    def mbit(lo: float, hi: float) -> float:
        got = sum(n for t, n in marks if lo <= t - zero < hi)
        return got * 8 / (hi - lo) / 1e6

    fast, slow = mbit(0.6, 1.8), mbit(2.6, 3.8)
    assert fast == pytest.approx(0.95 * 40, rel=0.2)
    assert slow == pytest.approx(0.95 * 4, rel=0.25)


@needs_netns
def test_bad_traces_and_dead_testbeds_are_one_line_errors(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    latency = tmp_path / "latency.csv"
    latency.write_text("time_s,link,bandwidth,latency\n0,*,10Mbit/s,2ms\n")
    assert main(["testbed", "up", "--ranks", "2", "--bandwidth", "10Mbit/s", "--json"]) == 0
    testbed = Testbed.load(json.loads(capsys.readouterr().out)["id"])
    try:
        assert main(["testbed", "shape", "--id", testbed.id, "--trace", str(latency)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "delay line" in err[0]
        unknown = tmp_path / "unknown.csv"
        unknown.write_text("time_s,link,bandwidth\n0,node5,10Mbit/s\n")
        assert main(["testbed", "shape", "--id", testbed.id, "--trace", str(unknown)]) == 2
        assert "link (unknown.csv line 2)" in capsys.readouterr().err
        fast = tmp_path / "fast.csv"  # a slow testbed's small tbf buckets are sized for its own rates
        fast.write_text("time_s,link,bandwidth\n0,*,40Mbit/s\n")
        assert main(["testbed", "shape", "--id", testbed.id, "--trace", str(fast)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("flexcomm: error: bandwidth (fast.csv)") and "10Mbit/s" in err[0]
    finally:
        testbed.down()
    assert main(["testbed", "shape", "--id", testbed.id, "--trace", "c1"]) == 2  # gone
    assert "the id of a running testbed" in capsys.readouterr().err
    assert main(["testbed", "run", "--ranks", "2", "--bandwidth", "10Mbit/s", "--trace", "c1", "--timeout", "10s",
                 "--", "true"]) == 2  # a 120 s trace in a 10 s run
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "within the run" in err[0]
    assert not list_testbeds()


@needs_netns
def test_an_interrupted_traced_run_leaves_nothing_behind(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "flexcomm.experiments.cli", "testbed", "run", "--ranks", "2",
                             "--bandwidth", "20Mbit/s", "--trace", "c1", "--trace-duration", "30s", "--timeout", "1min",
                             "--", sys.executable, "-c", "import time; time.sleep(60)"],
                            env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    testbeds = list_testbeds()
    while not (testbeds and testbeds[0].trace_pid and trace_file(testbeds[0].id, "jsonl").exists()) and (
            time.time() < deadline):
        time.sleep(0.1)
        testbeds = list_testbeds()
    assert testbeds and testbeds[0].trace_pid
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert not list_testbeds()
    assert not [n for n in list_namespaces() if testbeds[0].id in n]
    time.sleep(0.3)
    assert not _alive(testbeds[0].trace_pid)
