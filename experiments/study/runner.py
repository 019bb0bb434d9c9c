"""Run a study's points in a local process pool or on a Dask cluster, journalled so it can resume.

Why a journal: every finished point is appended to ``DIR/results.csv`` and flushed at once, in the
process that collects results (workers never write), so a study killed at any moment keeps every
point it finished; the one line a crash can tear is the last, and it has no newline, so
:func:`read_journal` cuts it off before anything is appended. On start the journal is read and the
points whose id it holds are skipped. ``DIR/study.json`` records the spec hash (a hash of every
point id): a directory holding a different study is refused rather than mixed. A lock file keeps two
runs out of one directory.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import AppendingCsv, output_folder_lock, write_text_atomic
from flexcomm.costmodel.errors import InputError, RunStoppedError
from flexcomm.costmodel.limits import MAX_LOCAL_PROCESSES
from flexcomm.experiments.study.batching import MAX_BATCH, BatchSizer, windowed
from flexcomm.experiments.study.engines import check_point, run_point, run_points
from flexcomm.experiments.study.journal import JOURNAL, STUDY_JSON, read_journal
from flexcomm.experiments.study.on_dask import DaskSession, SchedulerLost
from flexcomm.experiments.study.pool import worker_pool
from flexcomm.experiments.study.report import finish
from flexcomm.experiments.study.spec import StudySpec, point_payload

LOCK = ".study.lock"
#: What Dask accepts as a scheduler address, checked before importing distributed (seconds of start-up).
SCHEDULER_ADDRESS = re.compile(r"^(inproc://\S+|((tcp|tls|ucx|ws|wss)://)?([^\s:/\[\]]+|\[[0-9a-fA-F:.]+\]):\d{1,5})$")


@dataclass
class StudyRun:
    """What one invocation did: points skipped (already journalled) and run, and whether the study is complete."""

    spec: StudySpec
    out: Path
    skipped: int
    ran: list[str] = field(default_factory=list)
    complete: bool = False
    wall_s: float = 0.0
    files: list[Path] = field(default_factory=list)
    table: Any = None  # pandas.DataFrame once complete
    batch_sizes: list[int] = field(default_factory=list)  # points per task, in submission order

    @property
    def total(self) -> int:
        return len(self.spec.points)


def _claim(spec: StudySpec, out: Path) -> None:
    """Write study.json, or check that the directory holds this very study."""
    meta = out / STUDY_JSON
    if meta.exists():
        try:
            held = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise InputError("out", str(meta), "a readable study.json (written by `flexcomm study`)") from None
        if held.get("spec_hash") != spec.spec_hash:
            raise InputError("out", str(out), f"an empty directory or one holding study {spec.name!r} with the same "
                             f"points (it holds {held.get('name')!r}, spec hash {str(held.get('spec_hash'))[:12]} "
                             f"!= {spec.spec_hash[:12]}); use another --out")
        return
    if (out / JOURNAL).exists():
        raise InputError("out", str(out), f"a study directory (it has {JOURNAL} but no {STUDY_JSON})")
    write_text_atomic(meta, json.dumps(spec.describe(), indent=2) + "\n")


# --- executors -----------------------------------------------------------------------------------


def _local(sizer: BatchSizer, workers: int) -> Iterator[dict[str, Any]]:
    with worker_pool(workers) as pool:
        def wait_first(pending: set) -> tuple[set, set]:
            done, not_done = wait(pending, return_when=FIRST_COMPLETED)
            return set(done), set(not_done)

        yield from windowed(sizer, lambda batch: pool.submit(run_points, batch), wait_first, lambda: workers)


def _inline(payloads: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for payload in payloads:
        yield run_point(payload)


# --- the study -----------------------------------------------------------------------------------


def run_study(
    spec: StudySpec,
    out: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    max_points: int | None = None,
    scheduler_timeout_s: float = 30.0,
    batch: int | None = None,
    progress: bool = True,
    figures: bool = True,
) -> StudyRun:
    """Run every point not yet in ``out/results.csv``; when all are there, write the table, summary and figures.

    ``workers``: local processes (default: CPUs, at most one per point; 0 runs in this process, for
    debugging). ``scheduler``: a Dask scheduler address, which replaces the local pool; it is reached
    before anything is created in ``out``, and if it is lost or silent for ``scheduler_timeout_s`` the run
    raises :class:`RunStoppedError` (every finished point is saved; rerunning resumes). ``batch``: points
    per task (default: sized from the measured cost of a point). ``max_points``: run at most that many
    new points and stop (a budget; rerun to continue). ``figures=False``: tables and summary only.
    """
    if workers is not None and (isinstance(workers, bool) or workers < 0):
        raise InputError("workers", workers, "an integer >= 0 (0: run in this process)")
    if workers is not None:
        MAX_LOCAL_PROCESSES.check("workers", workers)
    if scheduler is not None and not SCHEDULER_ADDRESS.match(scheduler):
        raise InputError("scheduler", scheduler, "a Dask scheduler address such as tcp://10.0.0.5:8786")
    if max_points is not None and max_points < 0:
        raise InputError("max-points", max_points, "an integer >= 0")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH):
        raise InputError("batch", batch, f"points per task, an integer in [1, {MAX_BATCH}] (default: sized from "
                         "the measured cost of a point)")
    out = Path(out)
    started = time.perf_counter()
    session = DaskSession(scheduler, scheduler_timeout_s) if scheduler else None
    try:
        if session is not None:
            session.connect()  # before anything exists in out: an unreachable scheduler leaves nothing behind
        with output_folder_lock(out, name=LOCK, what="`flexcomm study`"):
            return _run_locked(spec, out, started, workers, session, max_points, batch, progress, figures)
    finally:
        if session is not None:
            session.close()


def _run_locked(spec: StudySpec, out: Path, started: float, workers: int | None, session: DaskSession | None,
                max_points: int | None, batch: int | None, progress: bool, figures: bool) -> StudyRun:
    _claim(spec, out)
    columns = spec.journal_columns
    done = read_journal(out / JOURNAL, columns)
    known = {p.id for p in spec.points}
    strays = sorted(set(done) - known)
    if strays:  # cannot happen with a matching spec hash unless the file was edited by hand
        raise InputError("out", str(out / JOURNAL), f"rows of this study's points only (point {strays[0]} is not)")
    todo = [p for p in spec.points if p.id not in done]
    if max_points is not None:
        todo = todo[:max_points]
    payloads = [point_payload(spec, p) for p in todo]
    for payload in payloads:
        check_point(payload)
    run = StudyRun(spec, out, skipped=len(done))
    if payloads:
        _execute(run, payloads, columns, workers, session, batch, progress)
    run.complete = len(done) + len(run.ran) == len(spec.points)
    if run.complete:
        run.table, run.files = finish(spec, out, figures=figures)
    run.wall_s = time.perf_counter() - started
    return run


def _execute(run: StudyRun, payloads: list[dict[str, Any]], columns: list[str], workers: int | None,
             session: DaskSession | None, batch: int | None, progress: bool) -> None:
    from tqdm import tqdm

    spec = run.spec
    sizer = BatchSizer(payloads, batch=batch)
    if session is not None:
        rows = session.rows(sizer)
    else:
        count = min(os.cpu_count() or 1, len(payloads)) if workers is None else min(workers, len(payloads))
        rows = _inline(payloads) if count == 0 else _local(sizer, count)
    journal = AppendingCsv(run.out / JOURNAL, columns)
    bar = tqdm(total=len(spec.points), initial=run.skipped, unit="point", desc=spec.name, file=sys.stderr,
               disable=None if progress else True, dynamic_ncols=True)
    try:
        for row in rows:
            journal.write(row)
            run.ran.append(row["point_id"])
            bar.update(1)
    except SchedulerLost as lost:
        saved = run.skipped + len(run.ran)
        raise RunStoppedError(f"scheduler {session.address if session else '?'} {lost}; {saved}/{run.total} points "
                              f"saved in {run.out / JOURNAL}; rerun the same command to resume") from None
    finally:
        if hasattr(rows, "close"):
            rows.close()
        bar.close()
        journal.close()
    run.batch_sizes = sizer.sizes
