"""Start N rank processes with torchrun's environment, and never leave one hanging.

``launch(["-m", "pkg.module"], nproc=2)`` starts every rank with ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set, exactly the variables
``torchrun`` sets, so the same worker also runs under ``torchrun --nproc-per-node N --nnodes M ...``
on several machines. Why a launcher of our own rather than ``torchrun``: it is small enough to
reason about failures (the first rank to fail decides the exit code, the others are stopped at
once), it is bounded by a wall-clock timeout, and it can prefix each rank's command (``ip netns
exec NS``) and give each rank its own environment, which the shaped-network testbed needs.

Failure policy, and why:

* The **first non-zero exit** is the run's exit code (a rank killed by signal ``S`` counts as
  ``128 + S``, as in a shell), because the first failure is the cause and the rest are fallout. When
  several ranks end within one poll, one killed by a signal is taken for the cause: on one host a killed
  rank's peers see its sockets close and exit by themselves within milliseconds.
* The other ranks are then given ``grace_s`` to notice by themselves (their collective fails or
  times out), then SIGTERM, then SIGKILL after ``kill_after_s``: a peer blocked in a collective
  may never return on its own.
* Every rank runs in its own session (process group), so its children are killed with it, and
  gets ``PR_SET_PDEATHSIG`` = SIGKILL, so ranks die with the launcher even if it is SIGKILLed.
* A run past ``timeout_s`` is stopped the same way and returns 124 (like ``timeout(1)``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_LOCAL_PROCESSES
from flexcomm.costmodel.processes import die_with_parent

#: Exit code of a run stopped by the launcher's timeout (as ``timeout(1)``).
EXIT_TIMEOUT = 124
BACKENDS = ("gloo", "nccl")
#: How often the launcher looks at its ranks: a lost rank is noticed within this, its peers stopped after the grace.
POLL_S = 0.02


@dataclass
class LaunchResult:
    """Outcome of one launch: the run's exit code and what happened to every rank."""

    returncode: int
    returncodes: list[int | None]
    failed_rank: int | None = None
    timed_out: bool = False
    elapsed_s: float = 0.0
    log_files: list[Path] = field(default_factory=list)
    testbed: str | None = None  # the testbed id, when the ranks ran inside one


def exit_status(code: int | None) -> int:
    """A Popen return code as a shell would report it: ``-9`` (killed by SIGKILL) becomes 137."""
    if code is None:
        return 0
    return 128 - code if code < 0 else code


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now on ``host`` (the kernel's choice; a tiny race is accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def resolve_command(argv: Sequence[str]) -> list[str]:
    """The worker command line: ``-m mod``, ``script.py`` and a bare ``python`` run on this interpreter.

    A bare ``python`` would otherwise be whatever ``PATH`` finds, which is often not the
    environment flexcomm (and torch) is installed in.
    """
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        raise InputError("command", "(missing)", "a command after --, e.g. -- python -m my.module ARGS")
    if args[0] == "-m":
        if len(args) < 2:
            raise InputError("command", "-m", "a module name after -m")
        return [sys.executable, *args]
    if args[0] in ("python", "python3"):
        return [sys.executable, *args[1:]]
    if args[0].endswith(".py"):
        return [sys.executable, *args]
    return args


def rank_environment(
    rank: int,
    nproc: int,
    master_addr: str,
    master_port: int,
    backend: str | None = None,
    dist_timeout_s: float | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """torchrun's variables for one rank on a single node (plus flexcomm's backend and timeout)."""
    env = dict(os.environ if base is None else base)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        GROUP_RANK="0",
        ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=str(nproc),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        PYTHONUNBUFFERED="1",
    )
    # torchrun sets one OpenMP thread per rank unless told otherwise: N ranks on few cores would
    # otherwise oversubscribe them and turn timings into scheduler noise.
    env.setdefault("OMP_NUM_THREADS", "1")
    if backend is not None:
        env["FLEXCOMM_BACKEND"] = backend
    if dist_timeout_s is not None:
        env["FLEXCOMM_DIST_TIMEOUT_S"] = repr(float(dist_timeout_s))
    return env


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop_processes(procs: Sequence[subprocess.Popen], kill_after_s: float = 5.0) -> None:
    """SIGTERM every still-running process group, then SIGKILL whatever is left after ``kill_after_s``."""
    alive = [p for p in procs if p.poll() is None]
    for proc in alive:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + kill_after_s
    while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
        time.sleep(0.02)
    for proc in alive:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)
    for proc in alive:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
    # The rank itself is gone; SIGKILL any child it left behind in its process group too.
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)


def _log(message: str) -> None:
    print(f"flexcomm launch: {message}", file=sys.stderr, flush=True)


def launch(
    command: Sequence[str],
    nproc: int,
    *,
    backend: str | None = None,
    timeout_s: float | None = None,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    env: Mapping[str, str] | None = None,
    rank_prefix: Callable[[int], Sequence[str]] | None = None,
    rank_env: Callable[[int], Mapping[str, str]] | None = None,
    dist_timeout_s: float | None = None,
    log_dir: str | Path | None = None,
    grace_s: float = 0.0,
    kill_after_s: float = 5.0,
    quiet: bool = False,
) -> LaunchResult:
    """Run ``command`` as ``nproc`` ranks; return when all succeed, one fails, or time runs out.

    ``rank_prefix(r)`` is prepended to rank r's command (e.g. ``["ip", "netns", "exec", ns]``) and
    ``rank_env(r)`` added to its environment. ``log_dir`` sends rank r's stdout and stderr to
    ``rank{r}.log`` there instead of the launcher's. ``env`` replaces ``os.environ`` as the base.
    """
    _check_launch(nproc, backend, timeout_s)
    argv = resolve_command(command)
    port = master_port if master_port is not None else free_port(master_addr if master_addr else "127.0.0.1")
    logs: list[Path] = []
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        logs = [Path(log_dir) / f"rank{r}.log" for r in range(nproc)]

    procs: list[subprocess.Popen] = []
    handles: list[BinaryIO] = []
    start = time.monotonic()
    result = LaunchResult(returncode=0, returncodes=[None] * nproc, log_files=logs)
    try:
        for r in range(nproc):
            child_env = rank_environment(r, nproc, master_addr, port, backend, dist_timeout_s, env)
            if rank_env is not None:
                child_env.update(rank_env(r))
            prefix = list(rank_prefix(r)) if rank_prefix is not None else []
            out = None
            if logs:
                out = open(logs[r], "wb")  # closed in finally
                handles.append(out)
            procs.append(_start_rank([*prefix, *argv], child_env, out))
        _watch(procs, result, None if timeout_s is None else start + timeout_s, timeout_s, grace_s, quiet)
    finally:
        stop_processes(procs, kill_after_s)
        for handle in handles:
            handle.close()
        result.returncodes = [p.poll() for p in procs] + [None] * (nproc - len(procs))
        result.elapsed_s = time.monotonic() - start
    return result


def _check_launch(nproc: int, backend: str | None, timeout_s: float | None) -> None:
    if not isinstance(nproc, int) or nproc < 1:
        raise InputError("nproc", nproc, "an integer >= 1")
    MAX_LOCAL_PROCESSES.check("nproc", nproc)  # every rank is a Python process of ~200 MB on this machine
    if backend is not None and backend not in BACKENDS:
        raise InputError("backend", backend, "one of " + ", ".join(BACKENDS))
    if timeout_s is not None and not timeout_s > 0:
        raise InputError("timeout", timeout_s, "seconds > 0")


def _start_rank(argv: list[str], env: dict[str, str], out: BinaryIO | None) -> subprocess.Popen:
    """One rank in its own session (its children die with it), killed if the launcher dies; a command that cannot
    be executed is an input error naming it."""
    try:
        return subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            start_new_session=True,
            preexec_fn=functools.partial(die_with_parent, os.getpid()),
        )
    except OSError as exc:
        raise InputError("command", " ".join(argv), f"an executable command ({exc})") from exc


def _watch(procs: list[subprocess.Popen], result: LaunchResult, deadline: float | None, timeout_s: float | None,
           grace_s: float, quiet: bool) -> None:
    """Poll the ranks until all have ended, ``grace_s`` has passed since the first failure (which decides the exit
    code), or the deadline; ``result`` records what was seen. The caller stops whatever still runs."""
    failed_at: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        result.returncodes = list(codes)
        if result.failed_rank is None:
            rank = first_failure(codes)
            if rank is not None:
                result.failed_rank = rank
                result.returncode = exit_status(codes[rank])
                failed_at = time.monotonic()
                if not quiet:
                    _log(f"rank {rank} exited with status {result.returncode}{_signal_name(codes[rank])}; "
                         f"stopping the other ranks")
        if all(c is not None for c in codes):
            break
        now = time.monotonic()
        if failed_at is not None and now - failed_at >= grace_s:
            break
        if deadline is not None and now >= deadline:
            result.timed_out = True
            if result.failed_rank is None:
                result.returncode = EXIT_TIMEOUT
            running = [r for r, c in enumerate(codes) if c is None]
            if not quiet:
                _log(f"timed out after {timeout_s:g}s; stopping ranks {running}")
            break
        time.sleep(POLL_S)


def first_failure(codes: Sequence[int | None]) -> int | None:
    """The rank whose failure ended the run, among the return codes one poll saw (None: still running).

    Several may have ended in the same poll: a rank killed by a signal is the cause (its peers' collectives
    fail because of it and they exit by themselves), else the lowest failed rank."""
    failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
    return min(failed, key=lambda r: (codes[r] >= 0, r)) if failed else None


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f" (killed by {signal.Signals(-code).name})"
    return ""


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit(143)`` so ``finally`` blocks (stop ranks, remove a testbed) run.

    Python's default SIGTERM action ends the process without unwinding; a launcher or a testbed
    owner killed by a job scheduler would then leak ranks or network namespaces.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
