"""``flexcomm cost``: predicted time of one collective or one gradient-exchange scheme."""

from __future__ import annotations

import argparse

import numpy as np

from costmodel.collectives import BUS_BANDWIDTH_FACTOR, algorithms
from costmodel.compressed import SCHEMES, SchemeAlgorithms, SparsePayload
from costmodel.errors import InputError
from costmodel.units import format_bandwidth, format_size, format_time, parse_size
from experiments.commands.common import add_network_arguments, cost_model_from_args, print_json


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "cost",
        help="predict the time of a collective (or a compressed gradient exchange)",
        description="Predict one collective's time with the alpha-beta cost model. Sizes: allreduce, "
        "reduce-scatter, broadcast and all-to-all take each rank's whole vector; allgather takes each "
        "rank's contribution. With --scheme, --size is the dense fp32 gradient.",
    )
    parser.add_argument("--collective", default="allreduce", help="allreduce, allgather, reduce-scatter, "
                        "broadcast or alltoall (default allreduce)")
    parser.add_argument("--algorithm", help="algorithm of the collective (default: its first, e.g. ring)")
    parser.add_argument("--scheme", help="price a gradient exchange instead: " + ", ".join(SCHEMES))
    parser.add_argument("--ratio", type=float, default=0.01, help="Top-k fraction of elements kept (default 0.01)")
    parser.add_argument("--index-dtype", default="int32", help="dtype of Top-k indices on the wire (default int32)")
    parser.add_argument("--ranks", required=True, type=int, help="number of ranks (>= 1)")
    parser.add_argument("--size", required=True, help="message size, e.g. 64MiB")
    add_network_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.ranks < 1:
        raise InputError("ranks", args.ranks, "an integer >= 1")
    nbytes = parse_size(args.size, "size")
    model = cost_model_from_args(args)
    table = algorithms()
    if args.scheme:
        payload = SparsePayload(index_dtype=args.index_dtype)
        numel = max(1.0, nbytes / payload.value_bytes)
        scheme_algorithms = SchemeAlgorithms(allreduce=args.algorithm or "ring")
        cost = model.scheme(args.scheme, numel, args.ratio, args.ranks, payload, scheme_algorithms)
        what = f"{args.scheme} (ratio {args.ratio:g}, {args.index_dtype} indices)"
        collective, algorithm = "allreduce", scheme_algorithms.allreduce
    else:
        collective = args.collective
        if collective not in table:
            raise InputError("collective", collective, "one of " + ", ".join(table))
        algorithm = args.algorithm or table[collective][0]
        cost = model.collective(collective, algorithm, nbytes, args.ranks)
        what = f"{collective}/{algorithm}"
    seconds = float(cost.total)
    # nccl-tests' convention: algorithm bandwidth = S / t with S the allgather's *output* (p x m)
    algorithm_bytes = nbytes * args.ranks if collective == "allgather" else nbytes
    factor = float(BUS_BANDWIDTH_FACTOR[collective](np.float64(args.ranks)))
    bus = factor * algorithm_bytes / seconds if seconds > 0 else 0.0
    if args.json:
        print_json({
            "collective": collective, "algorithm": algorithm, "scheme": args.scheme,
            "ranks": args.ranks, "bytes": nbytes, **cost.as_dict(),
            "algorithm_bandwidth_Bps": algorithm_bytes / seconds if seconds > 0 else None,
            "bus_bandwidth_Bps": bus if not args.scheme else None,
        })
        return 0
    print(
        f"{what} over {args.ranks} ranks, {format_size(nbytes)}: {format_time(seconds)} "
        f"(latency {format_time(float(cost.latency))}, bandwidth {format_time(float(cost.bandwidth))}, "
        f"reduction {format_time(float(cost.compute))})"
        + (f"; bus bandwidth {format_bandwidth(bus)}" if not args.scheme and seconds > 0 else "")
    )
    return 0
