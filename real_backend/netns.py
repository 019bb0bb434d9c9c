"""What the testbed and its delay line share: interface names, the state files, and running ``ip``/``tc``.

Why a module of its own: :mod:`real_backend.testbed` starts the delay line and :mod:`real_backend.delayline`
wires itself into the testbed's namespaces; with these pieces here neither imports the other's internals.
"""

from __future__ import annotations

import os
import subprocess
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
