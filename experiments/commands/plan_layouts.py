"""``flexcomm plan --model <preset or config.json>``: search every layout of a current transformer (TP, CP, PP
with virtual stages, EP, micro-batch, FSDP, recomputation) on a cluster and write the ranked table.

The CLI layer only: flags become one :func:`planner.llm.layout_plan.plan_layout_model` call (the engine
``flexcomm.plan(<preset>, ...)`` calls too), its result becomes files (:func:`write_files`) and lines
(:func:`report_lines`, the API's report as well).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_size, format_time
from flexcomm.experiments.published_llm_plots import plot_layout_parts
from flexcomm.planner.llm.layout_plan import LayoutPlan, plan_layout_model
from flexcomm.planner.llm.presets import PRESETS


def is_layout_model(name: str) -> bool:
    """A preset name or a HuggingFace config.json: the layout planner's models."""
    return name.endswith(".json") or name.strip().lower().replace("_", "-") in PRESETS


def run_layouts(args: argparse.Namespace) -> int:
    for flag in ("layers", "hidden", "heads", "vocab", "image_size"):
        if getattr(args, flag) is not None:
            raise InputError(flag.replace("_", "-"), getattr(args, flag),
                             f"no --{flag.replace('_', '-')} with --model {args.model} (its configuration sets it)")
    plan = plan_layout_model(args.model, args.cluster, gpus=args.gpus, batch_size=args.batch_size,
                             seq_len=args.seq_len, precision=args.precision, capacity_factor=args.capacity_factor,
                             tp=args.tp, pp=args.pp)
    print("\n".join(report_lines(plan, write_files(plan, Path(args.out), args.top))))
    return 0


def write_files(plan: LayoutPlan, out: Path, top: int) -> list[Path]:
    """``layouts.csv``, ``best_layout.json`` and a figure of the ``top`` fastest fitting layouts' step parts."""
    found = plan.search
    write_csv_atomic(plan.table(), out / "layouts.csv")
    write_text_atomic(out / "best_layout.json", json.dumps(plan.summary(), indent=2) + "\n")
    figure = plot_layout_parts(plan.ranked[:top], out / "layouts.png",
                               f"{plan.arch.name} on {found.gpus} GPUs of {plan.cluster_name}, {found.precision}: "
                               f"the {min(top, len(plan.ranked))} fastest layouts that fit")
    return [out / "layouts.csv", out / "best_layout.json", Path(figure)]


def report_lines(plan: LayoutPlan, written: list[Path]) -> list[str]:
    """The job, how many layouts were priced and fit, the best one, the five fastest, and the files written."""
    arch, found, best = plan.arch, plan.search, plan.best
    lines = [
        f"{arch.name} ({arch.parameters / 1e9:,.1f}B parameters, {arch.active_parameters / 1e9:,.1f}B active) on "
        f"{found.gpus:,} GPUs of {plan.cluster_name}, batch {found.global_batch:,} sequences of {found.seq_len:,} "
        f"tokens, {found.precision}",
        f"priced {len(found.costs):,} layouts in {found.pricing_s:.2f}s; {len(found.ranked):,} fit in "
        f"{format_size(found.memory_limit_bytes)} per GPU",
        f"best: {best.layout.label}: {format_time(best.step_s)} per step, {best.tokens_per_s_per_gpu:,.0f} "
        f"tokens/s per GPU, {plan.model_tflops_per_gpu():,.0f} model TFLOP/s per GPU, "
        f"{format_size(best.memory.total)} per GPU",
        "top layouts:",
    ]
    for place, cost in enumerate(plan.ranked[:5], start=1):
        lines.append(f"  {place}. {cost.layout.label:44s} {format_time(cost.step_s):>9s} "
                     f"{cost.tokens_per_s_per_gpu:10,.0f} tokens/s/GPU {format_size(cost.memory.total):>10s}")
    if written:
        lines.append("wrote " + ", ".join(str(p) for p in written))
    return lines
