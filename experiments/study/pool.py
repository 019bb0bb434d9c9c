"""The local worker pool of a study: processes that die with the study and leave Ctrl-C to it.

Why: a ``ProcessPoolExecutor`` on the forkserver context left its server, its workers and the resource
tracker running for 10+ minutes after the study was SIGKILLed (the workers are the server's children,
not the study's), and Ctrl-C printed a ``KeyboardInterrupt`` traceback from every worker before the
study's own one line. Here workers are *spawned* by the study itself (a clean interpreter, as forkserver
gave, without torch's threads of the parent), each asks the kernel to SIGKILL it when the study dies
(``PR_SET_PDEATHSIG``), and each ignores SIGINT: the study catches it, terminates them and prints one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, suppress

from flexcomm.costmodel.processes import tied_pool


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """``workers`` spawned processes; on an exception (Ctrl-C included) they are terminated, not awaited."""
    pool = tied_pool(workers)
    try:
        yield pool
    except BaseException:
        processes = list(getattr(pool, "_processes", {}).values())  # the executor has no public kill
        for process in processes:
            with suppress(Exception):
                process.terminate()
        for process in processes:
            with suppress(Exception):
                process.join(timeout=5.0)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
