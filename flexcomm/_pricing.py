"""``flexcomm.cost`` and ``flexcomm.calibrate``: the cost model's questions as one call each.

Why a layer over :class:`~flexcomm.costmodel.cost_model.CostModel`: a user asking "how long is a 64 MiB
allreduce on 8 ranks at 10 Gbit/s?" should not have to build link parameters, pick a default algorithm
or convert units first. ``flexcomm cost`` (the CLI) calls :func:`cost` too, so the two never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flexcomm.costmodel.calibration import CalibrationProfile, fit, load_measurements
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.collective_libraries import fabric_fit
from flexcomm.costmodel.collective_libraries.algorithms import is_nccl_algorithm
from flexcomm.costmodel.collective_libraries.fabric_calibration import save_calibration
from flexcomm.costmodel.collective_libraries.fabric_fit import read_logs
from flexcomm.costmodel.collective_libraries.logs import looks_like_nccl_tests, read_nccl_tests, to_measurements
from flexcomm.costmodel.collectives import BUS_BANDWIDTH_FACTOR, CostBreakdown, algorithms, canonical_collective
from flexcomm.costmodel.compressed import (
    LOW_PRECISION_BYTES,
    PRICED_SCHEMES,
    SchemeAlgorithms,
    SparsePayload,
    powersgd_side,
)
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.ring_orders import ring_order
from flexcomm.costmodel.units import (
    coerce,
    format_bus_bandwidth,
    format_size,
    format_time,
    parse_bandwidth,
    parse_count,
    parse_size,
    parse_time,
)

if TYPE_CHECKING:
    import pandas as pd

    from flexcomm.costmodel.calibration import CalibrationProfile
    from flexcomm.costmodel.cluster import Cluster

__all__ = ["CallPrice", "Cost", "calibrate", "cost", "cost_model"]


@dataclass(frozen=True)
class CallPrice:
    """One library call of a scheme's exchange: what it moves and what the library runs for it."""

    collective: str
    nbytes: float
    #: what NCCL runs, e.g. ``NVLSTree/Simple``
    runs: str
    seconds: float
    #: the call as the library runs it (channels, chunk, time split): what ``--explain`` prints
    execution: Any = None


@dataclass(frozen=True)
class Cost:
    """One predicted time, split as the cost model splits it, with nccl-tests' bandwidth figures.

    ``str(cost)`` is the line ``flexcomm cost`` prints; :meth:`as_dict` is its ``--json`` object.
    """

    collective: str
    algorithm: str
    scheme: str | None
    ratio: float | None
    index_dtype: str | None
    ranks: int
    nbytes: float
    breakdown: CostBreakdown
    #: with ``algorithm="nccl..."``: what NCCL runs, e.g. ``NVLSTree/Simple``
    nccl_runs: str | None = None
    #: with ``algorithm="nccl..."``: the whole call as the library runs it (channels, chunk, time split)
    execution: Any = None
    #: with a scheme: PowerSGD's rank
    powersgd_rank: int | None = None
    #: with a scheme through ``nccl``: each call
    calls: tuple[CallPrice, ...] = ()
    #: with PowerSGD: the shape of its matrices as given (None: one square matrix)
    powersgd_matrix: str | None = None

    @property
    def seconds(self) -> float:
        return float(self.breakdown.total)

    @property
    def latency_s(self) -> float:
        return float(self.breakdown.latency)

    @property
    def bandwidth_s(self) -> float:
        return float(self.breakdown.bandwidth)

    @property
    def reduction_s(self) -> float:
        return float(self.breakdown.compute)

    @property
    def algorithm_bandwidth_Bps(self) -> float | None:
        """nccl-tests' algbw = S / t, where S is the allgather's *output* (p x m) and the message otherwise."""
        moved = self.nbytes * self.ranks if self.collective == "allgather" else self.nbytes
        return moved / self.seconds if self.seconds > 0 else None

    @property
    def bus_bandwidth_Bps(self) -> float | None:
        """nccl-tests' busbw = algbw x the collective's bus factor (None for a compressed scheme)."""
        algbw = self.algorithm_bandwidth_Bps
        if self.scheme or algbw is None:
            return None
        return float(BUS_BANDWIDTH_FACTOR[self.collective](np.float64(self.ranks))) * algbw

    def __float__(self) -> float:
        return self.seconds

    def __str__(self) -> str:
        if self.scheme:
            what = _scheme_words(self)
        else:
            what = f"{self.collective}/{self.algorithm}" + (f" ({self.nccl_runs})" if self.nccl_runs else "")
        bus = self.bus_bandwidth_Bps
        return (f"{what} over {self.ranks} ranks, {format_size(self.nbytes)}: {format_time(self.seconds)} "
                f"(latency {format_time(self.latency_s)}, bandwidth {format_time(self.bandwidth_s)}, "
                f"reduction {format_time(self.reduction_s)})"
                + (f"; {format_bus_bandwidth(bus)}" if bus is not None else "")
                + "".join(f"\n  {c.collective} {format_size(c.nbytes)}: {c.runs}, {format_time(c.seconds)}"
                          for c in self.calls))

    def as_dict(self) -> dict[str, Any]:
        return {"collective": self.collective, "algorithm": self.algorithm, "scheme": self.scheme,
                "ranks": self.ranks, "bytes": self.nbytes, **self.breakdown.as_dict(),
                "algorithm_bandwidth_Bps": self.algorithm_bandwidth_Bps, "bus_bandwidth_Bps": self.bus_bandwidth_Bps,
                **({"nccl_runs": self.nccl_runs} if self.nccl_runs else {}),
                **({"powersgd_rank": self.powersgd_rank} if self.powersgd_rank else {}),
                **({"calls": [{"collective": c.collective, "bytes": c.nbytes, "runs": c.runs, "seconds": c.seconds}
                              for c in self.calls]} if self.calls else {})}


def matrix_sides(text: str, elements: float) -> tuple[float, float]:
    """``4096x16384``: the gradient as ceil(elements / (rows x cols)) matrices of that shape; PowerSGD's P then
    carries rows x rank values per matrix and Q cols x rank (:meth:`SparsePayload.factor_sides`)."""
    try:
        rows, cols = (int(part) for part in str(text).lower().split("x"))
    except ValueError:
        raise InputError("powersgd-matrix", text, "ROWSxCOLS of each gradient matrix, e.g. 4096x16384") from None
    if rows < 1 or cols < 1 or rows * cols > elements:
        raise InputError("powersgd-matrix", text, f"ROWSxCOLS with both >= 1 and at most the gradient's "
                         f"{elements:.0f} elements, e.g. 4096x16384")
    count = math.ceil(elements / (rows * cols))
    return float(count * rows), float(count * cols)


def _scheme_words(result: Cost) -> str:
    """What a scheme's line says it priced: the ratio and indices of Top-k, PowerSGD's rank and layout."""
    if result.scheme in ("topk-ag", "topk-ar"):
        return f"{result.scheme} (ratio {result.ratio:g}, {result.index_dtype} indices)"
    if result.scheme == "powersgd":
        if result.powersgd_matrix:
            return f"powersgd (rank {result.powersgd_rank}, the gradient as {result.powersgd_matrix} matrices)"
        side = int(powersgd_side(max(1.0, result.nbytes / 4)))
        return f"powersgd (rank {result.powersgd_rank}, the gradient as one {side}x{side} matrix)"
    if result.scheme in LOW_PRECISION_BYTES:
        return f"{result.scheme} (dense allreduce in 2-byte values)"
    return "dense"


def cost_model(
    *,
    cluster: str | Path | Cluster | None = None,
    profile: str | Path | CalibrationProfile | None = None,
    latency: float | str | None = None,
    bandwidth: float | str | None = None,
    reduce_bandwidth: float | str | None = None,
    ranks_per_node: int | None = None,
) -> CostModel:
    """The model a cluster, a calibration profile or a latency/bandwidth pair describes (exactly one way)."""
    gamma = 1.0 / coerce(reduce_bandwidth, parse_bandwidth, "reduce-bandwidth") if reduce_bandwidth else 0.0
    if ranks_per_node is not None and (isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int)
                                       or ranks_per_node < 1):
        raise InputError("ranks-per-node", ranks_per_node, "an integer >= 1")
    if profile is not None and isinstance(profile, (str, Path)):

        profile = CalibrationProfile.load(profile)
    if cluster is not None:

        if latency is not None or bandwidth is not None:
            raise InputError("cluster", str(cluster), "either --cluster or --latency/--bandwidth, not both")
        model = CostModel.from_cluster(load_cluster(cluster), profile=profile, gamma=gamma)
        if ranks_per_node:
            model.ranks_per_node = ranks_per_node
        return model
    if profile is not None and bandwidth is None:
        return CostModel.from_profile(profile)
    if bandwidth is None or latency is None:
        missing = "bandwidth" if bandwidth is None else "latency"
        raise InputError(missing, "(missing)",
                         "--latency and --bandwidth (e.g. 10us, 10Gbit/s), or --cluster NAME|FILE")
    return CostModel.from_link(coerce(latency, parse_time, "latency"), coerce(bandwidth, parse_bandwidth, "bandwidth"),
                               gamma=gamma, ranks_per_node=ranks_per_node)


def _whole(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(name, value, f"an integer >= {minimum}")
    return int(value)


def default_cost_algorithm(cluster: Cluster | None, scheme: bool, order: str | list[int] = "rank") -> str | None:
    """What ``cost`` prices when no algorithm is named: on a cluster with a ``gpu_fabric`` every call as NCCL
    runs it (``simulate`` and ``whatif`` price it so; a flat ring there was 9x NCCL's price for 28 GB), unless a
    rank order is asked for, which only a formula's algorithm walks on its real paths; else None (the
    collective's first formula, ring for a scheme)."""
    if cluster is not None and cluster.gpu_fabric is not None and (scheme or order == "rank"):
        return "nccl"
    return None


def cost(
    collective: str = "allreduce",
    algorithm: str | None = None,
    *,
    ranks: int,
    size: float | str | None = None,
    numel: float | str | None = None,
    scheme: str | None = None,
    ratio: float = 0.01,
    index_dtype: str = "int32",
    cluster: str | Path | Cluster | None = None,
    profile: str | Path | CalibrationProfile | None = None,
    latency: float | str | None = None,
    bandwidth: float | str | None = None,
    reduce_bandwidth: float | str | None = None,
    ranks_per_node: int | None = None,
    order: str | list[int] = "rank",
    nccl_version: str | None = None,
    gpus_per_process: int = 1,
    powersgd_rank: int = 4,
    powersgd_matrix: str | None = None,
) -> Cost:
    """Predicted time of one collective, or with ``scheme`` of one compressed gradient exchange.

    ``size`` is bytes (``"64MiB"`` or a number): each rank's vector for allreduce, reduce-scatter,
    broadcast and all-to-all, each rank's *contribution* for allgather, and the dense fp32 gradient for
    a scheme (which may instead be given as ``numel`` elements). The network is ``cluster`` (a name, file
    or :class:`Cluster`), or ``latency`` + ``bandwidth``, optionally calibrated by ``profile``. ``order``
    (with a cluster): the group's rank order, ``rank``, ``rack-major``, ``rail-aligned``, ``random`` or an
    explicit list of ``ranks`` ranks; anything but ``rank`` prices the collective on its real paths. With
    ``algorithm="nccl..."``: ``nccl_version`` (default the cluster's) and ``gpus_per_process`` (GPUs one
    thread launches; 1 under torchrun) shape NCCL's price, and :attr:`Cost.execution` explains it.
    """
    ranks = _whole("ranks", ranks, 1)
    if (size is None) == (numel is None):
        raise InputError("size", size if numel is None else numel,
                         "exactly one of size (bytes, e.g. 64MiB) or numel (elements, e.g. 11.69M)")
    if numel is not None and not scheme:
        raise InputError("numel", numel, "size (bytes) for a collective; numel is for a scheme's gradient")
    # checked even without a scheme: a typo in a flag that does nothing this time is still a typo
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (math.isfinite(ratio) and 0 < ratio <= 1):
        raise InputError("ratio", ratio, "a fraction of elements kept in (0, 1], e.g. 0.01")
    payload, elements, nbytes = _sizes(size, numel, scheme, index_dtype, powersgd_matrix)
    if scheme and scheme not in PRICED_SCHEMES:
        raise InputError("scheme", scheme, "one of " + ", ".join(PRICED_SCHEMES))
    name = canonical_collective(collective)
    table = algorithms()
    if not scheme and name not in table:
        raise InputError("collective", collective, "one of " + ", ".join(table) + " (or all-to-all)")
    model = cost_model(cluster=cluster, profile=profile, latency=latency, bandwidth=bandwidth,
                       reduce_bandwidth=reduce_bandwidth, ranks_per_node=ranks_per_node)
    if algorithm is None and profile is None:  # a profile's fitted link is priced by the formulas
        algorithm = default_cost_algorithm(model.cluster, bool(scheme), order)
    if scheme:
        return _scheme_cost(model, scheme, algorithm, elements, nbytes, ranks, float(ratio), payload, index_dtype,
                            powersgd_rank, powersgd_matrix)
    return _collective_cost(model, name, algorithm or table[name][0], nbytes, ranks, order, gpus_per_process,
                            nccl_version)


def _sizes(size: float | str | None, numel: float | str | None, scheme: str | None, index_dtype: str,
           powersgd_matrix: str | None) -> tuple[SparsePayload | None, float, float]:
    """(payload, gradient elements, bytes) from ``size`` or ``numel``: a scheme's payload (its index type, and
    PowerSGD's matrix shape) or None for a plain collective."""
    SparsePayload(index_dtype=index_dtype).index_bytes  # noqa: B018  (validates the dtype)
    payload = SparsePayload(index_dtype=index_dtype) if scheme else None
    if numel is not None:
        elements = float(parse_count(numel, "numel"))
        nbytes = elements * payload.value_bytes
    else:
        nbytes = float(parse_size(size, "size"))
        elements = max(1.0, nbytes / payload.value_bytes) if payload else 0.0
    if powersgd_matrix is not None:
        if scheme != "powersgd":
            raise InputError("powersgd-matrix", powersgd_matrix, "--scheme powersgd (the shape of its matrices)")
        payload = replace(payload, matrix_sides=matrix_sides(powersgd_matrix, elements))
    return payload, elements, nbytes


def _collective_cost(model: CostModel, name: str, chosen_algorithm: str, nbytes: float, ranks: int,
                     order: str | list[int], gpus_per_process: int, nccl_version: str | None) -> Cost:
    """One collective priced by its formula (on its real paths for another rank ``order``) or as NCCL runs it."""
    if isinstance(order, str) and order == "rank" or is_nccl_algorithm(chosen_algorithm):
        breakdown = model.collective(name, chosen_algorithm, nbytes, ranks)
    else:
        if model.cluster is None:
            raise InputError("order", order, "a cluster to order ranks on (--cluster)")
        members = _ordered(model.cluster, ranks, order)
        breakdown = model.on_ranks(name, chosen_algorithm, nbytes, members)
    if is_nccl_algorithm(chosen_algorithm):
        choice = model.nccl_choice(name, chosen_algorithm, float(nbytes), int(ranks), None, gpus_per_process,
                                   nccl_version)
        breakdown = CostBreakdown(np.array(choice.latency_s), np.array(choice.bandwidth_s), np.array(0.0))
        return Cost(name, chosen_algorithm, None, None, None, ranks, nbytes, breakdown, choice.label,
                    choice.execution)
    return Cost(name, chosen_algorithm, None, None, None, ranks, nbytes, breakdown)


def _scheme_cost(model: CostModel, scheme: str, algorithm: str | None, elements: float, nbytes: float, ranks: int,
                 ratio: float, payload: SparsePayload, index_dtype: str, powersgd_rank: int,
                 powersgd_matrix: str | None) -> Cost:
    """One exchange priced by formulas on the cluster's links, or call by call as NCCL runs it."""
    rank = powersgd_rank if scheme == "powersgd" else None
    if algorithm is not None and is_nccl_algorithm(algorithm):
        chosen = SchemeAlgorithms(library=algorithm, powersgd_rank=powersgd_rank)
        calls = model.scheme_choices(scheme, elements, ranks, ratio, payload, chosen)
        breakdown = model.calls_breakdown(calls)
        runs = ", ".join(dict.fromkeys(choice.label for _, choice in calls))
        return Cost("allreduce", algorithm, scheme, ratio, index_dtype, ranks, nbytes, breakdown, runs,
                    calls[0][1].execution if len(calls) == 1 else None, rank,
                    tuple(CallPrice(m.collective, m.nbytes, c.label, c.seconds, c.execution) for m, c in calls),
                    powersgd_matrix)
    chosen = SchemeAlgorithms(allreduce=algorithm or "ring", powersgd_rank=powersgd_rank)
    breakdown = model.scheme(scheme, elements, ranks, ratio, payload, chosen)
    return Cost("allreduce", chosen.allreduce, scheme, ratio, index_dtype, ranks, nbytes, breakdown,
                powersgd_rank=rank, powersgd_matrix=powersgd_matrix)


def _ordered(cluster: Cluster, ranks: int, order: str | list[int]) -> list[int]:
    """The group ``0..ranks-1`` in ``order``, or an explicit list of ``ranks`` distinct ranks."""
    if isinstance(order, str):
        return ring_order(cluster, range(ranks), order)
    members = [int(r) for r in order]
    if len(members) != ranks or len(set(members)) != ranks:
        raise InputError("order", order, f"{ranks} distinct ranks of the cluster (as many as --ranks)")
    return members


def calibrate(measurements: str | Path | pd.DataFrame | Sequence[str | Path | pd.DataFrame],
              out: str | Path | None = None, loss: str = "cauchy", *, ranks: int | None = None,
              algorithm: str | None = None, link_class: str = "inter") -> CalibrationProfile:
    """Fit alpha and beta per (collective, algorithm, link class), as ``flexcomm calibrate`` does, from
    measurement CSVs or DataFrames (``collective, algorithm, ranks, bytes, seconds[, link_class]``) and
    nccl-tests logs pasted as they are (their out-of-place times; ``ranks``, ``algorithm`` and ``link_class``
    say what a log does not); saved to ``out`` when given."""
    import pandas as pd


    sources = [measurements] if isinstance(measurements, (str, Path, pd.DataFrame)) else list(measurements)
    if not sources:
        raise InputError("measurements", measurements, "a measurement CSV, DataFrame or nccl-tests log")
    tables = []
    for source in sources:
        if not isinstance(source, pd.DataFrame) and looks_like_nccl_tests(str(source)):
            tables.append(to_measurements(read_nccl_tests(str(source)), ranks=ranks, algorithm=algorithm,
                                          link_class=link_class))
        else:
            tables.append(load_measurements(source))
    profile = fit(load_measurements(pd.concat(tables, ignore_index=True)), loss=loss)
    if out is not None:
        profile.save(out)
    return profile


def calibrate_fabric(logs: str | Path | Sequence[str | Path], cluster: str | Path | Any,
                     out: str | Path | None = None) -> Any:
    """Fit the NCCL model's fabric parameters of ``cluster`` on its own nccl-tests logs (any collective, any node
    count; bench-collectives CSVs too), as ``flexcomm calibrate --cluster`` does: a
    :class:`~flexcomm.costmodel.collective_libraries.fabric_fit.FabricFit` (``.calibration``, the file's content;
    ``.rows``, every row described and calibrated), saved to ``out`` (YAML) when given."""
    paths = [logs] if isinstance(logs, (str, Path)) else list(logs)
    result = fabric_fit.calibrate_fabric(load_cluster(cluster), read_logs(paths))
    if out is not None:
        save_calibration(result.calibration, out)
    return result
