"""What a lost rank cost an elastic run on real ranks, next to what the recovery simulator predicts.

Measured (from the launcher's ``elastic.json`` and rank 0's ``steps.csv``): the failure is noticed at the
end of round 0; the step the job had reached, s_fail, is reached again in round 1 at t_again; the time lost
is t_again - t_last, where t_last is when round 0 finished step s_fail (a failure-free run would have been
there then). It holds detection (the launcher's grace for the peers, stuck in a collective with the dead
rank), the relaunch (processes, imports, rendezvous, model), the checkpoint load and the steps since the
last checkpoint, done again.

Predicted, by :func:`sim.recovery.simulate_recovery` with the ``shrink`` policy, from quantities measured
*apart* from the failure and from mechanisms, with no constant fitted to a failure:

* detection = the launcher's poll interval (:data:`real_backend.launch.POLL_S`): on one host the kernel
  closes a dead rank's sockets, so its peers' gloo collectives fail at once and they exit by themselves;
  the grace (``grace_s``) is only the bound for peers that hang (on a cluster: the collective timeout).
* restart = round 0's own start-up (launch to first step), scaled for the ranks that start: start-up is
  CPU-bound (interpreter, imports, model), so N ranks on C cores take max(1, N / C) times one rank's;
  3 ranks after 4 on 2 cores start in 3/4 of the time.
* the step time of round 0's steps and the checkpoint interval in steps (the work done again).

The failure is injected at the measured failure time. The report gives both and the relative error (goal:
within 25 %).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic, write_text_atomic
from flexcomm.costmodel.bounded_stream import read_csv_bounded, read_json_bounded
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.plotting import use_file_backend
from flexcomm.real_backend.launch import POLL_S
from flexcomm.sim.recovery import Plan, Planner, RecoveryConfig, simulate_recovery


class FixedStepPlanner(Planner):
    """Data parallelism over any number of ranks at one measured step time (per-rank batch kept)."""

    def __init__(self, step_s: float, batch_per_rank: float = 1.0) -> None:
        self.step_s, self.batch = step_s, batch_per_rank

    def best(self, gpus: int) -> tuple[Plan | None, float]:
        return Plan(f"d{gpus}", 1, 1, gpus, self.step_s, self.batch * gpus), 0.0

    def shrunk(self, plan: Plan, gpus: int) -> Plan | None:
        return Plan(f"d{gpus}", 1, 1, gpus, self.step_s, self.batch * gpus) if gpus >= 1 else None


def _continuous(r0: pd.DataFrame, r1: pd.DataFrame, s_ckpt: int) -> bool:
    at = r0[r0["step"] == s_ckpt + 1]
    if s_ckpt == 0 or at.empty or r1.empty:
        return False
    resumed = float(r1["loss"].iloc[0])
    return abs(resumed - float(at["loss"].iloc[0])) < abs(resumed - float(r0["loss"].iloc[0]))


def measure(log_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """The measured and predicted time lost of the first lost rank of an elastic run (seconds)."""
    log_dir, out = Path(log_dir), Path(out)

    try:
        launcher = read_json_bounded(log_dir / "elastic.json", "report", "elastic.json")
        rounds = launcher["rounds"]  # type: ignore[index]
        steps = read_csv_bounded(out / "steps.csv", "report", "steps.csv")
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError("report", str(log_dir), f"an elastic run's elastic.json and steps.csv ({exc})") from None
    if len(rounds) < 2:
        raise InputError("report", str(log_dir), "an elastic run in which a rank was lost (one round only)")
    first, second = rounds[0], rounds[1]
    done = steps[steps["event"].isna() | (steps["event"] == "")]
    r0, r1 = done[done["attempt"] == 0], done[done["attempt"] == 1]
    marks = steps[steps["event"].notna() & (steps["event"] != "")]
    start0 = float(marks[(marks["attempt"] == 0) & (marks["event"] == "started")]["since_start_s"].iloc[0])
    s_fail = int(r0["step"].max())
    t_last = float(r0.loc[r0["step"] == s_fail, "since_start_s"].iloc[0])
    again = r1[r1["step"] >= s_fail]
    if again.empty:
        raise InputError("report", str(out / "steps.csv"), f"round 1 reaching step {s_fail} again")
    t_again = float(again["since_start_s"].iloc[0])
    checkpoints = marks[(marks["attempt"] == 0) & (marks["event"] == "checkpoint")]
    s_ckpt = int(checkpoints["step"].max()) if len(checkpoints) else 0
    resumed_at = float(marks[(marks["attempt"] == 1) & (marks["event"] == "resumed")]["since_start_s"].iloc[0])
    step_s = float(r0["step_s"].median())
    every = int(checkpoints["step"].min()) if len(checkpoints) else s_fail + 1
    grace = float(launcher.get("grace_s", 2.0))
    detection = min(grace, POLL_S)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    world0, world1 = int(first["world_size"]), int(second["world_size"])
    restart = start0 * max(1.0, world1 / cores) / max(1.0, world0 / cores)
    measured = t_again - t_last
    # the simulator's clock starts at the first step; the failure happens just after step s_fail
    fail_at = (s_fail + 0.5) * step_s
    config = RecoveryConfig("shrink", horizon_s=fail_at + 10 * (start0 + grace + step_s * (s_fail + 1)),
                            mtbf_s=1e12, repair_s=1e12, checkpoint_every_s=every * step_s, detection_s=detection,
                            restart_s=restart, storage_Bps=1e12)
    result = simulate_recovery(FixedStepPlanner(step_s), int(first["world_size"]), 1, 1.0, config, 1e12,
                               failures=[(fail_at, (int(first["failed_rank"] or 0),))])
    lost = result.lost_s
    predicted = lost["detection"] + lost["restart"] + lost["checkpoint_load"] + lost["lost_work"]
    report = {
        "world_before": int(first["world_size"]), "world_after": int(second["world_size"]),
        "failed_rank": first["failed_rank"], "failure_step": s_fail, "last_checkpoint_step": s_ckpt,
        "median_step_s": step_s, "startup_s": start0, "grace_s": grace, "cores": cores,
        "measured_lost_s": measured,
        "measured_detection_s": float(first["ended_s"]) - t_last,
        "measured_restart_s": resumed_at - float(second["started_s"]),
        "measured_redo_s": t_again - resumed_at,
        "predicted_lost_s": predicted,
        "predicted": {k: lost[k] for k in ("detection", "restart", "checkpoint_load", "lost_work")},
        "rel_error": predicted / measured - 1 if measured > 0 else math.nan,
        # resumed, not restarted: round 1's first loss is nearer round 0's at the same step than round 0's first
        "loss_continuous": _continuous(r0, r1, s_ckpt),
    }
    write_text_atomic(out / "elastic_report.json", json.dumps(report, indent=2, default=float) + "\n")
    plot(steps, report, out / "elastic.png")
    return report


def summary_line(r: dict[str, Any]) -> str:
    """The one line ``flexcomm launch --elastic --report`` and ``train-ddp --elastic`` print about a lost rank."""
    return (f"lost rank {r['failed_rank']} at step {r['failure_step']} ({r['world_before']} -> {r['world_after']} "
            f"ranks, resumed from step {r['last_checkpoint_step']}): time lost measured {r['measured_lost_s']:.2f}s, "
            f"simulator (shrink) {r['predicted_lost_s']:.2f}s ({r['rel_error']:+.1%})")


def plot(steps: pd.DataFrame, report: dict[str, Any], path: Path) -> Path:
    use_file_backend()
    import matplotlib.pyplot as plt

    done = steps[steps["event"].isna() | (steps["event"] == "")]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for attempt, group in done.groupby("attempt"):
        world = int(group["world_size"].iloc[0])
        ax.plot(group["step"], group["loss"], marker=".", ms=3, lw=1, label=f"round {attempt}: {world} ranks")
        bx.plot(group["since_start_s"], group["step"], marker=".", ms=3, lw=1, label=f"round {attempt}: {world} ranks")
    ax.axvline(report["last_checkpoint_step"], color="grey", ls=":", label="checkpoint resumed from")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mean over ranks)")
    ax.set_title("the loss runs on from the checkpoint", fontsize=9)
    ax.legend(fontsize=8)
    bx.set_xlabel("seconds since the launch")
    bx.set_ylabel("step reached")
    bx.set_title(f"time lost: measured {report['measured_lost_s']:.1f} s, simulator (shrink) "
                 f"{report['predicted_lost_s']:.1f} s ({report['rel_error']:+.0%})", fontsize=9)
    bx.legend(fontsize=8)
    fig.tight_layout()
    return save_figure_atomic(fig, path)
