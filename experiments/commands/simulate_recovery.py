"""``flexcomm simulate --recovery POLICY``: goodput of a transformer job over days of node failures, per policy,
and ``--mtbf-study``: the best policy per (node MTBF, job size) cell over checkpoint intervals."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import write_csv_atomic
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_duration as duration
from flexcomm.costmodel.units import parse_bandwidth, parse_time
from flexcomm.planner.llm.recovery import (
    TransformerRecoveryPlanner,
    nic_Bps_per_node,
    recovery_workloads,
    training_precision,
)
from flexcomm.sim.recovery import (
    FLEET_NODE_MTBF_S,
    FLEET_NODE_MTBF_SOURCE,
    POLICIES,
    RecoveryConfig,
    check_run_size,
    checkpoint_interval_s,
    planning_charge_s,
    simulate_recovery,
)
from flexcomm.sim.recovery_plots import plot_goodput, plot_study

#: The study's axes: node MTBF (hours), job nodes, checkpoint intervals (Young/Daly's is always added).
STUDY_MTBF_H = (12.0, 48.0, 192.0)
STUDY_NODES = (16, 64, 128)
STUDY_INTERVALS_S = (300.0, 1800.0, 7200.0)


def _policies(text: str) -> list[str]:
    names = list(POLICIES) if text.strip() == "all" else [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        if name not in POLICIES:
            raise InputError("recovery", name, "one of " + ", ".join(POLICIES) + ", a comma list of them, or all")
    return names


def _job(args: argparse.Namespace) -> tuple[Any, Any, int, int]:
    """(Megatron row, cluster of the job's nodes, nodes, batch)."""
    models = recovery_workloads()
    if args.workload not in models:
        raise InputError("workload", args.workload, "with --recovery one of " + ", ".join(models))
    row = models[args.workload]
    base = load_cluster(args.cluster)
    nodes = args.nodes if args.nodes is not None else base.nodes
    if nodes < 1:
        raise InputError("nodes", nodes, "an integer >= 1")
    batch = args.batch_size if args.batch_size is not None else row.batch
    if batch < 1:
        raise InputError("batch-size", batch, "an integer >= 1 (sequences per step)")
    return row, base.with_nodes(nodes), nodes, batch


def _config(args: argparse.Namespace, policy: str, cluster: Any, parameters: float, nodes: int,
            interval: float | None = None, mtbf_s: float | None = None) -> Any:
    if mtbf_s is not None:
        mtbf = mtbf_s
    else:
        mtbf = FLEET_NODE_MTBF_S if args.mtbf is None else parse_time(args.mtbf, "mtbf")
    storage = (parse_bandwidth(args.storage_bandwidth, "storage-bandwidth") if args.storage_bandwidth
               else cluster.storage_bandwidth_Bps or RecoveryConfig.storage_Bps)
    if interval is None:
        interval = checkpoint_interval_s(args.checkpoint_interval, parameters, storage, mtbf, nodes)
    if args.rack_nodes < 1:
        raise InputError("rack-nodes", args.rack_nodes, "an integer >= 1")
    return RecoveryConfig(
        policy=policy, horizon_s=parse_time(args.horizon, "horizon"), mtbf_s=mtbf,
        repair_s=parse_time(args.repair_time or "4h", "repair-time"), checkpoint_every_s=interval,
        detection_s=parse_time(args.timeout or "10min", "timeout"),
        restart_s=parse_time(args.restart_cost or "2min", "restart-cost"), storage_Bps=storage,
        rack_mtbf_s=parse_time(args.rack_mtbf, "rack-mtbf") if args.rack_mtbf else None,
        rack_nodes=args.rack_nodes, seed=args.seed, planning_s=planning_charge_s(args.planning_time))


def run_recovery(args: argparse.Namespace) -> int:
    row, cluster, nodes, batch = _job(args)
    if args.mtbf_study:
        return _study(args, row, cluster, batch)
    policies = _policies(args.recovery)
    configs = [_config(args, p, cluster, row.model.parameters, nodes) for p in policies]  # all checked first

    check_run_size(nodes, configs[0])  # the horizon: before the planner searches (one config says it for all)
    import pandas as pd


    planner = TransformerRecoveryPlanner(row.model, cluster, batch, precision=training_precision(cluster))
    results = [simulate_recovery(planner, nodes, cluster.devices_per_node, row.model.parameters, c,
                                 nic_Bps_per_node(cluster)) for c in configs]
    c0 = configs[0]
    source = f" ({FLEET_NODE_MTBF_SOURCE})" if args.mtbf is None else ""
    print(f"{args.workload} ({row.model.parameters / 1e9:.1f}B parameters) on {nodes} nodes of {cluster.name} "
          f"({nodes * cluster.devices_per_node:,} GPUs), batch {batch:,}; {duration(c0.horizon_s)} simulated, node "
          f"MTBF {duration(c0.mtbf_s)}{source}, repair {duration(c0.repair_s)}, detection {duration(c0.detection_s)}, "
          f"checkpoint every {duration(c0.checkpoint_every_s)}, seed {c0.seed}")
    print(f"failure-free plan: {results[0].timeline[0]['plan']}, {results[0].ideal_samples_per_s:.2f} samples/s")
    if cluster.node_devices:
        for r in results:
            chosen = list(dict.fromkeys(row["plan"] for row in r.timeline if row["plan"]))
            print(f"  {r.policy} ran: " + "; ".join(chosen[:4]) + (f"; ... ({len(chosen)} plans)" if len(chosen) > 4
                                                                     else ""))
    print(f"{'policy':12s} {'goodput':>10s} {'of ideal':>8s} {'failures':>8s}  largest losses")
    for r in results:
        top = sorted(r.lost_s.items(), key=lambda kv: -kv[1])[:3]
        losses = ", ".join(f"{k.replace('_', ' ')} {v / 3600:.1f} h" for k, v in top if v > 0)
        print(f"{r.policy:12s} {r.goodput:10.2f} {r.efficiency:8.1%} {r.failures:8d}  {losses}  "
              f"(simulated in {r.wall_s:.2f}s)")
    if args.out:

        out = Path(args.out)
        summary = pd.DataFrame([r.summary() for r in results])
        timeline = pd.DataFrame([{"policy": r.policy, **t} for r in results for t in r.timeline])
        events = pd.DataFrame([{"policy": r.policy, **e} for r in results for e in r.events])
        written = [write_csv_atomic(summary, out / "recovery.csv"), write_csv_atomic(timeline, out / "timeline.csv"),
                   write_csv_atomic(events, out / "events.csv"), plot_goodput(results, out / "goodput.png")]
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _study(args: argparse.Namespace, row: Any, cluster: Any, batch: int) -> int:
    import pandas as pd


    if not args.out:
        raise InputError("out", "(missing)", "an output directory for the study, e.g. --out results/recovery")
    from tqdm import tqdm

    rows = []
    total = len(STUDY_NODES) * len(STUDY_MTBF_H) * (len(STUDY_INTERVALS_S) + 1) * len(POLICIES)
    bar = tqdm(total=total, desc="mtbf study", unit="run", leave=False, file=sys.stderr,
               disable=True if getattr(args, "no_progress", False) else None)  # None: only on a terminal
    for nodes in STUDY_NODES:
        job = cluster.with_nodes(nodes)
        planner = TransformerRecoveryPlanner(row.model, job, batch, precision=training_precision(job))
        for mtbf_h in STUDY_MTBF_H:
            probe = _config(args, "restart", job, row.model.parameters, nodes, interval=3600.0,
                            mtbf_s=mtbf_h * 3600.0)
            daly = checkpoint_interval_s("young-daly", row.model.parameters, probe.storage_Bps, probe.mtbf_s, nodes)
            for interval, label in [*((s, f"{s / 60:g} min") for s in STUDY_INTERVALS_S), (daly, "Young/Daly")]:
                for policy in POLICIES:
                    config = _config(args, policy, job, row.model.parameters, nodes, interval=interval,
                                     mtbf_s=mtbf_h * 3600.0)
                    bar.update(1)
                    try:
                        result = simulate_recovery(planner, nodes, job.devices_per_node, row.model.parameters,
                                                   config, nic_Bps_per_node(job))
                    except InputError:
                        continue  # no plan fits this many nodes
                    rows.append({"mtbf_h": mtbf_h, "nodes": nodes, "interval_s": interval, "interval_label": label,
                                 "young_daly_s": daly, **result.summary()})
    bar.close()
    table = pd.DataFrame(rows)
    out = Path(args.out)
    written = [write_csv_atomic(table, out / "recovery_study.csv"), plot_study(table, out / "recovery_study.png")]
    best = table.loc[table.groupby(["mtbf_h", "nodes"])["efficiency"].idxmax()]
    print(f"{args.workload}: best policy per (node MTBF, job nodes), over checkpoint intervals "
          f"{', '.join(f'{s / 60:g} min' for s in STUDY_INTERVALS_S)} and Young/Daly's")
    for r in best.itertuples():
        print(f"  MTBF {r.mtbf_h:5g} h, {r.nodes:4d} nodes: {r.policy:12s} {r.efficiency:6.1%} at {r.interval_label} "
              f"(Young/Daly {r.young_daly_s / 60:.1f} min)")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
