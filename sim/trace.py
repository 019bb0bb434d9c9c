"""A simulated training job as a Chrome trace (chrome://tracing, https://ui.perfetto.dev).

Trace Event Format (the "JSON Object Format" of Google's Trace Event Format document): one
process per rank (``pid`` = rank) with threads ``compute`` (forward, backward per bucket, optimizer),
``comm`` (waiting for the slowest rank, then the bucket's exchange) and ``compression`` (Top-k
selection; in the model it runs on the compute stream, drawn apart so it stays visible), and a
``job`` process (``pid`` = ranks) with iterations, checkpoints, restarts and instant events for
failures and their detection. Complete events (``ph: "X"``) carry ``ts``/``dur`` in microseconds,
rounded to nanoseconds, so the same simulation gives the same bytes. Files are written atomically.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flexcomm.costmodel.atomic import write_text_atomic

if TYPE_CHECKING:
    from flexcomm.sim.training import TrainingResult

COMPUTE, COMM, COMPRESSION = 0, 1, 2
THREADS = {COMPUTE: "compute", COMM: "comm", COMPRESSION: "compression"}
PHASES = {"X", "i", "I", "M", "B", "E", "C"}
METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


class _Events:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def span(self, name: str, pid: int, tid: int, start: float, end: float, args: dict[str, Any] | None = None,
             cat: str = "sim") -> None:
        if not end > start:
            return
        event: dict[str, Any] = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": _us(start),
                                 "dur": round((end - start) * 1e6, 3)}
        if args:
            event["args"] = args
        self.items.append(event)

    def instant(self, name: str, pid: int, tid: int, at: float, args: dict[str, Any] | None = None) -> None:
        event: dict[str, Any] = {"name": name, "cat": "fault", "ph": "i", "s": "g", "pid": pid, "tid": tid,
                                 "ts": _us(at)}
        if args:
            event["args"] = args
        self.items.append(event)

    def meta(self, kind: str, pid: int, tid: int, args: dict[str, Any]) -> None:
        self.items.append({"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args})


def _clean(info: dict[str, Any]) -> dict[str, Any]:
    """Args without NaN/None (NaN is not JSON) and with plain Python numbers."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, (np.integer, np.floating, np.bool_)):
            value = value.item()
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        out[key] = value
    return out


@dataclass(frozen=True)
class _StepShape:
    """What every rank's every attempt shares: the step's compute, its buckets and their compression."""

    forward: float
    backward: float
    buckets: list
    compress: np.ndarray
    compress_cum: np.ndarray
    bucket_compute: np.ndarray
    exchange: str
    optimizer_s: float

    @classmethod
    def of(cls, result: TrainingResult) -> _StepShape:
        fwd, bwd = result.layer_times
        forward = float(fwd.sum())
        buckets = result.bucket_list
        compress = result.compression_s
        return cls(forward, float(bwd.sum()), buckets, compress, np.cumsum(compress),
                   np.array([forward + float(bwd[b.ready_layer:].sum()) for b in buckets]),
                   "allreduce" if result.config["scheme"] == "dense" else result.config["scheme"], result.optimizer_s)


def chrome_trace(result: TrainingResult, ranks: Iterable[int] | None = None) -> dict[str, Any]:
    """The job's timeline as a Trace Event Format object; ``ranks`` limits which ranks get drawn."""
    ev = _Events()
    cfg = result.config
    n_ranks = int(cfg["ranks"])
    wanted = set(range(n_ranks)) if ranks is None else {int(r) for r in ranks}
    job_pid = n_ranks
    _name_tracks(ev, wanted, job_pid, int(result.config.get("devices_per_node", 0)) or None)
    shape = _StepShape.of(result)
    for att in result.attempts:
        iteration_args = {"step": att.step, "attempt": att.index, "epoch": att.epoch, "status": att.status,
                          "world_size": len(att.world)}
        ev.span(f"iteration {att.step}", job_pid, 0, att.t0, att.t_end, iteration_args, cat="iteration")
        dead = set() if att.dead is None else set(att.dead.tolist())
        for j, rank in enumerate(att.world.tolist()):
            if rank in wanted:
                _draw_rank(ev, att, j, rank, j in dead, shape)
    _draw_job_events(ev, result, job_pid)
    return {
        "traceEvents": ev.items,
        "displayTimeUnit": "ms",
        "otherData": _clean({"generator": "flexcomm sim.training", "cluster": cfg["cluster"],
                             "workload": cfg["workload"], "ranks": n_ranks, "scheme": shape.exchange,
                             "seed": cfg["seed"], "job_time_s": result.job_time_s}),
    }


def _name_tracks(ev: _Events, wanted: set[int], job_pid: int, devices_per_node: int | None) -> None:
    """One process per drawn rank (its node named), its threads, and the job's own process."""
    for r in sorted(wanted):
        label = f"rank {r}" + (f" (node {r // devices_per_node})" if devices_per_node else "")
        ev.meta("process_name", r, 0, {"name": label})
        ev.meta("process_sort_index", r, 0, {"sort_index": r})
        for tid, name in THREADS.items():
            ev.meta("thread_name", r, tid, {"name": name})
    ev.meta("process_name", job_pid, 0, {"name": "job"})
    ev.meta("process_sort_index", job_pid, 0, {"sort_index": -1})
    ev.meta("thread_name", job_pid, 0, {"name": "iterations"})
    ev.meta("thread_name", job_pid, 1, {"name": "checkpoints and restarts"})


def _draw_rank(ev: _Events, att: Any, j: int, rank: int, died: bool, shape: _StepShape) -> None:
    """One rank's attempt: forward, each bucket's backward and compression, then each bucket's wait and exchange,
    cut where the rank died."""
    s = float(att.speed[j])
    g = att.scale
    stop = att.t_end
    if died and math.isfinite(att.t_fail):
        stop = min(stop, att.t_fail)

    def span(name: str, tid: int, start: float, end: float, args: dict[str, Any] | None = None) -> None:
        ev.span(name, rank, tid, start, min(end, stop), args)

    t0 = att.t0
    buckets, compress, compress_cum = shape.buckets, shape.compress, shape.compress_cum
    span("forward", COMPUTE, t0, t0 + s * g * shape.forward, {"step": att.step})
    prev = t0 + s * g * shape.forward
    for b, bucket in enumerate(buckets):
        grads_ready = t0 + s * (g * shape.bucket_compute[b] + (compress_cum[b - 1] if b else 0.0))
        span(f"backward b{b}", COMPUTE, prev, grads_ready, {"step": att.step, "layers": len(bucket.layers)})
        done = grads_ready + s * float(compress[b])
        span(f"compress b{b}", COMPRESSION, grads_ready, done, {"numel": bucket.numel})
        prev = done
    span("backward (no gradients)", COMPUTE, prev,
         t0 + s * (g * (shape.forward + shape.backward) + float(compress_cum[-1])))
    if att.status != "failed" and shape.optimizer_s > 0:
        span("optimizer", COMPUTE, att.t_end - shape.optimizer_s, att.t_end)
    end_prev = t0
    exchange = shape.exchange
    for b, bucket in enumerate(buckets):
        entry = max(end_prev, t0 + s * (g * shape.bucket_compute[b] + float(compress_cum[b])))
        if b < len(att.starts):
            start, end = att.starts[b], att.ends[b]
            span(f"wait b{b}", COMM, entry, start, {"why": "slowest rank"})
            span(f"{exchange} b{b}", COMM, start, end,
                 {"bytes": bucket.nbytes, "numel": bucket.numel, "step": att.step})
            end_prev = end
        elif b == att.hung_bucket:
            if math.isfinite(att.hung_start):
                span(f"wait b{b}", COMM, entry, att.hung_start, {"why": "slowest rank"})
                span(f"{exchange} b{b} (hung)", COMM, att.hung_start, att.t_end, {"bytes": bucket.nbytes})
            else:
                span(f"wait b{b} (peer dead)", COMM, entry, att.t_end, {"why": "a participant failed"})
            break
        else:
            break


def _draw_job_events(ev: _Events, result: TrainingResult, job_pid: int) -> None:
    """Failures, detections, checkpoints, restarts and repair waits on the job's own track."""
    for row in result.events.to_dict("records"):
        kind = row["kind"]
        info = _clean({k: v for k, v in row.items() if k not in ("kind", "start_s", "end_s")})
        if kind == "failure":
            ev.instant(f"failure: {info.get('cause', '')}", job_pid, 1, row["start_s"], info)
        elif kind == "detected":
            ev.instant("timeout: failure detected", job_pid, 1, row["start_s"], info)
        elif kind in ("checkpoint", "relaunch", "repair-wait"):
            name = {"checkpoint": "checkpoint write", "relaunch": "restart (relaunch + checkpoint load)",
                    "repair-wait": "waiting for repair"}[kind]
            ev.span(name, job_pid, 1, row["start_s"], row["end_s"], info, cat="job")
    for row in result.faults.to_dict("records"):
        # a restart is drawn as its own events; a fault after the end or never drawn happened at no time
        if row["effect"] != "caused restart" and row["effect"] != "after job end" and math.isfinite(row["time_s"]):
            ev.instant(f"fault ({row['effect']}): {row['spec']}", job_pid, 1, row["time_s"], _clean(row))


def trace_json(trace: dict[str, Any]) -> str:
    """Compact, deterministic JSON (no NaN: Perfetto rejects it)."""
    return json.dumps(trace, separators=(",", ":"), allow_nan=False) + "\n"


def write_chrome_trace(result: TrainingResult, path: str | Path, ranks: Sequence[int] | None = None) -> Path:
    """Write :func:`chrome_trace` to ``path`` atomically; returns the path."""
    return write_text_atomic(path, trace_json(chrome_trace(result, ranks)))


def validate_chrome_trace(trace: Any) -> int:
    """Check the Trace Event Format fields the viewers rely on; returns the event count, raises ValueError."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("a trace object with a traceEvents list")
    for k, event in enumerate(trace["traceEvents"]):
        where = f"traceEvents[{k}]"
        if not isinstance(event, dict):
            raise ValueError(f"{where}: not an object")
        ph = event.get("ph")
        if ph not in PHASES:
            raise ValueError(f"{where}: ph {ph!r} not one of {sorted(PHASES)}")
        if not isinstance(event.get("name"), str):
            raise ValueError(f"{where}: name must be a string")
        for key in ("pid", "tid"):
            if not isinstance(event.get(key), int) or isinstance(event.get(key), bool):
                raise ValueError(f"{where}: {key} must be an integer")
        if "args" in event and not isinstance(event["args"], dict):
            raise ValueError(f"{where}: args must be an object")
        if ph == "M":
            if event["name"] not in METADATA or not isinstance(event.get("args"), dict):
                raise ValueError(f"{where}: metadata event needs a known name and args")
            continue
        ts = event.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
            raise ValueError(f"{where}: ts must be a finite number of microseconds >= 0")
        if ph == "X":
            dur = event.get("dur")
            if not isinstance(dur, (int, float)) or isinstance(dur, bool) or not math.isfinite(dur) or dur < 0:
                raise ValueError(f"{where}: dur must be a finite number of microseconds >= 0")
        if ph in ("i", "I") and event.get("s", "t") not in ("g", "p", "t"):
            raise ValueError(f"{where}: instant scope s must be g, p or t")
    return len(trace["traceEvents"])
