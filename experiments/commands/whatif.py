"""``flexcomm whatif``: the embedded default study (dense vs Top-k Allgather vs AR-compatible Top-k)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.compressed import SparsePayload
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_bandwidth
from flexcomm.experiments.commands.common import add_cluster_arguments, cluster_from_args, print_written
from flexcomm.experiments.commands.job_options import add_job_argument
from flexcomm.experiments.whatif import WhatIfGrid, grid_models, run_whatif, where_compression_does_not_pay, winners
from flexcomm.workloads.names import FACTORY_FORM


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "whatif",
        help="sweep ratio, bandwidth, latency and ranks: which gradient exchange gives the fastest step",
        description="Prices dense ring allreduce, Top-k over Allgather and Allreduce-compatible Top-k "
        "for ResNet-50, VGG-16 and a 1.3B transformer over compression ratios 1e-1..1e-4, 1 Gbit/s..3.2 Tbit/s, "
        "latencies 1us..10ms and 2..1024 ranks (or a cluster's own links), writing a tidy CSV and PNG maps. With "
        "--cluster the schemes are ranked by the training step as simulate prices it (buckets overlapping the "
        "backward, the compressor's device work, memory per GPU; the exchange alone in exchange_* columns). On "
        "a cluster with a gpu_fabric every exchange (dense, topk-ag, topk-ar, powersgd, fp16, bf16) is priced "
        "as NCCL runs it over the cluster's rank counts and NIC speeds of 10-800 Gbit/s and its own, and the "
        "command says where compression pays and what it costs in accuracy where the project measured it.",
    )
    add_cluster_arguments(parser)
    add_job_argument(parser)
    parser.add_argument("--model", help="comma-separated models to price (default resnet50,vgg16,transformer-1.3b): "
                        f"zoo names or your own as {FACTORY_FORM}")
    parser.add_argument("--batch", type=float, help="samples per GPU of the step the schemes are ranked by, as "
                        "simulate's --batch (default: each model's, as simulate's)")
    parser.add_argument("--out", default="results/whatif", help="output directory (default results/whatif)")
    parser.add_argument("--index-dtype", default="int32", help="Top-k index dtype on the wire (default int32)")
    parser.add_argument("--reduce-bandwidth", help="reduction throughput for the scatter-add/sum terms, "
                        "e.g. 100GB/s (default: reductions are free)")
    parser.add_argument("--compress-throughput", type=float,
                        help="Top-k selection speed in gradient elements/s (default: 0.75e9, V100 layer-wise "
                        "Top-k from Tyagi & Swany 2023, scaled by the --cluster device's HBM bandwidth over the "
                        "V100's); 0 makes compression free")
    parser.add_argument("--shard", default="0/1", help="K/N: price only shard K of N (for splitting a sweep "
                        "over machines; plots are skipped, concatenate the CSVs)")
    parser.add_argument("--no-plots", action="store_true", help="write the CSV only")
    parser.set_defaults(handler=run)


def _parse_shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise InputError("shard", text, "K/N with integers 0 <= K < N, e.g. 0/4") from None
    if not 0 <= index < count:
        raise InputError("shard", text, "K/N with integers 0 <= K < N, e.g. 0/4")
    return index, count


def run(args: argparse.Namespace) -> int:
    wall_started = time.time()  # files written from here on are this command's
    from flexcomm.experiments import whatif_plots

    cluster = cluster_from_args(args)  # with --cluster, its links replace the bandwidth/latency sweep
    payload = SparsePayload(index_dtype=args.index_dtype)
    payload.index_bytes  # validate the dtype name before any work  # noqa: B018
    if args.compress_throughput is not None and not args.compress_throughput >= 0:
        raise InputError("compress-throughput", args.compress_throughput, "elements per second >= 0")
    grid = WhatIfGrid(payload=payload, compress_elements_per_s=args.compress_throughput)
    if args.model or args.batch is not None:
        names = [n.strip() for n in (args.model or ",".join(grid.models)).split(",") if n.strip()]
        if not names:
            raise InputError("model", args.model, "comma-separated zoo names or module:factory references")
        grid.models, grid.layers, grid.workloads = grid_models(names, args.batch)
    if args.reduce_bandwidth:
        grid.reduce_gamma_s_per_byte = 1.0 / parse_bandwidth(args.reduce_bandwidth, "reduce-bandwidth")
    shard = _parse_shard(args.shard)
    out = Path(args.out)
    started = time.perf_counter()
    table = run_whatif(grid, cluster, shard)
    priced = time.perf_counter() - started
    best = winners(table)
    write_csv_atomic(table, out / "whatif.csv")
    write_csv_atomic(best, out / "whatif_winners.csv")
    figures = []
    if not args.no_plots and shard[1] == 1:
        if cluster is None:
            figures += whatif_plots.plot_link_sweep(table, out)
            figures.append(whatif_plots.plot_crossover(table, out))
        elif cluster.gpu_fabric is not None:
            own = table[table["fabric_nic"]]
            nic = cluster.inter_link.bandwidth_Bps * 8 / 1e9
            figures.append(whatif_plots.plot_step_lines(
                own, out, "ranks", "ranks (GPUs)", f"{cluster.name}, its own {nic:g} Gbit/s NICs: the training step "
                "of every exchange, as simulate prices it", "whatif_cluster.png"))
            if own["ranks"].max() > cluster.devices_per_node:
                top = int(table["ranks"].max())
                figures.append(whatif_plots.plot_step_lines(
                    table[table["ranks"] == top], out, "bandwidth_gbit_s", "NIC bandwidth (Gbit/s)",
                    f"{cluster.name}, {top} GPUs: the training step of every exchange by NIC speed",
                    "whatif_nic_sweep.png", own_x=nic))
        else:
            figures.append(whatif_plots.plot_ranks_sweep(
                table, out, f"{cluster.name}: fastest gradient exchange on its own links; contours = speedup "
                "over dense"))
    share = best["best_scheme"].value_counts(normalize=True).to_dict()
    summary = {
        "configurations": int(len(best)), "predictions": int(len(table)), "pricing_seconds": round(priced, 4),
        "cluster": cluster.name if cluster else None,
        "share_of_configurations_won": {k: round(v, 4) for k, v in share.items()},
        "median_speedup_of_best_over_dense": float(best["speedup_vs_dense"].median()),
        "files": [str(out / "whatif.csv"), str(out / "whatif_winners.csv"), *map(str, figures)],
    }
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(f"priced {len(table):,} predictions ({len(best):,} configurations) in {priced:.2f}s")
    for scheme, fraction in share.items():
        print(f"  {scheme:8s} fastest in {fraction:6.1%} of configurations")
    print(f"  median speedup of the fastest over dense: {summary['median_speedup_of_best_over_dense']:.1f}x")
    if cluster is not None and cluster.gpu_fabric is not None:

        verdicts = where_compression_does_not_pay(table)
        summary["verdicts"] = verdicts
        write_text_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
        print(f"on {cluster.name}'s own {cluster.inter_link.bandwidth_Bps * 8 / 1e9:g} Gbit/s NICs, ranked by the "
              "training step as simulate prices it (every exchange as NCCL runs it; the exchange alone: "
              "exchange_* columns):")
        for line in verdicts:
            print("  " + line)
    print_written(out, wall_started)
    return 0
