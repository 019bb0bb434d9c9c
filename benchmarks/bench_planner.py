"""How many candidate parallel plans the planner prices per second: cached vs uncached pricing, on one core.

Why: the planner's value is searching the whole (dp, tp, pp, micro-batches, ZeRO, order) space
under memory limits in well under a second, so a cluster change can be re-planned at once; the
simulator is kept for the few best. Per case it times one full enumeration priced by

* cached: one :class:`planner.plans.Pricer` for the whole search (stage partitions, collective
  coefficients and group links shared between the plans that need them), what ``flexcomm plan``
  does;
* uncached: ``cache=False``, every plan recomputes its partition, coefficients and links (the
  baseline a naive loop would be);

checks both give the same step times, and reports plans/s, the speed-up, and how many plans per
second the simulator replays (the top-few re-ranking). Median of ``--repeats``.

``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_planner.py`` (``--quick``: fewer repeats, smaller GPT).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from _common import pin_one_cpu, require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()
import torch  # noqa: E402

from flexcomm.planner.graphs import build_graph  # noqa: E402
from flexcomm.planner.pipeline_units import build_units  # noqa: E402
from flexcomm.planner.plans import Pricer  # noqa: E402
from flexcomm.planner.rank_devices import load_plan_cluster  # noqa: E402
from flexcomm.planner.search import enumerate_plans  # noqa: E402
from flexcomm.planner.simulate import simulate_plan  # noqa: E402

GPT_13B = {"layers": 24, "hidden": 2048, "heads": 16, "seq_len": 2048}  # GPT-3 XL shape, 1.3B
GPT_QUICK = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024}

CASES = [
    ("gpt", "4x8-a100-ib", 64),
    ("resnet50", "8x1-10gbe", 256),
    ("gpt", "4x4-a100-v100", 64),
    ("inception", "16x8-h100-2to1", 1024),
]


def _rate(units, cluster, batch: int, cache: bool, repeats: int) -> tuple[float, list[float], int]:
    rates, steps, count = [], [], 0
    for _ in range(repeats):
        pricer = Pricer(units, cluster, batch, cache=cache)
        plans = enumerate_plans(pricer)
        start = time.perf_counter()
        steps = [pricer.price(cfg).step_s for cfg in plans]
        rates.append(len(plans) / (time.perf_counter() - start))
        count = len(plans)
    return statistics.median(rates), steps, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats; the median is reported")
    parser.add_argument("--simulate", type=int, default=3, help="plans replayed on the simulator per case")
    parser.add_argument("--quick", action="store_true", help="one repeat, a smaller GPT, no inception case")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the process to one CPU")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.simulate < 0:
        parser.error("--repeats must be >= 1 and --simulate >= 0")
    repeats = 1 if args.quick else args.repeats
    cpu = None if args.no_pin else pin_one_cpu()
    torch.set_num_threads(1)
    print(f"plans priced per second, median of {repeats}; CPU pinned: {cpu if cpu is not None else 'no'}")
    print(f"{'model':<12}{'cluster':<18}{'plans':>7}{'cached/s':>11}{'uncached/s':>12}{'speed-up':>10}"
          f"{'simulated/s':>13}")
    results = []
    for model, cluster_name, batch in CASES[:3] if args.quick else CASES:
        options = (GPT_QUICK if args.quick else GPT_13B) if model == "gpt" else {}
        units = build_units(build_graph(model, batch_size=1, **options))
        cluster = load_plan_cluster(cluster_name)
        cached, steps_c, count = _rate(units, cluster, batch, True, repeats)
        uncached, steps_u, _ = _rate(units, cluster, batch, False, repeats)
        if steps_c != steps_u:
            raise SystemExit(f"{model} on {cluster_name}: cached and uncached pricing disagree")
        pricer = Pricer(units, cluster, batch)
        costs = sorted((pricer.price(c) for c in enumerate_plans(pricer)), key=lambda c: c.step_s)
        feasible = [c for c in costs if c.feasible][: args.simulate]
        sim_rate = float("nan")
        if feasible:
            start = time.perf_counter()
            for cost in feasible:
                simulate_plan(pricer, cost)
            sim_rate = len(feasible) / (time.perf_counter() - start)
        row = {"model": model, "cluster": cluster_name, "batch": batch, "plans": count,
               "cached_plans_per_s": cached, "uncached_plans_per_s": uncached, "speedup": cached / uncached,
               "simulated_plans_per_s": sim_rate}
        results.append(row)
        print(f"{model:<12}{cluster_name:<18}{count:>7}{cached:>11,.0f}{uncached:>12,.0f}{cached / uncached:>9.1f}x"
              f"{sim_rate:>13.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"benchmark": "planner-plans-per-second", "repeats": repeats,
                                         "pinned_cpu": cpu, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
