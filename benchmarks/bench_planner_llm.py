"""Transformer plans priced per second (``flexcomm plan --model gpt``), on Megatron-LM's Table 1 models.

Why: the issue that built the transformer planner asks for >= 1,000 plans/s priced with the larger
search space (t, p, micro-batch size, virtual stages, sequence parallelism, recomputation, ZeRO). For each
row of the table the whole space is searched twice in this run: with the per-(micro-batch, t) layer cache
(as the planner runs) and without it (every plan prices its layer's GEMMs from scratch, the baseline);
both give identical step times. Rates are medians over ``--repeats``.

Run: ``.venv/bin/python benchmarks/bench_planner_llm.py [--repeats 3] [--check]`` (``--check``: exit 1
below 1,000 plans/s on any row).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

from _common import require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()
from flexcomm.planner.llm import megatron  # noqa: E402
from flexcomm.planner.llm.pricing import LLMPricer  # noqa: E402
from flexcomm.planner.llm.search import search  # noqa: E402
from flexcomm.planner.llm.timing import Hardware  # noqa: E402

GOAL = 1000.0


def _rate(row: megatron.MegatronRow, cache: bool) -> tuple[float, int, list[float]]:
    cluster = megatron.row_cluster(row)
    pricer = LLMPricer(row.model, Hardware.of(cluster), row.gpus, row.batch,
                       cluster.device.memory_bytes, cache=cache)
    result = search(pricer)
    return result.plans_per_s, len(result.costs), [c.step_s for c in result.costs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check", action="store_true", help=f"exit 1 below {GOAL:,.0f} plans/s on any row")
    args = parser.parse_args(argv)
    print(f"{'model':>7s} {'GPUs':>5s} {'plans':>6s} {'cached/s':>9s} {'uncached/s':>10s} {'speed-up':>8s}")
    slowest = float("inf")
    for row in megatron.TABLE_1:
        cached, uncached = [], []
        for _ in range(args.repeats):
            rate, count, steps = _rate(row, True)
            cached.append(rate)
            rate_u, _, steps_u = _rate(row, False)
            uncached.append(rate_u)
            assert steps == steps_u, "the cache changed a step time"
        c, u = statistics.median(cached), statistics.median(uncached)
        slowest = min(slowest, c)
        print(f"{row.label:>7s} {row.gpus:5d} {count:6d} {c:9,.0f} {u:10,.0f} {c / u:7.2f}x")
    print(f"slowest: {slowest:,.0f} plans/s (goal >= {GOAL:,.0f})")
    return 1 if args.check and slowest < GOAL else 0


if __name__ == "__main__":
    sys.exit(main())
