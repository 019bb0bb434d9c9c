"""Points per second of one study on the local process pool and on a Dask cluster, at 1, 2 and 4 workers.

Why: a study on Dask used to run at 0.64x the local pool on the same two workers (115-125 against
180-190 points/s for a 1,056-point simulator study), because every point was its own task. The goal
is Dask >= 0.9x the pool at equal worker count on this machine; this measures it, with the scaling.

What is timed: ``run_study`` on ``benchmarks/studies/sim-1056.yaml`` into a fresh directory, from the
call to the last row journalled (no figures). The pool spawns its processes inside that time; for
Dask a fresh ``distributed.LocalCluster`` (worker processes, one thread each, loopback) is started
*before* the clock, as a cluster is started before a study, but its workers are cold (flexcomm not
yet imported there), like the pool's. Each configuration runs ``--repeats`` times, pool and Dask
alternating; the table gives medians, Dask/pool at each worker count and the speed-up over one worker.
On a 2-core machine 4 workers oversubscribe the CPUs: that row shows the cost of oversubscription.

Run: ``.venv/bin/python benchmarks/bench_study_dask.py`` (``--quick``: 1 repeat, 1 and 2 workers;
``--check``: exit 1 if Dask < 0.9x the pool at 2 workers; ``--json PATH`` to save the table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from _common import require_flexcomm  # noqa: E402  (benchmarks/ is sys.path[0] when a script runs)

require_flexcomm()
from flexcomm.experiments.study.runner import run_study  # noqa: E402
from flexcomm.experiments.study.spec import load_spec  # noqa: E402

STUDY = Path(__file__).resolve().parent / "studies" / "sim-1056.yaml"
GOAL = 0.9


def _timed(spec, folder: Path, **where) -> tuple[float, int]:
    started = time.perf_counter()
    run = run_study(spec, folder, progress=False, figures=False, **where)
    wall = time.perf_counter() - started
    assert run.complete and len(run.ran) == len(spec.points), "the study did not finish"
    return len(run.ran) / wall, len(run.batch_sizes)


def _dask(spec, folder: Path, workers: int) -> tuple[float, int]:
    import logging

    from distributed import LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        return _timed(spec, folder, scheduler=cluster.scheduler_address)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--quick", action="store_true", help="1 repeat, 1 and 2 workers")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if Dask < {GOAL}x the pool at 2 workers")
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    repeats, counts = (1, [1, 2]) if args.quick else (args.repeats, args.workers)
    spec = load_spec(STUDY)
    print(f"study {spec.name}: {len(spec.points)} simulator points; {os.cpu_count()} CPUs; "
          f"median of {repeats} run(s) each")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for workers in counts:
            pool, dask, tasks = [], [], []
            for repeat in range(repeats):
                pool.append(_timed(spec, Path(scratch, f"pool-{workers}-{repeat}"), workers=workers)[0])
                rate, count = _dask(spec, Path(scratch, f"dask-{workers}-{repeat}"), workers)
                dask.append(rate)
                tasks.append(count)
            rows.append({"workers": workers, "pool_points_per_s": statistics.median(pool),
                         "dask_points_per_s": statistics.median(dask), "dask_tasks": statistics.median(tasks)})
            print(f"  {workers} worker(s): pool {rows[-1]['pool_points_per_s']:.0f} points/s, "
                  f"dask {rows[-1]['dask_points_per_s']:.0f} points/s", flush=True)
    one = next((r for r in rows if r["workers"] == 1), rows[0])
    print(f"\n{'workers':>7s} {'pool pts/s':>10s} {'dask pts/s':>10s} {'dask/pool':>9s} {'pool xN':>7s} "
          f"{'dask xN':>7s} {'dask tasks':>10s}")
    for row in rows:
        row["dask_over_pool"] = row["dask_points_per_s"] / row["pool_points_per_s"]
        row["pool_speedup"] = row["pool_points_per_s"] / one["pool_points_per_s"]
        row["dask_speedup"] = row["dask_points_per_s"] / one["dask_points_per_s"]
        print(f"{row['workers']:7d} {row['pool_points_per_s']:10.0f} {row['dask_points_per_s']:10.0f} "
              f"{row['dask_over_pool']:8.2f}x {row['pool_speedup']:6.2f}x {row['dask_speedup']:6.2f}x "
              f"{row['dask_tasks']:10.0f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"study": spec.name, "points": len(spec.points), "repeats": repeats,
                                         "cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    at_two = next((r for r in rows if r["workers"] == 2), None)
    if args.check and at_two is not None and at_two["dask_over_pool"] < GOAL:
        print(f"FAIL: Dask {at_two['dask_over_pool']:.2f}x the pool at 2 workers (goal >= {GOAL}x)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
