"""The recovery engine for a transformer job, as ``flexcomm simulate --recovery`` and ``flexcomm.recovery`` ask it.

Why a module of its own: :mod:`sim.recovery` simulates one policy given a planner and a failure model, and
:mod:`planner.llm.recovery` is that planner; choosing the job (a Megatron-LM row on some nodes of a cluster),
turning the failure model's keywords (durations and bandwidths with units) into a :class:`RecoveryConfig`
and running every policy (or the MTBF study's grid) is what the command and the Python call share. Both get
a frozen result with the tables and what the figures need, and print or write it themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_bandwidth, parse_time
from flexcomm.planner.llm.recovery import (
    TransformerRecoveryPlanner,
    nic_Bps_per_node,
    recovery_workloads,
    training_precision,
)
from flexcomm.sim.recovery import (
    FLEET_NODE_MTBF_S,
    POLICIES,
    RecoveryConfig,
    RecoveryResult,
    check_run_size,
    checkpoint_interval_s,
    planning_charge_s,
    simulate_recovery,
)

#: The MTBF study's node MTBFs (hours): half a day to eight days, a flaky fleet to a healthy one.
STUDY_MTBF_H = (12.0, 48.0, 192.0)
#: The MTBF study's job sizes (nodes): where one failure idles few GPUs up to where failures are routine.
STUDY_NODES = (16, 64, 128)
#: The MTBF study's checkpoint intervals (seconds: 5 min, 30 min, 2 h); Young/Daly's is always added.
STUDY_INTERVALS_S = (300.0, 1800.0, 7200.0)


@dataclass(frozen=True)
class FailureModel:
    """The failure model and recovery costs as given (durations and bandwidths with units, or seconds and
    bytes/s); None takes the long-horizon default: the fleet's node MTBF, 4 h repair, torch's 10 min NCCL
    timeout, 2 min restart, the cluster's storage bandwidth."""

    horizon: str | float = "7d"
    mtbf: str | float | None = None
    repair_time: str | float | None = None
    timeout: str | float | None = None
    restart_cost: str | float | None = None
    rack_mtbf: str | float | None = None
    rack_nodes: int = 8
    checkpoint_interval: str | float = "1h"
    storage_bandwidth: str | float | None = None
    planning_time: str | float = "measured"
    seed: int = 0

    def config(self, policy: str, cluster: Cluster, parameters: float, nodes: int, interval: float | None = None,
               mtbf_s: float | None = None) -> RecoveryConfig:
        """One policy's :class:`RecoveryConfig` (``interval`` and ``mtbf_s`` override the model's: the study
        sweeps them); every value checked, each error naming its keyword."""
        if mtbf_s is None:
            mtbf_s = FLEET_NODE_MTBF_S if self.mtbf is None else parse_time(self.mtbf, "mtbf")
        storage = (parse_bandwidth(self.storage_bandwidth, "storage-bandwidth") if self.storage_bandwidth is not None
                   else cluster.storage_bandwidth_Bps or RecoveryConfig.storage_Bps)
        if interval is None:
            interval = checkpoint_interval_s(str(self.checkpoint_interval), parameters, storage, mtbf_s, nodes)
        _whole("rack-nodes", self.rack_nodes)
        return RecoveryConfig(
            policy=policy, horizon_s=parse_time(self.horizon, "horizon"), mtbf_s=mtbf_s,
            repair_s=parse_time(_given(self.repair_time, "4h"), "repair-time"), checkpoint_every_s=interval,
            detection_s=parse_time(_given(self.timeout, "10min"), "timeout"),
            restart_s=parse_time(_given(self.restart_cost, "2min"), "restart-cost"), storage_Bps=storage,
            rack_mtbf_s=parse_time(self.rack_mtbf, "rack-mtbf") if self.rack_mtbf is not None else None,
            rack_nodes=self.rack_nodes, seed=_whole("seed", self.seed, 0),
            planning_s=planning_charge_s(str(self.planning_time)))


@dataclass(frozen=True)
class RecoveryJob:
    """The job: its Megatron-LM row, the cluster cut to its nodes, and its global batch (sequences)."""

    workload: str
    row: Any  #: a Megatron-LM row (planner.llm.megatron): .model, a Transformer, and .batch
    cluster: Cluster
    nodes: int
    batch: int

    @property
    def parameters(self) -> float:
        return self.row.model.parameters

    def planner(self, cluster: Cluster | None = None) -> TransformerRecoveryPlanner:
        """The transformer planner on ``cluster`` (default: the job's nodes)."""
        cluster = cluster or self.cluster
        return TransformerRecoveryPlanner(self.row.model, cluster, self.batch, precision=training_precision(cluster))


@dataclass(frozen=True)
class PolicyComparison:
    """Every policy run on the same failures: ``results`` in the order asked, ``config`` the first policy's
    (the failure model they share), ``fleet_mtbf`` whether the node MTBF is the fleet's default."""

    job: RecoveryJob
    config: RecoveryConfig
    fleet_mtbf: bool
    results: tuple[RecoveryResult, ...]

    def table(self) -> pd.DataFrame:
        """One row per policy: goodput, efficiency, failures, time lost per cause (``recovery.csv``)."""
        return pd.DataFrame([r.summary() for r in self.results])

    def timeline(self) -> pd.DataFrame:
        """Each policy's plans and rates over time (``timeline.csv``)."""
        return pd.DataFrame([{"policy": r.policy, **t} for r in self.results for t in r.timeline])

    def events(self) -> pd.DataFrame:
        """Each policy's failures, repairs, re-plans and checkpoints (``events.csv``)."""
        return pd.DataFrame([{"policy": r.policy, **e} for r in self.results for e in r.events])


@dataclass(frozen=True)
class MtbfStudy:
    """The study's runs, one row per (MTBF, nodes, interval, policy) that has a plan (``recovery_study.csv``)."""

    job: RecoveryJob
    intervals_s: tuple[float, ...]
    rows: pd.DataFrame

    def table(self) -> pd.DataFrame:
        return self.rows

    def best(self) -> pd.DataFrame:
        """The best policy and interval per (node MTBF, job nodes) cell."""
        return self.rows.loc[self.rows.groupby(["mtbf_h", "nodes"])["efficiency"].idxmax()]


def _given(value: str | float | None, default: str) -> str | float:
    """``value`` unless it was left out: a 0 given in SI units is a value (checked), not "the default"."""
    return default if value is None else value


def _whole(field: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(field, value, f"an integer >= {minimum}")
    return value


def policy_names(policies: str | Sequence[str]) -> list[str]:
    """``all``, a comma list or a list of policy names, each checked."""
    if isinstance(policies, str):
        names = list(POLICIES) if policies.strip() == "all" else [t.strip() for t in policies.split(",") if t.strip()]
    else:
        names = [str(p) for p in policies]
    expected = "one of " + ", ".join(POLICIES) + ", a comma list of them, or all"
    if not names:
        raise InputError("recovery", policies, expected)
    for name in names:
        if name not in POLICIES:
            raise InputError("recovery", name, expected)
    return names


def recovery_job(workload: str, cluster: str | Path | Cluster, nodes: int | None = None,
                 batch_size: int | None = None) -> RecoveryJob:
    """The job on ``nodes`` nodes of ``cluster`` (default: all of them) with ``batch_size`` sequences per
    step (default: the Megatron-LM row's)."""
    models = recovery_workloads()
    if workload not in models:
        raise InputError("workload", workload, "with --recovery one of " + ", ".join(models))
    row = models[workload]
    base = load_cluster(cluster)
    nodes = _whole("nodes", nodes) if nodes is not None else base.nodes
    batch = row.batch if batch_size is None else batch_size
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError("batch-size", batch, "an integer >= 1 (sequences per step)")
    return RecoveryJob(workload, row, base.with_nodes(nodes), nodes, batch)


def compare_policies(workload: str, cluster: str | Path | Cluster, policies: str | Sequence[str] = "all", *,
                     nodes: int | None = None, batch_size: int | None = None,
                     failures: FailureModel = FailureModel()) -> PolicyComparison:
    """Goodput of the job over ``failures.horizon`` of node failures, per recovery policy, every policy on the
    same seeded failures. Every input is checked before the planner searches."""
    job = recovery_job(workload, cluster, nodes, batch_size)
    names = policy_names(policies)
    configs = [failures.config(p, job.cluster, job.parameters, job.nodes) for p in names]
    check_run_size(job.nodes, configs[0])  # the horizon: one config says it for all
    planner = job.planner()
    results = tuple(simulate_recovery(planner, job.nodes, job.cluster.devices_per_node, job.parameters, c,
                                      nic_Bps_per_node(job.cluster)) for c in configs)
    return PolicyComparison(job, configs[0], failures.mtbf is None, results)


def mtbf_study(workload: str, cluster: str | Path | Cluster, *, nodes: int | None = None,
               batch_size: int | None = None, failures: FailureModel = FailureModel(),
               progress: Callable[[int, int], None] | None = None) -> MtbfStudy:
    """Every policy over node MTBF x job nodes x checkpoint interval (:data:`STUDY_MTBF_H`, :data:`STUDY_NODES`,
    :data:`STUDY_INTERVALS_S` and Young/Daly's); a cell no plan fits is left out. ``progress(done, total)`` is
    called as each run starts."""
    job = recovery_job(workload, cluster, nodes, batch_size)
    total = len(STUDY_NODES) * len(STUDY_MTBF_H) * (len(STUDY_INTERVALS_S) + 1) * len(POLICIES)
    rows, done = [], 0
    for size in STUDY_NODES:
        part = job.cluster.with_nodes(size)
        planner = job.planner(part)
        for mtbf_h in STUDY_MTBF_H:
            probe = failures.config("restart", part, job.parameters, size, interval=3600.0, mtbf_s=mtbf_h * 3600.0)
            daly = checkpoint_interval_s("young-daly", job.parameters, probe.storage_Bps, probe.mtbf_s, size)
            for interval, label in [*((s, f"{s / 60:g} min") for s in STUDY_INTERVALS_S), (daly, "Young/Daly")]:
                for policy in POLICIES:
                    config = failures.config(policy, part, job.parameters, size, interval=interval,
                                             mtbf_s=mtbf_h * 3600.0)
                    done += 1
                    if progress is not None:
                        progress(done, total)
                    try:
                        result = simulate_recovery(planner, size, part.devices_per_node, job.parameters, config,
                                                   nic_Bps_per_node(part))
                    except InputError:
                        continue  # no plan fits this many nodes
                    rows.append({"mtbf_h": mtbf_h, "nodes": size, "interval_s": interval, "interval_label": label,
                                 "young_daly_s": daly, **result.summary()})
    return MtbfStudy(job, STUDY_INTERVALS_S, pd.DataFrame(rows))
