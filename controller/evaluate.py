"""Held-out comparison: the learned controllers against the multi-objective optimizer, static ratios and dense.

Why: a controller trained on one family of networks is only useful if it holds up on networks it never
saw. Every strategy runs the same emulated training (same model seed, data, cluster, ``price_params`` and
iterations as the controller's environment) on each held-out trace:

* ``gsde`` / ``gaussian``: the saved PPO policies, deterministic (the mean action), through
  :class:`~controller.env.CompressionEnv` with ``vary_model=False``;
* ``moo``: :class:`~emulation.engine.EmulatedRun`'s ``moo`` strategy (flexible scheme choice plus the
  NSGA-II ratio controller, probes charged to the clock) with its clock replaced by the trace's;
* ``topk-ag@c`` / ``topk-ar@c`` at fixed ratios and ``dense``: the same, static.

Every run is repeated for several model seeds (data split, shards, batch order, initial weights; default
3), and each number is a mean with its 95 % interval. Per trace the target accuracy is ``target`` or, by
default, 95% of the best mean final accuracy any strategy reached on it (as ``flexcomm train-emulated``
does); time to target is the simulated time of the first
evaluation at or above it (NaN: never reached). Files: ``runs.csv`` (every iteration of every run),
``comparison.csv`` / ``comparison.md`` (one row per trace and strategy) and ``comparison.png``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.controller.config import VARIANTS, check_baselines, load_settings
from flexcomm.controller.env import CompressionEnv, EnvConfig
from flexcomm.controller.traces import NetworkTrace, TraceClock
from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.emulation.engine import EmulatedRun, time_to_accuracy
from flexcomm.emulation.seeds import mean_ci
from flexcomm.workloads import Workload, get_workload

DEFAULT_STATIC = ("dense", "topk-ag@0.1", "topk-ag@0.01", "topk-ag@0.001", "topk-ar@0.1", "topk-ar@0.01",
                  "topk-ar@0.001")


def load_models(model_dir: str | Path, variants: Sequence[str] = VARIANTS) -> dict[str, Any]:
    """The saved PPO models of ``variants`` present under ``model_dir`` (at least one, else an InputError)."""
    from stable_baselines3 import PPO

    directory = Path(model_dir)
    if not directory.is_dir():
        raise InputError("model", str(model_dir), "a directory written by `flexcomm controller train`")
    models = {}
    for variant in variants:
        path = directory / f"{variant}.zip"
        if path.is_file():
            try:
                models[variant] = PPO.load(path, device="cpu")
            except Exception as exc:  # a truncated or foreign zip: say which file, not a traceback
                raise InputError("model", str(path), f"a model saved by `flexcomm controller train` ({exc})"
                                 ) from None
    if not models:
        raise InputError("model", str(model_dir), "a directory holding gsde.zip and/or gaussian.zip "
                         "(`flexcomm controller train --out DIR`)")
    return models


def run_policy(model: Any, env: CompressionEnv, trace: NetworkTrace) -> pd.DataFrame:
    """One deterministic episode of ``model`` on ``trace`` at the env's own model seed."""
    obs, _ = env.reset(seed=env.config.seed, options={"trace": trace, "model_seed": env.config.seed})
    done = False
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, _, done, _, _ = env.step(action)
    return env.frame()


def run_baseline(name: str, env_config: EnvConfig, trace: NetworkTrace, workload: Workload) -> pd.DataFrame:
    """``dense``, ``moo`` or ``topk-ag@c`` / ``topk-ar@c`` as an :class:`EmulatedRun` on ``trace``."""
    strategy, _, ratio_text = name.partition("@")
    if strategy in ("topk-ag", "topk-ar"):
        try:
            ratio = float(ratio_text)
        except ValueError:
            raise InputError("baselines", name, f"{strategy}@RATIO, e.g. {strategy}@0.01") from None
    elif strategy in ("dense", "moo") and not ratio_text:
        ratio = 0.01
    else:
        raise InputError("baselines", name, "dense, moo, topk-ag@RATIO or topk-ar@RATIO")
    cfg = replace(env_config.emulation(env_config.seed), strategy=strategy, ratio=ratio)
    run = EmulatedRun(cfg, workload=workload)
    run.clock = TraceClock(trace, cfg.steps, run.price_scale, cfg.jitter, cfg.seed)
    frame = run.run().frame
    frame["strategy"] = name
    return frame


def summarise(frames: pd.DataFrame, target: float | None = None) -> tuple[pd.DataFrame, dict[str, float]]:
    """One row per (trace, strategy): final / best accuracy, time to target, simulated time, what was chosen.

    With a ``seed`` column (several seeds) every number is the mean over the seeds, ``*_ci95`` is the half-width
    of its Student-t 95 % interval (NaN for one seed), ``seeds`` counts them and ``reached`` how many seeds
    reach the target; the default target is 95 % of the best *mean* final accuracy.
    """
    frames = frames if "seed" in frames else frames.assign(seed=0)
    rows, targets = [], {}
    for trace, part in frames.groupby("trace", sort=False):
        finals = {(s, seed): float(run.dropna(subset=["test_acc"])["test_acc"].iloc[-1])
                  for (s, seed), run in part.groupby(["strategy", "seed"], sort=False)}
        mean_finals = pd.Series(finals).groupby(level=0).mean()
        goal = float(target) if target is not None else 0.95 * float(mean_finals.max())
        targets[str(trace)] = goal
        for strategy, runs in part.groupby("strategy", sort=False):
            per_seed = [run for _, run in runs.groupby("seed", sort=False)]
            final = mean_ci([finals[(strategy, seed)] for seed, _ in runs.groupby("seed", sort=False)])
            reach = mean_ci([time_to_accuracy(run, goal) for run in per_seed])
            schemes = runs["scheme"].value_counts()
            rows.append({
                "trace": trace, "strategy": strategy, "target_acc": goal, "seeds": len(per_seed),
                "reached": reach["n"], "time_to_target_s": reach["mean"],
                "time_to_target_ci95": math.nan if reach["ci95"] is None else reach["ci95"],
                "final_test_acc": final["mean"],
                "final_test_acc_ci95": math.nan if final["ci95"] is None else final["ci95"],
                "best_test_acc": float(runs["test_acc"].max()),
                "sim_time_s": float(np.mean([run["sim_time_s"].iloc[-1] for run in per_seed])),
                "mean_step_s": float(runs["step_time_s"].mean()),
                "median_ratio": float(runs["ratio"].median()),
                "topk_ar_share": float(schemes.get("topk-ar", 0) / len(runs)),
            })
    table = pd.DataFrame(rows)
    never = table["time_to_target_s"].fillna(math.inf)  # never reaching the target ranks last
    ranks = never.groupby(table["trace"]).rank(method="min")
    table["rank_time_to_target"] = ranks
    return table, targets


def plus_minus(mean: float, half: float, fmt: str) -> str:
    """``mean +- half`` in ``fmt``; a NaN half-width (one seed) shows the mean alone."""
    return fmt.format(mean) + ("" if math.isnan(half) else " +- " + fmt.format(half))


def markdown(table: pd.DataFrame) -> str:
    """The comparison as a markdown table per trace (mean +- 95 % interval over the seeds), then the mean rank."""
    lines = []
    for trace, part in table.groupby("trace", sort=False):
        seeds = int(part["seeds"].max())
        lines += [f"### trace {trace} (target accuracy {part['target_acc'].iloc[0]:.3f}; mean +- 95 % interval over "
                  f"{seeds} seed{'s' if seeds != 1 else ''})", "",
                  "| strategy | time to target (s) | seeds reaching it | final acc | sim time (s) | mean step (ms) | "
                  "median c | AR share |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for _, r in part.sort_values("time_to_target_s", na_position="last").iterrows():
            ttt = "never" if math.isnan(r["time_to_target_s"]) else plus_minus(r["time_to_target_s"],
                                                                         r["time_to_target_ci95"], "{:.2f}")
            lines.append(f"| {r['strategy']} | {ttt} | {int(r['reached'])}/{int(r['seeds'])} | "
                         f"{plus_minus(r['final_test_acc'], r['final_test_acc_ci95'], '{:.3f}')} | "
                         f"{r['sim_time_s']:.2f} | "
                         f"{r['mean_step_s'] * 1e3:.1f} | {r['median_ratio']:.3g} | {r['topk_ar_share']:.2f} |")
        lines.append("")
    overall = table.assign(reached_any=table["time_to_target_s"].notna()).groupby("strategy", sort=False).agg(
        mean_rank=("rank_time_to_target", "mean"), reached=("reached_any", "sum"), traces=("trace", "count"),
        mean_final_acc=("final_test_acc", "mean"))
    lines += ["### over all traces (rank 1 = fastest to target; never reaching it ranks last)", "",
              "| strategy | mean rank | reached target | mean final acc |", "|---|---:|---:|---:|"]
    for name, r in overall.sort_values("mean_rank").iterrows():
        lines.append(f"| {name} | {r['mean_rank']:.2f} | {int(r['reached'])}/{int(r['traces'])} | "
                     f"{r['mean_final_acc']:.3f} |")
    return "\n".join(lines) + "\n"


def evaluate(model_dir: str | Path, traces: Sequence[NetworkTrace], out: str | Path, *,
             baselines: Sequence[str] = (*DEFAULT_STATIC, "moo"), target: float | None = None,
             seed: int | None = None, seeds: int = 3, eval_every: int = 10, progress: bool = False,
             plot: bool = True) -> pd.DataFrame:
    """Run every strategy on every trace for ``seeds`` model seeds (``seed``, ``seed``+1, ...) and write the
    files listed in the module docstring."""
    models = load_models(model_dir)
    _, env_config = load_settings(model_dir)
    if target is not None and not (0 < target <= 1):
        raise InputError("target", target, "an accuracy in (0, 1]")
    env_config = replace(env_config, vary_model=False, eval_every=eval_every,
                         seed=env_config.seed if seed is None else seed)
    env_config.validate()
    check_baselines(baselines)  # a typo fails before minutes of training
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise InputError("seeds", seeds, "a number of seeds >= 1")
    names = [*models, *baselines]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(names) * len(traces) * seeds, desc="evaluate", unit="run", leave=True,
                   disable=None)
    frames = []
    outdir = Path(out)
    try:
        for run_seed in range(env_config.seed, env_config.seed + seeds):
            seeded = replace(env_config, seed=run_seed)
            workload = get_workload(seeded.workload, seed=run_seed)
            env = CompressionEnv(seeded, list(traces), workload=workload)
            for trace in traces:
                for name in names:
                    if name in models:
                        frame = run_policy(models[name], env, trace)
                        frame["strategy"] = name
                    else:
                        frame = run_baseline(name, seeded, trace, workload)
                    frames.append(frame.assign(trace=trace.name, seed=run_seed))
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(seed=run_seed, trace=trace.name, run=name)
    finally:
        if bar is not None:
            bar.close()
    runs = pd.concat(frames, ignore_index=True)
    table, targets = summarise(runs, target)
    write_csv_atomic(runs, outdir / "runs.csv")
    write_csv_atomic(table, outdir / "comparison.csv")
    write_text_atomic(outdir / "comparison.md", markdown(table))
    if plot:
        from flexcomm.controller.plots import plot_comparison

        plot_comparison(runs, outdir / "comparison.png", targets)
    return table

