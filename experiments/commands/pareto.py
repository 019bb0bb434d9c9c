"""``flexcomm pareto``: the front of step time vs compression gain for one workload on one cluster, annotated."""

from __future__ import annotations

import argparse
import json
import time

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.units import parse_count
from flexcomm.experiments.commands.common import (
    add_cluster_arguments,
    cluster_from_args,
    output_folder,
    print_written,
    single_threaded_torch,
)
from flexcomm.experiments.options import pareto_configs


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "pareto",
        help="draw the Pareto front of parallel vs statistical efficiency and the chosen compression ratio",
        description="Warms the workload up in emulated training, measures the compression gain at the paper's "
        "candidate ratios on real gradients, prices every (ratio, scheme) with the cost model on the cluster, "
        "marks the dominated ones, builds the NSGA-II front and annotates the points the ASF (paper), knee and "
        "utopia rules pick. Writes pareto.png, candidates.csv, front.csv, picks.csv and pareto.json.",
    )
    parser.add_argument("--workload", default="mlp-digits", help="emulated workload (default mlp-digits; "
                        "see `flexcomm train-emulated --help`)")
    add_cluster_arguments(parser, default="8x1-v100-40g")
    parser.add_argument("--workers", type=int, default=8, help="data-parallel workers N (default 8)")
    parser.add_argument("--rule", default="asf", help="the operating-point rule to mark chosen: asf (paper, "
                        "weights 0.6/0.4), knee or utopia (default asf)")
    parser.add_argument("--warmup-steps", type=int, default=50, help="training steps before measuring (default 50)")
    parser.add_argument("--probe-steps", type=int, default=5, help="steps per candidate ratio (default 5)")
    parser.add_argument("--grid-points", type=int, default=40, help="ratios per scheme on the log grid (default 40)")
    parser.add_argument("--price-params", help="price the exchange as a model of this many parameters, e.g. "
                        "11.69M for ResNet-18 (default: the workload's own size)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data, model and NSGA-II (default 0)")
    parser.add_argument("--out", default="results/pareto", help="output directory (default results/pareto)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    started = time.time()  # files written from here on are this command's

    # every option first, without torch (the study imports it): a refusal costs the CLI's start-up only
    cluster = cluster_from_args(args)
    price = int(parse_count(args.price_params, "price-params")) if args.price_params else None
    pareto_configs(args.workload, cluster, workers=args.workers,
                   warmup_steps=args.warmup_steps, probe_steps=args.probe_steps, grid_points=args.grid_points,
                   rule=args.rule, price_params=price, compute_time_s=None, seed=args.seed)
    out = output_folder(args.out)
    from flexcomm.experiments.pareto import pareto_study, plot_pareto, summary_lines

    single_threaded_torch()
    result = pareto_study(args.workload, cluster, workers=args.workers, warmup_steps=args.warmup_steps,
                          probe_steps=args.probe_steps, grid_points=args.grid_points, rule=args.rule,
                          price_params=price, seed=args.seed)
    write_csv_atomic(result.candidates, out / "candidates.csv")
    write_csv_atomic(result.front.frame, out / "front.csv")
    write_csv_atomic(result.picks, out / "picks.csv")
    write_csv_atomic(result.probes, out / "probes.csv")
    chosen = result.picks.set_index("rule").loc[args.rule]
    payload = {**result.info, "chosen": {"rule": args.rule, **{k: (v.item() if hasattr(v, "item") else v)
                                                                for k, v in chosen.items()}}}
    write_text_atomic(out / "pareto.json", json.dumps(payload, indent=2, default=float) + "\n")
    plot_pareto(result, out / "pareto.png")
    print("\n".join(summary_lines(result)))
    print_written(out, started)
    return 0
