"""DDP's gradient buckets: which layers' gradients are exchanged together, and when each bucket is ready.

Why a module of its own: the training simulator, the multi-job scenarios (:mod:`sim.scenario`) and the GPU
trace replays (:mod:`sim.gpu_data_parallel`) all group gradients as PyTorch DDP does, and none of them needs
the others' engines to do so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexcomm.costmodel.compute import ModelSpec
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_size

MIB = 2**20
#: DDP's default bucket cap (``bucket_cap_mb=25``).
DEFAULT_BUCKET_CAP = 25 * MIB
#: A bucket cap below any layer's bytes: every layer with parameters is a bucket of its own.
ONE_LAYER_PER_BUCKET = 1


@dataclass(frozen=True)
class Bucket:
    """Gradients exchanged together: ``layers`` (forward indices, in backward order) and their size."""

    index: int
    layers: tuple[int, ...]
    numel: int
    nbytes: int

    @property
    def ready_layer(self) -> int:
        """The layer whose backward completes the bucket (the lowest forward index)."""
        return min(self.layers)


def size_capped_groups(sizes: Sequence[float], first: float, cap: float) -> list[list[int]]:
    """Indices of ``sizes`` in consecutive groups, each closed once it holds at least ``first`` (the first group)
    or ``cap`` bytes: DDP's ``compute_bucket_assignment_by_size`` (torch/csrc/distributed/c10d/reducer.cpp: a
    tensor joins the open bucket, which closes when its size reaches the limit)."""
    groups: list[list[int]] = []
    current: list[int] = []
    held = 0.0
    for index, size in enumerate(sizes):
        current.append(index)
        held += float(size)
        if held >= (first if not groups else cap):
            groups.append(current)
            current, held = [], 0.0
    if current:
        groups.append(current)
    return groups


def _equal_groups(order: list[int], sizes: np.ndarray, count: int) -> list[list[int]]:
    """``order`` (layers in backward order) cut into ``count`` contiguous groups of about equal bytes."""
    groups: list[list[int]] = []
    total = float(sizes[order].sum())
    current: list[int] = []
    cum = 0.0
    for position, layer in enumerate(order):
        current.append(layer)
        cum += float(sizes[layer])
        left_buckets = count - len(groups) - 1
        if left_buckets == 0:
            continue
        if cum >= total * (len(groups) + 1) / count or len(order) - position - 1 == left_buckets:
            groups.append(current)
            current = []
    groups.append(current)
    return groups


def make_buckets(model: ModelSpec, cap_bytes: float | str | None = DEFAULT_BUCKET_CAP, count: int | None = None,
                 first_cap_bytes: float | str | None = None, dtype_bytes: int = 4) -> list[Bucket]:
    """DDP-style buckets over the layers with parameters, in reverse (backward) order.

    With ``cap_bytes`` a bucket closes once it holds at least that many bytes (so it may exceed the
    cap by its last layer, as DDP's ``_compute_bucket_assignment_by_size``); ``first_cap_bytes``
    caps the first one (DDP uses 1 MiB there). With ``count``: that many contiguous buckets of
    about equal bytes. Layers without parameters compute but belong to no bucket.
    """
    sizes = model.layer_gradient_bytes(dtype_bytes)
    order = [i for i in range(len(model.layers) - 1, -1, -1) if sizes[i] > 0]
    if not order:
        raise InputError("workload", model.name, "a model with at least one parameter")
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 1 <= count <= len(order):
            raise InputError("buckets", count, f"an integer 1..{len(order)} (layers with parameters of {model.name})")
        groups = _equal_groups(order, sizes, count)
    else:
        cap = parse_size(cap_bytes if cap_bytes is not None else DEFAULT_BUCKET_CAP, "bucket-size")
        first = cap if first_cap_bytes is None else parse_size(first_cap_bytes, "first-bucket-size")
        if cap <= 0 or first <= 0:
            raise InputError("bucket-size", cap_bytes, "a positive size such as 25MiB")
        groups = [[order[i] for i in group] for group in size_capped_groups([sizes[i] for i in order], first, cap)]
    buckets = []
    for k, layers in enumerate(groups):
        nbytes = int(sum(int(sizes[i]) for i in layers))
        buckets.append(Bucket(k, tuple(layers), nbytes // dtype_bytes, nbytes))
    return buckets


def bucket_ready_seconds(fwd: np.ndarray, bwd: np.ndarray, buckets: Sequence[Bucket]) -> np.ndarray:
    """Seconds from an iteration's start until each bucket's gradients are ready: the whole forward pass
    plus the backward of every layer from the last down to the bucket's first (DDP's overlap)."""
    suffix = np.cumsum(bwd[::-1])[::-1]  # suffix[l]: backward of layers L-1..l
    forward = float(fwd.sum())
    return np.array([forward + suffix[b.ready_layer] for b in buckets])
