"""``flexcomm plan --model <preset or config.json>``: search every layout of a current transformer (TP, CP, PP
with virtual stages, EP, micro-batch, FSDP, recomputation) on a cluster and write the ranked table.

The CLI layer only: flags become one :func:`planner.llm.layout_search.plan_layouts` call (the engine
``flexcomm.plan_layouts`` calls too), its result becomes files and lines.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_size, format_time
from flexcomm.experiments.published_llm_plots import plot_layout_parts
from flexcomm.planner.llm.architecture import Architecture
from flexcomm.planner.llm.hf_config import model_architecture
from flexcomm.planner.llm.layout import check_capacity_factor
from flexcomm.planner.llm.layout_search import LayoutSearch, plan_layouts
from flexcomm.planner.llm.presets import PRESETS


def is_layout_model(name: str) -> bool:
    """A preset name or a HuggingFace config.json: the layout planner's models."""
    return name.endswith(".json") or name.strip().lower().replace("_", "-") in PRESETS


def run_layouts(args: argparse.Namespace) -> int:
    arch = model_architecture(args.model)
    for flag in ("layers", "hidden", "heads", "vocab", "image_size"):
        if getattr(args, flag) is not None:
            raise InputError(flag.replace("_", "-"), getattr(args, flag),
                             f"no --{flag.replace('_', '-')} with --model {args.model} (its configuration sets it)")
    for flag in ("gpus", "batch_size", "seq_len"):  # given as 0 is a typo, not "use the default"
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise InputError(flag.replace("_", "-"), value, "an integer >= 1")
    check_capacity_factor(args.capacity_factor, arch, field="capacity-factor")
    base = load_cluster(args.cluster)
    found = plan_layouts(arch, base, gpus=args.gpus, batch_size=args.batch_size, seq_len=args.seq_len,
                         precision=args.precision or "bf16", capacity_factor=args.capacity_factor)
    _write_and_print(args, arch, base.name, found)
    return 0


def _write_and_print(args: argparse.Namespace, arch: Architecture, cluster_name: str, found: LayoutSearch) -> None:
    """``layouts.csv``, ``best_layout.json``, ``layouts.png`` and the console summary of one search."""
    gpus, batch, seq_len, precision = found.gpus, found.global_batch, found.seq_len, found.precision
    ranked = [c for c in found.ranked if (args.tp is None or c.layout.tp == args.tp)
              and (args.pp is None or c.layout.pp == args.pp)]
    if not ranked:
        raise InputError("tp" if args.tp is not None else "pp", args.tp or args.pp,
                         "a size some fitting layout uses (" + ", ".join(sorted(
                             {f"t{c.layout.tp}-p{c.layout.pp}" for c in found.ranked[:20]})) + ")")
    out = Path(args.out)
    rows = [{"layout": c.layout.label, **{k: v for k, v in vars(c.layout).items()}, "step_s": c.step_s,
             "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu, "memory_GiB": c.memory.total / 2**30, "fits": c.fits,
             **{f"{name}_s": value for name, value in c.parts().items()}} for c in found.costs]
    import pandas as pd

    frame = pd.DataFrame.from_records(rows).sort_values(["fits", "step_s"], ascending=[False, True])
    write_csv_atomic(frame, out / "layouts.csv")
    best = ranked[0]
    counted = arch.counted_flops_per_token(seq_len)
    summary = {"model": arch.name, "source": arch.source, "parameters": arch.parameters,
               "active_parameters": arch.active_parameters, "cluster": cluster_name, "gpus": gpus,
               "batch_size": batch, "seq_len": seq_len, "precision": precision, "layout": vars(best.layout),
               "label": best.layout.label, "step_s": best.step_s, "tokens_per_s_per_gpu": best.tokens_per_s_per_gpu,
               "model_tflops_per_gpu": best.tokens_per_s_per_gpu * counted / 1e12,
               "memory_bytes": best.memory.total, "parts_s": best.parts()}
    write_text_atomic(out / "best_layout.json", json.dumps(summary, indent=2) + "\n")
    figure = plot_layout_parts(ranked[:args.top], out / "layouts.png",
                               f"{arch.name} on {gpus} GPUs of {cluster_name}, {precision}: the "
                               f"{min(args.top, len(ranked))} fastest layouts that fit")
    print(f"{arch.name} ({arch.parameters / 1e9:,.1f}B parameters, {arch.active_parameters / 1e9:,.1f}B active) on "
          f"{gpus:,} GPUs of {cluster_name}, batch {batch:,} sequences of {seq_len:,} tokens, {precision}")
    print(f"priced {len(found.costs):,} layouts in {found.pricing_s:.2f}s; {len(found.ranked):,} fit in "
          f"{format_size(found.memory_limit_bytes)} per GPU")
    print(f"best: {best.layout.label}: {format_time(best.step_s)} per step, {best.tokens_per_s_per_gpu:,.0f} "
          f"tokens/s per GPU, {summary['model_tflops_per_gpu']:,.0f} model TFLOP/s per GPU, "
          f"{format_size(best.memory.total)} per GPU")
    print("top layouts:")
    for place, cost in enumerate(ranked[:5], start=1):
        print(f"  {place}. {cost.layout.label:44s} {format_time(cost.step_s):>9s} {cost.tokens_per_s_per_gpu:10,.0f} "
              f"tokens/s/GPU {format_size(cost.memory.total):>10s}")
    print(f"wrote {out / 'layouts.csv'}, {out / 'best_layout.json'}, {figure}")
