"""``flexcomm study FILE --out DIR``: a what-if sweep from a study file, resumable, local or on Dask."""

from __future__ import annotations

import argparse

from flexcomm._running import study
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_time
from flexcomm.experiments.study.report import winners
from flexcomm.experiments.study.spec import load_spec


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "study",
        help="run a what-if study file (sweep of cluster, workload, strategies) into a tidy table and plots",
        description="Expand a study file (YAML: engine, cluster, workload, strategies, sweep axes, seed, metrics) "
        "into points and run them in a local process pool, or on a Dask cluster with --scheduler. Every finished "
        "point is appended to DIR/results.csv at once; rerunning the same command resumes where it stopped. When "
        "all points are done it writes results.csv/results.parquet (tidy), winners.csv, metrics.png, winners.png "
        "and summary.md. Example files: experiments/studies/*.yaml.",
    )
    parser.add_argument("file", help="study file (YAML or JSON), or the name of a shipped one: whatif-small, "
                        "sim-small, emulated-small")
    parser.add_argument("--out", help="output directory (created; reused to resume); not needed with --list")
    parser.add_argument("--workers", type=int, help="local worker processes (default: CPUs; 0 runs in this process)")
    parser.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://10.0.0.5:8786 (replaces the local "
                        "pool; workers need flexcomm installed)")
    parser.add_argument("--scheduler-timeout", default="30s", help="how long to try to reach the scheduler, and "
                        "how long it may stay silent (no result, no reply) or without workers mid-study before the "
                        "study stops with exit status 75; rerunning resumes (default 30s)")
    parser.add_argument("--batch", type=int, help="points per task (default: sized so a task holds about 0.5 s of "
                        "work, from the measured cost of a point)")
    parser.add_argument("--max-points", type=int, help="run at most N new points, then stop (rerun to continue)")
    parser.add_argument("--list", action="store_true", help="print the points and exit (runs nothing)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-figures", action="store_true", help="tables and summary only, no PNGs")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    parse_time(args.scheduler_timeout, "scheduler-timeout")
    if args.list:
        spec = load_spec(args.file)
        print(",".join(["point_id", *spec.param_columns]))
        for point in spec.points:
            print(",".join([point.id, *("" if point.params.get(c) is None else str(point.params.get(c))
                                        for c in spec.param_columns)]))
        return 0
    if not args.out:
        raise InputError("out", "(missing)", "an output directory, e.g. --out results/study (or --list)")
    result = study(args.file, args.out, workers=args.workers, scheduler=args.scheduler, max_points=args.max_points,
                   scheduler_timeout=args.scheduler_timeout, batch=args.batch, progress=not args.no_progress,
                   figures=not args.no_figures)
    spec = result.spec
    done = result.skipped + len(result.ran)
    print(f"study {spec.name}: {len(result.ran)} points run, {result.skipped} already in {args.out}/results.csv, "
          f"{done}/{result.total} done in {result.wall_s:.2f}s")
    if not result.complete:
        print(f"incomplete: rerun the same command to run the remaining {result.total - done} points")
        return 0
    if result.table is not None:

        best = winners(spec, result.table)
        counts = best["winner"].value_counts()
        for name, count in counts.items():
            print(f"  {name:9s} best by {spec.winner_metric} in {count / len(best):6.1%} of configurations")
        for path in result.files:
            print(f"wrote {path}")
    return 0
