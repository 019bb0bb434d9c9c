"""The one registry of collective algorithms: each (collective, algorithm) with its closed form, its message
schedule and what it stands for, and the lookups every engine prices through.

Why one table: the cost model prices an algorithm by its formula (:mod:`costmodel.collective_formulas`), the
flow simulator and the path pricer run its schedule (:mod:`costmodel.schedules`); kept in two dictionaries in
step by hand, an algorithm could gain one and not the other. Here an entry holds both, so "the formula agrees
with the schedule" is a property checked per entry (``tests/test_collectives.py``), and :data:`FORMULAS` and
:data:`SCHEDULES` are views of the same entries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

import flexcomm.costmodel.collective_formulas as formulas
import flexcomm.costmodel.schedules as schedules
from flexcomm.costmodel.collective_formulas import Coefficients, CostBreakdown, Formula
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.schedules import Schedule, Segment, ring_allgather, ring_reduce_scatter
from flexcomm.costmodel.units import coerce, parse_bandwidth, parse_size, parse_time

__all__ = ["ALGORITHMS", "BUS_BANDWIDTH_FACTOR", "FORMULAS", "HIERARCHICAL", "SCHEDULES", "CollectiveAlgorithm",
           "Coefficients", "CostBreakdown", "Formula", "algorithms", "canonical_collective", "collective_plan",
           "formula", "predict"]

#: Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in MPICH" (IJHPCA 2005).
_MPICH = "MPICH (Thakur, Rabenseifner and Gropp 2005)"


@dataclass(frozen=True)
class CollectiveAlgorithm:
    """One algorithm of one collective: its closed form, its schedule of synchronous steps, and the library (with
    the source the formula cites) whose algorithm it is."""

    collective: str
    algorithm: str
    #: alpha/beta/gamma coefficients for (bytes, ranks), vectorised
    formula: Formula
    #: the same algorithm as steps of flows over local ranks 0..p-1, for (ranks, bytes, steps)
    schedule: Schedule
    #: whose algorithm this is, as the formula's source names it
    implemented_by: str

    @property
    def key(self) -> tuple[str, str]:
        return self.collective, self.algorithm


#: Every single-link algorithm. The two-level hierarchical allreduce composes these over two link classes
#: (:func:`collective_plan`, :mod:`costmodel.cost_model`).
ALGORITHMS: dict[tuple[str, str], CollectiveAlgorithm] = {a.key: a for a in (
    CollectiveAlgorithm("allreduce", "ring", formulas.allreduce_ring, schedules.allreduce_ring,
                        "a ring reduce-scatter then allgather: NCCL's ring, " + _MPICH),
    CollectiveAlgorithm("allreduce", "recursive-doubling", formulas.allreduce_recursive_doubling,
                        schedules.allreduce_recursive_doubling, _MPICH),
    CollectiveAlgorithm("allreduce", "tree", formulas.allreduce_tree, schedules.allreduce_tree,
                        "a binomial reduce then a binomial broadcast, " + _MPICH + " (not NCCL's pipelined tree)"),
    CollectiveAlgorithm("allreduce", "rabenseifner", formulas.allreduce_rabenseifner,
                        schedules.allreduce_rabenseifner, "Rabenseifner 2004, in " + _MPICH),
    CollectiveAlgorithm("allgather", "ring", formulas.allgather_ring, schedules.allgather_ring, _MPICH),
    CollectiveAlgorithm("allgather", "recursive-doubling", formulas.allgather_recursive_doubling,
                        schedules.allgather_recursive_doubling, _MPICH + ", for p a power of two"),
    CollectiveAlgorithm("allgather", "bruck", formulas.allgather_bruck, schedules.allgather_bruck,
                        "Bruck et al. 1997, MPICH's allgather for other p"),
    CollectiveAlgorithm("reduce-scatter", "ring", formulas.reduce_scatter_ring, schedules.reduce_scatter_ring, _MPICH),
    CollectiveAlgorithm("broadcast", "binomial", formulas.broadcast_binomial, schedules.broadcast_binomial, _MPICH),
    CollectiveAlgorithm("broadcast", "binomial-async", formulas.broadcast_binomial_async,
                        schedules.broadcast_binomial_async,
                        "gloo's broadcast (gloo/broadcast.cc), what torch's ProcessGroupGloo runs on CPU tensors"),
    CollectiveAlgorithm("broadcast", "pipelined-ring", formulas.broadcast_pipelined_ring,
                        schedules.broadcast_pipelined_ring, "a chain in 512 KiB segments, as NCCL chunks its ring"),
    CollectiveAlgorithm("broadcast", "scatter-allgather", formulas.broadcast_scatter_allgather,
                        schedules.broadcast_scatter_allgather, "van de Geijn's broadcast, in " + _MPICH),
    CollectiveAlgorithm("alltoall", "pairwise", formulas.alltoall_pairwise, schedules.alltoall_pairwise, _MPICH),
)}

#: Each algorithm's closed form: a view of :data:`ALGORITHMS`.
FORMULAS: dict[tuple[str, str], Formula] = {key: entry.formula for key, entry in ALGORITHMS.items()}
#: Each algorithm's schedule: a view of :data:`ALGORITHMS`.
SCHEDULES: dict[tuple[str, str], Schedule] = {key: entry.schedule for key, entry in ALGORITHMS.items()}

HIERARCHICAL = ("allreduce", "hierarchical")

#: nccl-tests' bus-bandwidth factor: bus_bw = algorithm bytes / time * factor (PERFORMANCE.md).
BUS_BANDWIDTH_FACTOR: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "reduce-scatter": lambda p: (p - 1) / p,
    "allgather": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p,
    "broadcast": lambda p: np.ones_like(p, dtype=float),
}


def algorithms() -> dict[str, list[str]]:
    """Known algorithms per collective, hierarchical included."""
    table: dict[str, list[str]] = {}
    for collective, algorithm in [*FORMULAS, HIERARCHICAL]:
        table.setdefault(collective, []).append(algorithm)
    return table


#: Other spellings people write for a collective (the README says all-to-all, NCCL alltoall, MPI Alltoall).
COLLECTIVE_ALIASES = {"all-to-all": "alltoall", "all_to_all": "alltoall", "all-reduce": "allreduce",
                      "all-gather": "allgather", "reduce_scatter": "reduce-scatter", "reducescatter": "reduce-scatter"}


def canonical_collective(name: str) -> str:
    """The formula table's name of a collective: ``all-to-all`` -> ``alltoall``, case and spaces ignored."""
    key = str(name).strip().lower()
    return COLLECTIVE_ALIASES.get(key, key)


def formula(collective: str, algorithm: str) -> Formula:
    """Look up a single-link formula, with a clear error naming what exists."""
    collective = canonical_collective(collective)
    table = algorithms()
    if collective not in table:
        raise InputError("collective", collective, "one of " + ", ".join(sorted(table)) + " (or all-to-all)")
    if (collective, algorithm) not in FORMULAS:
        raise InputError("algorithm", algorithm, f"for {collective} one of " + ", ".join(table[collective]))
    return FORMULAS[(collective, algorithm)]


def _one_of(field: str, positional: ArrayLike | None, keyword: ArrayLike | None) -> ArrayLike:
    """The link parameter given once, by its unit name (``latency_s``) or as :func:`flexcomm.cost` names it."""
    if positional is not None and keyword is not None:
        unit = "latency_s" if field == "latency" else "bandwidth_Bps"
        raise InputError(field, "given twice", f"one of {field}= and {unit}=")
    if positional is None and keyword is None:
        raise InputError(field, None, f"the link's {field}, e.g. {field}=" + ('"10us"' if field == "latency"
                                                                               else '"10Gbit/s"'))
    return positional if positional is not None else keyword  # type: ignore[return-value]


def predict(
    collective: str,
    algorithm: str,
    nbytes: ArrayLike,
    ranks: ArrayLike,
    latency_s: ArrayLike | None = None,
    bandwidth_Bps: ArrayLike | None = None,
    gamma: ArrayLike = 0.0,
    *,
    latency: ArrayLike | None = None,
    bandwidth: ArrayLike | None = None,
) -> CostBreakdown:
    """Vectorised prediction on a single link class: every argument may be a numpy array.

    The fast path for sweeps (millions of configurations per second); :class:`costmodel.cost_model.CostModel`
    adds clusters, calibration profiles and the two-level hierarchical allreduce on top. ``nbytes``,
    ``latency_s`` and ``bandwidth_Bps`` also take unit strings (``"64MiB"``, ``"10us"``, ``"10Gbit/s"``);
    ``latency=`` and ``bandwidth=`` name them as :func:`flexcomm.cost` does.
    """
    latency_s = _one_of("latency", latency_s, latency)
    bandwidth_Bps = _one_of("bandwidth", bandwidth_Bps, bandwidth)
    nbytes = coerce(nbytes, parse_size, "nbytes")
    latency_s = coerce(latency_s, parse_time, "latency")
    bandwidth_Bps = coerce(bandwidth_Bps, parse_bandwidth, "bandwidth")
    bandwidth = np.asarray(bandwidth_Bps, dtype=float)
    if np.any(~(bandwidth > 0)):
        raise InputError("bandwidth", bandwidth_Bps, "a positive bandwidth in bytes/s")
    latency = np.asarray(latency_s, dtype=float)
    if np.any(~(latency >= 0)):
        raise InputError("latency", latency_s, "a non-negative latency in seconds")
    return formula(collective, algorithm)(nbytes, ranks).time(latency, 1.0 / bandwidth, gamma)


def node_groups(cluster: Any, ranks: np.ndarray) -> np.ndarray:
    """The ranks as a (nodes x q) matrix, nodes in order of first appearance."""
    order: dict[int, list[int]] = {}
    for r in ranks.tolist():
        order.setdefault(cluster.node_of(r), []).append(r)
    sizes = {len(v) for v in order.values()}
    if len(sizes) != 1:
        raise InputError("ranks", ranks.tolist(),
                         "the same number of ranks on every node for the hierarchical allreduce")
    return np.array(list(order.values()), dtype=np.int64)


def collective_plan(cluster: Any, collective: str, algorithm: str, ranks: np.ndarray, nbytes: float,
                    steps: bool = False, inter_algorithm: str = "ring", tag: str = "") -> list[Segment]:
    """One collective over ``ranks`` (in that order) as segments of steps over rank matrices.

    The hierarchical allreduce runs an intra-node ring reduce-scatter, then q inter-node allreduces of n/q
    at once (instance j: local rank j of every node) and an intra-node ring allgather. On a rail-optimized
    fabric local rank j owns NIC j, so instance j runs on its own rail: this *is* the rail-aware
    hierarchical allreduce NCCL runs there; on a one-NIC node the q instances share the NIC.
    """
    prefix = f"{tag}:" if tag else ""
    if (collective, algorithm) == HIERARCHICAL:
        formula("allreduce", inter_algorithm)  # validates the name
        nodes = node_groups(cluster, ranks)
        n_nodes, q = nodes.shape
        name = f"{prefix}allreduce/hierarchical"
        return [
            (nodes, ring_reduce_scatter(q, nbytes, steps, "intra-reduce-scatter"), name),
            (nodes.T.copy(), SCHEDULES[("allreduce", inter_algorithm)](n_nodes, nbytes / q, steps),
             f"{name}/inter-{inter_algorithm}"),
            (nodes, ring_allgather(q, nbytes / q, steps, "intra-allgather"), name),
        ]
    formula(collective, algorithm)  # clear InputError for unknown names
    schedule = SCHEDULES[(collective, algorithm)]
    return [(ranks[None, :], schedule(len(ranks), nbytes, steps), f"{prefix}{collective}/{algorithm}")]
