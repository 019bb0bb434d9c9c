"""Prices of the gradient-exchange *schemes*: dense allreduce and the two sparse Top-k exchanges.

A scheme is a recipe of collectives over a payload of values plus indices, so its cost is a sum
of :mod:`costmodel.collectives` coefficients and stays vectorised:

* ``dense``: allreduce of all ``numel`` values.
* ``topk-ag`` (Top-k over Allgather): every rank contributes its own k values *and* k indices;
  each rank then scatter-adds the p*k received pairs (the gamma term).
* ``topk-ar`` (Allreduce-compatible Top-k, STAR/VAR of Tyagi & Swany 2023, Algorithm 1): one owner
  broadcasts its k indices, then all ranks allreduce their own k values at those indices.
  ``index_owner="var"`` adds VAR's allgather of one fp32 norm per rank to elect the owner.

With 4-byte indices, a Bruck allgather, a binomial broadcast and a ring/tree allreduce these are
exactly the paper's forms (t_AG = alpha lg N + 2Mc beta (N-1); AR-ring = alpha[2(N-1)+lg N] +
Mc beta[2(N-1)/N + lg N]; AR-tree = 3 alpha lg N + 3 Mc beta lg N). The paper prices indices at
4 bytes while its code sends int64; here the index dtype is explicit, so both can be priced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from flexcomm.costmodel.collectives import Coefficients, formula
from flexcomm.costmodel.errors import InputError

DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "fp64": 8, "float32": 4, "fp32": 4, "float16": 2, "fp16": 2,
    "bfloat16": 2, "bf16": 2, "int64": 8, "int32": 4, "int16": 2, "uint8": 1, "int8": 1,
}

SCHEMES = ("dense", "topk-ag", "topk-ar")


def dtype_bytes(name: str, field: str = "dtype") -> int:
    """Bytes per element of a dtype name (``float32``, ``bf16``, ``int64``...)."""
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise InputError(field, name, "one of " + ", ".join(DTYPE_BYTES)) from None


def topk_count(numel: ArrayLike, ratio: ArrayLike) -> np.ndarray:
    """k = max(1, floor(numel * ratio)): the brief's convention, ratio = fraction of elements kept."""
    numel = np.asarray(numel, dtype=float)
    ratio = np.asarray(ratio, dtype=float)
    if np.any(~np.isfinite(ratio)) or np.any(ratio <= 0) or np.any(ratio > 1):
        raise InputError("ratio", ratio.tolist() if ratio.ndim else float(ratio), "a fraction in (0, 1]")
    if np.any(numel < 1):
        raise InputError("numel", numel.tolist() if numel.ndim else float(numel), "an element count >= 1")
    return np.maximum(1.0, np.floor(numel * ratio))


@dataclass(frozen=True)
class SparsePayload:
    """Element types on the wire: values (the gradient's dtype) and indices."""

    value_dtype: str = "float32"
    index_dtype: str = "int32"

    @property
    def value_bytes(self) -> int:
        return dtype_bytes(self.value_dtype, "value_dtype")

    @property
    def index_bytes(self) -> int:
        return dtype_bytes(self.index_dtype, "index_dtype")


@dataclass(frozen=True)
class SchemeAlgorithms:
    """Which collective algorithm each scheme's steps use (the paper's choices by default)."""

    allreduce: str = "ring"
    allgather: str = "bruck"
    broadcast: str = "binomial"
    index_owner: str = "star"  # "star" (round robin, no extra message) or "var" (largest norm)


DEFAULT_PAYLOAD = SparsePayload()
DEFAULT_ALGORITHMS = SchemeAlgorithms()


def scheme_parts(
    scheme: str,
    numel: ArrayLike,
    ranks: ArrayLike,
    ratio: ArrayLike,
    payload: SparsePayload = DEFAULT_PAYLOAD,
    algorithms: SchemeAlgorithms = DEFAULT_ALGORITHMS,
) -> list[tuple[str, str, Coefficients]]:
    """The collectives one gradient exchange is made of, as (collective, algorithm, coefficients).

    Kept apart so a calibrated model can price each step with that step's own fitted parameters.
    """
    vb, ib = payload.value_bytes, payload.index_bytes
    p = np.asarray(ranks, dtype=float)
    if scheme == "dense":
        numel = np.asarray(numel, dtype=float)
        return [("allreduce", algorithms.allreduce, formula("allreduce", algorithms.allreduce)(numel * vb, p))]
    if scheme not in SCHEMES:
        raise InputError("scheme", scheme, "one of " + ", ".join(SCHEMES))
    k = topk_count(numel, ratio)
    if scheme == "topk-ag":
        gathered = formula("allgather", algorithms.allgather)(k * (vb + ib), p)
        # every rank scatter-adds the (p-1) k values it received into a dense buffer
        scatter_add = Coefficients(np.zeros_like(gathered.alpha), np.zeros_like(gathered.beta),
                                   np.where(p > 1, (p - 1) * k * vb, 0.0) + np.zeros_like(gathered.gamma))
        return [("allgather", algorithms.allgather, gathered + scatter_add)]
    parts = [
        ("broadcast", algorithms.broadcast, formula("broadcast", algorithms.broadcast)(k * ib, p)),
        ("allreduce", algorithms.allreduce, formula("allreduce", algorithms.allreduce)(k * vb, p)),
    ]
    if algorithms.index_owner == "var":
        parts.append(("allgather", algorithms.allgather, formula("allgather", algorithms.allgather)(
            np.full_like(k, 4.0), p)))
    elif algorithms.index_owner != "star":
        raise InputError("index_owner", algorithms.index_owner, "star or var")
    return parts


def scheme_coefficients(
    scheme: str,
    numel: ArrayLike,
    ranks: ArrayLike,
    ratio: ArrayLike,
    payload: SparsePayload = DEFAULT_PAYLOAD,
    algorithms: SchemeAlgorithms = DEFAULT_ALGORITHMS,
) -> Coefficients:
    """Coefficients of one gradient exchange of ``numel`` elements kept at ``ratio`` over ``ranks``."""
    parts = scheme_parts(scheme, numel, ranks, ratio, payload, algorithms)
    total = parts[0][2]
    for _, _, coef in parts[1:]:
        total = total + coef
    return total
