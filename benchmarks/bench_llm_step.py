"""One training step of a 175B GPT on 16,384 GPUs, simulated with contention: wall time against the goal.

Why: a simulator that takes minutes per step on an LLM-scale cluster is not used for what-if studies. The
step of :mod:`planner.llm.step_sim` runs tensor-parallel rings (one per NIC when a tensor group spans two
nodes), pipeline sends in 1F1B order, each stage's data-parallel allreduce and, for the MoE variant, an
all-to-all per MoE layer, on the rail-optimized fabric of ``superpod-h100-16k`` (2,048 DGX H100 nodes,
8 rails, 65,536 directed links). Goal: under 10 s of wall time.

What is timed: the plan comes from ``flexcomm plan --model gpt`` (GPT-3 175B shape, global batch 1,536) on
that cluster, run first; then the simulated step (fabric built once beforehand, so the step's time is the
simulation's) for the dense plan and for an MoE variant (ep=8, top-2, every other layer), median of
``--repeats``. Baseline in the same run: the planner's closed-form price of the same plan (one call). The
ratio printed is simulation wall time over that.

At the next scale, ``--cluster superpod-h100-128k`` (16,384 DGX H100 nodes, 131,072 GPUs; global batch
scaled with the data-parallel width, 12,288): goal under 60 s and 16 GiB (peak resident memory of the
process, printed).

Run: ``.venv/bin/python benchmarks/bench_llm_step.py [--repeats 3] [--cluster superpod-h100-128k]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from _common import pin_one_cpu, require_flexcomm  # noqa: E402

require_flexcomm()
import resource  # noqa: E402

from flexcomm.costmodel.cluster import load_cluster  # noqa: E402
from flexcomm.experiments.cli import main as flexcomm  # noqa: E402
from flexcomm.planner.llm.step_sim import Experts, StepSimulator, load_step_plan  # noqa: E402

#: per cluster: (wall-time goal s, memory goal GiB or None, global batch)
GOALS = {"superpod-h100-16k": (10.0, None, 1536), "superpod-h100-128k": (60.0, 16.0, 12288)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cluster", default="superpod-h100-16k", choices=sorted(GOALS))
    args = parser.parse_args()
    CLUSTER = args.cluster
    GOAL_S, memory_goal_gib, batch = GOALS[CLUSTER]
    cpu = pin_one_cpu()
    cluster = load_cluster(CLUSTER)
    started = time.perf_counter()
    cluster.fabric  # noqa: B018 - the fabric is built once per cluster, not per step
    fabric_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        code = flexcomm(["plan", "--model", "gpt", "--layers", "96", "--hidden", "12288", "--heads", "96",
                         "--seq-len", "2048", "--batch-size", str(batch), "--cluster", CLUSTER, "--out", folder,
                         "--no-progress", "--simulate-top", "0"])
        if code != 0:
            return code
        dense = load_step_plan(Path(folder) / "best_plan.json")
    note = f" ({dense.plan.virtual_stages} virtual stages, interleaved 1F1B)" if dense.plan.virtual_stages > 1 else ""
    print(f"\n{CLUSTER}: {cluster.world_size:,} GPUs, fabric of {cluster.fabric.graph.number_of_edges():,} directed "
          f"links built in {fabric_s:.2f} s; plan {dense.plan.label}{note}; median of {args.repeats}; "
          f"{'pinned to CPU ' + str(cpu) if cpu is not None else 'not pinned'}")
    print(f"{'variant':10s} {'wall s':>8s} {'goal':>6s} {'analytical wall s':>18s} {'x analytical':>13s} "
          f"{'simulated step':>15s} {'closed form':>12s} {'coflows':>8s} {'events':>7s}")
    worst = 0.0
    for name, step in (("dense", dense), ("MoE", replace(dense, experts=Experts(ep=8, top_k=2, every=2)))):
        walls, result = [], None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            sim = StepSimulator(cluster, step)
            result = sim.run()
            walls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sim.pricer.price(step.plan)
        analytical = time.perf_counter() - t0
        wall = statistics.median(walls)
        worst = max(worst, wall)
        assert result is not None
        print(f"{name:10s} {wall:8.2f} {'met' if wall < GOAL_S else 'MISSED':>6s} {analytical:18.5f} "
              f"{wall / analytical:13.0f} {result.step_s:14.3f}s {result.analytical_s:11.3f}s {result.coflows:8d} "
              f"{result.events:7d}")
    print(f"slowest variant {worst:.2f} s of wall time per simulated step (goal < {GOAL_S:.0f} s)")
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    memory_met = memory_goal_gib is None or peak_gib < memory_goal_gib
    if memory_goal_gib is not None:
        print(f"peak resident memory {peak_gib:.2f} GiB (goal < {memory_goal_gib:g} GiB): "
              f"{'met' if memory_met else 'MISSED'}")
    return 0 if worst < GOAL_S and memory_met else 1


if __name__ == "__main__":
    sys.exit(main())
