"""The client side of a testbed's trace supervisor: start it, stop it, ask it to (re)start a run, read its log.

Why apart from :mod:`real_backend.trace_supervisor`: the testbed starts and stops supervisors, while the
supervisor process itself loads the testbed; keeping the client here keeps that a one-way dependency.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend.netns import TestbedError, state_path, stop_process
from flexcomm.real_backend.worker_config import to_argument

POLL_S = 0.01
ACK_TIMEOUT_S = 15.0


@dataclass(frozen=True, kw_only=True)
class SupervisorConfig:
    """A trace supervisor's options, as one JSON argument (:mod:`real_backend.worker_config`): built here by
    :func:`start_supervisor`, read by ``python -m flexcomm.real_backend.trace_supervisor '<JSON>'``."""

    testbed_id: str  #: the testbed whose network the trace drives
    trace_csv: str  #: the trace, written beside the testbed's state
    name: str = "trace"  #: the trace's name in its messages
    repeat: bool = False  #: after the trace, wait for the next run request instead of stopping
    owner_pid: int | None = None  #: stop when this process is gone

    def __post_init__(self) -> None:
        if not isinstance(self.testbed_id, str) or not self.testbed_id:
            raise InputError("id", self.testbed_id, "a testbed id")


def trace_file(testbed_id: str, kind: str) -> Path:
    """``testbed-ID.trace.KIND`` beside the state file: csv (the trace), start, ack, jsonl (the log)."""
    return state_path(testbed_id).with_suffix(f".trace.{kind}")


def request_start(testbed_id: str, token: str, timeout_s: float = ACK_TIMEOUT_S) -> float:
    """Ask the testbed's supervisor to (re)start its trace now; returns the run's time zero (epoch seconds)."""
    write_text_atomic(trace_file(testbed_id, "start"), json.dumps({"run": token}) + "\n")
    ack = trace_file(testbed_id, "ack")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            answer = json.loads(ack.read_text(encoding="utf-8"))
            if answer.get("run") == token:
                if answer.get("error"):
                    raise TestbedError(f"trace supervisor: {answer['error']}")
                return float(answer["start_epoch"])
        time.sleep(POLL_S)
    raise TestbedError(f"the trace supervisor of testbed {testbed_id} did not start run {token!r} within "
                       f"{timeout_s:g} s (is it running? see `flexcomm testbed status`)")


def start_supervisor(testbed, trace, *, repeat: bool = False, owner_pid: int | None = None,
                     start_now: bool = True) -> int:
    """Write the trace beside the testbed's state, start its supervisor and return the pid.

    ``start_now`` requests the first run at once (``testbed up/shape --trace``); ``repeat`` keeps the
    supervisor waiting for more runs (:func:`request_start`) until the testbed goes.
    """
    csv_path = trace_file(testbed.id, "csv")
    write_text_atomic(csv_path, trace.csv_text)
    for kind in ("start", "ack"):
        trace_file(testbed.id, kind).unlink(missing_ok=True)
    log = trace_file(testbed.id, "log")
    config = SupervisorConfig(testbed_id=testbed.id, trace_csv=str(csv_path), name=trace.name, repeat=repeat,
                              owner_pid=owner_pid)
    cmd = [sys.executable, "-m", "flexcomm.real_backend.trace_supervisor", to_argument(config)]
    with open(log, "ab") as stream:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stream, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    _STARTED[proc.pid] = proc
    if start_now:
        try:
            request_start(testbed.id, "up")
        except TestbedError:
            stop_supervisor(proc.pid)
            detail = log.read_text(errors="replace").strip().splitlines()
            raise TestbedError("the trace supervisor did not start" + (f": {detail[-1]}" if detail else "")) from None
    return proc.pid


#: Supervisors started by this process, reaped when stopped.
_STARTED: dict[int, subprocess.Popen] = {}


def stop_supervisor(pid: int) -> None:
    """Stop supervisor ``pid`` (SIGTERM, SIGKILL after 2 s) and reap it if this process started it."""
    stop_process(pid, _STARTED, grace_s=2.0)


def read_log(testbed_id: str) -> list[dict]:
    """The supervisor's change log (one dict per applied change)."""
    path = trace_file(testbed_id, "jsonl")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
