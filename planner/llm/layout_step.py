"""Price one published layout of a current transformer: step time, tokens/s/GPU and where the step goes.

The step as Megatron-Core runs it (every term from the layout, the architecture and the cluster; nothing
fitted to a throughput table):

* **GEMMs** (:class:`planner.llm.timing.Hardware`: roofline, CUTLASS tile/wave/K-loop fill) at the layout's
  precision's datasheet peak times the device's measured ceiling for it (MAMF over peak, BF16 or FP8, never
  above the fastest GEMM measured; :func:`costmodel.gemm_efficiency.measured_ceiling`): the linear layers of every
  transformer layer in that precision; the attention core (FlashAttention, causal half, BF16; backward 2.5x
  its forward, Dao et al. 2022), the router and the output layer in BF16 (Megatron-Core's output layer is not
  a Transformer Engine module). Backward GEMMs are twice the forward's (dgrad + wgrad).
* **Memory-bound kernels**: every stored activation byte written once and read once forward, twice that
  backward (the convention of :mod:`planner.llm.timing`); FP8/FP4 add their casts (read BF16, write the
  low-precision copy; current scaling reads once more for the amax), forward and backward.
* **TP with sequence parallelism**: an all-gather before and a reduce-scatter after attention and the MLP,
  forward and backward, each overlapped with the GEMM it feeds or follows (Transformer Engine's userbuffers
  overlap, which Megatron-Bridge's recipes turn on); only what outlasts its GEMM is paid.
* **CP** (``Layout.cp_comm``): ring attention's point-to-point K/V exchange, CP - 1 steps, overlapped with the
  attention core; or K/V all-gathered (gradients reduce-scattered), or Q/K/V and the output all-to-all
  (DeepSpeed-Ulysses), neither overlapped. Causal load balance: each CP rank holds one early and one late
  chunk, so every rank's core is the mean.
* **EP** (``Layout.dispatcher``): token dispatch and combine as all-to-all in BF16, or the EP group's tokens
  all-gathered and the outputs reduce-scattered, forward and backward, not overlapped. Dropless balanced
  routing, or a capacity factor that pads or drops every expert to that multiple of its balanced share.
* **PP**: interleaved 1F1B, (PP - 1) / VP stage-slots of bubble; stage work balanced (Megatron-Bridge's
  recipes account for the embedding and loss in the split).
* **DP** with the distributed optimizer: gradients reduce-scattered and parameters all-gathered in BF16, over
  DP x CP for dense weights and over GPUs / (PP x EP) for expert weights, overlapped with the last micro-batch's
  backward and the first's forward. **FSDP**: each layer's weights all-gathered forward and backward and its
  gradients reduce-scattered, every micro-batch, each overlapped with that layer's compute.
* The optimizer step is memory-bound (:meth:`Hardware.optimizer_s`) over the GPU's shard.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.devices import lookup
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gemm_efficiency import measured_ceiling
from flexcomm.planner.llm.architecture import Architecture
from flexcomm.planner.llm.gpt import Gemm
from flexcomm.planner.llm.layout import BLOCK_SCALED, CP_COMM, DISPATCHERS, GEMM_PRECISIONS, Layout
from flexcomm.planner.llm.memory import in_flight
from flexcomm.planner.llm.timing import Hardware

#: BF16 bytes of an activation or communicated element.
BF16 = 2.0
#: FlashAttention's backward over its forward: 5 GEMMs against 2 (Dao et al. 2022, algorithm 4).
FLASH_BACKWARD = 2.5
#: FP32 master weights and Adam's two moments per parameter (Rajbhandari et al. 2020, ZeRO, section 3.1).
ADAM_STATE_BYTES = 12.0


@dataclass(frozen=True)
class LayoutMemory:
    """Bytes per GPU: model states and activations (with the logits), against the device's memory."""

    states: float
    activations: float
    limit: float

    @property
    def total(self) -> float:
        return self.states + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.limit


@dataclass(frozen=True)
class LayoutCost:
    """Seconds of one step on the busiest GPU and what they are (exposed communication only)."""

    layout: Layout
    step_s: float
    compute_s: float
    memory_bound_s: float
    recompute_s: float
    tp_exposed_s: float
    cp_exposed_s: float
    ep_s: float
    pp_p2p_s: float
    #: what the slowest stage takes over the mean (the output layer on the last stage), every micro-batch
    imbalance_s: float
    bubble_s: float
    dp_exposed_s: float
    optimizer_s: float
    tokens_per_s_per_gpu: float
    memory: LayoutMemory

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def parts(self) -> dict[str, float]:
        return {"compute": self.compute_s, "memory-bound": self.memory_bound_s, "recompute": self.recompute_s,
                "TP": self.tp_exposed_s,
                "CP": self.cp_exposed_s, "EP": self.ep_s, "PP p2p": self.pp_p2p_s,
                "PP imbalance": self.imbalance_s, "bubble": self.bubble_s,
                "DP/FSDP": self.dp_exposed_s, "optimizer": self.optimizer_s}


@dataclass(frozen=True)
class _Pass:
    """One layer's forward for one micro-batch on one GPU: seconds by kind."""

    gemm: float
    core: float
    memory: float
    #: the routed experts' share of ``gemm`` and ``memory`` (what MoE recomputation repeats)
    routed: float
    tp_exposed: float
    cp_exposed: float
    ep: float
    tp_exposed_backward: float
    cp_exposed_backward: float

    @property
    def forward(self) -> float:
        return self.gemm + self.core + self.memory + self.tp_exposed + self.cp_exposed + self.ep

    def recomputed(self, recompute: str) -> float:
        """What recomputation adds to the backward: the whole forward again, or the routed experts' part."""
        if recompute == "full":
            return self.forward
        return self.routed if recompute == "moe" else 0.0

    @property
    def backward(self) -> float:
        return (2 * (self.gemm + self.memory) + FLASH_BACKWARD * self.core + self.tp_exposed_backward
                + self.cp_exposed_backward + self.ep)


def scale_up_domain(cluster: Cluster) -> int:
    """GPUs that share one NVLink domain: the node, or a rack's (GB200/GB300 NVL72: 72)."""
    fabric = cluster.gpu_fabric
    domain = getattr(fabric, "nvlink_domain", None) if fabric is not None else None
    return int(domain) if domain else cluster.devices_per_node


def uniform_split(layers: list[float], head: float, pp: int, vp: int) -> float:
    """The slowest stage when ``layers`` (seconds each, in order) go evenly to PP x VP chunks dealt round-robin
    to the stages and the output layer (``head``) runs on the last; the embedding and the loss take a layer's
    place each where the layers alone do not divide (Megatron-Core's defaults)."""
    chunks = pp * vp
    slots = list(layers)
    if len(slots) % chunks and (len(slots) + 2) % chunks == 0:
        slots = [0.0, *slots, None]  # the embedding's place (nothing to time) and the loss's (the head's)
    size = -(-len(slots) // chunks)
    stages = [0.0] * pp
    for index in range(chunks):
        chunk = slots[index * size:(index + 1) * size]
        stages[index % pp] += sum(head if t is None else t for t in chunk)
    if None not in slots:
        stages[-1] += head
    return max(stages)


def min_max_split(items: list[float], parts: int) -> float:
    """The least possible largest sum when ``items`` are cut, in order, into at most ``parts`` contiguous
    groups (binary search on the answer with a greedy check: exact to a part in 1e12)."""
    low, high = max(items), sum(items)
    for _ in range(60):
        if high - low <= 1e-12 * high:
            break
        middle = (low + high) / 2
        groups, load = 1, 0.0
        for item in items:
            if load + item > middle:
                groups, load = groups + 1, item
            else:
                load += item
        if groups <= parts:
            high = middle
        else:
            low = middle
    return high


def cluster_of(cluster: Cluster, gpus: int) -> Cluster:
    """The cluster with as many nodes as ``gpus`` fill (a described DGX pair stands for a pod of its nodes):
    the whole-node groups NCCL's model prices must exist in it."""
    nodes = -(-gpus // cluster.devices_per_node)
    return cluster if nodes == cluster.nodes else cluster.model_copy(update={"nodes": nodes})


def layout_hardware(cluster: Cluster) -> Hardware:
    """The cluster as the step sees it: an NVLink domain wider than a node (NVL72) is one node of that many
    GPUs with one NIC each (its collectives priced as rings on NVLink)."""
    device = min(cluster.rank_devices, key=lambda dev: dev.peak_flops)
    hw = Hardware.of(cluster, measured_ceiling(device.name))
    domain = scale_up_domain(cluster)
    if domain <= cluster.devices_per_node:
        return hw
    nics_per_gpu = (cluster.nics_per_node or 1) / cluster.devices_per_node
    return dataclasses.replace(hw, devices_per_node=domain, nics_per_node=max(1, round(domain * nics_per_gpu)),
                               _collective_cache={})


class LayoutPricer:
    """Prices layouts of one architecture on one cluster."""

    def __init__(self, arch: Architecture, cluster: Cluster, *, cache: bool = True, split: str = "uniform") -> None:
        if split not in ("uniform", "ideal"):
            raise InputError("split", split, "uniform (Megatron-Core's default) or ideal")
        self.arch, self.cluster, self.split = arch, cluster, split
        #: False: every layout prices its layers from scratch (the search benchmark's baseline)
        self.cache = cache
        self.hw = layout_hardware(cluster)
        self.device = min(cluster.rank_devices, key=lambda dev: dev.peak_flops)
        self.capability = getattr(cluster.gpu_fabric, "compute_capability", None) if cluster.gpu_fabric else None
        self.memory_limit = float(self.device.memory_bytes)
        self._pass_cache: dict[tuple, tuple] = {}
        self._stage_cache: dict[tuple, float] = {}
        self._exchange_cache: dict[tuple, list[tuple[str, str]]] = {}
        listed = lookup(self.device.name)
        #: datasheet peak FLOP/s by precision (the cluster file's bf16 rate where the catalog lacks the device)
        self.rates = {**(listed.peak_flops if listed else {}), "bf16": self.device.peak_flops}

    def check(self, layout: Layout) -> None:
        layout.check_model(self.arch)
        if layout.gpus > self.cluster.world_size:
            raise InputError("gpus", layout.gpus, f"at most the cluster's {self.cluster.world_size} GPUs (price "
                             "on cluster_of(cluster, gpus))")
        self.check_precision(layout.precision)

    def check_precision(self, precision: str) -> None:
        """The device has tensor cores for ``precision`` (NVFP4 needs Blackwell's)."""
        if precision not in GEMM_PRECISIONS:
            raise InputError("precision", precision, "one of " + ", ".join(GEMM_PRECISIONS))
        key = GEMM_PRECISIONS[precision][0]
        if key not in self.rates:
            raise InputError("precision", precision, f"a precision {self.device.name} has tensor cores for "
                             "(its datasheet rates " + ", ".join(sorted(self.rates)) + ")")
        if precision in BLOCK_SCALED and (self.capability or 0) < 100:
            raise InputError("precision", precision, f"bf16 or fp8 on {self.device.name} (block-scaled "
                             "formats need Blackwell, compute capability 10.0)")

    def fastest_exchange(self, layout: Layout) -> Layout:
        """``layout`` with the CP exchange and EP dispatcher whose layers' forward and backward take least among
        those the model allows and that fit in memory (their transient buffers differ; none fitting: the
        fastest). Ties keep Megatron-Core's defaults, p2p and alltoall. Nothing else a layout holds depends on
        them, so a search need not enumerate them."""
        if layout.cp == 1 and (layout.ep == 1 or self.arch.moe is None):
            return layout
        key = self._pass_key(dataclasses.replace(layout, cp_comm="p2p", dispatcher="alltoall"))
        ordered = self._exchange_cache.get(key) if self.cache else None
        if ordered is None:
            choices = []
            for cp_comm in CP_COMM if layout.cp > 1 else ("p2p",):
                for dispatcher in DISPATCHERS if layout.ep > 1 else ("alltoall",):
                    candidate = dataclasses.replace(layout, cp_comm=cp_comm, dispatcher=dispatcher)
                    try:
                        candidate.check_model(self.arch)
                    except InputError:
                        continue
                    layers = sum(n * (x.forward + x.backward) for n, x in self._passes(candidate))
                    choices.append((layers, cp_comm, dispatcher))
            ordered = [c[1:] for c in sorted(choices, key=lambda c: c[0])]  # stable: defaults first on ties
            if self.cache:
                self._exchange_cache[key] = ordered
        if not ordered:
            return layout
        candidates = [dataclasses.replace(layout, cp_comm=c, dispatcher=d) for c, d in ordered]
        if self.exchange_buffer_bytes(candidates[0]) == 0:
            return candidates[0]  # the fastest adds no memory: fitting or not, no other choice fits better
        # the choices differ in memory only by their exchange buffer: one count of the rest serves them all
        spare = self.memory_limit - (self.memory(layout).total - self.exchange_buffer_bytes(layout))
        return next((c for c in candidates if self.exchange_buffer_bytes(c) <= spare), candidates[0])

    # --- pieces ----------------------------------------------------------------------------------

    def _low_precision(self, layout: Layout) -> tuple[Hardware, float]:
        """The hardware as the linear layers see it: the precision's peak and measured ceiling."""
        key, element = GEMM_PRECISIONS[layout.precision]
        if key == "bf16":
            return self.hw, element
        return dataclasses.replace(self.hw, peak_flops=self.rates[key], _collective_cache={},
                                   gemm_ceiling=measured_ceiling(self.device.name, "fp8")), element

    def _per_node(self, group: int, inner: int) -> int:
        """Members of a group on one node (NVLink domain) when ``inner`` ranks sit inside each of its steps."""
        return max(1, min(group, self.hw.devices_per_node // max(1, inner)))

    def _layer_pass(self, layout: Layout, moe: bool) -> _Pass:
        a, L = self.arch, layout
        t, c, b = L.tp, L.cp, L.micro_batch
        tokens = b * L.seq_len // c
        hw = self.hw
        low, element = self._low_precision(layout)
        lin = lambda g: low.gemm_s(g, element)  # noqa: E731 - a linear layer in the layout's precision
        h = a.hidden
        if a.mla is None:
            attention = [Gemm("qkv", tokens, (a.heads + 2 * a.kv_heads) * a.head_dim // t, h),
                         Gemm("proj", tokens, h, a.heads * a.head_dim // t)]
            qk_dim, v_dim = a.head_dim, a.head_dim
        else:
            m = a.mla
            qk_dim, v_dim = m.qk_head_dim + m.rope_head_dim, m.v_head_dim
            q_in = h if m.q_lora_rank is None else m.q_lora_rank
            attention = [Gemm("kv_down", tokens, m.kv_lora_rank + m.rope_head_dim, h),
                         Gemm("kv_up", tokens, a.heads * (m.qk_head_dim + v_dim) // t, m.kv_lora_rank),
                         Gemm("q_up", tokens, a.heads * qk_dim // t, q_in),
                         Gemm("proj", tokens, h, a.heads * v_dim // t)]
            if m.q_lora_rank is not None:
                attention.append(Gemm("q_down", tokens, m.q_lora_rank, h))
        gate = 2 if a.gated else 1
        mlp: list[Gemm] = []
        expert_tokens = 0.0
        if moe and a.moe is not None:
            e = a.moe
            local_experts = e.experts // L.ep
            expert_tokens = self._expert_tokens(layout, tokens)
            per_expert = max(1, round(expert_tokens / local_experts))
            mlp += [Gemm("expert_fc1", per_expert, gate * e.ffn_hidden, h, local_experts),
                    Gemm("expert_fc2", per_expert, h, e.ffn_hidden, local_experts)]
            if e.shared_ffn_hidden:
                mlp += [Gemm("shared_fc1", tokens, gate * e.shared_ffn_hidden // t, h),
                        Gemm("shared_fc2", tokens, h, e.shared_ffn_hidden // t)]
            router = hw.gemm_s(Gemm("router", tokens // t, e.experts, h), BF16)
        else:
            mlp += [Gemm("fc1", tokens, gate * a.ffn_hidden // t, h), Gemm("fc2", tokens, h, a.ffn_hidden // t)]
            router = 0.0
        gemm_times = [lin(g) for g in attention + mlp]
        gemm = sum(gemm_times) + router
        # attention core over the causal half (or the window), heads split over TP, queries over CP
        fraction = sum(a.core_fraction(L.seq_len, i) for i in range(a.layers)) / a.layers
        heads = b * max(1, a.heads // t)
        core = (hw.gemm_s(Gemm("scores", L.seq_len // c, max(1, round(L.seq_len * fraction)), qk_dim, heads), BF16)
                + hw.gemm_s(Gemm("context", L.seq_len // c, v_dim, max(1, round(L.seq_len * fraction)), heads), BF16))
        stored = self.stored_bytes(tokens, t, moe, expert_tokens, element)
        routed_bytes = stored["routed"]
        memory = hw.memory_bound_s(sum(stored.values()) + self._cast_bytes(layout, tokens, t, expert_tokens, moe))
        # TP (sequence parallel): all-gather before, reduce-scatter after attention and MLP, each hidden behind
        # the GEMM it feeds or follows (userbuffers overlap)
        tp_fwd = tp_bwd = 0.0
        if t > 1:
            comm = hw.gather_or_scatter_s(tokens * h * BF16, t, self._per_node(t, 1))
            first_attn, last_attn = gemm_times[0], gemm_times[len(attention) - 1]
            first_mlp, last_mlp = gemm_times[len(attention)], gemm_times[-1]
            pairs = (first_attn, last_attn, first_mlp, last_mlp)
            tp_fwd = sum(max(0.0, comm - g) for g in pairs)
            tp_bwd = sum(max(0.0, comm - 2 * g) for g in pairs)
        cp_fwd, cp_bwd = self._cp_exposed(layout, tokens, a.kv_width, a.heads * qk_dim, a.heads * v_dim, core)
        ep = self._dispatch_s(layout, tokens, expert_tokens) if moe and a.moe is not None else 0.0
        routed = (sum(gemm_times[len(attention):len(attention) + 2]) if moe and a.moe is not None else 0.0) + \
            hw.memory_bound_s(routed_bytes)
        return _Pass(gemm, core, memory, routed, tp_fwd, cp_fwd, ep, tp_bwd, cp_bwd)

    def stored_bytes(self, tokens: int, t: int, moe: bool, expert_tokens: float,
                     element: float = BF16) -> dict[str, float]:
        """Activation bytes one layer keeps for its backward, per micro-batch on one GPU, by part (``input``: the
        layer's input, what full recomputation keeps; ``routed``: the routed experts', what MoE recomputation
        drops; ``rest``). Korthikanti et al.'s count for a current layer without dropout: FlashAttention keeps
        Q, K, V and its output (no s x s matrix), sequence parallelism keeps the norms' outputs split over TP,
        and a linear layer's input is kept as its GEMM reads it (``element`` bytes: Transformer Engine saves
        the FP8/FP4 copy it quantized, not the BF16 tensor)."""
        a = self.arch
        h = a.hidden
        attn_width = a.heads * (a.head_dim if a.mla is None else a.mla.v_head_dim)
        qkv = (a.heads + 2 * a.kv_heads) * a.head_dim if a.mla is None else a.heads * (
            2 * (a.mla.qk_head_dim + a.mla.rope_head_dim) + a.mla.v_head_dim)
        copy = 0.0 if element == BF16 else element  # a low-precision copy of the attention output for the proj
        layer_input = tokens * h / t * BF16
        attention = tokens / t * (h * element + qkv * BF16 + attn_width * (BF16 + copy))
        gate = 2 if a.gated else 1
        routed = 0.0
        norm2 = tokens / t * h * (BF16 + element)  # the residual and the MLP's (or router's) input
        if moe and a.moe is not None:
            e = a.moe
            routed = expert_tokens * (h * element + gate * e.ffn_hidden * BF16 + e.ffn_hidden * element + h * BF16)
            shared = tokens / t * e.shared_ffn_hidden * (gate * BF16 + element)
            mlp = norm2 + shared + tokens / t * e.experts * 4.0  # fp32 router logits
        else:
            mlp = norm2 + tokens / t * a.ffn_hidden * (gate * BF16 + element)
        return {"input": layer_input, "routed": routed, "rest": attention + mlp}

    def _cast_bytes(self, layout: Layout, tokens: int, t: int, expert_tokens: float, moe: bool) -> float:
        """Forward traffic of casting GEMM inputs to the layout's precision, counted as stored-byte equivalents
        (the memory-bound convention doubles them): read BF16 and write the low-precision copy, once more read
        for current scaling's amax."""
        if layout.precision == "bf16":
            return 0.0
        a = self.arch
        _, element = GEMM_PRECISIONS[layout.precision]
        per_element = (BF16 + element + (BF16 if layout.precision == "fp8-cs" else 0.0)) / 2
        attn_in = a.hidden + a.heads * (a.head_dim if a.mla is None else a.mla.v_head_dim)
        if moe and a.moe is not None:
            shared = tokens * (a.hidden + a.moe.shared_ffn_hidden) / t if a.moe.shared_ffn_hidden else 0.0
            mlp_in = expert_tokens * (a.hidden + a.moe.ffn_hidden) + shared
        else:
            mlp_in = tokens * (a.hidden + a.ffn_hidden / t)
        return (tokens * attn_in / t + mlp_in) * per_element

    def _cp_exposed(self, layout: Layout, tokens: int, kv_per_token: int, q_width: int, out_width: int,
                    core: float) -> tuple[float, float]:
        """(forward, backward) seconds of one layer's context-parallel exchange not hidden by the attention core.

        ``p2p``: CP - 1 ring steps of this rank's K/V chunk, each behind a step of the core; backward passes
        K/V and their gradients. ``all_gather``: K/V all-gathered before the core and their gradients
        reduce-scattered after, not overlapped (the core needs the whole K/V). ``a2a``: Q, K, V all-to-all
        before the core and its output after, forward and backward, not overlapped."""
        L, hw = layout, self.hw
        t, c = L.tp, L.cp
        if c == 1:
            return 0.0, 0.0
        kv = tokens * kv_per_token * BF16 / t
        if L.cp_comm == "p2p":
            send = hw.send_s(kv, t * c > hw.devices_per_node)
            return max(0.0, (c - 1) * send - core), max(0.0, 2 * (c - 1) * send - FLASH_BACKWARD * core)
        if L.cp_comm == "all_gather":
            gather = hw.gather_or_scatter_s(kv * c, c, self._per_node(c, t))
            return gather, 2 * gather  # backward: K/V gathered again and their gradients reduce-scattered
        exchange = (self._alltoall_s(tokens * (q_width * BF16 + kv_per_token * BF16) / t, c, inner=t)
                    + self._alltoall_s(tokens * out_width * BF16 / t, c, inner=t))
        return exchange, exchange

    def _dispatch_s(self, layout: Layout, tokens: int, expert_tokens: float) -> float:
        """One pass's token dispatch and combine across the EP group (the same again backward).

        ``alltoall``: each GPU's routed token copies out to their experts and back (all-to-all, BF16).
        ``allgather``: every GPU's tokens (sequence-parallel share) all-gathered over the EP group and the
        experts' outputs reduce-scattered back; each GPU then computes only its own experts' tokens, after
        reading the gathered tokens to pick them out and before writing the combined output back (memory-bound).
        A ring all-gather brings each token into a node once, so across nodes it can move less than all-to-all,
        which sends every routed copy through its GPU's own NIC."""
        L, h = layout, self.arch.hidden
        if L.ep == 1:
            return 0.0
        # expert tensor parallelism 1: an EP group is EP consecutive ranks (Megatron's expert rank order)
        if L.dispatcher == "alltoall":
            return 2 * self._alltoall_s(expert_tokens * h * BF16, L.ep, inner=1)
        gathered = self._gathered_tokens_bytes(layout, tokens)
        permute = 2 * gathered / self.hw.memory_bandwidth_Bps if self.hw.memory_bandwidth_Bps else 0.0
        return 2 * self.hw.gather_or_scatter_s(gathered, L.ep, self._per_node(L.ep, 1)) + permute

    def _expert_tokens(self, layout: Layout, tokens: int) -> float:
        """Token-expert pairs one GPU computes per routed layer: its sequence-parallel share of ``tokens`` times
        top-k (balanced routing), padded or dropped to the capacity factor."""
        return tokens / layout.tp * self.arch.moe.top_k * (layout.capacity_factor or 1.0)

    def _gathered_tokens_bytes(self, layout: Layout, tokens: int) -> float:
        """The all-gather dispatcher's buffer: every token of the EP group (each GPU's sequence-parallel share)."""
        return tokens / layout.tp * self.arch.hidden * BF16 * layout.ep

    def exchange_buffer_bytes(self, layout: Layout) -> float:
        """Transient bytes one layer's exchange holds beyond the stored activations: the all-gather dispatcher's
        gathered tokens, all_gather CP's whole-sequence K/V (ring and all-to-all hold a chunk's worth)."""
        a, L = self.arch, layout
        tokens = L.micro_batch * L.seq_len // L.cp
        buffer = 0.0
        if a.moe is not None and L.ep > 1 and L.dispatcher == "allgather":
            buffer += self._gathered_tokens_bytes(layout, tokens)
        if L.cp > 1 and L.cp_comm == "all_gather":
            buffer += tokens * L.cp * a.kv_width * BF16 / L.tp
        return buffer

    def _alltoall_s(self, nbytes: float, group: int, inner: int) -> float:
        """All-to-all of each GPU's ``nbytes`` as NCCL runs it where its model describes the group (inside an
        NVLink domain or over whole nodes); else pairwise: (g - 1)/g of it leaves the GPU, the share bound for
        other nodes through the GPU's NIC share, the rest over NVLink, at once."""
        hw = self.hw
        per_node = self._per_node(group, inner)
        nccl = hw.nccl_s("alltoall", nbytes, group, per_node)
        if nccl is not None:
            return nccl
        inside = nbytes * (per_node - 1) / group / hw.intra_Bps
        outside = nbytes * (group - per_node) / group / hw.inter_Bps_per_gpu if group > per_node else 0.0
        alpha = hw.inter_alpha if group > per_node else hw.intra_alpha
        return (group - 1) * alpha + max(inside, outside)

    def _head_s(self, layout: Layout) -> float:
        """The output layer (BF16, vocabulary over TP) and its fp32 cross entropy, forward and backward."""
        a, hw = self.arch, self.hw
        tokens = layout.micro_batch * layout.seq_len // layout.cp
        logits = hw.gemm_s(Gemm("logits", tokens, a.padded_vocab(layout.tp) // layout.tp, a.hidden), BF16)
        entropy = hw.memory_bound_s(4.0 * tokens * a.vocab / layout.tp)
        return 3 * (logits + entropy) * (1 + a.mtp_layers)

    # --- the step --------------------------------------------------------------------------------

    def price(self, layout: Layout) -> LayoutCost:
        self.check(layout)
        a, L, hw = self.arch, layout, self.hw
        counts = self._passes(layout)
        head = self._head_s(layout)
        per_layer = [n * (x.forward + x.backward + x.recomputed(L.recompute)) for n, x in counts]
        stage = self._busiest_stage_s(layout, counts, head)
        mean_stage = (sum(per_layer) + head) / L.pp
        boundary = L.micro_batch * L.seq_len // L.cp * a.hidden * BF16 / L.tp
        p2p = 2 * L.vp * hw.send_s(boundary, L.tp * L.cp * L.dp >= hw.devices_per_node) if L.pp > 1 else 0.0
        slot = stage + p2p
        m = L.micro_batches
        bubble = (L.pp - 1) / L.vp * slot
        dense_params, expert_params = self._stage_parameters(layout)
        dp_exposed = self._fsdp_exposed(layout, counts) * m if L.fsdp else self._dp_exposed(
            layout, dense_params, expert_params, counts)
        dense_group, expert_group = self._optimizer_groups(layout)
        optimizer = hw.optimizer_s(dense_params / dense_group + expert_params / expert_group)
        step = m * slot + bubble + dp_exposed + optimizer

        def total(attr: str) -> float:
            return m * sum(n * getattr(x, attr) for n, x in counts) / L.pp

        compute = m * (sum(n * 3 * x.gemm + n * (1 + FLASH_BACKWARD) * x.core for n, x in counts) + head) / L.pp
        return LayoutCost(
            layout=layout, step_s=step, compute_s=compute, memory_bound_s=3 * total("memory"),
            recompute_s=m * sum(n * x.recomputed(L.recompute) for n, x in counts) / L.pp,
            tp_exposed_s=total("tp_exposed") + total("tp_exposed_backward"),
            cp_exposed_s=total("cp_exposed") + total("cp_exposed_backward"), ep_s=2 * total("ep"),
            pp_p2p_s=m * p2p, imbalance_s=m * (stage - mean_stage), bubble_s=bubble, dp_exposed_s=dp_exposed,
            optimizer_s=optimizer, tokens_per_s_per_gpu=L.global_batch * L.seq_len / step / L.gpus,
            memory=self.memory(layout))

    def _passes(self, layout: Layout) -> tuple[tuple[int, _Pass], tuple[int, _Pass]]:
        """(layers, pass) for the dense and the routed layers (MTP layers with their kind); a layer's pass depends
        on few of the layout's fields, so plans of one search share it."""
        a = self.arch
        key = self._pass_key(layout)
        hit = self._pass_cache.get(key) if self.cache else None
        if hit is None:
            dense = self._layer_pass(layout, moe=False)
            routed = self._layer_pass(layout, moe=True) if a.moe is not None else dense
            hit = self._pass_cache[key] = (
                (a.dense_layers + (a.mtp_layers if a.moe is None else 0), dense),
                (a.moe_layers + (a.mtp_layers if a.moe is not None else 0), routed))
        return hit

    @staticmethod
    def _pass_key(layout: Layout) -> tuple:
        return (layout.tp, layout.cp, layout.micro_batch, layout.seq_len, layout.ep, layout.precision,
                layout.cp_comm, layout.dispatcher, layout.capacity_factor)

    def _optimizer_groups(self, layout: Layout) -> tuple[int, int]:
        """GPUs sharing one copy of the dense and of the expert weights' optimizer state."""
        L = layout
        dense = L.gpus // (L.tp * L.pp) if L.fsdp else L.dp * L.cp
        return dense, max(1, L.gpus // (L.pp * L.ep))

    def memory(self, layout: Layout) -> LayoutMemory:
        """Bytes per GPU on the fuller of the first stage (most micro-batches in flight) and the last (the
        logits): BF16 weights and gradients, FP32 master weights and Adam moments sharded over the optimizer's
        group (distributed optimizer), or all of it sharded under FSDP; a low-precision copy of the weights
        for FP8/FP4; activations as :meth:`stored_bytes` counts them."""
        a, L = self.arch, layout
        dense, experts = self._stage_parameters(layout)
        dense_group, expert_group = self._optimizer_groups(layout)
        _, element = GEMM_PRECISIONS[L.precision]
        low_copy = 0.0 if L.precision == "bf16" else element
        if L.fsdp:
            layer = a.layer_weights(routed=True) / L.tp
            states = (dense + experts) * (BF16 + BF16 + ADAM_STATE_BYTES + low_copy) / dense_group \
                + 2 * layer * BF16  # the layer computed and the one prefetched, gathered
        else:
            states = (dense + experts) * (BF16 + BF16 + low_copy) + ADAM_STATE_BYTES * (
                dense / dense_group + experts / expert_group)
        tokens = L.micro_batch * L.seq_len // L.cp
        per_layer = 0.0
        working = 0.0
        for n, moe in ((a.dense_layers, False), (a.moe_layers, True)):
            if n == 0:
                continue
            expert_tokens = self._expert_tokens(layout, tokens) if moe and a.moe else 0.0
            parts = self.stored_bytes(tokens, L.tp, moe, expert_tokens, element)
            kept = parts["input"] if L.recompute == "full" else sum(parts.values()) - (
                parts["routed"] if L.recompute == "moe" else 0.0)
            per_layer += n * kept
            working = max(working, sum(parts.values()))
        stack = a.layers + a.mtp_layers
        per_layer /= max(1, a.layers)
        layers_per_stage = stack / L.pp
        held = in_flight(L.pp, L.micro_batches, L.vp)
        recompute_buffer = (working if L.recompute != "none" else 0.0) + self.exchange_buffer_bytes(layout)
        logits = 4.0 * tokens * a.padded_vocab(L.tp) / L.tp
        first = per_layer * layers_per_stage * held + recompute_buffer + (logits if L.pp == 1 else 0.0)
        last = per_layer * layers_per_stage + recompute_buffer + logits
        return LayoutMemory(states=states, activations=max(first, last), limit=self.memory_limit)

    def _busiest_stage_s(self, layout: Layout, counts, head: float) -> float:  # noqa: ANN001 - the passes
        """One micro-batch's forward + backward through the slowest pipeline stage.

        ``split="uniform"`` (the default) splits as Megatron-Core does unless told otherwise: the layers
        evenly over PP x VP chunks, the output layer on the last stage; where the layers do not divide, the
        embedding and the loss each take a layer's place (``account_for_embedding_in_pipeline_split``,
        ``account_for_loss_in_pipeline_split``). ``split="ideal"``: whole layers (dense, routed, MTP) and the
        output layer cut as evenly as they allow, what ``pipeline_model_parallel_layout`` lets a recipe set."""
        L = layout
        items = [x.forward + x.backward + x.recomputed(L.recompute) for n, x in counts for _ in range(n)]
        if L.pp == 1:
            return sum(items) + head
        key = (self._pass_key(layout), L.pp, L.vp, L.recompute)
        hit = self._stage_cache.get(key) if self.cache else None
        if hit is None:
            if self.split == "ideal":
                hit = min_max_split([*items, head], L.pp)
            else:
                hit = uniform_split(items, head, L.pp, L.vp)
            self._stage_cache[key] = hit
        return hit

    def _stage_parameters(self, layout: Layout) -> tuple[float, float]:
        """(dense weights on one GPU, expert weights on one GPU) of the busiest stage: dense split over TP,
        experts over EP; the embedding and output layer spread over stages with the layers."""
        a = self.arch
        stack = a.layers + a.mtp_layers
        attention = stack * a.attention_parameters()
        dense_mlp = (a.dense_layers + (a.mtp_layers if a.moe is None else 0)) * a.mlp_parameters(a.ffn_hidden)
        routed_layers = a.moe_layers + (a.mtp_layers if a.moe is not None else 0)
        shared = routed_layers * a.mlp_parameters(a.moe.shared_ffn_hidden) if a.moe else 0.0
        embeddings = a.vocab * a.hidden * (1 if a.tied_embeddings else 2)
        dense = (attention + dense_mlp + shared + embeddings) / layout.pp / layout.tp
        experts = routed_layers * a.moe.experts * a.mlp_parameters(a.moe.ffn_hidden) / layout.pp / layout.ep \
            if a.moe else 0.0
        return dense, experts

    def _dp_exposed(self, layout: Layout, dense: float, experts: float, counts) -> float:
        """Distributed optimizer: reduce-scatter of BF16 gradients after, and all-gather of BF16 weights before,
        each hidden behind the last micro-batch's backward and the first's forward on this stage."""
        L, hw = layout, self.hw
        dense_group, expert_group = self._optimizer_groups(layout)
        gather = (hw.gather_or_scatter_s(dense * BF16, dense_group, self._per_node(dense_group, L.tp))
                  + hw.gather_or_scatter_s(experts * BF16, expert_group, self._per_node(expert_group, L.ep)))
        forward = sum(n * x.forward for n, x in counts) / L.pp
        backward = sum(n * x.backward for n, x in counts) / L.pp
        return max(0.0, gather - backward) + max(0.0, gather - forward)

    def _fsdp_exposed(self, layout: Layout, counts) -> float:
        """One micro-batch's exposed FSDP traffic: per layer, its weights gathered before forward and backward,
        its gradients reduce-scattered after backward, each layer's behind its own compute."""
        a, L, hw = self.arch, layout, self.hw
        group = L.gpus // (L.tp * L.pp)
        per_node = self._per_node(group, L.tp)
        exposed = 0.0
        for (n, x), moe in zip(counts, (False, True), strict=True):
            comm = hw.gather_or_scatter_s(a.layer_weights(routed=moe) / L.tp * BF16, group, per_node)
            exposed += n * (max(0.0, comm - x.forward) + max(0.0, 2 * comm - x.backward))
        return exposed
