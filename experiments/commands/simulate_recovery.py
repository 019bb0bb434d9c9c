"""``flexcomm simulate --recovery POLICY``: goodput of a transformer job over days of node failures, per policy,
and ``--mtbf-study``: the best policy per (node MTBF, job size) cell over checkpoint intervals.

The flags become one call of :mod:`planner.llm.recovery_run`; :mod:`planner.llm.recovery_report` makes the
lines and files."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator

from flexcomm.costmodel.errors import InputError
from flexcomm.planner.llm.recovery_report import report_lines, study_lines, write_files, write_study, written_line
from flexcomm.planner.llm.recovery_run import FailureModel, compare_policies, mtbf_study, recovery_job


def failure_model(args: argparse.Namespace) -> FailureModel:
    """The failure-model flags as the engine's keywords."""
    return FailureModel(horizon=args.horizon, mtbf=args.mtbf, repair_time=args.repair_time, timeout=args.timeout,
                        restart_cost=args.restart_cost, rack_mtbf=args.rack_mtbf, rack_nodes=args.rack_nodes,
                        checkpoint_interval=args.checkpoint_interval, storage_bandwidth=args.storage_bandwidth,
                        planning_time=args.planning_time, seed=args.seed)


def run_recovery(args: argparse.Namespace) -> int:
    if args.mtbf_study:
        return _study(args)
    comparison = compare_policies(args.workload, args.cluster, args.recovery, nodes=args.nodes,
                                  batch_size=args.batch_size, failures=failure_model(args))
    for line in report_lines(comparison):
        print(line)
    if args.out:
        print(written_line(write_files(comparison, args.out)))
    return 0


@contextlib.contextmanager
def study_bar(shown: bool) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback drawing the MTBF study's bar on stderr (only on a terminal, and not
    at all unless ``shown``), closed however the study ends: the command's and ``flexcomm.recovery``'s."""
    from tqdm import tqdm

    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc="mtbf study", unit="run", leave=False, file=sys.stderr,
                       disable=None if shown else True)  # None: only on a terminal
        bar.update(done - bar.n)

    try:
        yield progress
    finally:
        if bar is not None:
            bar.close()


def _study(args: argparse.Namespace) -> int:
    if not args.out:
        recovery_job(args.workload, args.cluster, args.nodes, args.batch_size)  # a bad job is said first
        raise InputError("out", "(missing)", "an output directory for the study, e.g. --out results/recovery")
    with study_bar(not args.no_progress) as progress:
        study = mtbf_study(args.workload, args.cluster, nodes=args.nodes, batch_size=args.batch_size,
                           failures=failure_model(args), progress=progress)
    written = write_study(study, args.out)
    for line in study_lines(study):
        print(line)
    print(written_line(written))
    return 0
