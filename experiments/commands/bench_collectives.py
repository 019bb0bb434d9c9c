"""``flexcomm bench-collectives``: nccl-tests-like sweep of real collectives into a calibration CSV."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from flexcomm.costmodel.collective_libraries.logs import measurements_to_logs
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_LOCAL_PROCESSES
from flexcomm.costmodel.units import parse_time
from flexcomm.real_backend.bench import parse_collectives, parse_sizes, run_benchmark
from flexcomm.real_backend.launch import sigterm_as_exit
from flexcomm.real_backend.testbed import Testbed


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "bench-collectives",
        help="time real torch.distributed collectives and append them to a calibration CSV",
        description="Sweep message sizes (doubling from MIN to MAX) for each collective: warm-up, then timed "
        "repetitions (barrier before each; time = max over ranks). Every repetition is appended to --out as "
        "it is measured (calibration columns plus rep, backend, algbw_Bps, busbw_Bps, implementation), so a "
        "crash loses nothing measured. Sizes: allreduce, broadcast and reduce-scatter take the whole vector, "
        "allgather each rank's contribution. Fit the result with `flexcomm calibrate`.",
    )
    parser.add_argument("--nproc", type=int, help="ranks (default 2 locally, all ranks of --testbed)")
    parser.add_argument("--sizes", default="1KiB:64MiB", help="MIN:MAX[:FACTOR] or a comma list (default 1KiB:64MiB)")
    parser.add_argument("--collectives", default="allreduce,allgather,broadcast,reduce-scatter",
                        help="comma list of allreduce, allgather, broadcast, reduce-scatter (default all)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed operations per size (default 5)")
    parser.add_argument("--iters", type=int, default=20, help="timed repetitions per size (default 20)")
    parser.add_argument("--out", default="measurements.csv", help="CSV to append to (default measurements.csv)")
    parser.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl with CUDA, else gloo")
    parser.add_argument("--testbed", metavar="ID", help="run inside this shaped testbed (`flexcomm testbed up`)")
    parser.add_argument("--link-class", help="link_class column (default intra locally, inter on a testbed)")
    parser.add_argument("--timeout", default="2h", help="wall-clock limit of the whole sweep (default 2h)")
    parser.add_argument("--op-timeout", default="120s", help="limit of one collective; a dead peer is "
                        "reported after at most this (default 120s)")
    parser.add_argument("--log-dir", help="write rank r's output to DIR/rank{r}.log")
    parser.add_argument("--nccl-tests-dir", metavar="DIR", help="also write this run's medians as nccl-tests logs "
                        "(DIR/all_reduce_perf-4ranks.txt, ...), to compare with a pasted GPU run")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.nccl_tests_dir:  # before the sweep (it runs for minutes) and before torch is imported
        _check_folder(args.nccl_tests_dir, "nccl-tests-dir")

    sizes = parse_sizes(args.sizes)
    collectives = parse_collectives(args.collectives)
    if args.nproc is not None and args.nproc < 1:
        raise InputError("nproc", args.nproc, "an integer >= 1")
    if args.nproc is not None:
        MAX_LOCAL_PROCESSES.check("nproc", args.nproc)
    timeout = parse_time(args.timeout, "timeout")
    op_timeout = parse_time(args.op_timeout, "op-timeout")
    if timeout <= 0 or op_timeout <= 0:
        raise InputError("timeout", f"{args.timeout}/{args.op_timeout}", "positive times such as 2h and 120s")
    testbed = None
    if args.testbed:

        testbed = Testbed.load(args.testbed)
    before = _rows_in(args.out)
    with sigterm_as_exit():
        result = run_benchmark(args.nproc, sizes, args.out, collectives, args.warmup, args.iters,
                               backend=args.backend, testbed=testbed, link_class=args.link_class,
                               timeout_s=timeout, op_timeout_s=op_timeout, log_dir=args.log_dir)
    if result.returncode == 0:
        print(f"appended to {args.out}; fit it with: flexcomm calibrate {args.out} -o profile.json")
        if args.nccl_tests_dir:
            import pandas as pd


            mine = pd.read_csv(args.out).iloc[before:]  # this run's rows: the CSV is appended to
            for path in measurements_to_logs(mine, args.nccl_tests_dir, note=f"{_backends(mine)} backend"):
                print(f"wrote {path}")
    return result.returncode


def _check_folder(path: str, field: str) -> None:
    """Refuse a folder the logs could not be written into: the nearest part of ``path`` that exists must be
    a writable directory (a file there used to fail in 12 lines after the whole benchmark had run)."""
    for part in (Path(path), *Path(path).absolute().parents):
        if part.exists():
            if not part.is_dir():
                raise InputError(field, path, f"a folder to write the logs into ({part} is not a directory)")
            if not os.access(part, os.W_OK | os.X_OK):
                raise InputError(field, path, f"a folder to write the logs into ({part} cannot be written)")
            return


def _rows_in(path: str) -> int:
    """Data rows already in the measurement CSV (the ones this run appends come after)."""
    if not Path(path).is_file():
        return 0
    with open(path, encoding="utf-8") as handle:
        return max(0, sum(1 for line in handle if line.strip()) - 1)


def _backends(rows) -> str:  # noqa: ANN001 (a DataFrame)
    """The backends this run's rows were measured with, for the log's header."""
    return ",".join(sorted(set(rows["backend"].astype(str)))) if "backend" in rows and len(rows) else "unknown"
