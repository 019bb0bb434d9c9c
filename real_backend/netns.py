"""What the testbed and its helper processes share: interface names, the state files, running ``ip``/``tc``,
and starting/stopping the small processes that live with a testbed (delay line, trace supervisor).

Why a module of its own: :mod:`real_backend.testbed` starts the delay line and :mod:`real_backend.delayline`
wires itself into the testbed's namespaces; with these pieces here neither imports the other's internals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

RANK_IF = "fxr{}"
BRIDGE_PORT_IF = "fxp{}"
BRIDGE_IF = "fxbr"


class TestbedError(RuntimeError):
    """A system command building or tearing down the testbed failed (not bad user input)."""


def state_dir() -> Path:
    """Where testbed state files live: ``FLEXCOMM_TESTBED_DIR``, else /run/flexcomm (root's tmpfs)."""
    return Path(os.environ.get("FLEXCOMM_TESTBED_DIR", "/run/flexcomm"))


def run_command(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        message = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[0]
        raise TestbedError(f"`{' '.join(argv)}` failed: {message}")
    return proc


def state_path(testbed_id: str) -> Path:
    return state_dir() / f"testbed-{testbed_id}.json"


def process_alive(pid: int) -> bool:
    """Whether ``pid`` exists (a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process(pid: int, started: dict[int, subprocess.Popen], grace_s: float = 0.0) -> None:
    """End ``pid``: SIGTERM and SIGKILL after ``grace_s`` (0: SIGKILL at once), and reap it if this process
    started it (``started``, the caller's own pid -> Popen table), so no zombie is left behind."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
    proc = started.pop(pid, None)
    if proc is not None:
        try:
            proc.wait(timeout=grace_s if grace_s > 0 else 5.0)
            return
        except subprocess.TimeoutExpired:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
        return
    deadline = time.monotonic() + grace_s
    while grace_s > 0 and process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if grace_s > 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
