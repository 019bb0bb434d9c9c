"""``flexcomm.simulate``, ``flexcomm.emulate`` and ``flexcomm.study``: the engines as one call each.

Why: each engine has its own configuration objects (``TrainingConfig`` + ``FaultPolicy`` + dynamics,
``EmulationConfig``, a study spec), which is right for the engines and too much to assemble for a question
like "what does a node failure cost this job?". These functions take the CLI's options as keyword
arguments with unit strings, build the objects, and run; the CLI commands call them too, so a flag and its
keyword always mean the same thing. Errors are :class:`~flexcomm.costmodel.errors.InputError` naming the
flag (``jitter-period``, not ``period_s``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm.costmodel.calibration import CalibrationProfile, calibrated_cluster
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.collectives import canonical_collective
from flexcomm.costmodel.errors import InputError, renamed_fields
from flexcomm.costmodel.units import coerce, parse_count, parse_size, parse_time
from flexcomm.emulation.config import EmulationConfig, strategy_names
from flexcomm.experiments.study.runner import run_study
from flexcomm.experiments.study.spec import load_spec
from flexcomm.sim.collectives import simulate_collective as run
from flexcomm.sim.dynamics import JitterDynamics, MarkovCongestion, TraceDynamics
from flexcomm.sim.faults import FaultPolicy, parse_fault
from flexcomm.sim.training import TrainingSimulator
from flexcomm.sim.training_config import TrainingConfig, parse_stragglers
from flexcomm.workloads.names import is_factory_reference

if TYPE_CHECKING:
    from flexcomm.costmodel.cluster import Cluster
    from flexcomm.emulation.config import EmulationConfig
    from flexcomm.emulation.engine import RunResult
    from flexcomm.experiments.study.runner import StudyRun
    from flexcomm.sim.collectives import SimResult
    from flexcomm.sim.training import TrainingResult

#: DDP's first gradient bucket (torch.distributed's ``_DEFAULT_FIRST_BUCKET_BYTES``: 1 MiB), the rest at the cap.
DDP_FIRST_BUCKET_BYTES = 1024 * 1024

__all__ = ["emulate", "emulation_settings", "network_dynamics", "simulate", "simulate_collective", "study"]

CONGESTION_FORM = "good=MEAN,bad=MEAN,factor=F, e.g. good=50ms,bad=10ms,factor=0.25"


def _congestion(spec: str | Mapping[str, Any], seed: int) -> Any:
    """``good=50ms,bad=10ms,factor=0.25`` (or a mapping of the same keys) as a seeded MarkovCongestion."""
    values: dict[str, Any] = {"good": 0.05, "bad": 0.01, "factor": 0.25}
    if isinstance(spec, Mapping):
        items = list(spec.items())
    else:
        items = [part.partition("=")[::2] if "=" in part else (part, None)
                 for part in (p.strip() for p in str(spec).split(",")) if part]
    for key, value in items:
        key = str(key).strip()
        if value is None or key not in values:
            raise InputError("congestion", spec, CONGESTION_FORM)
        try:
            values[key] = float(value) if key == "factor" else parse_time(value, "congestion")
        except (ValueError, InputError):
            raise InputError("congestion", spec, CONGESTION_FORM) from None
    with renamed_fields({"mean_good_s": "congestion", "mean_congested_s": "congestion",
                         "congested_factor": "congestion"}, got=spec):
        return MarkovCongestion(values["good"], values["bad"], values["factor"], seed=seed)


def network_dynamics(*, network_trace: str | Path | None = None, jitter: float | None = None,
                     jitter_period: float | str = "1ms", congestion: str | Mapping[str, Any] | None = None,
                     seed: int = 0) -> list[Any]:
    """The simulator's dynamics from the CLI's network options (seeded: trace, jitter, congestion)."""
    dynamics: list[Any] = []
    if network_trace is not None:
        with renamed_fields({"trace": "network-trace"}):
            dynamics.append(TraceDynamics.from_csv(network_trace))
    if jitter is not None:
        with renamed_fields({"sigma": "jitter", "period_s": "jitter-period"}):
            dynamics.append(JitterDynamics(jitter, coerce(jitter_period, parse_time, "jitter-period"),
                                           seed=seed + 1))
    if congestion is not None:
        dynamics.append(_congestion(congestion, seed + 2))
    return dynamics


def simulate(
    cluster: str | Path | Cluster,
    workload: str = "resnet50",
    *,
    iterations: int = 10,
    ranks: int | None = None,
    batch: float | None = None,
    scheme: str = "dense",
    ratio: float = 0.01,
    algorithm: str = "auto",
    bucket_size: float | str = "25MiB",
    buckets: int | None = None,
    efficiency: float | None = None,
    optimizer_time: float | str = 0.0,
    granularity: str = "auto",
    network_trace: str | Path | None = None,
    jitter: float | None = None,
    jitter_period: float | str = "1ms",
    congestion: str | Mapping[str, Any] | None = None,
    dynamics: Iterable[Any] = (),
    stragglers: Mapping[int, float] | str | Iterable[str] | None = None,
    compute_jitter: float = 0.0,
    faults: str | Iterable[str] = (),
    checkpoint_every: int = 0,
    checkpoint_cost: float | str | None = None,
    restart_cost: float | str = "30s",
    timeout: float | str = "30s",
    repair_time: float | str = "5min",
    elastic: bool = False,
    profile: str | Path | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> TrainingResult:
    """Simulate data-parallel training iterations on ``cluster`` (what ``flexcomm simulate`` runs).

    Per-layer compute, DDP-style gradient buckets overlapping backward, the exchange ``scheme`` (dense
    with ``algorithm``: ``auto`` is nccl on a gpu_fabric cluster; topk-ag / topk-ar at ``ratio``, powersgd, fp16,
    bf16), network dynamics, ``stragglers``
    (``{rank: factor}`` or ``["3=1.5"]``) and ``faults`` (``"node3@12s"``, ``"link:node3->switch@5s"``,
    ``"random:mtbf=2h"``) with checkpoint-restart or ``elastic`` shrink. Returns the
    :class:`~flexcomm.sim.training.TrainingResult` (``.iterations``, ``.summary()``, ``.job_time_s``...).
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise InputError("iterations", iterations, "an integer >= 1")
    resolved = load_cluster(cluster)  # a bad cluster file fails before the simulator (pandas, simpy) loads
    if profile is not None:
        resolved = calibrated_cluster(resolved, CalibrationProfile.load(profile))
    extra = _job_extras(workload, buckets, bucket_size, batch, efficiency)
    if stragglers is None:
        straggling: dict[int, float] = {}
    elif isinstance(stragglers, Mapping):
        straggling = dict(stragglers)
    else:
        straggling = parse_stragglers(stragglers, resolved.devices_per_node, resolved.nodes)
    fault_sources, policy = _fault_setup(faults, seed, checkpoint_every, checkpoint_cost, restart_cost, timeout,
                                         repair_time, elastic)
    with renamed_fields({"optimizer": "optimizer-time"}):
        config = TrainingConfig(
            workload=workload, iterations=iterations, ranks=ranks, batch_per_rank=batch, scheme=scheme, ratio=ratio,
            algorithm=algorithm, bucket_cap=bucket_size, bucket_count=buckets,
            optimizer_s=coerce(optimizer_time, parse_time, "optimizer-time"), stragglers=straggling,
            compute_jitter=compute_jitter, granularity=granularity, seed=seed, **extra,
        )
    all_dynamics = [*network_dynamics(network_trace=network_trace, jitter=jitter, jitter_period=jitter_period,
                                      congestion=congestion, seed=seed), *dynamics]
    simulator = TrainingSimulator(resolved, config, dynamics=all_dynamics, faults=fault_sources, policy=policy)
    return simulator.run(progress)


def _job_extras(workload: str, buckets: int | None, bucket_size: float | str, batch: float | None,
                efficiency: float | None) -> dict[str, Any]:
    """The bucket and batch options checked, and what the training config takes besides the flags: DDP's real
    first bucket for a user's own model, and a fixed efficiency where one is given."""
    if buckets is not None and (isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1):
        raise InputError("buckets", buckets, "an integer >= 1")
    parse_size(bucket_size, "bucket-size")
    if batch is not None and not batch > 0:
        raise InputError("batch", batch, "a positive number of samples per rank")
    extra: dict[str, Any] = {}
    if is_factory_reference(workload):  # the user's own model: DDP's real first bucket too
        extra["first_bucket_cap"] = DDP_FIRST_BUCKET_BYTES
    if efficiency is not None:
        if not 0 < efficiency <= 1:
            raise InputError("efficiency", efficiency, "a fraction of peak in (0, 1]")
        extra["efficiency"] = efficiency
    return extra


def _fault_setup(faults: str | Iterable[str], seed: int, checkpoint_every: int, checkpoint_cost: float | str | None,
                 restart_cost: float | str, timeout: float | str, repair_time: float | str,
                 elastic: bool) -> tuple[list[Any], FaultPolicy]:
    """The fault sources (specs parsed with the run's seed) and the policy that answers them."""
    if isinstance(faults, str):  # one fault given as a string, not its characters
        faults = [faults]
    fault_sources = [parse_fault(spec, seed) if isinstance(spec, str) else spec for spec in faults]
    cost = coerce(checkpoint_cost, parse_time, "checkpoint-cost") if checkpoint_cost is not None else None
    policy = FaultPolicy(
        timeout_s=coerce(timeout, parse_time, "timeout"), restart_s=coerce(restart_cost, parse_time, "restart-cost"),
        repair_s=coerce(repair_time, parse_time, "repair-time"), checkpoint_every=checkpoint_every,
        checkpoint_write_s=cost, checkpoint_load_s=cost, elastic=elastic,
    )
    return fault_sources, policy


def simulate_collective(
    cluster: str | Path | Cluster,
    collective: str,
    algorithm: str,
    size: float | str,
    ranks: int | Sequence[int] | None = None,
    *,
    dynamics: Iterable[Any] = (),
    **options: Any,
) -> SimResult:
    """One collective of ``size`` bytes (``"64MiB"``) on ``ranks`` of ``cluster``, simulated flow by flow."""
    return run(cluster, canonical_collective(collective), algorithm, parse_size(size, "size"), ranks,
               dynamics=list(dynamics) or None, **options)


def emulate(
    workload: str = "mlp-digits",
    *,
    strategies: Sequence[str] = ("dense", "topk-ag", "topk-ar", "flexible", "moo"),
    out: str | Path | None = None,
    progress: bool = False,
    plot: bool = True,
    compute_time: float | str | None = None,
    price_params: int | str | None = None,
    **config: Any,
) -> dict[str, RunResult]:
    """Emulated data-parallel training (real gradients, simulated clock) of each strategy on one setting.

    ``config`` are :class:`~flexcomm.emulation.engine.EmulationConfig` fields (``workers``, ``cluster``,
    ``ratio``, ``steps``, ``seed``, ``network``, ``jitter``, ...); ``compute_time`` (``"15ms"``) and
    ``price_params`` (``"11.69M"``) take unit strings. Writes the CSVs, ``summary.json`` and
    ``emulated.png`` under ``out`` when given. Returns each strategy's
    :class:`~flexcomm.emulation.engine.RunResult`.
    """
    from flexcomm.emulation.engine import run_emulation

    settings, names = emulation_settings(workload, strategies, compute_time=compute_time,
                                         price_params=price_params, **config)
    return run_emulation(settings, names, out, progress=progress, plot=plot)


def emulation_settings(
    workload: str = "mlp-digits",
    strategies: Sequence[str] = ("dense",),
    *,
    compute_time: float | str | None = None,
    price_params: int | str | None = None,
    **config: Any,
) -> tuple[EmulationConfig, list[str]]:
    """:func:`emulate`'s arguments as a checked config and strategy list, without importing torch.

    Why separate: a command checks its options here first, so a bad one fails before the seconds torch
    takes to import (and before any file is written).
    """
    from dataclasses import fields


    known = {f.name for f in fields(EmulationConfig)} - {"compute_time_s", "price_params", "strategy"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise InputError(unknown[0], config[unknown[0]],
                         "one of the EmulationConfig fields: " + ", ".join(sorted(known)))
    if isinstance(strategies, str):
        strategies = [s.strip() for s in strategies.split(",") if s.strip()]
    settings = EmulationConfig(
        workload=workload, strategy=strategies[0] if strategies else "dense",
        compute_time_s=coerce(compute_time, parse_time, "compute-time") if compute_time is not None else None,
        price_params=parse_count(price_params, "price-params") if price_params is not None else None,
        **config,
    )
    return settings, strategy_names(settings, list(strategies))


def study(file: str | Path, out: str | Path, *, workers: int | None = None, scheduler: str | None = None,
          scheduler_timeout: float | str = "30s", max_points: int | None = None, batch: int | None = None,
          progress: bool = False, figures: bool = True) -> StudyRun:
    """Run a study file (or a shipped study's name) into ``out``, resuming what an earlier run left."""
    timeout = coerce(scheduler_timeout, parse_time, "scheduler-timeout")
    return run_study(load_spec(file), out, workers=workers, scheduler=scheduler, max_points=max_points,
                     scheduler_timeout_s=timeout, batch=batch, progress=progress, figures=figures)
