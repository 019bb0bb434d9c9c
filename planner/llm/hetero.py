"""Transformer plans on a mixed pool: pipeline stages on different device types, layers balanced by speed.

Why uneven stages: on a pool of A100 and V100 nodes a plan with equal stages runs at the V100s' pace; giving
each stage a number of layers in inverse proportion to its device's time per layer (the resource-aware
balance of the graph planner, :mod:`planner.plans`) lets both types finish their micro-batch together.
A plan here is (t, d, micro-batch size, recomputation, and how many stages of each type); every stage
holds t x d GPUs of one type (tensor-parallel groups never mix types), layers are split by a min-max greedy
that is exact for stage costs linear in their layers (the last stage also runs the logit layer), and each
stage's memory is checked against its own device. The step is the 1F1B pipeline at the slowest stage's
pace plus the exposed gradient exchange and the optimizer step of the slowest stage.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from flexcomm.costmodel.errors import InputError
from flexcomm.planner.llm.gpt import Transformer
from flexcomm.planner.llm.memory import (
    full_layer_activation_bytes,
    layer_activation_bytes,
    model_state_bytes,
)
from flexcomm.planner.llm.pricing import LLMPricer
from flexcomm.planner.llm.search import MICRO_BATCH_SIZES
from flexcomm.planner.llm.timing import Hardware


@dataclass(frozen=True)
class DeviceGroup:
    """The GPUs of one device type a job may use."""

    name: str
    gpus: int
    hardware: Hardware
    memory_bytes: float


@dataclass(frozen=True)
class HeteroCost:
    label: str
    tp: int
    dp: int
    micro_batch_size: int
    recompute: str
    stages: tuple[tuple[str, int], ...]  # (device type, layers) per stage, first to last
    step_s: float
    peak_memory_bytes: float
    samples_per_step: int

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def gpus(self) -> int:
        return self.tp * self.dp * self.pp


def _balance(times: list[float], layers: int, head: float) -> list[int] | None:
    """Layers per stage minimising the slowest stage (stage i costs n_i x times[i], the last also ``head``)."""
    count = [0] * len(times)
    heap = [((1 * times[i]) + (head if i == len(times) - 1 else 0.0), i) for i in range(len(times))]
    heapq.heapify(heap)
    for _ in range(layers):
        _, i = heapq.heappop(heap)
        count[i] += 1
        heapq.heappush(heap, ((count[i] + 1) * times[i] + (head if i == len(times) - 1 else 0.0), i))
    return count if all(c > 0 for c in count) else None


def search_hetero(model: Transformer, groups: list[DeviceGroup], batch: int, precision: str = "fp16",
                  max_stages_per_type: int = 16) -> HeteroCost:
    """The fastest plan on the pool that fits every stage's device; InputError if none does."""
    if not groups:
        raise InputError("nodes", 0, "at least one node to plan on")
    # the type with more memory goes first: the first stages hold the most micro-batches in flight
    groups = sorted(groups, key=lambda g: -g.memory_bytes)
    world = sum(g.gpus for g in groups)
    pricers = {g.name: LLMPricer(model, g.hardware, world, batch, g.memory_bytes, precision=precision)
               for g in groups}
    dpn = min(g.hardware.devices_per_node for g in groups)
    best: HeteroCost | None = None
    tps = [t for t in (1, 2, 4, 8) if model.heads % t == 0 and t <= dpn]
    for t in tps:
        for d in (k for k in range(1, world // t + 1) if batch % k == 0):
            counts = [min(g.gpus // (t * d), max_stages_per_type) for g in groups]
            if sum(counts) == 0:
                continue
            for b in MICRO_BATCH_SIZES:
                if (batch // d) % b:
                    continue
                m = batch // (d * b)
                for recompute in ("selective", "full"):
                    cost = _best_split(model, groups, pricers, t, d, b, m, recompute, counts, precision)
                    if cost is not None and (best is None or cost.step_s < best.step_s):
                        best = cost
    if best is None:
        raise InputError("nodes", "+".join(f"{g.gpus}x{g.name}" for g in groups),
                         f"a pool some plan of the {model.parameters / 1e9:.1f}B model fits")
    return best


def _best_split(model: Transformer, groups: list[DeviceGroup], pricers: dict[str, LLMPricer], t: int, d: int,
                b: int, m: int, recompute: str, counts: list[int], precision: str) -> HeteroCost | None:
    sp = t > 1
    per_layer: dict[str, float] = {}
    backward: dict[str, float] = {}
    head: dict[str, float] = {}
    for g in groups:
        forward, back, extra = pricers[g.name].layer_passes_s(b, t, sp, recompute)
        backward[g.name] = back
        per_layer[g.name] = forward + back + extra
        head[g.name] = pricers[g.name].head_s(b, t)
    best: HeteroCost | None = None
    first_choices = range(counts[0] + 1)
    second_choices = range(counts[1] + 1) if len(groups) > 1 else range(1)
    for p_a in first_choices:
        for p_b in second_choices:
            p = p_a + p_b
            if p == 0 or p > model.layers or (p_b and len(groups) < 2):
                continue
            kinds = [groups[0].name] * p_a + ([groups[1].name] * p_b if p_b else [])
            times = [per_layer[k] for k in kinds]
            layers = _balance(times, model.layers, head[kinds[-1]])
            if layers is None:
                continue
            ref = pricers[kinds[0]]
            send = ref.hw.send_s(model.seq_len * b * model.hidden * ref.element_bytes / t, True) if p > 1 else 0.0
            stage = [n * tm + (head[kinds[-1]] if i == p - 1 else 0.0) + 2 * send
                     for i, (n, tm) in enumerate(zip(layers, times, strict=True))]
            slowest = max(stage)
            pipeline = (m + p - 1) * slowest
            memory_ok, peak, dp_exposed, optimizer = True, 0.0, 0.0, 0.0
            for i, (kind, n) in enumerate(zip(kinds, layers, strict=True)):
                g = next(x for x in groups if x.name == kind)
                params = (n * model.layer_parameters + (model.embedding_parameters if i in (0, p - 1) else 0)) / t
                kept = n * layer_activation_bytes(model, b, t, sp, recompute, precision) * min(p - i, m)
                if recompute == "full":
                    kept += full_layer_activation_bytes(model, b, t, sp, precision)
                logits = 4.0 * model.seq_len * b * model.vocab / t if i == p - 1 else 0.0
                used = model_state_bytes(params, precision, 1 if d > 1 else 0, d) + kept + logits
                peak = max(peak, used)
                memory_ok &= used <= g.memory_bytes
                grads = params * 2.0
                per_node = min(d, max(1, g.hardware.devices_per_node // t))
                dp_s = g.hardware.allreduce_s(grads, d, per_node) if d > 1 else 0.0
                dp_exposed = max(dp_exposed, dp_s - n * backward[kind])  # overlaps the last backward
                optimizer = max(optimizer, g.hardware.optimizer_s(params / d))
            if not memory_ok:
                continue
            step = pipeline + max(0.0, dp_exposed) + optimizer
            stages = tuple(zip(kinds, layers, strict=True))
            split = " + ".join(f"{k}:{sum(1 for s in stages if s[0] == k)}x" + "/".join(
                str(n) for s2, n in stages if s2 == k) + "L" for k in dict.fromkeys(kinds))
            cost = HeteroCost(f"t{t}-d{d}-b{b}-rc_{recompute} [{split}]", t, d, b, recompute, stages, step, peak,
                              d * b * m)
            if best is None or cost.step_s < best.step_s:
                best = cost
    return best
