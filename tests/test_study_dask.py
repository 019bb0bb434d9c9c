"""Studies on Dask: batches sized by measured cost, a bounded window, a lost worker costs no saved point,
a lost or silent scheduler stops in one line (exit 75) and rerunning resumes, nothing made before connecting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.errors import EXIT_RESUMABLE, InputError, RunStoppedError
from flexcomm.experiments.study import batching
from flexcomm.experiments.study.batching import MAX_BATCH, BatchSizer, windowed
from flexcomm.experiments.study.journal import JOURNAL, read_journal
from flexcomm.experiments.study.runner import run_study
from flexcomm.experiments.study.spec import build_spec

distributed = pytest.importorskip("distributed")

#: 4 bandwidths x 3 latencies x 2 rank counts x 2 batches x (dense + 2 sparse x 5 ratios) = 528 simulator points
SIM_STUDY: dict[str, Any] = {
    "name": "t-dask-sim", "engine": "sim", "cluster": "8x1-10gbe", "workload": "resnet50",
    "strategies": ["dense", "topk-ag", "topk-ar"],
    "sweep": {"bandwidth": ["1Gbit/s", "10Gbit/s", "25Gbit/s", "100Gbit/s"], "latency": ["5us", "50us", "500us"],
              "ranks": [8, 16], "batch": [32, 64], "ratio": [0.3, 0.1, 0.03, 0.01, 0.001], "steps": [2]},
    "seed": 5,
}
SIM_POINTS = 528


def _table(out: Path) -> pd.DataFrame:
    """The final table in spec order, without wall time (the one column that differs between runs)."""
    return pd.read_csv(out / JOURNAL).drop(columns="wall_s").sort_values("point_id").reset_index(drop=True)


@pytest.fixture(scope="module")
def sim_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reference")
    run = run_study(build_spec(SIM_STUDY), out, workers=2, progress=False, figures=False)
    assert run.complete and len(run.ran) == SIM_POINTS
    return out


def _payloads(count: int) -> list[dict[str, Any]]:
    return [{"id": f"p{i:05d}"} for i in range(count)]


# --- batch sizes and the window ------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 3000), workers=st.integers(1, 16), cost_s=st.floats(1e-5, 5.0),
       fixed=st.one_of(st.none(), st.integers(1, 50)))
def test_batches_cover_every_point_once_in_order(count: int, workers: int, cost_s: float, fixed: int | None) -> None:
    payloads = _payloads(count)
    sizer = BatchSizer(payloads, batch=fixed)
    seen: list[dict[str, Any]] = []
    batches = 0
    while batch := sizer.take(workers):
        batches += 1
        assert 1 <= len(batch) <= (fixed or MAX_BATCH)
        if fixed is None:  # never more than a fair share of what was left, so the tail spreads over workers
            left = count - len(seen)
            assert len(batch) <= -(-left // (batching.WINDOW_PER_WORKER * workers))
        seen.extend(batch)
        sizer.observe({"wall_s": cost_s} for _ in batch)
    assert seen == payloads
    assert len(sizer.sizes) == batches and sum(sizer.sizes) == count


def test_batch_size_follows_the_measured_cost_of_a_point() -> None:
    sizer = BatchSizer(_payloads(100_000))
    assert sizer.take(2) == _payloads(batching.FIRST_BATCH)  # nothing measured yet
    sizer.observe([{"wall_s": 0.01}] * 5 + [{"wall_s": 2.0}])  # a worker's first point pays its imports
    assert sizer.size(2) == round(batching.TARGET_TASK_S / 0.01)  # the median, not the mean
    sizer.observe([{"wall_s": 3.0}] * 20)  # points got expensive (a bigger setting): one per task
    assert sizer.size(2) == 1
    assert BatchSizer(_payloads(10), batch=7).size(4) == 7  # --batch is taken as given


@pytest.mark.parametrize("workers", [1, 3])
def test_window_bounds_tasks_in_flight_and_releases_each_result(workers: int) -> None:
    in_flight, peak, released = 0, 0, []
    lock = threading.Lock()

    def task(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.002)
        with lock:
            in_flight -= 1
        return [{"point_id": p["id"], "wall_s": 0.0005} for p in batch]

    def wait_first(pending: set) -> tuple[set, set]:
        done, not_done = wait(pending, return_when=FIRST_COMPLETED)
        return set(done), set(not_done)

    submitted = []
    with ThreadPoolExecutor(max_workers=8) as pool:  # more threads than the window: only the window limits
        def submit(batch: list[dict[str, Any]]):
            submitted.append(len(batch))
            return pool.submit(task, batch)

        rows = list(windowed(BatchSizer(_payloads(400)), submit, wait_first, lambda: workers, released.append))
    assert sorted(r["point_id"] for r in rows) == [p["id"] for p in _payloads(400)]
    assert peak <= batching.WINDOW_PER_WORKER * workers
    assert len(released) == len(submitted) > 2


@pytest.mark.parametrize("batch", [0, -1, MAX_BATCH + 1, True, 2.5])
def test_bad_batch_is_refused_before_anything_runs(batch: Any, tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        run_study(build_spec(SIM_STUDY), tmp_path / "out", workers=0, batch=batch, progress=False)
    assert info.value.field == "batch" and not (tmp_path / "out").exists()


# --- a real LocalCluster: a worker process killed mid-study --------------------------------------


def _memory_transitions(cluster: Any) -> tuple[Counter, int]:
    """How many times each task reached memory on a worker (a finished computation), and the most results held
    in workers' memory at once, from the scheduler's transition log."""
    held, peak = 0, 0
    for t in cluster.scheduler.transition_log:
        held += (t.finish == "memory") - (t.start == "memory")
        peak = max(peak, held)
    return Counter(t.key for t in cluster.scheduler.transition_log if t.finish == "memory"), peak


def _batch_ids(key: str, order: list[str]) -> list[str]:
    """The point ids of a batch task ``flexcomm-study-<first id>-<size>``."""
    first, size = key.removeprefix("flexcomm-study-").rsplit("-", 1)
    start = order.index(first)
    return order[start:start + int(size)]


def _saved_and_forgotten(out: Path, cluster: Any, order: list[str]) -> set[str] | None:
    """The saved point ids, once the scheduler has dropped every task holding one of them; None while a saved
    batch's release is still on its way (Dask would rightly recompute a result it still holds for the client)."""
    saved = _saved_ids(out)
    keys = [str(k) for k in list(cluster.scheduler.tasks) if str(k).startswith("flexcomm-study-")]
    return None if any(set(_batch_ids(k, order)) & saved for k in keys) else saved


def _study_command(spec_file: Path, out: Path, address: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "flexcomm.experiments.cli", "study", str(spec_file), "--out",
                             str(out), "--scheduler", address, "--no-progress", "--no-figures", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def _saved_ids(out: Path) -> set[str]:
    """Point ids of the complete rows of a journal another process is appending to (read only: no repair)."""
    text = (out / JOURNAL).read_text(encoding="utf-8")
    lines = text.splitlines()[1:] if text.endswith("\n") else text.splitlines()[1:-1]
    return {line.split(",", 1)[0] for line in lines}


def _wait_for_rows(out: Path, rows: int, study: subprocess.Popen) -> None:
    deadline = time.monotonic() + 90
    while not (out / JOURNAL).exists() or (out / JOURNAL).read_text().count("\n") < rows + 1:
        assert study.poll() is None and time.monotonic() < deadline, study.communicate()
        time.sleep(0.02)


def test_killed_worker_costs_no_saved_point_and_the_table_is_the_reference(sim_reference: Path,
                                                                          tmp_path: Path) -> None:
    spec = build_spec(SIM_STUDY)
    order = [p.id for p in spec.points]
    spec_file = tmp_path / "study.yaml"
    spec_file.write_text(yaml.safe_dump(SIM_STUDY), encoding="utf-8")
    out = tmp_path / "dask"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        study = _study_command(spec_file, out, cluster.scheduler_address)
        try:
            with distributed.Client(cluster.scheduler_address, timeout=30) as client:
                pid, *others = client.run(os.getpid).values()
                _wait_for_rows(out, 80, study)
                # both workers frozen: nothing more is computed, so the kill lands mid-study however fast this
                # machine runs the points; once the client has saved what it fetched, the saved batches the
                # scheduler has forgotten are the ones the claim is about (a batch the client still holds may
                # rightly be recomputed)
                for worker in (pid, *others):
                    os.kill(worker, signal.SIGSTOP)
                try:
                    saved, settled_at = _saved_ids(out), time.monotonic()
                    while time.monotonic() - settled_at < 1.0:
                        time.sleep(0.05)
                        if (now := _saved_ids(out)) != saved:
                            saved, settled_at = now, time.monotonic()
                    held = {i for k in list(cluster.scheduler.tasks) if str(k).startswith("flexcomm-study-")
                            for i in _batch_ids(str(k), order)}
                    saved_before_kill = saved - held
                    os.kill(pid, signal.SIGKILL)
                finally:
                    for worker in others:
                        os.kill(worker, signal.SIGCONT)
            _, err = study.communicate(timeout=120)
        finally:
            if study.poll() is None:
                study.kill()
        reached_memory, peak_held = _memory_transitions(cluster)
        assert len(cluster.scheduler.transition_log) < cluster.scheduler.transition_log.maxlen  # the whole story
    assert study.returncode == 0, err
    assert peak_held <= batching.WINDOW_PER_WORKER * 2  # results leave the workers as soon as the client has them
    # 80 rows saved, less the batch or two the client still held: the kill came mid-study with points let go
    assert 20 <= len(saved_before_kill) < SIM_POINTS, "the worker was not killed mid-study"
    pd.testing.assert_frame_equal(_table(out), _table(sim_reference))
    sizes = [int(key.rsplit("-", 1)[1]) for key in reached_memory]
    assert max(sizes) > batching.FIRST_BATCH  # batches grew from the measured cost of a point
    rerun = set()
    for key, count in reached_memory.items():
        if count > 1:  # computed twice: only a batch the client had not yet saved and released may be
            rerun.update(_batch_ids(key, order))
    assert not rerun & saved_before_kill


def test_scheduler_without_workers_stops_before_creating_anything(tmp_path: Path) -> None:
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        started = time.monotonic()
        with pytest.raises(RunStoppedError, match="has no worker") as info:
            run_study(build_spec(SIM_STUDY), tmp_path / "out", scheduler=cluster.scheduler_address,
                      scheduler_timeout_s=1.0, progress=False)
    assert info.value.exit_status == EXIT_RESUMABLE and time.monotonic() - started < 20
    assert not (tmp_path / "out").exists()


# --- a scheduler in its own process: stopped (SIGSTOP) or killed mid-study -------------------------


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *argv], stdout=subprocess.DEVNULL, stderr=log.open("w"),
                            start_new_session=True)


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_lost_scheduler_stops_in_one_line_and_rerun_resumes(how: str, sim_reference: Path, tmp_path: Path) -> None:
    spec_file = tmp_path / "study.yaml"
    spec_file.write_text(yaml.safe_dump(SIM_STUDY), encoding="utf-8")
    address_file = tmp_path / "scheduler.json"
    scheduler = _start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                        "--scheduler-file", str(address_file)], tmp_path / "scheduler.log")
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        address = json.loads(address_file.read_text())["address"]
        worker = _start(["distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard"],
                        tmp_path / "worker.log")
        out = tmp_path / "out"
        study = _study_command(spec_file, out, address, "--scheduler-timeout", "3s")
        _wait_for_rows(out, 20, study)
        stopped_at = time.monotonic()
        scheduler.send_signal(signal.SIGSTOP if how == "stop" else signal.SIGKILL)
        _, err = study.communicate(timeout=60)
        waited = time.monotonic() - stopped_at
    finally:
        for process in (scheduler, worker):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
    saved = len(read_journal(out / JOURNAL, build_spec(SIM_STUDY).journal_columns))
    assert study.returncode == EXIT_RESUMABLE, err
    line = err.strip()
    assert line.count("\n") == 0 and line.startswith(f"flexcomm: error: scheduler {address} "), err
    assert f"{saved}/{SIM_POINTS} points saved" in line and "rerun the same command to resume" in line
    assert ("stopped answering" in line) if how == "stop" else ("closed the connection" in line)
    assert waited < (20 if how == "stop" else 10)  # the 3 s limit, plus the interpreter's exit
    assert 0 < saved < SIM_POINTS
    rerun = run_study(build_spec(SIM_STUDY), out, workers=2, progress=False, figures=False)  # resumes, locally
    assert rerun.skipped == saved and rerun.complete
    pd.testing.assert_frame_equal(_table(out), _table(sim_reference))
