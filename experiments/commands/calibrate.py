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
        "algorithm, ranks, bytes, seconds (optional link_class).",
    )
    parser.add_argument("measurements", help="measurement CSV (e.g. from `flexcomm bench-collectives`)")
    parser.add_argument("-o", "--output", default="profile.json", help="profile JSON to write (default profile.json)")
    parser.add_argument("--loss", default="cauchy", choices=["linear", "huber", "soft_l1", "cauchy"],
                        help="robust loss of the fit (default cauchy)")
    parser.add_argument("--json", action="store_true", help="print the fits as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from flexcomm.costmodel.calibration import fit, load_measurements

    profile = fit(load_measurements(args.measurements), loss=args.loss)
    profile.save(args.output)
    for line in profile.warnings():
        print(line, file=sys.stderr)
    if args.json:
        print_json([f.to_dict() for f in profile.fits])
    else:
        print(profile.summary().to_string(index=False))
        print(f"wrote {args.output}")
    return 0
