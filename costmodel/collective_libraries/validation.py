"""Predict every row of an nccl-tests log with the cost model of a cluster, and tabulate the errors.

Why a table rather than one number: a user pasting a GPU run wants to see *where* the model misses (small
messages priced by latency, large ones by bandwidth), so every row keeps its size, measured and predicted
seconds and relative error; the summary is over rows >= 1 MiB (``SUMMARY_MIN_BYTES``), where the
bandwidth term dominates and a published run is most often complete. A log whose smallest row is above
1 MiB is reported as partial. ``algorithm`` and ``protocol`` are what the cost model priced: on a cluster
with a ``gpu_fabric`` the NCCL-grade model's choice per row (:mod:`costmodel.collective_libraries.call_cost`), else the
alpha-beta formula's algorithm and no protocol.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from flexcomm.costmodel.cluster_parts import LIBRARY_VENDOR, VENDOR_NAMES
from flexcomm.costmodel.collective_libraries.algorithms import P2P, TUNED, is_nccl_algorithm
from flexcomm.costmodel.collective_libraries.logs import (
    CALIBRATION_ALGORITHMS,
    NcclTestsLog,
    bus_factor,
    flexcomm_bytes,
)
from flexcomm.costmodel.collective_libraries.versions import parse_version
from flexcomm.costmodel.devices import lookup
from flexcomm.costmodel.errors import InputError

SUMMARY_MIN_BYTES = 1 << 20


@dataclass
class LogValidation:
    """Per-row predictions of one log and their summary."""

    log: NcclTestsLog
    ranks: int
    rows: list[dict[str, Any]]

    @property
    def summary(self) -> dict[str, Any]:
        large = [abs(r["rel_error"]) for r in self.rows if r["bytes"] >= SUMMARY_MIN_BYTES]
        baseline = [abs(r["baseline_rel_error"]) for r in self.rows
                    if r["bytes"] >= SUMMARY_MIN_BYTES and r.get("baseline_rel_error") is not None]
        return {
            "rows": len(self.rows), "rows_at_least_1MiB": len(large),
            "median_abs_error": statistics.median(large) if large else None,
            "worst_abs_error": max(large) if large else None,
            "baseline_median_abs_error": statistics.median(baseline) if baseline else None,
            "partial": min(r["bytes"] for r in self.rows) > SUMMARY_MIN_BYTES,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"log": self.log.source, "collective": self.log.collective, "ranks": self.ranks,
                "ranks_from": self.log.ranks_from or "the cluster", "rows": self.rows, "summary": self.summary}


def _modelled(version: str, cluster: Any) -> bool:
    """Whether a log's stated release can price it (2.19 to 2.30: NCCL's releases, and RCCL's, which number
    theirs as NCCL's); a release outside the range leaves the cluster's (the row's ``version`` says which)."""
    fabric = getattr(cluster, "gpu_fabric", None)
    if fabric is None:
        return False
    try:
        parse_version(version)
    except InputError:
        return False
    return True


#: Latency steps of the plain ring formula a user writes by hand (``2(p-1)`` for allreduce, ``p-1`` otherwise).
_RING_STEPS = {"allreduce": 2}


def datasheet_seconds(cluster: Any, collective: str, size: float, ranks: int) -> float:
    """The naive baseline: the plain alpha-beta formula at the cluster's datasheet rates, as a user writes it by
    hand for an nccl-tests row of ``size`` bytes (its ``size`` column) on ``ranks`` ranks.

    Bus bandwidth (nccl-tests' convention: what one GPU moves on an optimal ring, so that it is the bottleneck
    link's speed): inside one NVLink domain a GPU's NVLink (``intra_link``); across domains the smaller of that and
    the node's NICs together (``nics_per_node`` x ``inter_link``: one ring per NIC, each crossing the node
    boundary once), or for all-to-all and send/recv, where every GPU sends its own bytes off the node, its share
    of them (divided by ``devices_per_node``). Bytes: ``size`` x nccl-tests' bus factor. Latency: a ring's steps
    (2(p-1) for allreduce, p-1 otherwise) at that link's latency. Nothing about NCCL's algorithms, protocols,
    channels or launch."""
    if ranks < 2:
        return 0.0
    fabric = getattr(cluster, "gpu_fabric", None)
    domain = (fabric.nvlink_domain if fabric is not None else None) or cluster.devices_per_node
    link = cluster.intra_link
    bandwidth, latency = link.bandwidth_Bps, link.latency_s
    if ranks > domain:
        nics = (cluster.nics_per_node or 1) * cluster.inter_link.bandwidth_Bps
        if collective in ("alltoall", "sendrecv"):
            nics /= cluster.devices_per_node
        bandwidth, latency = min(bandwidth, nics), max(latency, cluster.inter_link.latency_s)
    steps = _RING_STEPS.get(collective, 1) * (ranks - 1)
    return steps * latency + size * bus_factor(collective, int(ranks)) / bandwidth


def stated_version(log: NcclTestsLog, cluster: Any) -> str | None:
    """The release a log is priced with: the one it states where the model has it, else None (the cluster's)."""
    return log.nccl_version if log.nccl_version is not None and _modelled(log.nccl_version, cluster) else None


def log_vendor(log: NcclTestsLog) -> tuple[str, str] | None:
    """(vendor, what says so) of the GPUs a log ran on: its device names (Rank lines, ``gpu_model:``) where the
    catalog knows them, else an RCCL release it states; None when it says neither."""
    for name in log.devices:
        known = lookup(name)
        if known is not None:
            return known.vendor, name
    if log.nccl_version is not None and "rccl" in log.nccl_version.lower():
        return "amd", log.nccl_version
    return None


def cluster_vendor(cluster: Any) -> str | None:
    """The vendor of a cluster's GPUs: its catalog device's, else its fabric library's (NCCL: NVIDIA, RCCL: AMD)."""
    known = lookup(cluster.device.name)
    if known is not None:
        return known.vendor
    fabric = getattr(cluster, "gpu_fabric", None)
    return None if fabric is None else LIBRARY_VENDOR[fabric.library]


def check_same_vendor(log: NcclTestsLog, cluster: Any) -> None:
    """An RCCL log priced on an NVIDIA cluster (or the reverse) compares two kinds of hardware: refused."""
    ran, evidence = log_vendor(log) or (None, "")
    here = cluster_vendor(cluster)
    if ran is not None and here is not None and ran != here:
        raise InputError("cluster", f"{cluster.name} ({cluster.device.name})", f"a cluster of the log's "
                         f"{VENDOR_NAMES[ran]} GPUs (the log names {evidence}); pass the cluster file of that run")


def validate_log(log: NcclTestsLog, model: Any, cluster_ranks: int, algorithm: str | None = None) -> LogValidation:
    """Price each row with ``model`` (a :class:`costmodel.cost_model.CostModel`) on ``cluster_ranks`` ranks.

    A log whose own rank count disagrees with the cluster, or whose GPUs are another vendor's, is refused: the
    comparison would be of two runs."""
    if getattr(model, "cluster", None) is not None:
        check_same_vendor(log, model.cluster)
    if log.ranks is not None and log.ranks != cluster_ranks:
        raise InputError("cluster", f"{cluster_ranks} ranks", f"a cluster of the log's {log.ranks} ranks (from its "
                         f"{log.ranks_from}); pass the cluster file of that run")
    if log.collective not in CALIBRATION_ALGORITHMS and not (is_nccl_algorithm(algorithm or "nccl")
                                                              and log.collective in TUNED + P2P):
        raise InputError("collective", log.collective, "a collective the cost model prices: "
                         + ", ".join(CALIBRATION_ALGORITHMS))
    cluster = getattr(model, "cluster", None)
    default = "nccl" if cluster is not None and cluster.gpu_fabric is not None else None
    chosen = algorithm or log.algorithm or default or CALIBRATION_ALGORITHMS[log.collective]
    # one thread launching several GPUs pays their launches in turn; a CUDA graph replay pays none
    gpus_per_process = 0 if log.cuda_graph else (log.gpus_per_thread or 1)
    version = stated_version(log, cluster)
    rows = []
    for row in log.rows:
        extra: dict[str, Any] = {}
        per_rank = flexcomm_bytes(log.collective, row.bytes, cluster_ranks)
        if is_nccl_algorithm(chosen):
            choice = model.nccl_choice(log.collective, chosen, float(per_rank), cluster_ranks, log.env,
                                       gpus_per_process, version)
            predicted, algo, protocol = choice.seconds, choice.algorithm, choice.protocol
            run = choice.execution
            if run is not None:
                extra = {"channels": run.channels, "threads": run.threads, "chunk_bytes": run.chunk_bytes,
                         "launch_s": run.launch_s, "latency_s": run.latency_s, "fill_s": run.fill_s,
                         "bandwidth_s": run.bandwidth_s, "mechanism": run.dominant, "version": run.version,
                         "library": run.library, "stated_version": log.nccl_version}
        else:
            predicted = float(model.collective(log.collective, chosen, float(per_rank), cluster_ranks).total)
            algo, protocol = chosen, None
        baseline = datasheet_seconds(cluster, log.collective, row.bytes, cluster_ranks) if cluster is not None \
            else None
        rows.append({"line": row.line, "bytes": row.bytes, "measured_s": row.time_s, "predicted_s": predicted,
                     "rel_error": predicted / row.time_s - 1.0, "algorithm": algo, "protocol": protocol,
                     "baseline_s": baseline,
                     "baseline_rel_error": None if baseline is None else baseline / row.time_s - 1.0, **extra})
    return LogValidation(log, cluster_ranks, rows)
