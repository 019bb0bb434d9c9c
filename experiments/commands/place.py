"""``flexcomm place``: place an operator graph on a cluster's devices and compare placers.

Baselines (single device, critical-path list scheduling, METIS partition, DP over a chain), a
grouper-placer policy trained with PPO, and synchronous and asynchronous (AES-RL style) evolution
strategies, all priced by one simulator of the training step (``placement.simulator``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.calibration import CalibrationProfile, calibrated_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_LOCAL_PROCESSES
from flexcomm.experiments.commands.common import add_cluster_arguments, output_folder
from flexcomm.experiments.options import ES_RULES, GRAPH_NAMES, PLACE_BASELINES, PLACE_METHODS
from flexcomm.placement.devices import DeviceSet
from flexcomm.placement.es import ESConfig
from flexcomm.placement.simulator import PlacementProblem
from flexcomm.planner.rank_devices import load_plan_cluster


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "place",
        help="device placement of an operator graph: baselines, PPO grouper-placer, async vs sync ES",
        description="Place a model's operator graph on the first --devices ranks of a cluster to minimise the "
        "simulated training-step time (forward + backward, transfers on the cluster's links, memory limits, "
        "GPipe micro-batches). Writes placement.json/.csv, comparison.csv/.md against every baseline, "
        "curves.csv, search_curves.png and timeline.png.",
    )
    add = parser.add_argument
    add("--model", default="inception", help="operator graph (planner.graphs.GRAPH_NAMES; default inception)")
    add("--batch-size", type=int, default=128, help="batch of the traced graph (default 128)")
    add_cluster_arguments(parser, default="4x8-a100-ib")
    add("--devices", type=int, default=8, help="use the first N ranks of the cluster (default 8; 0 = all)")
    add("--method", default="all", help="all, or comma-separated of single, critical-path, partition, dp-chain, "
        "ppo, es (synchronous), async-es (default all); baselines always run for the table")
    add("--budget-s", type=float, default=20.0, help="wall-clock seconds per search method (default 20)")
    add("--iterations", type=int, help="also stop PPO after N updates and each ES after N x --ppo-batch "
        "evaluations (whichever comes first)")
    add("--micro-batches", type=int, default=4, help="GPipe micro-batches per step, 1 = no pipelining (default 4)")
    add("--workers", type=int, default=2, help="ES worker processes (default 2)")
    add("--measure-steps", type=float, default=5.0, help="each ES evaluation also waits this many simulated "
        "step times (x a log-normal factor), standing for measuring the candidate (default 5; 0 = off)")
    add("--eval-jitter", type=float, default=0.5, help="sigma of that log-normal factor (default 0.5)")
    add("--rule", default="linear", help="async ES mean-update rule: linear, sigmoid, absolute, relative")
    add("--rl-share", type=float, default=0.0, help="async ES: target share of candidates from PPO updates "
        "(hybrid AES-RL; default 0)")
    add("--es-start", default="best", help="ES start placement: best (the best baseline's) or a baseline's name, "
        "e.g. single (default best)")
    add("--groups", type=int, default=16, help="PPO grouper: number of groups (default 16)")
    add("--ppo-batch", type=int, default=16, help="PPO placements sampled per update (default 16)")
    add("--efficiency", type=float, default=0.65, help="fraction of peak FLOP/s ops reach (default 0.65)")
    add("--no-contention", action="store_true", help="transfers from one device do not queue on its port")
    add("--seed", type=int, default=0, help="seed of PPO, ES sampling and partitioning (default 0)")
    add("--out", default="results/place", help="output directory (default results/place)")
    add("--no-progress", action="store_true", help="no progress bars")
    add("--no-plot", action="store_true", help="skip the PNG figures")
    parser.set_defaults(handler=run)


def _check(args: argparse.Namespace) -> None:
    if args.model not in GRAPH_NAMES:
        raise InputError("model", args.model, "one of " + ", ".join(GRAPH_NAMES))
    if args.batch_size < 1:
        raise InputError("batch-size", args.batch_size, "an integer >= 1")
    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        raise InputError("budget-s", args.budget_s, "seconds > 0")
    if args.iterations is not None and args.iterations < 1:
        raise InputError("iterations", args.iterations, "an integer >= 1")
    if args.micro_batches < 1:
        raise InputError("micro-batches", args.micro_batches, "an integer >= 1")
    if args.workers < 1:
        raise InputError("workers", args.workers, "an integer >= 1")
    MAX_LOCAL_PROCESSES.check("workers", args.workers)
    if not (math.isfinite(args.measure_steps) and args.measure_steps >= 0):
        raise InputError("measure-steps", args.measure_steps, "a number >= 0")
    if not (math.isfinite(args.eval_jitter) and args.eval_jitter >= 0):
        raise InputError("eval-jitter", args.eval_jitter, "a number >= 0")
    if not 0 <= args.rl_share < 1:
        raise InputError("rl-share", args.rl_share, "a fraction in [0, 1)")
    if args.groups < 1 or args.ppo_batch < 2:
        raise InputError("groups", (args.groups, args.ppo_batch), "--groups >= 1 and --ppo-batch >= 2")
    if not (math.isfinite(args.efficiency) and 0 < args.efficiency <= 1):
        raise InputError("efficiency", args.efficiency, "a fraction in (0, 1]")
    if args.seed < 0:  # numpy's generators refuse it, after minutes of baselines, with a traceback
        raise InputError("seed", args.seed, "an integer >= 0")
    _check_names(args)


def _check_names(args: argparse.Namespace) -> None:
    """Method, ES start and rule names against torch-free mirrors (:mod:`experiments.options`; the placement
    modules import torch)."""
    names = [m.strip() for m in args.method.split(",") if m.strip()]
    if names != ["all"] and (not names or any(m not in PLACE_METHODS for m in names)):
        raise InputError("method", args.method, "all, or a comma-separated list of " + ", ".join(PLACE_METHODS))
    if args.es_start != "best" and args.es_start not in PLACE_BASELINES:
        raise InputError("es-start", args.es_start, "best or one of " + ", ".join(PLACE_BASELINES))
    if args.rule not in ES_RULES:
        raise InputError("rule", args.rule, "one of " + ", ".join(ES_RULES))


def _devices(args: argparse.Namespace):
    plan = load_plan_cluster(args.cluster)
    if args.profile:
        plan = plan.with_cluster(calibrated_cluster(plan.cluster, CalibrationProfile.load(args.profile)))
    count = plan.world_size if args.devices == 0 else args.devices
    if not 1 <= count <= plan.world_size:
        raise InputError("devices", args.devices, f"0 (all) or 1..{plan.world_size} (ranks of {plan.name})")
    return DeviceSet.from_cluster(plan.cluster, count, rank_devices=plan.devices)


def run(args: argparse.Namespace) -> int:
    _check(args)
    devices = _devices(args)  # the cluster file too, before torch loads
    out = output_folder(args.out)
    from flexcomm.placement.compare import parse_methods

    methods = parse_methods(args.method)
    from flexcomm.placement.compare import compare, markdown, table
    from flexcomm.placement.ppo import PPOConfig
    from flexcomm.planner.graphs import build_graph

    graph = build_graph(args.model, batch_size=args.batch_size)
    problem = PlacementProblem(graph, devices, efficiency=args.efficiency, micro_batches=args.micro_batches,
                               contention=not args.no_contention)
    max_evals = None if args.iterations is None else args.iterations * args.ppo_batch
    es_cfg = ESConfig(workers=args.workers, budget_s=args.budget_s, max_evaluations=max_evals, rule=args.rule,
                      measure_steps=args.measure_steps, eval_jitter=args.eval_jitter, seed=args.seed,
                      rl_share=args.rl_share)
    ppo_cfg = PPOConfig(groups=args.groups, batch=args.ppo_batch, budget_s=args.budget_s,
                        iterations=args.iterations, seed=args.seed)

    bars: list = []
    progress = _progress(args, bars)
    try:
        comparison = compare(problem, methods, es=es_cfg, ppo=ppo_cfg, progress=progress, es_start=args.es_start)
    finally:
        for bar in bars:
            bar.close()
    frame = table(problem, comparison)
    chosen = comparison.best(methods)
    title = (f"{args.model} (batch {args.batch_size}, {args.micro_batches} micro-batches) on "
             f"{devices.count} devices of {devices.cluster_name}")
    payload = _write_tables(args, out, frame, title, comparison, problem, graph, devices, chosen)
    if not args.no_plot:
        from flexcomm.placement.plots import search_curves, timeline

        if comparison.curves:
            search_curves(comparison, out / "search_curves.png", title)
        timeline(problem, chosen.placement, out / "timeline.png", f"{chosen.method} on {devices.count} devices")
    print(markdown(frame, title))
    print(f"best: {chosen.method} {chosen.step_time_s * 1e3:.4g} ms "
          f"({payload['speedup_vs_single']:.2f}x over single device); wrote {out}/")
    return 0


def _progress(args: argparse.Namespace, bars: list):  # noqa: ANN202 - compare()'s progress factory
    """One tqdm bar per search method, each closed when the next starts (none with --no-progress)."""
    from tqdm import tqdm

    def progress(method: str):  # noqa: ANN202
        if args.no_progress:
            return None
        for old in bars:  # one bar at a time: the previous search has finished
            old.close()
        bar = tqdm(total=100, desc=f"{method:>8}", unit="%", leave=True, mininterval=0.5, disable=None,
                   bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} {postfix}")
        bars.append(bar)

        def report(fraction: float, best: float) -> None:
            bar.set_postfix_str(f"best {best * 1e3:.4g} ms", refresh=False)
            bar.update(max(0, int(round(100 * fraction)) - bar.n))  # redraws at most every mininterval
        return report

    return progress


def _write_tables(args: argparse.Namespace, out: Path, frame, title: str, comparison, problem, graph,  # noqa: ANN001
                  devices, chosen) -> dict:
    """comparison.csv/.md, curves.csv, placement.csv and placement.json (returned), each written atomically."""
    import pandas as pd

    from flexcomm.placement.compare import markdown  # torch, as the whole placement engine

    write_csv_atomic(frame, out / "comparison.csv")
    write_text_atomic(out / "comparison.md", markdown(frame, title))
    curves = [{"method": m, "wall_s": w, "evaluations": e, "best_step_time_s": b}
              for m, curve in comparison.curves.items() for w, e, b in curve]
    write_csv_atomic(pd.DataFrame(curves, columns=["method", "wall_s", "evaluations", "best_step_time_s"]),
                     out / "curves.csv")
    names = devices.names
    write_csv_atomic(pd.DataFrame({"op": [str(v) for v in problem.nodes],
                                   "kind": [graph.nodes[v].get("kind", "") for v in problem.nodes],
                                   "device": chosen.placement,
                                   "device_name": [names[d] for d in chosen.placement]}), out / "placement.csv")
    sim = problem.simulate(chosen.placement)
    payload = {
        "model": args.model, "batch_size": args.batch_size, "micro_batches": args.micro_batches,
        "cluster": devices.cluster_name, "devices": list(names), "method": chosen.method,
        "step_time_s": chosen.step_time_s, "feasible": chosen.feasible,
        "speedup_vs_single": float(frame.loc[frame.method == chosen.method, "speedup_vs_single"].iloc[0]),
        "memory_bytes": sim.memory_bytes.tolist(), "seed": args.seed,
        "placement": {str(v): names[d] for v, d in zip(problem.nodes, chosen.placement, strict=True)},
    }
    write_text_atomic(out / "placement.json", json.dumps(payload, indent=2) + "\n")
    return payload
