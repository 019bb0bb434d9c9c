"""What ``flexcomm simulate --recovery`` / ``--mtbf-study`` print and write, made from the engine's results
(:mod:`planner.llm.recovery_run`), so the command and ``flexcomm.recovery`` say and write the same."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.atomic import write_csv_atomic
from flexcomm.costmodel.units import format_duration as duration
from flexcomm.planner.llm.recovery_run import MtbfStudy, PolicyComparison
from flexcomm.sim.recovery import FLEET_NODE_MTBF_SOURCE
from flexcomm.sim.recovery_plots import plot_goodput, plot_study


def report_lines(comparison: PolicyComparison) -> list[str]:
    """The job and failure model, the plans each policy ran, and one row per policy."""
    job, c0, results = comparison.job, comparison.config, comparison.results
    cluster, nodes = job.cluster, job.nodes
    source = f" ({FLEET_NODE_MTBF_SOURCE})" if comparison.fleet_mtbf else ""
    lines = [f"{job.workload} ({job.parameters / 1e9:.1f}B parameters) on {nodes} nodes of {cluster.name} "
             f"({nodes * cluster.devices_per_node:,} GPUs), batch {job.batch:,}; {duration(c0.horizon_s)} simulated, "
             f"node MTBF {duration(c0.mtbf_s)}{source}, repair {duration(c0.repair_s)}, detection "
             f"{duration(c0.detection_s)}, checkpoint every {duration(c0.checkpoint_every_s)}, seed {c0.seed}",
             f"failure-free plan: {results[0].timeline[0]['plan']}, {results[0].ideal_samples_per_s:.2f} samples/s"]
    if cluster.node_devices:
        for r in results:
            chosen = list(dict.fromkeys(row["plan"] for row in r.timeline if row["plan"]))
            lines.append(f"  {r.policy} ran: " + "; ".join(chosen[:4])
                         + (f"; ... ({len(chosen)} plans)" if len(chosen) > 4 else ""))
    lines.append(f"{'policy':12s} {'goodput':>10s} {'of ideal':>8s} {'failures':>8s}  largest losses")
    for r in results:
        top = sorted(r.lost_s.items(), key=lambda kv: -kv[1])[:3]
        losses = ", ".join(f"{k.replace('_', ' ')} {v / 3600:.1f} h" for k, v in top if v > 0)
        lines.append(f"{r.policy:12s} {r.goodput:10.2f} {r.efficiency:8.1%} {r.failures:8d}  {losses}  "
                     f"(simulated in {r.wall_s:.2f}s)")
    return lines


def write_files(comparison: PolicyComparison, out: str | Path) -> list[Path]:
    """``recovery.csv``, ``timeline.csv``, ``events.csv`` and ``goodput.png`` under ``out``."""
    folder = Path(out)
    return [write_csv_atomic(comparison.table(), folder / "recovery.csv"),
            write_csv_atomic(comparison.timeline(), folder / "timeline.csv"),
            write_csv_atomic(comparison.events(), folder / "events.csv"),
            plot_goodput(list(comparison.results), folder / "goodput.png")]


def study_lines(study: MtbfStudy) -> list[str]:
    """The best policy per (node MTBF, job nodes) cell."""
    intervals = ", ".join(f"{s / 60:g} min" for s in study.intervals_s)
    lines = [f"{study.job.workload}: best policy per (node MTBF, job nodes), over checkpoint intervals "
             f"{intervals} and Young/Daly's"]
    for r in study.best().itertuples():
        lines.append(f"  MTBF {r.mtbf_h:5g} h, {r.nodes:4d} nodes: {r.policy:12s} {r.efficiency:6.1%} at "
                     f"{r.interval_label} (Young/Daly {r.young_daly_s / 60:.1f} min)")
    return lines


def write_study(study: MtbfStudy, out: str | Path) -> list[Path]:
    """``recovery_study.csv`` and ``recovery_study.png`` under ``out``."""
    folder = Path(out)
    return [write_csv_atomic(study.table(), folder / "recovery_study.csv"),
            plot_study(study.table(), folder / "recovery_study.png")]


def written_line(paths: list[Path]) -> str:
    """``wrote a, b, ...``: what the command prints after writing."""
    return "wrote " + ", ".join(str(p) for p in paths)
