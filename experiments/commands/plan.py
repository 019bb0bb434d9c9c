"""``flexcomm plan``: the best data/tensor/pipeline-parallel plan of a model on a cluster, and why the rest lose."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from flexcomm.costmodel.atomic import write_csv_atomic
from flexcomm.costmodel.calibration import CalibrationProfile, calibrated_cluster
from flexcomm.costmodel.compressed import PRICED_SCHEMES
from flexcomm.costmodel.compute import DEFAULT_EFFICIENCY
from flexcomm.costmodel.device_compute import DeviceCompute
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gradient_exchange import DEFAULT_TOPK_RATIO, GradientScheme
from flexcomm.costmodel.limits import MAX_GLOBAL_BATCH
from flexcomm.costmodel.units import format_size, format_time
from flexcomm.experiments.commands.common import add_cluster_arguments, output_folder
from flexcomm.experiments.commands.job_options import add_job_argument
from flexcomm.experiments.commands.plan_gpt import run_transformer
from flexcomm.experiments.commands.plan_layouts import is_layout_model, run_layouts
from flexcomm.experiments.options import GRAPH_NAMES
from flexcomm.experiments.whatif_step import exchange_lines
from flexcomm.planner.llm.transformer_plan import GPT_SEQUENCES
from flexcomm.planner.rank_devices import load_plan_cluster
from flexcomm.sim.workload import DEFAULT_BATCH
from flexcomm.workloads.names import FACTORY_FORM, is_factory_reference

#: Default batch of the graph planner's models, per device, where ``simulate`` names no default of its own: Goyal
#: et al. 2017 ("Accurate, Large Minibatch SGD") train ResNet-50 with 32 images per GPU at every scale, as
#: data-parallel CNN training commonly does.
SAMPLES_PER_DEVICE = 32


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "plan",
        help="search data-, tensor- and pipeline-parallel plans under memory limits",
        description="Traces the model into an operator graph, enumerates (dp, tp, pp, micro-batches, ZeRO stage, "
        "rank order) plans that fit every device's memory, prices each with the cost model, re-ranks the best "
        "few on the simulator and writes the ranked table (plans.csv, plans.md), the best plan (best_plan.json) "
        "and a step-time breakdown figure (plans.png). Mixed-device clusters get resource-aware splits.",
    )
    parser.add_argument("--model", required=True, help="graph name (resnet18, resnet50, eca-resnet50, eca-resnet20, "
                        "gpt, inception), or your own model as module.path:factory or path/to/file.py:factory (a "
                        "function of no arguments returning an nn.Module or (module, example input or sample shape)); "
                        "or a current LLM: a preset (llama3-8b, llama3-70b, llama3.1-405b, deepseek-v3, "
                        "qwen3-30b-a3b, qwen3-235b-a22b, gpt-oss-120b, mixtral-8x7b, mixtral-8x22b, "
                        "nemotron-4-340b, gpt3-175b, ...) or path/to/config.json (HuggingFace), whose every layout "
                        "(TP, CP, PP/VP, EP, FSDP, recomputation) is searched")
    parser.add_argument("--gpus", type=int, help="with a preset or config.json: GPUs of the job (default: the "
                        "cluster's; the cluster's nodes are repeated to hold them)")
    add_cluster_arguments(parser, default="4x8-a100-ib")
    add_job_argument(parser)
    parser.add_argument("--batch-size", type=int, help="global batch in samples (default per device: simulate's "
                        "batch per rank for a model it also names, resnet18 and resnet50 256, else "
                        f"{SAMPLES_PER_DEVICE}, Goyal et al. 2017; --model gpt: {GPT_SEQUENCES} sequences, GPT-2's)")
    parser.add_argument("--out", default="results/plan", help="output directory (default results/plan)")
    parser.add_argument("--top", type=int, default=10, help="plans in the markdown table and figure (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random search (default 0)")
    parser.add_argument("--search", default="exhaustive", help="exhaustive (default) or random")
    parser.add_argument("--samples", type=int, default=200, help="plans priced by the random search (default 200)")
    parser.add_argument("--simulate-top", type=int, help="best distinct plans run on the simulator (0 for "
                        "none): the graph planner re-ranks its 3 by it (default 3); --model gpt prints the step "
                        "beside the closed form's, not re-ranked (default 1: a 16,384-GPU step takes seconds)")
    parser.add_argument("--balance", default="speed", help="speed (resource-aware, default) or even")
    parser.add_argument("--efficiency", type=float, help="price FLOPs alone at this fraction of peak (default: each "
                        "traced kernel priced on the device as simulate prices a layer: GEMMs by their shapes at the "
                        "catalog's measured matmul rate, other kernels by the bytes they move at HBM bandwidth; gpt: "
                        "the fraction a perfectly shaped GEMM reaches, the same source)")
    parser.add_argument("--op-times", help="measured per-op forward medians replacing the FLOP model for those ops "
                        "(JSON: batch_size, peak_flops of the measuring device (default: the cluster's fastest), "
                        "ops: {op: seconds})")
    parser.add_argument("--memory-fraction", type=float, default=1.0,
                        help="usable fraction of each device's memory (default 1.0)")
    gpt = parser.add_argument_group("model options (gpt: layers, hidden, heads, seq-len, vocab; CNNs: image-size)")
    for flag in ("--layers", "--hidden", "--heads", "--seq-len", "--vocab", "--image-size"):
        gpt.add_argument(flag, type=int, default=None)
    llm = parser.add_argument_group("transformer planner (--model gpt: t, p, d, micro-batch size, virtual stages, "
                                    "sequence parallelism, recomputation, ZeRO; --batch-size counts sequences)")
    llm.add_argument("--precision", help="bf16, fp16 or fp32 (default: bf16 where every GPU has it, else fp16); "
                     "with a preset or config.json: bf16, fp8 (fp8-cs), fp8-ds, mxfp8 or nvfp4 for the GEMMs "
                     "(block-scaled formats on Blackwell)")
    llm.add_argument("--capacity-factor", type=float, help="with a MoE preset or config.json: each expert computes "
                     "this multiple of its balanced share of tokens, padded or dropped (default: dropless)")
    llm.add_argument("--nics-per-node", type=int, help="NICs per node at the inter-node bandwidth (default: the "
                     "cluster's nics_per_node, else 1)")
    llm.add_argument("--tp", type=int, help="fix the tensor-parallel size (e.g. a published configuration)")
    llm.add_argument("--pp", type=int, help="fix the pipeline-parallel size")
    llm.add_argument("--attention", default="fused", help="fused (FlashAttention: no s x s scores in memory, the "
                     "backward recomputes them; default) or unfused (scores, softmax and dropout as separate "
                     "kernels, as Megatron-LM ran in 2021-2022)")
    parser.add_argument("--scheme", default="dense", help="how data-parallel groups exchange gradients: "
                        + ", ".join(PRICED_SCHEMES) + " (default dense); priced as whatif and simulate price it: "
                        "the exchange, the device work and the error-feedback memory")
    parser.add_argument("--ratio", type=float, default=DEFAULT_TOPK_RATIO,
                        help=f"with --scheme topk-*: fraction of elements kept (default {DEFAULT_TOPK_RATIO})")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def _check_int(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise InputError(name, value, f"an integer >= {minimum}")


def _check_shared(args: argparse.Namespace) -> None:
    """The graph planner's options, checked before the graph is traced (torch; seconds): a typo fails at once."""
    if not (math.isfinite(args.memory_fraction) and 0 < args.memory_fraction <= 1):
        raise InputError("memory-fraction", args.memory_fraction, "a fraction in (0, 1]")
    if args.efficiency is not None and not (math.isfinite(args.efficiency) and 0 < args.efficiency <= 1):
        raise InputError("efficiency", args.efficiency, "a fraction of peak in (0, 1]")
    for flag in ("layers", "hidden", "heads", "seq_len", "vocab", "image_size"):
        value = getattr(args, flag)
        if value is not None:
            _check_int(flag.replace("_", "-"), value, 1)
    for flag in ("tp", "pp", "nics_per_node"):  # the transformer planner's options
        if getattr(args, flag) is not None:
            _check_int(flag.replace("_", "-"), getattr(args, flag), 1)
            raise InputError(flag.replace("_", "-"), getattr(args, flag), "--model gpt (the transformer planner's "
                             "option; the operator-graph planner searches every split itself)")


def run(args: argparse.Namespace) -> int:
    """``flexcomm plan``: a current LLM's layouts, a GPT's transformer plans, or a traced model's graph plans."""
    # everything checkable without torch first: a typo is a one-line error within a second
    if is_layout_model(args.model):
        return run_layouts(args)
    if args.capacity_factor is not None:
        raise InputError("capacity-factor", args.capacity_factor, "a mixture-of-experts preset or config.json as "
                         "--model (the layout planner's option)")
    if args.model not in GRAPH_NAMES and not is_factory_reference(args.model):
        raise InputError("model", args.model, "one of " + ", ".join(GRAPH_NAMES)
                         + f", or your model as {FACTORY_FORM}")
    _check_int("top", args.top, 1)
    _check_int("samples", args.samples, 1)
    if args.search not in ("exhaustive", "random"):
        raise InputError("search", args.search, "exhaustive or random")
    if args.balance not in ("speed", "even"):
        raise InputError("balance", args.balance, "one of speed, even")
    if args.model == "gpt":
        return run_transformer(args)
    return _run_graph(args)


def _check_graph_flags(args: argparse.Namespace) -> GradientScheme:
    """The graph planner's flags, checked before its cluster is read or its model traced."""
    if args.batch_size is not None:
        _check_int("batch-size", args.batch_size, 1)
        MAX_GLOBAL_BATCH.check("batch-size", args.batch_size)
    if args.simulate_top is None:
        args.simulate_top = 3
    _check_int("simulate-top", args.simulate_top, 0)
    _check_shared(args)
    exchange = GradientScheme(args.scheme, args.ratio)
    if args.scheme == "dense" and args.ratio != DEFAULT_TOPK_RATIO:
        raise InputError("ratio", args.ratio, "--scheme topk-ag or topk-ar (the fraction Top-k keeps)")
    if args.attention != "fused":
        raise InputError("attention", args.attention, "--model gpt: the transformer planner prices attention one way "
                         "or the other; a traced model's ops are what it runs")
    return exchange


def _graph_pricer(args: argparse.Namespace, cluster, exchange: GradientScheme):  # noqa: ANN001, ANN202
    """The model traced into its operator graph, cut into pipeline units and priced per plan on ``cluster``
    (a PlanCluster): (graph, units, Pricer). Imported here: tracing needs torch."""
    from flexcomm.planner.graphs import build_graph, calibrate_op_times, load_op_times
    from flexcomm.planner.pipeline_units import build_units
    from flexcomm.planner.plans import Pricer

    options = {k: getattr(args, k) for k in ("layers", "hidden", "heads", "seq_len", "vocab", "image_size")
               if getattr(args, k) is not None}
    compute = None if args.efficiency is not None else DeviceCompute.of(pricing_device(cluster))
    if args.op_times:
        measured_batch, measured, peak = load_op_times(args.op_times)
        graph = build_graph(args.model, batch_size=measured_batch, **options)
        calibrate_op_times(graph, measured, device=peak)
    else:  # traced at a data-parallel rank's batch: the shapes its kernels run at, priced per sample
        graph = build_graph(args.model, batch_size=max(1, round(args.batch_size / cluster.world_size)), **options)
    units = build_units(graph, efficiency=DEFAULT_EFFICIENCY if args.efficiency is None else args.efficiency,
                        reference_peak_flops=float(cluster.peak_flops.max()) if args.op_times else None,
                        compute=compute)
    pricer = Pricer(units, cluster, args.batch_size, balance=args.balance, memory_fraction=args.memory_fraction,
                    exchange=exchange)
    return graph, units, pricer


def _progress(args: argparse.Namespace):  # noqa: ANN202 - the search's progress wrapper
    def progress(plans, total):  # noqa: ANN001, ANN202 - tqdm's iterable
        if args.no_progress:
            return plans
        from tqdm import tqdm

        return tqdm(plans, total=total, unit="plan", file=sys.stderr, leave=False, desc="pricing",
                    disable=None)

    return progress


def _run_graph(args: argparse.Namespace) -> int:
    """The operator-graph planner: trace, price every plan, simulate the best few, write and print."""
    from flexcomm.planner.report import write_outputs
    from flexcomm.planner.search import search

    exchange = _check_graph_flags(args)
    cluster = load_plan_cluster(args.cluster)
    if args.profile:
        cluster = cluster.with_cluster(calibrated_cluster(cluster.cluster, CalibrationProfile.load(args.profile)))
    defaulted = args.batch_size is None
    if args.batch_size is None:  # what practitioners run, not a toy batch that makes every plan look comm-bound
        args.batch_size = default_batch_per_device(args.model) * cluster.world_size
    output_folder(args.out)  # after the checks (a refused plan creates nothing), before the graph is traced
    graph, units, pricer = _graph_pricer(args, cluster, exchange)
    result = search(pricer, method=args.search, samples=args.samples, seed=args.seed,
                    simulate_top=args.simulate_top, progress=_progress(args))
    if not result.ranked:  # keep the evidence: every plan and why it did not fit
        table = result.table()
        write_csv_atomic(table, Path(args.out) / "plans.csv")
        raise InputError("cluster", args.cluster, f"devices with room for {graph.graph['name']} at batch "
                         f"{args.batch_size}: all {len(table)} plans rejected, closest: {table['reason'].iloc[0]} "
                         f"(see {Path(args.out) / 'plans.csv'})")
    written = write_outputs(result, pricer, Path(args.out), args.top,
                            extra={"model": graph.graph["name"], "parameters": graph.graph["parameters"],
                                   "options": graph.graph["options"], "cluster": cluster.name,
                                   "batch_size": args.batch_size, "balance": args.balance, "seed": args.seed,
                                   "search": args.search})
    _print_graph_plans(args, result, graph, len(units), cluster, defaulted)
    print("wrote " + ", ".join(str(p) for p in written))
    print_exchange(exchange)
    return 0


def _print_graph_plans(args: argparse.Namespace, result, graph, unit_count: int, cluster,  # noqa: ANN001
                       defaulted: bool) -> None:
    """The job, the search's size and speed, the best plan and the distinct top schedules."""
    from flexcomm.planner.search import signature

    best = result.best
    rate = len(result.costs) / result.pricing_s if result.pricing_s > 0 else float("inf")
    described = f"; {graph.graph['description']}" if graph.graph.get("description") else ""
    print(f"{graph.graph['name']} ({graph.graph['parameters']:,} parameters, {unit_count} pipeline units{described}) "
          f"on {cluster.name} ({cluster.world_size:,} devices), batch {args.batch_size:,} "
          f"({args.batch_size / cluster.world_size:,.4g} a device{', the default' if defaulted else ''})")
    if graph.graph.get("input_text"):  # what was assumed about the user's model: said, not hidden
        print(f"  your model: {args.model}, {graph.graph['input_text']} (one sample of it per sample of the batch)")
    print(f"priced {len(result.costs)} plans in {result.pricing_s:.2f}s ({rate:,.0f} plans/s); "
          f"{len(result.ranked)} fit in memory")
    print(f"best: {best.config.label}: {format_time(best.step_s)} per step "
          f"({best.extra.get('samples_per_s', 0):,.0f} samples/s), peak memory {format_size(best.peak_memory_bytes)}"
          + (f", simulated {format_time(result.simulated[best.config.label])}"
             if best.config.label in result.simulated else ""))
    table = result.table()
    keys = {c.config.label: signature(c.config) for c in result.ranked}
    rows = table[table["feasible"]]
    distinct = rows[~rows["plan"].map(keys).duplicated()]
    print("top schedules (fastest ZeRO stage and micro-batch count where only memory differs; numbered as in "
          "plans.png):")
    for place, row in enumerate(distinct.head(min(args.top, 5)).itertuples(), start=1):
        simulated = (f"  simulated {format_time(float(row.simulated_step_s)):>9s}"
                     if pd.notna(row.simulated_step_s) else "")  # None/NaN when not simulated
        print(f"  {place:3d}. {row.plan:32s} model {format_time(row.step_s):>9s}{simulated}  loses on {row.loses_on}")


def default_batch_per_device(model: str) -> int:
    """Samples per device when ``--batch-size`` is not given: ``simulate``'s default batch per rank for a model
    both engines name (one job, one default), else :data:`SAMPLES_PER_DEVICE`."""
    return DEFAULT_BATCH.get(str(model).strip().lower(), SAMPLES_PER_DEVICE)


def pricing_device(cluster):  # cluster: planner.rank_devices.PlanCluster -> costmodel.cluster_parts.Device
    """The device the graph planner prices a traced model's kernels on: the fastest of the pool, as ``simulate``
    prices each layer on its rank's device (:class:`costmodel.device_compute.DeviceCompute`); slower devices of a
    mixed pool scale that price by their peak (:mod:`planner.pipeline_units`)."""
    return max(cluster.devices, key=lambda device: device.peak_flops)


def print_exchange(exchange: GradientScheme) -> None:
    """With --scheme: what the plans priced for it, and its accuracy cost where the project measured one."""
    for line in exchange_lines(exchange):
        print(line)
