"""Device time a gradient-exchange scheme spends before and after its collectives (compression work).

Why per scheme and per device: the exchanges differ in *kind* of work, and one CPU-like constant priced an H100's
Top-k like a V100's (a 1.3B-parameter Top-k step cost 1.99 s on an H100 cluster against 0.42 s dense). Every
kernel here is priced from the device's memory bandwidth and FLOP rate:

* ``topk-ag`` / ``topk-ar``: Top-k selection. Its one measurement (Tyagi & Swany 2023, V100: ~0.75e9 elements/s,
  :data:`~costmodel.compute.V100_TOPK_ELEMENTS_PER_S`, nearly constant in the ratio) is a memory-bound radix
  selection (several passes over the gradient), so another device runs it at that rate times its HBM bandwidth
  over the V100's 900 GB/s (:func:`topk_elements_per_s`). A given rate (``--compress-throughput``, a measured
  one) wins.
* ``threshold`` selection (a fixed threshold, no sort): one read to compare and one to compact,
  :data:`THRESHOLD_BYTES_PER_ELEMENT` at HBM bandwidth.
* ``powersgd``: PyTorch's ``powerSGD_hook`` per matrix M (torch/distributed/algorithms/ddp_comm_hooks/
  powerSGD_hook.py): error feedback M += e, P = M Q, orthogonalise P, Q = M^T P, M' = P Q^T, e = M - M': the
  FLOPs (2 x 2 n m r + 2 n m r + 2 n r^2) at the device's achievable rate, or the bytes its passes over M move
  (:data:`POWERSGD_BYTES_PER_ELEMENT`, fp32) at HBM bandwidth, whichever is longer, and never less than its
  kernels' launches (a ResNet's small matrices are launch-bound: 5 us a kernel, HolisticTraceAnalysis' lower
  end, as :data:`~costmodel.collective_libraries.transports.HOST_LAUNCH_US`). At rank 4 the passes over M
  dominate the FLOPs ~100x on an H100.
* ``fp16`` / ``bf16``: the casts of PyTorch's compress hooks (fp32 -> 2 bytes before, back after: 12 bytes
  moved per element), memory-bound, at the device's memory bandwidth.
* ``dense``: nothing.

A device without a memory bandwidth (a flat link model, no cluster) prices the memory-bound parts as free and
Top-k at the V100 rate.
"""

from __future__ import annotations

import math

from flexcomm.costmodel.collective_libraries.transports import HOST_LAUNCH_US
from flexcomm.costmodel.compressed import DEFAULT_POWERSGD_RANK, LOW_PRECISION_BYTES
from flexcomm.costmodel.compute import V100_TOPK_ELEMENTS_PER_S
from flexcomm.costmodel.gemm_efficiency import achievable_fraction

#: Kernels PyTorch's PowerSGD hook runs per matrix: two matmuls, the orthogonalisation, the decompression
#: (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py, ``powerSGD_hook``).
POWERSGD_KERNELS_PER_MATRIX = 4
#: fp32 bytes the hook moves per element of M: error feedback add (read 2, write 1), P = M Q (read 1),
#: Q = M^T P (read 1), M' = P Q^T (write 1), new error M - M' (read 2, write 1): 9 passes of 4 bytes.
POWERSGD_BYTES_PER_ELEMENT = 9 * 4
#: Bytes the low-precision hooks move per gradient element: read fp32 + write 2 B, then read 2 B + write fp32.
CAST_BYTES_PER_ELEMENT = 4 + 2 + 2 + 4
#: Threshold selection: read each fp32 element to compare, read it again to compact the survivors.
THRESHOLD_BYTES_PER_ELEMENT = 4 + 4
#: HBM bandwidth of the V100 that Top-k's one measurement ran on (NVIDIA Tesla V100 datasheet, SXM2).
V100_MEMORY_BANDWIDTH_Bps = 900e9
#: The fraction of peak the PowerSGD matmuls reach where no device is named (the flat FLOP model's).
DEFAULT_ACHIEVABLE = 0.65


def topk_elements_per_s(memory_bandwidth_Bps: float | None) -> float:
    """Top-k selection speed on a device: the V100 measurement scaled by HBM bandwidth (memory-bound)."""
    if memory_bandwidth_Bps is None or not math.isfinite(memory_bandwidth_Bps) or memory_bandwidth_Bps <= 0:
        return V100_TOPK_ELEMENTS_PER_S
    return V100_TOPK_ELEMENTS_PER_S * memory_bandwidth_Bps / V100_MEMORY_BANDWIDTH_Bps


def _memory_s(nbytes: float, memory_bandwidth_Bps: float | None) -> float:
    if memory_bandwidth_Bps is None or not math.isfinite(memory_bandwidth_Bps):
        return 0.0
    return nbytes / memory_bandwidth_Bps


def compression_seconds(scheme: str, numel: float, peak_flops: float, memory_bandwidth_Bps: float | None = None,
                        topk_elements_per_s_given: float | None = None,
                        powersgd_rank: int = DEFAULT_POWERSGD_RANK, achievable: float = DEFAULT_ACHIEVABLE,
                        matrices: list[float] | None = None) -> float:
    """Seconds of device work one exchange of ``numel`` gradient elements adds (see the module doc);
    ``topk_elements_per_s_given``: a measured Top-k rate (None: from the device's bandwidth); ``matrices``:
    PowerSGD's matrices' element counts (default: the gradient as one matrix)."""
    if scheme in ("topk-ag", "topk-ar"):
        rate = topk_elements_per_s_given or topk_elements_per_s(memory_bandwidth_Bps)
        return numel / rate
    if scheme == "threshold":
        return _memory_s(numel * THRESHOLD_BYTES_PER_ELEMENT, memory_bandwidth_Bps)
    if scheme == "powersgd":
        seconds = 0.0
        for size in (matrices if matrices else [numel]):
            side = math.ceil(math.sqrt(size))
            flops = 6.0 * size * powersgd_rank + 2.0 * side * powersgd_rank ** 2
            seconds += max(flops / (peak_flops * achievable),
                           _memory_s(size * POWERSGD_BYTES_PER_ELEMENT, memory_bandwidth_Bps),
                           POWERSGD_KERNELS_PER_MATRIX * HOST_LAUNCH_US * 1e-6)
        return seconds
    if scheme in LOW_PRECISION_BYTES:
        return _memory_s(numel * CAST_BYTES_PER_ELEMENT, memory_bandwidth_Bps)
    return 0.0


def device_compression_seconds(scheme: str, numel: float, device, topk_elements_per_s_given: float | None = None,
                               powersgd_rank: int = DEFAULT_POWERSGD_RANK,
                               matrices: list[float] | None = None) -> float:
    """:func:`compression_seconds` on a cluster's device (its peak, bandwidth and achievable matmul fraction)."""
    return compression_seconds(scheme, numel, device.peak_flops, device.memory_bandwidth_Bps,
                               topk_elements_per_s_given, powersgd_rank, achievable_fraction(device.name), matrices)
