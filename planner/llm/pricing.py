"""Price one transformer plan: (t, p, d, micro-batch size, virtual stages, sequence parallelism,
recomputation, ZeRO stage) -> step time, its breakdown, teraFLOP/s per GPU and peak memory per GPU.

The step as Megatron-LM runs it (Narayanan et al., SC'21, sections 2-3): every GPU of a pipeline stage
computes its l/p layers (split over t tensor-parallel ranks) for m = B/(d b) micro-batches; a micro-batch
costs forward + backward (2x the forward GEMMs) + the recomputed forward (full: the whole layer;
selective: the attention core) + its tensor-parallel collectives (2 allreduces per layer per forward and
backward pass, or with sequence parallelism as many reduce-scatter/allgather pairs) + its pipeline sends
(b s h / t per boundary with the scatter/gather optimisation, v times with v model chunks). The last stage
also runs the logit layer, the first the embedding. The pipeline takes (m + (p - 1)/v) slots of the
slowest stage (1F1B's bubble is (p - 1)/v slots, section 2.2). The data-parallel gradient exchange
overlaps the last micro-batch's backward pass, as PyTorch DDP and Megatron's overlapped gradient reduce
do; what does not fit is exposed. The optimizer step is memory-bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flexcomm.costmodel.compressed import SparsePayload
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gradient_exchange import GradientScheme
from flexcomm.planner.llm.gpt import Transformer
from flexcomm.planner.llm.memory import (
    PRECISIONS,
    RECOMPUTE,
    MemoryUse,
    activation_scale,
    in_flight,
    layer_activation_bytes,
    model_state_bytes,
)
from flexcomm.planner.llm.timing import Hardware


@dataclass(frozen=True, order=True)
class LLMPlan:
    """One point of the transformer planner's search space."""

    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    virtual_stages: int = 1
    sequence_parallel: bool = False
    recompute: str = "full"
    zero: int = 0

    @property
    def label(self) -> str:
        sp = "-sp" if self.sequence_parallel else ""
        v = f"-v{self.virtual_stages}" if self.virtual_stages > 1 else ""
        return f"t{self.tp}-p{self.pp}-d{self.dp}-b{self.micro_batch_size}{v}{sp}-rc_{self.recompute}-z{self.zero}"


@dataclass
class LLMPlanCost:
    """A priced plan: the step and where it goes (seconds per step on the slowest stage), memory, rate."""

    plan: LLMPlan
    micro_batches: int
    step_s: float
    compute_s: float
    recompute_s: float
    memory_bound_s: float
    tp_comm_s: float
    p2p_s: float
    bubble_s: float
    dp_exposed_s: float
    optimizer_s: float
    tflops_per_gpu: float
    peak_memory_bytes: float
    memory: MemoryUse
    fits: bool
    extra: dict[str, float] = field(default_factory=dict)
    #: a compressor's device work on the data-parallel gradients (``plan --scheme``; zero for dense)
    dp_device_s: float = 0.0

    def row(self) -> dict[str, object]:
        # the plan's fields, all scalars (dataclasses.asdict deep-copies each: a third of the table's time)
        return {"plan": self.plan.label, **vars(self.plan), "micro_batches": self.micro_batches,
                "step_s": self.step_s, "tokens_per_s": self.extra.get("tokens_per_s"), "mfu": self.extra.get("mfu"),
                "hfu": self.extra.get("hfu"), "megatron_tflops_per_gpu": self.tflops_per_gpu,
                "compute_s": self.compute_s,
                "recompute_s": self.recompute_s, "memory_bound_s": self.memory_bound_s, "tp_comm_s": self.tp_comm_s,
                "p2p_s": self.p2p_s, "bubble_s": self.bubble_s, "dp_exposed_s": self.dp_exposed_s,
                "dp_device_s": self.dp_device_s, "optimizer_s": self.optimizer_s,
                "peak_memory_GiB": self.peak_memory_bytes / 2**30,
                "fits": self.fits}


#: How attention runs: fused (FlashAttention; the default, what current stacks run) or unfused.
ATTENTION = ("fused", "unfused")


def dp_members_per_node(devices_per_node: int, t: int, d: int) -> int:
    """Members of one data-parallel group on a node: ranks go tp innermost, then dp, then pp."""
    return min(d, max(1, devices_per_node // t))


class LLMPricer:
    """Prices plans of one model, global batch and precision on one cluster (device memory x fraction)."""

    def __init__(self, model: Transformer, hardware: Hardware, world: int, batch_size: int,
                 memory_bytes: float, *, precision: str = "bf16", memory_fraction: float = 1.0,
                 overlap_dp: bool = True, cache: bool = True, exchange: GradientScheme | None = None,
                 attention: str = "fused") -> None:
        if precision not in PRECISIONS:
            raise InputError("precision", precision, "one of " + ", ".join(PRECISIONS))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError("batch-size", batch_size, "an integer >= 1 (sequences per step)")
        if not 0 < memory_fraction <= 1:
            raise InputError("memory-fraction", memory_fraction, "a fraction in (0, 1]")
        if attention not in ATTENTION:
            raise InputError("attention", attention, "one of " + ", ".join(ATTENTION))
        #: fused (FlashAttention: the s x s scores never reach memory, the backward recomputes them) or
        #: unfused (scores, softmax and dropout as separate kernels, as Megatron-LM ran in 2021-2022)
        self.attention = attention
        self.model, self.hw, self.world, self.batch_size = model, hardware, world, batch_size
        self.precision, self.overlap_dp = precision, overlap_dp
        self.memory_limit = memory_bytes * memory_fraction
        self.element_bytes = 4.0 if precision == "fp32" else 2.0
        self.cache = cache  # False: every plan prices its layer from scratch (the benchmark's baseline)
        #: how data-parallel groups exchange gradients (``plan --scheme``): dense allreduce unless told
        self.exchange = exchange or GradientScheme()
        self._layer_cache: dict[tuple, tuple[float, float, float, float]] = {}
        self._exchange_cache: dict[tuple, tuple[float, float, float]] = {}

    def check(self, plan: LLMPlan) -> None:
        m = self.model
        if plan.tp * plan.pp * plan.dp != self.world:
            raise InputError("plan", plan.label, f"t x p x d = {self.world} GPUs")
        if m.heads % plan.tp:
            raise InputError("tp", plan.tp, f"a divisor of the {m.heads} attention heads")
        if m.layers % (plan.pp * plan.virtual_stages):
            raise InputError("pp", plan.pp, f"p x virtual stages dividing the {m.layers} layers")
        if self.batch_size % (plan.dp * plan.micro_batch_size):
            raise InputError("batch-size", self.batch_size,
                             f"a multiple of d x micro-batch size = {plan.dp * plan.micro_batch_size}")
        if plan.recompute not in RECOMPUTE:
            raise InputError("recompute", plan.recompute, "one of " + ", ".join(RECOMPUTE))
        if plan.virtual_stages > 1 and (plan.pp == 1 or self.micro_batches(plan) % plan.pp):
            raise InputError("virtual_stages", plan.virtual_stages,
                             "1, or > 1 only with p > 1 and a micro-batch count that p divides")

    def micro_batches(self, plan: LLMPlan) -> int:
        return self.batch_size // (plan.dp * plan.micro_batch_size)

    # --- one layer -------------------------------------------------------------------------------

    def _layer(self, b: int, t: int, sp: bool) -> tuple[float, float, float, float]:
        """(GEMM forward s, attention-core GEMM forward s, memory-bound forward s, softmax-part memory-bound
        forward s) of one layer and micro-batch on one tensor-parallel rank."""
        key = (b, t, sp)
        hit = self._layer_cache.get(key) if self.cache else None
        if hit is not None:
            return hit
        e = self.element_bytes
        gemms = self.model.layer_gemms(b, t)
        times = {g.name: self.hw.gemm_s(g, e) for g in gemms}
        gemm = sum(times.values())
        core = times["scores"] + times["context"]
        fused = self.attention == "fused"
        # fused attention keeps no s x s tensor: its memory-bound traffic is the layer's without those terms
        # (Korthikanti's selective count), and its softmax never goes through memory
        stored = layer_activation_bytes(self.model, b, t, sp, "selective" if fused else "none", self.precision)
        softmax = 0.0 if fused else (5.0 * self.model.heads * self.model.seq_len**2 * b / t) * activation_scale(
            self.precision)
        value = (gemm, core, self.hw.memory_bound_s(stored), self.hw.memory_bound_s(softmax))
        self._layer_cache[key] = value
        return value

    def _tp_pass_s(self, b: int, t: int, sp: bool) -> float:
        """Tensor-parallel communication of one layer's forward (or backward) pass for one micro-batch."""
        if t == 1:
            return 0.0
        nbytes = self.model.seq_len * b * self.model.hidden * self.element_bytes
        per_node = min(t, self.hw.devices_per_node)
        if sp:  # an allgather before and a reduce-scatter after each of attention and MLP
            return 4 * self.hw.gather_or_scatter_s(nbytes, t, per_node)
        return 2 * self.hw.allreduce_s(nbytes, t, per_node)

    def layer_passes_s(self, b: int, t: int, sp: bool, recompute: str) -> tuple[float, float, float]:
        """(forward, backward, recomputed forward) seconds of one layer and micro-batch on one tensor rank:
        backward = twice the forward's kernels plus its own tensor-parallel pass; full recomputation repeats
        the forward, selective only the attention core and its softmax."""
        gemm, core, elem, softmax_elem = self._layer(b, t, sp)
        tp_pass = self._tp_pass_s(b, t, sp)
        forward = gemm + elem + tp_pass
        extra = forward if recompute == "full" else core + softmax_elem if recompute == "selective" else 0.0
        return forward, 2 * (gemm + elem) + self._rescore_s(core) + tp_pass, extra

    def _rescore_s(self, core: float) -> float:
        """What FlashAttention's backward adds: it recomputes the scores, one more QK^T (Dao et al. 2022,
        algorithm 4), half the attention core's two GEMMs of equal FLOPs; nothing unfused."""
        return core / 2 if self.attention == "fused" else 0.0

    def head_s(self, b: int, t: int) -> float:
        """The logit layer and its cross entropy (fp32 logits), forward and a backward of twice that: the last
        stage's extra work per micro-batch."""
        mdl, hw = self.model, self.hw
        logits = hw.gemm_s(mdl.logit_gemm(b, t), self.element_bytes)
        return 3 * (logits + hw.memory_bound_s(4.0 * mdl.seq_len * b * mdl.vocab / t))

    def _dp_exchange(self, params_gpu: float, t: int, layers: int, d: int, per_node: int,
                     grad_bytes: float) -> tuple[float, float, float]:
        """(exchange s, device work s, error-feedback bytes) of a stage's gradients over its d replicas: a
        dense allreduce, or ``plan --scheme``'s exchange priced as whatif and simulate price it
        (:class:`costmodel.gradient_exchange.GradientScheme`), PowerSGD's matrices the layers' weights."""
        hw, scheme = self.hw, self.exchange
        if d <= 1:
            return 0.0, 0.0, 0.0
        if scheme.dense:
            return hw.allreduce_s(grad_bytes, d, per_node), 0.0, 0.0
        key = (t, layers, d, per_node)  # the plans of one split share it (micro-batches, recompute, ZeRO vary)
        hit = self._exchange_cache.get(key) if self.cache else None
        if hit is None:
            hit = self._exchange_cache[key] = self._compressed_exchange(params_gpu, t, layers, d, per_node)
        return hit

    def _compressed_exchange(self, params_gpu: float, t: int, layers: int, d: int,
                             per_node: int) -> tuple[float, float, float]:
        hw, scheme = self.hw, self.exchange
        h = self.model.hidden
        # one layer's weight matrices on a tensor rank (rows, columns): QKV, projection, FC1, FC2
        shapes = [(h, 3 * h / t), (h / t, h), (h, 4 * h / t), (4 * h / t, h)] * layers
        payload = SparsePayload(value_dtype="float32" if self.precision == "fp32" else self.precision,
                                matrix_sides=(sum(r for r, _ in shapes), sum(c for _, c in shapes)))
        model, nccl = hw.group_model(d, per_node)
        return (scheme.exchange_seconds(params_gpu, d, model, nccl, payload),
                scheme.device_seconds(params_gpu, hw.device, [r * c for r, c in shapes]),
                scheme.memory_bytes(params_gpu, payload))

    # --- the plan --------------------------------------------------------------------------------

    def price(self, plan: LLMPlan) -> LLMPlanCost:
        self.check(plan)
        mdl, hw = self.model, self.hw
        t, p, d, b, v = plan.tp, plan.pp, plan.dp, plan.micro_batch_size, plan.virtual_stages
        sp = plan.sequence_parallel and t > 1
        m = self.micro_batches(plan)
        layers = mdl.layers // p
        gemm, core, elem, _ = self._layer(b, t, sp)
        rescore = self._rescore_s(core)
        tp_pass = self._tp_pass_s(b, t, sp)
        forward, backward, recompute = self.layer_passes_s(b, t, sp, plan.recompute)
        head = self.head_s(b, t)
        across = t * d >= hw.devices_per_node  # pipeline neighbours sit on different nodes
        boundary = mdl.seq_len * b * mdl.hidden * self.element_bytes / t
        send = hw.send_s(boundary, across) + (hw.gather_or_scatter_s(boundary * t, t, min(t, hw.devices_per_node))
                                              if t > 1 and not sp else 0.0)
        p2p = 2 * v * send if p > 1 else 0.0
        stage = layers * (forward + backward + recompute) + head + p2p
        slots = m + (p - 1) / v
        pipeline = slots * stage

        params_stage = layers * mdl.layer_parameters + mdl.embedding_parameters  # first/last stage hold the embedding
        params_gpu = params_stage / t
        grad_bytes = params_gpu * (4.0 if self.precision == "fp32" else 2.0)
        per_node = dp_members_per_node(hw.devices_per_node, t, d)
        dp_s, device_work, feedback = self._dp_exchange(params_gpu, t, layers, d, per_node, grad_bytes)
        # the exchange overlaps the last micro-batch's backward from its first gradients on, the logit head's (the
        # first layer a backward reaches on the last stage), as DDP's buckets and the step simulator start it
        window = layers * backward + 2 * head / 3 if self.overlap_dp else 0.0
        dp_exposed = max(0.0, dp_s - window)
        optimizer = hw.optimizer_s(params_gpu / (d if plan.zero >= 1 else 1))
        step = pipeline + device_work + dp_exposed + optimizer

        states = model_state_bytes(params_gpu, self.precision, plan.zero, d) + feedback
        kept_as = "selective" if self.attention == "fused" and plan.recompute == "none" else plan.recompute
        kept = layers * layer_activation_bytes(mdl, b, t, sp, kept_as, self.precision)
        working = (layer_activation_bytes(mdl, b, t, sp, "selective" if self.attention == "fused" else "none",
                                          self.precision) if plan.recompute == "full" else 0.0)
        logit_bytes = 4.0 * mdl.seq_len * b * mdl.vocab / t  # fp32 logits for the cross entropy
        first = MemoryUse(states, kept * in_flight(p, m, v) + working, logit_bytes if p == 1 else 0.0)
        last = MemoryUse(states, kept + working, logit_bytes)  # the last stage holds one micro-batch in flight
        memory = first if p == 1 or first.total >= last.total else last
        peak = memory.total
        flops = mdl.model_flops(self.batch_size)
        model_flops = mdl.training_flops(self.batch_size)
        hardware_flops = model_flops + mdl.recompute_flops(self.batch_size, plan.recompute)
        capacity = hw.peak_flops * step * self.world  # FLOPs the GPUs could have done in the step
        return LLMPlanCost(
            plan=plan, micro_batches=m, step_s=step,
            compute_s=m * (layers * (3 * gemm + rescore) + head), recompute_s=m * layers * recompute,
            memory_bound_s=m * layers * 3 * elem, tp_comm_s=m * layers * 2 * tp_pass, p2p_s=m * p2p,
            bubble_s=(p - 1) / v * stage,
            dp_exposed_s=dp_exposed, optimizer_s=optimizer, tflops_per_gpu=flops / (step * self.world) / 1e12,
            peak_memory_bytes=peak, memory=memory, fits=peak <= self.memory_limit, dp_device_s=device_work,
            extra={"dp_allreduce_s": dp_s, "stage_s": stage, "parameters_per_gpu": params_gpu,
                   "error_feedback_bytes": feedback,
                   "tokens_per_s": self.batch_size * mdl.seq_len / step, "mfu": model_flops / capacity,
                   "hfu": hardware_flops / capacity},
        )
