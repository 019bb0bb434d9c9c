"""Replay a profiled training step on another cluster, network, rank count or compression.

The step is :mod:`sim.traced_step`'s measured model; the simulator replays it with every knob it has (the
target cluster's collectives, compression, stragglers, network dynamics).

Ranks that share a host's cores (the testbed: several ranks on 2 cores) compute slower as more of them
share: :func:`host_compute_scale` scales the measured compute by the change in oversubscription. On a cluster
each rank has its own device and the scale is 1.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flexcomm.costmodel.cluster import MEASURED_HOST_DEVICE, flat_hosts
from flexcomm.costmodel.errors import InputError
from flexcomm.sim.traced_step import StepProfile
from flexcomm.sim.training import TrainingResult, simulate_training
from flexcomm.sim.training_config import TrainingConfig
from flexcomm.sim.workload import traced_training_workload


def host_compute_scale(traced_ranks: int, ranks: int, cores: int | None) -> float:
    """How much slower each rank computes with ``ranks`` than with ``traced_ranks`` on one host of ``cores``
    cores (time-sharing: a rank gets min(1, cores / ranks) of a core); 1 when ranks do not share a host."""
    if cores is None:
        return 1.0
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise InputError("host-cores", cores, "a positive number of cores the ranks share")
    return max(1.0, ranks / cores) / max(1.0, traced_ranks / cores)


def replay(profile: StepProfile, cluster: Any, *, ranks: int | None = None, scheme: str = "dense",
           ratio: float = 0.01, algorithm: str = "auto", compute_scale: float = 1.0,
           compress_elements_per_s: float | None = None, iterations: int = 3, seed: int = 0,
           **config: Any) -> TrainingResult:
    """The profiled step on ``cluster`` (a :class:`costmodel.cluster.Cluster`): ``iterations`` simulated steps.

    ``compress_elements_per_s`` is the compressor's rate on the traced host for compression what-ifs (None:
    the cluster device's); it is divided by ``compute_scale`` as the compute is multiplied by it."""
    workload = traced_training_workload(profile, compute_scale)  # checks compute_scale (traced_model)
    rate = None if compress_elements_per_s is None else compress_elements_per_s / compute_scale
    base = TrainingConfig(workload=workload, iterations=iterations, ranks=ranks, scheme=scheme, ratio=ratio,
                          algorithm=algorithm, compress_elements_per_s=rate, seed=seed)
    return simulate_training(cluster, replace(base, **config) if config else base)


def predicted_step_s(result: TrainingResult) -> float:
    """The replayed step: the median simulated iteration."""
    return float(result.summary()["median_time_s"])


#: The traced host as a cluster device: its compute is measured and its compressor's rate measured or given,
#: so the replay reads neither number; they only make a valid :class:`costmodel.cluster_parts.Device`.
TRACED_HOST_DEVICE = {**MEASURED_HOST_DEVICE, "name": "traced-host"}
#: Schemes a link target prices without a device (Top-k's rate is measured or given; casts and PowerSGD are
#: priced from a device's bandwidth and FLOP/s, so they need --cluster).
LINK_SCHEMES = ("dense", "topk-ag", "topk-ar")


def link_target(ranks: int, bandwidth_Bps: float, latency_s: float = 0.0) -> Any:
    """``ranks`` hosts, one rank each, on one switch of ``bandwidth_Bps`` links: the testbed's shape, and any
    "what if the network were X" question about a traced host."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise InputError("ranks", ranks, "an integer >= 2 (one rank does not communicate)")
    return flat_hosts(ranks, latency_s, bandwidth_Bps, TRACED_HOST_DEVICE, f"{ranks} hosts")
