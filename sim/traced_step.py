"""A profiled training step as the simulator's model: measured layers, one per DDP bucket.

:func:`step_profile` takes the medians of a :class:`workloads.profiler_trace.ProfilerTrace`'s steps (those that
share the most common bucket layout: DDP rebuilds its buckets after the first step, so the first traced step
often differs and is left out, and said so); :func:`traced_model` turns them into a
:class:`costmodel.compute.ModelSpec` whose layers are *measured*: [forward (+ the backward after the last
launch), bucket n-1, ..., bucket 0], each bucket layer holding its bucket's parameters and the backward compute
that ended with its launch, so the backward, which runs the layers in reverse, completes bucket 0 first. That is
the dependency graph DDP runs: bucket b leaves once its gradients are ready and bucket b-1 has left, and the
part after the exchange (DDP's copy back, the optimizer) waits for the last one.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexcomm.costmodel.compute import ModelSpec
from flexcomm.costmodel.errors import InputError
from flexcomm.workloads.profiler_trace import ProfilerTrace, TracedStep, read_profiler_trace

#: Element bytes the simulator's buckets hold (make_buckets' default): a traced bucket of another dtype is
#: replayed as the same number of bytes in 4-byte elements.
SIM_ELEMENT_BYTES = 4


@dataclass(frozen=True)
class StepProfile:
    """The measured step a replay starts from (seconds, medians over ``steps``)."""

    trace: str
    backend: str
    device: str
    world_size: int
    steps: tuple[int, ...]
    left_out: tuple[int, ...]
    #: step start -> first backward op (data, zero_grad, forward, loss)
    forward_s: float
    #: backward compute ending with each bucket's launch, in launch order
    segments_s: tuple[float, ...]
    #: backward compute after the last launch
    tail_s: float
    #: from when the training thread went on after the exchange to the step's end (copy back, optimizer)
    after_s: float
    bucket_bytes: tuple[int, ...]
    measured_step_s: float
    #: the exchange's part not hidden behind the backward: resumed - backward end
    measured_exposed_s: float

    @property
    def gradient_bytes(self) -> int:
        return sum(self.bucket_bytes)

    @property
    def backward_s(self) -> float:
        return sum(self.segments_s) + self.tail_s

    @property
    def largest_bucket_elements(self) -> int:
        """The largest bucket in the simulator's elements (what a compressor's rate is measured on)."""
        return max(self.bucket_bytes) // SIM_ELEMENT_BYTES


def _layout(step: TracedStep) -> tuple[int, ...]:
    return tuple(c.nbytes for c in step.bucket_exchanges())


def step_profile(trace: ProfilerTrace) -> StepProfile:
    """Medians of the steps with the most common bucket layout (ties: the later layout, DDP's rebuilt one)."""
    usable = [s for s in trace.steps if _layout(s)]
    for step in usable:
        empty = [c for c in step.bucket_exchanges() if c.nbytes == 0]
        if empty:
            raise InputError(trace.path, f"step {step.number}: a gradient allreduce of 0 bytes",
                             "DDP buckets that hold gradients (a bucket is never empty)")
    if not usable:
        raise InputError(trace.path, "no gradient allreduce issued during a backward pass",
                         "a trace of DistributedDataParallel training (its buckets' allreduces run in the backward)")
    counts = Counter(_layout(s) for s in usable)
    best = max(counts, key=lambda layout: (counts[layout], max(s.number for s in usable if _layout(s) == layout)))
    used = [s for s in usable if _layout(s) == best]
    left_out = tuple(s.number for s in trace.steps if s not in used)

    def median(values: list[float]) -> float:
        return float(np.median(values))

    launches = [[c.launch_s for c in s.bucket_exchanges()] for s in used]
    segments = []
    for k in range(len(best)):
        segments.append(median([lv[k] - (lv[k - 1] if k else s.backward_start_s)
                                for lv, s in zip(launches, used, strict=True)]))
    return StepProfile(
        trace=trace.path, backend=trace.backend, device=trace.device, world_size=trace.world_size,
        steps=tuple(s.number for s in used), left_out=left_out,
        forward_s=median([s.backward_start_s for s in used]),
        segments_s=tuple(max(0.0, x) for x in segments),
        tail_s=max(0.0, median([s.backward_end_s - lv[-1] for lv, s in zip(launches, used, strict=True)])),
        after_s=max(0.0, median([s.duration_s - s.resumed_s for s in used])),
        bucket_bytes=best,
        measured_step_s=median([s.duration_s for s in used]),
        measured_exposed_s=max(0.0, median([s.resumed_s - s.backward_end_s for s in used])),
    )


def profile_of(path: str | Path, execution_trace: str | Path | None = None) -> StepProfile:
    """Read and summarise a trace file in one call (the study and ``simulate`` name traces by path); read once
    per process while the file is unchanged (a study's points all name the same trace)."""
    trace, et = Path(path), None if execution_trace is None else Path(execution_trace)
    stamp = tuple(p.stat().st_mtime_ns if p.exists() else -1 for p in (trace, et) if p is not None)
    return _profile_of(str(trace), None if et is None else str(et), stamp)


@functools.lru_cache(maxsize=16)
def _profile_of(path: str, execution_trace: str | None, _stamp: tuple[int, ...]) -> StepProfile:
    return step_profile(read_profiler_trace(path, execution_trace))


def traced_model(profile: StepProfile, compute_scale: float = 1.0) -> ModelSpec:
    """The step as measured layers: [forward (+ the backward after the last launch), bucket n-1, ..., bucket 0],
    so the backward, which runs the layers in reverse, completes bucket 0 first."""
    if not (math.isfinite(compute_scale) and compute_scale > 0):
        raise InputError("compute-scale", compute_scale, "a positive factor")
    k = float(compute_scale)
    n = len(profile.bucket_bytes)
    measured = {"forward": (profile.forward_s * k, profile.tail_s * k)}
    params = {"forward": 0}
    for b in range(n - 1, -1, -1):
        name = f"bucket{b}"
        measured[name] = (0.0, profile.segments_s[b] * k)
        params[name] = max(1, profile.bucket_bytes[b] // SIM_ELEMENT_BYTES)
    return ModelSpec.from_profile(Path(profile.trace).name, measured, batch_per_rank=1, params=params,
                                  description=f"measured step of {profile.trace}")
