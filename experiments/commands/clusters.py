"""``flexcomm clusters``: list the embedded clusters or show one, resolved to SI units."""

from __future__ import annotations

import argparse

from flexcomm.experiments.commands.common import print_json


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("clusters", help="list embedded clusters, or show one (name or file)")
    parser.add_argument("cluster", nargs="?", help="cluster name or YAML/JSON file to show")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from flexcomm.costmodel.cluster import cluster_names, load_cluster
    from flexcomm.costmodel.units import format_bandwidth, format_time

    if args.cluster:
        print_json(load_cluster(args.cluster).to_dict())
        return 0
    for name in cluster_names():
        c = load_cluster(name)
        print(
            f"{name:24s} {c.nodes:4d} x {c.devices_per_node:<2d} {c.device_names:20s} "
            f"inter {format_bandwidth(c.inter_link.bandwidth_Bps):>11s} {format_time(c.inter_link.latency_s):>7s}  "
            f"{c.topology.kind:9s} {c.description}"
        )
    return 0
