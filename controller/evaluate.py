"""Held-out comparison: the learned controllers against the multi-objective optimizer, static ratios and dense.

Why: a controller trained on one family of networks is only useful if it holds up on networks it never
saw. Every strategy runs the same emulated training (same model seed, data, cluster, ``price_params`` and
iterations as the controller's environment) on each held-out trace:

* ``gsde`` / ``gaussian``: the saved PPO policies, deterministic (the mean action), through
  :class:`~controller.env.CompressionEnv` with ``vary_model=False``;
* ``moo``: :class:`~emulation.engine.EmulatedRun`'s ``moo`` strategy (flexible scheme choice plus the
  NSGA-II ratio controller, probes charged to the clock) with its clock replaced by the trace's;
* ``topk-ag@c`` / ``topk-ar@c`` at fixed ratios and ``dense``: the same, static.

Per trace the target accuracy is ``target`` or, by default, 95% of the best final accuracy any strategy
reached on it (as ``flexcomm train-emulated`` does); time to target is the simulated time of the first
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

from flexcomm.controller.env import CompressionEnv, EnvConfig
from flexcomm.controller.traces import NetworkTrace, TraceClock
from flexcomm.controller.train import VARIANTS, load_settings
from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.emulation.engine import EmulatedRun, time_to_accuracy
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
    """One row per (trace, strategy): final / best accuracy, time to target, simulated time, what was chosen."""
    rows, targets = [], {}
    for trace, part in frames.groupby("trace", sort=False):
        finals = {s: run.dropna(subset=["test_acc"])["test_acc"].iloc[-1] for s, run in part.groupby("strategy")}
        goal = float(target) if target is not None else 0.95 * max(finals.values())
        targets[str(trace)] = goal
        for strategy, run in part.groupby("strategy", sort=False):
            schemes = run["scheme"].value_counts()
            rows.append({
                "trace": trace, "strategy": strategy, "target_acc": goal,
                "time_to_target_s": time_to_accuracy(run, goal),
                "final_test_acc": float(finals[strategy]),
                "best_test_acc": float(run["test_acc"].max()),
                "sim_time_s": float(run["sim_time_s"].iloc[-1]),
                "mean_step_s": float(run["step_time_s"].mean()),
                "median_ratio": float(run["ratio"].median()),
                "topk_ar_share": float(schemes.get("topk-ar", 0) / len(run)),
            })
    table = pd.DataFrame(rows)
    never = table["time_to_target_s"].fillna(math.inf)  # never reaching the target ranks last
    ranks = never.groupby(table["trace"]).rank(method="min")
    table["rank_time_to_target"] = ranks
    return table, targets


def markdown(table: pd.DataFrame) -> str:
    """The comparison as a markdown table per trace, then the mean rank over traces."""
    lines = []
    for trace, part in table.groupby("trace", sort=False):
        lines += [f"### trace {trace} (target accuracy {part['target_acc'].iloc[0]:.3f})", "",
                  "| strategy | time to target (s) | final acc | sim time (s) | mean step (ms) | median c | AR share |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for _, r in part.sort_values("time_to_target_s", na_position="last").iterrows():
            ttt = "never" if math.isnan(r["time_to_target_s"]) else f"{r['time_to_target_s']:.2f}"
            lines.append(f"| {r['strategy']} | {ttt} | {r['final_test_acc']:.3f} | {r['sim_time_s']:.2f} | "
                         f"{r['mean_step_s'] * 1e3:.1f} | {r['median_ratio']:.3g} | {r['topk_ar_share']:.2f} |")
        lines.append("")
    overall = table.assign(reached=table["time_to_target_s"].notna()).groupby("strategy", sort=False).agg(
        mean_rank=("rank_time_to_target", "mean"), reached=("reached", "sum"), traces=("trace", "count"),
        mean_final_acc=("final_test_acc", "mean"))
    lines += ["### over all traces (rank 1 = fastest to target; never reaching it ranks last)", "",
              "| strategy | mean rank | reached target | mean final acc |", "|---|---:|---:|---:|"]
    for name, r in overall.sort_values("mean_rank").iterrows():
        lines.append(f"| {name} | {r['mean_rank']:.2f} | {int(r['reached'])}/{int(r['traces'])} | "
                     f"{r['mean_final_acc']:.3f} |")
    return "\n".join(lines) + "\n"


def evaluate(model_dir: str | Path, traces: Sequence[NetworkTrace], out: str | Path, *,
             baselines: Sequence[str] = (*DEFAULT_STATIC, "moo"), target: float | None = None,
             seed: int | None = None, eval_every: int = 10, progress: bool = False, plot: bool = True
             ) -> pd.DataFrame:
    """Run every strategy on every trace and write the files listed in the module docstring."""
    models = load_models(model_dir)
    _, env_config = load_settings(model_dir)
    if target is not None and not (0 < target <= 1):
        raise InputError("target", target, "an accuracy in (0, 1]")
    env_config = replace(env_config, vary_model=False, eval_every=eval_every,
                         seed=env_config.seed if seed is None else seed)
    env_config.validate()
    for name in baselines:  # fail on a typo before minutes of training
        strategy, _, ratio = name.partition("@")
        if strategy not in ("dense", "moo", "topk-ag", "topk-ar") or (ratio and not _is_ratio(ratio)) or (
                strategy in ("topk-ag", "topk-ar") and not ratio):
            raise InputError("baselines", name, "dense, moo, topk-ag@RATIO or topk-ar@RATIO with RATIO in (0, 1]")
    workload = get_workload(env_config.workload, seed=env_config.seed)
    env = CompressionEnv(env_config, list(traces), workload=workload)
    names = [*models, *baselines]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(names) * len(traces), desc="evaluate", unit="run", leave=True)
    frames = []
    outdir = Path(out)
    try:
        for trace in traces:
            for name in names:
                if name in models:
                    frame = run_policy(models[name], env, trace)
                    frame["strategy"] = name
                else:
                    frame = run_baseline(name, env_config, trace, workload)
                frames.append(frame.assign(trace=trace.name))
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(trace=trace.name, run=name)
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


def _is_ratio(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return bool(np.isfinite(value) and 0 < value <= 1)
