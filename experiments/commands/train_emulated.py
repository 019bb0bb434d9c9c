"""``flexcomm train-emulated``: data-parallel training with real gradients on a simulated cluster clock."""

from __future__ import annotations

import argparse
import time
from typing import Any

from flexcomm._running import emulation_settings
from flexcomm.compression.moo_config import MOOConfig
from flexcomm.costmodel.errors import InputError, renamed_fields
from flexcomm.costmodel.units import parse_time
from flexcomm.emulation.options import COMPRESS_TIME_MODES
from flexcomm.emulation.options import EMULATION_NETWORKS as NETWORKS
from flexcomm.emulation.options import EMULATION_STRATEGIES as STRATEGIES
from flexcomm.experiments.commands.common import (
    add_cluster_arguments,
    cluster_from_args,
    print_written,
    single_threaded_torch,
)
from flexcomm.experiments.options import MOO_RULES as RULES


def _ratios(text: str, field: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(field, text, "comma-separated ratios in (0, 1], e.g. 0.1,0.033,0.011,0.004,0.001") from None
    if not values or any(not (0 < v <= 1) for v in values):
        raise InputError(field, text, "comma-separated ratios in (0, 1], e.g. 0.1,0.033,0.011,0.004,0.001")
    return values


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "train-emulated",
        help="emulated data-parallel training: real gradients and compressors, simulated cluster time",
        description="N logical workers in one process compute real gradients on their shards, exchange them "
        "through the compressors (error feedback, agreed indices) and apply them with SGD; a simulated clock "
        "prices every step on the cluster (compute from FLOPs, each collective from the cost model, Top-k "
        "time). Writes per-step CSVs, decision logs, summary.json and emulated.png.",
    )
    parser.add_argument("--workload", default="mlp-digits", help="workload name (default mlp-digits)")
    parser.add_argument("--workers", type=int, default=4, help="data-parallel workers N (default 4)")
    add_cluster_arguments(parser, default="8x1-v100-40g")  # the paper's testbed
    parser.add_argument("--strategy", default="topk-ar", help="one of " + ", ".join(STRATEGIES))
    parser.add_argument("--strategies", help="comma-separated strategies to run one after another and plot "
                        "together (overrides --strategy)")
    parser.add_argument("--cr", type=float, default=0.01, help="compression ratio, fraction of elements kept, "
                        "for topk-ag/topk-ar/flexible (default 0.01)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--out", default="results/emulated", help="output directory (default results/emulated)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data split, shards, batches, model (default 0)")
    parser.add_argument("--eval-every", type=int, default=25, help="test accuracy every E steps (default 25)")
    parser.add_argument("--batch-size", type=int, help="per-worker batch (default: the workload's)")
    parser.add_argument("--lr", type=float, help="learning rate (default: the workload's)")
    parser.add_argument("--lr-schedule", help="constant, or cosine decay to 0 over the "
                        "steps (default: the workload's: cosine for the Fashion-MNIST workloads)")
    parser.add_argument("--network", default="static", help="static (the cluster's links) or the paper's dynamic "
                        "c1 / c2 schedules stretched over the run; one of " + ", ".join(NETWORKS))
    parser.add_argument("--jitter", type=float, default=0.0, help="relative s.d. of log-normal noise on every "
                        "collective's simulated time (default 0)")
    parser.add_argument("--compute-time", help="compute seconds per step, e.g. 15ms (default: FLOP model at "
                        "the cluster device's peak x 0.65)")
    parser.add_argument("--compress-time", default="model", help="model (Top-k at --compress-throughput, "
                        "deterministic), measured (this CPU) or none; one of " + ", ".join(COMPRESS_TIME_MODES))
    parser.add_argument("--compress-throughput", type=float,
                        help="Top-k elements/s for --compress-time model (default: 0.75e9, the V100 measurement, "
                        "scaled by the cluster device's HBM bandwidth)")
    parser.add_argument("--price-params", help="price communication, compute and compression as if the "
                        "gradient had this many elements, e.g. 11.69M (ResNet-18); accuracy stays the workload's")
    parser.add_argument("--hysteresis", type=float, default=0.1, help="flexible: relative margin (default 0.1)")
    parser.add_argument("--patience", type=int, default=3, help="flexible: consecutive decisions (default 3)")
    parser.add_argument("--switch-cost", default="0s", help="flexible: what one switch of scheme costs beyond its "
                        "exchange; a switch must save more over --patience steps (default 0s)")
    parser.add_argument("--moo-rule", default="asf", help="moo: point on the front, one of " + ", ".join(RULES))
    parser.add_argument("--moo-every", type=int, default=100, help="moo: re-optimise every W steps (default 100)")
    parser.add_argument("--probe-steps", type=int, default=10, help="moo: steps probed per candidate (default 10)")
    parser.add_argument("--candidates", default="0.1,0.033,0.011,0.004,0.001",
                        help="moo: candidate ratios probed (default the paper's)")
    parser.add_argument("--seeds", type=int, default=1, help="run seeds SEED..SEED+N-1 and report mean and 95 %% "
                        "confidence interval per strategy, with bands in emulated.png (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-plot", action="store_true", help="CSV and JSON only")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    started = time.time()  # files written from here on are this command's

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()] if args.strategies else [args.strategy]
    with renamed_fields({"rule": "moo-rule", "reeval_every": "moo-every", "probe_steps": "probe-steps"}):
        moo = MOOConfig(candidates=_ratios(args.candidates, "candidates"), rule=args.moo_rule,
                        reeval_every=args.moo_every, probe_steps=args.probe_steps)
    settings, strategies = emulation_settings(  # every option checked before torch is imported
        args.workload, strategies, compute_time=args.compute_time or None, price_params=args.price_params or None,
        workers=args.workers, cluster=cluster_from_args(args), ratio=args.cr, steps=args.steps, seed=args.seed,
        eval_every=args.eval_every, batch_size=args.batch_size, lr=args.lr, lr_schedule=args.lr_schedule,
        network=args.network,
        jitter=args.jitter, compress_time=args.compress_time, compress_throughput=args.compress_throughput,
        hysteresis=args.hysteresis, patience=args.patience, moo=moo,
        switch_cost_s=parse_time(args.switch_cost, "switch-cost"),
    )
    single_threaded_torch()  # tiny models: a thread pool on shared cores spins longer than the kernels run (6x)
    if isinstance(args.seeds, bool) or args.seeds < 1:
        raise InputError("seeds", args.seeds, "a number of seeds >= 1")
    if args.seeds > 1:
        return _run_seeds(args, settings, strategies, started)
    from flexcomm.emulation.engine import run_emulation

    results = run_emulation(settings, strategies, args.out, progress=not args.no_progress, plot=not args.no_plot)
    print(f"{'strategy':9s} {'final acc':>9s} {'sim time':>10s} {'mean step':>10s}  schemes / ratios")
    for name, res in results.items():
        s = res.summary
        schemes = ", ".join(f"{k} {v}" for k, v in s["schemes"].items())
        ratios = s["ratios"]
        ratio_text = f"c={ratios[0]:g}" if len(ratios) == 1 else f"c in [{min(ratios):.3g}, {max(ratios):.3g}]"
        extra = f"; {s['switches']} switches" if "switches" in s else ""
        if "moo_decisions" in s:
            extra += f"; {len(s['moo_decisions'])} ratio decisions, probes {s['probe_s']:.3g}s"
        print(f"{name:9s} {s['final_test_acc']:9.4f} {s['sim_time_s']:9.4g}s {s['mean_step_s']:9.3g}s  "
              f"{schemes}; {ratio_text}{extra}")
    print_written(args.out, started)
    return 0


def _run_seeds(args: argparse.Namespace, settings: Any, strategies: list[str], started: float) -> int:
    """``--seeds N``: every strategy on N seeds; the table shows mean +- 95 % interval."""
    from flexcomm.emulation.seeds import format_ci, run_seeds, seed_summary

    seeds = list(range(args.seed, args.seed + args.seeds))
    runs = run_seeds(settings, strategies, seeds, args.out, progress=not args.no_progress, plot=not args.no_plot)
    summary = seed_summary(settings, runs)
    print(f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]}); mean +- 95 % confidence interval")
    for name, s in summary["strategies"].items():
        reach = (f"{format_ci(s['time_to_target_s'], '{:.4g}')} s" if s["reached_target"] else "never") + \
            f", {s['reached_target']}/{len(seeds)} seeds reach it"
        clock = format_ci(s["sim_time_s"], "{:.4g}")
        print(f"{name:9s} final acc {format_ci(s['final_test_acc'])}; sim time {clock} s; "
              f"to {summary['target_test_acc']:.3f} (95 % of the best): {reach}")
    print_written(args.out, started)
    return 0
