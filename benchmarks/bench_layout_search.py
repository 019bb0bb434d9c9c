"""The whole layout search of a 671B MoE (DeepSeek-V3) on 1,024 H100s: wall time against the goal.

Why: the issue that built the layout planner asks for the whole plan search of a 671B MoE on 1,024 GPUs in
under 10 s on this machine (TP, CP, PP with virtual stages, EP, micro-batch, FSDP, recomputation: ~33,000
layouts, each with its fastest CP exchange and EP dispatcher). Baseline in the same run: the same search
without the per-(TP, CP, micro-batch, EP, precision, exchange) layer, stage-split and exchange caches, every
layout pricing each exchange's layers and its pipeline split from scratch; both must give identical step
times. Times are medians over ``--repeats``.

Run: ``.venv/bin/python benchmarks/bench_layout_search.py [--repeats 3] [--check]`` (``--check``: exit 1 over
the goal).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from _common import require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()
from flexcomm.costmodel.cluster import load_cluster  # noqa: E402
from flexcomm.planner.llm.layout_search import search_layouts  # noqa: E402
from flexcomm.planner.llm.layout_step import LayoutPricer, cluster_of  # noqa: E402
from flexcomm.planner.llm.presets import preset  # noqa: E402

GOAL_S = 10.0
GPUS, BATCH, SEQ_LEN, PRECISION = 1024, 8192, 4096, "fp8-cs"


def _search(cache: bool) -> tuple[float, int, list[float]]:
    started = time.perf_counter()
    pricer = LayoutPricer(preset("deepseek-v3"), cluster_of(load_cluster("dgx-h100"), GPUS), cache=cache)
    found = search_layouts(pricer, GPUS, BATCH, SEQ_LEN, PRECISION)
    return time.perf_counter() - started, len(found.costs), [c.step_s for c in found.costs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check", action="store_true", help=f"exit 1 over {GOAL_S:g} s")
    args = parser.parse_args(argv)
    cached, uncached = [], []
    for _ in range(args.repeats):
        seconds, count, steps = _search(True)
        cached.append(seconds)
        seconds_u, _, steps_u = _search(False)
        uncached.append(seconds_u)
        assert steps == steps_u, "the cache changed a step time"
    c, u = statistics.median(cached), statistics.median(uncached)
    print(f"deepseek-v3 on {GPUS:,} H100s, batch {BATCH:,} x {SEQ_LEN:,} tokens, {PRECISION}: {count:,} layouts")
    print(f"search: {c:.2f} s with the layer cache, {u:.2f} s without ({u / c:.1f}x); goal < {GOAL_S:g} s")
    return 1 if args.check and c > GOAL_S else 0


if __name__ == "__main__":
    sys.exit(main())
