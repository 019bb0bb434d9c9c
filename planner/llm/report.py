"""What ``flexcomm plan --model gpt`` writes: every priced plan (CSV), the top ones (markdown), the best plan
(JSON, with the keys of the graph planner's ``best_plan.json`` and the transformer's own) and a figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.units import format_size, format_time
from flexcomm.planner.llm.pricing import LLMPlanCost
from flexcomm.planner.llm.search import LLMSearchResult

PARTS = ("compute_s", "recompute_s", "memory_bound_s", "tp_comm_s", "p2p_s", "bubble_s", "dp_exposed_s",
         "optimizer_s")


def best_summary(cost: LLMPlanCost) -> dict[str, Any]:
    plan = cost.plan
    return {"tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "step_s": cost.step_s,
            "micro_batch_size": plan.micro_batch_size, "micro_batches": cost.micro_batches,
            "virtual_stages": plan.virtual_stages, "recompute": plan.recompute,
            "sequence_parallel": plan.sequence_parallel, "zero": plan.zero,
            "tflops_per_gpu": cost.tflops_per_gpu, "peak_memory_bytes": cost.peak_memory_bytes,
            "label": plan.label, "breakdown_s": {k: getattr(cost, k) for k in PARTS}}


def table(result: LLMSearchResult) -> pd.DataFrame:
    ranked = [c.row() for c in result.ranked]
    rejected = sorted((c for c in result.costs if not c.fits), key=lambda c: c.peak_memory_bytes)
    frame = pd.DataFrame([*ranked, *(c.row() for c in rejected)])
    frame.insert(0, "rank", [*range(1, len(ranked) + 1), *([None] * len(rejected))])
    best = result.best.step_s
    frame["slowdown"] = [c.step_s / best if c.fits else None for c in [*result.ranked, *rejected]]
    return frame


def plot(result: LLMSearchResult, top: int, path: Path) -> Path:
    from flexcomm.costmodel.atomic import save_figure_atomic
    from flexcomm.costmodel.plotting import use_file_backend

    use_file_backend()
    import matplotlib.pyplot as plt
    import numpy as np

    shown = result.ranked[:top]
    fig, ax = plt.subplots(figsize=(10.5, 0.5 * len(shown) + 1.8))
    y = np.arange(len(shown))[::-1]
    left = np.zeros(len(shown))
    colors = plt.get_cmap("tab10").colors
    for i, part in enumerate(PARTS):
        seconds = np.array([getattr(c, part) for c in shown])
        if seconds.max() <= 0.005 * max(c.step_s for c in shown):
            continue
        ax.barh(y, seconds, left=left, color=colors[i], label=part.removesuffix("_s").replace("_", " "))
        left += seconds
    ax.set_yticks(y, [f"{i}. {c.plan.label}" for i, c in enumerate(shown, start=1)], fontsize=7)
    ax.set_xlabel("seconds per step")
    ax.set_title(f"best {len(shown)} plans: where the step goes", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, never over them
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def write_outputs(result: LLMSearchResult, out: Path, top: int, extra: dict[str, Any]) -> list[Path]:
    frame = table(result)
    best = result.best
    head = frame.head(top)
    cols = ["rank", "plan", "step_s", "tflops_per_gpu", "peak_memory_GiB", "slowdown"]
    lines = [f"Best: **{best.plan.label}**, {format_time(best.step_s)} per step, {best.tflops_per_gpu:.0f} "
             f"teraFLOP/s per GPU, peak memory {format_size(best.peak_memory_bytes)} per GPU.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in head.itertuples():
        lines.append(f"| {row.rank} | {row.plan} | {row.step_s:.4g} | {row.tflops_per_gpu:.1f} | "
                     f"{row.peak_memory_GiB:.1f} | {row.slowdown:.3f} |")
    summary = {"best": best_summary(best), "plans_priced": len(result.costs), "plans_fitting": len(result.ranked),
               "pricing_s": result.pricing_s, **extra}
    return [
        write_csv_atomic(frame, out / "plans.csv"),
        write_text_atomic(out / "plans.md", "\n".join(lines) + "\n"),
        write_text_atomic(out / "best_plan.json", json.dumps(summary, indent=2, default=float) + "\n"),
        plot(result, top, out / "plans.png"),
    ]
