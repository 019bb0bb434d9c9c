"""``flexcomm calibrate``: fit alpha and beta per (collective, algorithm, link class) from measurements."""

from __future__ import annotations

import argparse
import sys

from flexcomm._pricing import calibrate, calibrate_fabric
from flexcomm.costmodel.collective_libraries.fabric_calibration import save_calibration
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.commands.common import print_json


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "calibrate",
        help="fit the cost model to a measurement CSV and save a calibration profile",
        description="Robust least-squares fit of alpha and beta from a CSV with columns collective, "
        "algorithm, ranks, bytes, seconds (optional link_class), or from nccl-tests output pasted as it is "
        "(all_reduce_perf and its siblings; the out-of-place times; ranks from the log or --ranks). With "
        "--cluster (a GPU cluster with a gpu_fabric): fit the NCCL model's fabric parameters of that cluster on its "
        "own nccl-tests runs (any collective and node count) and write a calibration file the cluster file uses "
        "with one line (calibration: FILE).",
    )
    parser.add_argument("measurements", nargs="+", help="measurement CSV (e.g. from `flexcomm bench-collectives`) "
                        "or nccl-tests logs (one collective each)")
    parser.add_argument("--cluster", help="the GPU cluster (name or file) the nccl-tests logs ran on: fit its NCCL "
                        "model (intra-node and NIC bandwidth reached, per-step network latency, per-call cost)")
    parser.add_argument("--ranks", type=int, help="ranks of an nccl-tests log that does not show them")
    parser.add_argument("--algorithm", help="algorithm an nccl-tests log's rows are attributed to (default: ring; "
                        "broadcast pipelined-ring, alltoall pairwise)")
    parser.add_argument("--link-class", default="inter", help="link class of an nccl-tests log's rows "
                        "(default inter)")
    parser.add_argument("-o", "--output", help="file to write (default profile.json; with --cluster "
                        "<cluster>-calibration.yaml)")
    parser.add_argument("--loss", default="cauchy", choices=["linear", "huber", "soft_l1", "cauchy"],
                        help="robust loss of the fit (default cauchy)")
    parser.add_argument("--json", action="store_true", help="print the fits as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.cluster:
        return run_fabric(args)
    output = args.output or "profile.json"
    profile = calibrate(args.measurements, out=output, loss=args.loss, ranks=args.ranks,
                        algorithm=args.algorithm, link_class=args.link_class)
    for line in profile.warnings():
        print(line, file=sys.stderr)
    if args.json:
        print_json([f.to_dict() for f in profile.fits])
    else:
        print(profile.summary().to_string(index=False))
        print(f"wrote {output}")
    return 0


def run_fabric(args: argparse.Namespace) -> int:
    """``calibrate --cluster C LOG...``: the NCCL model's fabric parameters fitted on the cluster's own runs."""
    from pathlib import Path


    for flag in ("ranks", "algorithm"):
        if getattr(args, flag) is not None:
            raise InputError(flag, getattr(args, flag), "nothing with --cluster (the logs' own rank counts and "
                             "NCCL's choice price them)")
    fit = calibrate_fabric(args.measurements, args.cluster, out=None)
    name = Path(args.cluster).stem if Path(args.cluster).suffix else args.cluster
    output = Path(args.output or f"{name}-calibration.yaml")

    save_calibration(fit.calibration, output)
    if args.json:
        print_json(fit.calibration.model_dump(mode="json"))
        return 0
    for line in fit.summary_lines():
        print(line)
    print(f"wrote {output}: add `calibration: {output.name}` to the cluster file (in its folder), or to a file "
          "that extends it")
    return 0
