"""Run one study point on one engine and return its journal row.

:func:`run_point` is the only function sent to workers (a local process or a Dask worker): it takes
plain data (:func:`experiments.study.spec.point_payload`) and returns plain data, imports what it
needs lazily, and depends on nothing but its argument, so any worker computes the same row.

Engines, all on the point's cluster (the study's cluster with the point's inter-node bandwidth and
latency, grown to ``ceil(ranks / devices_per_node)`` nodes when the point asks for more ranks):

* ``model``: the shared cost model, no overlap: step = compute (FLOP model at the device's peak x 0.65)
  + the exchange (``CostModel.scheme`` over the group's link) + Top-k selection (0.75e9 elements/s).
* ``sim``: :class:`sim.training.TrainingSimulator` (DDP buckets overlapping the backward pass); the
  median iteration and its breakdown.
* ``emulated``: :class:`emulation.engine.EmulatedRun` (real gradients, simulated clock); mean step,
  accuracy and the simulated time at which test accuracy first reaches the study's target.
* ``recovery``: :func:`sim.recovery.simulate_recovery` of the point's policy for a ``gpt-<row>`` job on the
  study's cluster grown (or cut) to the point's nodes, planned by the transformer planner; goodput and
  the time lost per cause. ``young-daly`` resolves to sqrt(2 x checkpoint write x job MTBF) per point.
"""

from __future__ import annotations

import functools
import json
import math
import time
from typing import Any

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.compression_compute import topk_elements_per_s
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.device_compute import model_layer_seconds
from flexcomm.costmodel.errors import InputError
from flexcomm.planner.llm.recovery import (
    TransformerRecoveryPlanner,
    nic_Bps_per_node,
    recovery_workloads,
    training_precision,
)
from flexcomm.sim.recovery import RecoveryConfig, checkpoint_interval_s, planning_charge_s, simulate_recovery
from flexcomm.sim.training import TrainingSimulator
from flexcomm.sim.training_config import TrainingConfig
from flexcomm.sim.workload import get_training_workload


@functools.lru_cache(maxsize=64)
def _cluster(cluster_json: str, ranks: int, bandwidth_Bps: float, latency_s: float):  # -> Cluster
    data = json.loads(cluster_json)
    data["inter_link"] = {**data["inter_link"], "bandwidth_Bps": bandwidth_Bps, "latency_s": latency_s}
    data["nodes"] = max(int(data["nodes"]), -(-int(ranks) // int(data["devices_per_node"])))
    return Cluster.from_dict(data)


def point_cluster(payload: dict[str, Any]):  # -> Cluster
    """The cluster a point runs on (validated; an impossible one is an InputError)."""
    p = payload["params"]
    return _cluster(json.dumps(payload["cluster"], sort_keys=True), int(p["ranks"]), float(p["bandwidth_Bps"]),
                    float(p["latency_s"]))


@functools.lru_cache(maxsize=64)
def _cost_model(cluster_json: str, ranks: int, bandwidth_Bps: float, latency_s: float):  # -> CostModel
    """One model per point cluster: the points that differ only in strategy and ratio share its link cache."""
    return CostModel.from_cluster(_cluster(cluster_json, ranks, bandwidth_Bps, latency_s))


def _model(payload: dict[str, Any]) -> dict[str, Any]:
    p = payload["params"]
    cluster = point_cluster(payload)
    model = _cost_model(json.dumps(payload["cluster"], sort_keys=True), int(p["ranks"]), float(p["bandwidth_Bps"]),
                        float(p["latency_s"]))
    workload = get_training_workload(p["workload"], p["batch"])
    numel = workload.model.params
    ranks = int(p["ranks"])
    comm = float(model.scheme(p["strategy"], numel, ranks, p["ratio"] or 1.0).total)
    fwd, bwd = model_layer_seconds(workload.model, workload.batch_per_rank, cluster.device)
    compute = float(fwd.sum() + bwd.sum()) + workload.after_exchange_s  # a profiled step's optimizer part
    compress = 0.0 if p["strategy"] == "dense" else numel / topk_elements_per_s(cluster.device.memory_bandwidth_Bps)
    step = compute + comm + compress
    return {"batch": workload.batch_per_rank, "step_time_s": step, "comm_time_s": comm, "compute_time_s": compute,
            "compress_time_s": compress, "samples_per_s": ranks * workload.batch_per_rank / step}


def _sim(payload: dict[str, Any]) -> dict[str, Any]:
    p = payload["params"]
    config = TrainingConfig(workload=p["workload"], iterations=int(p["steps"]), ranks=int(p["ranks"]),
                            batch_per_rank=p["batch"], scheme=p["strategy"], ratio=p["ratio"] or 1.0,
                            seed=int(p["seed"]), record_flows=False)
    sim = TrainingSimulator(point_cluster(payload), config)
    summary = sim.run().summary()
    return {"batch": sim.workload.batch_per_rank, "step_time_s": summary["median_time_s"],
            "comm_time_s": summary["median_comm_s"], "compute_time_s": summary["median_compute_s"],
            "compress_time_s": summary["median_compression_s"], "exposed_comm_s": summary["median_exposed_comm_s"],
            "samples_per_s": summary["samples_per_s"]}


def _emulated(payload: dict[str, Any]) -> dict[str, Any]:
    import torch

    from flexcomm.emulation.engine import EmulatedRun, EmulationConfig, time_to_accuracy

    torch.set_num_threads(1)  # points run side by side; one thread each keeps them fast and reproducible
    p = payload["params"]
    steps = int(p["steps"])
    config = EmulationConfig(workload=p["workload"], workers=int(p["ranks"]), cluster=point_cluster(payload),
                             strategy=p["strategy"], ratio=p["ratio"] or 0.01, steps=steps, seed=int(p["seed"]),
                             eval_every=max(1, steps // 10), batch_size=p["batch"], flush_every=steps)
    run = EmulatedRun(config)
    result = run.run()
    s = result.summary
    batch = run.data.batch_size
    return {"batch": batch, "step_time_s": s["mean_step_s"], "comm_time_s": s["mean_comm_s"],
            "compute_time_s": s["compute_s"], "compress_time_s": s["mean_compress_s"],
            "samples_per_s": int(p["ranks"]) * batch / s["mean_step_s"] if s["mean_step_s"] > 0 else math.nan,
            "final_accuracy": s["final_test_acc"], "best_accuracy": s["best_test_acc"],
            "time_to_accuracy_s": time_to_accuracy(result.frame, payload["target_accuracy"]),
            "sim_time_s": s["sim_time_s"]}


@functools.lru_cache(maxsize=16)
def _recovery_job(cluster_json: str, workload: str, nodes: int):  # -> (Megatron row, Cluster, planner)
    """One planner per job: its plans (and their measured search times) serve every policy of a worker."""
    row = recovery_workloads()[workload]
    cluster = Cluster.from_dict(json.loads(cluster_json)).with_nodes(nodes)
    planner = TransformerRecoveryPlanner(row.model, cluster, row.batch, precision=training_precision(cluster))
    full, _ = planner.best_on(list(range(nodes)), cluster.devices_per_node)  # as the run will ask (mixed pools)
    if full is None:
        raise InputError("nodes", nodes, f"a job size {workload} has a plan on (no plan fits {nodes} nodes of "
                         f"{cluster.name})")
    return row, cluster, planner


def _recovery(payload: dict[str, Any]) -> dict[str, Any]:
    p = payload["params"]
    nodes = int(p["nodes"])
    row, cluster, planner = _recovery_job(json.dumps(payload["cluster"], sort_keys=True), p["workload"], nodes)
    parameters = row.model.parameters
    interval = checkpoint_interval_s(p["checkpoint_interval"], parameters, p["storage_Bps"], p["mtbf_s"], nodes,
                                     "checkpoint_interval")
    config = RecoveryConfig(
        policy=p["strategy"], horizon_s=p["horizon_s"], mtbf_s=p["mtbf_s"], repair_s=p["repair_s"],
        checkpoint_every_s=interval, storage_Bps=p["storage_Bps"], seed=int(p["seed"]),
        planning_s=planning_charge_s(p["planning_time"], "planning_time"))
    result = simulate_recovery(planner, nodes, cluster.devices_per_node, parameters, config, nic_Bps_per_node(cluster))
    summary = result.summary()
    for key in ("policy", "simulated_s", "wall_s"):
        summary.pop(key)
    return {**summary, "checkpoint_interval_s": interval}


ENGINE_FUNCTIONS = {"model": _model, "sim": _sim, "emulated": _emulated, "recovery": _recovery}


def check_point(payload: dict[str, Any]) -> None:
    """Cheap checks before anything runs, so a bad point fails the study at once, not hours in."""
    p = payload["params"]
    if payload["engine"] == "recovery":  # the job's failure-free plan: searched once per (workload, nodes)
        _recovery_job(json.dumps(payload["cluster"], sort_keys=True), p["workload"], int(p["nodes"]))
        return
    point_cluster(payload)
    if payload["engine"] != "emulated":

        get_training_workload(p["workload"], p["batch"])


class PointError(InputError):
    """An InputError raised by a point, naming the point; it pickles (from a pool or Dask worker) intact."""


def run_point(payload: dict[str, Any]) -> dict[str, Any]:
    """One journal row: the point's id and parameters, its metrics and the wall time it took."""
    started = time.perf_counter()
    engine = payload["engine"]
    if engine not in ENGINE_FUNCTIONS:
        raise InputError("engine", engine, "one of " + ", ".join(ENGINE_FUNCTIONS))
    try:
        metrics = ENGINE_FUNCTIONS[engine](payload)
    except InputError as exc:
        params = ", ".join(f"{k}={v}" for k, v in payload["params"].items() if v is not None)
        raise PointError(f"point {payload['id']} ({params}): {exc.field}", exc.got, exc.expected) from None
    row = {"point_id": payload["id"], **payload["params"], **metrics}
    row["wall_s"] = time.perf_counter() - started
    return row


def run_points(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several points in one task: cost-model points take a millisecond, less than shipping them one by one."""
    return [run_point(payload) for payload in payloads]
