"""A traced GPU job, one rank or all of them, measured, reproduced where it ran and replayed where asked.

Why here and not in the reader: reading is measurement (:mod:`flexcomm.workloads.gpu_trace`), this module
prices: each rank's collectives through the NCCL model (:mod:`flexcomm.sim.gpu_replay`) on the traced
setting (to check the replay against the trace) and on a target (the what-if), its compute moved to the
target's device through the catalog. A job's step is its slowest rank's: a collective ends when every rank
has joined it, so the step of the job is the largest of its ranks' steps.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.sim import gpu_replay as gr
from flexcomm.workloads.gpu_trace import GpuTrace, read_gpu_trace

#: Largest relative difference of two devices' memory still read as the same part (a 40 GB A100 reports 39.4 GiB).
_MEMORY_TOLERANCE = 0.12


def catalog_device(trace: GpuTrace, named: str | None = None) -> Any:
    """The catalog device the trace ran on: ``named`` (``--traced-device``), else the trace's own name, else the
    catalog device of the same vendor with its SM count and memory (an OEM name such as A100-PG509-200)."""
    from flexcomm.costmodel import devices

    name = named or trace.device
    found = devices.lookup(name) if name else None
    if found is not None:
        return found
    if named:
        raise InputError("traced-device", named, "a device of the catalog: " + ", ".join(devices.closest(named)))
    if trace.device_sms and trace.device_memory_bytes:
        same = [d for d in devices.catalog().values() if d.units == trace.device_sms
                and abs(d.memory_bytes - trace.device_memory_bytes) <= _MEMORY_TOLERANCE * d.memory_bytes]
        if same:
            return sorted(same, key=lambda d: ("pcie" in d.name.lower(), d.name))[0]
    raise InputError(trace.path, f"device {trace.device!r}", "a device of the catalog (name it with --traced-device)")


@dataclass(frozen=True)
class RankReplay:
    """One rank: measured, reproduced on the traced setting (model and naive baseline) and the what-if."""

    path: str
    rank: int
    library: str
    device: str
    world_size: int
    replayed: gr.ReplayedTrace
    calls: tuple[gr.PricedCall, ...]
    reproduced: gr.ReplayedTrace | None = None
    reproduced_naive: gr.ReplayedTrace | None = None
    reproduced_calls: tuple[gr.PricedCall, ...] = ()
    target: gr.ReplayedTrace | None = None
    target_calls: tuple[gr.PricedCall, ...] = ()
    compute_note: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Settings:
    """Where a job is reproduced and replayed (clusters already loaded; None: not asked)."""

    traced: Any = None
    target: Any = None
    target_ranks: int | None = None
    traced_device: str | None = None


def _replay_with(trace: GpuTrace, cluster: Any, pricer: Callable[[Any], Any], world: int | None,
                 compute: list[np.ndarray] | None) -> tuple[gr.ReplayedTrace, list[gr.PricedCall]]:
    calls = gr.price_calls(trace, pricer(cluster), world)
    durations = gr.call_durations(trace, gr.prices_by_step(trace, calls))
    if compute is not None:
        durations = gr.merge_durations(durations, trace, compute)
    return gr.replay(trace, durations), calls


def _largest_group(trace: GpuTrace, world: int | None) -> int:
    groups = [world if world is not None and c.group_size == trace.world_size else c.group_size
              for s in trace.steps for c in s.calls]
    return max(groups, default=1)


def replay_rank(trace: GpuTrace, settings: Settings) -> RankReplay:
    """Measure one rank's trace, reproduce it where it ran, replay it on the target."""
    traced_durations = [np.array([a.duration_us for a in s.activities], dtype=float) for s in trace.steps]
    measured = gr.replay(trace, traced_durations)
    notes = []
    if trace.unlinked_kernels:
        notes.append(f"{trace.unlinked_kernels} NCCL kernels with no collective op around their launch: kept")
    out: dict[str, Any] = {}
    if settings.traced is not None:
        need = _largest_group(trace, None)
        nccl = lambda c: gr.nccl_pricer(c, need)  # noqa: E731
        out["reproduced"], calls = _replay_with(trace, settings.traced, nccl, None, None)
        out["reproduced_calls"] = tuple(calls)
        out["reproduced_naive"], _ = _replay_with(trace, settings.traced, gr.nominal_pricer, None, None)
    base_calls = gr.price_calls(trace, lambda kind, nbytes, group: (math.nan, ""), None)
    if settings.target is not None:
        world = settings.target_ranks
        if trace.world_size == 1 and (world or 1) > 1:
            raise InputError(trace.path, "a single-GPU trace (no collectives) replayed on more ranks",
                             "a trace of the data-parallel job (profile it on 2 or more GPUs), or --ranks 1")
        need = _largest_group(trace, world)
        old = catalog_device(trace, settings.traced_device)
        from flexcomm.costmodel import devices

        new = devices.lookup(settings.target.device.name)
        compute, note = (None, "")
        if new is None:
            note = f"compute kept: {settings.target.device.name} is not in the device catalog"
        elif new.name == old.name:
            note = f"compute as traced ({old.name})"
        else:
            compute, note = gr.compute_factors(trace, old, new)
        nccl = lambda c: gr.nccl_pricer(c, need)  # noqa: E731
        out["target"], calls = _replay_with(trace, settings.target, nccl, world, compute)
        out["target_calls"] = tuple(calls)
        out["compute_note"] = note
    return RankReplay(trace.path, trace.rank, trace.library, trace.device, trace.world_size, measured,
                      tuple(base_calls),
                      notes=tuple(notes), **out)


def trace_files(paths: Sequence[str | Path]) -> list[Path]:
    """Files named, and every ``*.json``/``*.json.gz`` of the directories named, in name order."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and re.search(r"\.json(\.gz)?$", p.name))
            if not found:
                raise InputError("from-trace", str(path), "a directory holding one trace per rank (*.json or "
                                 "*.json.gz)")
            out.extend(found)
        else:
            out.append(path)
    return out


def _one(item: tuple[str, str | None, Settings]) -> RankReplay | None:
    path, et, settings = item
    trace = read_gpu_trace(path, et)
    if trace is None:
        return None
    return replay_rank(trace, settings)


@dataclass(frozen=True)
class JobReplay:
    """All ranks read: per-rank replays and the job's step (the slowest rank's), measured and predicted."""

    ranks: tuple[RankReplay, ...]
    world_size: int

    def job_step_s(self, which: str) -> float:
        """Median over steps of the largest rank's step: ``measured``, ``reproduced``, ``reproduced_naive`` or
        ``target``."""
        series = []
        for r in self.ranks:
            replayed = r.replayed if which == "measured" else getattr(r, which)
            if replayed is None:
                return math.nan
            series.append(replayed.measured_step_s if which == "measured" else replayed.predicted_step_s)
        per_step = np.max(np.array([s[: min(map(len, series))] for s in series]), axis=0)
        return float(np.median(per_step[1:] if len(per_step) > 1 else per_step))


def _check_same_job(replays: list[RankReplay], traces_world: list[int], steps: list[tuple[int, ...]]) -> None:
    """Ranks of one job: one world size, distinct ranks inside it, shared step numbers."""
    first = replays[0]
    for r, world, numbers in zip(replays, traces_world, steps, strict=True):
        if world != traces_world[0]:
            raise InputError(r.path, f"a rank of a {world}-rank job beside {first.path} of a {traces_world[0]}-rank "
                             "job", "the traces of one job (one world size)")
        if not set(numbers) & set(steps[0]):
            raise InputError(r.path, f"steps {numbers[0]}-{numbers[-1]}, none shared with {first.path}",
                             "the traces of one job (the same profiled steps)")
    seen: dict[int, str] = {}
    for r in replays:
        if r.rank in seen:
            raise InputError(r.path, f"rank {r.rank} again (also {seen[r.rank]})", "one trace per rank of one job")
        seen[r.rank] = r.path


def replay_job(paths: Sequence[str | Path], settings: Settings, execution_trace: str | Path | None = None,
               workers: int | None = None, progress: bool | None = None) -> JobReplay | None:
    """Read and replay every rank (processes in parallel, one trace in memory per worker); None where the
    traces are host-only (the CPU path reads those)."""
    files = trace_files(paths)
    if execution_trace is not None and len(files) > 1:
        raise InputError("execution-trace", str(execution_trace), "one trace with its execution trace (several "
                         "ranks: give each its own run)")
    items = [(str(p), None if execution_trace is None else str(execution_trace), settings) for p in files]
    workers = workers or min(len(items), os.cpu_count() or 1, 8)
    show = sys.stderr.isatty() if progress is None else progress
    results: list[Any] = []
    if workers <= 1 or len(items) == 1:
        iterator: Any = map(_one, items)
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        iterator = pool.map(_one, items)
    try:
        for k, result in enumerate(iterator, start=1):
            results.append(result)
            if show:
                print(f"\rread {k}/{len(items)} traces", end="" if k < len(items) else "\n", file=sys.stderr,
                      flush=True)
    finally:
        if workers > 1 and len(items) > 1:
            pool.shutdown(cancel_futures=True)
    if all(r is None for r in results):
        return None
    for path, r in zip(files, results, strict=True):
        if r is None:
            raise InputError(str(path), "a host-only trace (no GPU activity) among GPU traces",
                             "the traces of one GPU job")
    worlds = [r.world_size for r in results]
    _check_same_job(results, worlds, [r.replayed.steps for r in results])
    return JobReplay(tuple(sorted(results, key=lambda r: r.rank)), worlds[0])
