"""``flexcomm cost``: predicted time of one collective or one gradient-exchange scheme."""

from __future__ import annotations

import argparse
import re
import sys

from flexcomm._pricing import cost
from flexcomm.costmodel.collective_libraries.algorithms import is_nccl_algorithm
from flexcomm.costmodel.collective_libraries.runtime import describe
from flexcomm.costmodel.collective_libraries.versions import parse_version
from flexcomm.costmodel.compressed import PRICED_SCHEMES
from flexcomm.costmodel.errors import InputError
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
    parser.add_argument("--algorithm", help="algorithm of the collective: nccl[:ALGO[/PROTO]] or a formula's (ring, "
                        "tree, ...); default nccl on a cluster with a gpu_fabric (as simulate and whatif price it; "
                        "with --order, the collective's first formula), else the first, e.g. ring")
    parser.add_argument("--size", required=True, help="message size in bytes, e.g. 64MiB")
    parser.add_argument("--ranks", required=True, type=int, help="number of ranks (>= 1)")
    parser.add_argument("--order", default="rank", help="with --cluster: the group's rank order, rank, rack-major, "
                        "rail-aligned, random, or a comma list of ranks; other than rank it is priced on the "
                        "links its flows really cross (default rank)")
    parser.add_argument("--scheme", help="price a gradient exchange instead: " + ", ".join(PRICED_SCHEMES)
                        + "; with --algorithm nccl each of its calls runs as NCCL runs it")
    parser.add_argument("--ratio", type=float, default=0.01, help="Top-k fraction of elements kept (default 0.01)")
    parser.add_argument("--index-dtype", default="int32", help="dtype of Top-k indices on the wire (default int32)")
    parser.add_argument("--powersgd-rank", type=int, default=4, help="with --scheme powersgd: rank of the low-rank "
                        "factors (default 4)")
    parser.add_argument("--powersgd-matrix", metavar="ROWSxCOLS", help="with --scheme powersgd: the gradient as "
                        "matrices of this shape, e.g. 4096x16384 (default: one square matrix, the most favourable)")
    parser.add_argument("--explain", action="store_true", help="with --algorithm nccl[:...]: the algorithm, "
                        "protocol, channels, threads, chunk and steps NCCL runs, and the time split into launch, "
                        "latency, pipeline fill and bandwidth")
    parser.add_argument("--nccl-version", help="with --algorithm nccl: price as this NCCL release (2.19-2.30; default "
                        "the cluster's gpu_fabric.nccl_version, else the newest modelled)")
    parser.add_argument("--gpus-per-process", type=int, default=1, help="with --algorithm nccl: GPUs one thread "
                        "launches (nccl-tests -g; default 1, as under torchrun or MPI)")
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

        raise InputError("order", text, "rank, rack-major, rail-aligned, random or a comma list of ranks") from None


def _check_nccl_options(args: argparse.Namespace) -> None:
    """The NCCL options' own values, before anything is priced."""
    if args.nccl_version is not None:
        parse_version(args.nccl_version, "nccl-version")
    if not 0 <= args.gpus_per_process <= max(1, args.ranks):
        raise InputError("gpus-per-process", args.gpus_per_process, f"an integer from 0 (a CUDA-graph replay) to the "
                         f"{args.ranks} ranks (GPUs one thread launches)")


def _refuse_nccl_options_without_nccl(args: argparse.Namespace, algorithm: str) -> None:
    """``--explain``, ``--nccl-version`` and ``--gpus-per-process`` only mean something for NCCL's model: refused
    when the price came from a formula (named, or the default where the cluster has no gpu_fabric or a rank
    order was asked for); the engine says which it priced, so its default is decided in one place."""
    if is_nccl_algorithm(algorithm):
        return
    for flag, used in (("explain", args.explain), ("nccl-version", args.nccl_version is not None),
                       ("gpus-per-process", args.gpus_per_process != 1)):
        if used:
            raise InputError(flag, args.algorithm, "--algorithm nccl (or nccl:ALGO[/PROTO]) with --cluster: "
                             f"--{flag} explains or prices NCCL's model only")


def _check_ranks_per_node(args: argparse.Namespace) -> None:
    """``--ranks-per-node 3 --ranks 8`` leaves a node partly filled whatever the algorithm: refused for every
    algorithm, not only the hierarchical one that reads it (a flag that does nothing this time is still wrong)."""
    per_node = args.ranks_per_node
    if per_node is not None and per_node >= 1 and args.ranks > per_node and args.ranks % per_node:
        raise InputError("ranks", args.ranks, f"a multiple of the {per_node} --ranks-per-node (or at most that "
                         "many): ranks fill whole nodes")


#: ``7B``, ``1.3b``: a size in bytes under a kilobyte written as people write a parameter count.
PARAMETER_COUNT_LOOKALIKE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*[Bb]\s*$")


def parameter_count_hint(size: str) -> str | None:
    """A one-line note when ``--size`` reads like a parameter count (``7B`` is 7 bytes, not 7 billion)."""
    match = PARAMETER_COUNT_LOOKALIKE.match(str(size))
    if not match or float(match["num"]) >= 1000:
        return None
    count = float(match["num"])
    return (f"flexcomm: note: --size {size.strip()} is {count:g} bytes; for the gradient of a {count:g}-billion-"
            f"parameter model write --size {4 * count:g}GB (fp32) or {2 * count:g}GB (16-bit)")


def run(args: argparse.Namespace) -> int:
    hint = parameter_count_hint(args.size)
    if hint:
        print(hint, file=sys.stderr)
    _check_nccl_options(args)
    _check_ranks_per_node(args)
    result = cost(args.collective, args.algorithm, ranks=args.ranks, size=args.size, scheme=args.scheme,
                  ratio=args.ratio, index_dtype=args.index_dtype, cluster=args.cluster or None,
                  profile=args.profile or None, latency=args.latency, bandwidth=args.bandwidth or None,
                  reduce_bandwidth=args.reduce_bandwidth, ranks_per_node=args.ranks_per_node, order=_order(args.order),
                  nccl_version=args.nccl_version, gpus_per_process=args.gpus_per_process,
                  powersgd_rank=args.powersgd_rank, powersgd_matrix=args.powersgd_matrix)
    _refuse_nccl_options_without_nccl(args, result.algorithm)
    executions = [e for e in ([c.execution for c in result.calls] or [result.execution]) if e is not None] \
        if args.explain else []
    if args.json:
        explained = [e.as_dict() for e in executions]
        extra = {"explain": explained[0]} if len(explained) == 1 and not result.calls else (
            {"explain": explained} if explained else {})
        print_json({**result.as_dict(), **extra})
    else:
        print(result)
        if executions:

            print("\n".join(line for e in executions for line in describe(e)))
    return 0
