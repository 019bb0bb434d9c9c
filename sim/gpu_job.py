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
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flexcomm.costmodel import devices
from flexcomm.costmodel.errors import InputError
from flexcomm.sim import gpu_replay as gr
from flexcomm.sim.gpu_data_parallel import ASSUMPTION, as_data_parallel
from flexcomm.workloads.gpu_trace import GpuTrace, read_gpu_trace

#: Largest relative difference of two devices' memory still read as the same part (a 40 GB A100 reports 39.4 GiB).
_MEMORY_TOLERANCE = 0.12


def catalog_device(trace: GpuTrace, named: str | None = None) -> Any:
    """The catalog device the trace ran on: ``named`` (``--traced-device``), else the trace's own name, else the
    catalog device of the same vendor with its SM count and memory (an OEM name such as A100-PG509-200)."""
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


def _durations(trace: GpuTrace, cluster: Any, pricer: Callable[[Any], Any], world: int | None,
               compute: list[np.ndarray] | None) -> tuple[list[np.ndarray], list[gr.PricedCall]]:
    calls = gr.price_calls(trace, pricer(cluster), world)
    durations = gr.call_durations(trace, gr.prices_by_step(trace, calls))
    if compute is not None:
        durations = gr.merge_durations(durations, trace, compute)
    return durations, calls


def _largest_group(trace: GpuTrace, world: int | None) -> int:
    groups = [world if world is not None and c.group_size == trace.world_size else c.group_size
              for s in trace.steps for c in s.calls]
    return max(groups, default=1)


def _global_calls(trace: GpuTrace) -> dict[tuple[int, int], int]:
    """(step number, n) -> call index of the step's n-th call over the whole job (group of the world's size):
    the key under which every rank holds the same collective (SPMD: every rank issues them in one order)."""
    out = {}
    for step in trace.steps:
        n = 0
        for c, call in enumerate(step.calls):
            if call.group_size == trace.world_size and trace.world_size > 1:
                out[(step.number, n)] = c
                n += 1
    return out


def _call_kernels(trace: GpuTrace) -> dict[tuple[int, int], list[int]]:
    """(step index, call) -> indices of its NCCL kernels, in launch order."""
    out: dict[tuple[int, int], list[int]] = {}
    for k, step in enumerate(trace.steps):
        for i, a in enumerate(step.activities):
            if a.kind == "nccl":
                out.setdefault((k, a.call), []).append(i)
    return out


def clock_offsets_us(traces: Sequence[GpuTrace]) -> list[float]:
    """Each rank's clock against the first's: a collective ends on every rank at once (the last byte reaches
    all), so the median difference of the traced ends of the same collectives is the difference of the clocks."""
    keys = [_global_calls(t) for t in traces]
    kernels = [_call_kernels(t) for t in traces]
    index = [{s.number: k for k, s in enumerate(t.steps)} for t in traces]

    def end(r: int, key: tuple[int, int]) -> float | None:
        c = keys[r].get(key)
        k = index[r].get(key[0])
        if c is None or k is None or (k, c) not in kernels[r]:
            return None
        return max(traces[r].steps[k].activities[i].end_us for i in kernels[r][(k, c)])

    offsets = [0.0]
    for r in range(1, len(traces)):
        diffs = [e - e0 for key in keys[0] if (e := end(r, key)) is not None and (e0 := end(0, key)) is not None]
        offsets.append(float(np.median(diffs)) if diffs else 0.0)
    return offsets


def couple(traces: Sequence[GpuTrace], durations: Sequence[list[np.ndarray]], offsets: Sequence[float],
           repriced: Sequence[set[tuple[int, int]]] | None = None,
           rounds: int = 20) -> tuple[list[gr.ReplayedTrace], bool]:
    """Replay every rank so that each job-wide collective moves data only once the last rank has reached it:
    replay, take the latest arrival of each collective over the ranks, replay again with those joins, until
    no join moves by more than a microsecond (the joins only grow, so it settles; False where it had not after
    ``rounds``). Only collectives re-priced on every rank (``repriced``: (step index, call) per rank) are
    joined: one kept at its traced time already holds its wait for the others."""
    keys = [_global_calls(t) for t in traces]
    kernels = [_call_kernels(t) for t in traces]
    index = [{s.number: k for k, s in enumerate(t.steps)} for t in traces]
    shared = set(keys[0]).intersection(*keys[1:]) if len(traces) > 1 else set()
    if repriced is not None:
        shared = {key for key in shared
                  if all((index[r][key[0]], keys[r][key]) in repriced[r] for r in range(len(traces)))}
    joins: list[dict[tuple[int, int], float]] = [{} for _ in traces]
    settled = True
    for round_ in range(rounds if shared else 1):
        times = [gr.replay_timeline(t, d, j) for t, d, j in zip(traces, durations, joins, strict=True)]
        moved = 0.0
        for key in shared:
            arrivals = []
            for r in range(len(traces)):
                k, c = index[r][key[0]], keys[r][key]
                arrivals.append(times[r][k].starts_us[kernels[r][(k, c)][0]] - offsets[r])  # rank 0's clock
            latest = max(arrivals)
            for r in range(len(traces)):
                k, c = index[r][key[0]], keys[r][key]
                target = latest + offsets[r]
                before = joins[r].get((k, c))
                moved = max(moved, math.inf if before is None else abs(target - before))
                joins[r][(k, c)] = target
        if moved <= 1.0:
            break
        settled = round_ < rounds - 1
    return [gr.replay(t, d, j or None) for t, d, j in zip(traces, durations, joins, strict=True)], settled


def _repriced(traces: Sequence[GpuTrace], priced: list[tuple[Any, list[gr.PricedCall]]]) -> list[set[tuple[int, int]]]:
    """Per rank, the (step index, call) of the collectives re-priced (the joins apply to those)."""
    return [set(gr.prices_by_step(t, calls)) for t, (_, calls) in zip(traces, priced, strict=True)]


def _compute_for(trace: GpuTrace, settings: Settings) -> tuple[list[np.ndarray] | None, str]:
    old = catalog_device(trace, settings.traced_device)
    new = devices.lookup(settings.target.device.name)
    if new is None:
        return None, f"compute kept: {settings.target.device.name} is not in the device catalog"
    if new.name == old.name:
        return None, f"compute as traced ({old.name})"
    return gr.compute_factors(trace, old, new)


def replay_ranks(traces: Sequence[GpuTrace], settings: Settings) -> list[RankReplay]:
    """Measure every rank, reproduce the job where it ran, replay it on the target; ranks of one job are
    coupled at every job-wide collective (:func:`couple`)."""
    traces = list(traces)
    notes: list[list[str]] = [[] for _ in traces]
    for r, trace in enumerate(traces):
        if trace.unlinked_kernels:
            notes[r].append(f"{trace.unlinked_kernels} NCCL kernels with no collective op around their launch: kept")
        if trace.unlaunched:
            notes[r].append(f"{trace.unlaunched} GPU activities whose launch call the trace lost, placed after the "
                            "launch with the nearest lower correlation id")
        if trace.dropped:
            notes[r].append(f"{trace.dropped} GPU activities without a correlation id left out")
        if trace.idle_steps:
            notes[r].append("steps " + ", ".join(map(str, trace.idle_steps)) + " launched no GPU work: left out")
    measured = [gr.replay(t, [np.array([a.duration_us for a in s.activities], dtype=float) for s in t.steps])
                for t in traces]
    base_calls = [gr.price_calls(t, lambda kind, nbytes, group: (math.nan, ""), None) for t in traces]
    offsets = clock_offsets_us(traces)
    out: list[dict[str, Any]] = [{} for _ in traces]
    if settings.traced is not None:
        need = max(_largest_group(t, None) for t in traces)
        for name, pricer in (("reproduced", lambda c: gr.nccl_pricer(c, need)), ("reproduced_naive",
                                                                                gr.nominal_pricer)):
            priced = [_durations(t, settings.traced, pricer, None, None) for t in traces]
            coupled, settled = couple(traces, [d for d, _ in priced], offsets, _repriced(traces, priced))
            if not settled:
                notes[0].append("the ranks' waits at collectives had not settled after 20 rounds (reproduction)")
            for r, replayed in enumerate(coupled):
                out[r][name] = replayed
                if name == "reproduced":
                    out[r]["reproduced_calls"] = tuple(priced[r][1])
    if settings.target is not None:
        world = settings.target_ranks
        if any(t.world_size == 1 for t in traces) and (world or 1) > 1:

            traces = [as_data_parallel(t) if t.world_size == 1 else t for t in traces]
            for r in range(len(traces)):
                notes[r].append("one GPU as data parallel: " + ASSUMPTION)
        need = max(_largest_group(t, world) for t in traces)
        priced, compute_notes = [], []
        for t in traces:
            compute, note = _compute_for(t, settings)
            priced.append(_durations(t, settings.target, lambda c: gr.nccl_pricer(c, need), world, compute))
            compute_notes.append(note)
        coupled, settled = couple(traces, [d for d, _ in priced], offsets, _repriced(traces, priced))
        if not settled:
            notes[0].append("the ranks' waits at collectives had not settled after 20 rounds (target)")
        for r, replayed in enumerate(coupled):
            out[r].update(target=replayed, target_calls=tuple(priced[r][1]), compute_note=compute_notes[r])
    return [RankReplay(t.path, t.rank, t.library, t.device, t.world_size, measured[r], tuple(base_calls[r]),
                       notes=tuple(notes[r]), **out[r]) for r, t in enumerate(traces)]


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


def _read(item: tuple[str, str | None]) -> GpuTrace | None:
    return read_gpu_trace(*item)


@dataclass(frozen=True)
class JobReplay:
    """All ranks read: per-rank replays and the job's step (the slowest rank's), measured and predicted."""

    ranks: tuple[RankReplay, ...]
    world_size: int

    def job_step_s(self, which: str) -> float:
        """Mean over the steps after the first of the largest rank's step (see :func:`gr._steady`):
        ``measured``, ``reproduced``, ``reproduced_naive`` or ``target``."""
        series: list[dict[int, float]] = []
        for r in self.ranks:
            replayed = r.replayed if which == "measured" else getattr(r, which)
            if replayed is None:
                return math.nan
            values = replayed.measured_step_s if which == "measured" else replayed.predicted_step_s
            series.append(dict(zip(replayed.steps, values, strict=True)))
        numbers = sorted(set(series[0]).intersection(*series[1:]))
        per_step = [max(s[n] for s in series) for n in numbers]
        first = min(series[0])  # the first traced step has no step before it: its time is its span
        steady = [v for n, v in zip(numbers, per_step, strict=True) if n != first]
        return float(np.mean(steady or per_step))


def _check_same_job(traces: list[GpuTrace]) -> None:
    """Ranks of one job: one world size, distinct ranks inside it, shared step numbers."""
    first = traces[0]
    numbers0 = {s.number for s in first.steps}
    for r in traces:
        if r.world_size != first.world_size:
            raise InputError(r.path, f"a rank of a {r.world_size}-rank job beside {first.path} of a "
                             f"{first.world_size}-rank job", "the traces of one job (one world size)")
        numbers = [s.number for s in r.steps]
        if not set(numbers) & numbers0:
            raise InputError(r.path, f"steps {numbers[0]}-{numbers[-1]}, none shared with {first.path}",
                             "the traces of one job (the same profiled steps)")
    seen: dict[int, str] = {}
    for r in traces:
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
    items = [(str(p), None if execution_trace is None else str(execution_trace)) for p in files]
    from tqdm import tqdm

    workers = workers or min(len(items), os.cpu_count() or 1, 8)
    pool = ProcessPoolExecutor(max_workers=workers) if workers > 1 and len(items) > 1 else None
    try:
        iterator: Any = pool.map(_read, items) if pool is not None else map(_read, items)
        # a bar on a terminal only (disable=None), as the project's other long reads
        traces: list[GpuTrace | None] = list(tqdm(iterator, total=len(items), desc="traces", unit="rank",
                                                  leave=False, disable=None if progress is None else not progress))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if all(t is None for t in traces):
        return None
    for path, t in zip(files, traces, strict=True):
        if t is None:
            raise InputError(str(path), "a host-only trace (no GPU activity) among GPU traces",
                             "the traces of one GPU job")
    read = sorted((t for t in traces if t is not None), key=lambda t: t.rank)
    _check_same_job(read)
    return JobReplay(tuple(replay_ranks(read, settings)), read[0].world_size)
