"""A data-parallel exchange overlapping the last backward, as DDP's buckets run it.

Why: PyTorch DDP (and Megatron's ``overlap_grad_reduce``) launches a bucket's allreduce as soon as the
backward has produced all of its gradients, so only what is left after the backward ends is on the step's
critical path. Charging the whole exchange after the drain made ``plan`` 2-3 % slower than ``simulate`` on
the same data-parallel job (47.9 against 46.8 ms, ResNet-50, 128 a GPU on dgx-a100-80g), whose buckets
overlap. The planner's units are coarser than layers (a ResNet block, a transformer layer), so a unit's
gradients are taken as produced evenly over its backward; buckets close every ``cap`` bytes in backward
order, as DDP's ``bucket_cap_mb`` does, the last one when the backward ends.
"""

from __future__ import annotations

import numpy as np

from flexcomm.sim.buckets import DEFAULT_BUCKET_CAP as DDP_BUCKET_CAP_BYTES  # DDP's bucket_cap_mb=25: one source


def gradient_buckets(unit_bytes: np.ndarray, unit_backward_s: np.ndarray, cap_bytes: float = DDP_BUCKET_CAP_BYTES
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(ready seconds into the backward, bytes) of each bucket of a stage whose units (forward order) hold
    ``unit_bytes`` of gradients and take ``unit_backward_s`` of backward each."""
    grads = np.asarray(unit_bytes, dtype=float)[::-1]  # the backward runs the units in reverse
    seconds = np.asarray(unit_backward_s, dtype=float)[::-1]
    total = float(grads.sum())
    if total <= 0:
        return np.zeros(0), np.zeros(0)
    count = max(1, int(np.ceil(total / cap_bytes - 1e-9)))
    levels = np.minimum(np.arange(1, count + 1) * cap_bytes, total)
    levels[-1] = total
    filled = np.cumsum(grads)
    started = np.concatenate([[0.0], np.cumsum(seconds)[:-1]])
    unit = np.minimum(np.searchsorted(filled, levels - 1e-9 * total, side="left"), len(grads) - 1)
    before = filled[unit] - grads[unit]
    within = np.where(grads[unit] > 0, (levels - before) / np.where(grads[unit] > 0, grads[unit], 1.0), 1.0)
    ready = started[unit] + seconds[unit] * np.clip(within, 0.0, 1.0)
    ready[-1] = float(seconds.sum())  # the last bucket closes with the backward
    return ready, np.diff(np.concatenate([[0.0], levels]))


def exposed_exchange_s(ready_s: np.ndarray, exchange_s: np.ndarray, backward_s: float) -> float:
    """Seconds of the exchange left after the backward ends: buckets run one after another, each once
    ready (DDP's single communication stream)."""
    finish = 0.0
    for ready, seconds in zip(ready_s, exchange_s, strict=True):
        finish = max(finish, float(ready)) + float(seconds)
    return max(0.0, finish - backward_s)
