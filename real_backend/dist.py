"""Join the process group a launcher described in the environment, with bounded waits everywhere.

Works under ``flexcomm launch``, ``flexcomm testbed run`` and ``torchrun`` alike (they all set
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).

Why the bounds: torch's defaults wait 10 minutes (gloo) or forever (NCCL without async error
handling) for a peer that died. Here ``init_process_group`` gets a timeout (default
:data:`DEFAULT_TIMEOUT_S`, or ``FLEXCOMM_DIST_TIMEOUT_S``), which gloo also applies to every
collective, and :class:`Watchdog` ends a rank whose guarded step overruns its deadline or whose
launcher has gone, so a run always ends with a clear error instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from flexcomm.costmodel.errors import InputError

#: Default bound (seconds) on rendezvous and on each collective: long enough for a 256 MiB
#: allreduce over a 100 Mbit/s link (~22 s), short enough that a dead peer is noticed.
DEFAULT_TIMEOUT_S = 120.0
#: Exit status of a rank ended by the watchdog.
EXIT_WATCHDOG = 3
_REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistInfo:
    """Who this rank is and where its tensors live."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: object  # torch.device (torch is imported lazily so the CLI starts fast)
    timeout_s: float


def timeout_from_env(default: float = DEFAULT_TIMEOUT_S) -> float:
    """``FLEXCOMM_DIST_TIMEOUT_S`` if set (validated), else ``default``."""
    raw = os.environ.get("FLEXCOMM_DIST_TIMEOUT_S")
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InputError("FLEXCOMM_DIST_TIMEOUT_S", raw, "a positive number of seconds")
    return value


def choose_backend(requested: str | None = None) -> str:
    """``requested``, else ``FLEXCOMM_BACKEND``, else nccl when CUDA is available, else gloo."""
    import torch

    backend = (requested or os.environ.get("FLEXCOMM_BACKEND") or "").strip().lower()
    if not backend:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("gloo", "nccl"):
        raise InputError("backend", backend, "gloo or nccl")
    if backend == "nccl" and not torch.cuda.is_available():
        raise InputError("backend", backend, "gloo on a machine without CUDA (nccl needs GPUs)")
    return backend


def _env_int(name: str, default: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        if default is not None:
            return default
        raise InputError(name, None, "set by `flexcomm launch` or torchrun")
    try:
        return int(raw)
    except ValueError:
        raise InputError(name, raw, "an integer") from None


def init_from_env(backend: str | None = None, timeout_s: float | None = None) -> DistInfo:
    """Initialise ``torch.distributed`` from the launcher's environment and pick this rank's device.

    The device is ``cuda:LOCAL_RANK`` with NCCL (one GPU per local rank, as torchrun assumes),
    else the CPU. ``timeout_s`` bounds the rendezvous and, with gloo, every collective.
    """
    import torch
    import torch.distributed as dist

    for name in _REQUIRED:
        if name not in os.environ:
            raise InputError(name, None, "set by `flexcomm launch` or torchrun")
    rank = _env_int("RANK")
    world_size = _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", rank)
    if world_size < 1 or not 0 <= rank < world_size:
        raise InputError("RANK", rank, f"0 <= RANK < WORLD_SIZE ({world_size})")
    chosen = choose_backend(backend)
    timeout = timeout_from_env() if timeout_s is None else float(timeout_s)
    if not timeout > 0:
        raise InputError("timeout", timeout_s, "a positive number of seconds")
    if chosen == "nccl":
        gpus = torch.cuda.device_count()
        if not 0 <= local_rank < gpus:
            raise InputError("LOCAL_RANK", local_rank, f"0..{gpus - 1}: nccl needs one visible GPU per local rank")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(
            backend=chosen, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout)
        )
    return DistInfo(rank, world_size, local_rank, chosen, device, timeout)


def shutdown() -> None:
    """Leave the process group if joined; errors on the way out (a dead peer) are not news.

    Garbage first: a DDP model dropped by the caller may still hold futures whose tensors Python owns, and
    freeing those after the group is gone (at interpreter exit, from gloo's threads) aborts the process
    (pytorch/pytorch#179291)."""
    import gc

    import torch.distributed as dist

    gc.collect()
    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


class Watchdog:
    """Ends this process when a guarded step overruns its deadline, or when the launcher is gone.

    A collective blocked on a dead or stuck peer holds the main thread in C++, where no Python
    exception can reach it; a daemon thread checking a deadline can still end the process
    (``os._exit``) with a message naming the step, so the launcher sees a failure, not a hang.
    """

    def __init__(self, timeout_s: float, label: str = "", exit_code: int = EXIT_WATCHDOG,
                 poll_s: float = 0.25) -> None:
        if not timeout_s > 0:
            raise InputError("timeout", timeout_s, "a positive number of seconds")
        self.timeout_s = float(timeout_s)
        self.label = label
        self.exit_code = exit_code
        self.poll_s = poll_s
        self._parent = os.getppid()
        self._lock = threading.Lock()
        self._step: tuple[str, float, float] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flexcomm-watchdog", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def guard(self, what: str, timeout_s: float | None = None) -> Iterator[None]:
        """Arm a deadline of ``timeout_s`` (default: the watchdog's) around one step."""
        limit = self.timeout_s if timeout_s is None else float(timeout_s)
        with self._lock:
            self._step = (what, time.monotonic() + limit, limit)
        try:
            yield
        finally:
            with self._lock:
                self._step = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)

    def _expire(self, message: str) -> None:
        prefix = f"{self.label}: " if self.label else ""
        try:
            sys.stderr.write(f"{prefix}{message}\n")
            sys.stderr.flush()
        finally:
            os._exit(self.exit_code)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self._parent != 1 and os.getppid() != self._parent:
                self._expire("the launcher is gone; stopping this rank")
            with self._lock:
                step = self._step
            if step is not None and time.monotonic() > step[1]:
                self._expire(f"{step[0]} did not finish within {step[2]:g}s "
                             "(a peer died or hangs); stopping this rank")
