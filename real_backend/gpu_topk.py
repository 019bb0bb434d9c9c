"""Top-k selection and compressor timings on a CUDA device (``benchmarks/bench_topk.py`` times the CPU only).

Why: the cost model and the flexible/MOO controllers charge compression at a selection rate
(:data:`compression.flexible.V100_TOPK_ELEMENTS_PER_S`, Tyagi & Swany's 0.75e9 elements/s on a V100);
this measures that rate on the GPU at hand. Part 1: ``torch.topk(|t|, k)``, the exact threshold by
``torch.kthvalue`` and the ``threshold`` compressor's sampled selection, against one read of the tensor
(``|t|.sum()``), for each size and ratio. Part 2: one exchange per compressor on a
:class:`compression.LocalCommunicator` of ``--workers`` emulated workers holding CUDA tensors, with the
per-worker compression/decompression critical path the :class:`compression.StepStats` records.

Every timing is bracketed by ``torch.cuda.synchronize`` (the kernels are asynchronous), warm-up first,
median of ``--repeats``. ``--device cpu`` runs the same code on the CPU (for a quick check without a GPU).

Run: ``python -m flexcomm.experiments.commands.gpu_topk --out results/gpu_check/topk.json [--sizes 1000000 25000000]``
(that module parses the flags and prints each row; :func:`measure` here returns them).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from flexcomm.compression import LocalCommunicator, make_compressor
from flexcomm.compression.compressors import Threshold
from flexcomm.costmodel.errors import InputError

DEFAULT_SIZES = (1_000_000, 4_000_000, 11_689_512, 25_000_000)
DEFAULT_RATIOS = (0.01, 0.001)
SCHEMES = ("dense", "fp16", "topk-ag", "topk-ar", "threshold", "randomk")

#: Receives each row as it is measured (the timings take a while; the command prints them as they come).
OnRow = Callable[[dict[str, Any]], None]


class NoCudaError(RuntimeError):
    """A CUDA device was asked for and torch sees none (a CPU-only build, or no GPU)."""


def cuda_device(name: str) -> torch.device:
    """``name`` as a torch device (``cuda``, ``cuda:N``, ``cpu``); :class:`NoCudaError` for CUDA without one."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise NoCudaError("no CUDA device (torch.cuda.is_available() is False)")
    return device


def device_name(device: torch.device) -> str:
    """The GPU's own name, ``cpu`` on the CPU."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 2) -> float:
    """Median wall seconds of ``fn``, each call bracketed by a device synchronize."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _one_size(device: torch.device, n: int, ratios: Sequence[float], repeats: int,
              on_row: OnRow | None) -> list[dict]:
    t = torch.randn(int(n), device=device)
    magnitude = t.abs()
    read = median_seconds(lambda: magnitude.sum(), device, repeats)
    rows = []
    for ratio in ratios:
        k = max(1, int(n * ratio))
        sampler = Threshold(ratio)
        gen = torch.Generator(device=device).manual_seed(0)

        def topk(k: int = k) -> object:
            return torch.topk(magnitude, k, sorted=False)

        def kth(k: int = k) -> object:
            return (magnitude >= torch.kthvalue(magnitude, n - k + 1).values).nonzero()

        def sampled(k: int = k, sampler: Threshold = sampler, gen: torch.Generator = gen) -> object:
            return sampler.select(t, k, gen)

        row = {"numel": int(n), "ratio": ratio, "k": k, "read_s": read,
               "topk_s": median_seconds(topk, device, repeats), "kthvalue_s": median_seconds(kth, device, repeats),
               "sampled_s": median_seconds(sampled, device, repeats)}
        row["topk_elements_per_s"] = n / row["topk_s"] if row["topk_s"] > 0 else None
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def selection(device: torch.device, sizes: Sequence[int], ratios: Sequence[float], repeats: int,
              on_row: OnRow | None = None) -> list[dict]:
    """Part 1: selection methods per size and ratio."""
    return [row for n in sizes for row in _one_size(device, int(n), ratios, repeats, on_row)]


def exchanges(device: torch.device, numel: int, workers: int, ratio: float, repeats: int,
              on_row: OnRow | None = None) -> list[dict]:
    """Part 2: one exchange per compressor on ``workers`` emulated workers, with its compression critical path."""
    comm = LocalCommunicator(workers)
    gen = torch.Generator(device=device).manual_seed(0)
    grads = [torch.randn(numel, device=device, generator=gen) for _ in range(workers)]
    rows = []
    for scheme in SCHEMES:
        comp = make_compressor(scheme, ratio if scheme in ("topk-ag", "topk-ar", "threshold", "randomk") else None)
        stats = []

        def once(comp=comp, stats=stats) -> None:
            stats.append(comp.exchange([g.clone() for g in grads], comm).stats)

        wall = median_seconds(once, device, repeats)
        tail = stats[-repeats:]
        rows.append({"scheme": scheme, "numel": numel, "workers": workers, "ratio": ratio, "exchange_s": wall,
                     "compress_s": statistics.median(s.compress_time_s for s in tail),
                     "decompress_s": statistics.median(s.decompress_time_s for s in tail),
                     "payload_bytes": tail[-1].payload_bytes})
        if on_row is not None:
            on_row(rows[-1])
    return rows


def check_counts(sizes: Sequence[int], repeats: int, workers: int, numel: int) -> None:
    """Refuse a count below 1 (an empty timing, no worker, an empty tensor) as one line naming it."""
    for field, value in (("repeats", repeats), ("workers", workers), ("numel", numel),
                         *(("sizes", size) for size in sizes)):
        if value < 1:
            raise InputError(field, value, "an integer >= 1")


def measure(device: torch.device, sizes: Sequence[int] = DEFAULT_SIZES, ratios: Sequence[float] = DEFAULT_RATIOS,
            repeats: int = 10, workers: int = 4, numel: int = 11_689_512, on_selection: OnRow | None = None,
            on_exchange: OnRow | None = None) -> dict[str, Any]:
    """Both parts on ``device`` (the exchanges at the smallest ratio, half the repeats): the device, torch's
    version and the rows of each part, as ``topk.json`` holds them."""
    check_counts(sizes, repeats, workers, numel)
    return {"device": device_name(device), "torch": torch.__version__,
            "selection": selection(device, sizes, ratios, repeats, on_selection),
            "exchanges": exchanges(device, numel, workers, min(ratios), max(1, repeats // 2), on_exchange)}
