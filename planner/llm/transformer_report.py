"""What the transformer planner's result says in lines and files: the report ``flexcomm plan --model gpt``
prints (and ``flexcomm.plan("gpt", ...)`` keeps as its ``report``), and ``plans.csv``/``plans.md``/
``best_plan.json``/``plans.png``. Kept apart from the engine, which returns data and writes nothing."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.units import format_size, format_time
from flexcomm.planner.llm.report import rate_line, write_outputs
from flexcomm.planner.llm.transformer_plan import TransformerPlanResult


def report_lines(result: TransformerPlanResult, top: int) -> list[str]:
    """The job, the GEMM ceiling's source, the search's size and speed, the best plan, its simulated step and the
    ``min(top, 5)`` best plans, as ``flexcomm plan --model gpt`` prints them (the markdown table and the figure
    take ``top``)."""
    model, pool, search = result.model, result.cluster, result.search
    best = search.best
    slowest = min(result.priced_on.rank_devices, key=lambda dev: dev.peak_flops)
    lines = [f"gpt ({model.parameters:,.0f} parameters: {model.layers} layers, hidden {model.hidden}, {model.heads} "
             f"heads, sequence {model.seq_len}) on {pool.name} ({pool.world_size:,} GPUs), batch "
             f"{result.batch_size:,} sequences, {result.precision}, {result.attention} attention",
             f"GEMMs: {result.pricer.hw.gemm_ceiling:.3f} of {slowest.name}'s {slowest.peak_flops / 1e12:g} "
             f"TFLOP/s before shape losses ({result.ceiling_source})",
             f"priced {len(search.costs):,} plans in {search.pricing_s:.2f}s ({search.plans_per_s:,.0f} plans/s); "
             f"{len(search.ranked):,} fit in memory",
             f"best: {best.plan.label}: {format_time(best.step_s)} per step, {rate_line(best)}, peak memory "
             f"{format_size(best.peak_memory_bytes)} per GPU (MFU and HFU against {slowest.name}'s "
             f"{result.pricer.hw.peak_flops / 1e12:g} TFLOP/s {result.precision} peak)"]
    if best.plan.label in result.simulated:
        step = result.simulated[best.plan.label]
        lines.append(f"simulated with contention (planner/llm/step_sim.py): {format_time(step)} "
                     f"({step / best.step_s - 1:+.1%} against the closed form)")
    if result.not_simulated:
        lines.append(f"not simulated: {result.not_simulated}")
    why = result.tensor_parallel_reason()
    if why:
        lines.append(why)
    lines += ["top plans (numbered as in plans.png):",
              f"  {'':3s}  {'plan':36s} {'step':>9s} {'simulated':>10s} {'tokens/s':>11s} {'MFU':>6s} "
              f"{'memory/GPU':>10s}"]
    for place, cost in enumerate(search.ranked[:min(top, 5)], start=1):
        step = result.simulated.get(cost.plan.label)
        lines.append(f"  {place:3d}. {cost.plan.label:36s} {format_time(cost.step_s):>9s} "
                     f"{format_time(step) if step is not None else '-':>10s} {cost.extra['tokens_per_s']:11,.0f} "
                     f"{cost.extra['mfu']:6.1%} {format_size(cost.peak_memory_bytes):>10s}")
    return lines


def write_files(result: TransformerPlanResult, out: Path, top: int) -> list[Path]:
    """``plans.csv``, ``plans.md``, ``best_plan.json`` and ``plans.png`` under ``out``, each written atomically."""
    return write_outputs(result.search, out, top, simulated=dict(result.simulated), extra=result.settings())
