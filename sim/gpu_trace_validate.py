"""The GPU replay checked on public traces: each trace's GPU step and NCCL kernel time, measured against
reproduced where it ran (the NCCL model) and against the naive baseline (bytes at the link rate).

Why a table of settings: no public trace states its network. ``settings.csv`` beside the traces names the
cluster each is reproduced on and says it is an assumption; a trace with no setting is measured only.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.plotting import use_file_backend
from flexcomm.sim.gpu_job import Settings, replay_job


def shipped_traces() -> Path:
    """The public traces shipped with flexcomm (``validation/gpu-traces``)."""
    return Path(str(resources.files("flexcomm.validation") / "gpu-traces"))


@dataclass(frozen=True)
class TraceCheck:
    trace: str
    setting: str
    assumption: str


def read_settings(folder: Path) -> list[TraceCheck]:
    path = folder / "settings.csv"
    if not path.is_file():
        raise InputError("gpu-traces", str(folder), "a folder of traces with settings.csv (trace, traced_on, "
                         "assumption)")
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for k, row in enumerate(rows, start=2):
        if not row.get("trace") or "traced_on" not in row:
            raise InputError(f"{path} line {k}", row, "trace,traced_on,assumption")
    return [TraceCheck(r["trace"], r["traced_on"] or "", r.get("assumption", "")) for r in rows]


def validate_gpu_traces(folder: str | Path | None = None) -> pd.DataFrame:
    """One row per trace: measured GPU step, reproduced (model) and naive, NCCL kernel time measured and
    predicted (last step, every rank read summed over the slowest rank), with the assumption it rests on."""
    root = Path(folder) if folder else shipped_traces()
    rows = []
    for check in read_settings(root):
        traced = load_cluster(check.setting) if check.setting else None
        job = replay_job([root / check.trace], Settings(traced=traced), progress=False)
        if job is None:
            raise InputError(str(root / check.trace), "a host-only trace", "GPU traces")
        slowest = max(job.ranks, key=lambda r: r.replayed.measured_mean_s)
        last = slowest.replayed.steps[-1]
        measured_nccl = sum(c.traced_s for c in slowest.calls if c.step == last)
        predicted_nccl = sum(c.predicted_s for c in slowest.reproduced_calls if c.step == last) \
            if slowest.reproduced is not None else math.nan
        repriced = sum(c.repriced for c in slowest.reproduced_calls)
        rows.append({
            "trace": check.trace, "ranks_read": len(job.ranks), "world": job.world_size,
            "device": slowest.device, "library": slowest.library, "setting": check.setting or "-",
            "measured_step_ms": job.job_step_s("measured") * 1e3,
            "model_step_ms": job.job_step_s("reproduced") * 1e3,
            "naive_step_ms": job.job_step_s("reproduced_naive") * 1e3,
            "measured_nccl_ms": measured_nccl * 1e3, "model_nccl_ms": predicted_nccl * 1e3,
            "calls_repriced": repriced, "calls": len(slowest.calls),
            "assumption": check.assumption})
    frame = pd.DataFrame(rows)
    frame["model_error"] = (frame["model_step_ms"] - frame["measured_step_ms"]) / frame["measured_step_ms"]
    frame["naive_error"] = (frame["naive_step_ms"] - frame["measured_step_ms"]) / frame["measured_step_ms"]
    return frame


def report_lines(frame: pd.DataFrame) -> list[str]:
    """The table people read, and where the model beats the naive baseline and where not."""
    lines = ["trace                                                   ranks  measured   model (err)        naive (err)"
             "        NCCL measured / model"]
    for r in frame.itertuples():
        model = f"{r.model_step_ms:8.2f} ({r.model_error * 100:+5.1f} %)" if math.isfinite(r.model_step_ms) \
            else "   n/a            "
        naive = f"{r.naive_step_ms:8.2f} ({r.naive_error * 100:+5.1f} %)" if math.isfinite(r.naive_step_ms) \
            else "   n/a            "
        nccl = f"{r.measured_nccl_ms:7.2f} / {r.model_nccl_ms:7.2f} ms" if math.isfinite(r.model_nccl_ms) \
            else f"{r.measured_nccl_ms:7.2f} / n/a"
        lines.append(f"{r.trace[:54]:<54} {r.ranks_read:>2}/{r.world:<3} {r.measured_step_ms:8.2f}  {model}  "
                     f"{naive}  {nccl}")
    checked = frame[frame["model_step_ms"].notna()]
    if len(checked):
        closer = int((checked["model_error"].abs() < checked["naive_error"].abs()).sum())
        ties = int((checked["model_error"].abs() == checked["naive_error"].abs()).sum())
        within = int((checked["model_error"].abs() <= 0.05).sum())
        lines.append(f"model within 5 % of the measured GPU step on {within} of {len(checked)} traces; closer than "
                     f"the naive baseline on {closer}, as close on {ties} (a step the host or the compute bounds "
                     "does not move with the collectives' price)")
    lines.append("settings are assumptions (no public trace states its network): validation/gpu-traces/settings.csv")
    return lines


def plot_gpu_traces(frame: pd.DataFrame, path: str | Path) -> Path:
    """Measured GPU step beside the model's and the naive baseline's reproduction, one group of bars a trace
    (the NCCL kernel time of the slowest rank's last step drawn inside each, measured and modelled)."""
    import numpy as np


    use_file_backend()
    import matplotlib.pyplot as plt

    table = frame[frame["model_step_ms"].notna()].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(9, 5))
    x = np.arange(len(table))
    w = 0.25
    ax.bar(x - w, table["measured_step_ms"], w, color="#444444", label="measured GPU step")
    ax.bar(x, table["model_step_ms"], w, color="#2ca02c", label="reproduced: collectives through the NCCL model")
    ax.bar(x + w, table["naive_step_ms"], w, color="#bdbdbd", hatch="//", edgecolor="#7f7f7f",
           label="naive: collectives' bytes at the link rate")
    ax.bar(x - w, table["measured_nccl_ms"], w * 0.4, color="#d62728", label="NCCL kernels of the step, measured")
    ax.bar(x, table["model_nccl_ms"], w * 0.4, color="#ff9896", label="NCCL kernels of the step, model")
    for i, r in table.iterrows():
        ax.annotate(f"{r['model_error']:+.1%}", (i, r["model_step_ms"]), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points", color="#2ca02c")
    labels = [f"{r.trace.split('__')[1].split('.')[0][:34]}\n{r.ranks_read}/{r.world} ranks, {r.setting}"
              for r in table.itertuples()]
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("time per step (ms)")
    ax.set_ylim(0, float(table[["measured_step_ms", "model_step_ms", "naive_step_ms"]].max().max()) * 1.15)
    ax.set_title("Public GPU traces: the GPU step reproduced where each is taken to have run", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    fig.tight_layout()
    return save_figure_atomic(fig, Path(path))
