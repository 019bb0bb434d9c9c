"""A training run's parallel layout as published tables state it, and the precisions GEMMs run in.

Why its own type: a published row fixes every dimension (GBS, MBS, sequence, TP, PP, CP, VP, EP, FSDP) and the
model must price *that* layout, not the planner's choice; every inconsistent field is a one-line error naming
it. Megatron's conventions (the tables' own definitions): DP = GPUs / (TP x PP x CP); EP is carved out of
TP x DP x CP (expert tensor parallelism 1); micro-batches per step GA = GBS / (MBS x DP).
"""

from __future__ import annotations

from dataclasses import dataclass

from flexcomm.costmodel.errors import InputError
from flexcomm.planner.llm.architecture import Architecture

#: Training precisions of the GEMMs -> (the catalog's peak key, bytes per element of a GEMM operand).
#: ``fp8-cs``: FP8 with per-tensor current scaling; ``fp8-ds``: delayed scaling; ``mxfp8``: 32-element blocks
#: with E8M0 scales (Blackwell and later); ``nvfp4``: 16-element blocks with FP8 scales (Blackwell and later).
GEMM_PRECISIONS: dict[str, tuple[str, float]] = {
    "bf16": ("bf16", 2.0), "fp8-cs": ("fp8", 1.0), "fp8-ds": ("fp8", 1.0), "mxfp8": ("fp8", 1.0),
    "nvfp4": ("fp4", 0.5),
}
#: Block-scaled formats need Blackwell's tensor cores (compute capability 10.0; NVIDIA Blackwell brief).
BLOCK_SCALED = ("mxfp8", "nvfp4")
#: Activation recomputation choices (see :class:`Layout`).
RECOMPUTE = ("none", "full", "moe")
#: How context-parallel ranks exchange attention (Megatron-Core's ``--cp-comm-type``): ``p2p`` ring attention,
#: K/V passed round the ring behind the attention core; ``all_gather`` K/V gathered before the core, their
#: gradients reduce-scattered after; ``a2a`` (DeepSpeed-Ulysses) Q/K/V and the output exchanged all-to-all so each
#: rank attends whole sequences for heads / CP of the heads.
CP_COMM = ("p2p", "all_gather", "a2a")
#: How routed tokens reach their experts (Megatron-Core's ``--moe-token-dispatcher-type``): ``alltoall`` sends
#: each token to its experts' ranks; ``allgather`` gathers every token of the EP group on every rank and
#: reduce-scatters the experts' outputs back.
DISPATCHERS = ("alltoall", "allgather")
#: How the tables spell precisions.
PRECISION_NAMES = {"bf16": "bf16", "fp8": "fp8-cs", "fp8-cs": "fp8-cs", "fp8-ds": "fp8-ds", "fp8-mx": "mxfp8",
                   "mxfp8": "mxfp8", "nvfp4": "nvfp4"}


def gemm_precision(name: str) -> str:
    """A precision as written (``FP8-CS``, ``FP8-MX``, ``MXFP8``, ``NVFP4``, ``BF16``) in this module's names."""
    key = name.strip().lower()
    if key not in PRECISION_NAMES:
        raise InputError("precision", name, "one of BF16, FP8 (FP8-CS), FP8-DS, MXFP8 (FP8-MX), NVFP4")
    return PRECISION_NAMES[key]


def check_capacity_factor(factor: float | None, arch: Architecture | None = None, field: str = "capacity_factor",
                          where: str = "") -> None:
    """None (dropless) or a positive multiple of an expert's balanced share (64 is far past any in use), and only
    for a model with experts where ``arch`` is given. ``field`` as the caller's user names it (a flag, a column);
    ``where``: the row it came from."""
    if factor is None:
        return
    shown = f"{where}: {factor}" if where else factor
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 64:
        raise InputError(field, shown, "a number in (0, 64], or none for dropless routing")
    if arch is not None and arch.moe is None:
        raise InputError(field, shown, f"none: {arch.name} has no experts")


@dataclass(frozen=True)
class Layout:
    """Every dimension of one run: GPUs, global and micro batch (sequences), sequence length, TP (with
    sequence parallelism), PP with VP virtual stages, CP, EP, FSDP (sharding over GPUs / (TP x PP)) and the
    GEMM precision."""

    gpus: int
    global_batch: int
    micro_batch: int
    seq_len: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    vp: int = 1
    ep: int = 1
    fsdp: bool = False
    precision: str = "bf16"
    #: activation recomputation: none, full (every layer's forward again; only its input kept) or moe (the
    #: routed experts' forward again, Megatron-Core's ``recompute_modules=["moe"]``)
    recompute: str = "none"
    cp_comm: str = "p2p"
    dispatcher: str = "alltoall"
    #: None: dropless (every routed token computed); else each expert computes exactly ``capacity_factor`` x its
    #: balanced share of tokens (fewer dropped, more padded: Megatron-Core's capacity factor with
    #: ``moe_pad_expert_input_to_capacity``)
    capacity_factor: float | None = None

    def __post_init__(self) -> None:
        for name in ("gpus", "global_batch", "micro_batch", "seq_len", "tp", "pp", "cp", "vp", "ep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name, value, "an integer >= 1")
        if self.recompute not in RECOMPUTE:
            raise InputError("recompute", self.recompute, "one of " + ", ".join(RECOMPUTE))
        if self.precision not in GEMM_PRECISIONS:
            raise InputError("precision", self.precision, "one of " + ", ".join(GEMM_PRECISIONS))
        if self.cp_comm not in CP_COMM:
            raise InputError("cp_comm", self.cp_comm, "one of " + ", ".join(CP_COMM))
        if self.dispatcher not in DISPATCHERS:
            raise InputError("dispatcher", self.dispatcher, "one of " + ", ".join(DISPATCHERS))
        check_capacity_factor(self.capacity_factor)
        model_parallel = self.tp * self.pp * self.cp
        if self.gpus % model_parallel:
            raise InputError("layout", f"TP {self.tp} x PP {self.pp} x CP {self.cp} on {self.gpus} GPUs",
                             f"TP x PP x CP dividing the GPU count ({model_parallel} does not divide {self.gpus})")
        if self.global_batch % (self.micro_batch * self.dp):
            raise InputError("global_batch", self.global_batch,
                             f"a multiple of MBS x DP = {self.micro_batch} x {self.dp}")
        if self.cp > 1 and self.seq_len % (2 * self.cp):
            raise InputError("cp", self.cp, f"a split of the {self.seq_len}-token sequence into 2 x CP equal chunks "
                             "(causal load balancing gives each CP rank one early and one late chunk)")
        if (self.tp * self.dp * self.cp) % self.ep:
            raise InputError("ep", self.ep, f"a divisor of TP x DP x CP = {self.tp * self.dp * self.cp} (experts "
                             "run without tensor parallelism; EP is carved out of the GPUs of a pipeline stage)")
        if self.vp > 1 and self.pp == 1:
            raise InputError("vp", self.vp, "1 without pipeline parallelism")

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def micro_batches(self) -> int:
        """GA: micro-batches each pipeline runs per step."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def label(self) -> str:
        parts = [f"t{self.tp}", f"p{self.pp}", f"c{self.cp}", f"e{self.ep}", f"d{self.dp}", f"b{self.micro_batch}"]
        if self.vp > 1:
            parts.append(f"v{self.vp}")
        if self.cp > 1 and self.cp_comm != "p2p":
            parts.append(f"cp_{self.cp_comm}")
        if self.dispatcher != "alltoall":
            parts.append(f"ep_{self.dispatcher}")
        if self.capacity_factor is not None:
            parts.append(f"cf{self.capacity_factor:g}")
        if self.fsdp:
            parts.append("fsdp")
        if self.recompute != "none":
            parts.append(f"rc_{self.recompute}")
        return "-".join(parts)

    def check_model(self, arch: Architecture) -> None:
        """What the model must allow: heads over TP, layers over PP, experts over EP."""
        if arch.heads % self.tp or arch.kv_heads % self.tp and self.tp % arch.kv_heads:
            raise InputError("tp", self.tp, f"a divisor of {arch.name}'s {arch.heads} attention heads")
        if arch.moe is None and self.ep > 1:
            raise InputError("ep", self.ep, f"1: {arch.name} has no experts")
        q_heads, kv_heads = arch.heads // self.tp, max(1, arch.kv_heads // self.tp)
        if self.cp_comm == "a2a" and (q_heads % self.cp or kv_heads % self.cp):
            raise InputError("cp_comm", self.cp_comm, f"p2p or all_gather: a2a gives each CP rank heads / CP of the "
                             f"{q_heads} query and {kv_heads} KV heads {arch.name} has per TP rank, and CP {self.cp} "
                             "does not divide both")
        if self.cp > 1 and self.cp_comm == "p2p" and arch.window is not None:
            raise InputError("cp_comm", self.cp_comm, f"a2a or all_gather: {arch.name}'s sliding-window layers "
                             "cannot run ring attention (Transformer Engine refuses p2p CP with a window)")
        if arch.moe is None and self.dispatcher != "alltoall":
            raise InputError("dispatcher", self.dispatcher, f"alltoall (the default): {arch.name} has no experts")
        check_capacity_factor(self.capacity_factor, arch)
        if arch.moe is not None and arch.moe.experts % self.ep:
            raise InputError("ep", self.ep, f"a divisor of {arch.name}'s {arch.moe.experts} experts")
        if self.pp * self.vp > arch.layers + arch.mtp_layers + 2:
            raise InputError("pp", self.pp, f"PP x VP at most {arch.name}'s layers")
        if self.recompute == "moe" and arch.moe is None:
            raise InputError("recompute", self.recompute, f"none or full: {arch.name} has no experts")
        if self.fsdp and self.pp > 1:
            raise InputError("fsdp", self.fsdp, "FSDP with PP 1 (the tables' FSDP shards over GPUs / (TP x PP) "
                             "with no pipeline)")
