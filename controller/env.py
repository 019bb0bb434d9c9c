"""Emulated data-parallel training on a changing network as a gymnasium environment.

Why: the multi-objective optimizer (:mod:`compression.moo`) picks the compression ratio from a model of
time and gain; a learned controller instead learns the mapping from what a worker can observe to a ratio
and a collective, directly from the outcome. Both must run on the same emulation to compare.

One environment step = one *reconfiguration interval*: the action is held for ``interval`` training
iterations of an :class:`~emulation.engine.EmulatedRun` (real gradients of N workers, error feedback,
the simulated clock of a :class:`~controller.traces.TraceClock`), then the controller observes again.

* **action** ``Box([-1, 1]^2)``: ``log10 c = -2 + a0`` (c in [0.001, 0.1], the brief's range) and the
  collective ``a1``: below -1/3 Top-k over Allgather, above 1/3 Allreduce-compatible Top-k, in between
  "best by the cost model" (the faster of the two under the online (alpha, beta) estimate at that c).
* **observation** (12 floats, see :data:`OBSERVATION`): progress, the last two intervals' mean step times,
  the communication share, the online network estimate (alpha, bandwidth) of
  :class:`~compression.network_estimate.NetworkEstimator`, the compression gain, the training-loss trend
  and level, the current c and collective, and the cost model's Allgather/Allreduce time ratio at that c.
* **reward** per interval: ``loss_weight * (log L_prev - log L_now) - time_weight * seconds``, where L is
  the mean training loss of an interval and ``seconds`` the simulated time it took. Summed over an episode
  it telescopes to ``loss_weight * log(L_0 / L_end) - time_weight * T``: statistical progress (what the
  gradient the compressor lets through buys) against simulated time, one simulated second being worth
  ``time_weight / loss_weight`` nats of loss. High c buys loss decrease per step, low c buys short steps
  on slow links; ``time_weight`` sets where the exchange rate tips (see the README section).

Episodes have a fixed length (``episode_iters``) and end with ``terminated=True`` (progress is observed,
so the state stays Markov). Each reset draws a trace from ``traces`` and, with ``vary_model``, a new model
seed (weights, shards, batches) from the env's seeded generator: same seed, same episodes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import torch
from gymnasium import spaces

from flexcomm.compression.base import StepStats
from flexcomm.compression.flexible import FlexibleCompressor
from flexcomm.controller.config import EnvConfig
from flexcomm.controller.traces import NetworkTrace, TraceClock, family
from flexcomm.costmodel.errors import InputError
from flexcomm.emulation.engine import CSV_COLUMNS, EmulatedRun
from flexcomm.workloads import Workload, evaluate, get_workload

SPARSE = ("topk-ag", "topk-ar")
LOG10_C_CENTRE = -2.0  #: a0 = 0 is c = 0.01; a0 = -1 / +1 are 0.001 / 0.1
TIME_REF_S = 0.02  #: step times are observed as log10(seconds / TIME_REF_S)
OBSERVATION = (
    "progress", "log_step_time", "log_step_time_prev", "comm_share", "log_alpha_est", "log_bandwidth_est",
    "gain", "loss_trend", "log_loss", "log_ratio", "collective", "log_ag_over_ar",
)


def action_to_knobs(action: Sequence[float] | np.ndarray) -> tuple[float, str]:
    """(compression ratio, collective mode) of an action; modes: topk-ag, topk-ar or auto."""
    a = np.clip(np.asarray(action, dtype=np.float64).reshape(-1), -1.0, 1.0)
    if a.shape != (2,) or not np.all(np.isfinite(a)):
        raise InputError("action", action, "two finite numbers in [-1, 1]")
    ratio = float(10.0 ** (LOG10_C_CENTRE + a[0]))
    mode = "topk-ag" if a[1] < -1 / 3 else "topk-ar" if a[1] > 1 / 3 else "auto"
    return ratio, mode


def knobs_to_action(ratio: float, mode: str) -> np.ndarray:
    """The action that selects ``ratio`` (clipped to [0.001, 0.1]) and ``mode``."""
    if mode not in (*SPARSE, "auto"):
        raise InputError("mode", mode, "topk-ag, topk-ar or auto")
    a0 = float(np.clip(math.log10(ratio) - LOG10_C_CENTRE, -1.0, 1.0))
    return np.array([a0, {"topk-ag": -1.0, "topk-ar": 1.0, "auto": 0.0}[mode]], dtype=np.float32)


class CompressionEnv(gym.Env):
    """See the module docstring. ``traces`` default: 16 seeded traces of the ``train`` family."""

    metadata = {"render_modes": []}

    def __init__(self, config: EnvConfig | None = None, traces: Sequence[NetworkTrace] | None = None,
                 workload: Workload | None = None) -> None:
        self.config = config or EnvConfig()
        self.config.validate()
        self.traces = list(traces) if traces else family("train", 16, self.config.seed)
        self.workload = workload or get_workload(self.config.workload, seed=self.config.seed)
        self.chance_loss = math.log(self.workload.num_classes)
        self.observation_space = spaces.Box(-10.0, 10.0, shape=(len(OBSERVATION),), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.run: EmulatedRun | None = None
        self.trace: NetworkTrace | None = None
        self.episode_seed = self.config.seed

    # --- gymnasium API ---------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """New episode; ``options``: ``trace`` (a NetworkTrace) and/or ``model_seed`` to pin them."""
        super().reset(seed=seed)
        options = options or {}
        index = int(self.np_random.integers(len(self.traces)))
        self.trace = options.get("trace") or self.traces[index]
        drawn = int(self.np_random.integers(2**31 - 1))
        self.episode_seed = int(options.get("model_seed", drawn if self.config.vary_model else self.config.seed))
        cfg = self.config
        run = EmulatedRun(cfg.emulation(self.episode_seed), workload=self.workload)
        run.clock = TraceClock(self.trace, cfg.episode_iters, run.price_scale, cfg.jitter, self.episode_seed)
        self.run = run
        self.iteration = 0
        self.ratio, self.scheme = 0.01, ""
        self.last: dict[str, float] = {}
        self.prev_step_s = math.nan
        self.prev_loss = self.chance_loss
        self.torch_rng = torch.Generator().manual_seed(self.episode_seed).get_state()
        return self._observation(), self._info()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.run is None:
            raise InputError("step", "before reset", "reset() first")
        if self.iteration >= self.config.episode_iters:
            raise InputError("step", "after the episode ended", "reset() first")
        ratio, mode = action_to_knobs(action)
        start_time = self.run.sim_time
        rows = []
        with torch.random.fork_rng(devices=[]):  # the policy's own sampling RNG stays untouched
            torch.set_rng_state(self.torch_rng)
            for _ in range(self.config.interval):
                rows.append(self._iterate(ratio, mode))
            self.torch_rng = torch.get_rng_state()
        seconds = self.run.sim_time - start_time
        loss = float(np.mean([r["loss"] for r in rows]))
        loss = max(loss, 1e-8)
        progress = math.log(self.prev_loss) - math.log(loss)
        reward = self.config.loss_weight * progress - self.config.time_weight * seconds
        self.prev_step_s = self.last.get("step_s", math.nan)
        self.last = {
            "step_s": float(np.mean([r["step_time_s"] for r in rows])),
            "comm_share": float(np.mean([r["comm_s"] / r["step_time_s"] for r in rows])),
            "gain": float(np.nanmean([r["gain"] if r["gain"] is not None else math.nan for r in rows])),
            "loss_trend": progress, "loss": loss, "seconds": seconds,
        }
        self.prev_loss = loss
        terminated = self.iteration >= self.config.episode_iters
        return self._observation(), float(reward), terminated, False, self._info()

    # --- one training iteration at a chosen ratio and collective -----------------------------------------
    def _iterate(self, ratio: float, mode: str) -> dict[str, Any]:
        run = self.run
        assert run is not None
        flex = run.compressor
        assert isinstance(flex, FlexibleCompressor) and flex.estimator is not None
        step = self.iteration
        run.clock.at(step)
        workers = self.config.workers
        if mode == "auto":
            predictor = flex.predictor(run.comm)
            times = [float(predictor.seconds(s, run.numel, ratio, workers)) for s in SPARSE]
            scheme = SPARSE[int(np.argmin(times))]
        else:
            scheme = mode
        flex.set_ratio(ratio)
        inner = flex.inner[scheme]  # shares the flexible compressor's residuals: error feedback spans switches
        inner.ratio = ratio
        grads, loss, train_acc = run.gradients(step)
        result = inner.exchange(grads, run.comm)
        stats = result.stats
        if flex.latency_probe and flex.estimator.wants_probe():
            stats = self._latency_probe(stats)
        run.apply(result.aggregates[0], step)
        secs, comm_s, compress_s = run.timing(stats)
        flex.observe(stats, secs, log=False)
        step_s = run.compute_s + comm_s + compress_s
        run.sim_time += step_s
        self.iteration += 1
        self.ratio, self.scheme = ratio, scheme
        test_loss = test_acc = math.nan
        every = self.config.eval_every
        if every and (self.iteration % every == 0 or self.iteration == self.config.episode_iters):
            test_loss, test_acc = evaluate(run.model, self.workload.test_set, self.workload.loss_fn)
        alpha, beta = flex.estimator.estimate()
        latency, bandwidth = run.clock.link
        row = {
            "step": self.iteration, "strategy": "controller", "scheme": scheme, "ratio": ratio,
            "sim_time_s": run.sim_time, "step_time_s": step_s, "compute_s": run.compute_s, "comm_s": comm_s,
            "compress_s": compress_s, "probe_s": 0.0, "loss": loss, "train_acc": train_acc, "test_loss": test_loss,
            "test_acc": test_acc, "gain": stats.gain, "gain_norm": stats.gain_norm,
            "payload_bytes": stats.payload_bytes, "alpha_est_s": alpha, "beta_est_s_per_byte": beta,
            "net_latency_s": latency, "net_bandwidth_Bps": bandwidth, "event": mode,
        }
        run.rows.append(row)
        return row

    def _latency_probe(self, stats: StepStats) -> StepStats:
        """A 4-byte allgather (purpose ``control``, charged) so the estimator separates alpha from beta,
        as :class:`FlexibleCompressor` sends when its window is not identified."""
        assert self.run is not None
        comm = self.run.comm
        with comm.recording() as records:
            comm.allgather([torch.zeros(1) for _ in comm.local_workers], purpose="control")
        return dataclasses.replace(stats, overhead=stats.overhead + tuple(records))

    # --- what the controller sees -------------------------------------------------------------------------
    def _observation(self) -> np.ndarray:
        run = self.run
        assert run is not None
        flex = run.compressor
        assert isinstance(flex, FlexibleCompressor) and flex.estimator is not None
        predictor = flex.predictor(run.comm)
        workers = self.config.workers
        pred = [float(predictor.seconds(s, run.numel, self.ratio, workers)) for s in SPARSE]
        if "step_s" in self.last:
            step_s, comm_share = self.last["step_s"], self.last["comm_share"]
        else:  # before the first interval: the prior's prediction at the starting ratio
            step_s = run.compute_s + min(pred)
            comm_share = (step_s - run.compute_s) / step_s
        prev_s = self.prev_step_s if math.isfinite(self.prev_step_s) else step_s
        alpha, beta = flex.estimator.estimate()
        gain = self.last.get("gain", math.nan)
        obs = np.array([
            self.iteration / self.config.episode_iters,
            math.log10(step_s / TIME_REF_S),
            math.log10(prev_s / TIME_REF_S),
            comm_share,
            math.log10(max(alpha, 1e-9)) + 3.0,
            -math.log10(max(beta, 1e-15)) - 9.0,
            gain if math.isfinite(gain) else 0.0,
            float(np.clip(self.last.get("loss_trend", 0.0), -2.0, 2.0)),
            math.log10(self.last.get("loss", self.chance_loss)),
            math.log10(self.ratio) - LOG10_C_CENTRE,
            {"topk-ag": -1.0, "topk-ar": 1.0}.get(self.scheme, 0.0),
            math.log10(max(pred[0], 1e-12) / max(pred[1], 1e-12)),
        ], dtype=np.float64)
        return np.clip(obs, -10.0, 10.0).astype(np.float32)

    def _info(self) -> dict[str, Any]:
        run = self.run
        assert run is not None and self.trace is not None
        return {"trace": self.trace.name, "iteration": self.iteration, "sim_time_s": run.sim_time,
                "ratio": self.ratio, "scheme": self.scheme, "model_seed": self.episode_seed,
                "seconds": self.last.get("seconds", 0.0), "loss": self.last.get("loss", self.chance_loss)}

    def frame(self) -> pd.DataFrame:
        """Per-iteration rows of the current episode, in :data:`emulation.engine.CSV_COLUMNS`."""
        assert self.run is not None
        return pd.DataFrame(self.run.rows, columns=CSV_COLUMNS)
