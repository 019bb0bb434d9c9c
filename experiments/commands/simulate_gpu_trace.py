"""``flexcomm simulate --from-trace`` on GPU traces: the job's GPU step, reproduced where it ran, replayed where
asked; every collective listed with what became of it."""

from __future__ import annotations

import argparse
import math
from collections import Counter
from typing import Any

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_size
from flexcomm.experiments.commands.common import cluster_from_args, emit_report
from flexcomm.sim.gpu_job import Settings, replay_job
from flexcomm.workloads.profiler_trace import step_numbers

#: Options of the host path a GPU replay has no use for (refused, not ignored).
_HOST_ONLY = (("bandwidth", None), ("host_cores", None), ("compress_throughput", None), ("straggler", []),
              ("compute_jitter", 0.0), ("algorithm", "auto"), ("latency", "0s"), ("ratio", 0.01),
              ("iterations", 10), ("seed", 0))


def _settings(args: argparse.Namespace) -> Any:
    for dest, default in _HOST_ONLY:
        value = getattr(args, dest, default)
        if value not in (default, None):
            flag = "--" + dest.replace("_", "-")
            raise InputError(dest.replace("_", "-"), value, f"no {flag} with a GPU trace (it replays the traced "
                             "steps once, every collective as NCCL runs it on --cluster; nothing random)")
    if args.scheme != "dense":
        raise InputError("scheme", args.scheme, "dense with a GPU trace (its collectives are re-priced as traced; "
                         "compression of a GPU trace is not modelled)")
    traced = load_cluster(args.traced_on) if args.traced_on else None
    target = cluster_from_args(args) if args.cluster else None
    if args.ranks and target is None:
        raise InputError("ranks", args.ranks, "--cluster with --ranks (the GPUs of the cluster the job moves to)")
    return Settings(traced=traced, target=target, target_ranks=args.ranks, traced_device=args.traced_device)


def run_gpu_trace(args: argparse.Namespace) -> int | None:
    """Replay GPU traces; None where the traces are host-only (the CPU path takes them). The traces are read
    once: options are judged first, and an option only the CPU path takes is refused once the traces prove to
    be a GPU job."""
    try:
        settings, problem = _settings(args), None
    except InputError as exc:
        settings, problem = Settings(), exc
    job = replay_job(args.from_trace, settings, args.execution_trace, progress=False if args.no_progress else None)
    if job is None:
        return None
    if problem is not None:
        raise problem

    return emit_report(args, job_report(job), report_lines)


def _calls_dict(calls: Any) -> list[dict[str, Any]]:
    return [{"step": c.step, "kind": c.kind, "phase": c.phase, "bytes": c.nbytes, "group": c.group_size,
             "target_group": c.target_group_size, "traced_s": c.traced_s, "predicted_s": c.predicted_s,
             "repriced": c.repriced, "reason": c.reason, "algorithm": c.algorithm} for c in calls]


def _breakdown(replayed: Any, predicted: bool) -> dict[str, float]:
    import numpy as np

    parts = replayed.predicted if predicted else replayed.measured
    return {name: float(np.median([getattr(b, name) for b in parts]))
            for name in ("span_s", "compute_s", "nccl_s", "exposed_nccl_s", "idle_s")}


def job_report(job: Any) -> dict[str, Any]:
    """What the replay found, as one JSON-able dict: the job's step by setting, and per rank."""
    ranks = []
    for r in job.ranks:
        entry: dict[str, Any] = {
            "path": r.path, "rank": r.rank, "library": r.library, "device": r.device,
            "steps": list(r.replayed.steps), "measured_step_s": r.replayed.measured_mean_s,
            "measured": _breakdown(r.replayed, False), "calls": _calls_dict(r.calls), "notes": list(r.notes)}
        if r.reproduced is not None:
            entry["reproduced_step_s"] = r.reproduced.predicted_mean_s
            entry["reproduced_naive_step_s"] = r.reproduced_naive.predicted_mean_s
            entry["reproduced"] = _breakdown(r.reproduced, True)
            entry["reproduced_calls"] = _calls_dict(r.reproduced_calls)
        if r.target is not None:
            entry["target_step_s"] = r.target.predicted_mean_s
            entry["target"] = _breakdown(r.target, True)
            entry["target_calls"] = _calls_dict(r.target_calls)
            entry["compute"] = r.compute_note
        ranks.append(entry)
    return {"world_size": job.world_size, "ranks_read": len(job.ranks),
            "job": {w: job.job_step_s(w) for w in ("measured", "reproduced", "reproduced_naive", "target")},
            "per_rank": ranks}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms" if math.isfinite(seconds) else "n/a"


def _calls_summary(calls: list[dict[str, Any]], step: int) -> list[str]:
    mine = [c for c in calls if c["step"] == step]
    out = []
    for (kind, phase, repriced, reason), n in Counter((c["kind"], c["phase"], c["repriced"], c["reason"])
                                                      for c in mine).items():
        same = [c for c in mine if (c["kind"], c["phase"], c["repriced"], c["reason"]) == (kind, phase, repriced,
                                                                                          reason)]
        size = sum(c["bytes"] or 0 for c in same)
        traced = sum(c["traced_s"] for c in same)
        if repriced:
            predicted = sum(c["predicted_s"] for c in same)
            out.append(f"    {n} x {kind} ({phase}), {format_size(size)}: NCCL kernels {_ms(traced)} traced, "
                       f"{_ms(predicted)} re-priced")
        else:
            out.append(f"    {n} x {kind} ({phase}): kept at its traced {_ms(traced)} ({reason})")
    return out


def report_lines(report: dict[str, Any]) -> list[str]:
    """What ``simulate --from-trace`` prints for a GPU job."""
    job = report["job"]
    first = report["per_rank"][0]
    m = first["measured"]
    lines = [f"{report['ranks_read']} of {report['world_size']} ranks read ({first['library'].upper()} on "
             f"{first['device'] or 'an unnamed GPU'}); steps {step_numbers(first['steps'])}",
             f"  measured GPU step {_ms(job['measured'])} (the slowest rank read; a step runs from the end of the "
             f"GPU work before it to the end of its own; mean over the steps after the first)",
             f"  rank {first['rank']}: GPU span {_ms(m['span_s'])}: compute {_ms(m['compute_s'])}, NCCL kernels "
             f"{_ms(m['nccl_s'])} of which {_ms(m['exposed_nccl_s'])} not overlapped by compute, idle "
             f"{_ms(m['idle_s'])}"]
    if len(report["per_rank"]) > 1:
        lines.append("  rank  measured    NCCL       exposed" + ("    reproduced" if "reproduced_step_s" in first
                                                                  else "") + ("    target" if "target_step_s" in first
                                                                              else ""))
        for r in report["per_rank"]:
            row = (f"  {r['rank']:>4}  {_ms(r['measured_step_s']):>10} {_ms(r['measured']['nccl_s']):>10} "
                   f"{_ms(r['measured']['exposed_nccl_s']):>10}")
            row += f"  {_ms(r['reproduced_step_s']):>10}" if "reproduced_step_s" in r else ""
            row += f"  {_ms(r['target_step_s']):>10}" if "target_step_s" in r else ""
            lines.append(row)
    if math.isfinite(job["reproduced"]):
        err = (job["reproduced"] - job["measured"]) / job["measured"] * 100
        naive = (job["reproduced_naive"] - job["measured"]) / job["measured"] * 100
        lines.append(f"reproduced where it ran (collectives through the NCCL model, compute as traced): "
                     f"{_ms(job['reproduced'])} ({err:+.1f} %); naive (bytes at the link rate) "
                     f"{_ms(job['reproduced_naive'])} ({naive:+.1f} %)")
        lines.extend(_calls_summary(first["reproduced_calls"], first["steps"][-1]))
    else:
        lines.append("not reproduced: give --traced-on CLUSTER (where the trace ran) to check the replay against the "
                     "measured GPU step first")
    if math.isfinite(job["target"]):
        lines.append(f"predicted on the target: {_ms(job['target'])} ({first['compute']})")
        lines.extend(_calls_summary(first["target_calls"], first["steps"][-1]))
    else:
        lines.append("no what-if asked: give --cluster (and --ranks) to replay the job elsewhere")
    if report["ranks_read"] < report["world_size"]:
        lines.append(f"note: {report['ranks_read']} of {report['world_size']} ranks read: when the others reach each "
                     "collective is not known, so a re-priced collective does not wait for them (its traced kernel "
                     "time did); give every rank's trace (a directory) for the job's step")
    for note in first["notes"]:
        lines.append("note: " + note)
    for path in report.get("files", []):
        lines.append(f"wrote {path}")
    return lines
