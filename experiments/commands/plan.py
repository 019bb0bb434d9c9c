"""``flexcomm plan``: the best data/tensor/pipeline-parallel plan of a model on a cluster, and why the rest lose."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm.costmodel.compressed import PRICED_SCHEMES
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gradient_exchange import DEFAULT_TOPK_RATIO
from flexcomm.experiments.commands.common import add_cluster_arguments, output_folder
from flexcomm.experiments.commands.job_options import add_job_argument
from flexcomm.experiments.commands.plan_gpt import run_transformer
from flexcomm.experiments.commands.plan_layouts import is_layout_model, run_layouts
from flexcomm.experiments.whatif_step import exchange_lines
from flexcomm.planner.graph_plan import (
    SAMPLES_PER_DEVICE,
    GraphPlanResult,
    NoPlanFits,
    check_model,
    check_search,
    plan_graph,
)
from flexcomm.planner.llm.transformer_plan import GPT_SEQUENCES
from flexcomm.planner.plan_options import at_least, check_top

if TYPE_CHECKING:
    from flexcomm.planner.graph_plan import Progress


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


def run(args: argparse.Namespace) -> int:
    """``flexcomm plan``: a current LLM's layouts, a GPT's transformer plans, or a traced model's graph plans."""
    # everything checkable without torch first: a typo is a one-line error within a second
    if is_layout_model(args.model):
        return run_layouts(args)
    if args.capacity_factor is not None:
        raise InputError("capacity-factor", args.capacity_factor, "a mixture-of-experts preset or config.json as "
                         "--model (the layout planner's option)")
    if args.model != "gpt":
        return _run_graph(args)
    check_top(args.top)
    check_search(args.search, args.samples, args.balance)  # the graph search's flags: ignored here, yet checked
    return run_transformer(args)


def _refuse_transformer_flags(args: argparse.Namespace) -> None:
    """The transformer planner's flags, which the operator-graph planner does not take (it searches every split
    itself, and prices the traced model's own kernels)."""
    for flag in ("tp", "pp", "nics_per_node"):
        value = getattr(args, flag)
        if value is not None:
            at_least(flag.replace("_", "-"), value, 1)
            raise InputError(flag.replace("_", "-"), value, "--model gpt (the transformer planner's option; the "
                             "operator-graph planner searches every split itself)")
    if args.attention != "fused":
        raise InputError("attention", args.attention, "--model gpt: the transformer planner prices attention one way "
                         "or the other; a traced model's ops are what it runs")


def graph_options(args: argparse.Namespace) -> dict[str, Any]:
    """The operator-graph planner's keywords from the parsed flags (those left out take the engine's defaults)."""
    options = {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "seq_len": args.seq_len,
               "vocab": args.vocab, "image_size": args.image_size, "search": args.search, "samples": args.samples,
               "seed": args.seed, "balance": args.balance, "efficiency": args.efficiency,
               "op_times": args.op_times or None, "memory_fraction": args.memory_fraction, "scheme": args.scheme,
               "ratio": args.ratio, "profile": args.profile or None}
    return options if args.simulate_top is None else {**options, "simulate_top": args.simulate_top}


def pricing_progress(shown: bool) -> Progress | None:
    """A tqdm bar over the plans as they are priced (on stderr; none when not ``shown`` or not a terminal)."""
    if not shown:
        return None

    def progress(plans: Iterable, total: int) -> Iterable:
        from tqdm import tqdm

        return tqdm(plans, total=total, unit="plan", file=sys.stderr, leave=False, desc="pricing", disable=None)

    return progress


def _run_graph(args: argparse.Namespace) -> int:
    """The operator-graph planner: one engine call, its files written and its report printed."""
    check_model(args.model)  # a mistyped model is the first thing to say, before flags it would not take
    _refuse_transformer_flags(args)
    check_top(args.top)
    out = Path(args.out)
    try:  # the folder is made once the options are checked (a refused plan creates nothing), before the trace
        result = plan_graph(args.cluster, args.model, args.batch_size, **graph_options(args),
                            progress=pricing_progress(not args.no_progress), before_work=lambda: output_folder(out))
    except NoPlanFits as error:  # keep the evidence: every plan and why it did not fit
        from flexcomm.planner.graph_report import keep_rejected  # torch, as the planner's pricing

        raise keep_rejected(error, out) from None
    from flexcomm.planner.graph_report import write_files

    written = write_files(result, out, args.top)
    print(printed(result, args.top, written), end="")
    return 0


def printed(result: GraphPlanResult, top: int, written: list[Path]) -> str:
    """The report as the command prints it (the Python API's ``report``): the plans, what was written, and the
    exchange's accuracy cost where the project measured one."""
    from flexcomm.planner.graph_report import report_lines  # torch, as the planner's pricing

    wrote = ["wrote " + ", ".join(str(p) for p in written)] if written else []
    return "\n".join([*report_lines(result, top), *wrote, *exchange_lines(result.exchange)]) + "\n"
