"""Decoder-only transformers as they ship: grouped-query or multi-latent attention, gated MLPs, mixtures of
experts, untied embeddings, multi-token prediction.

Why a second model class beside :class:`planner.llm.gpt.Transformer`: that one is the 2020 GPT of
Narayanan et al.'s formulas (multi-head attention, 4h GELU MLP, tied embeddings) and every 2021-2023
reproduction is checked against it unchanged. Current models differ in every term of the FLOP count.

Two FLOP counts are kept apart on purpose:

* :meth:`Architecture.counted_flops_per_token` is the count a training stack *reports* "model TFLOP/s" with:
  Megatron-Bridge's ``transformer_flops`` (``src/megatron/bridge/training/utils/flop_utils.py`` at
  a5b3b5a4c98aae00af2bf97bd22f5c9a9312f3d0): 3 x (forward GEMMs), the attention core over half the s x s
  matrix (causal), a gated MLP counted 3/2 only when its activation is SiLU, multi-token-prediction layers and
  the logit layer. NeMo 2024 (``nemo/utils/flops_formulas.py``, 24.07) counted the whole s x s matrix.
* :meth:`Architecture.gemm_flops_per_token` is what the GPU executes: every GLU has three matrices whatever
  its activation (GPT-OSS's clamped SwiGLU included), which is what the step model prices.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from flexcomm.costmodel.errors import InputError

#: FLOP-count conventions of the published tables (see the module docstring).
CONVENTIONS = ("megatron-bridge", "nemo-2024")
#: MLP activations: gated (three matrices) or not (two).
ACTIVATIONS = {"swiglu": True, "swiglu-clamped": True, "gelu": False, "relu2": False}


@dataclass(frozen=True)
class MoE:
    """Routed experts: ``experts`` of width ``ffn_hidden``, ``top_k`` per token, ``shared_ffn_hidden`` always
    on (DeepSeek's shared experts, summed), the first ``dense_layers`` layers a dense MLP instead."""

    experts: int
    top_k: int
    ffn_hidden: int
    shared_ffn_hidden: int = 0
    dense_layers: int = 0

    def __post_init__(self) -> None:
        _positive(self, ("experts", "top_k", "ffn_hidden"), "moe.")
        _non_negative(self, ("shared_ffn_hidden", "dense_layers"), "moe.")
        if self.top_k > self.experts:
            raise InputError("moe.top_k", self.top_k, f"at most the {self.experts} experts")


@dataclass(frozen=True)
class LatentAttention:
    """DeepSeek's multi-latent attention: queries and keys/values through low-rank latents, a decoupled RoPE
    part of ``rope_head_dim`` per head (DeepSeek-V2 paper, section 2.1)."""

    kv_lora_rank: int
    qk_head_dim: int
    rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    def __post_init__(self) -> None:
        _positive(self, ("kv_lora_rank", "qk_head_dim", "rope_head_dim", "v_head_dim"), "mla.")
        if self.q_lora_rank is not None:
            _positive(self, ("q_lora_rank",), "mla.")


@dataclass(frozen=True)
class Architecture:
    """One decoder-only transformer, sized as its published configuration states it."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    vocab: int
    activation: str = "swiglu"
    tied_embeddings: bool = False
    moe: MoE | None = None
    mla: LatentAttention | None = None
    #: multi-token-prediction layers (DeepSeek-V3's MTP module; trained, dropped at inference)
    mtp_layers: int = 0
    #: sliding-window width of the windowed layers (GPT-OSS alternates full and 128-token windows); None: all full
    window: int | None = None
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        _positive(self, ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab"), "")
        _non_negative(self, ("mtp_layers",), "")
        if self.activation not in ACTIVATIONS:
            raise InputError("activation", self.activation, "one of " + ", ".join(ACTIVATIONS))
        if self.heads % self.kv_heads:
            raise InputError("kv_heads", self.kv_heads, f"a divisor of the {self.heads} attention heads")
        if self.moe is not None and self.moe.dense_layers > self.layers:
            raise InputError("moe.dense_layers", self.moe.dense_layers, f"at most the {self.layers} layers")

    # --- shape -----------------------------------------------------------------------------------

    @property
    def gated(self) -> bool:
        return ACTIVATIONS[self.activation]

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is routed (MTP layers not counted)."""
        return 0 if self.moe is None else self.layers - self.moe.dense_layers

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    def padded_vocab(self, tp: int = 1, multiple: int = 128) -> int:
        """Megatron pads the vocabulary to a multiple of ``multiple x tp`` (``make_vocab_size_divisible_by``)."""
        step = multiple * tp
        return -(-self.vocab // step) * step

    # --- parameters ------------------------------------------------------------------------------

    @property
    def kv_width(self) -> int:
        """Elements of K and V one token carries into attention (what CP exchanges): 2 x KV heads x head size,
        or for latent attention every head's up-projected K (with its RoPE part) and V."""
        if self.mla is None:
            return 2 * self.kv_heads * self.head_dim
        return self.heads * (self.mla.qk_head_dim + self.mla.rope_head_dim + self.mla.v_head_dim)

    def attention_parameters(self) -> float:
        h, a = self.hidden, self.heads
        if self.mla is not None:
            m = self.mla
            q_dim = a * (m.qk_head_dim + m.rope_head_dim)
            q = h * q_dim if m.q_lora_rank is None else m.q_lora_rank * (h + q_dim)
            kv = h * (m.kv_lora_rank + m.rope_head_dim) + m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim)
            return float(q + kv + a * m.v_head_dim * h)
        return float(h * self.head_dim * (a + 2 * self.kv_heads) + a * self.head_dim * h)

    def mlp_parameters(self, ffn: int) -> float:
        return float((3 if self.gated else 2) * self.hidden * ffn)

    def layer_weights(self, routed: bool) -> float:
        """One layer's attention and MLP weights, the routed experts' (all of them, shared ones left out) where
        ``routed`` and the model has experts: what FSDP gathers for it."""
        if routed and self.moe is not None:
            return self.attention_parameters() + self.moe.experts * self.mlp_parameters(self.moe.ffn_hidden)
        return self.attention_parameters() + self.mlp_parameters(self.ffn_hidden)

    @property
    def parameters(self) -> float:
        """All weights (norms and biases left out: under 0.1 % of any preset), MTP layers excluded."""
        total = self.layers * self.attention_parameters() + self.dense_layers * self.mlp_parameters(self.ffn_hidden)
        if self.moe is not None:
            per_layer = self.moe.experts * self.mlp_parameters(self.moe.ffn_hidden) + self.mlp_parameters(
                self.moe.shared_ffn_hidden) + self.hidden * self.moe.experts  # router
            total += self.moe_layers * per_layer
        return total + self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def active_parameters(self) -> float:
        """Weights one token goes through (top-k experts, not all)."""
        if self.moe is None:
            return self.parameters
        idle = self.moe.experts - self.moe.top_k
        return self.parameters - self.moe_layers * idle * self.mlp_parameters(self.moe.ffn_hidden)

    # --- FLOPs -----------------------------------------------------------------------------------

    def _mlp_width(self, gated_multiplier: float) -> float:
        """Sum over layers (MTP's included) of the MLP's effective width x its gate factor, per layer stack."""
        dense = self.dense_layers + (self.mtp_layers if self.moe is None else 0)
        routed = self.moe_layers + (self.mtp_layers if self.moe is not None else 0)
        width = dense * self.ffn_hidden
        if self.moe is not None:
            width += routed * (self.moe.ffn_hidden * self.moe.top_k + self.moe.shared_ffn_hidden)
        return width * gated_multiplier

    def _attention_forward_per_token(self, seq_len: int, core_fraction: float) -> float:
        """Forward FLOPs of one layer's attention per token: projections and the core (QK^T and AV) over
        ``core_fraction`` of the s x s matrix (1/2 causal)."""
        h, a = self.hidden, self.heads
        if self.mla is not None:
            m = self.mla
            q_dim = a * (m.qk_head_dim + m.rope_head_dim)
            q = h * q_dim if m.q_lora_rank is None else m.q_lora_rank * (h + q_dim + 1)
            kv = m.kv_lora_rank * (h + a * (m.qk_head_dim + m.v_head_dim) + 1) + h * m.rope_head_dim
            core = seq_len * core_fraction * (q_dim + a * m.v_head_dim)
            return 2.0 * (q + kv + a * m.v_head_dim * h + core)
        d = self.head_dim
        projections = 2.0 * h * d * (2 * a + 2 * self.kv_heads)  # Q and O (a heads), K and V (kv heads)
        return projections + 4.0 * seq_len * core_fraction * a * d

    def counted_flops_per_token(self, seq_len: int, convention: str = "megatron-bridge", tp: int = 1) -> float:
        """The FLOPs per trained token a published "model TFLOP/s" divides by (see the module docstring);
        no recomputation counted."""
        if convention not in CONVENTIONS:
            raise InputError("convention", convention, "one of " + ", ".join(CONVENTIONS))
        bridge = convention == "megatron-bridge"
        gate = 1.5 if self.gated and (self.activation == "swiglu" or not bridge) else 1.0
        core = 0.5 if bridge else 1.0
        stack = self.layers + self.mtp_layers
        forward = (4.0 * self.hidden * self._mlp_width(gate)
                   + stack * self._attention_forward_per_token(seq_len, core)
                   + 2.0 * self.mtp_layers * (3 * self.hidden + 2 * self.hidden**2)
                   + 2.0 * self.hidden * self.padded_vocab(tp) * (self.mtp_layers + 1))
        return 3.0 * forward

    def gemm_flops_per_token(self, seq_len: int) -> float:
        """FLOPs per token the GPU runs in forward and backward: every GLU gated, causal attention over half the
        matrix, windowed layers over their window."""
        gate = 1.5 if self.gated else 1.0
        stack = self.layers + self.mtp_layers
        attention = sum(self._attention_forward_per_token(seq_len, self.core_fraction(seq_len, i))
                        for i in range(stack))
        forward = (4.0 * self.hidden * self._mlp_width(gate) + attention
                   + 2.0 * self.mtp_layers * 2 * self.hidden**2
                   + 2.0 * self.hidden * self.vocab * (self.mtp_layers + 1))
        return 3.0 * forward

    def core_fraction(self, seq_len: int, layer: int) -> float:
        """Share of the s x s score matrix a causal layer computes: half, or its window's where the layer is
        windowed (GPT-OSS: even layers)."""
        if self.window is not None and layer % 2 == 0 and self.window < seq_len:
            w = self.window
            return (w * seq_len - w * (w - 1) / 2) / seq_len**2
        return 0.5

    def with_mtp(self, layers: int) -> Architecture:
        return replace(self, mtp_layers=layers)


def _positive(obj: object, names: tuple[str, ...], prefix: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(prefix + name, value, "an integer >= 1")


def _non_negative(obj: object, names: tuple[str, ...], prefix: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(prefix + name, value, "an integer >= 0")
