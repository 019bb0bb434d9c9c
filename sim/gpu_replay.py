"""Replay a traced GPU timeline with new kernel times: the collectives re-priced on a cluster, compute moved to
another device.

Why a replay of the timeline and not a sum: what a step costs is what the GPU's streams wait for. A kernel
starts when its stream is free, when what it waits for is done and when the host has launched it:

* **stream order**: the kernel before it on its stream;
* **a collective waits for the compute it was issued after**: ProcessGroupNCCL makes its stream wait for the
  stream that was current at the call (the last compute activity launched before it);
* **compute waits for a collective it uses**: a ``cudaStreamWaitEvent`` outside any collective op
  (``work.wait()``) makes the next compute activity launched after it wait for the collectives launched before;
* **the host**: a kernel cannot start before its launch; host calls that wait for the GPU (synchronize, a
  blocking copy) return when the GPU work before them is done, and every later launch moves with them;
* what none of these explains (a dependency the trace does not record, a launch queue) is kept as measured:
  the gap between the explained start and the traced start stays.

With the traced times the replay gives back the trace exactly (a test checks it); with new times it moves every
activity as those rules say. The host's own work (the time between its launches) is kept as traced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexcomm.costmodel.collectives import predict
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.device_compute import DeviceCompute
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gemm_efficiency import GemmShape
from flexcomm.workloads.gpu_trace import GpuActivity, GpuBreakdown, GpuCall, GpuTrace, breakdown

#: Kineto's timestamps are whole microseconds in older traces: a kernel may appear to start 1 us before what it
#: waited for ended.
_CLOCK_US = 1.0


@dataclass(frozen=True)
class StepTimes:
    """One step as replayed: its activities' new (start, end) in microseconds, in the step's activity order."""

    number: int
    starts_us: np.ndarray
    ends_us: np.ndarray


def replay_timeline(trace: GpuTrace, durations_us: list[np.ndarray],
                    joins_us: dict[tuple[int, int], float] | None = None) -> list[StepTimes]:
    """Every step of ``trace`` replayed as one timeline with ``durations_us[k][i]`` the new duration of step
    k's activity i (the traced durations give the trace back). ``joins_us[(k, c)]``: when the last rank reaches
    step k's call c (this rank's clock): its first kernel moves data only from then on (a collective waits for
    every rank; :func:`flexcomm.sim.gpu_job.couple` finds the joins)."""
    items: list[tuple[float, int, int, int]] = []  # (cpu time, order, step, index | -1 wait | -2 sync)
    for k, step in enumerate(trace.steps):
        items.extend((a.launch_us, 1, k, i) for i, a in enumerate(step.activities))
        items.extend((w, 0, k, -1) for w in step.waits_us)
        items.extend((s, 2, k, -2 - j) for j, (s, _) in enumerate(step.syncs_us))
    items.sort()
    new_start = [np.zeros(len(s.activities)) for s in trace.steps]
    new_end = [np.zeros(len(s.activities)) for s in trace.steps]
    stream_new: dict[int, float] = {}
    stream_old: dict[int, float] = {}
    compute_new = compute_old = -math.inf  # end of the last compute activity launched so far
    nccl_new = nccl_old = -math.inf  # latest end of the NCCL activities launched so far
    launched_new: list[float] = []  # ends of everything launched so far, replayed and traced
    launched_old: list[float] = []
    pending_new = pending_old = -math.inf  # a wait's collectives, for the next compute activity
    shift = 0.0
    joined: set[tuple[int, int]] = set()
    for _cpu, _, k, i in items:
        step = trace.steps[k]
        if i == -1:  # work.wait(): the next compute activity waits for the collectives launched so far
            pending_new, pending_old = max(pending_new, nccl_new), max(pending_old, nccl_old)
            continue
        if i <= -2:  # a host call that waits for the GPU: later launches move with it
            start, end = step.syncs_us[-2 - i]
            old_ends, new_ends = np.asarray(launched_old), np.asarray(launched_new)
            waited = old_ends <= end  # what it may have waited for: the work launched before it that was done by
            if waited.any():          # its return (stream syncs are taken as device syncs)
                blocked_on = max(start, float(old_ends[waited].max()))
                returned = max(start + shift, float(new_ends[waited].max())) + (end - blocked_on)
                shift = returned - end
            continue
        a: GpuActivity = step.activities[i]
        dep_new, dep_old = -math.inf, -math.inf
        if a.kind == "nccl":
            dep_new, dep_old = compute_new, compute_old
        elif pending_old <= a.start_us + _CLOCK_US:  # the first activity launched after the wait that did wait
            dep_new, dep_old = pending_new, pending_old
            pending_new = pending_old = -math.inf
        pred_new, pred_old = stream_new.get(a.stream, -math.inf), stream_old.get(a.stream, -math.inf)
        if dep_old > a.start_us + _CLOCK_US:  # the trace shows it did not wait for that: not a dependency
            dep_new = dep_old = -math.inf
        explained_old = max(a.launch_us, pred_old, dep_old)
        held = a.start_us - explained_old
        start = max(a.launch_us + shift, pred_new, dep_new) + held
        moving = start
        if joins_us is not None and a.kind == "nccl" and (k, a.call) in joins_us and (k, a.call) not in joined:
            joined.add((k, a.call))
            moving = max(start, joins_us[(k, a.call)])
        end = moving + float(durations_us[k][i])
        new_start[k][i], new_end[k][i] = start, end
        stream_new[a.stream], stream_old[a.stream] = end, a.end_us
        launched_new.append(end)
        launched_old.append(a.end_us)
        if a.kind == "nccl":
            nccl_new, nccl_old = max(nccl_new, end), max(nccl_old, a.end_us)
        else:
            compute_new, compute_old = end, a.end_us
    return [StepTimes(s.number, new_start[k], new_end[k]) for k, s in enumerate(trace.steps)]


def step_periods_s(ends_us: list[float], first_span_us: float) -> list[float]:
    """A step's time: from the end of the GPU work of the step before to the end of its own (the period a
    training loop runs at, whether the GPU or the host is behind); the first step's is its span."""
    out = [first_span_us / 1e6]
    out.extend((b - a) / 1e6 for a, b in zip(ends_us, ends_us[1:], strict=False))
    return out


@dataclass(frozen=True)
class ReplayedTrace:
    """A trace replayed: per step its time and breakdown, measured and predicted, and what each call became."""

    steps: tuple[int, ...]
    measured_step_s: tuple[float, ...]
    predicted_step_s: tuple[float, ...]
    measured: tuple[GpuBreakdown, ...]
    predicted: tuple[GpuBreakdown, ...]

    @property
    def measured_mean_s(self) -> float:
        return _steady(self.measured_step_s)

    @property
    def predicted_mean_s(self) -> float:
        return _steady(self.predicted_step_s)


def _steady(values: tuple[float, ...]) -> float:
    """The mean over the steps after the first (the first has no step before it; all where only one): the
    window's end-to-end time per step. Not the median: when the host bounds the steps, a faster GPU moves the
    first steps' ends more than the last's, and a median of the periods can then grow where the window shrank."""
    return float(np.mean(values[1:] if len(values) > 1 else values))


def replay(trace: GpuTrace, durations_us: list[np.ndarray],
           joins_us: dict[tuple[int, int], float] | None = None) -> ReplayedTrace:
    """Replay ``trace`` with new durations and summarise each step, measured against predicted."""
    times = replay_timeline(trace, durations_us, joins_us)
    measured_b, predicted_b, measured_end, predicted_end = [], [], [], []
    for step, t in zip(trace.steps, times, strict=True):  # every step has GPU work: the reader leaves out others
        measured_b.append(step.breakdown())
        predicted_b.append(breakdown([(a.kind, s, e) for a, s, e in zip(step.activities, t.starts_us, t.ends_us,
                                                                          strict=True)]))
        measured_end.append(max(a.end_us for a in step.activities))
        predicted_end.append(float(t.ends_us.max()))
    measured = step_periods_s(measured_end, measured_b[0].span_s * 1e6)
    predicted = step_periods_s(predicted_end, predicted_b[0].span_s * 1e6)
    return ReplayedTrace(tuple(s.number for s in trace.steps), tuple(measured), tuple(predicted), tuple(measured_b),
                         tuple(predicted_b))


@dataclass(frozen=True)
class PricedCall:
    """One traced collective and what it became: re-priced, or kept at its traced time and why."""

    step: int
    kind: str
    phase: str
    nbytes: int | None
    group_size: int
    target_group_size: int
    traced_s: float
    predicted_s: float
    repriced: bool
    reason: str
    algorithm: str = ""


def call_durations(trace: GpuTrace, prices: dict[tuple[int, int], float]) -> list[np.ndarray]:
    """Traced durations with every priced call's kernels stretched to its new total ``prices[(step, call)]``."""
    out = []
    for k, step in enumerate(trace.steps):
        durations = np.array([a.duration_us for a in step.activities], dtype=float)
        totals = traced_call_seconds(trace, k)
        for i, a in enumerate(step.activities):
            new = prices.get((k, a.call)) if a.kind == "nccl" else None
            if new is not None:
                traced_us = totals[a.call] * 1e6
                durations[i] = new * 1e6 * (a.duration_us / traced_us) if traced_us > 0 else new * 1e6
        out.append(durations)
    return out


def traced_call_seconds(trace: GpuTrace, k: int) -> dict[int, float]:
    """Step ``k``'s calls -> the summed time of their NCCL kernels (seconds)."""
    out: dict[int, float] = {}
    for a in trace.steps[k].activities:
        if a.kind == "nccl":
            out[a.call] = out.get(a.call, 0.0) + a.duration_us / 1e6
    return out


def price_calls(trace: GpuTrace, price: Any, world: int | None = None) -> list[PricedCall]:
    """Every collective of every step through ``price(kind, nbytes, group) -> (seconds, algorithm)``; groups
    of the traced world's size become ``world`` ranks (the job on more or fewer GPUs), others keep their size."""
    out = []
    for k, step in enumerate(trace.steps):
        traced = traced_call_seconds(trace, k)
        for c, call in enumerate(step.calls):
            group = world if world is not None and call.group_size == trace.world_size else call.group_size
            reason, repriced, seconds, algorithm = _priced(call, group, price)
            out.append(PricedCall(step.number, call.kind, call.phase, call.nbytes, call.group_size, group,
                                  traced.get(c, 0.0), seconds if repriced else traced.get(c, 0.0), repriced,
                                  reason, algorithm))
    return out


def _priced(call: GpuCall, group: int, price: Any) -> tuple[str, bool, float, str]:
    if call.nbytes is None:
        return call.source, False, math.nan, ""
    if call.kind in ("barrier", "unknown", "gather", "scatter"):
        return f"{call.kind}: the NCCL model does not price it", False, math.nan, ""
    if group < 2:
        return "a group of one rank: nothing to exchange", True, 0.0, "none"
    seconds, algorithm = price(call.kind, call.nbytes, group)
    return "re-priced", True, float(seconds), algorithm


def prices_by_step(trace: GpuTrace, calls: list[PricedCall]) -> dict[tuple[int, int], float]:
    """(step index, call index) -> predicted seconds for the re-priced calls (the order :func:`price_calls`
    wrote them)."""
    out, j = {}, 0
    for k, step in enumerate(trace.steps):
        for c in range(len(step.calls)):
            if calls[j].repriced:
                out[(k, c)] = calls[j].predicted_s
            j += 1
    return out


def nccl_pricer(cluster: Any, ranks_needed: int) -> Any:
    """``price(kind, nbytes, group)`` through the NCCL model of ``cluster`` (RCCL on an AMD cluster), exactly as
    ``flexcomm cost --algorithm nccl`` prices one call."""
    if ranks_needed > cluster.world_size:
        raise InputError("cluster", cluster.name, f"a cluster of at least {ranks_needed} GPUs (the trace's largest "
                         "group)")
    model = CostModel.from_cluster(cluster)
    if cluster.gpu_fabric is None:  # a cluster of links only: the textbook algorithm of each collective on them
        return _formula_pricer(model, cluster.name)

    def price(kind: str, nbytes: int, group: int) -> tuple[float, str]:
        choice = model.nccl_choice(kind, "nccl", float(nbytes), int(group))
        return choice.seconds, choice.label

    return price


#: What a cluster without a ``gpu_fabric`` section prices each collective with (``flexcomm cost``'s default,
#: the first algorithm of each in :data:`costmodel.collectives.FORMULAS`); send/recv is one message.
_FORMULA = {"allreduce": "ring", "allgather": "ring", "reduce-scatter": "ring", "broadcast": "pipelined-ring",
            "alltoall": "pairwise"}


def _formula_pricer(model: Any, name: str) -> Any:
    def price(kind: str, nbytes: int, group: int) -> tuple[float, str]:
        if kind == "sendrecv":
            link = model.cluster.inter_link
            return link.latency_s + nbytes / link.bandwidth_Bps, "one message"
        algorithm = _formula_of(kind, name)
        return float(model.collective(kind, algorithm, float(nbytes), int(group)).total), algorithm

    return price


def _formula_of(kind: str, cluster_name: str) -> str:
    if kind not in _FORMULA:
        raise InputError("cluster", cluster_name, f"a cluster with a gpu_fabric section to price {kind} (NCCL model)")
    return _FORMULA[kind]


def nominal_pricer(cluster: Any) -> Any:
    """The naive baseline: each call's bytes by its textbook formula at the slowest link rate the group crosses
    (NVLink inside a node, the NIC across nodes), no latency, no protocol (as
    :func:`flexcomm.real_backend.hooks.nominal_records_seconds` prices a testbed's calls)."""
    gpus = cluster.devices_per_node
    # one NIC's share per GPU: a ring leaves each node through one NIC per GPU it spans (DGX: 8 NICs for 8 GPUs)
    inter_Bps = cluster.inter_link.bandwidth_Bps * max(1.0, (cluster.nics_per_node or 1) / gpus)

    def price(kind: str, nbytes: int, group: int) -> tuple[float, str]:
        rate = cluster.intra_link.bandwidth_Bps if group <= gpus else inter_Bps
        if kind == "sendrecv":
            return nbytes / rate, "link rate"
        return float(predict(kind, _formula_of(kind, cluster.name), nbytes, group, 0.0, rate).total), "link rate"

    return price


def compute_factors(trace: GpuTrace, traced_device: Any, target_device: Any) -> tuple[list[np.ndarray], str]:
    """New durations of every compute activity on ``target_device`` (catalog devices), and how: a matmul with a
    known shape through the GEMM model on both devices, other matmuls by the ratio of measured matmul rates,
    other kernels and sets by HBM bandwidth; copies (PCIe, host) kept."""
    def compute_of(device: Any) -> DeviceCompute:
        return DeviceCompute(device.name, device.peak("bf16"), device.memory_bandwidth_Bps, device.units, "bf16")

    old, new = compute_of(traced_device), compute_of(target_device)
    matmul_ratio = _matmul_rate(traced_device) / _matmul_rate(target_device)
    memory_ratio = traced_device.memory_bandwidth_Bps / target_device.memory_bandwidth_Bps
    counts = {"GEMM model": 0, "matmul rate": 0, "HBM bandwidth": 0, "kept": 0}
    out = []
    cache: dict[tuple[int, int, int, int], float] = {}
    for step in trace.steps:
        durations = np.array([a.duration_us for a in step.activities], dtype=float)
        for i, a in enumerate(step.activities):
            if a.kind == "nccl" or a.kind == "memcpy":
                counts["kept"] += a.kind == "memcpy"
                continue
            if a.matmul and a.gemm is not None:
                if a.gemm not in cache:
                    shape = GemmShape(*a.gemm)
                    cache[a.gemm] = new._gemm(shape) / old._gemm(shape)
                durations[i] *= cache[a.gemm]
                counts["GEMM model"] += 1
            elif a.matmul:
                durations[i] *= matmul_ratio
                counts["matmul rate"] += 1
            else:
                durations[i] *= memory_ratio
                counts["HBM bandwidth"] += 1
        out.append(durations)
    how = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    return out, f"compute {traced_device.name} -> {target_device.name} ({how} activities)"


def _matmul_rate(device: Any) -> float:
    """The measured matmul rate (MAMF) where the catalog has one, else the datasheet's dense bf16 peak."""
    return device.mamf.tflops * 1e12 if device.mamf is not None else device.peak("bf16")


def merge_durations(base: list[np.ndarray], trace: GpuTrace, other: list[np.ndarray]) -> list[np.ndarray]:
    """Compute activities from ``other``, NCCL activities from ``base``."""
    out = []
    for k, step in enumerate(trace.steps):
        merged = base[k].copy()
        for i, a in enumerate(step.activities):
            if a.kind != "nccl":
                merged[i] = other[k][i]
        out.append(merged)
    return out
