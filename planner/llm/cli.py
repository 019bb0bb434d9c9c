"""``flexcomm plan --model gpt``: the transformer planner from the command line (validation, search, output)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gemm_efficiency import achievable_source
from flexcomm.costmodel.gradient_exchange import GradientScheme
from flexcomm.planner.devices import PlanCluster

#: GPT-2 small, the graph planner's default GPT: what ``--model gpt`` plans without shape options.
DEFAULT_SHAPE = {"layers": 12, "hidden": 768, "heads": 12, "seq_len": 1024, "vocab": 50257}


def plan_transformer(args: argparse.Namespace, cluster: PlanCluster, options: dict[str, Any],
                     exchange: GradientScheme | None = None) -> int:
    from flexcomm.costmodel.units import format_size, format_time
    from flexcomm.planner.llm.memory import PRECISIONS
    from flexcomm.planner.llm.model import Transformer
    from flexcomm.planner.llm.pricing import LLMPricer
    from flexcomm.planner.llm.report import rate_line, write_outputs
    from flexcomm.planner.llm.search import search, tensor_parallel_reason
    from flexcomm.planner.llm.timing import Hardware, device_precisions

    if "image_size" in options:
        raise InputError("image-size", options["image_size"], "no --image-size with --model gpt (a CNN option)")
    shape = {**DEFAULT_SHAPE, **options}
    if shape["seq_len"] < 1:
        raise InputError("seq-len", shape["seq_len"], "a sequence length >= 1 (tokens)")
    model = Transformer(**shape)
    if args.precision is None:  # what the pool can run: a V100 has no bf16, so a mixed pool trains in fp16
        from flexcomm.planner.llm.recovery import training_precision

        args.precision = training_precision(cluster.cluster)
    if args.precision not in PRECISIONS:
        raise InputError("precision", args.precision, "one of " + ", ".join(PRECISIONS))
    if exchange is not None and exchange.scheme in ("fp16", "bf16") and args.precision != "fp32":
        raise InputError("scheme", exchange.scheme, f"dense with --precision {args.precision}: its gradients are "
                         "16-bit already, the dense exchange sends them so (a cast scheme is for fp32 training)")
    slowest = min(cluster.devices, key=lambda d: d.peak_flops)
    if args.precision not in device_precisions(slowest.name):
        raise InputError("precision", args.precision, f"a precision {slowest.name} supports: "
                         + ", ".join(device_precisions(slowest.name)))
    for flag, value in (("nics-per-node", args.nics_per_node), ("tp", args.tp), ("pp", args.pp)):
        if value is not None and value < 1:
            raise InputError(flag, value, "an integer >= 1")
    if args.efficiency is not None and not 0 < args.efficiency <= 1:
        raise InputError("efficiency", args.efficiency, "a fraction of peak in (0, 1]")
    base = cluster.cluster
    if args.nics_per_node is not None:
        base = base.model_copy(update={"nics_per_node": args.nics_per_node})
    if args.tp is not None and cluster.world_size % args.tp:
        raise InputError("tp", args.tp, f"a divisor of the {cluster.world_size} GPUs")
    if args.pp is not None and model.layers % args.pp:
        raise InputError("pp", args.pp, f"a divisor of the {model.layers} layers")
    pricer = LLMPricer(model, Hardware.of(base, args.efficiency), cluster.world_size, args.batch_size,
                       float(cluster.memory_bytes.min()), precision=args.precision,
                       memory_fraction=args.memory_fraction, exchange=exchange, attention=args.attention)
    result = search(pricer, tp=args.tp, pp=args.pp)
    best = result.best
    out = Path(args.out)
    simulated, not_simulated = simulate_best(result, base, model, args, mixed=cluster.heterogeneous,
                                             exchange=exchange)
    written = write_outputs(result, out, args.top, simulated=simulated, extra={
        "model": "gpt", "parameters": model.parameters, "options": shape, "cluster": cluster.name,
        "batch_size": args.batch_size, "precision": args.precision, "planner": "transformer",
        "scheme": (exchange or GradientScheme()).scheme, "ratio": (exchange or GradientScheme()).ratio,
        "attention": args.attention,
        "simulated_step_s": simulated.get(best.plan.label)})
    print(f"gpt ({model.parameters:,.0f} parameters: {model.layers} layers, hidden {model.hidden}, {model.heads} "
          f"heads, sequence {model.seq_len}) on {cluster.name} ({cluster.world_size:,} GPUs), batch "
          f"{args.batch_size:,} sequences, {args.precision}, {args.attention} attention")
    slowest_device = min(base.rank_devices, key=lambda dev: dev.peak_flops)
    ceiling_source = ("--efficiency" if args.efficiency is not None
                      else achievable_source(slowest_device.name))
    print(f"GEMMs: {pricer.hw.gemm_ceiling:.3f} of {slowest_device.name}'s {slowest_device.peak_flops / 1e12:g} "
          f"TFLOP/s before shape losses ({ceiling_source})")
    print(f"priced {len(result.costs):,} plans in {result.pricing_s:.2f}s ({result.plans_per_s:,.0f} plans/s); "
          f"{len(result.ranked):,} fit in memory")
    print(f"best: {best.plan.label}: {format_time(best.step_s)} per step, {rate_line(best)}, peak memory "
          f"{format_size(best.peak_memory_bytes)} per GPU (MFU and HFU against {slowest_device.name}'s "
          f"{pricer.hw.peak_flops / 1e12:g} TFLOP/s {args.precision} peak)")
    if best.plan.label in simulated:
        step = simulated[best.plan.label]
        print(f"simulated with contention (planner/llm/step_sim.py): {format_time(step)} "
              f"({step / best.step_s - 1:+.1%} against the closed form)")
    if not_simulated:
        print(f"not simulated: {not_simulated}")
    why = tensor_parallel_reason(result, base.devices_per_node)
    if why:
        print(why)
    print("top plans (numbered as in plans.png):")
    print(f"  {'':3s}  {'plan':36s} {'step':>9s} {'simulated':>10s} {'tokens/s':>11s} {'MFU':>6s} "
          f"{'memory/GPU':>10s}")
    for place, cost in enumerate(result.ranked[:min(args.top, 5)], start=1):
        step = simulated.get(cost.plan.label)
        print(f"  {place:3d}. {cost.plan.label:36s} {format_time(cost.step_s):>9s} "
              f"{format_time(step) if step is not None else '-':>10s} {cost.extra['tokens_per_s']:11,.0f} "
              f"{cost.extra['mfu']:6.1%} {format_size(cost.peak_memory_bytes):>10s}")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def simulate_best(result, cluster, model, args: argparse.Namespace, mixed: bool,
                  exchange: GradientScheme | None = None) -> tuple[dict[str, float], str]:
    """The step simulator's step (contention, the pipeline's order) for the ``--simulate-top`` best distinct
    schedules (plans that differ only in their ZeRO stage are one schedule): {plan label: seconds}, and why
    none was simulated where that is so (``mixed``: a pool of several device types, which the step simulator
    does not run). result: LLMSearchResult; cluster: costmodel.cluster.Cluster."""
    from flexcomm.planner.llm.step_sim import StepPlan, simulate_step

    if args.simulate_top <= 0:
        return {}, ""
    if mixed:
        return {}, "the step simulator runs one device type, and this pool mixes them (plan's closed form stands)"
    simulated: dict[str, float] = {}
    schedules: dict[str, float] = {}
    for cost in result.ranked:
        schedule = cost.plan.label.rsplit("-z", 1)[0]
        if schedule not in schedules:
            if len(schedules) == args.simulate_top:
                break
            step = StepPlan(model, args.batch_size, cost.plan, args.precision, None, args.attention,
                            exchange or GradientScheme())
            schedules[schedule] = simulate_step(cluster, step).step_s
        simulated[cost.plan.label] = schedules[schedule]
    return simulated, ""
