"""A study's worker processes die with it, and Ctrl-C ends it with one line (real processes and signals)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLOW_STUDY = """name: slow-emulated
engine: emulated
cluster: 8x1-10gbe
workload: mlp-digits
strategies: [dense]
sweep:
  bandwidth: [1Gbit/s, 10Gbit/s, 25Gbit/s, 100Gbit/s]
  ranks: [4]
  steps: [100000]
seed: 0
metrics: [step_time_s]
"""


def _children() -> dict[int, int]:
    """pid -> parent pid of every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":  # a zombie has exited; only its parent's reaping is left
                table[int(entry.name)] = int(fields[1])
    return table


def _descendants(pid: int) -> set[int]:
    table = _children()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in table.items() if parent in frontier} - found
        found |= frontier
    return found


def _left_behind(pids: set[int], timeout_s: float = 15.0) -> set[int]:
    """The processes of ``pids`` still alive after up to ``timeout_s`` (the kernel delivers deaths quickly)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and pids & set(_children()):
        time.sleep(0.2)
    return pids & set(_children())


def _start(tmp_path: Path) -> subprocess.Popen:
    study = tmp_path / "slow.yaml"
    study.write_text(SLOW_STUDY)
    cmd = [sys.executable, "-m", "flexcomm.experiments.cli", "study", str(study), "--out", str(tmp_path / "out"),
           "--workers", "2", "--no-progress"]
    return subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def _wait_for_workers(proc: subprocess.Popen, count: int, timeout_s: float = 90.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        found = _descendants(proc.pid)
        if len(found) >= count:
            time.sleep(3.0)  # let the workers start their points
            return _descendants(proc.pid)
        time.sleep(0.2)
    pytest.fail(f"the study did not start {count} worker processes within {timeout_s:.0f} s")


def test_workers_die_when_the_study_is_killed(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        workers = _wait_for_workers(proc, 2)
        os.kill(proc.pid, signal.SIGKILL)  # the study alone, as an OOM killer or `kill -9 PID` would
        proc.wait(timeout=10)
        assert not _left_behind(workers)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def test_ctrl_c_prints_one_line_and_leaves_no_worker(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        workers = _wait_for_workers(proc, 2)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the whole foreground group
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130
        assert err == "flexcomm: interrupted\n"
        assert not _left_behind(workers)
        assert (tmp_path / "out" / "results.csv").read_text().startswith("point_id,")  # the journal survives
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
