"""``flexcomm cost``: predicted time of one collective or one gradient-exchange scheme."""

from __future__ import annotations

import argparse

from flexcomm.costmodel.compressed import SCHEMES
from flexcomm.experiments.commands.common import add_network_arguments, print_json


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "cost",
        help="predict the time of a collective (or a compressed gradient exchange)",
        description="Predict one collective's time with the alpha-beta cost model. Sizes: allreduce, "
        "reduce-scatter, broadcast and all-to-all take each rank's whole vector; allgather takes each "
        "rank's contribution. With --scheme, --size is the dense fp32 gradient. Python: flexcomm.cost(...).",
    )
    parser.add_argument("--collective", default="allreduce", help="allreduce, allgather, reduce-scatter, "
                        "broadcast or all-to-all (alias alltoall; default allreduce)")
    parser.add_argument("--algorithm", help="algorithm of the collective (default: its first, e.g. ring)")
    parser.add_argument("--size", required=True, help="message size in bytes, e.g. 64MiB")
    parser.add_argument("--ranks", required=True, type=int, help="number of ranks (>= 1)")
    parser.add_argument("--order", default="rank", help="with --cluster: the group's rank order, rank, rack-major, "
                        "rail-aligned, random, or a comma list of ranks; other than rank it is priced on the "
                        "links its flows really cross (default rank)")
    parser.add_argument("--scheme", help="price a gradient exchange instead: " + ", ".join(SCHEMES))
    parser.add_argument("--ratio", type=float, default=0.01, help="Top-k fraction of elements kept (default 0.01)")
    parser.add_argument("--index-dtype", default="int32", help="dtype of Top-k indices on the wire (default int32)")
    add_network_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.set_defaults(handler=run)


def _order(text: str) -> str | list[int]:
    """``rank``/``rack-major``/... or ``3,0,1,2``."""
    if "," not in text and not text.strip().isdigit():
        return text.strip()
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        from flexcomm.costmodel.errors import InputError

        raise InputError("order", text, "rank, rack-major, rail-aligned, random or a comma list of ranks") from None


def run(args: argparse.Namespace) -> int:
    from flexcomm._pricing import cost

    result = cost(args.collective, args.algorithm, ranks=args.ranks, size=args.size, scheme=args.scheme,
                  ratio=args.ratio, index_dtype=args.index_dtype, cluster=args.cluster or None,
                  profile=args.profile or None, latency=args.latency, bandwidth=args.bandwidth or None,
                  reduce_bandwidth=args.reduce_bandwidth, ranks_per_node=args.ranks_per_node, order=_order(args.order))
    if args.json:
        print_json(result.as_dict())
    else:
        print(result)
    return 0
