"""``flexcomm clusters``: list the embedded clusters or show one, resolved to SI units."""

from __future__ import annotations

import argparse

from flexcomm.costmodel.cluster import cluster_names, load_cluster
from flexcomm.costmodel.collective_libraries.transports import library_defaults
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.topologies.draw import draw_fabric
from flexcomm.costmodel.units import format_bandwidth, format_time
from flexcomm.experiments.commands.common import print_json


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("clusters", help="list embedded clusters, or show one (name or file)")
    parser.add_argument("cluster", nargs="?", help="cluster name or YAML/JSON file to show")
    parser.add_argument("--draw", metavar="FILE", help="draw the cluster's topology into FILE (.png, .svg, .pdf): "
                        "hosts or NICs at the bottom, switches by tier, cables sized by bandwidth")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.draw and not args.cluster:
        raise InputError("cluster", None, "a cluster name or file to draw, e.g. flexcomm clusters fat-tree-k8 --draw "
                         "topo.png")
    if args.cluster:
        cluster = load_cluster(args.cluster)
        if args.draw:
            from pathlib import Path


            if Path(args.draw).suffix.lower() not in (".png", ".svg", ".pdf"):
                raise InputError("draw", args.draw, "a file ending in .png, .svg or .pdf")
            path = draw_fabric(cluster, args.draw)
            fabric = cluster.fabric
            print(f"wrote {path}: {fabric.kind}, {fabric.graph.number_of_nodes()} vertices, "
                  f"{fabric.graph.number_of_edges() // 2} cables")
            return 0
        data = cluster.to_dict()
        if cluster.gpu_fabric is not None:

            data["collective_library"] = library_defaults(cluster)
        print_json(data)
        return 0
    for name in cluster_names():
        c = load_cluster(name)
        print(
            f"{name:24s} {c.nodes:4d} x {c.devices_per_node:<2d} {c.device_names:20s} "
            f"inter {format_bandwidth(c.inter_link.bandwidth_Bps):>11s} {format_time(c.inter_link.latency_s):>7s}  "
            f"{c.topology.kind:14s} {c.description}"
        )
    return 0
