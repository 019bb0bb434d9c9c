"""Train the controller with PPO: generalized state-dependent exploration (gSDE) against Gaussian noise.

Why two runs: gSDE (Raffin et al.) draws the exploration noise as ``theta_eps . z(s)``, a function of the
policy's last hidden features ``z(s)``, with ``theta_eps`` re-drawn every ``sde_sample_freq`` env steps;
a knob then moves smoothly and consistently with the state instead of jittering independently every
decision, so its effect (a step time, a loss trend) can be measured. The control is the *same* PPO with
``use_sde=False`` (independent Gaussian noise per step), same network, seed, budget and environment.

stable-baselines3 does the learning (``PPO(..., use_sde=True, sde_sample_freq=k)``). One env step is
already one reconfiguration interval (``EnvConfig.interval`` training iterations holding the action), so
``sde_sample_freq=k`` re-draws ``theta_eps`` every ``k`` intervals. The initial noise scale is set per
variant (``log_std_init``) so both start with a similar action spread; :func:`exploration_spread` measures
it and it is written to ``train_summary.json``.

Training curves come two ways: the return of every rollout episode (exploration on, a random training
trace and model seed each: noisy, mostly the trace's difficulty) and, every ``eval_every`` timesteps, the
deterministic policy's return on ``eval_episodes`` *fixed* (trace, model seed) pairs, next to a uniform
random policy and a static c=0.01 on the same pairs (the noise-free "reward vs timesteps").

Files under ``out``: ``gsde.zip`` / ``gaussian.zip`` (``model.save``), ``training_curves.csv`` (every
finished episode: variant, timesteps, return), ``eval_curves.csv`` (the fixed-episode evaluations and the
references), ``training_curves.png``, ``train_config.json`` (the env
and training settings :mod:`controller.evaluate` rebuilds the env from) and ``train_summary.json``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.controller.config import VARIANTS, EnvConfig, TrainConfig, load_settings  # noqa: F401 (callers import them from here)
from flexcomm.controller.env import CompressionEnv, knobs_to_action
from flexcomm.controller.traces import NetworkTrace, family
from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.workloads import Workload, get_workload


def make_ppo(variant: str, env: Any, config: TrainConfig) -> Any:
    """The PPO model of ``variant`` (``gsde``: ``use_sde=True``; ``gaussian``: ``use_sde=False``)."""
    import torch
    from stable_baselines3 import PPO

    sde = variant == "gsde"
    policy_kwargs = {"net_arch": list(config.net_arch), "activation_fn": torch.nn.Tanh,
                     "log_std_init": config.log_std_init_sde if sde else config.log_std_init_gaussian}
    if sde:
        policy_kwargs["full_std"] = True
    return PPO("MlpPolicy", env, use_sde=sde, sde_sample_freq=config.sde_sample_freq if sde else -1,
               n_steps=config.n_steps, batch_size=config.batch_size, n_epochs=config.n_epochs,
               learning_rate=config.learning_rate, gamma=config.gamma, policy_kwargs=policy_kwargs,
               seed=config.seed, device="cpu", verbose=0)


def exploration_spread(model: Any, env: CompressionEnv, samples: int = 256, seed: int = 0) -> list[float]:
    """Standard deviation of the sampled actions around the mean action at the first state of an episode."""
    import torch

    obs, _ = env.reset(seed=seed)
    obs_t, _ = model.policy.obs_to_tensor(obs)
    with torch.no_grad():
        actions = []
        for _ in range(samples):
            if model.use_sde:
                model.policy.reset_noise()
            actions.append(model.policy.get_distribution(obs_t).sample().cpu().numpy().reshape(-1))
    return [float(s) for s in np.std(np.stack(actions), axis=0)]


def fixed_episodes(config: TrainConfig, traces: list[NetworkTrace]) -> list[tuple[NetworkTrace, int]]:
    """The (trace, model seed) pairs every evaluation during training replays: the same for both variants."""
    return [(traces[i % len(traces)], config.seed * 1000 + i) for i in range(config.eval_episodes)]


def fixed_returns(policy: Callable[[np.ndarray, np.random.Generator], np.ndarray], env: CompressionEnv,
                  episodes: list[tuple[NetworkTrace, int]], tick: Callable[[], Any] | None = None) -> list[float]:
    """Undiscounted return of ``policy(obs, rng)`` on each fixed episode (rng seeded by the model seed);
    ``tick()`` after each one (a progress bar's update)."""
    out = []
    for trace, model_seed in episodes:
        obs, _ = env.reset(seed=model_seed, options={"trace": trace, "model_seed": model_seed})
        rng = np.random.default_rng(model_seed)
        done, total = False, 0.0
        while not done:
            obs, reward, done, _, _ = env.step(policy(obs, rng))
            total += reward
        out.append(total)
        if tick is not None:
            tick()
    return out


def reference_returns(config: TrainConfig, traces: list[NetworkTrace], workload: Workload | None = None,
                      progress: bool = False) -> dict[str, list[float]]:
    """Returns of a uniform random policy and of a static c=0.01 (collective by the cost model) on the
    fixed episodes: the levels a trained policy should clear (tens of seconds: a bar shows them pass)."""
    from tqdm import tqdm


    env = CompressionEnv(config.env, traces, workload=workload)
    episodes = fixed_episodes(config, traces)
    static = knobs_to_action(0.01, "auto")
    with tqdm(total=2 * len(episodes), desc="reference episodes", unit="episode",
              disable=None if progress else True) as bar:
        return {"random": fixed_returns(lambda obs, rng: rng.uniform(-1, 1, 2).astype(np.float32), env, episodes,
                                        bar.update),
                "c=0.01 auto": fixed_returns(lambda obs, rng: static, env, episodes, bar.update)}


class _Recorder:
    """SB3 callback: every finished episode's return, and a tqdm bar over timesteps."""

    def __new__(cls, variant: str, total: int, progress: bool, evaluate: Callable[[Any], list[float]],
                eval_every: int) -> Any:  # built lazily: SB3 imports torch
        from stable_baselines3.common.callbacks import BaseCallback

        class Recorder(BaseCallback):
            def __init__(self) -> None:
                super().__init__()
                self.rows: list[dict[str, Any]] = []
                self.bar: Any = None
                self.returns: list[float] = []
                self.evals: list[dict[str, Any]] = []
                self.next_eval = 0

            def _evaluate(self) -> None:
                if self.bar is not None:
                    self.bar.set_postfix_str("evaluating the fixed episodes")
                returns = evaluate(self.model)
                self.evals.append({"variant": variant, "timesteps": int(self.num_timesteps),
                                   "mean_return": float(np.mean(returns)),
                                   **{f"return_{i}": r for i, r in enumerate(returns)}})
                self.next_eval = self.num_timesteps + eval_every

            def _on_training_start(self) -> None:
                if progress:  # the bar first: the initial evaluation alone takes seconds
                    from tqdm import tqdm

                    self.bar = tqdm(total=total, desc=variant, unit="step", leave=True, disable=None)
                self._evaluate()

            def _on_step(self) -> bool:
                for info in self.locals.get("infos", []):
                    episode = info.get("episode")
                    if episode is not None:
                        self.returns.append(float(episode["r"]))
                        self.rows.append({"variant": variant, "timesteps": int(self.num_timesteps),
                                          "episode": len(self.rows) + 1, "return": float(episode["r"]),
                                          "trace": info.get("trace", ""), "sim_time_s": info.get("sim_time_s")})
                if self.num_timesteps >= self.next_eval:
                    self._evaluate()
                if self.bar is not None:
                    self.bar.update(1)
                    if self.returns:
                        self.bar.set_postfix(ret=f"{np.mean(self.returns[-10:]):.3g}",
                                             eval=f"{self.evals[-1]['mean_return']:.3g}")
                return True

            def _on_training_end(self) -> None:
                if self.evals[-1]["timesteps"] != self.num_timesteps:
                    self._evaluate()
                if self.bar is not None:
                    self.bar.close()

        return Recorder()


def train_variant(variant: str, config: TrainConfig, traces: list[NetworkTrace], *, progress: bool = False,
                  workload: Workload | None = None) -> tuple[Any, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Train one variant; returns (model, per-episode curve, fixed-episode evaluations, summary)."""
    import torch
    from stable_baselines3.common.monitor import Monitor

    torch.set_num_threads(1)
    workload = workload or get_workload(config.env.workload, seed=config.env.seed)
    env = Monitor(CompressionEnv(config.env, traces, workload=workload), info_keywords=("trace", "sim_time_s"))
    model = make_ppo(variant, env, config)
    eval_env = CompressionEnv(config.env, traces, workload=workload)
    spread = exploration_spread(model, eval_env, seed=config.seed)
    env.reset(seed=config.seed)
    episodes = fixed_episodes(config, traces)

    def evaluate(model: Any) -> list[float]:
        return fixed_returns(lambda obs, rng: model.predict(obs, deterministic=True)[0], eval_env, episodes)

    recorder = _Recorder(variant, config.timesteps, progress, evaluate, config.eval_every)
    start = time.perf_counter()
    model.learn(total_timesteps=config.timesteps, callback=recorder)
    wall = time.perf_counter() - start
    curve = pd.DataFrame(recorder.rows, columns=["variant", "timesteps", "episode", "return", "trace", "sim_time_s"])
    returns = curve["return"].to_numpy()
    evals = pd.DataFrame(recorder.evals)
    tail = max(1, len(returns) // 5)
    summary = {"variant": variant, "use_sde": variant == "gsde", "timesteps": int(model.num_timesteps),
               "episodes": len(returns), "wall_s": wall, "initial_action_std": spread,
               "first_fifth_mean_return": float(np.mean(returns[:tail])) if len(returns) else math.nan,
               "last_fifth_mean_return": float(np.mean(returns[-tail:])) if len(returns) else math.nan,
               "fixed_eval_first": float(evals["mean_return"].iloc[0]),
               "fixed_eval_final": float(evals["mean_return"].iloc[-1])}
    return model, curve, evals, summary


def train(config: TrainConfig, out: str | Path, *, progress: bool = False, plot: bool = True) -> dict[str, Any]:
    """Train every variant in ``config.variants`` and write the files listed in the module docstring."""
    config.validate()
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    traces = family("train", config.train_traces, config.seed)
    settings = {"train": {k: v for k, v in asdict(config).items() if k != "env"}, "env": asdict(config.env),
                "traces": [t.rows() for t in traces]}
    write_text_atomic(outdir / "train_config.json", json.dumps(settings, indent=2) + "\n")
    workload = get_workload(config.env.workload, seed=config.env.seed)  # one data set for every env
    references = reference_returns(config, traces, workload, progress=progress)
    curves, evals = [], [pd.DataFrame([{"variant": name, "timesteps": 0, "mean_return": float(np.mean(r)),
                                        **{f"return_{i}": x for i, x in enumerate(r)}}
                                       for name, r in references.items()])]
    summaries: dict[str, Any] = {"references": {k: float(np.mean(v)) for k, v in references.items()}}
    for variant in config.variants:
        model, curve, evaluation, summary = train_variant(variant, config, traces, progress=progress,
                                                          workload=workload)
        model.save(outdir / f"{variant}.zip")
        curves.append(curve)
        evals.append(evaluation)
        summaries[variant] = summary
        write_csv_atomic(pd.concat(curves, ignore_index=True), outdir / "training_curves.csv")
        write_csv_atomic(pd.concat(evals, ignore_index=True), outdir / "eval_curves.csv")
    write_text_atomic(outdir / "train_summary.json", json.dumps(summaries, indent=2, default=float) + "\n")
    if plot:
        from flexcomm.controller.plots import plot_training_curves

        plot_training_curves(pd.concat(curves, ignore_index=True), outdir / "training_curves.png",
                             evals=pd.concat(evals, ignore_index=True))
    return summaries
