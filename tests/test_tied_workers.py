"""Workers die with the process that started them, even when it is SIGKILLed (issue 31, item 7)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _kill_parent_only_and_wait_for(children: list[psutil.Process], parent: subprocess.Popen,
                                   within_s: float = 20.0) -> list[psutil.Process]:
    """SIGKILL ``parent`` alone (not its group) and return the children still alive after ``within_s``."""
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    _, alive = psutil.wait_procs(children, timeout=within_s)
    for process in alive:  # do not leave them behind for the next test
        process.kill()
    return alive


def _children_when(parent: subprocess.Popen, count: int, timeout_s: float = 120.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert parent.poll() is None, "the parent ended before its workers started"
        children = psutil.Process(parent.pid).children(recursive=True)
        if len(children) >= count:
            return children
        time.sleep(0.1)
    pytest.fail(f"fewer than {count} workers after {timeout_s}s")


def test_a_tied_pools_busy_workers_die_with_a_killed_parent() -> None:
    script = ("import time\nfrom flexcomm.costmodel.processes import tied_pool\n"
              "pool = tied_pool(2)\n"
              "futures = [pool.submit(time.sleep, 300) for _ in range(2)]\n"
              "time.sleep(300)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], env=ENV, start_new_session=True)
    try:
        workers = [p for p in _children_when(parent, 2) if "resource_tracker" not in " ".join(p.cmdline())]
        time.sleep(3.0)  # let the spawned interpreters reach their initializer and their task
        assert not _kill_parent_only_and_wait_for(workers, parent)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_child_whose_parent_died_before_it_could_ask_exits_at_once() -> None:
    # the check after PR_SET_PDEATHSIG: a starter pid that is not our parent means the starter is gone
    done = subprocess.run([sys.executable, "-c", "import os\nfrom flexcomm.costmodel.processes import "
                           "die_with_parent\ndie_with_parent(os.getppid() + 7919)\nprint('still here')"],
                          env=ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "still here" not in done.stdout
    alive = subprocess.run([sys.executable, "-c", "import os\nfrom flexcomm.costmodel.processes import "
                            "die_with_parent\ndie_with_parent(os.getppid())\nprint('still here')"],
                           env=ENV, capture_output=True, text=True, timeout=60)
    assert alive.returncode == 0 and "still here" in alive.stdout


def test_a_killed_study_leaves_no_worker_running(tmp_path: Path) -> None:
    spec = {"name": "t-tied", "engine": "sim", "cluster": "8x1-10gbe", "workload": "resnet50",
            "strategies": ["dense", "topk-ar"],
            "sweep": {"bandwidth": ["1Gbit/s", "2Gbit/s", "5Gbit/s", "10Gbit/s"], "steps": [4000]}}
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(spec))
    parent = subprocess.Popen([sys.executable, "-m", "flexcomm.experiments.cli", "study", str(path), "--out",
                               str(tmp_path / "out"), "--workers", "2", "--no-progress"], env=ENV, cwd=tmp_path,
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        workers = [p for p in _children_when(parent, 2) if "resource_tracker" not in " ".join(p.cmdline())]
        assert not _kill_parent_only_and_wait_for(workers, parent), "study workers outlived the study"
    finally:
        if parent.poll() is None:
            parent.kill()
