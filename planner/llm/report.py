"""What ``flexcomm plan --model gpt`` writes: every priced plan (CSV), the top ones (markdown), the best plan
(JSON, with the keys of the graph planner's ``best_plan.json`` and the transformer's own) and a figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic, write_csv_atomic, write_text_atomic
from flexcomm.costmodel.plotting import use_file_backend
from flexcomm.costmodel.units import format_count, format_size, format_time
from flexcomm.planner.llm.pricing import LLMPlanCost
from flexcomm.planner.llm.search import STEP_PARTS, LLMSearchResult

PARTS = STEP_PARTS
#: How the figure names a part where its field name would not say it.
PART_LABELS = {"dp_exposed_s": "data-parallel allreduce not hidden by the backward", "tp_comm_s": "tp comm",
               "dp_device_s": "gradient compression (device work)",
               "p2p_s": "pipeline sends", "memory_bound_s": "memory-bound ops"}


def best_summary(cost: LLMPlanCost) -> dict[str, Any]:
    plan = cost.plan
    return {"tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "step_s": cost.step_s,
            "micro_batch_size": plan.micro_batch_size, "micro_batches": cost.micro_batches,
            "virtual_stages": plan.virtual_stages, "recompute": plan.recompute,
            "sequence_parallel": plan.sequence_parallel, "zero": plan.zero,
            "tflops_per_gpu": cost.tflops_per_gpu, "megatron_tflops_per_gpu": cost.tflops_per_gpu,
            "tokens_per_s": cost.extra["tokens_per_s"], "mfu": cost.extra["mfu"], "hfu": cost.extra["hfu"],
            "peak_memory_bytes": cost.peak_memory_bytes,
            "label": plan.label, "breakdown_s": {k: getattr(cost, k) for k in PARTS}}


def rate_line(cost: LLMPlanCost) -> str:
    """Throughput as people read it: tokens/s, MFU and HFU (model and hardware FLOPs against the device's
    peak), and Megatron's teraFLOP/s per GPU labelled as such (it credits a full recompute)."""
    return (f"{cost.extra['tokens_per_s']:,.0f} tokens/s, MFU {cost.extra['mfu']:.1%} (HFU {cost.extra['hfu']:.1%}), "
            f"{cost.tflops_per_gpu:.0f} TFLOP/s per GPU by Megatron's count (which credits a full recompute)")


def table(result: LLMSearchResult) -> pd.DataFrame:
    ranked = [c.row() for c in result.ranked]
    rejected = sorted((c for c in result.costs if not c.fits), key=lambda c: c.peak_memory_bytes)
    frame = pd.DataFrame([*ranked, *(c.row() for c in rejected)])
    frame.insert(0, "rank", [*range(1, len(ranked) + 1), *([None] * len(rejected))])
    best = result.best.step_s
    frame["slowdown"] = [c.step_s / best if c.fits else None for c in [*result.ranked, *rejected]]
    return frame


def plot(result: LLMSearchResult, top: int, path: Path, title: str = "") -> Path:
    """Stacked step-time bars of the top plans, each labelled with its step and its gap to the best (the top
    plans are often within a few per cent, which bars from 0 cannot show); parts too small to see are named."""
    use_file_backend()
    import matplotlib.pyplot as plt
    import numpy as np

    shown = result.ranked[:top]
    fig, ax = plt.subplots(figsize=(10.5, 0.5 * len(shown) + 1.8))
    y = np.arange(len(shown))[::-1]
    left = np.zeros(len(shown))
    colors = plt.get_cmap("tab10").colors
    longest = max(c.step_s for c in shown)
    hidden = []
    for i, part in enumerate(PARTS):
        seconds = np.array([getattr(c, part) for c in shown])
        label = PART_LABELS.get(part, part.removesuffix("_s").replace("_", " "))
        if seconds.max() <= 0.005 * longest:
            hidden.append(label)
            continue
        ax.barh(y, seconds, left=left, color=colors[i], label=label)
        left += seconds
    best = shown[0].step_s
    for yy, cost in zip(y, shown, strict=True):
        gap = "best" if cost is shown[0] else f"+{(cost.step_s / best - 1) * 100:.2f} %"
        ax.annotate(f"{format_time(cost.step_s)} ({gap})", (cost.step_s, yy), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=7)
    ax.set_xlim(0, longest * 1.22)  # room for the labels
    ax.set_yticks(y, [f"{i}. {c.plan.label}" for i, c in enumerate(shown, start=1)], fontsize=7)
    ax.set_xlabel("seconds per step")
    note = f"\nunder 0.5 % of the step, not drawn: {', '.join(hidden)}" if hidden else ""
    ax.set_title(f"{title + ': ' if title else ''}best {len(shown)} plans, where the step goes{note}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, never over them
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def _title(extra: dict[str, Any]) -> str:
    """``GPT 18.4B on dgx-a100-80g, batch 1024`` from what the command knows about the run."""
    parts = []
    if extra.get("parameters"):
        parts.append(f"{str(extra.get('model', 'gpt')).upper()} {format_count(extra['parameters'])}")
    if extra.get("cluster"):
        parts.append(f"on {extra['cluster']}")
    text = " ".join(parts)
    if extra.get("batch_size"):
        text += f"{', ' if text else ''}batch {extra['batch_size']}"
    return text


def write_outputs(result: LLMSearchResult, out: Path, top: int, extra: dict[str, Any],
                  simulated: dict[str, float] | None = None) -> list[Path]:
    frame = table(result)
    frame["simulated_step_s"] = frame["plan"].map(simulated or {})  # NaN where not simulated
    best = result.best
    head = frame.head(top)
    cols = ["rank", "plan", "step_s", "tokens_per_s", "MFU", "HFU", "Megatron TFLOP/s per GPU", "peak_memory_GiB",
            "slowdown"]
    lines = [f"Best: **{best.plan.label}**, {format_time(best.step_s)} per step, {rate_line(best)}, peak memory "
             f"{format_size(best.peak_memory_bytes)} per GPU.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in head.itertuples():
        lines.append(f"| {row.rank} | {row.plan} | {row.step_s:.4g} | {row.tokens_per_s:,.0f} | {row.mfu:.1%} | "
                     f"{row.hfu:.1%} | {row.megatron_tflops_per_gpu:.1f} | {row.peak_memory_GiB:.1f} | "
                     f"{row.slowdown:.3f} |")
    summary = {"best": best_summary(best), "plans_priced": len(result.costs), "plans_fitting": len(result.ranked),
               "pricing_s": result.pricing_s, **extra}
    return [
        write_csv_atomic(frame, out / "plans.csv"),
        write_text_atomic(out / "plans.md", "\n".join(lines) + "\n"),
        write_text_atomic(out / "best_plan.json", json.dumps(summary, indent=2, default=float) + "\n"),
        plot(result, top, out / "plans.png", title=_title(extra)),
    ]
