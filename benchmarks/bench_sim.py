"""How fast the discrete-event simulator runs collectives, on one core, against the analytical model.

Why: simpy processes ~0.2-0.8M events/s in CPython, so the simulator must simulate flows and
steps, never packets, and scale about linearly in the ranks. This keeps those claims measured.

What is timed (wall seconds, median over ``--repeats``; every run builds its own environment and
network, so the times include routing the flows):

* headline: one 100 MiB ring allreduce over 1024 ranks on a two-level network built in code
  (128 nodes x 8 GPUs, 16 nodes per leaf switch, 2:1 oversubscribed uplinks), granularity
  ``aggregate`` (one coflow per ring phase) and ``steps`` (2(p-1) coflows), with simpy events
  processed and events/s; baseline: one analytical CostModel evaluation of the same collective.
* a noisy run (jitter + Markov congestion + cross traffic, step granularity), where the rate
  engine works hardest (many coflows at once, a reallocation per change);
* growth: the same ring allreduce from 8 to 4096 ranks (p/8 nodes), and the fitted exponent k of
  wall ~ ranks^k per granularity.
* training (:mod:`sim.training`): 100 iterations of ResNet-50 on 64 ranks (8 nodes x 8 GPUs, flat
  200 Gbit/s network) with 25 gradient buckets each, against the analytical per-iteration model
  (the same buckets and overlap recurrence priced by CostModel, one evaluation) and against the
  same job with 1 bucket; plus stragglers with compute jitter, network jitter (step granularity)
  and a node failure with elastic restart. Reports wall time, simulated events, events/s and how
  far the simulated iteration is from the analytical one.

Run: ``.venv/bin/python benchmarks/bench_sim.py`` (``--quick`` for fewer repeats and sizes,
``--json PATH`` to save the tables, ``--only training|collectives`` for one part). Sets the
BLAS/OpenMP thread variables to 1 and pins itself to one CPU where the OS allows (``--no-pin`` to skip).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from _common import pin_one_cpu, require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()
from flexcomm.costmodel.cluster import Cluster  # noqa: E402
from flexcomm.costmodel.cost_model import CostModel  # noqa: E402
from flexcomm.sim.collectives import simulate_collective  # noqa: E402
from flexcomm.sim.dynamics import CrossTraffic, JitterDynamics, MarkovCongestion  # noqa: E402

MIB = 2.0**20
TARGET_S = 10.0  # the bound for the 1024-rank headline run


def two_level(nodes: int, per_switch: int = 16, oversubscription: float = 2.0) -> Cluster:
    """nodes x 8 GPUs (NVLink 300 GB/s, 3 us), 200 Gbit/s NICs (5 us), leaves of ``per_switch`` nodes."""
    return Cluster.from_dict({
        "name": f"bench-{nodes}x8-two-level",
        "nodes": nodes,
        "devices_per_node": 8,
        "device": {"name": "gpu", "peak_flops": "312TFLOP/s", "memory": "80GiB"},
        "intra_link": {"latency": "3us", "bandwidth": "300GB/s"},
        "inter_link": {"latency": "5us", "bandwidth": "200Gbit/s"},
        "topology": {"kind": "two-level", "nodes_per_switch": min(per_switch, nodes),
                     "oversubscription": oversubscription},
    })


_CPU: dict[int, float] = {}  # median CPU seconds of the last _median_time call, under key 0


def _median_time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall seconds of ``fn()`` over ``repeats`` runs (and its median CPU seconds in _CPU[0])."""
    times, cpu, result = [], [], None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    _CPU[0] = statistics.median(cpu)
    return statistics.median(times), result


def _fmt_rate(x: float) -> str:
    if x < 1e4:
        return f"{x:.0f}"
    return f"{x / 1e3:.0f}k" if x < 1e6 else f"{x / 1e6:.2f}M"


def headline(repeats: int) -> list[dict]:
    cluster = two_level(128)
    ranks = cluster.world_size
    rows = []
    model = CostModel.from_cluster(cluster)
    model.collective("allreduce", "ring", 100 * MIB, ranks)  # warm the group-link cache
    n_eval = 200
    model_s, predicted = _median_time(
        lambda: [model.collective("allreduce", "ring", 100 * MIB, ranks) for _ in range(n_eval)], repeats)
    model_s /= n_eval
    predicted_s = float(predicted[0].total)
    rows.append({"run": "analytical CostModel (baseline)", "ranks": ranks, "wall_s": model_s,
                 "cpu_s": _CPU[0] / n_eval, "events": 0,
                 "events_per_s": float("nan"), "simulated_s": predicted_s})
    for granularity in ("aggregate", "steps"):
        wall, result = _median_time(
            lambda g=granularity: simulate_collective(cluster, "allreduce", "ring", 100 * MIB, granularity=g),
            repeats)
        rows.append({"run": f"sim ring allreduce, {granularity}", "ranks": ranks, "wall_s": wall,
                     "cpu_s": _CPU[0], "events": result.events, "events_per_s": result.events / wall,
                     "simulated_s": result.seconds})
    noisy = [JitterDynamics(sigma=0.2, period_s=1e-4, seed=1),
             MarkovCongestion(mean_good_s=2e-3, mean_congested_s=5e-4, congested_factor=0.3, seed=2),
             CrossTraffic(rate_per_s=20_000, mean_bytes="8MiB", seed=3)]
    wall, result = _median_time(
        lambda: simulate_collective(cluster, "allreduce", "ring", 100 * MIB, granularity="steps", dynamics=noisy),
        repeats)
    rows.append({"run": "sim ring, steps, jitter+markov+cross", "ranks": ranks, "wall_s": wall,
                 "cpu_s": _CPU[0], "events": result.events, "events_per_s": result.events / wall,
                 "simulated_s": result.seconds})
    return rows


def growth(ranks_list: list[int], repeats: int) -> tuple[list[dict], dict[str, float]]:
    rows = []
    for ranks in ranks_list:
        cluster = two_level(max(1, ranks // 8))
        row: dict = {"ranks": ranks}
        for granularity in ("aggregate", "steps"):
            wall, result = _median_time(
                lambda c=cluster, g=granularity: simulate_collective(c, "allreduce", "ring", 100 * MIB, granularity=g),
                repeats)
            row[f"{granularity}_s"] = wall
            row[f"{granularity}_events"] = result.events
        rows.append(row)
    fits = {}
    ranks = np.array([r["ranks"] for r in rows], dtype=float)
    large = ranks >= 512  # past the fixed per-run overheads
    for granularity in ("aggregate", "steps"):
        wall = np.array([r[f"{granularity}_s"] for r in rows])
        fits[granularity] = float(np.polyfit(np.log(ranks), np.log(wall), 1)[0])
        if large.sum() >= 2:
            fits[f"{granularity} (>=512 ranks)"] = float(np.polyfit(np.log(ranks[large]), np.log(wall[large]), 1)[0])
    return rows, fits


def flat(nodes: int) -> Cluster:
    """nodes x 8 GPUs (NVLink 300 GB/s, 3 us) behind one non-blocking switch (200 Gbit/s NICs, 5 us)."""
    return Cluster.from_dict({
        "name": f"bench-{nodes}x8-flat", "nodes": nodes, "devices_per_node": 8,
        "device": {"name": "gpu", "peak_flops": "312TFLOP/s", "memory": "80GiB"},
        "intra_link": {"latency": "3us", "bandwidth": "300GB/s"},
        "inter_link": {"latency": "5us", "bandwidth": "200Gbit/s"}, "topology": "flat",
    })


def training(repeats: int, iterations: int = 100) -> list[dict]:
    """The training-job benchmark: see the module doc."""
    from flexcomm.sim.dynamics import JitterDynamics
    from flexcomm.sim.faults import FaultPolicy
    from flexcomm.sim.training import analytical_iteration, simulate_training
    from flexcomm.sim.training_config import TrainingConfig

    cluster = flat(8)
    base = TrainingConfig(workload="resnet50", iterations=iterations, bucket_count=25, record_flows=False)
    analytical_s, predicted = _median_time(lambda: analytical_iteration(cluster, base), repeats)
    rows = [{"run": "analytical per-iteration model (baseline)", "wall_s": analytical_s, "cpu_s": _CPU[0],
             "events": 0, "events_per_s": float("nan"), "job_s": predicted["time_s"] * iterations,
             "iteration_s": predicted["time_s"], "vs_model": 0.0}]
    failure_at = 0.4 * predicted["time_s"] * iterations
    runs = [
        ("sim, 1 bucket", {"bucket_count": 1}, {}),
        ("sim, 25 buckets", {}, {}),
        ("sim, 25 buckets, straggler + compute jitter", {"stragglers": {5: 1.2}, "compute_jitter": 0.05}, {}),
        ("sim, 25 buckets, network jitter (steps)", {}, {"dynamics": [JitterDynamics(0.1, 1e-3, seed=1)]}),
        ("sim, 25 buckets, node failure + elastic", {},
         {"faults": [f"node3@{failure_at:.6f}s"],
          "policy": FaultPolicy(checkpoint_every=20, elastic=True, repair_s=5.0, restart_s=2.0, timeout_s=1.0)}),
    ]
    for name, config, extra in runs:
        wall, result = _median_time(lambda c=config, e=extra: simulate_training(cluster, base, **e, **c), repeats)
        cpu = _CPU[0]
        median = result.summary()["median_time_s"]
        ideal = analytical_iteration(cluster, replace(base, **config))["time_s"]  # same buckets, no noise
        rows.append({"run": name, "wall_s": wall, "cpu_s": cpu, "events": result.sim_events,
                     "events_per_s": result.sim_events / wall, "job_s": result.job_time_s, "iteration_s": median,
                     "vs_model": median / ideal - 1})
    return rows


def print_training(rows: list[dict], repeats: int) -> None:
    base, one = rows[0]["wall_s"], rows[1]["wall_s"]
    print(f"\n100 training iterations, ResNet-50, 64 ranks (flat 8x8, 200 Gbit/s), 25 buckets; median of {repeats}")
    print(f"{'run':45s} {'wall':>9s} {'events':>8s} {'events/s':>9s} {'sim job':>9s} {'iteration':>10s} "
          f"{'vs model':>9s} {'x analytical':>13s} {'x 1 bucket':>11s}")
    for r in rows:
        rate = "" if np.isnan(r["events_per_s"]) else _fmt_rate(r["events_per_s"])
        print(f"{r['run']:45s} {r['wall_s']:9.4g} {r['events']:8d} {rate:>9s} {r['job_s']:8.3f}s "
              f"{r['iteration_s'] * 1e3:8.2f}ms {r['vs_model']:+9.2%} {r['wall_s'] / base:13.0f} "
              f"{r['wall_s'] / one:11.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is reported")
    parser.add_argument("--quick", action="store_true", help="3 repeats, growth up to 1024 ranks")
    parser.add_argument("--json", type=Path, help="also write the tables here")
    parser.add_argument("--no-pin", action="store_true", help="do not pin to one CPU")
    parser.add_argument("--only", choices=("all", "collectives", "training"), default="all",
                        help="run one part (default all)")
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    cpu = None if args.no_pin else pin_one_cpu()

    train_rows = training(repeats) if args.only in ("all", "training") else []
    if train_rows:
        print_training(train_rows, repeats)
    if args.only == "training":
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"training": train_rows, "repeats": repeats, "cpu": cpu,
                                             "python": platform.python_version()}, indent=2, default=float))
        return 0

    rows = headline(repeats)
    base = rows[0]["wall_s"]
    agg = rows[1]["wall_s"]
    print(f"ring allreduce of 100 MiB, 1024 ranks, two-level 128x8 (16/leaf, 2:1); median of {repeats}, "
          f"cpu {cpu if cpu is not None else 'unpinned'}")
    print(f"{'run':40s} {'wall':>10s} {'cpu':>10s} {'events':>8s} {'events/s':>9s} {'simulated':>11s} "
          f"{'x analytical':>13s} {'x aggregate':>12s}")
    for r in rows:
        print(f"{r['run']:40s} {r['wall_s']:10.4g} {r['cpu_s']:10.4g} {r['events']:8d} "
              f"{'' if np.isnan(r['events_per_s']) else _fmt_rate(r['events_per_s']):>9s} "
              f"{r['simulated_s'] * 1e3:9.3f}ms {r['wall_s'] / base:13.0f} {r['wall_s'] / agg:12.2f}")
    slowest = max(r["wall_s"] for r in rows[1:3])
    print(f"headline target < {TARGET_S:g} s: {'met' if slowest < TARGET_S else 'MISSED'} "
          f"(slowest granularity {slowest:.3f} s)")

    ranks_list = [8, 32, 128, 512, 1024] if args.quick else [8, 32, 128, 512, 1024, 2048, 4096]
    grow, fits = growth(ranks_list, max(1, repeats - 2))
    print("\nwall time growth, ring allreduce 100 MiB (p/8 nodes, 16/leaf, 2:1)")
    print(f"{'ranks':>6s} {'aggregate':>10s} {'events':>7s} {'steps':>10s} {'events':>7s} {'steps/agg':>10s}")
    for r in grow:
        print(f"{r['ranks']:6d} {r['aggregate_s']:10.4g} {r['aggregate_events']:7d} {r['steps_s']:10.4g} "
              f"{r['steps_events']:7d} {r['steps_s'] / r['aggregate_s']:10.1f}")
    print("fitted exponent k of wall ~ ranks^k: " + ", ".join(f"{g} {k:.2f}" for g, k in fits.items()))

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "headline": rows, "growth": grow, "exponents": fits, "training": train_rows, "repeats": repeats, "cpu": cpu,
            "python": platform.python_version(), "numpy": np.__version__,
        }, indent=2, default=float))
    return 0 if slowest < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
