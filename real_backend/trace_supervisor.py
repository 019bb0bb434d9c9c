"""The trace supervisor: applies a network trace to a running testbed at the trace's times.

Why a process of its own: a trace outlives the command that starts it (``testbed up --trace`` returns at
once) and must keep time while ranks train, so one small process per testbed owns the schedule. It

* applies each change with ``tc qdisc change ... tbf`` (one ``tc -batch`` per namespace touched, all
  started together: the rank's end of its veth shapes what it sends, the middle namespace's end what it
  receives) and the delay line's new delay (:func:`real_backend.delayline.set_delay`);
* logs every change as one JSON line (``testbed-ID.trace.jsonl``: the run, the change's trace time, when it
  was due and when its last command returned, so ``lag_s`` is how late the network followed the trace);
* starts a trace run on request: a run is (re)started by writing ``testbed-ID.trace.start`` (a token) and
  answered in ``testbed-ID.trace.ack`` with the epoch the first change was applied at, the run's time zero
  (:func:`real_backend.trace_control.request_start`; ``flexcomm validate --network-trace`` restarts
  the trace for every strategy);
* stops when the trace is done (unless ``repeat``: it then waits for the next request), when the
  testbed's state file is removed, when its owner process is gone, or on SIGTERM/SIGINT; ``Testbed.down``
  kills it.

Files live beside the testbed's state file, which the ranks can read too (``ip netns exec`` keeps /run).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.real_backend.delayline import set_delay
from flexcomm.real_backend.net_trace import parse_trace
from flexcomm.real_backend.netns import BRIDGE_PORT_IF, RANK_IF, TestbedError, process_alive, state_path
from flexcomm.real_backend.testbed import Testbed, tbf_arguments
from flexcomm.real_backend.trace_control import POLL_S, SupervisorConfig, trace_file
from flexcomm.real_backend.worker_config import config_from_argv


def tbf_command(device: str, rate_Bps: float, burst_rate_Bps: float = 0.0) -> str:
    """One ``tc -batch`` line changing ``device``'s root tbf to ``rate_Bps`` (bucket as the testbed sizes it)."""
    return f"qdisc change dev {device} root {' '.join(tbf_arguments(rate_Bps, burst_rate_Bps))}"


def change_batches(testbed, rates: Sequence[tuple[int, str, float]]) -> dict[str, list[str]]:
    """namespace -> tc batch lines for (rank, egress|ingress, bytes/s) changes."""
    batches: dict[str, list[str]] = {}
    burst_rate = float(getattr(testbed, "burst_rate_Bps", 0.0) or 0.0)
    for rank, direction, rate in rates:
        if direction == "egress":
            batches.setdefault(testbed.namespaces[rank], []).append(
                tbf_command(RANK_IF.format(rank), rate, burst_rate))
        else:
            batches.setdefault(testbed.bridge_namespace, []).append(
                tbf_command(BRIDGE_PORT_IF.format(rank), rate, burst_rate))
    return batches


def apply_change(testbed, change) -> None:
    """Every tc batch of ``change`` at once, then its delay; raises TestbedError if a command failed."""
    procs = []
    for namespace, lines in change_batches(testbed, change.rates).items():
        proc = subprocess.Popen(["tc", "-n", namespace, "-batch", "-"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        proc.stdin.write("\n".join(lines) + "\n")
        proc.stdin.close()
        procs.append((namespace, proc))
    if change.delay_s is not None:
        set_delay(testbed, change.delay_s)
    errors = []
    for namespace, proc in procs:
        proc.wait()
        if proc.returncode != 0:
            errors.append(f"{namespace}: {proc.stderr.read().strip().splitlines()[:1]}")
    if errors:
        raise TestbedError("tc failed applying a trace change: " + "; ".join(errors))


class Supervisor:
    """The schedule of one testbed's trace (see the module docstring)."""

    def __init__(self, testbed, trace, repeat: bool, owner_pid: int | None) -> None:
        self.testbed, self.trace, self.repeat, self.owner_pid = testbed, trace, repeat, owner_pid
        self.stopping = False
        self.log = trace_file(testbed.id, "jsonl")

    def should_stop(self) -> bool:
        if self.stopping or not state_path(self.testbed.id).exists():
            return True
        return self.owner_pid is not None and not process_alive(self.owner_pid)

    def _request(self) -> str | None:
        with contextlib.suppress(OSError, ValueError):
            return str(json.loads(trace_file(self.testbed.id, "start").read_text(encoding="utf-8"))["run"])
        return None

    def _write_log(self, entry: dict) -> None:
        with open(self.log, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(entry) + "\n")

    def run(self) -> int:
        handled: str | None = None
        while not self.should_stop():
            token = self._request()
            if token is None or token == handled:
                time.sleep(POLL_S)
                continue
            handled = token
            finished = self._run_once(token)
            if finished and not self.repeat:
                return 0
        return 0

    def _run_once(self, token: str) -> bool:
        """Apply the trace from now; False when a new request or a stop cut it short."""
        start = time.time()
        for index, change in enumerate(self.trace.changes):
            due = start + change.time_s
            while time.time() < due:
                if self.should_stop() or self._request() != token:
                    return False
                time.sleep(min(POLL_S, max(0.0, due - time.time())))
            began = time.time()
            try:
                apply_change(self.testbed, change)
            except (TestbedError, OSError) as error:
                self._write_log({"run": token, "index": index, "error": str(error)})
                write_text_atomic(trace_file(self.testbed.id, "ack"), json.dumps(
                    {"run": token, "error": str(error)}) + "\n")
                return True
            done = time.time()
            if index == 0:
                start = began  # time zero: the moment the first state was put in place
                write_text_atomic(trace_file(self.testbed.id, "ack"),
                                  json.dumps({"run": token, "start_epoch": start}) + "\n")
                due = start
            self._write_log({
                "run": token, "index": index, "time_s": change.time_s, "line": change.line,
                "due_epoch": due, "applied_epoch": done, "lag_s": done - due, "command_s": done - began,
                "rates_Bps": sorted({rate for _, _, rate in change.rates}), "delay_s": change.delay_s,
            })
        return True


def main(config: SupervisorConfig) -> int:
    """Supervise ``config.testbed_id``'s trace until it is done (or, with ``repeat``, until the testbed goes)."""
    testbed = Testbed.load(config.testbed_id)
    trace = parse_trace(Path(config.trace_csv).read_text(encoding="utf-8"), config.name, testbed.ranks)
    supervisor = Supervisor(testbed, trace, config.repeat, config.owner_pid)

    def stop(*_: object) -> None:
        supervisor.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main(config_from_argv(SupervisorConfig, "flexcomm trace supervisor")))
