"""Several seeds of one emulated setting: every claim as a mean with its 95 % confidence interval.

Why: one seed decides nothing. Two evaluations of the same small run can differ by more than two strategies
do, so a result is reported as mean +- the half-width of a Student-t 95 % interval over the seeds (the seeds
change the data split, shards, batch order and initial weights together), with the number of seeds beside
it, and figures draw the mean with a band. A single seed has no interval (reported as such, not as 0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.emulation.config import EmulationConfig
from flexcomm.emulation.engine import RunResult, run_emulation, time_to_accuracy

CONFIDENCE = 0.95


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Mean, Student-t half-width (None for one value) and n of the finite ``values``."""
    from scipy import stats

    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(finite)
    if n == 0:
        return {"mean": math.nan, "ci95": None, "n": 0, "values": []}
    mean = float(np.mean(finite))
    half = None
    if n > 1:
        half = float(stats.t.ppf((1 + confidence) / 2, n - 1) * np.std(finite, ddof=1) / math.sqrt(n))
    return {"mean": mean, "ci95": half, "n": n, "values": finite}


def format_ci(summary: dict[str, Any], fmt: str = "{:.4f}", scale: float = 1.0, unit: str = "seed") -> str:
    """``0.8731 +- 0.0042 (3 seeds)``; one seed: ``0.8731 (1 seed, no interval)``; ``unit`` names what n counts."""
    mean = fmt.format(summary["mean"] * scale)
    count = f"{summary['n']} {unit}{'s' if summary['n'] != 1 else ''}"
    if summary["ci95"] is None:
        return f"{mean} ({count}, no interval)"
    return f"{mean} +- {fmt.format(summary['ci95'] * scale)} ({count})"


def accuracy_bands(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Per evaluated step over the seeds: mean simulated time, mean test accuracy and its 95 % band, the band
    clipped to [0, 1] (with 3 seeds Student's t is 4.3: an unclipped band of a diverged seed reaches past 1)."""
    evals = pd.concat([f.dropna(subset=["test_acc"])[["step", "sim_time_s", "test_acc"]] for f in frames])
    rows = []
    for step, part in evals.groupby("step"):
        acc = mean_ci(part["test_acc"].tolist())
        half = acc["ci95"] or 0.0
        rows.append({"step": int(step), "sim_time_s": float(part["sim_time_s"].mean()), "test_acc": acc["mean"],
                     "test_acc_lo": max(0.0, acc["mean"] - half), "test_acc_hi": min(1.0, acc["mean"] + half),
                     "seeds": acc["n"]})
    return pd.DataFrame(rows)


def run_seeds(config: EmulationConfig, strategies: Sequence[str] | None, seeds: Sequence[int],
              out: str | Path | None, *, progress: bool = False, plot: bool = True
              ) -> dict[int, dict[str, RunResult]]:
    """Each seed's run of every strategy (files under ``out/seed<S>/``), then across seeds: ``emulated.csv``
    with a ``seed`` column, ``summary.json`` with mean, 95 % interval and n per metric, and ``emulated.png``
    with mean and band."""
    if len(seeds) < 1 or len(set(seeds)) != len(seeds):
        raise InputError("seeds", list(seeds), "one or more distinct seeds")
    outdir = Path(out) if out is not None else None
    runs = {seed: run_emulation(replace(config, seed=seed), strategies,
                                outdir / f"seed{seed}" if outdir is not None else None, progress=progress, plot=False)
            for seed in seeds}
    if outdir is None:
        return runs
    names = list(next(iter(runs.values())))
    frames = [res.frame.assign(seed=seed) for seed, results in runs.items() for res in results.values()]
    write_csv_atomic(pd.concat(frames, ignore_index=True), outdir / "emulated.csv")
    write_text_atomic(outdir / "summary.json", json.dumps(seed_summary(config, runs), indent=2, default=float) + "\n")
    if plot:
        from flexcomm.emulation.plots import plot_emulation

        bands = {name: accuracy_bands([runs[s][name].frame for s in seeds]) for name in names}
        cluster = config.cluster if isinstance(config.cluster, str) else config.cluster.name
        plot_emulation({n: runs[seeds[0]][n].frame for n in names}, outdir / "emulated.png",
                       title=f"{config.workload}, {config.workers} workers, {cluster} ({config.network} network); "
                             f"mean and 95 % band over {len(seeds)} seeds", bands=bands)
    return runs


def seed_summary(config: EmulationConfig, runs: dict[int, dict[str, RunResult]]) -> dict[str, Any]:
    """Mean, 95 % interval and n per strategy of final accuracy, simulated time and time to 95 % of the best
    mean final accuracy (each seed's own run timed against that one target)."""
    names = list(next(iter(runs.values())))
    finals = {n: mean_ci([runs[s][n].summary["final_test_acc"] for s in runs]) for n in names}
    best = max((f["mean"] for f in finals.values() if math.isfinite(f["mean"])), default=math.nan)
    target = 0.95 * best
    strategies = {}
    for name in names:
        per_seed = [runs[s][name] for s in runs]
        strategies[name] = {
            "final_test_acc": finals[name],
            "sim_time_s": mean_ci([r.summary["sim_time_s"] for r in per_seed]),
            "time_to_target_s": mean_ci([time_to_accuracy(r.frame, target) for r in per_seed]),
            "reached_target": sum(1 for r in per_seed if math.isfinite(time_to_accuracy(r.frame, target))),
        }
    cluster = config.cluster if isinstance(config.cluster, str) else config.cluster.name
    return {"workload": config.workload, "workers": config.workers, "cluster": cluster, "network": config.network,
            "steps": config.steps, "seeds": list(runs), "confidence": CONFIDENCE, "target_test_acc": target,
            "strategies": strategies}
