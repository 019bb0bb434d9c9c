"""How a study's points travel to workers: batches sized from the measured cost of a point, a bounded window.

Why batches: a simulator point takes ~10 ms and a cost-model point ~1 ms, while a Dask task costs the
scheduler and the client a few milliseconds each; sent one point per task, a 1,056-point study ran at
0.64x the speed of the local pool on the same two workers. Here a task holds as many neighbouring
points as take about :data:`TARGET_TASK_S` of work by the median per-point wall time measured so far
(every journal row carries its ``wall_s``), starting from :data:`FIRST_BATCH` points while nothing has
been measured, and never more than a fair share of what is left, so the last tasks still spread over
every worker. Neighbours in the sweep share a cluster, hence the engines' caches.

Why a window: submitting every task at once kept every future, and on Dask every result, alive until
the end (memory grew with the study, and a lost worker made Dask recompute the points it held although
the client had saved them). :func:`windowed` keeps at most ``window_per_worker`` tasks per worker in
flight and hands each result over, and forgets it, as soon as it arrives.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

#: Seconds of work a task should hold: well above a Dask task's few milliseconds of overhead, small
#: enough that a lost worker loses little and the progress bar moves.
TARGET_TASK_S = 0.5
#: Points in the first tasks, before any point has been timed (a worker's first point also pays its imports).
FIRST_BATCH = 2
#: Upper bound on points per task, whatever the measurement says (a cost-model point is ~1 ms).
MAX_BATCH = 5000
#: Tasks in flight per worker: one running and one waiting, so no worker idles while the client appends rows.
WINDOW_PER_WORKER = 2
#: Per-point wall times the median is taken over (the most recent ones: cost changes along a sweep).
COST_SAMPLES = 256


class BatchSizer:
    """Cuts the points to run into consecutive batches, each sized by what the points measured so far cost."""

    def __init__(self, payloads: list[dict[str, Any]], *, batch: int | None = None,
                 target_s: float = TARGET_TASK_S) -> None:
        self._payloads = payloads
        self._next = 0
        self._fixed = batch
        self._target_s = target_s
        self._costs: deque[float] = deque(maxlen=COST_SAMPLES)
        self.sizes: list[int] = []  # every batch handed out, for the run's report and the tests

    @property
    def remaining(self) -> int:
        return len(self._payloads) - self._next

    def observe(self, rows: Iterable[dict[str, Any]]) -> None:
        """Learn from finished rows: their ``wall_s`` is what one point cost on a worker."""
        for row in rows:
            wall = row.get("wall_s")
            if isinstance(wall, (int, float)) and math.isfinite(wall) and wall >= 0:
                self._costs.append(float(wall))

    def point_cost_s(self) -> float | None:
        """The median measured wall time of a point, or None before the first result."""
        return statistics.median(self._costs) if self._costs else None

    def size(self, workers: int) -> int:
        """Points for the next task, with ``workers`` workers able to take tasks."""
        if self._fixed is not None:
            return self._fixed
        cost = self.point_cost_s()
        if cost is None:
            wanted = FIRST_BATCH
        else:
            wanted = MAX_BATCH if cost <= 0 else math.ceil(self._target_s / cost)
        fair_share = math.ceil(self.remaining / (WINDOW_PER_WORKER * max(workers, 1)))
        return max(1, min(wanted, MAX_BATCH, fair_share))

    def take(self, workers: int) -> list[dict[str, Any]]:
        """The next batch (empty once every point has been handed out)."""
        if self.remaining <= 0:
            return []
        size = self.size(workers)
        batch = self._payloads[self._next:self._next + size]
        self._next += len(batch)
        self.sizes.append(len(batch))
        return batch


class TaskFuture(Protocol):
    """What :func:`windowed` needs of a future: both ``concurrent.futures`` and Dask's futures are this."""

    def result(self) -> Any: ...


def windowed(
    sizer: BatchSizer,
    submit: Callable[[list[dict[str, Any]]], TaskFuture],
    wait_first: Callable[[set[TaskFuture]], tuple[set[TaskFuture], set[TaskFuture]]],
    workers: Callable[[], int],
    release: Callable[[TaskFuture], None] = lambda future: None,
) -> Iterator[dict[str, Any]]:
    """Rows of every batch, in completion order, with at most ``WINDOW_PER_WORKER * workers()`` tasks in flight.

    ``wait_first(pending)`` blocks until at least one is done and returns ``(done, not_done)``;
    ``release`` drops a future's result where it is kept (Dask: on the worker) once it is in hand.
    """
    pending: set[TaskFuture] = set()
    while True:
        capacity = WINDOW_PER_WORKER * max(workers(), 1)
        while len(pending) < capacity:
            batch = sizer.take(max(workers(), 1))
            if not batch:
                break
            pending.add(submit(batch))
        if not pending:
            return
        done, pending = wait_first(pending)
        for future in done:
            rows = future.result()
            release(future)
            sizer.observe(rows)
            yield from rows
        del done
