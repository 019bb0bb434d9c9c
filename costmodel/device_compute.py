"""Per-layer compute time on a named device: GEMMs by their shapes, memory-bound kernels by bytes moved.

Why: "FLOPs / (peak x 0.65)" priced a CNN at 65 % of peak, so ResNet-50 ran at ~8,300 images/s on one A100
where NVIDIA publishes 2,470 (AMP): most of a CNN's time is batch norm, ReLU and residual adds streaming
activations through HBM, which FLOPs do not see. Here a layer's forward takes

* each GEMM (a convolution as its implicit GEMM) at :func:`costmodel.gemm_efficiency.gemm_seconds`: the
  device's measured achievable matmul rate, tile / wave / K-loop losses of its shape, its bytes at HBM speed;
* its memory-bound kernels' element accesses (``LayerSpec.memory_accesses``) x the element size at the
  device's datasheet HBM bandwidth;
* layers with FLOPs but no shapes (a model counted by ``torch.utils.flop_counter``): FLOPs at the achievable
  rate with no shape loss;
* no kernel shorter than a launch (:data:`costmodel.gemm_efficiency.LAUNCH_FLOOR_S`): a small model's step is
  launch-bound on any GPU.

The backward pass runs each GEMM's two gradients as GEMMs of their own shapes (input gradient m x k from
(m x n)(n x k); weight gradient n x k from (n x m)(m x k)), and its memory-bound kernels move twice the
forward's elements (they read the incoming gradient and the saved input and write the outgoing gradient).
Measured layers of a profile override all of this, as in :meth:`ModelSpec.layer_seconds`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flexcomm.costmodel.compute import LayerSpec, ModelSpec
from flexcomm.costmodel.gemm_efficiency import (
    LAUNCH_FLOOR_S,
    GemmShape,
    achievable_fraction,
    gemm_seconds,
    kernel_config,
)

#: Bytes per activation element by the precision the device trains in (fp8 training keeps 16-bit activations
#: outside its GEMMs).
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
#: Backward memory-bound traffic per forward element access.
BACKWARD_MEMORY_FACTOR = 2.0
#: FLOPs of a layer beyond its GEMMs' (relative) below which they are rounding, not unshaped work.
UNSHAPED_TOLERANCE = 1e-6


def unshaped_flops(flops: float, shaped: float) -> float:
    """FLOPs counted beyond those of the GEMMs whose shapes are known (priced with no shape), 0 where the
    difference is rounding (:data:`UNSHAPED_TOLERANCE`)."""
    other = flops - shaped
    return other if other > UNSHAPED_TOLERANCE * max(shaped, 1.0) else 0.0


def element_bytes(precision: str) -> int:
    """Activation bytes in ``precision`` (16-bit where the precision is not one of :data:`ELEMENT_BYTES`)."""
    return ELEMENT_BYTES.get(precision, 2)


class DeviceCompute:
    """Prices layers on one device: its peak (in the precision it trains in), HBM bandwidth and SM count."""

    def __init__(self, device_name: str, peak_flops: float, memory_bandwidth_Bps: float, sms: int | None,
                 precision: str) -> None:
        self.peak_flops, self.memory_bandwidth_Bps, self.sms = peak_flops, memory_bandwidth_Bps, sms
        self.achievable = achievable_fraction(device_name)
        self.element_bytes = element_bytes(precision)
        self.config = kernel_config(device_name, precision)

    @classmethod
    def of(cls, device) -> DeviceCompute:  # device: costmodel.cluster_parts.Device
        return cls(device.name, device.peak_flops, device.memory_bandwidth_Bps, device.sms, device.precision)

    def _gemm(self, shape: GemmShape) -> float:
        return gemm_seconds(shape, self.peak_flops, self.achievable, self.sms, self.memory_bandwidth_Bps,
                            self.element_bytes, self.config)

    def kernels(self, gemms: Sequence[GemmShape], memory_kernels: Sequence[float], other_flops: float = 0.0,
                backward_gemms: Sequence[GemmShape] = ()) -> tuple[float, float]:
        """(forward, backward) seconds of GEMMs of these shapes, memory-bound kernels of these element accesses
        (each at least a launch), ``other_flops`` counted with no shape (at the achievable rate, no shape loss)
        and GEMMs only the backward runs. The one price of a layer of the zoo (:meth:`layer`) and of a traced op
        (:mod:`costmodel.torch_kernels`)."""
        memory = 0.0
        if self.memory_bandwidth_Bps:
            memory = sum(max(accesses * self.element_bytes / self.memory_bandwidth_Bps, LAUNCH_FLOOR_S)
                         for accesses in memory_kernels if accesses > 0)
        forward = backward = 0.0
        for s in gemms:
            forward += self._gemm(s)
            backward += self._gemm(GemmShape(s.m, s.k, s.n, s.count))  # input gradient
            backward += self._gemm(GemmShape(s.n, s.k, s.m, s.count, s.a_elements))  # weight gradient
        backward += sum(self._gemm(s) for s in backward_gemms)
        if other_flops > 0:
            unshaped = max(other_flops / (self.peak_flops * self.achievable), LAUNCH_FLOOR_S)
            forward, backward = forward + unshaped, backward + 2.0 * unshaped
        return forward + memory, backward + BACKWARD_MEMORY_FACTOR * memory

    def layer(self, layer: LayerSpec, batch: float) -> tuple[float, float]:
        """(forward, backward) seconds of one layer at ``batch`` samples (its FLOPs beyond its GEMMs' priced
        with no shape)."""
        other = unshaped_flops(layer.forward_flops, sum(gemm.flops for gemm in layer.gemms))  # per sample
        memory = layer.memory_kernels or (layer.memory_accesses,)
        return self.kernels([gemm.at_batch(batch) for gemm in layer.gemms], [a * batch for a in memory],
                            other * batch, [gemm.at_batch(batch) for gemm in layer.backward_gemms])

    def layer_seconds(self, model: ModelSpec, batch: float) -> tuple[np.ndarray, np.ndarray]:
        """Per-layer (forward, backward) seconds in forward order; measured layers take the profile's medians."""
        pairs = [self.layer(layer, batch) for layer in model.layers]
        forward = np.array([f for f, _ in pairs], dtype=float)
        backward = np.array([b for _, b in pairs], dtype=float)
        return model.measured_over(forward, backward, batch)

    def iteration_seconds(self, model: ModelSpec, batch: float) -> float:
        forward, backward = self.layer_seconds(model, batch)
        return float(forward.sum() + backward.sum())


def model_layer_seconds(model: ModelSpec, batch: float, device, efficiency: float | None = None,
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer (forward, backward) seconds of ``model`` on ``device`` (a :class:`costmodel.cluster_parts.Device`):
    ``efficiency`` None prices it on the device (this module); a number keeps the flat model, FLOPs at that
    fraction of peak (what-ifs, and the engines' explicit ``--efficiency``)."""
    if efficiency is None:
        return DeviceCompute.of(device).layer_seconds(model, batch)
    return model.layer_seconds(batch, device.peak_flops, efficiency)
