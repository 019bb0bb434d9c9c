"""The transformer planner as one call: a GPT shape, a cluster and a batch in, every plan priced and the best
simulated out, as data (``flexcomm plan --model gpt`` and ``flexcomm.plan("gpt", ...)`` both call it).

Why one function that returns data: the command line and the Python API must mean the same thing by the same
options, with the same defaults and the same one-line errors; each of them then only turns the result into what
it hands over (files and lines, or a table in memory). Nothing here parses flags, prints or writes a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from flexcomm.costmodel.calibration import CalibrationProfile, calibrated_cluster
from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gemm_efficiency import achievable_source
from flexcomm.costmodel.gradient_exchange import DEFAULT_TOPK_RATIO, GradientScheme
from flexcomm.planner.llm.gpt import Transformer
from flexcomm.planner.llm.memory import PRECISIONS
from flexcomm.planner.llm.pricing import LLMPlanCost, LLMPricer
from flexcomm.planner.llm.recovery import training_precision
from flexcomm.planner.llm.report import best_summary, table
from flexcomm.planner.llm.search import LLMSearchResult, search, tensor_parallel_reason
from flexcomm.planner.llm.step_sim import StepPlan, simulate_step
from flexcomm.planner.llm.timing import Hardware, device_precisions
from flexcomm.planner.plan_options import check_plan_options, gradient_exchange
from flexcomm.planner.rank_devices import PlanCluster, load_plan_cluster

#: GPT-2 small, the graph planner's default GPT: what ``--model gpt`` plans without shape options.
DEFAULT_SHAPE = {"layers": 12, "hidden": 768, "heads": 12, "seq_len": 1024, "vocab": 50257}
#: Default global batch, in sequences: GPT-2's (Radford et al. 2019: "a larger batchsize of 512").
GPT_SEQUENCES = 512
#: Best distinct schedules run on the step simulator unless told: one (a 16,384-GPU step takes seconds).
DEFAULT_SIMULATE_TOP = 1


@dataclass(frozen=True)
class TransformerPlanResult:
    """Every plan the transformer planner priced for one job, ranked, with the simulated step of the best few.

    ``table()`` is ``plans.csv``; ``summary()`` is ``best_plan.json``; ``not_simulated`` says why no plan was
    simulated where that is so."""

    model: Transformer
    cluster: PlanCluster
    #: the cluster the plans were priced on (``nics_per_node`` and a calibration profile applied)
    priced_on: Cluster
    batch_size: int
    precision: str
    attention: str
    exchange: GradientScheme
    pricer: LLMPricer
    search: LLMSearchResult
    simulated: Mapping[str, float] = field(default_factory=dict)
    not_simulated: str = ""
    batch_defaulted: bool = False
    ceiling_source: str = ""

    @property
    def best(self) -> LLMPlanCost:
        return self.search.best

    @property
    def shape(self) -> dict[str, int]:
        m = self.model
        return {"layers": m.layers, "hidden": m.hidden, "heads": m.heads, "seq_len": m.seq_len, "vocab": m.vocab}

    def table(self) -> pd.DataFrame:
        """Every priced plan, best first, with its simulated step where one was run (NaN elsewhere)."""
        frame = table(self.search)
        frame["simulated_step_s"] = frame["plan"].map(dict(self.simulated))
        return frame

    def summary(self) -> dict[str, Any]:
        """The best plan and what it was planned for: the keys of ``best_plan.json``."""
        return {"best": best_summary(self.best), "plans_priced": len(self.search.costs),
                "plans_fitting": len(self.search.ranked), "pricing_s": self.search.pricing_s, **self.settings()}

    def settings(self) -> dict[str, Any]:
        """What the plans were priced for (the figure's title and the JSON's keys)."""
        return {"model": "gpt", "parameters": self.model.parameters, "options": self.shape,
                "cluster": self.cluster.name, "batch_size": self.batch_size, "precision": self.precision,
                "planner": "transformer", "scheme": self.exchange.scheme, "ratio": self.exchange.ratio,
                "attention": self.attention, "simulated_step_s": self.simulated.get(self.best.plan.label)}

    def tensor_parallel_reason(self) -> str | None:
        """Why the best plan's TP is not the node's width, where it is not (None otherwise)."""
        return tensor_parallel_reason(self.search, self.priced_on.devices_per_node)


def check_options(batch_size: int | None, shape: Mapping[str, int], tp: int | None, pp: int | None,
                  nics_per_node: int | None, efficiency: float | None, memory_fraction: float,
                  simulate_top: int) -> None:
    """The options' own forms, checked before anything is priced (errors name the command line's flags): those
    every planner takes by :func:`planner.plan_options.check_plan_options`, a GPT's shape names here."""
    for name, value in shape.items():
        if name not in DEFAULT_SHAPE:
            raise InputError(name.replace("_", "-"), value, "a GPT shape option: " + ", ".join(DEFAULT_SHAPE))
    check_plan_options(batch_size, simulate_top, memory_fraction, efficiency,
                       {**shape, "tp": tp, "pp": pp, "nics_per_node": nics_per_node})


def _precision(precision: str | None, cluster: PlanCluster, exchange: GradientScheme) -> str:
    """The GEMMs' precision: the one asked for, or what every device of the pool can run."""
    if precision is None:  # what the pool can run: a V100 has no bf16, so a mixed pool trains in fp16
        precision = training_precision(cluster.cluster)
    if precision not in PRECISIONS:
        raise InputError("precision", precision, "one of " + ", ".join(PRECISIONS))
    if exchange.scheme in ("fp16", "bf16") and precision != "fp32":
        raise InputError("scheme", exchange.scheme, f"dense with --precision {precision}: its gradients are "
                         "16-bit already, the dense exchange sends them so (a cast scheme is for fp32 training)")
    slowest = min(cluster.devices, key=lambda d: d.peak_flops)
    if precision not in device_precisions(slowest.name):
        raise InputError("precision", precision, f"a precision {slowest.name} supports: "
                         + ", ".join(device_precisions(slowest.name)))
    return precision


def plan_transformer(cluster: str | Path | Cluster | PlanCluster, batch_size: int | None = None, *,
                     layers: int | None = None, hidden: int | None = None, heads: int | None = None,
                     seq_len: int | None = None, vocab: int | None = None, precision: str | None = None,
                     tp: int | None = None, pp: int | None = None, nics_per_node: int | None = None,
                     efficiency: float | None = None, memory_fraction: float = 1.0, scheme: str = "dense",
                     ratio: float = DEFAULT_TOPK_RATIO, attention: str = "fused",
                     simulate_top: int = DEFAULT_SIMULATE_TOP,
                     profile: str | Path | None = None) -> TransformerPlanResult:
    """Price every (t, p, d, micro-batch, virtual stages, sequence parallelism, recomputation, ZeRO) plan of a GPT
    of this shape (GPT-2 small's where left out) training ``batch_size`` sequences a step (default 512) on
    ``cluster``, rank them, and run the ``simulate_top`` best distinct schedules on the step simulator.

    ``tp``/``pp`` fix those sizes (a published configuration); ``efficiency`` prices GEMMs at that fraction of peak
    instead of the catalog's measured rate; ``scheme``/``ratio`` price a compressed data-parallel exchange;
    ``profile`` is a calibration profile (``flexcomm calibrate``) applied to the cluster's links.
    """
    shape = {k: v for k, v in (("layers", layers), ("hidden", hidden), ("heads", heads), ("seq_len", seq_len),
                               ("vocab", vocab)) if v is not None}
    check_options(batch_size, shape, tp, pp, nics_per_node, efficiency, memory_fraction, simulate_top)
    exchange = gradient_exchange(scheme, ratio)
    pool = load_plan_cluster(cluster)
    if profile:
        pool = pool.with_cluster(calibrated_cluster(pool.cluster, CalibrationProfile.load(profile)))
    defaulted = batch_size is None
    batch = GPT_SEQUENCES if batch_size is None else batch_size
    model = Transformer(**{**DEFAULT_SHAPE, **shape})
    precision = _precision(precision, pool, exchange)
    base = pool.cluster if nics_per_node is None else pool.cluster.model_copy(update={"nics_per_node": nics_per_node})
    if tp is not None and pool.world_size % tp:
        raise InputError("tp", tp, f"a divisor of the {pool.world_size} GPUs")
    if pp is not None and model.layers % pp:
        raise InputError("pp", pp, f"a divisor of the {model.layers} layers")
    pricer = LLMPricer(model, Hardware.of(base, efficiency), pool.world_size, batch, float(pool.memory_bytes.min()),
                       precision=precision, memory_fraction=memory_fraction, exchange=exchange, attention=attention)
    result = search(pricer, tp=tp, pp=pp)
    simulated, not_simulated = simulate_best(result, base, model, batch, precision, attention, exchange,
                                             simulate_top, mixed=pool.heterogeneous)
    slowest = min(base.rank_devices, key=lambda dev: dev.peak_flops)
    return TransformerPlanResult(model, pool, base, batch, precision, attention, exchange, pricer, result,
                                 simulated, not_simulated, defaulted,
                                 "--efficiency" if efficiency is not None else achievable_source(slowest.name))


def simulate_best(result: LLMSearchResult, cluster: Cluster, model: Transformer, batch_size: int, precision: str,
                  attention: str, exchange: GradientScheme, simulate_top: int,
                  mixed: bool) -> tuple[dict[str, float], str]:
    """The step simulator's step (contention, the pipeline's order) for the ``simulate_top`` best distinct
    schedules (plans that differ only in their ZeRO stage are one schedule): {plan label: seconds}, and why
    none was simulated where that is so (``mixed``: a pool of several device types, which the step simulator
    does not run)."""
    if simulate_top <= 0:
        return {}, ""
    if mixed:
        return {}, "the step simulator runs one device type, and this pool mixes them (plan's closed form stands)"
    simulated: dict[str, float] = {}
    schedules: dict[str, float] = {}
    for cost in result.ranked:
        schedule = cost.plan.label.rsplit("-z", 1)[0]
        if schedule not in schedules:
            if len(schedules) == simulate_top:
                break
            step = StepPlan(model, batch_size, cost.plan, precision, None, attention, exchange)
            schedules[schedule] = simulate_step(cluster, step).step_s
        simulated[cost.plan.label] = schedules[schedule]
    return simulated, ""
