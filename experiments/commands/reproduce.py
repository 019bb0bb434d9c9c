"""``flexcomm reproduce ID|all``: regenerate the research results (CSV, PNG and a note per study)."""

from __future__ import annotations

import argparse
import time

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_LOCAL_PROCESSES
from flexcomm.experiments.commands.common import output_folder, print_written, single_threaded_torch
from flexcomm.experiments.options import check_reproduction_ids


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "reproduce",
        help="regenerate the research results: crossover, speedup, pareto, adaptation, accuracy-time, scaling, "
        "table4, megatron, korthikanti (or all)",
        description="Regenerates, in simulation and emulated training, the results flexible communication rests "
        "on; each writes a tidy CSV, PNG figures and a markdown note that sets our number beside the literature's, "
        "as soon as it finishes. Studies: 1 crossover (Allgather vs AR Top-k vs dense against c, crossover map); "
        "2 speedup (static Top-k vs flexible switching over networks); 3 pareto (fronts of a few models); "
        "4 adaptation (c and collective over time on C1/C2); 5 accuracy-time (accuracy vs wall-clock); "
        "6 scaling (efficiency 8 to 1024 ranks); 7 table4 (the paper's Table IV step times); "
        "8 megatron (Megatron-LM's GPT weak-scaling table predicted by the transformer planner); 9 korthikanti "
        "(Korthikanti et al.'s iteration times on the same A100s, predicted with nothing fitted).",
    )
    parser.add_argument("ids", nargs="+", metavar="ID", help="all, a number 1-9 or a study id")
    parser.add_argument("--out", default="results/reproduce", help="output directory (default results/reproduce)")
    parser.add_argument("--full", action="store_true", help="the larger published-scale settings (slower)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every study (default 0)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes for the independent emulated runs of a study (default 1)")
    parser.add_argument("--fresh", action="store_true",
                        help="recompute every emulated run; by default runs kept in OUT/runs/ by an earlier or "
                        "interrupted call with the same settings are reused")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    started = time.time()  # files written from here on are this command's

    # every option before the studies load (they import torch): a refusal costs the CLI's start-up only
    if args.seed < 0:
        raise InputError("seed", args.seed, "an integer >= 0")
    if args.jobs < 1:
        raise InputError("jobs", args.jobs, "a number of processes >= 1")
    MAX_LOCAL_PROCESSES.check("jobs", args.jobs)
    check_reproduction_ids(args.ids)
    output_folder(args.out)
    from pathlib import Path

    from flexcomm.experiments.reproductions import resolve, run_reproductions
    from flexcomm.experiments.reproductions.base import RUNS_DIR, Settings

    resolve(args.ids)
    single_threaded_torch()

    settings = Settings(seed=args.seed, full=args.full, progress=not args.no_progress, jobs=args.jobs,
                        runs_dir=Path(args.out) / RUNS_DIR, reuse_runs=not args.fresh)
    results = run_reproductions(args.ids, args.out, settings)
    for name, outcome in results.items():
        print(f"== {name}")
        for line in outcome.findings:
            print(f"  - {line}")
    print_written(args.out, started)
    return 0
