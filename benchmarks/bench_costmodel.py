"""How many cost-model evaluations per second: vectorised numpy vs plain Python loops, on one core.

Why: sweeps over (size, ranks, alpha, beta) grids and the planner's what-if tables rely on the
vectorised formulas being orders of magnitude faster than a loop; this keeps that claim measured.

Three ways of pricing the same configurations, each the full time alpha*a + beta*b + gamma*g:

* vectorised: one call of the public formula on arrays of every configuration, then ``.time()``;
* python loop: the same formula re-typed with ``math`` on Python floats (a faithful baseline);
* public per scalar: the public formula called once per configuration with scalars.

Run with one thread: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_costmodel.py``. The
script also sets the BLAS/OpenMP thread variables before importing numpy and pins itself to one CPU
where the OS allows (numpy's elementwise ufuncs are single-threaded anyway).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Before numpy loads its BLAS/OpenMP runtimes, which read these once.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from _common import pin_one_cpu, require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()
from flexcomm.costmodel.collective_formulas import PIPELINE_SEGMENT_BYTES  # noqa: E402
from flexcomm.costmodel.collectives import formula  # noqa: E402

THRESHOLD = 1e6  # evaluations/s the vectorised path must reach for --check


def _lg_ceil(p: float) -> float:
    return float(math.ceil(math.log2(p))) if p > 1 else 0.0


def _ring(n: float, p: float, a: float, b: float, g: float) -> float:
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g


def _rabenseifner(n: float, p: float, a: float, b: float, g: float) -> float:
    if p <= 1:
        return 0.0
    lg = _lg_ceil(p)
    return 2 * lg * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g


def _tree(n: float, p: float, a: float, b: float, g: float) -> float:
    if p <= 1:
        return 0.0
    lg = _lg_ceil(p)
    return 2 * lg * a + 2 * lg * n * b + lg * n * g


def _recursive_doubling(n: float, p: float, a: float, b: float, g: float) -> float:
    if p <= 1:
        return 0.0
    lg = float(math.floor(math.log2(p)))
    extra = 0.0 if 2.0**lg == p else 2.0
    return (lg + extra) * a + n * (lg + extra) * b + n * (lg + min(extra, 1.0)) * g


def _bruck(m: float, p: float, a: float, b: float, g: float) -> float:
    if p <= 1:
        return 0.0
    return _lg_ceil(p) * a + (p - 1) * m * b


def _pipelined_broadcast(n: float, p: float, a: float, b: float, g: float) -> float:
    if p <= 1:
        return 0.0
    segments = max(1.0, math.ceil(n / PIPELINE_SEGMENT_BYTES))
    return (p - 2 + segments) * a + (n + (p - 2) * min(n, PIPELINE_SEGMENT_BYTES)) * b


Scalar = Callable[[float, float, float, float, float], float]
CASES: list[tuple[str, str, Scalar]] = [
    ("allreduce", "ring", _ring),
    ("allreduce", "rabenseifner", _rabenseifner),
    ("allreduce", "tree", _tree),
    ("allreduce", "recursive-doubling", _recursive_doubling),
    ("allgather", "bruck", _bruck),
    ("broadcast", "pipelined-ring", _pipelined_broadcast),
]


def make_configs(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Log-uniform sizes 1 KiB-1 GiB, ranks 1-1024, alpha 1 us-1 ms, bandwidth 100 MB/s-100 GB/s."""
    rng = np.random.default_rng(seed)
    return {
        "sizes": np.exp2(rng.uniform(10, 30, count)),
        "ranks": rng.integers(1, 1025, count).astype(float),
        "alphas": 10.0 ** rng.uniform(-6, -3, count),
        "betas": 1.0 / 10.0 ** rng.uniform(8, 11, count),
        "gammas": 1.0 / 10.0 ** rng.uniform(9, 11, count),
    }


def _median_rate(run: Callable[[], object], evaluations: int, repeats: int) -> tuple[float, object]:
    rates, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        rates.append(evaluations / (time.perf_counter() - start))
    return statistics.median(rates), out


def bench_case(
    collective: str,
    algorithm: str,
    scalar: Scalar,
    configs: dict[str, np.ndarray],
    loop_evaluations: int,
    call_evaluations: int,
    repeats: int,
) -> dict[str, float | str | int]:
    fn = formula(collective, algorithm)
    n, p, a, b, g = (configs[k] for k in ("sizes", "ranks", "alphas", "betas", "gammas"))
    total = len(n)

    vec_rate, vec = _median_rate(lambda: fn(n, p).time(a, b, g).total, total, repeats)

    rows = list(zip(*(x[:loop_evaluations].tolist() for x in (n, p, a, b, g)), strict=True))
    loop_rate, looped = _median_rate(lambda: [scalar(*row) for row in rows], len(rows), repeats)
    if not np.allclose(np.asarray(looped), np.asarray(vec)[: len(rows)], rtol=1e-12, atol=0.0):
        raise SystemExit(f"{collective}/{algorithm}: the Python baseline disagrees with the formula")

    calls = rows[:call_evaluations]
    call_rate, _ = _median_rate(lambda: [float(fn(r[0], r[1]).time(r[2], r[3], r[4]).total) for r in calls],
                                len(calls), repeats)  # fmt: skip
    return {
        "collective": collective,
        "algorithm": algorithm,
        "vectorised_evals_per_s": vec_rate,
        "python_loop_evals_per_s": loop_rate,
        "public_per_scalar_evals_per_s": call_rate,
        "speedup_vs_loop": vec_rate / loop_rate,
        "speedup_vs_per_scalar": vec_rate / call_rate,
        "vectorised_evaluations": total,
        "loop_evaluations": len(rows),
        "per_scalar_evaluations": len(calls),
    }


def _fmt(rate: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if rate >= scale:
            return f"{rate / scale:.2f}{suffix}"
    return f"{rate:.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--evaluations", type=int, default=1_000_000, help="configurations per vectorised call")
    add("--repeats", type=int, default=5, help="timed repeats; the median is reported")
    add("--loop-evaluations", type=int, default=200_000, help="configurations in the Python loop")
    add("--call-evaluations", type=int, default=20_000, help="scalar calls of the public formula")
    add("--no-pin", action="store_true", help="do not pin the process to one CPU")
    add("--check", action="store_true", help=f"exit 1 if any vectorised rate < {THRESHOLD:.0e}/s")
    add("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.evaluations < 1 or args.repeats < 1 or args.loop_evaluations < 1 or args.call_evaluations < 1:
        parser.error("counts must be >= 1")

    cpu = None if args.no_pin else pin_one_cpu()
    configs = make_configs(args.evaluations)
    loop_n = min(args.loop_evaluations, args.evaluations)
    call_n = min(args.call_evaluations, loop_n)
    results = [bench_case(c, alg, scalar, configs, loop_n, call_n, args.repeats) for c, alg, scalar in CASES]

    print(
        f"cost-model evaluations/s, median of {args.repeats}; vectorised over {args.evaluations:,} configs, "
        f"loop {loop_n:,}, per-scalar calls {call_n:,}; CPU pinned: {cpu if cpu is not None else 'no'}; "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    header = ("algorithm", "vectorised", "python loop", "public/scalar", "vec/loop", "vec/scalar")
    print(f"{header[0]:<30}{header[1]:>12}{header[2]:>13}{header[3]:>15}{header[4]:>10}{header[5]:>12}")
    for r in results:
        name = f"{r['collective']}/{r['algorithm']}"
        print(
            f"{name:<30}{_fmt(float(r['vectorised_evals_per_s'])):>12}"
            f"{_fmt(float(r['python_loop_evals_per_s'])):>13}"
            f"{_fmt(float(r['public_per_scalar_evals_per_s'])):>15}"
            f"{float(r['speedup_vs_loop']):>9.1f}x{float(r['speedup_vs_per_scalar']):>11.0f}x"
        )

    slow = [r for r in results if float(r["vectorised_evals_per_s"]) < THRESHOLD]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "benchmark": "costmodel-evaluations",
            "evaluations": args.evaluations,
            "repeats": args.repeats,
            "pinned_cpu": cpu,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "machine": platform.machine(),
            "threshold_evals_per_s": THRESHOLD,
            "results": results,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    if args.check and slow:
        names = ", ".join(f"{r['collective']}/{r['algorithm']}" for r in slow)
        print(f"check failed: vectorised below {THRESHOLD:.0e} evaluations/s for {names}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
