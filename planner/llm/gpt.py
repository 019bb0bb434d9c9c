"""A GPT-style transformer as the planner sees it: its shape, parameter count, FLOP count and GEMMs.

Why closed forms and not a traced graph: a 530B-parameter model traced op by op costs seconds per
shape, while every quantity the plan needs has a published formula in the shape (l layers, hidden h,
a heads, sequence s, vocabulary V). The formulas are Narayanan et al., "Efficient Large-Scale Language
Model Training on GPU Clusters Using Megatron-LM" (SC'21), section 5.1: parameters
P = 12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h)), and model FLOPs per iteration of batch B with full
activation recomputation F = 96 B s l h^2 (1 + s/(6 h) + V/(16 l h)) (forward 24 B s l h^2 (1 + s/(6h))
per layer stack plus the logit layer 2 B s h V, counted four times: forward, recomputed forward, and a
backward of twice the forward).
"""

from __future__ import annotations

from dataclasses import dataclass

from flexcomm.costmodel.errors import InputError

#: Megatron-LM's FFN width is 4 h (the formulas above assume it).
FFN_MULTIPLE = 4


@dataclass(frozen=True)
class Gemm:
    """``count`` independent (M x K) @ (K x N) products (a batched GEMM when count > 1)."""

    name: str
    m: int
    n: int
    k: int
    count: int = 1

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer: l layers of hidden size h with a heads, sequence s, vocabulary V."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int = 51200

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq_len", "vocab"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name.replace("_", "-"), value, "an integer >= 1")
        if self.hidden % self.heads:
            raise InputError("heads", self.heads, f"a divisor of hidden={self.hidden}")

    @property
    def parameters(self) -> float:
        """Narayanan et al. (2021), section 5.1."""
        n, h, s, v = self.layers, self.hidden, self.seq_len, self.vocab
        return 12.0 * n * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * n * h))

    @property
    def layer_parameters(self) -> float:
        """One transformer layer: 12 h^2 weights + 13 h biases and norms."""
        return 12.0 * self.hidden**2 + 13.0 * self.hidden

    @property
    def embedding_parameters(self) -> float:
        """Word (V h) and position (s h) embeddings; the logit layer reuses the word embedding (tied)."""
        return float((self.vocab + self.seq_len) * self.hidden)

    def model_flops(self, batch: int) -> float:
        """The paper's FLOPs per iteration of ``batch`` sequences (with the recomputed forward): what its
        teraFLOP/s per GPU divide by."""
        n, h, s, v = self.layers, self.hidden, self.seq_len, self.vocab
        return 96.0 * batch * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))

    def layer_forward_flops(self, batch: int) -> float:
        """One layer's forward FLOPs for ``batch`` sequences: its GEMMs and the attention core (Narayanan et
        al.'s 24 B s h^2 (1 + s / 6h))."""
        s, h = self.seq_len, self.hidden
        return 24.0 * batch * s * h * h * (1 + s / (6 * h))

    def training_flops(self, batch: int) -> float:
        """Model FLOPs of one step (forward + backward, no recomputation): what MFU divides by (PaLM's
        definition; Megatron's count adds a full recompute, :meth:`model_flops`)."""
        return 3 * self.layers * self.layer_forward_flops(batch) + 6.0 * batch * self.seq_len * self.hidden * self.vocab

    def recompute_flops(self, batch: int, recompute: str) -> float:
        """FLOPs a plan recomputes per step: the whole forward of every layer (full), the attention core's
        scores and context GEMMs (selective, 4 B s^2 h a layer) or nothing."""
        if recompute == "full":
            return self.layers * self.layer_forward_flops(batch)
        if recompute == "selective":
            return self.layers * 4.0 * batch * self.seq_len**2 * self.hidden
        return 0.0

    def layer_gemms(self, micro_batch: int, tp: int) -> list[Gemm]:
        """The GEMMs of one layer's forward pass on one of ``tp`` tensor-parallel ranks (Megatron's split:
        QKV and FC1 by columns, projection and FC2 by rows, attention heads divided among ranks)."""
        b, s, h, a = micro_batch, self.seq_len, self.hidden, self.heads
        tokens, head_dim, local_heads = b * s, h // a, a // tp
        return [
            Gemm("qkv", tokens, 3 * h // tp, h),
            Gemm("scores", s, s, head_dim, b * local_heads),
            Gemm("context", s, head_dim, s, b * local_heads),
            Gemm("proj", tokens, h, h // tp),
            Gemm("fc1", tokens, FFN_MULTIPLE * h // tp, h),
            Gemm("fc2", tokens, h, FFN_MULTIPLE * h // tp),
        ]

    def logit_gemm(self, micro_batch: int, tp: int) -> Gemm:
        """The output layer (vocabulary-parallel over tp ranks)."""
        return Gemm("logits", micro_batch * self.seq_len, -(-self.vocab // tp), self.hidden)  # Megatron pads V
