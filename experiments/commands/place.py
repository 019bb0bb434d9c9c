"""``flexcomm place``: place an operator graph on a cluster's devices and compare placers.

Baselines (single device, critical-path list scheduling, METIS partition, DP over a chain), a
grouper-placer policy trained with PPO, and synchronous and asynchronous (AES-RL style) evolution
strategies, all priced by one simulator of the training step (``placement.simulator``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flexcomm.experiments.commands.common import add_cluster_arguments, output_folder
from flexcomm.placement.run import PlacementRun, place_graph


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


def place_options(args: argparse.Namespace) -> dict[str, Any]:
    """The engine's keywords from the parsed flags."""
    return {"devices": args.devices, "method": args.method, "budget_s": args.budget_s, "iterations": args.iterations,
            "micro_batches": args.micro_batches, "workers": args.workers, "measure_steps": args.measure_steps,
            "eval_jitter": args.eval_jitter, "rule": args.rule, "rl_share": args.rl_share, "es_start": args.es_start,
            "groups": args.groups, "ppo_batch": args.ppo_batch, "efficiency": args.efficiency,
            "contention": not args.no_contention, "seed": args.seed, "profile": args.profile or None}


def run(args: argparse.Namespace) -> int:
    """Place, write ``--out``'s tables and figures, print the comparison and the choice."""
    out = Path(args.out)
    with search_bars(not args.no_progress) as progress:  # the folder once the options are checked, before torch
        result = place_graph(args.cluster, args.model, args.batch_size, **place_options(args), progress=progress,
                             before_work=lambda: output_folder(out))
    print(write_and_report(result, out, plot=not args.no_plot), end="")
    return 0


def write_and_report(result: PlacementRun, out: Path, *, plot: bool) -> str:
    """Write the tables (and, with ``plot``, the figures) under ``out``; return the report the command prints."""
    from flexcomm.placement.plots import draw  # torch and matplotlib, as the whole placement engine
    from flexcomm.placement.report import report_text, write_tables

    write_tables(result, out)
    if plot:
        draw(result, out)
    return report_text(result, out)


@contextmanager
def search_bars(shown: bool) -> Iterator[Callable | None]:
    """compare()'s progress factory: one tqdm bar per search method, each closed when the next starts, all closed
    on leaving (None when not ``shown``)."""
    if not shown:
        yield None
        return
    from tqdm import tqdm

    bars: list = []

    def progress(method: str):  # noqa: ANN202
        for old in bars:  # one bar at a time: the previous search has finished
            old.close()
        bar = tqdm(total=100, desc=f"{method:>8}", unit="%", leave=True, mininterval=0.5, disable=None,
                   bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} {postfix}")
        bars.append(bar)

        def report(fraction: float, best: float) -> None:
            bar.set_postfix_str(f"best {best * 1e3:.4g} ms", refresh=False)
            bar.update(max(0, int(round(100 * fraction)) - bar.n))  # redraws at most every mininterval
        return report

    try:
        yield progress
    finally:
        for bar in bars:
            bar.close()
