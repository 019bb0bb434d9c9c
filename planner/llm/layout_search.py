"""Search every layout of a current transformer on a cluster: TP, CP (with its exchange), PP with virtual stages,
EP (with its dispatcher), micro-batch, FSDP and recomputation, each priced by
:class:`planner.llm.layout_step.LayoutPricer`, ranked among those that fit.

The CP exchange (ring, all-gather, all-to-all) and the EP dispatcher (all-to-all, all-gather) are not
enumerated: they change one layer's pass and nothing else a layout holds (memory, groups, split), so each
layout takes the pair whose pass is fastest (:meth:`LayoutPricer.fastest_exchange`).

Why exhaustive: the space is a few thousand layouts for any published size (divisors of the GPU count, heads,
experts and layers), each priced in microseconds once a layer's pass is cached, so every layout is seen and the
ranking has no search heuristic to doubt.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_size
from flexcomm.planner.llm.architecture import Architecture
from flexcomm.planner.llm.layout import Layout, check_capacity_factor, gemm_precision
from flexcomm.planner.llm.layout_step import LayoutCost, LayoutPricer, cluster_of, scale_up_domain

#: Tensor-parallel sizes searched: powers of two up to a DGX node, as every published layout uses.
TP_SIZES = (1, 2, 4, 8)
#: Context-parallel sizes searched (the published tables use 1 and 2).
CP_SIZES = (1, 2, 4, 8)
#: Micro-batch sizes searched (the published tables use 1-8).
MICRO_BATCHES = (1, 2, 4, 8)
#: Largest pipeline depth searched (the published tables go to 16).
MAX_PP = 32
#: Largest virtual-stage count searched (the published tables go to 24 with PP 2; 16 covers PP >= 4).
MAX_VP = 16
#: Sequence length when none is given: what the published Megatron-Bridge MoE recipes train at.
DEFAULT_SEQ_LEN = 4096
#: Sequences per GPU in the global batch when no batch is given (the published tables run 2-32).
DEFAULT_SEQUENCES_PER_GPU = 4


@dataclass(frozen=True)
class LayoutSearch:
    """Every priced layout, those that fit ranked by step time, how long pricing took, and the job searched."""

    costs: list[LayoutCost]
    ranked: list[LayoutCost]
    pricing_s: float
    gpus: int
    global_batch: int
    seq_len: int
    precision: str
    memory_limit_bytes: float

    @property
    def best(self) -> LayoutCost:
        return self.ranked[0]

    def rank_of(self, layout: Layout) -> int | None:
        """1-based place of ``layout`` among the fitting plans, whichever CP exchange and EP dispatcher the search
        gave it; None if absent (it does not fit)."""
        plain = _default_exchange(layout)
        for place, cost in enumerate(self.ranked, start=1):
            if _default_exchange(cost.layout) == plain:
                return place
        return None


def _default_exchange(layout: Layout) -> Layout:
    return dataclasses.replace(layout, cp_comm="p2p", dispatcher="alltoall")


def _splits(stack: int, pp: int) -> list[int]:
    """Virtual-stage counts that split ``stack`` layers over ``pp`` stages as Megatron can (evenly, or with the
    embedding and the loss each counted as a layer)."""
    if pp == 1:
        return [1]
    return [v for v in range(1, MAX_VP + 1) if stack % (pp * v) == 0 or (stack + 2) % (pp * v) == 0]


def _divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (limit or n) + 1) if n % d == 0]


def candidate_layouts(arch: Architecture, gpus: int, global_batch: int, seq_len: int, precision: str,
                      domain: int, capacity_factor: float | None = None) -> Iterator[Layout]:
    """Every layout of the space (see the module docstring) whose dimensions divide what they split, with the
    default CP exchange and EP dispatcher; the capacity factor is the user's (it changes what is trained, not
    how it is laid out)."""
    stack = arch.layers + arch.mtp_layers
    for tp in (t for t in TP_SIZES if arch.heads % t == 0 and t <= domain):
        for cp in (c for c in CP_SIZES if c == 1 or seq_len % (2 * c) == 0):
            if gpus % (tp * cp):
                continue
            for pp in _divisors(gpus // (tp * cp), MAX_PP):
                dp = gpus // (tp * cp * pp)
                experts = [1] if arch.moe is None else [e for e in _divisors(arch.moe.experts)
                                                        if (tp * dp * cp) % e == 0]
                for vp in _splits(stack, pp):
                    for ep in experts:
                        for mbs in (b for b in MICRO_BATCHES if global_batch % (b * dp) == 0):
                            micro_batches = global_batch // (mbs * dp)
                            if vp > 1 and micro_batches % pp:
                                continue
                            for fsdp in ((False, True) if pp == 1 and dp > 1 else (False,)):
                                for rc in (("none", "moe", "full") if arch.moe else ("none", "full")):
                                    yield Layout(gpus=gpus, global_batch=global_batch, micro_batch=mbs,
                                                 seq_len=seq_len, tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, fsdp=fsdp,
                                                 precision=precision, recompute=rc,
                                                 capacity_factor=capacity_factor)


def search_layouts(pricer: LayoutPricer, gpus: int, global_batch: int, seq_len: int,
                   precision: str, capacity_factor: float | None = None) -> LayoutSearch:
    """Price every candidate layout and rank those that fit; none fitting (or none at all) is one
    :class:`InputError` naming the smallest need and the device's memory."""
    pricer.check_precision(precision)
    check_capacity_factor(capacity_factor, pricer.arch)
    started = time.perf_counter()
    costs = []
    for layout in candidate_layouts(pricer.arch, gpus, global_batch, seq_len, precision,
                                    scale_up_domain(pricer.cluster), capacity_factor):
        try:
            costs.append(pricer.price(pricer.fastest_exchange(layout)))
        except InputError:  # a combination the model does not allow (KV heads over TP, layers over PP)
            continue
    pricing_s = time.perf_counter() - started
    if not costs:
        raise InputError("batch-size", global_batch, f"a global batch some layout of {gpus} GPUs splits "
                         "(a multiple of micro-batch x data-parallel size)")
    ranked = sorted((c for c in costs if c.fits), key=lambda c: (c.step_s, c.layout.label))
    if not ranked:
        least = min(costs, key=lambda c: c.memory.total)
        raise InputError("model", f"{pricer.arch.name} on {gpus} GPUs",
                         f"a model some layout fits: the smallest need is {format_size(least.memory.total)} per GPU "
                         f"({least.layout.label}), the device has {format_size(pricer.memory_limit)}")
    return LayoutSearch(costs, ranked, pricing_s, gpus, global_batch, seq_len, precision, pricer.memory_limit)


def plan_layouts(arch: Architecture, cluster: Cluster, *, gpus: int | None = None, batch_size: int | None = None,
                 seq_len: int | None = DEFAULT_SEQ_LEN, precision: str = "bf16",
                 capacity_factor: float | None = None) -> LayoutSearch:
    """Every layout of ``arch`` on ``gpus`` GPUs of ``cluster`` (default: all of it; its nodes repeated to hold
    more), priced and ranked: the engine ``flexcomm plan --model <preset>`` and ``flexcomm.plan_layouts`` call.
    ``batch_size`` counts sequences (default :data:`DEFAULT_SEQUENCES_PER_GPU` per GPU); ``precision`` as the
    tables write it (BF16, FP8-CS, MXFP8, ...)."""
    seq_len = DEFAULT_SEQ_LEN if seq_len is None else seq_len
    for name, value in (("gpus", gpus), ("batch_size", batch_size), ("seq_len", seq_len)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(name, value, "an integer >= 1")
    gpus = gpus or cluster.world_size
    batch = batch_size or DEFAULT_SEQUENCES_PER_GPU * gpus
    pricer = LayoutPricer(arch, cluster_of(cluster, gpus))
    return search_layouts(pricer, gpus, batch, seq_len, gemm_precision(precision), capacity_factor)
