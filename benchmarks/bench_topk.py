"""How expensive is selecting the top-k on a CPU, and what does each compressor add to a step?

Why: the paper treats compression time as a constant that does not depend on c; on CPUs (gloo
backends, the emulation) torch.topk over a fused 10-25M gradient costs a large multiple of one pass
over memory, so the choice of selection method decides whether sparse schemes pay off at all.

Part 1, selection on n floats (k = 1% by default), median of ``--repeats`` runs, against reading the
tensor once (``|t|.sum()``, memory-bandwidth bound) and copying it:

* ``topk``: ``torch.topk(|t|, k, sorted=False)``;
* ``kthvalue``: the exact threshold by ``torch.kthvalue`` then a mask and ``nonzero``;
* ``sampled``: the ``threshold`` compressor's selection (DGC): top-k of a 1% random sample gives the
  threshold, mask + ``nonzero``, then an exact top-k among the selected when there are more than k
  (``sampled-1pass`` skips that); ``count/k`` shows how far the count drifts.

Part 2, one exchange of a ResNet-18-sized gradient (11,689,512 floats) by N=4 emulated workers on a
:class:`~compression.comm.LocalCommunicator`, per scheme: wall time of the exchange (the 4 workers run
one after another), the per-worker critical-path compression and decompression times the
:class:`~compression.base.StepStats` record, and both against the dense exchange.

Run: ``.venv/bin/python benchmarks/bench_topk.py [--quick] [--threads 1] [--json PATH]``. One thread by
default (``OMP_NUM_THREADS`` and ``torch.set_num_threads``): 2 threads did not speed up topk or
kthvalue on the 2-core dev VM, and benchmarks must not fight the other core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402
from _common import require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()
from flexcomm.compression import LocalCommunicator, make_compressor  # noqa: E402
from flexcomm.compression.compressors import COMPRESSORS, Threshold  # noqa: E402

RESNET18 = 11_689_512
#: Untimed exchanges first: residuals exist, and PowerSGD is past its dense start (start_iter=2).
WARMUP_STEPS = 3


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall seconds of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def selection_row(t: torch.Tensor, ratio: float, repeats: int) -> dict:
    """Median seconds of every selection method on one tensor, and the sampled count's drift."""
    n = t.numel()
    k = max(1, int(n * ratio))
    magnitude = t.abs()
    selectors = {"sampled": Threshold(ratio), "sampled-1pass": Threshold(ratio, second_pass=False)}
    counts: dict[str, list[float]] = {label: [] for label in selectors}

    def sampled(label: str) -> None:
        idx = selectors[label].select(t, k, torch.Generator().manual_seed(len(counts[label])))
        counts[label].append(idx.numel() / k)

    def kth() -> torch.Tensor:
        threshold = torch.kthvalue(magnitude, n - k + 1).values
        return torch.nonzero(magnitude >= threshold)

    timings = {
        "read": median_time(lambda: t.abs().sum(), repeats),
        "copy": median_time(lambda: t.clone(), repeats),
        "topk": median_time(lambda: torch.topk(t.abs(), k, sorted=False), repeats),
        "kthvalue": median_time(kth, repeats),
        "sampled": median_time(lambda: sampled("sampled"), repeats),
        "sampled-1pass": median_time(lambda: sampled("sampled-1pass"), repeats),
    }
    return {"n": n, "k": k, "seconds": timings, "count_over_k": {key: (min(v), max(v)) for key, v in counts.items()}}


def selection_table(sizes: list[int], ratio: float, repeats: int) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    return [selection_row(torch.randn(n, generator=gen), ratio, repeats) for n in sizes]


def print_selection(rows: list[dict]) -> None:
    methods = ["read", "copy", "topk", "kthvalue", "sampled", "sampled-1pass"]
    print(f"{'n':>11} " + " ".join(f"{m + ' ms':>17}" for m in methods) + "   topk/read  topk/sampled  count/k (1pass)")
    for row in rows:
        s = row["seconds"]
        cells = " ".join(f"{1e3 * s[m]:17.1f}" for m in methods)
        lo, hi = row["count_over_k"]["sampled-1pass"]
        print(f"{row['n']:>11,} {cells}   {s['topk'] / s['read']:9.1f}x {s['topk'] / s['sampled']:12.1f}x"
              f"  {lo:.2f}-{hi:.2f}")


def overhead_table(numel: int, workers: int, ratio: float, repeats: int) -> list[dict]:
    comm = LocalCommunicator(workers)
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(numel, generator=gen) for _ in range(workers)]
    rows = []
    for name, cls in COMPRESSORS.items():
        comp = make_compressor(name, ratio if cls.needs_ratio else None, gain_every=0)
        stats = []

        def step(comp=comp, stats=stats) -> None:
            stats.append(comp.exchange(grads, comm).stats)

        wall = median_time(step, repeats, warmup=WARMUP_STEPS)
        stats = stats[WARMUP_STEPS:]
        rows.append({
            "scheme": name,
            "wall_s": wall,
            "compress_s": statistics.median(s.compress_time_s for s in stats),
            "decompress_s": statistics.median(s.decompress_time_s for s in stats),
            "comm_s": statistics.median(s.comm_time_s for s in stats),
            "payload_bytes": stats[-1].payload_bytes,
            "local_gain": stats[-1].local_gain,
        })
    return rows


def print_overhead(rows: list[dict], numel: int, workers: int, ratio: float) -> None:
    dense = next(r for r in rows if r["scheme"] == "dense")["wall_s"]
    print(f"\nOne exchange of {numel:,} floats by {workers} emulated workers (sparse ratio {ratio}); "
          f"dense exchange = {1e3 * dense:.1f} ms")
    print(f"{'scheme':>15} {'wall ms':>9} {'wall/dense':>10} {'compress ms':>11} {'decomp ms':>9} {'comm ms':>8} "
          f"{'compress/dense':>14} {'bytes/rank':>11} {'local gain':>10}")
    for r in rows:
        gain = f"{r['local_gain']:.3f}" if r["local_gain"] is not None else "-"
        print(f"{r['scheme']:>15} {1e3 * r['wall_s']:9.1f} {r['wall_s'] / dense:9.2f}x {1e3 * r['compress_s']:11.1f} "
              f"{1e3 * r['decompress_s']:9.1f} {1e3 * r['comm_s']:8.1f} {r['compress_s'] / dense:13.2f}x "
              f"{r['payload_bytes']:>11,} {gain:>10}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and 2 repeats (~10 s)")
    parser.add_argument("--sizes", type=int, nargs="*", help="selection sizes (default 1M 4M 11.7M 25M)")
    parser.add_argument("--ratio", type=float, default=0.01, help="fraction of elements kept (default 0.01)")
    parser.add_argument("--repeats", type=int, help="timed runs per cell (default 5; 2 with --quick)")
    parser.add_argument("--workers", type=int, default=4, help="emulated workers in part 2 (default 4)")
    parser.add_argument("--numel", type=int, help=f"gradient size in part 2 (default {RESNET18:,}, ResNet-18)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--json", type=Path, help="also write the tables as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = args.sizes or ([1_000_000, 4_000_000] if args.quick else [1_000_000, 4_000_000, RESNET18, 25_000_000])
    repeats = args.repeats or (2 if args.quick else 5)
    numel = args.numel or (1_000_000 if args.quick else RESNET18)
    overhead_repeats = 1 if args.quick else max(1, (repeats + 1) // 2)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), ratio {args.ratio}, "
          f"median of {repeats}")
    selection = selection_table(sizes, args.ratio, repeats)
    print_selection(selection)
    overhead = overhead_table(numel, args.workers, args.ratio, overhead_repeats)
    print_overhead(overhead, numel, args.workers, args.ratio)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"threads": torch.get_num_threads(), "ratio": args.ratio,
                                         "selection": selection, "overhead": overhead}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
