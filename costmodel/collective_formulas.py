"""Alpha-beta(-gamma) cost formulas of collective algorithms, vectorised over numpy arrays (their closed forms;
the registry that pairs each with its schedule is :mod:`costmodel.collectives`).

Every algorithm is written as *coefficients*: how many latency terms (``alpha``), how many bytes
cross the critical path's link (``beta``) and how many bytes are reduced on it (``gamma``).
A time is then ``alpha * a + beta * b + gamma * g`` for any link, and calibration can fit
``alpha`` and ``beta`` linearly from the same coefficients, so the simulator, the real backend
and the calibrator all share one definition.

Size conventions (bytes):

* allreduce, reduce-scatter, broadcast: ``nbytes`` is the full vector each rank holds (n).
* allgather: ``nbytes`` is what *each rank contributes* (m); the gathered result is p*m.
  (MPICH's comments use the gathered total n = p*m; the formulas below are the same.)
* all-to-all: ``nbytes`` is each rank's whole send buffer; n/p goes to every peer.

``lg p`` is ceil(log2 p). With one rank every collective costs nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from flexcomm.costmodel.errors import InputError

#: Segment size of the pipelined-ring broadcast (NCCL-like chunking).
PIPELINE_SEGMENT_BYTES = 512 * 1024


@dataclass(frozen=True)
class Coefficients:
    """Counts multiplying alpha (s), beta (s/byte) and gamma (s/byte reduced)."""

    alpha: np.ndarray
    beta: np.ndarray
    gamma: np.ndarray

    def __add__(self, other: Coefficients) -> Coefficients:
        return Coefficients(self.alpha + other.alpha, self.beta + other.beta, self.gamma + other.gamma)

    def time(self, alpha: ArrayLike, beta: ArrayLike, gamma: ArrayLike = 0.0) -> CostBreakdown:
        """Price these coefficients on a link with latency ``alpha`` and ``beta`` = 1/bandwidth."""
        return CostBreakdown(
            latency=self.alpha * np.asarray(alpha, dtype=float),
            bandwidth=self.beta * np.asarray(beta, dtype=float),
            compute=self.gamma * np.asarray(gamma, dtype=float),
        )


@dataclass(frozen=True)
class CostBreakdown:
    """Predicted seconds split into latency, bandwidth and reduction-compute parts."""

    latency: np.ndarray
    bandwidth: np.ndarray
    compute: np.ndarray

    def __post_init__(self) -> None:
        """A scalar question gets scalar answers: plain floats, not 0-d arrays or numpy scalars."""
        for name in ("latency", "bandwidth", "compute"):
            value = getattr(self, name)
            if np.ndim(value) == 0:
                object.__setattr__(self, name, float(value))

    @property
    def total(self) -> np.ndarray:
        return self.latency + self.bandwidth + self.compute

    def __add__(self, other: CostBreakdown) -> CostBreakdown:
        return CostBreakdown(
            self.latency + other.latency, self.bandwidth + other.bandwidth, self.compute + other.compute
        )

    def as_dict(self) -> dict[str, float | list[float]]:
        """JSON-friendly view (scalars when the inputs were scalars), keyed as :class:`flexcomm.Cost`'s
        attributes are named (``seconds``, ``latency_s``, ``bandwidth_s``, ``reduction_s``)."""

        def plain(x: np.ndarray) -> float | list[float]:
            arr = np.asarray(x, dtype=float)
            return float(arr) if arr.ndim == 0 else arr.tolist()

        return {
            "seconds": plain(self.total),
            "latency_s": plain(self.latency),
            "bandwidth_s": plain(self.bandwidth),
            "reduction_s": plain(self.compute),
        }


def _prepare(nbytes: ArrayLike, ranks: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(nbytes, dtype=float)
    p = np.asarray(ranks, dtype=float)
    if np.any(~np.isfinite(n)) or np.any(n < 0):
        raise InputError("size", nbytes, "non-negative finite bytes")
    if np.any(~np.isfinite(p)) or np.any(p < 1) or np.any(p != np.floor(p)):
        raise InputError("ranks", ranks, "an integer >= 1")
    return np.broadcast_arrays(n, p)


def ceil_log2(p: np.ndarray) -> np.ndarray:
    """ceil(log2 p) exactly for integer p >= 1 (floating log2 can be off by one ulp)."""
    p = np.asarray(p, dtype=float)
    _, exponent = np.frexp(p)  # p = m * 2**e with m in [0.5, 1)
    exact_power = np.exp2(exponent - 1) == p
    return np.where(exact_power, exponent - 1, exponent).astype(float)


def floor_log2(p: np.ndarray) -> np.ndarray:
    """floor(log2 p) exactly for integer p >= 1."""
    _, exponent = np.frexp(np.asarray(p, dtype=float))
    return (exponent - 1).astype(float)


def _coef(alpha: np.ndarray, beta: np.ndarray, gamma: np.ndarray | float, p: np.ndarray) -> Coefficients:
    one = p <= 1
    zero = np.zeros_like(p)
    gamma = np.broadcast_to(np.asarray(gamma, dtype=float), p.shape)
    return Coefficients(np.where(one, zero, alpha), np.where(one, zero, beta), np.where(one, zero, gamma))


# --- allreduce --------------------------------------------------------------------------------


def allreduce_ring(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Ring allreduce (reduce-scatter then allgather around a ring).

    T = 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma.
    Patarasuk & Yuan, JPDC 2009; Thakur, Rabenseifner & Gropp, IJHPCA 2005.
    """
    n, p = _prepare(nbytes, ranks)
    return _coef(2 * (p - 1), 2 * (p - 1) / p * n, (p - 1) / p * n, p)


def allreduce_recursive_doubling(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Recursive-doubling allreduce: lg p rounds, each exchanging and reducing the whole vector.

    T = lg p alpha + n lg p beta + n lg p gamma for p a power of two (Thakur et al. 2005).
    Otherwise MPICH first folds the p - p' extra ranks into p' = 2^floor(lg p) ranks and unfolds
    them at the end: two more rounds carrying n, one more reduction.
    """
    n, p = _prepare(nbytes, ranks)
    lg = floor_log2(p)
    extra = np.where(np.exp2(lg) == p, 0.0, 2.0)
    return _coef(lg + extra, n * (lg + extra), n * (lg + np.minimum(extra, 1.0)), p)


def allreduce_tree(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Non-pipelined binomial-tree allreduce: a binomial reduce then a binomial broadcast.

    T = 2 lg p alpha + 2 lg p n beta + lg p n gamma.
    The form used by Tyagi & Swany, IEEE BigData 2023 (arXiv 2312.02493), Table I.
    """
    n, p = _prepare(nbytes, ranks)
    lg = ceil_log2(p)
    return _coef(2 * lg, 2 * lg * n, lg * n, p)


def allreduce_rabenseifner(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Rabenseifner allreduce: recursive-halving reduce-scatter, recursive-doubling allgather.

    T = 2 lg p alpha + 2(p-1)/p n beta + (p-1)/p n gamma (Rabenseifner 2004; Thakur et al. 2005).
    Same bandwidth term as the ring, logarithmic instead of linear latency.
    """
    n, p = _prepare(nbytes, ranks)
    lg = ceil_log2(p)
    return _coef(2 * lg, 2 * (p - 1) / p * n, (p - 1) / p * n, p)


# --- allgather (nbytes = per-rank contribution m) ---------------------------------------------


def allgather_ring(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Ring allgather: T = (p-1) alpha + (p-1) m beta (Thakur et al. 2005, with n = p m)."""
    m, p = _prepare(nbytes, ranks)
    return _coef(p - 1, (p - 1) * m, 0.0, p)


def allgather_recursive_doubling(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Recursive-doubling allgather: T = lg p alpha + (p-1) m beta (Thakur et al. 2005).

    Exact for p a power of two; MPICH switches to Bruck otherwise, whose cost is the same form.
    """
    m, p = _prepare(nbytes, ranks)
    return _coef(ceil_log2(p), (p - 1) * m, 0.0, p)


def allgather_bruck(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Bruck allgather: T = ceil(lg p) alpha + (p-1) m beta for any p (Bruck et al., IEEE TPDS 1997)."""
    m, p = _prepare(nbytes, ranks)
    return _coef(ceil_log2(p), (p - 1) * m, 0.0, p)


# --- reduce-scatter, broadcast, all-to-all ----------------------------------------------------


def reduce_scatter_ring(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Ring reduce-scatter: T = (p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma (Thakur et al. 2005)."""
    n, p = _prepare(nbytes, ranks)
    return _coef(p - 1, (p - 1) / p * n, (p - 1) / p * n, p)


def broadcast_binomial(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Binomial-tree broadcast: T = lg p (alpha + n beta) (Thakur et al. 2005)."""
    n, p = _prepare(nbytes, ranks)
    lg = ceil_log2(p)
    return _coef(lg, lg * n, 0.0, p)


def binomial_async_children(p: int) -> list[list[int]]:
    """Children of every virtual rank in gloo's binomial broadcast (``gloo/broadcast.cc``): in round i (from
    the least significant bit up) a rank with bits 0..i clear sends to the rank with bit i set, *without
    waiting* for its earlier sends, so a rank sends to all its children at once."""
    children: list[list[int]] = [[] for _ in range(p)]
    for i in range(max(p - 1, 0).bit_length()):
        for v in range(0, p, 1 << (i + 1)):
            if v + (1 << i) < p:
                children[v].append(v + (1 << i))
    return children


@functools.lru_cache(maxsize=4096)
def _binomial_async_terms(p: int) -> tuple[float, float]:
    """(hops, bandwidth multiple) of the last rank to receive in gloo's binomial broadcast: a rank with k
    children feeds them all at once through one uplink, so each finishes k n beta after the rank received."""
    children = binomial_async_children(p)
    depth, load = [0.0] * p, [0.0] * p
    for v in range(p):
        for c in children[v]:
            depth[c], load[c] = depth[v] + 1, load[v] + len(children[v])
    last = max(range(p), key=lambda v: (load[v], depth[v]))
    return depth[last], load[last]


def broadcast_binomial_async(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """gloo's binomial broadcast (``gloo/broadcast.cc``, what torch's ProcessGroupGloo runs on CPU tensors).

    The tree is binomial, but a rank issues its sends of every later round at once (gloo only waits for
    pending sends at the end), so they share its uplink: the root's ceil(lg p) children all receive after
    ceil(lg p) n beta. T = hops alpha + L n beta, L = the largest sum over a root-to-leaf path of each
    ancestor's child count (p = 4: L = 3, where ``binomial`` says 2; p = 8: 6 against 3). With alpha
    per hop along that path."""
    n, p = _prepare(nbytes, ranks)
    hops = np.vectorize(lambda q: _binomial_async_terms(int(q))[0] if q > 1 else 0.0, otypes=[float])(p)
    load = np.vectorize(lambda q: _binomial_async_terms(int(q))[1] if q > 1 else 0.0, otypes=[float])(p)
    return _coef(hops, load * n, 0.0, p)


def broadcast_pipelined_ring(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Pipelined chain (ring) broadcast in S = ceil(n/s) segments of s = ``PIPELINE_SEGMENT_BYTES``.

    T = (p - 2 + S) alpha + (n + (p - 2) min(n, s)) beta: all S segments cross the root's link,
    then the largest one needs p - 2 more hops (a proportionate flow shop; Träff & Ripke 2008;
    NCCL's fixed-size chunks). Equals (p - 2 + S)(alpha + n/S beta) when s divides n, and unlike
    that form never predicts a larger message to be faster. Tends to n beta for large n.
    """
    n, p = _prepare(nbytes, ranks)
    segments = np.maximum(1.0, np.ceil(n / PIPELINE_SEGMENT_BYTES))
    largest = np.minimum(n, PIPELINE_SEGMENT_BYTES)
    return _coef(p - 2 + segments, n + (p - 2) * largest, 0.0, p)


def broadcast_scatter_allgather(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Van de Geijn broadcast: binomial scatter, then ring allgather.

    T = (lg p + p - 1) alpha + 2(p-1)/p n beta (Thakur et al. 2005).
    """
    n, p = _prepare(nbytes, ranks)
    return _coef(ceil_log2(p) + p - 1, 2 * (p - 1) / p * n, 0.0, p)


def alltoall_pairwise(nbytes: ArrayLike, ranks: ArrayLike) -> Coefficients:
    """Pairwise-exchange all-to-all: T = (p-1) alpha + (p-1)/p n beta (Thakur et al. 2005)."""
    n, p = _prepare(nbytes, ranks)
    return _coef(p - 1, (p - 1) / p * n, 0.0, p)


Formula = Callable[[ArrayLike, ArrayLike], Coefficients]
