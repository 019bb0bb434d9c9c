"""Collective benchmark in the manner of nccl-tests, writing calibration-ready measurements.

The parent side (:func:`run_benchmark`, ``flexcomm bench-collectives``) validates the request and
starts the ranks through :mod:`real_backend.launch` (or inside a shaped testbed); the worker side
(``python -m flexcomm.real_backend.bench '<JSON>'``, one :class:`BenchWorkerConfig`; :func:`worker_main`)
measures. Per collective and size: a few warm-up operations, then timed repetitions, each preceded by a
barrier; a repetition's time is the **maximum over ranks** (an ``allreduce(MAX)`` of every rank's own time,
as nccl-tests does), since a collective is done when its slowest rank is.

Rank 0 appends one row per repetition to the CSV **as it is measured** and flushes it (fsync at
least every :data:`FSYNC_EVERY_S`), so a crash or a killed peer loses nothing already measured;
the header is written once, and a rerun appends to a file with the same columns. The columns are
the calibration format (``collective, algorithm, ranks, bytes, seconds, link_class``) plus
``rep, backend, algbw_Bps, busbw_Bps, implementation``.

Sizes follow the cost model's conventions: allreduce, broadcast and reduce-scatter take the whole
vector each rank holds, allgather each rank's contribution. Tensors are float32, so a size is
rounded down to whole elements (and reduce-scatter to a multiple of the ranks); the CSV holds the
bytes actually sent. ``algbw = S / t`` and ``busbw = algbw * BUS_BANDWIDTH_FACTOR[collective](p)``
with nccl-tests' ``S``: the vector for every collective except allgather, where it is the gathered
output ``p * m`` (so busbw of a ring allgather approaches the link bandwidth, as in nccl-tests).
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexcomm.costmodel.atomic import AppendingCsv
from flexcomm.costmodel.collective_libraries.logs import size_column
from flexcomm.costmodel.collectives import BUS_BANDWIDTH_FACTOR
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_BENCH_BYTES
from flexcomm.costmodel.units import format_bandwidth, format_size, format_time, parse_size
from flexcomm.real_backend.dist import Watchdog, init_from_env, shutdown
from flexcomm.real_backend.launch import launch
from flexcomm.real_backend.worker_config import config_from_argv, to_argument

FSYNC_EVERY_S = 1.0
ELEMENT_BYTES = 4  # float32
CSV_COLUMNS = (
    "collective", "algorithm", "ranks", "bytes", "seconds", "link_class",
    "rep", "backend", "algbw_Bps", "busbw_Bps", "implementation",
)
MAX_SIZES = 64


@dataclass(frozen=True)
class CollectiveSpec:
    """Which cost-model algorithm a backend's collective is recorded as, and what it really runs.

    What gloo (torch 2.13) runs, read from ProcessGroupGloo.cpp and gloo's sources, and checked
    against shaped-testbed timings:

    * allreduce: ``gloo::allreduce`` with no algorithm set, which gloo maps to its **ring**
      (reduce-scatter then allgather around a ring, in segments) for every size. Shaped runs
      match 2(p-1)/p n/B within 1-5% from 256 KiB up.
    * allgather: ``all_gather_into_tensor`` becomes ``allgather_coalesced`` -> ``gloo::allgather``,
      a **ring** (p-1 steps of one contribution); measured ~1.5x the ring's time at p = 2.
    * broadcast: ``gloo::broadcast``, a binomial tree whose ranks issue every later round's send at once
      (``gloo/broadcast.cc`` waits for pending sends only at the end), so the root feeds all its children
      together over one uplink: the cost model's ``binomial-async`` (p = 4: 3 n/B, not lg p n/B = 2 n/B;
      measured ~1.45x binomial at p = 4, within 1% at p = 2). Recorded as ``binomial``; validation prices
      it as ``binomial-async`` (:data:`real_backend.validate.IMPLEMENTED_AS`).
    * reduce-scatter: ``reduce_scatter_tensor_coalesced`` runs a **full ring allreduce** of the
      input and keeps this rank's chunk, so it moves 2(p-1)/p n, twice a real ring reduce-scatter.
      It is recorded as ``ring`` (the only reduce-scatter the cost model has); its fitted beta
      then comes out ~2x the link's s/byte, which is what gloo's reduce-scatter really costs.

    Calibration fits alpha and beta per (collective, algorithm), so each label carries its own
    effective parameters; the ``implementation`` column keeps the truth next to the label.
    NCCL chooses ring or tree itself (``NCCL_ALGO=Ring`` pins the ring the labels assume).
    """

    algorithm: str
    gloo: str
    nccl: str


COLLECTIVES: dict[str, CollectiveSpec] = {
    "allreduce": CollectiveSpec("ring", "gloo ring allreduce", "nccl allreduce (NCCL_ALGO decides)"),
    "allgather": CollectiveSpec("ring", "gloo ring allgather", "nccl allgather (ring)"),
    "broadcast": CollectiveSpec("binomial", "gloo binomial-tree broadcast", "nccl broadcast (pipelined ring)"),
    "reduce-scatter": CollectiveSpec(
        "ring", "gloo ring allreduce then local chunk (2x ring reduce-scatter bytes)", "nccl reduce-scatter (ring)"
    ),
}
DEFAULT_COLLECTIVES = tuple(COLLECTIVES)


# --- parsing --------------------------------------------------------------------------------


def parse_sizes(spec: str, field: str = "sizes") -> list[int]:
    """Bytes from ``MIN:MAX`` (doubling, both ends included), ``MIN:MAX:FACTOR`` or ``A,B,C``."""
    expected = "MIN:MAX (doubling, e.g. 1KiB:256MiB), MIN:MAX:FACTOR or a comma list such as 4KiB,1MiB"
    text = str(spec).strip()
    if not text:
        raise InputError(field, spec, expected)
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise InputError(field, spec, expected)
        low, high = (parse_size(p, field) for p in parts[:2])
        factor = 2.0
        if len(parts) == 3:
            try:
                factor = float(parts[2])
            except ValueError:
                raise InputError(field, spec, expected) from None
            if not (math.isfinite(factor) and factor > 1):
                raise InputError(field, spec, "a FACTOR > 1 in MIN:MAX:FACTOR")
        if low <= 0 or high < low:
            raise InputError(field, spec, "0 < MIN <= MAX in MIN:MAX")
        sizes, size = [], low
        while size <= high * (1 + 1e-12):
            sizes.append(int(size))
            size *= factor
    else:
        sizes = [int(parse_size(p, field)) for p in text.split(",") if p.strip()]
        if not sizes or any(s <= 0 for s in sizes):
            raise InputError(field, spec, "sizes > 0: " + expected)
    if any(s < ELEMENT_BYTES for s in sizes):
        raise InputError(field, spec, f"sizes >= {ELEMENT_BYTES} bytes (one float32)")
    if len(sizes) > MAX_SIZES:
        raise InputError(field, spec, f"at most {MAX_SIZES} sizes (use a larger FACTOR)")
    return sorted(set(sizes))


def parse_collectives(spec: str | Sequence[str]) -> list[str]:
    """Validated collective names from ``allreduce,allgather`` (``reduce_scatter`` also accepted)."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [c.strip().lower().replace("_", "-") for c in items if c.strip()]
    if not names:
        raise InputError("collectives", spec, "one or more of " + ", ".join(COLLECTIVES))
    for name in names:
        if name not in COLLECTIVES:
            raise InputError("collectives", name, "one or more of " + ", ".join(COLLECTIVES))
    return list(dict.fromkeys(names))


# --- sizes and bandwidths ---------------------------------------------------------------------


def element_count(collective: str, nbytes: int, ranks: int) -> int:
    """float32 elements for a requested size (reduce-scatter: a multiple of the ranks)."""
    numel = max(1, nbytes // ELEMENT_BYTES)
    if collective == "reduce-scatter":
        numel = max(ranks, numel - numel % ranks)
    return numel


def algorithm_bytes(collective: str, nbytes: float, ranks: int) -> float:
    """nccl-tests' ``S`` of algbw = S / t: the gathered output for allgather, else the vector."""
    return size_column(collective, nbytes, ranks)


def bandwidths(collective: str, nbytes: float, ranks: int, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s, busbw via :data:`costmodel.collectives.BUS_BANDWIDTH_FACTOR`."""
    algbw = algorithm_bytes(collective, nbytes, ranks) / seconds
    factor = float(BUS_BANDWIDTH_FACTOR[collective](np.float64(ranks)))
    return algbw, algbw * factor


# --- the CSV ----------------------------------------------------------------------------------


def check_output(path: str | Path) -> Path:
    """The output path, refused if it exists with other columns (appending would corrupt it)."""
    out = Path(path)
    if out.is_dir():
        raise InputError("out", str(out), "a CSV file path, not a directory")
    if out.exists() and out.stat().st_size > 0:
        with open(out, newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
        if tuple(h.strip() for h in header) != CSV_COLUMNS:
            raise InputError("out", str(out), "a new file or one written by bench-collectives (same columns)")
    try:  # here, once, rather than as a traceback on rank 0 after every rank has started
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a", encoding="utf-8"):
            pass
    except OSError as error:
        raise InputError("out", str(out), f"a CSV path this user can write ({error.strerror})") from None
    return out


class MeasurementWriter(AppendingCsv):
    """The measurement CSV (calibration columns first), appended and flushed per repetition."""

    def __init__(self, path: str | Path, fsync_every_s: float = FSYNC_EVERY_S) -> None:
        super().__init__(path, CSV_COLUMNS, fsync_every_s)


# --- the worker -------------------------------------------------------------------------------


def _operation(collective: str, numel: int, info: object):  # -> Callable[[], None]
    """A closure running one ``collective`` on preallocated buffers (no allocation while timed)."""
    import torch
    import torch.distributed as dist

    device, world = info.device, info.world_size  # type: ignore[attr-defined]
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    data = torch.ones(numel, dtype=torch.float32, device=device)
    if collective == "allreduce":
        return lambda: dist.all_reduce(data)
    if collective == "broadcast":
        return lambda: dist.broadcast(data, src=0)
    if collective == "allgather":
        out = torch.empty(numel * world, dtype=torch.float32, device=device)
        return lambda: gather(out, data)
    if collective == "reduce-scatter":
        out = torch.empty(numel // world, dtype=torch.float32, device=device)
        return lambda: scatter(out, data)
    raise InputError("collective", collective, "one of " + ", ".join(COLLECTIVES))


@dataclass(frozen=True, kw_only=True)
class BenchWorkerConfig:
    """What every rank of ``flexcomm bench-collectives`` runs: the parent's request, sent to the ranks as one
    JSON argument (:mod:`real_backend.worker_config`) and checked again where it is built, in each rank."""

    sizes_bytes: tuple[int, ...]  #: requested sizes (rounded down to whole elements per collective)
    out: str  #: the measurement CSV (absolute: ranks may run elsewhere)
    collectives: tuple[str, ...] = DEFAULT_COLLECTIVES
    warmup: int = 5  #: untimed operations per collective and size
    iters: int = 20  #: timed repetitions per collective and size
    link_class: str = "intra"
    backend: str | None = None
    op_timeout_s: float | None = None  #: per collective (the backend's timeout)
    quiet: bool = False  #: no table on stdout

    def __post_init__(self) -> None:
        parse_sizes(",".join(str(size) for size in self.sizes_bytes))
        parse_collectives(self.collectives)
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise InputError("warmup", self.warmup, "an integer >= 0")
        if isinstance(self.iters, bool) or not isinstance(self.iters, int) or self.iters < 1:
            raise InputError("iters", self.iters, "an integer >= 1")
        if self.op_timeout_s is not None and not self.op_timeout_s > 0:
            raise InputError("op-timeout", self.op_timeout_s, "seconds > 0")


def worker_main(config: BenchWorkerConfig) -> int:
    """One rank of the benchmark; rank 0 writes the CSV and prints the table."""
    import torch
    import torch.distributed as dist

    sizes = list(config.sizes_bytes)
    collectives = parse_collectives(config.collectives)
    info = init_from_env(backend=config.backend, timeout_s=config.op_timeout_s)
    rank, world = info.rank, info.world_size
    label = f"flexcomm bench: rank {rank}"
    # Slightly longer than the backend's own timeout, so gloo's error (clearer) usually comes first.
    watchdog = Watchdog(info.timeout_s + 10.0, label=label)
    writer = MeasurementWriter(config.out) if rank == 0 else None
    sync = torch.cuda.synchronize if info.backend == "nccl" else (lambda: None)
    barrier_args = {"device_ids": [info.device.index]} if info.backend == "nccl" else {}  # type: ignore[attr-defined]
    step = "rendezvous"
    status = 0
    try:
        if rank == 0 and not config.quiet:
            print(f"# flexcomm bench-collectives: {world} ranks, backend {info.backend}, "
                  f"warmup {config.warmup}, iters {config.iters}; time = median over iters of max over ranks")
            print(f"# {'collective':<15}{'algorithm':<10}{'size':>10}{'elements':>12}{'time':>11}"
                  f"{'algbw':>15}{'busbw':>15}")
        for collective in collectives:
            spec = COLLECTIVES[collective]
            impl = spec.nccl if info.backend == "nccl" else spec.gloo
            for requested in sizes:
                numel = element_count(collective, requested, world)
                nbytes = numel * ELEMENT_BYTES
                step = f"{collective} of {format_size(nbytes)}"
                op = _operation(collective, numel, info)
                for _ in range(config.warmup):
                    with watchdog.guard(f"warm-up {step}"):
                        op()
                        sync()
                times = []
                elapsed = torch.zeros(1, dtype=torch.float64, device=info.device)
                for rep in range(config.iters):
                    with watchdog.guard(step):
                        dist.barrier(**barrier_args)
                        start = time.perf_counter()
                        op()
                        sync()
                        elapsed.fill_(time.perf_counter() - start)
                        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                    seconds = float(elapsed.item())
                    times.append(seconds)
                    if writer is not None:
                        algbw, busbw = bandwidths(collective, nbytes, world, seconds)
                        writer.write({
                            "collective": collective, "algorithm": spec.algorithm, "ranks": world,
                            "bytes": nbytes, "seconds": seconds, "link_class": config.link_class, "rep": rep,
                            "backend": info.backend, "algbw_Bps": algbw, "busbw_Bps": busbw,
                            "implementation": impl,
                        })
                if rank == 0 and times and not config.quiet:
                    median = statistics.median(times)
                    algbw, busbw = bandwidths(collective, nbytes, world, median)
                    print(f"  {collective:<15}{spec.algorithm:<10}{format_size(nbytes):>10}{numel:>12}"
                          f"{format_time(median):>11}{format_bandwidth(algbw):>15}{format_bandwidth(busbw):>15}",
                          flush=True)
        step = "shutdown"
    except Exception as exc:  # a dead peer surfaces here as a RuntimeError from the backend
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"{label}: {step} failed ({type(exc).__name__}: {first}); a peer probably died or timed out",
              file=sys.stderr, flush=True)
        status = 1
    finally:
        if writer is not None:
            writer.close()
    if status == 0:
        with watchdog.guard("shutdown", timeout_s=30.0):
            shutdown()
    watchdog.close()
    return status


# --- the parent -------------------------------------------------------------------------------


def worker_command(
    sizes: Sequence[int],
    collectives: Sequence[str],
    warmup: int,
    iters: int,
    out: str | Path,
    link_class: str,
    backend: str | None = None,
    op_timeout_s: float | None = None,
    quiet: bool = False,
) -> list[str]:
    """The ``python -m flexcomm.real_backend.bench '<BenchWorkerConfig JSON>'`` command line every rank runs."""
    config = BenchWorkerConfig(
        sizes_bytes=tuple(int(s) for s in sizes), collectives=tuple(collectives), warmup=warmup, iters=iters,
        out=str(Path(out).resolve()), link_class=link_class, backend=backend or None,
        op_timeout_s=None if op_timeout_s is None else float(op_timeout_s), quiet=quiet)
    return [sys.executable, "-m", "flexcomm.real_backend.bench", to_argument(config)]


def run_benchmark(
    nproc: int | None,
    sizes: str | Sequence[int],
    out: str | Path,
    collectives: str | Sequence[str] = DEFAULT_COLLECTIVES,
    warmup: int = 5,
    iters: int = 20,
    backend: str | None = None,
    testbed: object | None = None,
    link_class: str | None = None,
    timeout_s: float | None = None,
    op_timeout_s: float | None = None,
    quiet: bool = False,
    log_dir: str | Path | None = None,
):  # -> real_backend.launch.LaunchResult
    """Benchmark collectives on ``nproc`` local ranks (or inside ``testbed``); rows go to ``out``.

    ``link_class`` defaults to ``intra`` for local ranks (one host) and ``inter`` on a testbed.
    """
    size_list = parse_sizes(sizes) if isinstance(sizes, str) else [int(s) for s in sizes]
    names = parse_collectives(collectives)
    if not isinstance(warmup, int) or warmup < 0:
        raise InputError("warmup", warmup, "an integer >= 0")
    if not isinstance(iters, int) or iters < 1:
        raise InputError("iters", iters, "an integer >= 1")
    if op_timeout_s is not None and not op_timeout_s > 0:
        raise InputError("op-timeout", op_timeout_s, "seconds > 0")
    klass = (link_class or ("inter" if testbed is not None else "intra")).strip().lower()
    if not klass:
        raise InputError("link-class", link_class, "a non-empty name such as intra or inter")
    path = check_output(out)
    if testbed is not None:
        ranks = testbed.ranks  # type: ignore[attr-defined]
        count = ranks if nproc is None else nproc
        if not 1 <= count <= ranks:
            raise InputError("nproc", nproc, f"1..{ranks} (the testbed's ranks)")
    else:
        count = 2 if nproc is None else nproc
        if count < 1:
            raise InputError("nproc", nproc, "an integer >= 1")
    # every rank holds an input and an output buffer of the largest size (allgather: nproc of them)
    largest = max(size_list)
    MAX_BENCH_BYTES.check("sizes", largest * count * (count + 1),
                          f"{format_size(largest)} on {count} ranks (the ranks' buffers, allgather's included)")
    cmd = worker_command(size_list, names, warmup, iters, path, klass, backend, op_timeout_s, quiet)
    if testbed is not None:
        return testbed.launch(cmd, nproc=count, timeout_s=timeout_s, backend=backend,  # type: ignore[attr-defined]
                              log_dir=log_dir)
    return launch(cmd, count, backend=backend, timeout_s=timeout_s, log_dir=log_dir)


if __name__ == "__main__":
    try:
        sys.exit(worker_main(config_from_argv(BenchWorkerConfig, "flexcomm bench")))
    except InputError as error:
        print(f"flexcomm bench: error: {error}", file=sys.stderr)
        sys.exit(2)
