"""One ordered communication thread per hook: bucket exchanges run off the backward pass, in bucket order.

Why: a DDP communication hook that waits for its collectives blocks the autograd engine, so communication
cannot overlap the rest of backward the way DDP's builtin allreduce does (measured on 4 ranks at 1 Gbit/s:
the blocking dense hook 14 % slower than builtin). A hook must return a future at once and finish later.

Why a thread and not callback chains: torch's PowerSGD hook chains ``get_future().then(...)`` callbacks, and
each callback issues the next collective from whatever thread completed the previous one, while the main
thread issues the next bucket's first collective. Gloo matches collectives by the order a process issues
them, so two threads issuing concurrently can interleave differently on different ranks and pair a bucket's
second allreduce with another bucket's first. One FIFO thread per process group issues every collective of
every exchange, bucket after bucket, in the order DDP calls the hooks (the same on every rank), as a CUDA
stream orders NCCL's work: the order is fixed, and the main thread never waits. Collectives inside are
issued with ``async_op=True`` and waited for on this thread only.

DDP waits for every bucket's future before the optimizer step, so nothing the thread touches (the bucket
buffers, the compressor's state) is read by the trainer while an exchange is in flight.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

_STOP = object()


class CommThread:
    """A daemon thread running submitted jobs one at a time, each completing the torch future it was given."""

    def __init__(self, name: str = "flexcomm-comm") -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        #: seconds this thread spent running jobs since the last :meth:`take_busy` (the exchanges' own time)
        self.busy_s = 0.0
        self._failed: BaseException | None = None  #: an ``after`` that raised: the next job re-raises it

    def submit(self, job: Callable[[], torch.Tensor], device: torch.device,
               after: Callable[[], None] | None = None) -> torch.futures.Future[torch.Tensor]:
        """Queue ``job``; its result (or exception) completes the returned future. ``after`` then runs on
        this thread too, once the future is complete: work the trainer need not wait for (an adaptive
        hook's folding and deciding), still before the next job, so its outcome is in place for it."""
        future: torch.futures.Future[torch.Tensor] = (
            torch.futures.Future(devices=[device]) if device.type == "cuda" else torch.futures.Future())
        self._jobs.put((job, future, device, after))
        return future

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                return
            job, future, device, after = item
            started = time.perf_counter()
            try:
                if self._failed is not None:
                    raise RuntimeError("the previous job's follow-up work failed") from self._failed
                if device.type == "cuda":
                    torch.cuda.set_device(device)
                result = job()
            except BaseException as exc:  # noqa: BLE001 - the trainer's thread re-raises it through the future
                self.busy_s += time.perf_counter() - started
                future.set_exception(exc)
                continue
            self.busy_s += time.perf_counter() - started
            future.set_result(result)
            if after is not None:
                try:
                    after()
                except BaseException as exc:  # noqa: BLE001 - fail the next job (the trainer waits for it)
                    self._failed = exc

    def take_busy(self) -> float:
        """Busy seconds since the last call (a step's exchange time, overlapped or not)."""
        busy, self.busy_s = self.busy_s, 0.0
        return busy

    def close(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join(timeout=5.0)
