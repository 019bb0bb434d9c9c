"""Prices of the gradient-exchange *schemes*: dense allreduce, the two sparse Top-k exchanges, PowerSGD and
low precision.

A scheme is a recipe of collectives over a payload of values plus indices, so its cost is a sum
of :mod:`costmodel.collectives` coefficients and stays vectorised:

* ``dense``: allreduce of all ``numel`` values.
* ``topk-ag`` (Top-k over Allgather): every rank contributes its own k values *and* k indices;
  each rank then scatter-adds the p*k received pairs (the gamma term).
* ``topk-ar`` (Allreduce-compatible Top-k, STAR/VAR of Tyagi & Swany 2023, Algorithm 1): one owner
  broadcasts its k indices, then all ranks allreduce their own k values at those indices.
  ``index_owner="var"`` adds VAR's allgather of one fp32 norm per rank to elect the owner.

* ``powersgd`` (Vogels et al. 2019, PyTorch's ``powerSGD_hook``): rank r, allreduce of P (side x r) then
  of Q (side x r), both in the gradient's dtype, summed over the gradient's matrices: one square matrix
  per layer where the layers are known (:func:`powersgd_sides`), else the gradient as one square matrix of
  side ceil(sqrt(numel)) (all ``cost`` can know from a size; said where printed).
* ``fp16`` / ``bf16``: the dense allreduce in 2-byte values (PyTorch's ``fp16_compress_hook`` /
  ``bf16_compress_hook``); the casts are device work, priced with the compression, not here.

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

#: The paper's three exchanges (the flexible switch, the reproductions and the ratio optimiser use these).
SCHEMES = ("dense", "topk-ag", "topk-ar")
#: Every exchange the cost model prices (``cost --scheme``, ``whatif`` on GPU clusters, ``simulate``).
PRICED_SCHEMES = (*SCHEMES, "powersgd", "fp16", "bf16")
#: Schemes that send the dense gradient in another dtype: their value bytes.
LOW_PRECISION_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2}
#: The element types NCCL (and RCCL) reduce and gather (``ncclDataType_t``; there is no 16-bit integer).
NCCL_DTYPES = ("int8", "uint8", "int32", "int64", "float16", "fp16", "float32", "fp32", "float64", "fp64",
               "bfloat16", "bf16")
#: PyTorch's ``PowerSGDState`` default is rank 1; Vogels et al. train with 2-4. flexcomm prices rank 4.
DEFAULT_POWERSGD_RANK = 4


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
    #: PowerSGD: the sum of the sides of the gradient's matrices (one ceil(sqrt(n)) per layer, see
    #: :func:`powersgd_sides`), or (sum of rows, sum of columns) for P and Q apart; None: the whole gradient
    #: as one square matrix (all a size tells)
    matrix_sides: float | tuple[float, float] | None = None

    def factor_sides(self, numel: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """PowerSGD's P and Q sides (rows, columns summed over the matrices) for a gradient of ``numel``."""
        if self.matrix_sides is None:
            side = powersgd_side(numel)
            return side, side
        if isinstance(self.matrix_sides, tuple):
            return np.asarray(self.matrix_sides[0], float), np.asarray(self.matrix_sides[1], float)
        side = np.asarray(self.matrix_sides, dtype=float)
        return side, side

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
    powersgd_rank: int = DEFAULT_POWERSGD_RANK
    #: ``nccl[:ALGO][/PROTO]``: every call runs through that library as it runs them (priced by
    #: ``CostModel.nccl_choice``); the formula algorithms above then only size the calls.
    library: str | None = None

    def __post_init__(self) -> None:
        rank = self.powersgd_rank
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
            raise InputError("powersgd-rank", rank, "an integer >= 1 (the rank of PowerSGD's low-rank factors)")


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
    allreduce = formula("allreduce", algorithms.allreduce)
    if scheme in ("dense", *LOW_PRECISION_BYTES):
        numel = np.asarray(numel, dtype=float)
        width = LOW_PRECISION_BYTES.get(scheme, vb)
        return [("allreduce", algorithms.allreduce, allreduce(numel * width, p))]
    if scheme not in PRICED_SCHEMES:
        raise InputError("scheme", scheme, "one of " + ", ".join(PRICED_SCHEMES))
    if scheme == "powersgd":
        rows, cols = payload.factor_sides(numel)
        r = algorithms.powersgd_rank * vb
        return [("allreduce", algorithms.allreduce, allreduce(rows * r, p)),
                ("allreduce", algorithms.allreduce, allreduce(cols * r, p))]
    k = topk_count(numel, ratio)
    if scheme == "topk-ag":
        gathered = formula("allgather", algorithms.allgather)(k * (vb + ib), p)
        # every rank scatter-adds the (p-1) k values it received into a dense buffer
        scatter_add = Coefficients(np.zeros_like(gathered.alpha), np.zeros_like(gathered.beta),
                                   np.where(p > 1, (p - 1) * k * vb, 0.0) + np.zeros_like(gathered.gamma))
        return [("allgather", algorithms.allgather, gathered + scatter_add)]
    parts = [
        ("broadcast", algorithms.broadcast, formula("broadcast", algorithms.broadcast)(k * ib, p)),
        ("allreduce", algorithms.allreduce, allreduce(k * vb, p)),
    ]
    if algorithms.index_owner == "var":
        parts.append(("allgather", algorithms.allgather, formula("allgather", algorithms.allgather)(
            np.full_like(k, 4.0), p)))
    elif algorithms.index_owner != "star":
        raise InputError("index_owner", algorithms.index_owner, "star or var")
    return parts


def powersgd_side(numel: ArrayLike) -> np.ndarray:
    """Side of the square matrix PowerSGD's factors are priced on: ceil(sqrt(numel)), at least 1."""
    numel = np.asarray(numel, dtype=float)
    if np.any(numel < 1):
        raise InputError("numel", numel.tolist() if numel.ndim else float(numel), "an element count >= 1")
    return np.ceil(np.sqrt(numel))


def scheme_memory_bytes(scheme: str, numel: float, payload: SparsePayload | None = None,
                        powersgd_rank: int = DEFAULT_POWERSGD_RANK) -> float:
    """Device memory a scheme keeps beside the model for a gradient of ``numel`` elements: the fp32
    error-feedback residual of Top-k and PowerSGD (torch's PowerSGD hook keeps it with its P and Q
    factors, which are counted too); casts to fp16/bf16 and dense keep nothing."""
    if scheme in ("topk-ag", "topk-ar"):
        return 4.0 * numel
    if scheme == "powersgd":
        rows, cols = (payload or SparsePayload()).factor_sides(numel)
        return 4.0 * numel + 4.0 * powersgd_rank * float(np.sum(rows) + np.sum(cols))
    return 0.0


def powersgd_sides(layer_params: ArrayLike) -> float:
    """Sum of the matrix sides PowerSGD's factors take for layers of these parameter counts, each layer
    viewed as a square matrix (flexcomm's layers keep counts, not shapes; a conv's out x in*k*k is
    closer to square than the bucket it sits in). Layers without parameters add nothing."""
    params = np.asarray(layer_params, dtype=float)
    return float(np.ceil(np.sqrt(params[params > 0])).sum())


@dataclass(frozen=True)
class Message:
    """One collective of a scheme as a library call: what, which algorithm, its size in flexcomm's units
    (allgather: each rank's contribution), and reduction work the collective itself does not do."""

    collective: str
    algorithm: str
    nbytes: float
    extra_reduce_bytes: float = 0.0


def scheme_messages(
    scheme: str,
    numel: float,
    ranks: int,
    ratio: float,
    payload: SparsePayload = DEFAULT_PAYLOAD,
    algorithms: SchemeAlgorithms = DEFAULT_ALGORITHMS,
) -> list[Message]:
    """One exchange as the calls a library runs, in order: the sizes behind :func:`scheme_parts`'s
    coefficients (checked against them, so a call-by-call price cannot drift from the formulas).

    Sizes: values n vb (dense; 2 n for fp16/bf16); k (vb + ib) per rank for topk-ag (values and indices
    packed in one allgather, as :class:`~compression.compressors.TopkAllgather` sends them); k ib indices
    then k vb values for topk-ar (plus one 4-byte norm per rank for VAR); side x rank values for each of
    PowerSGD's P and Q. Reduction the collective does not do (topk-ag's scatter-add) is extra reduce bytes.
    """
    parts = scheme_parts(scheme, numel, ranks, ratio, payload, algorithms)
    vb, ib = payload.value_bytes, payload.index_bytes
    if scheme in ("dense", *LOW_PRECISION_BYTES):
        sizes = [float(numel) * LOW_PRECISION_BYTES.get(scheme, vb)]
    elif scheme == "powersgd":
        rows, cols = payload.factor_sides(numel)
        sizes = [float(rows) * algorithms.powersgd_rank * vb, float(cols) * algorithms.powersgd_rank * vb]
    else:
        k = float(topk_count(numel, ratio))
        sizes = [k * (vb + ib)] if scheme == "topk-ag" else [k * ib, k * vb]
        if scheme == "topk-ar" and algorithms.index_owner == "var":
            sizes.append(4.0)  # one fp32 norm per rank to elect the owner
    if len(sizes) != len(parts):
        raise AssertionError(f"scheme_parts lists {len(parts)} collectives for {scheme}, scheme_messages {len(sizes)}")
    messages = []
    for (collective, algorithm, coef), nbytes in zip(parts, sizes, strict=True):
        own = formula(collective, algorithm)(nbytes, ranks)
        if not (np.allclose(own.beta, coef.beta) and np.allclose(own.alpha, coef.alpha)):
            raise AssertionError(f"scheme_messages and scheme_parts disagree on the size of {scheme}'s {collective}")
        messages.append(Message(collective, algorithms.library or algorithm, nbytes, float(coef.gamma - own.gamma)))
    return messages


def check_library_dtypes(scheme: str, payload: SparsePayload) -> None:
    """NCCL and RCCL reduce and gather only ``ncclDataType_t``'s types: a 16-bit integer index (PyTorch's
    ``kShort``) is refused by ProcessGroupNCCL, so a scheme sending one cannot run as an NCCL collective."""
    if scheme in ("topk-ag", "topk-ar") and payload.index_dtype not in NCCL_DTYPES:
        raise InputError("index-dtype", payload.index_dtype, "a type NCCL can send (int8, uint8, int32 or int64; "
                         f"NCCL has no {payload.index_dtype}) for {scheme} through NCCL")
    if payload.value_dtype not in NCCL_DTYPES:
        raise InputError("value-dtype", payload.value_dtype, "a type NCCL reduces (fp32, fp16, bf16, fp64)")


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
