"""The controller's settings and their checks, importable without torch.

Why a module of its own: ``flexcomm controller`` refuses a bad option before it pays for torch (hundreds of
MB, seconds), as the docs promise (docs/errors-and-limits.md); the environment and the trainer
(:mod:`controller.env`, :mod:`controller.train`) import torch and take these settings as they are.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_ratio
from flexcomm.emulation.config import EmulationConfig
from flexcomm.workloads.names import WORKLOADS, canonical_workload


@dataclass(frozen=True)
class EnvConfig:
    """The emulated setting and the reward's exchange rate; see the module docstring."""

    workload: str = "mlp-digits"
    workers: int = 4
    cluster: str = "8x1-v100-40g"
    price_params: int | None = 11_690_000  #: price the exchange like ResNet-18's gradient (the paper's model)
    interval: int = 10  #: training iterations per env step (the reconfiguration interval)
    episode_iters: int = 300
    time_weight: float = 0.5  #: reward lost per simulated second
    loss_weight: float = 1.0  #: reward per nat of training-loss decrease
    jitter: float = 0.0
    vary_model: bool = True  #: a new model seed per episode (training); False: always ``seed`` (evaluation)
    eval_every: int = 0  #: test accuracy every E iterations (0: never, the fast training setting)
    seed: int = 0

    def validate(self) -> None:
        if canonical_workload(self.workload) not in WORKLOADS:
            raise InputError("workload", self.workload, "one of " + ", ".join(WORKLOADS))
        if not (isinstance(self.jitter, (int, float)) and math.isfinite(self.jitter) and self.jitter >= 0):
            raise InputError("jitter", self.jitter, "a relative standard deviation >= 0")
        if self.price_params is not None and (isinstance(self.price_params, bool) or not isinstance(
                self.price_params, int) or self.price_params < 1):
            raise InputError("price-params", self.price_params, "a positive count such as 11.69M, or none")
        for name in ("workers", "interval", "episode_iters"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name.replace("_", "-"), value, "an integer >= 1")
        if self.episode_iters % self.interval:
            raise InputError("episode-iters", self.episode_iters, f"a multiple of the interval ({self.interval})")
        if isinstance(self.eval_every, bool) or not isinstance(self.eval_every, int) or self.eval_every < 0:
            raise InputError("eval-every", self.eval_every, "an integer >= 0")
        for name in ("time_weight", "loss_weight"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise InputError(name.replace("_", "-"), value, "a finite weight >= 0")

    def emulation(self, seed: int) -> EmulationConfig:
        """The :class:`EmulationConfig` of one episode (strategy ``flexible``: its compressor and estimator)."""
        return EmulationConfig(workload=self.workload, workers=self.workers, cluster=self.cluster,
                               strategy="flexible", ratio=0.01, steps=self.episode_iters, seed=seed,
                               eval_every=self.eval_every or self.episode_iters, price_params=self.price_params,
                               jitter=self.jitter)


VARIANTS = ("gsde", "gaussian")


@dataclass(frozen=True)
class TrainConfig:
    """PPO settings shared by both variants; only ``use_sde`` (and its noise scale) differs."""

    timesteps: int = 3000
    seed: int = 0
    variants: tuple[str, ...] = VARIANTS
    train_traces: int = 16
    sde_sample_freq: int = 4
    log_std_init_sde: float = -2.0
    log_std_init_gaussian: float = -1.0
    n_steps: int = 240
    batch_size: int = 60
    n_epochs: int = 10
    learning_rate: float = 3e-4
    gamma: float = 0.98
    net_arch: tuple[int, ...] = (64, 64)
    eval_every: int = 600  #: timesteps between deterministic evaluations on the fixed episodes
    eval_episodes: int = 3  #: fixed (trace, model seed) pairs of those evaluations
    env: EnvConfig = field(default_factory=EnvConfig)

    def validate(self) -> None:
        for name in ("timesteps", "train_traces", "n_steps", "batch_size", "n_epochs", "sde_sample_freq",
                     "eval_every", "eval_episodes"):
            value = getattr(self, name)
            minimum = -1 if name == "sde_sample_freq" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum or value == 0:
                raise InputError(name.replace("_", "-"), value, "an integer >= 1" if minimum == 1 else
                                 "an integer >= 1, or -1 (only at the start of each rollout)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InputError("seed", self.seed, "an integer >= 0")
        if not self.variants or any(v not in VARIANTS for v in self.variants):
            raise InputError("variants", ",".join(self.variants), "one or more of " + ", ".join(VARIANTS))
        if not (0 < self.gamma <= 1):
            raise InputError("gamma", self.gamma, "a discount in (0, 1]")
        self.env.validate()


def load_settings(model_dir: str | Path) -> tuple[TrainConfig, EnvConfig]:
    """The settings a training run wrote (``train_config.json``), as config objects."""
    path = Path(model_dir) / "train_config.json"
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
        env = EnvConfig(**settings["env"])
        train_settings = dict(settings["train"])
        for key in ("variants", "net_arch"):
            train_settings[key] = tuple(train_settings[key])
        return TrainConfig(**train_settings, env=env), env
    except FileNotFoundError:
        raise InputError("model", str(model_dir), "a directory written by `flexcomm controller train` "
                         "(train_config.json missing)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError("model", str(path), f"a train_config.json written by `flexcomm controller train` ({exc})"
                         ) from None


#: The strategies ``controller evaluate`` runs beside the learned controllers.
BASELINE_FORM = "dense, moo, topk-ag@RATIO or topk-ar@RATIO with RATIO in (0, 1]"


def check_baselines(baselines: Sequence[str]) -> None:
    """Every ``--baselines`` entry names a strategy the evaluation can run (a typo fails before any training)."""
    for name in baselines:
        strategy, _, ratio = name.partition("@")
        if strategy in ("topk-ag", "topk-ar") and ratio:
            try:
                parse_ratio(ratio, "baselines")
            except InputError:
                raise InputError("baselines", name, BASELINE_FORM) from None
        elif strategy not in ("dense", "moo") or ratio:
            raise InputError("baselines", name, BASELINE_FORM)
