"""Search the transformer plan space: t dividing the heads, p (x virtual stages) dividing the layers,
micro-batch size and count, sequence parallelism, recomputation, ZeRO stage; pruned by memory.

Pruning is exact, never a guess: a (t, p) whose model states alone (at the ZeRO stage that shards most)
exceed the device is dropped with all its variants, and of the ZeRO stages that fit, only the lowest is
kept for a schedule (they move the same bytes in the same time, the lower one with less bookkeeping).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_size, format_time
from flexcomm.planner.llm.memory import RECOMPUTE, model_state_bytes
from flexcomm.planner.llm.pricing import LLMPlan, LLMPlanCost, LLMPricer

#: Micro-batch sizes the search tries (a design choice: powers of two up to 32).
MICRO_BATCH_SIZES = (1, 2, 4, 8, 16, 32)
#: Virtual (interleaved) stages per pipeline stage the search tries at most (a design choice).
MAX_VIRTUAL_STAGES = 8


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def tensor_parallel_sizes(pricer: LLMPricer) -> list[int]:
    """t dividing both the GPU count and the head count (Megatron splits heads among tensor ranks)."""
    return [t for t in _divisors(pricer.world) if pricer.model.heads % t == 0]


def _state_bound(pricer: LLMPricer, t: int, p: int) -> float:
    """Model-state bytes per GPU of a (t, p) split at the ZeRO stage the search may use that shards most."""
    mdl = pricer.model
    d = pricer.world // (t * p)
    params_gpu = (mdl.layers // p * mdl.layer_parameters + mdl.embedding_parameters) / t
    return model_state_bytes(params_gpu, pricer.precision, 2 if d > 1 else 0, d)


def enumerate_plans(pricer: LLMPricer, *, tp: int | None = None, pp: int | None = None) -> Iterator[LLMPlan]:
    """Every plan of the space (optionally with t and p fixed), memory-pruned per (t, p)."""
    mdl, world, batch = pricer.model, pricer.world, pricer.batch_size
    for t in tensor_parallel_sizes(pricer) if tp is None else [tp]:
        for p in _divisors(world // t) if pp is None else [pp]:
            if world % (t * p) or mdl.layers % p:
                continue
            d = world // (t * p)
            if batch % d:
                continue
            if _state_bound(pricer, t, p) > pricer.memory_limit:
                continue  # no variant of this split can fit
            for b in MICRO_BATCH_SIZES:
                if (batch // d) % b:
                    continue
                m = batch // (d * b)
                stages = [1] + [v for v in range(2, MAX_VIRTUAL_STAGES + 1)
                                if p > 1 and mdl.layers % (p * v) == 0 and m % p == 0]
                for v in stages:
                    for sp in (False, True) if t > 1 else (False,):
                        for recompute in RECOMPUTE:
                            for zero in (0, 1, 2) if d > 1 else (0,):
                                yield LLMPlan(t, p, d, b, v, sp, recompute, zero)


@dataclass
class LLMSearchResult:
    costs: list[LLMPlanCost]
    ranked: list[LLMPlanCost]
    pricing_s: float

    @property
    def best(self) -> LLMPlanCost:
        return self.ranked[0]

    @property
    def plans_per_s(self) -> float:
        return len(self.costs) / self.pricing_s if self.pricing_s > 0 else float("inf")


def _rank_key(cost: LLMPlanCost) -> tuple:
    plan = cost.plan
    return (round(cost.step_s, 12), plan.zero, plan.virtual_stages, plan.sequence_parallel,
            RECOMPUTE.index(plan.recompute), cost.peak_memory_bytes, plan)


def search(pricer: LLMPricer, *, tp: int | None = None, pp: int | None = None) -> LLMSearchResult:
    """Price every plan (``tp``/``pp`` fix the split, as a published configuration does) and rank those
    that fit; none fitting is one :class:`InputError` with the smallest need and the device's memory."""
    if not tensor_parallel_sizes(pricer):
        raise InputError("heads", pricer.model.heads, f"a head count some t dividing the {pricer.world} GPUs divides")
    if tp is not None and pricer.model.heads % tp:
        raise InputError("tp", tp, f"a divisor of the {pricer.model.heads} attention heads")
    started = time.perf_counter()
    costs = []
    for plan in enumerate_plans(pricer, tp=tp, pp=pp):
        costs.append(pricer.price(plan))
    pricing_s = time.perf_counter() - started
    if not costs:
        d_options = [pricer.world // (t * p) for t in tensor_parallel_sizes(pricer)
                     for p in _divisors(pricer.world // t) if pricer.model.layers % p == 0]
        if not any(pricer.batch_size % d == 0 for d in d_options):
            raise InputError("batch-size", pricer.batch_size, "a batch that splits into the data-parallel replicas "
                             f"of some plan (d in {sorted(set(d_options))[:8]}...)")
        least = min(_state_bound(pricer, t, p) for t in tensor_parallel_sizes(pricer)
                    for p in _divisors(pricer.world // t) if pricer.model.layers % p == 0)
        raise InputError("model", f"{pricer.model.parameters / 1e9:.1f}B parameters",
                         f"a model some plan fits: the smallest need is over {format_size(least)} per GPU (its model "
                         f"states alone, at the split and ZeRO stage that shard most), the device has "
                         f"{format_size(pricer.memory_limit)}")
    ranked = sorted((c for c in costs if c.fits), key=_rank_key)
    if not ranked:
        least = min(costs, key=lambda c: c.peak_memory_bytes)
        raise InputError("model", f"{pricer.model.parameters / 1e9:.1f}B parameters",
                         f"a model some plan fits: the smallest need is {format_size(least.peak_memory_bytes)} per "
                         f"GPU ({least.plan.label}), the device has {format_size(pricer.memory_limit)}")
    return LLMSearchResult(costs, ranked, pricing_s)


#: The parts of a plan's step (:class:`LLMPlanCost` fields), in the order the reports draw them.
STEP_PARTS = ("compute_s", "recompute_s", "memory_bound_s", "tp_comm_s", "p2p_s", "bubble_s", "dp_exposed_s",
              "dp_device_s", "optimizer_s")
#: How a sentence names a part.
PART_WORDS = {"compute_s": "compute", "recompute_s": "recomputation", "memory_bound_s": "memory-bound kernels",
              "tp_comm_s": "tensor-parallel communication", "p2p_s": "pipeline sends", "bubble_s": "pipeline bubble",
              "dp_exposed_s": "exposed data-parallel allreduce", "dp_device_s": "gradient compression",
              "optimizer_s": "optimizer"}


def tensor_parallel_reason(result: LLMSearchResult, devices_per_node: int) -> str | None:
    """Why the best plan's tensor groups span nodes, when they do: the best plan whose tensor groups stay
    inside a node (what a Megatron user runs first) and the part of its step that costs it the most; None when
    the best plan keeps them inside a node. Both are priced the same way, NCCL's model on whole nodes."""
    best = result.best
    if best.plan.tp <= devices_per_node:
        return None
    nodes = best.plan.tp // devices_per_node
    inside = [c for c in result.ranked if c.plan.tp <= devices_per_node]
    if not inside:
        return (f"tensor groups span {nodes} nodes: no plan with tensor groups inside a node "
                f"(t <= {devices_per_node}) fits in memory")
    other = inside[0]
    worse = max(STEP_PARTS, key=lambda part: getattr(other, part) - getattr(best, part))
    return (f"tensor groups span {nodes} nodes: the best plan with them inside a node, {other.plan.label}, takes "
            f"{format_time(other.step_s)} (+{other.step_s / best.step_s - 1:.1%}), its {PART_WORDS[worse]} "
            f"{format_time(getattr(other, worse))} against {format_time(getattr(best, worse))}")
