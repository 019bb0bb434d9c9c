"""A study's batches on a Dask cluster, with a liveness limit: a lost or silent scheduler stops it in one line.

Why a session object: the runner must reach the scheduler *before* it creates anything in ``--out``
(an address where nothing listens used to leave a header-only ``results.csv``), then run batches,
then stop cleanly whatever happened. Why a liveness limit: Dask's own connect timeout covers only the
first connection; a scheduler that stops answering (SIGSTOP, a hung host) hung the client silently, and
one that died surfaced as ``ConnectionResetError`` from inside ``gather``. Here, whenever no result
arrives for a poll interval the session asks the scheduler for its identity (a cheap RPC, itself
bounded); if neither a result nor an answer arrives for ``timeout_s``, or the scheduler has had no worker
for that long, it raises :class:`SchedulerLost` and the runner turns that into one line saying how many
points are saved and that rerunning resumes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

from flexcomm.costmodel.errors import InputError, RunStoppedError
from flexcomm.experiments.study.batching import BatchSizer, windowed
from flexcomm.experiments.study.engines import run_points

#: Longest wait for a result before the scheduler is asked whether it is alive (seconds).
MAX_POLL_S = 2.0
#: How often the worker-thread count is refreshed from the scheduler while results arrive (seconds).
REFRESH_THREADS_S = 1.0


class SchedulerLost(Exception):
    """The scheduler died, stopped answering or lost every worker; the message says which, in words."""


def batch_key(batch: list[dict[str, Any]]) -> str:
    """The Dask key of a batch: its first point's id and its length (points are consecutive in run order)."""
    return f"flexcomm-study-{batch[0]['id']}-{len(batch)}"


class DaskSession:
    """One client of one scheduler for one study run; ``connect`` first, ``close`` always."""

    def __init__(self, address: str, timeout_s: float) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.poll_s = min(MAX_POLL_S, max(0.05, timeout_s / 5))
        self._client: Any = None
        self._threads = 0
        self._threads_at = 0.0
        self._heard_at = 0.0
        self._threads_seen_at = 0.0
        self._quiet_loggers: dict[str, int] = {}

    # --- connection ------------------------------------------------------------------------------

    def connect(self) -> None:
        """Reach the scheduler and at least one worker thread, or raise (nothing else happens first)."""
        from distributed import Client  # importing distributed sets its loggers' levels; quiet them after

        self._silence_dask()

        try:
            self._client = Client(self.address, timeout=self.timeout_s)
        except (OSError, TimeoutError, ValueError) as exc:
            raise InputError("scheduler", self.address,
                             f"a reachable Dask scheduler such as tcp://10.0.0.5:8786 ({exc})") from None
        try:
            self._client.wait_for_workers(1, timeout=self.timeout_s)
        except TimeoutError:
            raise RunStoppedError(f"scheduler {self.address} has no worker (waited {self.timeout_s:g}s): start "
                                  f"`dask worker {self.address} --nthreads 1` where flexcomm is installed, "
                                  "then rerun the same command") from None
        self._heard_at = self._threads_seen_at = time.monotonic()
        self._refresh_threads(force=True)

    def close(self) -> None:
        if self._client is not None:
            with suppress(Exception):
                self._client.close(timeout=min(self.timeout_s, 5.0))
            self._client = None
        for name, level in self._quiet_loggers.items():
            logging.getLogger(name).setLevel(level)
        self._quiet_loggers.clear()

    def _silence_dask(self) -> None:
        """Dask logs its reconnection attempts to stderr; the study reports a lost scheduler itself, in one line."""
        for name in ("distributed", "distributed.client", "distributed.batched", "distributed.core"):
            logger = logging.getLogger(name)
            self._quiet_loggers.setdefault(name, logger.level)
            logger.setLevel(logging.CRITICAL + 1)

    # --- liveness --------------------------------------------------------------------------------

    def _ask_scheduler(self) -> dict[str, Any]:
        return self._client.sync(self._client.scheduler.identity, n_workers=0,
                                 callback_timeout=min(self.poll_s * 2, self.timeout_s))

    def _refresh_threads(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._threads_at < REFRESH_THREADS_S:
            return
        try:
            info = self._ask_scheduler()
        except Exception:  # noqa: BLE001  (an unanswered ping is what the liveness check counts, not an error)
            return
        self._threads_at = self._heard_at = now
        self._threads = int(info.get("total_threads", 0))
        if self._threads > 0:
            self._threads_seen_at = now

    def _check_alive(self) -> None:
        if self._client.status in ("closed", "closing"):
            raise SchedulerLost("closed the connection")
        self._refresh_threads(force=True)
        now = time.monotonic()
        if now - self._heard_at > self.timeout_s:
            raise SchedulerLost(f"stopped answering (no result and no reply for {self.timeout_s:g}s)")
        if now - self._threads_seen_at > self.timeout_s:
            raise SchedulerLost(f"has had no worker for {self.timeout_s:g}s (a worker that cannot import flexcomm "
                                "dies on its first task)")

    def workers(self) -> int:
        self._refresh_threads()
        return max(self._threads, 1)

    # --- running ---------------------------------------------------------------------------------

    def _submit(self, batch: list[dict[str, Any]]) -> Any:
        return self._client.submit(run_points, batch, key=batch_key(batch), pure=False)

    def _wait_first(self, pending: set[Any]) -> tuple[set[Any], set[Any]]:
        from distributed import wait

        while True:
            try:
                done, not_done = wait(list(pending), timeout=self.poll_s, return_when="FIRST_COMPLETED")
            except TimeoutError:
                self._check_alive()
                continue
            self._heard_at = time.monotonic()
            return set(done), set(not_done)

    @staticmethod
    def _release(future: Any) -> None:
        future.release()

    def rows(self, sizer: BatchSizer) -> Iterator[dict[str, Any]]:
        """Every row of the sizer's points; a lost scheduler or worker raises :class:`SchedulerLost`."""
        from distributed.client import FutureCancelledError, FuturesCancelledError
        from distributed.scheduler import KilledWorker

        try:
            yield from windowed(sizer, self._submit, self._wait_first, self.workers, self._release)
        except (FutureCancelledError, FuturesCancelledError):  # the client cancels them when the connection drops
            raise SchedulerLost("closed the connection") from None
        except KilledWorker as exc:
            raise SchedulerLost(f"lost the workers running one batch three times; out of memory, or flexcomm "
                                f"missing there? ({exc})") from None
        except ModuleNotFoundError as exc:  # raised on a worker: flexcomm (or a dependency) is not installed there
            raise RunStoppedError(f"a Dask worker of {self.address} cannot import {exc.name!r}: install flexcomm "
                                  "with its dependencies (make install) on every worker", exit_status=1) from None
        except OSError as exc:  # the connection broke under a call
            raise SchedulerLost(f"closed the connection ({type(exc).__name__})") from None
