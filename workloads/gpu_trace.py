"""The GPU side of a torch.profiler trace: what ran on the device's streams, step by step.

Why: on a GPU the step is the GPU's. A CUDA (or HIP) trace records every kernel, copy and set the device ran
(``kernel``, ``gpu_memcpy``, ``gpu_memset``; ``Kernel``/``Memcpy``/``Memset`` in the Kineto format of 2021) with
the ``correlation`` id of the runtime call that launched it (the ``ac2g`` flow). The NCCL/RCCL kernels among
them are the collectives as the GPU ran them; each is tied to the CPU-side op around its launch
(``record_param_comms``, the process group's ``nccl:*`` span, the ``c10d::`` op), which names the collective,
its size and its process group. What is read here is measurement only; :mod:`flexcomm.sim.gpu_replay` prices
it elsewhere.

The breakdown of a step follows HolisticTraceAnalysis's temporal breakdown: the step's GPU span (first
activity it launched to the last one's end), compute busy (the union of compute kernels, copies and sets), NCCL
busy, NCCL exposed (NCCL time no compute activity overlaps) and idle.
"""

from __future__ import annotations

import bisect
import math
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.workloads.profiler_trace import (
    _BACKWARD,
    _LAUNCH,
    _STEP,
    SIZE_HINT,
    _count,
    _dims_numel,
    _element_bytes,
    _Event,
    _events,
    _first_value,
    _group,
    _steps,
    check_execution_trace,
    collective_kind,
    collective_size,
    distributed_info,
    enclosing,
    is_collective_record,
    is_group_span,
    issuer_size,
    read_execution_trace,
)

#: Trace categories of GPU activity -> what it is (the 2021 format capitalises them).
GPU_CATEGORIES = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
                  "gpu_memset": "memset", "Memset": "memset"}
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "hip_runtime", "hip_driver"})
#: Host calls that wait for the GPU: the host's later launches move with the GPU's work before them.
_SYNC = re.compile(r"(Device|Stream|Event)Synchronize$|^(cuda|hip)Memcpy$")
#: ``cudaStreamWaitEvent``: a stream told to wait for another's work (``work.wait()``, a collective's output used).
_STREAM_WAIT = re.compile(r"StreamWaitEvent$")
#: Tensor-core work: GEMMs and convolutions (cuBLAS/cuBLASLt/CUTLASS, cuDNN, hipBLASLt/rocBLAS ``Cijk_``, nvjet).
_MATMUL_KERNEL = re.compile(r"gemm|cutlass|cublas|xmma|wgmma|hmma|Cijk_|nvjet|scudnn|implicit_convolve|conv2d|"
                            r"dgrad|wgrad|fprop|_nn_|_nt_|_tn_", re.IGNORECASE)
_NCCL_KERNEL = re.compile(r"^(void )?nccl", re.IGNORECASE)
#: NCCL's kernel names -> flexcomm's collective (the kind a kernel runs when no CPU op names it).
_KERNEL_COLLECTIVE = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce-scatter",
                      "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv"}
_MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
#: An autograd node as older profilers name it (``CudnnConvolutionBackward``, ``AddBackward0``), where there is
#: no ``autograd::engine::evaluate_function`` around it.
_BACKWARD_NODE = re.compile(r"Backward\d*$")
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")


@dataclass(frozen=True)
class GpuCall:
    """One collective as the GPU ran it: what it moved (None: nothing records its size) and why it is read so."""

    kind: str
    numel: int | None
    element_bytes: int
    group_size: int
    #: forward, backward or other (before the backward: forward; after it: the optimizer's part)
    phase: str
    #: where kind and size come from, or why the call cannot be re-priced
    source: str

    @property
    def nbytes(self) -> int | None:
        return None if self.numel is None else self.numel * self.element_bytes


@dataclass(frozen=True)
class GpuActivity:
    """One kernel, copy or set on a GPU stream (times in microseconds on the trace's clock)."""

    kind: str  # compute | nccl | memcpy | memset
    stream: int
    start_us: float
    end_us: float
    #: the CPU time of the runtime call that launched it
    launch_us: float
    matmul: bool = False
    #: index of its :class:`GpuCall` in the step (NCCL kernels), -1 otherwise
    call: int = -1
    #: (m, n, k, count) of the launching matmul op where its ``Input Dims`` give one
    gemm: tuple[int, int, int, int] | None = None
    name: str = ""

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class GpuBreakdown:
    """A step's GPU time split as HolisticTraceAnalysis splits it (seconds)."""

    span_s: float
    compute_s: float
    nccl_s: float
    exposed_nccl_s: float
    idle_s: float


@dataclass(frozen=True)
class GpuStep:
    """One ``ProfilerStep#N`` as its GPU ran it: every activity it launched, its collectives, its host waits."""

    number: int
    cpu_start_us: float
    cpu_end_us: float
    activities: tuple[GpuActivity, ...]
    calls: tuple[GpuCall, ...]
    #: CPU times of stream waits outside collective ops (``work.wait()``: compute waits for a collective)
    waits_us: tuple[float, ...]
    #: CPU (start, end) of host calls that wait for the GPU
    syncs_us: tuple[tuple[float, float], ...]
    #: CPU window of the backward ops (NaN, NaN: none)
    backward_us: tuple[float, float] = (math.nan, math.nan)

    def breakdown(self) -> GpuBreakdown:
        return breakdown([(a.kind, a.start_us, a.end_us) for a in self.activities])


@dataclass(frozen=True)
class GpuTrace:
    """One rank's GPU trace: its steps, its process group and its device as the trace states them."""

    path: str
    rank: int
    world_size: int
    library: str  # nccl | rccl
    device: str
    pid: Any
    steps: tuple[GpuStep, ...]
    #: NCCL kernels no CPU collective op is around (kept at their traced time), and activities without a launch
    unlinked_kernels: int = 0
    unlaunched: int = 0
    device_sms: int | None = None
    device_memory_bytes: int | None = None
    #: bytes of each parameter the optimizer updates, in the model's order (() where the trace cannot say)
    parameter_bytes: tuple[int, ...] = ()
    #: GPU activities with no correlation id (left out), and steps that launched no GPU work (left out)
    dropped: int = 0
    idle_steps: tuple[int, ...] = ()


def _union(intervals: np.ndarray) -> list[tuple[float, float]]:
    """Merged [start, end) intervals of an (n, 2) array."""
    if len(intervals) == 0:
        return []
    ordered = intervals[np.argsort(intervals[:, 0])]
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _length(intervals: list[tuple[float, float]]) -> float:
    return float(sum(b - a for a, b in intervals))


def _overlap(first: list[tuple[float, float]], second: list[tuple[float, float]]) -> float:
    """Length of the intersection of two merged interval lists."""
    total, j = 0.0, 0
    for a, b in first:
        while j < len(second) and second[j][1] <= a:
            j += 1
        k = j
        while k < len(second) and second[k][0] < b:
            total += max(0.0, min(b, second[k][1]) - max(a, second[k][0]))
            k += 1
    return total


def breakdown(activities: list[tuple[str, float, float]]) -> GpuBreakdown:
    """(kind, start us, end us) -> span, compute busy, NCCL busy, NCCL exposed and idle, in seconds."""
    if not activities:
        return GpuBreakdown(0.0, 0.0, 0.0, 0.0, 0.0)
    nccl = _union(np.array([(s, e) for k, s, e in activities if k == "nccl"], dtype=float).reshape(-1, 2))
    compute = _union(np.array([(s, e) for k, s, e in activities if k != "nccl"], dtype=float).reshape(-1, 2))
    span = max(e for _, _, e in activities) - min(s for _, s, _ in activities)
    nccl_s, compute_s = _length(nccl), _length(compute)
    exposed = nccl_s - _overlap(nccl, compute)
    busy = compute_s + exposed
    return GpuBreakdown(span / 1e6, compute_s / 1e6, nccl_s / 1e6, exposed / 1e6, max(0.0, span - busy) / 1e6)


def _device(path: Path) -> tuple[str, int | None, int | None]:
    """(name, SMs or CUs, memory bytes) of the trace's first device (``deviceProperties``)."""
    props = _first_value(path, "deviceProperties", "from-trace", "a torch.profiler trace")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        first = props[0]
        sms, memory = first.get("numSms"), first.get("totalGlobalMem")
        return (str(first.get("name", "")).strip(), int(sms) if _count(sms) else None,
                int(memory) if _count(memory) else None)
    return "", None, None


def _by_start(events: list[_Event]) -> tuple[list[_Event], list[float]]:
    """``events`` sorted by start, and their starts (what :func:`enclosing` searches)."""
    ordered = sorted(events, key=lambda e: e.ts)
    return ordered, [e.ts for e in ordered]


class _CpuOps:
    """The CPU ops a GPU activity is tied to: collective ops around a launch, matmul ops by external id."""

    def __init__(self, events: list[_Event]) -> None:
        self.records = _by_start([e for e in events if is_collective_record(e)])
        self.spans = _by_start([e for e in events if is_group_span(e)])
        self.c10d = _by_start([e for e in events if (m := _LAUNCH.match(e.name)) and collective_kind(m.group(1))])
        self.matmul = {_external_id(e): e for e in events if e.name in _MATMUL_OPS and _external_id(e) is not None}

    def around(self, launch: _Event) -> tuple[_Event | None, _Event | None, _Event | None]:
        """(record_param_comms, span, c10d op) around a launch on its thread."""
        return (enclosing(launch, *self.records), enclosing(launch, *self.spans), enclosing(launch, *self.c10d))

    def in_collective(self, event: _Event) -> bool:
        return any(x is not None for x in self.around(event))


def _external_id(event: _Event) -> int | None:
    value = event.args.get("External id", event.args.get("external id"))
    return int(value) if _count(value) else None


def _gemm_shape(op: _Event | None) -> tuple[int, int, int, int] | None:
    """(m, n, k, count) of aten::mm/addmm/bmm/baddbmm from ``Input Dims``, None where they do not say."""
    if op is None:
        return None
    dims = op.args.get("Input Dims")
    if not isinstance(dims, list):
        return None
    tensors = [d for d in dims if isinstance(d, list) and d and all(_count(x) for x in d)]
    mats = [d for d in tensors if len(d) in (2, 3)]
    if len(mats) < 2:
        return None
    a, b = mats[-2], mats[-1]
    count = a[0] if len(a) == 3 else 1
    a2, b2 = a[-2:], b[-2:]
    if a2[1] != b2[0]:
        return None
    return int(a2[0]), int(b2[1]), int(a2[1]), int(count)


def _kernel_collective(name: str) -> str:
    text = name.lower().replace("_", "")
    for key in ("allreduce", "allgather", "reducescatter", "broadcast", "sendrecv", "reduce"):
        if key in text:
            return _KERNEL_COLLECTIVE[key]
    return "unknown"


def _group_sizes(info: Any) -> dict[str, int]:
    """``distributedInfo.pg_config``: process group name -> size."""
    out: dict[str, int] = {}
    if isinstance(info, dict) and isinstance(info.get("pg_config"), list):
        for group in info["pg_config"]:
            if isinstance(group, dict) and _count(group.get("pg_size")):
                out[str(group.get("pg_name"))] = int(group["pg_size"])
    return out


def _library(device: str, events: list[_Event]) -> str:
    """RCCL on AMD devices (HIP runtime calls, an AMD or Instinct device name), NCCL otherwise."""
    amd = any(k in device.lower() for k in ("amd", "instinct", "mi300", "mi325", "mi250"))
    return "rccl" if amd or any(e.name.startswith("hip") for e in events[:5000] if e.cat in RUNTIME_CATEGORIES) \
        else "nccl"


def read_gpu_trace(path: str | Path, execution_trace: str | Path | None = None) -> GpuTrace | None:
    """One rank's GPU timeline per step; None for a trace with no GPU activity (a host-only trace: gloo, CPU)."""
    path = Path(path)
    sizes = read_execution_trace(execution_trace) if execution_trace is not None else {}
    events = _events(path)
    step_events = _steps(events, path)
    if not any(e.cat in GPU_CATEGORIES for e in events):
        return None
    if execution_trace is not None:
        check_execution_trace(path, events, execution_trace, sizes)
    info = distributed_info(path)
    _, world, rank = _group(path, info)
    pg_sizes = _group_sizes(info)
    device, sms, memory = _device(path)
    ops = _CpuOps(events)
    per_step, unlaunched, dropped = _launched_per_step(events, step_events)
    reader = _StepReader(path, events, ops, world, pg_sizes, sizes)
    steps = [reader.step(k, step_event, per_step.get(k, [])) for k, step_event in enumerate(step_events)]
    idle = tuple(s.number for s in steps if not s.activities)
    steps = [s for s in steps if s.activities]
    if not steps:
        raise InputError(str(path), "no GPU work launched in any ProfilerStep",
                         "a trace of the GPU's activity: profile with activities=[CPU, CUDA]")
    if reader.named_any and not reader.sized_any:
        raise InputError(str(path), "collectives without a size anywhere in the trace", SIZE_HINT)
    library = _library(device, events)
    parameters = optimizer_parameters(events, path)
    return GpuTrace(str(path), rank, world or max((c.group_size for s in steps for c in s.calls), default=1),
                    library, device, step_events[0].pid, tuple(steps), reader.unlinked, unlaunched, device_sms=sms,
                    device_memory_bytes=memory, parameter_bytes=parameters, dropped=dropped, idle_steps=idle)


def _launched_per_step(events: list[_Event],
                       step_events: list[_Event]) -> tuple[dict[int, list[tuple[_Event, _Event]]], int, int]:
    """Each GPU activity paired with the runtime call that launched it (its ``correlation`` id), by the step whose
    CPU span holds the launch; and how many had their launch inferred and how many had no correlation at all."""
    runtime = {e.args.get("correlation"): e for e in events if e.cat in RUNTIME_CATEGORIES
               and e.args.get("correlation") is not None}
    starts = [s.ts for s in step_events]
    per_step: dict[int, list[tuple[_Event, _Event]]] = defaultdict(list)
    unlaunched = 0
    numbered = sorted(c for c in runtime if _count(c))
    dropped = 0
    for event in events:
        if event.cat not in GPU_CATEGORIES:
            continue
        correlation = event.args.get("correlation")
        launch = runtime.get(correlation)
        if launch is None and _count(correlation) and numbered and correlation > numbered[0]:
            # the trace lost its launch call (HIP's dispatches, trimmed traces): correlation ids count launches in
            # order, so it was launched right after the call with the nearest lower id
            launch = runtime[numbered[bisect.bisect_left(numbered, correlation) - 1]]
            unlaunched += 1
        k = bisect.bisect_right(starts, launch.ts) - 1 if launch is not None else -1
        if launch is None or k < 0 or launch.ts >= step_events[k].end:
            dropped += launch is None and not _count(correlation)
            continue
        per_step[k].append((event, launch))
    return per_step, unlaunched, dropped


class _StepReader:
    """Reads one step at a time into a :class:`GpuStep`, and tallies over the whole trace what is only checked
    once every step is read: NCCL calls tied to no CPU op, and whether any call was named and any sized."""

    def __init__(self, path: Path, events: list[_Event], ops: _CpuOps, world: int, pg_sizes: dict[str, int],
                 sizes: dict[int, tuple[int, int]]) -> None:
        self.path, self.ops, self.world, self.pg_sizes, self.sizes = path, ops, world, pg_sizes, sizes
        self.backward = sorted((e for e in events if e.name.startswith(_BACKWARD)), key=lambda e: e.ts) or sorted(
            (e for e in events if _BACKWARD_NODE.search(e.name) and e.cat in ("cpu_op", "Operator")),
            key=lambda e: e.ts)
        self.host = [e for e in events
                     if e.cat in RUNTIME_CATEGORIES and (_SYNC.search(e.name) or _STREAM_WAIT.search(e.name))]
        self.unlinked, self.sized_any, self.named_any = 0, False, False

    def step(self, k: int, step_event: _Event, launched: list[tuple[_Event, _Event]]) -> GpuStep:
        """Step ``k``: its activities and collectives, its backward window and its host waits and syncs."""
        mine = [e for e in self.backward if step_event.ts <= e.ts < step_event.end]
        window = (min(e.ts for e in mine), max(e.end for e in mine)) if mine else (math.nan, math.nan)
        activities, calls = self._activities(launched, window)
        inside = [e for e in self.host if step_event.ts <= e.ts < step_event.end]
        waits = tuple(e.ts for e in inside if _STREAM_WAIT.search(e.name) and not self.ops.in_collective(e))
        syncs = tuple((e.ts, e.end) for e in inside if _SYNC.search(e.name))
        return GpuStep(int(_STEP.match(step_event.name).group(1)), step_event.ts, step_event.end,
                       tuple(activities), tuple(calls), waits, syncs, window)

    def _activities(self, launched: list[tuple[_Event, _Event]],
                    window: tuple[float, float]) -> tuple[list[GpuActivity], list[GpuCall]]:
        """A step's activities in launch order; the NCCL kernels of one CPU-side collective op are one call."""
        ops = self.ops
        calls: list[GpuCall] = []
        call_of: dict[int, int] = {}
        activities = []
        for gpu, launch in sorted(launched, key=lambda pair: (pair[1].ts, pair[0].ts)):
            kind = GPU_CATEGORIES[gpu.cat]
            stream = gpu.args.get("stream", gpu.tid)
            stream = int(stream) if _count(stream) else zlib.crc32(str(stream).encode()) % 100_000
            device_id = gpu.args.get("device", gpu.pid)
            if _count(device_id):  # one process may drive several GPUs: stream 7 of each is its own
                stream += int(device_id) << 20
            if kind == "kernel" and _NCCL_KERNEL.search(gpu.name):
                record, span, c10d = ops.around(launch)
                anchor = record or span or c10d
                key = anchor.index if anchor is not None else -gpu.index - 1
                if key not in call_of:
                    call = _call_of(gpu, launch, record, span, c10d, self.world, self.pg_sizes, self.sizes, self.path,
                                    window)
                    self.named_any |= anchor is not None
                    self.sized_any |= call.numel is not None
                    self.unlinked += anchor is None
                    call_of[key] = len(calls)
                    calls.append(call)
                activities.append(GpuActivity("nccl", stream, gpu.ts, gpu.end, launch.ts, call=call_of[key],
                                              name=gpu.name[:80]))
                continue
            matmul = kind == "kernel" and bool(_MATMUL_KERNEL.search(gpu.name))
            gemm = _gemm_shape(ops.matmul.get(_external_id(gpu))) if matmul else None
            activities.append(GpuActivity("compute" if kind == "kernel" else kind, stream, gpu.ts, gpu.end, launch.ts,
                                          matmul, gemm=gemm, name=gpu.name[:80]))
        return activities, calls


def optimizer_parameters(events: list[_Event], path: Path) -> tuple[int, ...]:
    """The bytes of every parameter, in the model's order, from the first ``Optimizer.step#`` span: a foreach
    optimizer's ``aten::_foreach_*`` ops name them (their first argument, a tensor list, once per dtype and device
    group); a per-parameter loop runs each in-place op once or more per parameter, so the in-place op run the
    fewest times runs once per parameter, in order (SGD with momentum: ``mul_`` once, ``add_`` twice). () where
    shapes were not recorded."""
    spans = sorted((e for e in events if _OPTIMIZER_STEP.match(e.name)), key=lambda e: e.ts)
    if not spans:
        return ()
    span = spans[0]
    inside = sorted((e for e in events if e.tid == span.tid and span.ts <= e.ts < span.end
                     and e.name.startswith("aten::") and e is not span), key=lambda e: e.ts)
    foreach = [e for e in inside if e.name.startswith("aten::_foreach_")]
    if foreach:  # every group (one per dtype and device) once; Adam's first op adds 1 to scalar step counts
        seen: set[tuple[tuple[int, ...], ...]] = set()
        out: list[int] = []
        for op in foreach:
            dims, types = op.args.get("Input Dims"), op.args.get("Input type")
            shapes = dims[0] if isinstance(dims, list) and dims and isinstance(dims[0], list) else []
            shapes = [x for x in shapes if isinstance(x, list)]
            if not shapes or not any(shapes) or not all(all(_count(d) for d in x) for x in shapes):
                continue
            key = tuple(tuple(x) for x in shapes)
            if key in seen:
                continue
            seen.add(key)
            element = _element_bytes(types[0] if isinstance(types, list) and types else None) or 4
            out.extend(math.prod(x) * element for x in shapes if x)
        return tuple(out)
    counts: dict[str, int] = defaultdict(int)
    for e in inside:
        if e.name.endswith("_"):
            counts[e.name] += 1
    if not counts:
        return ()
    once = min(counts, key=lambda name: (counts[name], name))
    out = []
    for e in inside:
        if e.name != once:
            continue
        dims, types = e.args.get("Input Dims"), e.args.get("Input type")
        numel = _dims_numel(dims[:1]) if isinstance(dims, list) and dims else None
        if numel is None:
            return ()
        out.append(numel * (_element_bytes(types[0] if isinstance(types, list) and types else None) or 4))
    return tuple(out)


def _call_of(gpu: _Event, launch: _Event, record: _Event | None, span: _Event | None, c10d: _Event | None,
             world: int, pg_sizes: dict[str, int], sizes: dict[int, tuple[int, int]], path: Path,
             backward: tuple[float, float]) -> GpuCall:
    """The collective an NCCL kernel runs, from the CPU ops around its launch."""
    phase = "forward"
    if math.isfinite(backward[0]) and launch.ts >= backward[0]:
        phase = "backward" if launch.ts <= backward[1] else "other"
    if record is None and span is None and c10d is None:
        return GpuCall(_kernel_collective(gpu.name), None, 1, world, phase,
                       "no CPU collective op around its launch")
    group = world
    if record is not None and str(record.args.get("Process Group Name", "")) in pg_sizes:
        group = pg_sizes[str(record.args["Process Group Name"])]
    anchor = record if record is not None and (span is None or _count(record.args.get("In msg nelems"))) else span
    if anchor is None:  # only the c10d op: its Input Dims (or the execution trace) size it
        kind = collective_kind(_LAUNCH.match(c10d.name).group(1)) or _kernel_collective(gpu.name)
        numel, element = issuer_size(kind, c10d, None, sizes)
        source = "c10d op" if numel is not None else "no size: " + SIZE_HINT
        return GpuCall(kind, numel, element or 1, group, phase, source)
    kind, numel, element, size = collective_size(anchor, c10d, record if anchor is span else None, group, sizes,
                                                 path, required=False)
    if kind in ("send", "recv"):
        kind = "sendrecv"
    source = "record_param_comms" if anchor is record else "process group span"
    if numel is None:
        source = "no size: " + SIZE_HINT
    return GpuCall(kind, numel, element, size or group, phase, source)
