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

Run: ``python -m flexcomm.real_backend.gpu_topk --out results/gpu_check/topk.json [--sizes 1000000 25000000]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from flexcomm.compression import LocalCommunicator, make_compressor
from flexcomm.compression.compressors import Threshold
from flexcomm.costmodel.atomic import write_text_atomic

DEFAULT_SIZES = (1_000_000, 4_000_000, 11_689_512, 25_000_000)
DEFAULT_RATIOS = (0.01, 0.001)
SCHEMES = ("dense", "fp16", "topk-ag", "topk-ar", "threshold", "randomk")


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


def _one_size(device: torch.device, n: int, ratios: Sequence[float], repeats: int) -> list[dict]:
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
        print(f"n={n:>11,} ratio={ratio:<6} topk {row['topk_s'] * 1e3:8.3f} ms  kthvalue "
              f"{row['kthvalue_s'] * 1e3:8.3f} ms  sampled {row['sampled_s'] * 1e3:8.3f} ms  read "
              f"{read * 1e3:7.3f} ms  ({n / row['topk_s'] / 1e9:.2f} G elements/s by topk)", flush=True)
    return rows


def selection(device: torch.device, sizes: Sequence[int], ratios: Sequence[float], repeats: int) -> list[dict]:
    """Part 1: selection methods per size and ratio."""
    return [row for n in sizes for row in _one_size(device, int(n), ratios, repeats)]


def exchanges(device: torch.device, numel: int, workers: int, ratio: float, repeats: int) -> list[dict]:
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
        print(f"{scheme:<10} exchange {wall * 1e3:8.3f} ms  compress {rows[-1]['compress_s'] * 1e3:8.3f} ms  "
              f"decompress {rows[-1]['decompress_s'] * 1e3:8.3f} ms", flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexcomm.real_backend.gpu_topk",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(DEFAULT_SIZES))
    parser.add_argument("--ratios", type=float, nargs="*", default=list(DEFAULT_RATIOS))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4, help="emulated workers in part 2 (default 4)")
    parser.add_argument("--numel", type=int, default=11_689_512, help="gradient size in part 2 (ResNet-18)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_topk: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 69
    if args.repeats < 1 or args.workers < 1 or args.numel < 1 or any(s < 1 for s in args.sizes):
        print("gpu_topk: --repeats, --workers, --numel and --sizes must be >= 1", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"# gpu_topk on {name}, torch {torch.__version__}", flush=True)
    result = {"device": name, "torch": torch.__version__,
              "selection": selection(device, args.sizes, args.ratios, args.repeats),
              "exchanges": exchanges(device, args.numel, args.workers, min(args.ratios), max(1, args.repeats // 2))}
    if args.out is not None:

        write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
