"""Child processes that die with the process that started them, however it ends.

Why: a pool's workers outlive a SIGKILLed parent. A ``ProcessPoolExecutor`` worker in the middle of a long
task never reads the closed queue that would tell it to stop (a study's worker ran 16 minutes after its study
was killed). Linux's ``PR_SET_PDEATHSIG`` asks the kernel to SIGKILL the child when its parent dies; it is
set in the child, so a parent that dies *before* the child gets there (a spawned interpreter takes seconds
to import) would be missed: the child then checks that its parent is still the one that started it.
Every path in flexcomm that starts workers (studies, emulation batches, ES placement, the SimGrid referee,
launched ranks) goes through :func:`die_with_parent` or :func:`tied_pool`.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

_PR_SET_PDEATHSIG = 1

__all__ = ["die_with_parent", "tied_pool"]


def die_with_parent(parent_pid: int | None = None) -> None:
    """In a child: SIGKILL me when my parent dies (Linux; elsewhere a no-op). With ``parent_pid`` (the
    starter's pid, taken before the child was made), exit at once if the parent is already gone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # re-parented: the starter died before the request above was made


def _start_tied(parent_pid: int, ignore_sigint: bool, initializer: Callable[..., Any] | None,
                initargs: tuple[Any, ...]) -> None:
    die_with_parent(parent_pid)
    if ignore_sigint:  # the parent catches Ctrl-C and stops its workers; they must not print tracebacks
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer(*initargs)


def tied_pool(workers: int, *, initializer: Callable[..., Any] | None = None, initargs: tuple[Any, ...] = (),
              context: str = "spawn", ignore_sigint: bool = True) -> ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` whose workers are SIGKILLed when this process dies (see the module)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context(context), initializer=_start_tied,
                               initargs=(os.getpid(), ignore_sigint, initializer, initargs))
