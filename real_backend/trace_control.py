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
from pathlib import Path

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.real_backend.netns import TestbedError, state_path, stop_process

POLL_S = 0.01
ACK_TIMEOUT_S = 15.0


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
    cmd = [sys.executable, "-m", "flexcomm.real_backend.trace_supervisor", "--id", testbed.id, "--trace",
           str(csv_path), "--name", trace.name]
    if repeat:
        cmd.append("--repeat")
    if owner_pid is not None:
        cmd += ["--owner-pid", str(owner_pid)]
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
