"""``flexcomm launch``: start N local ranks with torchrun's environment, bounded and fail-fast."""

from __future__ import annotations

import argparse

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_LOCAL_PROCESSES
from flexcomm.costmodel.units import parse_time
from flexcomm.real_backend.elastic import launch_elastic, parse_elastic
from flexcomm.real_backend.elastic_report import measure, summary_line
from flexcomm.real_backend.launch import launch, sigterm_as_exit


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "launch",
        help="start N local ranks of a torch.distributed program (torchrun's environment)",
        description="Start N rank processes with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free "
        "MASTER_PORT set, as torchrun does (so `torchrun --nproc-per-node N --nnodes M ...` runs the same worker on "
        "several machines). If a rank fails the others are stopped and its exit code returned; a run past --timeout "
        "is stopped and returns 124. Example: flexcomm launch --nproc 2 -- python -m my.module ARGS",
    )
    parser.add_argument("--nproc", type=int, required=True, help="number of ranks (>= 1)")
    parser.add_argument("--backend", choices=["gloo", "nccl"],
                        help="backend the workers should use (FLEXCOMM_BACKEND; default: nccl with CUDA, else gloo)")
    parser.add_argument("--timeout", default="1h", help="wall-clock limit of the whole run, e.g. 10min (default 1h)")
    parser.add_argument("--dist-timeout",
                        help="per-collective/rendezvous timeout for the workers (FLEXCOMM_DIST_TIMEOUT_S), e.g. 60s")
    parser.add_argument("--master-port", type=int, help="rendezvous port (default: a free one)")
    parser.add_argument("--log-dir", help="write rank r's output to DIR/rank{r}.log instead of this terminal "
                        "(with --elastic: DIR/attempt{k}/rank{r}.log and DIR/elastic.json; default results/elastic)")
    parser.add_argument("--elastic", metavar="MIN:MAX", help="torchrun's elastic semantics: when a rank is lost, "
                        "stop the others and re-form the job with the survivors while at least MIN remain "
                        "(workers resume from their checkpoint; --nproc must be MAX)")
    parser.add_argument("--report", metavar="DIR", help="with --elastic: the worker's output folder (its steps.csv); "
                        "writes DIR/elastic_report.json and DIR/elastic.png: time lost measured vs the recovery "
                        "simulator's prediction")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- then the worker: `python -m module ...`, `script.py ...` or any executable")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.nproc < 1:
        raise InputError("nproc", args.nproc, "an integer >= 1")
    MAX_LOCAL_PROCESSES.check("nproc", args.nproc)
    timeout = parse_time(args.timeout, "timeout")
    if timeout <= 0:
        raise InputError("timeout", args.timeout, "a positive time such as 10min")
    dist_timeout = parse_time(args.dist_timeout, "dist-timeout") if args.dist_timeout else None
    if dist_timeout is not None and dist_timeout <= 0:
        raise InputError("dist-timeout", args.dist_timeout, "a positive time such as 60s")
    if args.master_port is not None and not 0 < args.master_port < 65536:
        raise InputError("master-port", args.master_port, "a TCP port 1..65535")
    if args.report is not None and args.elastic is None:
        raise InputError("report", args.report, "--elastic MIN:MAX as well (the report measures the time an elastic "
                         "run lost re-forming; a plain launch has nothing to report)")
    if args.elastic is not None and args.master_port is not None:
        raise InputError("master-port", args.master_port, "no --master-port with --elastic (each round of an elastic "
                         "run rendezvouses on a free port of its own)")
    if args.elastic is not None:

        low, high = parse_elastic(args.elastic)
        if high != args.nproc:
            raise InputError("elastic", args.elastic, f"MIN:MAX with MAX = --nproc ({args.nproc})")
        with sigterm_as_exit():
            elastic = launch_elastic(args.command, low, high, log_dir=args.log_dir or "results/elastic",
                                     timeout_s=timeout, backend=args.backend, dist_timeout_s=dist_timeout)
        if args.report and elastic.returncode == 0 and len(elastic.rounds) > 1:

            report = measure(args.log_dir or "results/elastic", args.report)
            print(f"{summary_line(report)}; wrote {args.report}/elastic_report.json, {args.report}/elastic.png")
        return elastic.returncode
    with sigterm_as_exit():
        result = launch(args.command, args.nproc, backend=args.backend, timeout_s=timeout,
                        master_port=args.master_port, dist_timeout_s=dist_timeout, log_dir=args.log_dir)
    return result.returncode
