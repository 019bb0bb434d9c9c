"""``flexcomm plan --model gpt``: flags into one call of the transformer planner, its result into files and lines.

The engine (:func:`planner.llm.transformer_plan.plan_transformer`) checks every option it takes; this module
checks only the flags that belong to the command line (``--top``) or to the other planners (refused or ignored
here as before) and prints."""

from __future__ import annotations

import argparse
from pathlib import Path

from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.whatif_step import exchange_lines
from flexcomm.planner.llm.transformer_plan import DEFAULT_SIMULATE_TOP, TransformerPlanResult, plan_transformer
from flexcomm.planner.llm.transformer_report import report_lines, write_files


def transformer_options(args: argparse.Namespace) -> dict:
    """The engine's keywords from the parsed flags (those left out take the engine's defaults)."""
    return {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "seq_len": args.seq_len,
            "vocab": args.vocab, "precision": args.precision, "tp": args.tp, "pp": args.pp,
            "nics_per_node": args.nics_per_node, "efficiency": args.efficiency,
            "memory_fraction": args.memory_fraction, "scheme": args.scheme, "ratio": args.ratio,
            "attention": args.attention, "profile": args.profile or None,
            "simulate_top": DEFAULT_SIMULATE_TOP if args.simulate_top is None else args.simulate_top}


def run_transformer(args: argparse.Namespace) -> int:
    """Plan, write ``--out``'s files, print the report and the exchange's accuracy cost."""
    if args.image_size is not None:
        raise InputError("image-size", args.image_size, "no --image-size with --model gpt (a CNN option)")
    result = plan_transformer(args.cluster, args.batch_size, **transformer_options(args))
    written = write_files(result, Path(args.out), args.top)
    for line in [*report_lines(result, args.top), "wrote " + ", ".join(str(p) for p in written),
                 *exchange_lines(result.exchange)]:
        print(line)
    return 0


def printed(result: TransformerPlanResult, top: int, written: list[Path]) -> str:
    """The report as the command prints it, for the Python API's ``report``."""
    wrote = ["wrote " + ", ".join(str(p) for p in written)] if written else []
    return "\n".join([*report_lines(result, top), *wrote, *exchange_lines(result.exchange)]) + "\n"
