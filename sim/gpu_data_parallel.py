"""A one-GPU trace as the data-parallel job it would become: DDP's gradient buckets added to its GPU timeline.

Why: most people profile one GPU first. The trace holds the step's kernels and, from the optimizer's
per-parameter ops, every parameter's size (:func:`flexcomm.workloads.gpu_trace.optimizer_parameters`); DDP
would allreduce those gradients in buckets while the backward runs. Buckets are formed as torch's DDP forms
them: parameters in reverse order, the first bucket closed at 1 MiB and the others at 25 MiB
(``_DEFAULT_FIRST_BUCKET_BYTES`` and ``bucket_cap_mb=25``, torch/nn/parallel/distributed.py @ v2.5.0). A bucket
is taken to be ready when the backward's GPU time has reached its share of the gradient bytes (the backward
runs the layers last to first; a layer's kernel time is not in proportion to its parameters, so this is an
assumption the report states). The optimizer's first kernel waits for the last bucket, as DDP's ``finalize``
waits for every bucket's work before the step goes on.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.sim.buckets import DEFAULT_BUCKET_CAP, size_capped_groups
from flexcomm.workloads.gpu_trace import GpuActivity, GpuCall, GpuStep, GpuTrace

FIRST_BUCKET_BYTES = 1 << 20
#: The stream the added allreduces run on (any id no trace uses for a real stream).
DDP_STREAM = -1
ASSUMPTION = ("gradient buckets as torch DDP forms them (1 MiB first, 25 MiB after) from the optimizer's "
              "parameters, each ready when the backward's GPU time reaches its share of the gradient bytes")


def ddp_buckets(parameter_bytes: tuple[int, ...], first: int = FIRST_BUCKET_BYTES,
                cap: float = DEFAULT_BUCKET_CAP) -> list[int]:
    """Bucket sizes in the order DDP fills and launches them (parameters taken last to first)."""
    sizes = parameter_bytes[::-1]
    return [sum(sizes[i] for i in group) for group in size_capped_groups(sizes, first, cap)]


def _with_buckets(step: GpuStep, buckets: list[int], path: str) -> GpuStep:
    """The step with one allreduce per bucket after the backward activity that makes it ready, and the wait
    the optimizer's first kernel does on them."""
    b0, b1 = step.backward_us
    if not math.isfinite(b0):
        raise InputError(path, f"step {step.number} without a backward pass",
                         "a trace of training steps (the backward's ops run the gradient buckets)")
    backward = [i for i, a in enumerate(step.activities) if b0 <= a.launch_us <= b1 and a.kind != "memcpy"]
    if not backward:
        raise InputError(path, f"step {step.number}: no GPU work launched by the backward",
                         "a trace with the GPU's activities (profile with activities=[CPU, CUDA])")
    times = np.cumsum([step.activities[i].duration_us for i in backward])
    shares = np.cumsum(buckets) / float(sum(buckets))
    ready = [backward[min(int(np.searchsorted(times, share * times[-1])), len(backward) - 1)] for share in shares]
    activities: list[GpuActivity] = []
    calls = [GpuCall("allreduce", size, 1, 1, "backward", ASSUMPTION) for size in buckets]
    by_index: dict[int, list[int]] = {}
    for call, index in enumerate(ready):
        by_index.setdefault(index, []).append(call)
    for i, a in enumerate(step.activities):
        activities.append(a)
        for call in by_index.get(i, []):
            activities.append(GpuActivity("nccl", DDP_STREAM, a.end_us, a.end_us, a.launch_us, call=call,
                                          name="DDP bucket allreduce (added)"))
    after = [a.launch_us for a in step.activities if a.launch_us > b1]
    waits = tuple(sorted(step.waits_us + ((after[0] - 1e-3,) if after else ())))
    return replace(step, activities=tuple(activities), calls=tuple(calls), waits_us=waits)


def as_data_parallel(trace: GpuTrace) -> GpuTrace:
    """The one-GPU trace with DDP's buckets on every step (their traced time 0: the GPU never ran them)."""
    if not trace.parameter_bytes:
        raise InputError(trace.path, "a one-GPU trace without its parameters' sizes",
                         "a trace recorded with record_shapes=True whose steps run the optimizer "
                         "(Optimizer.step#...: its per-parameter ops give DDP's buckets)")
    buckets = ddp_buckets(trace.parameter_bytes)
    return replace(trace, steps=tuple(_with_buckets(s, buckets, trace.path) for s in trace.steps))
