"""What one emulated run is asked to do, checked without importing torch.

Why a module of its own: a command validates its options before paying for torch (about 2 s to import
on a small machine), so a bad ``--steps`` or ``--network`` fails within a second. The engine
(:mod:`emulation.engine`) runs a validated :class:`EmulationConfig`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from flexcomm.compression.moo_config import MOOConfig
from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_TRAINING_STEPS
from flexcomm.emulation.options import COMPRESS_TIME_MODES, EMULATION_NETWORKS, EMULATION_STRATEGIES, LR_SCHEDULES
from flexcomm.workloads.names import WORKLOADS, canonical_workload


@dataclass(frozen=True)
class EmulationConfig:
    """One emulated run (or several strategies on the same setting); see the module docstring."""

    workload: str = "mlp-digits"
    workers: int = 4
    cluster: str | Cluster = "8x1-v100-40g"
    strategy: str = "topk-ar"
    ratio: float = 0.01
    steps: int = 300
    seed: int = 0
    eval_every: int = 25
    batch_size: int | None = None  #: per worker (default: the workload's)
    lr: float | None = None  #: default: the workload's (not scaled with N)
    lr_schedule: str | None = None  #: constant or cosine (default: the workload's)
    network: str = "static"
    jitter: float = 0.0  #: relative s.d. of the log-normal noise on every collective's time
    compute_time_s: float | None = None  #: per step; default: FLOP model on the cluster's device
    efficiency: float | None = None  #: flat fraction of peak; None: priced on the device (device_compute)
    compress_time: str = "model"
    #: Top-k selection rate (elements/s); None: the V100 measurement scaled by the cluster device's HBM bandwidth
    compress_throughput: float | None = None
    price_params: int | None = None
    hysteresis: float = 0.1
    patience: int = 3
    #: seconds one switch of scheme costs beyond its exchange (a switch must save more over ``patience`` steps)
    switch_cost_s: float = 0.0
    flexible_candidates: tuple[str, ...] = ("topk-ag", "topk-ar")
    owner: str = "star"
    moo: MOOConfig = field(default_factory=MOOConfig)
    charge_probes: bool = True
    flush_every: int = 25

    def validate(self) -> None:
        """Check everything that can be checked without building the model (one-line errors)."""
        def whole(name: str, value: object, minimum: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InputError(name, value, f"an integer >= {minimum}")

        if canonical_workload(self.workload) not in WORKLOADS:
            raise InputError("workload", self.workload, "one of " + ", ".join(WORKLOADS))
        whole("workers", self.workers, 1)
        whole("steps", self.steps, 1)
        MAX_TRAINING_STEPS.check("steps", self.steps)
        whole("eval-every", self.eval_every, 1)
        whole("flush_every", self.flush_every, 1)
        whole("seed", self.seed, 0)
        if self.batch_size is not None:
            whole("batch-size", self.batch_size, 1)
        if self.price_params is not None:
            whole("price-params", self.price_params, 1)
        _check_strategy(self.strategy)
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or not (
                math.isfinite(self.ratio) and 0 < self.ratio <= 1):
            raise InputError("cr", self.ratio, "a fraction of elements kept in (0, 1]")
        if self.network not in EMULATION_NETWORKS:
            raise InputError("network", self.network, "one of " + ", ".join(EMULATION_NETWORKS))
        if self.compress_time not in COMPRESS_TIME_MODES:
            raise InputError("compress-time", self.compress_time, "one of " + ", ".join(COMPRESS_TIME_MODES))
        if not (math.isfinite(self.jitter) and self.jitter >= 0):
            raise InputError("jitter", self.jitter, "a relative standard deviation >= 0")
        if self.compress_throughput is not None and not self.compress_throughput >= 0:
            raise InputError("compress-throughput", self.compress_throughput, "elements per second >= 0")
        if self.compute_time_s is not None and not (math.isfinite(self.compute_time_s) and self.compute_time_s >= 0):
            raise InputError("compute-time", self.compute_time_s, "a non-negative time")
        if isinstance(self.switch_cost_s, bool) or not isinstance(self.switch_cost_s, (int, float)) or not (
                math.isfinite(self.switch_cost_s) and self.switch_cost_s >= 0):
            raise InputError("switch-cost", self.switch_cost_s, "a time >= 0 one switch of scheme costs, e.g. 5ms")
        if self.lr is not None and not (math.isfinite(self.lr) and self.lr > 0):
            raise InputError("lr", self.lr, "a positive learning rate")
        if self.lr_schedule is not None and self.lr_schedule not in LR_SCHEDULES:
            raise InputError("lr-schedule", self.lr_schedule, "one of " + ", ".join(LR_SCHEDULES))


def strategy_names(config: EmulationConfig, strategies: list[str] | None) -> list[str]:
    """The strategies to run (``config.strategy`` when none given), each checked, with the whole config."""
    names = list(strategies) if strategies else [config.strategy]
    for name in names:
        _check_strategy(name)
    config.validate()
    return names


def _check_strategy(name: str) -> None:
    if name not in EMULATION_STRATEGIES:
        raise InputError("strategy", name, "one of " + ", ".join(EMULATION_STRATEGIES))
