"""Top-k's speed on this host, measured the way the real hooks run it, for replays that price compression.

A profiled step of a dense job says nothing about what Top-k would cost on the same host, so a replay that
asks "and with topk-ag?" measures it: the hooks' own selection (:func:`compression.compressors.topk_indices`
on |g|), the gather of the kept values, and the decode every rank does (scatter-add of the P ranks' k pairs),
on a bucket of the traced size. A calibration of the host, kept apart from the steps it helps predict.
"""

from __future__ import annotations

import statistics
import time

from flexcomm.costmodel.errors import InputError


def measure_topk_elements_per_s(numel: int, ratio: float, ranks: int, repeats: int = 7, seed: int = 0) -> float:
    """Gradient elements per second one rank compresses and decodes (median of ``repeats``, one thread)."""
    try:
        import torch
    except ImportError:
        raise InputError("compress-throughput", None, "Top-k's elements per second on the traced host (torch, "
                         "which would measure it here, is not installed)") from None

    from flexcomm.compression.compressors import topk_indices

    if not (isinstance(numel, int) and numel >= 1):
        raise InputError("numel", numel, "a positive element count")
    if not 0 < ratio <= 1:
        raise InputError("ratio", ratio, "a fraction of elements kept in (0, 1]")
    generator = torch.Generator().manual_seed(seed)
    grad = torch.randn(numel, generator=generator)
    k = max(1, int(numel * ratio))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a rank runs (OMP_NUM_THREADS=1 on the testbed)
    try:
        seconds = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            indices = topk_indices(grad, k)
            values = grad[indices]
            out = torch.zeros_like(grad)
            for _ in range(ranks):
                out.index_add_(0, indices, values)
            seconds.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return numel / statistics.median(seconds[1:])
