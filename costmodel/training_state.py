"""Bytes of training state per parameter, in memory and in a checkpoint, by precision.

One table serves the planner's memory model and both failure models of the simulator, so a checkpoint
is never priced at one size in one place and another elsewhere. Source: Rajbhandari et al., "ZeRO",
SC'20, section 3.1: mixed-precision Adam keeps 2 bytes of 16-bit weights, 2 of 16-bit gradients and
K = 12 of fp32 master weights, momentum and variance ("2Psi + 2Psi + 12Psi = 16Psi bytes"); fp32
training keeps 4 + 4 + 8 (weights, gradients, two moments). A checkpoint holds weights and optimizer
states, not gradients (they are recomputed by the next step).
"""

from __future__ import annotations

from flexcomm.costmodel.errors import InputError

PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp32")

#: (weight, gradient, optimizer-state) bytes per parameter: ZeRO (SC'20) section 3.1.
STATE_BYTES: dict[str, tuple[float, float, float]] = {
    "bf16": (2.0, 2.0, 12.0),
    "fp16": (2.0, 2.0, 12.0),
    "fp32": (4.0, 4.0, 8.0),
}


def checkpoint_bytes_per_param(precision: str) -> float:
    """Bytes a checkpoint stores per parameter: weights and optimizer states (14 mixed precision, 12 fp32)."""
    if precision not in STATE_BYTES:
        raise InputError("precision", precision, "one of " + ", ".join(PRECISIONS))
    weights, _, states = STATE_BYTES[precision]
    return weights + states


def state_bytes_per_param(precision: str) -> float:
    """Bytes a data-parallel rank holds per parameter for weights, gradients and Adam's moments (16 in both
    mixed precision and fp32, ZeRO's count); a precision outside the table trains mixed (fp8 and tf32 keep
    16-bit or fp32 masters: 16 either way)."""
    return float(sum(STATE_BYTES.get(precision, STATE_BYTES["bf16"])))
