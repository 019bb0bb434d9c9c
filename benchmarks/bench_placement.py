"""Placement: placements priced per second, and search time to reach within 5% of the best found.

Why: every placer here is only as fast as the simulator that prices its candidates, and the point
of asynchronous ES is to waste less wall time than synchronous ES when evaluations take different
times; both claims are measured here, each against a baseline measured in the same run.

1. **Pricing rate** (pinned to one CPU): random placements of each graph priced by the compiled
   event simulator (``PlacementProblem.step_time``) against the plain reference loop that walks the
   networkx graph (``placement.reference``), contention off so both price the same schedule (the
   two are checked to agree on every placement the reference times).
2. **Search time to within 5%**: PPO, sync ES and async ES, each under the same wall-clock budget
   on the same problem (ES from the single-device placement, so the search does all the work;
   evaluations also wait ``--measure-steps`` simulated step times x a log-normal factor, as
   measurements would). The target is the best step time any of the three found; the table gives
   each method's wall time to come within 5% of it and async ES's time as a ratio of sync ES's.

Run: ``.venv/bin/python benchmarks/bench_placement.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from _common import pin_one_cpu, require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()
from flexcomm.costmodel.cluster import load_cluster  # noqa: E402
from flexcomm.placement.compare import compare, time_to_within  # noqa: E402
from flexcomm.placement.devices import DeviceSet  # noqa: E402
from flexcomm.placement.es import ESConfig  # noqa: E402
from flexcomm.placement.ppo import PPOConfig  # noqa: E402
from flexcomm.placement.reference import reference_makespan  # noqa: E402
from flexcomm.placement.simulator import PlacementProblem  # noqa: E402
from flexcomm.placement.toy import random_dag  # noqa: E402


def _rate(fn, placements: list[list[int]], repeats: int) -> float:
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for p in placements:
            fn(p)
        rates.append(len(placements) / (time.perf_counter() - start))
    return statistics.median(rates)


def pricing(graphs: dict[str, object], devices: DeviceSet, count: int, ref_count: int, repeats: int) -> list[dict]:
    rows = []
    for name, graph in graphs.items():
        problem = PlacementProblem(graph, devices, contention=False)
        rng = np.random.default_rng(0)
        placements = [rng.integers(0, devices.count, len(problem.nodes)).tolist() for _ in range(count)]
        few = placements[:ref_count]
        for p in few:
            fast, ref = problem.simulate(p).makespan_s, reference_makespan(problem, p)
            if abs(fast - ref) > 1e-9 * ref:
                raise SystemExit(f"{name}: simulator {fast} and reference {ref} disagree")
        sim_rate = _rate(problem.step_time, placements, repeats)
        ref_rate = _rate(lambda p, pr=problem: reference_makespan(pr, p), few, 1)
        rows.append({"graph": name, "ops": len(problem.nodes), "simulator_per_s": sim_rate,
                     "reference_per_s": ref_rate, "speedup": sim_rate / ref_rate})
    return rows


def search(model: str, batch: int, cluster: str, devices: int, micro: int, budget: float, workers: int,
           measure: float, seed: int) -> dict:
    from flexcomm.planner.graphs import build_graph

    problem = PlacementProblem(build_graph(model, batch_size=batch),
                               DeviceSet.from_cluster(load_cluster(cluster), devices), micro_batches=micro)
    es = ESConfig(workers=workers, budget_s=budget, measure_steps=measure, seed=seed)
    cmp = compare(problem, ["ppo", "es", "async-es"], es=es, ppo=PPOConfig(budget_s=budget, seed=seed),
                  es_start="single")
    target = min(r.step_time_s for r in cmp.results if r.method in ("ppo", "sync-es", "async-es"))
    target_es = min(r.step_time_s for r in cmp.results if r.method in ("sync-es", "async-es"))
    rows = []
    for r in cmp.results:
        curve = cmp.curves.get(r.method)
        rows.append({"method": r.method, "step_time_ms": r.step_time_s * 1e3, "evaluations": r.evaluations,
                     "time_to_5pct_s": time_to_within(curve, target) if curve else None,
                     "time_to_5pct_of_es_best_s": time_to_within(curve, target_es) if curve else None})
    by = {row["method"]: row for row in rows}
    a, s = by["async-es"]["time_to_5pct_of_es_best_s"], by["sync-es"]["time_to_5pct_of_es_best_s"]
    return {"problem": f"{model} b{batch} M{micro} on {devices} of {cluster}", "target_ms": target * 1e3,
            "target_es_ms": target_es * 1e3, "rows": rows,
            "async_over_sync_time": (a / s) if (a is not None and s is not None and 0 < s < np.inf) else None,
            "start": cmp.start_method}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="small counts and a 5 s search budget")
    add("--budget-s", type=float, help="search budget per method (default 20, quick 5)")
    add("--workers", type=int, default=2, help="ES workers (default 2)")
    add("--measure-steps", type=float, default=5.0, help="simulated steps each ES evaluation waits (default 5)")
    add("--model", default="inception", help="graph of the search part (default inception)")
    add("--no-search", action="store_true", help="only the pricing rates")
    add("--no-pricing", action="store_true", help="only the search comparison")
    add("--seeds", type=int, default=1, help="repeat the search comparison with seeds 0..N-1 (default 1)")
    add("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    budget = args.budget_s or (5.0 if args.quick else 20.0)

    results: dict = {"benchmark": "placement", "python": platform.python_version(), "machine": platform.machine()}
    if not args.no_search:

        def shown(t: float | None) -> str:
            return "-" if t is None else ("never" if not np.isfinite(t) else f"{t:.2f} s")

        runs = []
        for seed in range(args.seeds):
            out = search(args.model, 128, "4x8-a100-ib", 8, 4, budget, args.workers, args.measure_steps, seed)
            runs.append(out)
            print(f"seed {seed}: search to within 5% of the best found ({out['target_ms']:.4g} ms), {out['problem']}, "
                  f"{budget:g} s each, {args.workers} ES workers, ES from {out['start']}; baselines for reference")
            print(f"{'method':<16}{'best (ms)':>11}{'evaluations':>13}{'to 5% of best':>15}{'to 5% of ES best':>18}")
            for row in out["rows"]:
                print(f"{row['method']:<16}{row['step_time_ms']:>11.4g}{row['evaluations']:>13}"
                      f"{shown(row['time_to_5pct_s']):>15}{shown(row['time_to_5pct_of_es_best_s']):>18}")
            ratio = out["async_over_sync_time"]
            print(f"async ES / sync ES wall time to within 5% of the better ES's best ({out['target_es_ms']:.4g} ms): "
                  + ("n/a" if ratio is None else f"{ratio:.2f}") + "\n")
        results["search"] = runs
        if len(runs) > 1:
            best = {m: [row["step_time_ms"] for r in runs for row in r["rows"] if row["method"] == m]
                    for m in ("ppo", "sync-es", "async-es")}
            evals = {m: [row["evaluations"] for r in runs for row in r["rows"] if row["method"] == m]
                     for m in ("sync-es", "async-es")}
            wins = sum(a < s for a, s in zip(best["async-es"], best["sync-es"], strict=True))
            print(f"over {len(runs)} seeds: median best (ms) " + ", ".join(
                f"{m} {statistics.median(v):.4g}" for m, v in best.items())
                + f"; async ES better than sync ES in {wins} of {len(runs)}; median evaluations sync "
                f"{statistics.median(evals['sync-es']):.0f}, async {statistics.median(evals['async-es']):.0f}")
            for m in ("sync-es", "async-es"):
                times = [row["time_to_5pct_of_es_best_s"] for r in runs for row in r["rows"] if row["method"] == m]
                got = [t for t in times if np.isfinite(t)]
                print(f"  {m}: within 5% of the better ES's best in {len(got)} of {len(runs)} seeds"
                      + (f", median {statistics.median(got):.2f} s when it did" if got else ""))

    if args.no_pricing:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=2, default=float) + "\n")
        return 0
    saved = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cpu = pin_one_cpu()
    try:
        from flexcomm.planner.graphs import build_graph

        graphs = {"random-dag-60": random_dag(60, seed=0), "resnet50": build_graph("resnet50"),
                  "inception": build_graph("inception")}
        count, ref_count, repeats = (50, 3, 3) if args.quick else (300, 10, 5)
        rows = pricing(graphs, DeviceSet.uniform(8), count, ref_count, repeats)
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)
    results["pricing"] = rows
    print(f"\nplacements priced per second (8 devices, 1 micro-batch), CPU pinned: {cpu}")
    print(f"{'graph':<16}{'ops':>6}{'simulator':>12}{'reference':>12}{'ratio':>9}")
    for r in rows:
        print(f"{r['graph']:<16}{r['ops']:>6}{r['simulator_per_s']:>12.1f}{r['reference_per_s']:>12.2f}"
              f"{r['speedup']:>8.0f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
