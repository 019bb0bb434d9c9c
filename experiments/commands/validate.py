"""``flexcomm validate``: benchmark, calibrate and train for real, then predict every point and tabulate errors."""

from __future__ import annotations

import argparse
import time

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_time
from flexcomm.experiments.commands.common import print_written


def register(sub: argparse._SubParsersAction) -> None:
    from flexcomm.real_backend.options import VALIDATE_SIZES as DEFAULT_SIZES
    from flexcomm.real_backend.options import VALIDATE_STRATEGIES as DEFAULT_STRATEGIES

    parser = sub.add_parser(
        "validate",
        help="sim-vs-real validation: measured collectives and DDP steps against the cost model and the simulator",
        description="On loopback and (with --testbed, root) on a shaped testbed at each of --bandwidths: run the "
        "collective benchmark, calibrate on it, and train briefly with each strategy under DDP; then predict every "
        "measured point with the calibrated cost model (fitted leaving the predicted size out), with the link's "
        "own parameters (0.956 x the rate, calibrated latency) and with the simulator, and write errors.csv, "
        "errors.md, predicted_vs_measured.png and summary.json to --out. Testbeds are always removed.",
    )
    parser.add_argument("--testbed", action="store_true", help="also measure on a shaped testbed (needs root)")
    parser.add_argument("--bandwidths", default="100Mbit/s,1Gbit/s", help="testbed rates (default 100Mbit/s,1Gbit/s)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"benchmark sizes MIN:MAX[:FACTOR] or a list "
                        f"(default {DEFAULT_SIZES})")
    parser.add_argument("--collectives", default="allreduce,allgather,broadcast,reduce-scatter",
                        help="collectives to benchmark (default all four)")
    parser.add_argument("--iters", type=int, default=5, help="timed repetitions per size (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repetitions per size (default 1)")
    parser.add_argument("--strategies", default=DEFAULT_STRATEGIES, help=f"DDP strategies (default "
                        f"{DEFAULT_STRATEGIES}); empty with --no-ddp")
    parser.add_argument("--ratio", type=float, default=0.01, help="Top-k ratio of the DDP runs (default 0.01)")
    parser.add_argument("--steps", type=int, default=12, help="DDP steps per strategy (default 12)")
    parser.add_argument("--workload", default="mlp-digits", help="DDP workload (default mlp-digits)")
    parser.add_argument("--hidden", default="1024,1024", help="MLP hidden widths (default 1024,1024: 1.1M params)")
    parser.add_argument("--no-loopback", action="store_true", help="skip the loopback condition")
    parser.add_argument("--no-ddp", action="store_true", help="benchmark collectives only")
    parser.add_argument("--timeout", default="30min", help="limit of each benchmark or training run (default 30min)")
    parser.add_argument("--out", default="results/validate", help="output folder (default results/validate)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    started = time.time()  # files written from here on are this command's
    from flexcomm.real_backend.launch import sigterm_as_exit
    from flexcomm.real_backend.validate import parse_bandwidths, run_validation, summary_lines

    timeout = parse_time(args.timeout, "timeout")
    if timeout <= 0:
        raise InputError("timeout", args.timeout, "a positive time such as 30min")
    if args.iters < 1 or args.warmup < 0:
        raise InputError("iters", f"{args.iters}/{args.warmup}", "--iters >= 1 and --warmup >= 0")
    parse_bandwidths(args.bandwidths)  # checked even without --testbed: a typo should not pass silently
    with sigterm_as_exit():
        result = run_validation(args.out, testbed=args.testbed, bandwidths=args.bandwidths, ranks=args.ranks,
                                sizes=args.sizes, collectives=args.collectives, warmup=args.warmup, iters=args.iters,
                                strategies=args.strategies, ratio=args.ratio, steps=args.steps,
                                workload=args.workload, hidden=args.hidden or None, loopback=not args.no_loopback,
                                ddp=not args.no_ddp, timeout_s=timeout)
    for line in summary_lines(result.summary):
        print(line)
    print_written(result.out, started)
    for failure in result.failures:
        print(f"failed: {failure}")
    return 1 if result.failures else 0
