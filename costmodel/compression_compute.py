"""Device time a gradient-exchange scheme spends before and after its collectives (compression work).

Why per scheme: the exchanges differ in *kind* of work, so one rate cannot price them all.

* ``topk-ag`` / ``topk-ar``: Top-k selection at ``topk_elements_per_s`` (default Tyagi & Swany's V100
  measurement, :data:`~costmodel.compute.V100_TOPK_ELEMENTS_PER_S`), nearly constant in the ratio.
* ``powersgd``: PyTorch's ``powerSGD_hook`` loops over the bucket's matrices: per matrix P = M Q, the
  orthogonalisation of P, Q = M^T P and the decompression P Q^T (:data:`POWERSGD_KERNELS_PER_MATRIX`
  kernels; 2 x 2 n m r + 2 n m r FLOPs + 2 n r^2). Each matrix costs its FLOPs at the device's rate
  (:func:`costmodel.compute.compute_seconds`) or its kernels' launches, whichever is longer: a ResNet's
  small matrices are launch-bound (5 us a kernel, HolisticTraceAnalysis' lower end, as
  :data:`~costmodel.collective_libraries.transports.HOST_LAUNCH_US`). The rate is the cluster device's
  ``peak_flops`` (its tensor-core rate); the hook's fp32 matmuls run slower where TF32 is off (PyTorch's
  default), so large matrices are priced optimistically until a device catalog gives fp32 rates.
* ``fp16`` / ``bf16``: the casts of PyTorch's compress hooks (fp32 -> 2 bytes before, back after: 12 bytes
  moved per element), memory-bound, priced at the device's memory bandwidth when the cluster file gives it;
  a device without one prices the casts as free (they are ~1 % of a dense allreduce's bytes at NVLink speed).
* ``dense``: nothing.
"""

from __future__ import annotations

import math

from flexcomm.costmodel.collective_libraries.transports import HOST_LAUNCH_US
from flexcomm.costmodel.compressed import DEFAULT_POWERSGD_RANK, LOW_PRECISION_BYTES
from flexcomm.costmodel.compute import DEFAULT_EFFICIENCY, V100_TOPK_ELEMENTS_PER_S, compute_seconds

#: Kernels PyTorch's PowerSGD hook runs per matrix: two matmuls, the orthogonalisation, the decompression
#: (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py, ``powerSGD_hook``).
POWERSGD_KERNELS_PER_MATRIX = 4

#: Bytes the low-precision hooks move per gradient element: read fp32 + write 2 B, then read 2 B + write fp32.
CAST_BYTES_PER_ELEMENT = 4 + 2 + 2 + 4


def compression_seconds(scheme: str, numel: float, peak_flops: float, memory_bandwidth_Bps: float | None = None,
                        topk_elements_per_s: float = V100_TOPK_ELEMENTS_PER_S,
                        powersgd_rank: int = DEFAULT_POWERSGD_RANK, efficiency: float = DEFAULT_EFFICIENCY,
                        matrices: list[float] | None = None) -> float:
    """Seconds of device work one exchange of ``numel`` gradient elements adds (see the module doc);
    ``matrices``: PowerSGD's matrices' element counts (default: the gradient as one matrix)."""
    if scheme in ("topk-ag", "topk-ar"):
        return numel / topk_elements_per_s
    if scheme == "powersgd":
        seconds = 0.0
        for size in (matrices if matrices else [numel]):
            side = math.ceil(math.sqrt(size))
            flops = 6.0 * size * powersgd_rank + 2.0 * side * powersgd_rank ** 2
            seconds += max(float(compute_seconds(flops, peak_flops, efficiency)),
                           POWERSGD_KERNELS_PER_MATRIX * HOST_LAUNCH_US * 1e-6)
        return seconds
    if scheme in LOW_PRECISION_BYTES:
        if memory_bandwidth_Bps is None or not math.isfinite(memory_bandwidth_Bps):
            return 0.0
        return numel * CAST_BYTES_PER_ELEMENT / memory_bandwidth_Bps
    return 0.0
