"""Memory per GPU as the frameworks count it: model states by precision and ZeRO stage, activations
per layer by parallelism and recomputation, micro-batches in flight by pipeline schedule.

Sources (each formula is theirs, in bytes):

* **Model states**, mixed-precision Adam: 2 bytes of 16-bit weights + 2 of 16-bit gradients + K = 12 of
  fp32 master weights, momentum and variance per parameter, 16 in all (Rajbhandari et al., "ZeRO", SC'20,
  section 3.1: "2Psi + 2Psi + 12Psi = 16Psi bytes"); ZeRO stage 1 (Megatron's distributed optimizer) divides
  the 12 by the data-parallel size d, stage 2 also the gradients, stage 3 also the weights (their Figure 1:
  7.5B parameters, d = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB). fp32 training keeps 4 + 4 + 8 = 16 as well
  (weights, gradients, two moments) with no master copy.
* **Activations** of one transformer layer and micro-batch of b sequences, 16-bit with 1-byte dropout
  masks (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", MLSys'23,
  Table 2): no parallelism s b h (34 + 5 a s / h); tensor parallel t: s b h (10 + 24/t + 5 a s/(h t));
  with sequence parallelism s b h / t (34 + 5 a s / h); selective recomputation drops the 5 a s / h term
  (the attention core is recomputed); full recomputation keeps the layer's input, 2 s b h (/t with
  sequence parallelism), and holds one layer's full activations while it recomputes.
* **In flight**: the first stage of 1F1B holds min(p, m) micro-batches; the interleaved schedule with v
  model chunks holds (1 + (p - 1)/(p v)) times that (Korthikanti et al., section 4.2.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.training_state import PRECISIONS, STATE_BYTES
from flexcomm.planner.llm.gpt import Transformer

Precision = Literal["bf16", "fp16", "fp32"]
Recompute = Literal["none", "selective", "full"]
RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")


def model_state_bytes(parameters: float, precision: str, zero: int, dp: int) -> float:
    """Bytes of weights, gradients and Adam states of ``parameters`` on one GPU at ZeRO stage ``zero``."""
    if precision not in STATE_BYTES:
        raise InputError("precision", precision, "one of " + ", ".join(PRECISIONS))
    if zero not in (0, 1, 2, 3):
        raise InputError("zero", zero, "0, 1, 2 or 3 (ZeRO stage)")
    weights, grads, states = STATE_BYTES[precision]
    return parameters * (weights / (dp if zero >= 3 else 1) + grads / (dp if zero >= 2 else 1)
                         + states / (dp if zero >= 1 else 1))


def activation_scale(precision: str) -> float:
    """Korthikanti's byte counts are for 16-bit activations; fp32 doubles every tensor but the masks (~2x)."""
    return 2.0 if precision == "fp32" else 1.0


def layer_activation_bytes(model: Transformer, micro_batch: int, tp: int, sequence_parallel: bool,
                           recompute: str, precision: str = "bf16") -> float:
    """Bytes one layer keeps for its backward pass per micro-batch (Korthikanti et al., Table 2)."""
    s, b, h, a = model.seq_len, micro_batch, model.hidden, model.heads
    sbh = float(s * b * h)
    attention = 5.0 * a * s / h
    if recompute == "full":
        kept = 2.0 * sbh / (tp if sequence_parallel else 1)
    elif sequence_parallel:
        kept = sbh / tp * (34.0 + (0.0 if recompute == "selective" else attention))
    else:
        kept = sbh * (10.0 + 24.0 / tp + (0.0 if recompute == "selective" else attention / tp))
    return kept * activation_scale(precision)


def full_layer_activation_bytes(model: Transformer, micro_batch: int, tp: int, sequence_parallel: bool,
                                precision: str = "bf16") -> float:
    """One layer's activations without recomputation: the working set while a checkpointed layer recomputes."""
    return layer_activation_bytes(model, micro_batch, tp, sequence_parallel, "none", precision)


def in_flight(pp: int, micro_batches: int, virtual_stages: int) -> float:
    """Micro-batches whose activations the first pipeline stage holds at once (1F1B, interleaved)."""
    held = float(min(pp, micro_batches))
    if virtual_stages > 1:
        held *= 1.0 + (pp - 1) / (pp * virtual_stages)
    return held


@dataclass(frozen=True)
class MemoryUse:
    """Per-GPU bytes of the most loaded pipeline stage, and what they are."""

    states: float
    activations: float
    logits: float

    @property
    def total(self) -> float:
        return self.states + self.activations + self.logits
