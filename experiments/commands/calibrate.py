"""``flexcomm calibrate``: fit alpha and beta per (collective, algorithm, link class) from measurements."""

from __future__ import annotations

import argparse
import sys

from flexcomm.experiments.commands.common import print_json


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "calibrate",
        help="fit the cost model to a measurement CSV and save a calibration profile",
        description="Robust least-squares fit of alpha and beta from a CSV with columns collective, "
        "algorithm, ranks, bytes, seconds (optional link_class), or from nccl-tests output pasted as it is "
        "(all_reduce_perf and its siblings; the out-of-place times; ranks from the log or --ranks).",
    )
    parser.add_argument("measurements", nargs="+", help="measurement CSV (e.g. from `flexcomm bench-collectives`) "
                        "or nccl-tests logs (one collective each)")
    parser.add_argument("--ranks", type=int, help="ranks of an nccl-tests log that does not show them")
    parser.add_argument("--algorithm", help="algorithm an nccl-tests log's rows are attributed to (default: ring; "
                        "broadcast pipelined-ring, alltoall pairwise)")
    parser.add_argument("--link-class", default="inter", help="link class of an nccl-tests log's rows "
                        "(default inter)")
    parser.add_argument("-o", "--output", default="profile.json", help="profile JSON to write (default profile.json)")
    parser.add_argument("--loss", default="cauchy", choices=["linear", "huber", "soft_l1", "cauchy"],
                        help="robust loss of the fit (default cauchy)")
    parser.add_argument("--json", action="store_true", help="print the fits as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from flexcomm._pricing import calibrate

    profile = calibrate(args.measurements, out=args.output, loss=args.loss, ranks=args.ranks,
                        algorithm=args.algorithm, link_class=args.link_class)
    for line in profile.warnings():
        print(line, file=sys.stderr)
    if args.json:
        print_json([f.to_dict() for f in profile.fits])
    else:
        print(profile.summary().to_string(index=False))
        print(f"wrote {args.output}")
    return 0
