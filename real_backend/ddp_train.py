"""A real DDP training worker: one rank of ``flexcomm train-ddp``, with a communication hook per strategy.

Parent side (:func:`run_training`, ``flexcomm train-ddp``): validates the request and starts the ranks with
:func:`real_backend.launch.launch`, or inside a shaped testbed. Worker side (``python -m
real_backend.ddp_train '<JSON>'``, one :class:`DDPWorkerConfig`; :func:`worker_main`): joins the group
(:func:`real_backend.dist.init_from_env`), then

1. measures the **compute-only** step (forward, backward, optimizer; no DDP, no communication) of the same
   model on every rank at once (so the ranks share the cores as they do in training), median over
   ``compute_steps`` after ``warmup_steps``, max over ranks;
2. per strategy, the **solo step** (:func:`solo_step_seconds`): the same DDP model and hook on a process
   group of this rank alone, every rank at once: compute plus everything the hook does locally (selection,
   casts, PowerSGD's matmuls, scatter-add) but no bytes between ranks. A predicted step is solo + the
   communication the hook logged;
3. for each strategy in ``strategy`` (a comma list, run one after another in the same process group; a
   ``name@ratio`` entry overrides ``ratio``): a fresh model (same seed, so every strategy starts from
   the same weights), DDP, :func:`real_backend.hooks.register`, then ``steps`` steps. Each step starts
   after a barrier; its time is the max over ranks, its loss rank 0's (and the mean over ranks).

Rank 0 writes, per strategy, ``OUT/<label>/steps.csv`` (one row per step, appended and flushed as it is
measured: loss, step seconds, hook and communication seconds, bytes, scheme, ratio, predicted
communication), ``OUT/<label>/exchanges.csv`` (the hook's per-bucket log, :data:`hooks.EXCHANGE_COLUMNS`)
and, at the end, ``OUT/<label>/summary.json``; and ``OUT/run.json`` (the run and the compute-only time).

The cost model that prices the log: the link ``latency_s``/``bandwidth_Bps`` (e.g. a testbed's goodput
``0.956 x rate``) as a cluster of N nodes x 1 device (:func:`link_cluster`), with ``profile`` (a
calibration) replacing the link for the collectives it covers.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexcomm.compression.moo import MOOConfig
from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.calibration import CalibrationProfile
from flexcomm.costmodel.cluster import MEASURED_HOST_DEVICE, flat_hosts
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_TRAINING_STEPS
from flexcomm.real_backend.dist import Watchdog, init_from_env, shutdown
from flexcomm.real_backend.launch import launch
from flexcomm.real_backend.net_trace import parse_trace
from flexcomm.real_backend.options import HOOK_RATIO_STRATEGIES as RATIO_STRATEGIES
from flexcomm.real_backend.options import HOOK_STRATEGIES as STRATEGIES
from flexcomm.real_backend.trace_control import request_start, trace_file
from flexcomm.real_backend.worker_config import config_from_argv, to_argument

STEP_COLUMNS = (
    "step", "strategy", "label", "loss", "loss_mean", "step_s", "hook_s", "comm_s", "codec_s", "predicted_comm_s",
    "payload_bytes", "control_bytes", "scheme", "ratio", "buckets", "records", "gain", "start_epoch_s", "trace_s",
    "trace_phase", "mechanism_s",
)
#: Steps left out of medians: DDP rebuilds its buckets after iteration 1, PowerSGD starts at iteration 2.
DEFAULT_WARMUP_STEPS = 3


@dataclass(frozen=True)
class StrategySpec:
    """One entry of ``--strategy``: its label (output folder), strategy name and ratio."""

    label: str
    strategy: str
    ratio: float | None


def parse_strategies(spec: str | Sequence[str], ratio: float | None = None) -> list[StrategySpec]:
    """``dense,topk-ag,topk-ar@0.1`` -> specs; ``--ratio`` applies to the ratio strategies without ``@``."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[StrategySpec] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        name, _, r = item.partition("@")
        name = name.strip().lower()
        if name not in STRATEGIES:
            raise InputError("strategy", name, "one or more of " + ", ".join(STRATEGIES) + " (name@ratio allowed)")
        # --ratio sizes the fixed-ratio strategies; moo picks its own (from its largest candidate) unless moo@R
        value: float | None = ratio if name in RATIO_STRATEGIES and name != "moo" else None
        if r:
            try:
                value = float(r)
            except ValueError:
                value = math.nan
            if name not in RATIO_STRATEGIES:
                raise InputError("strategy", item, f"no @ratio for {name} (only for " +
                                 ", ".join(sorted(RATIO_STRATEGIES)) + ")")
        if value is not None and not (math.isfinite(value) and 0 < value <= 1):
            raise InputError("ratio", r or value, "a fraction in (0, 1], e.g. 0.01")
        if name in RATIO_STRATEGIES and name != "moo" and value is None:
            raise InputError("ratio", None, f"a ratio for {name}: --ratio R or {name}@R")
        out.append(StrategySpec(item, name, value))
    if not out:
        raise InputError("strategy", spec, "one or more strategies, e.g. dense,topk-ag,powersgd")
    labels = [s.label for s in out]
    if len(set(labels)) != len(labels):
        raise InputError("strategy", spec, "each strategy once (labels name output folders)")
    return out


def parse_hidden(spec: str | None) -> tuple[int, ...] | None:
    """``1024,1024`` -> (1024, 1024): the MLP's hidden widths (mlp-digits only)."""
    if spec is None or str(spec).strip() == "":
        return None
    try:
        widths = tuple(int(w) for w in str(spec).split(",") if w.strip())
    except ValueError:
        widths = ()
    if not widths or any(w < 1 for w in widths):
        raise InputError("hidden", spec, "comma-separated widths >= 1, e.g. 1024,1024")
    return widths


def link_cluster(ranks: int, latency_s: float, bandwidth_Bps: float, name: str = "link") -> Any:
    """A :class:`costmodel.cluster.Cluster` of ``ranks`` nodes x 1 device on one flat switch.

    Every rank is its own node, so every collective crosses the ``inter`` link (latency, bandwidth):
    the testbed as the cost model and the simulator see it.
    """
    return flat_hosts(ranks, latency_s, bandwidth_Bps, MEASURED_HOST_DEVICE, name)


RUN_PROFILE = "profile.json"  #: the calibration profile a run's hooks priced with, kept beside its run.json


def keep_profile_beside(out: Path, profile: str | Path | None) -> str | None:
    """Copy ``profile`` into the run folder and return its name there, for ``run.json``: a committed run is a
    document other people replay, so it must hold what its replay reads (an absolute path of the machine it
    was made on works only there)."""
    if not profile:
        return None
    target = out / RUN_PROFILE
    if Path(profile).resolve() != target.resolve():

        write_text_atomic(target, Path(profile).read_text(encoding="utf-8"))
    return RUN_PROFILE


def run_profile_path(folder: Path, named: str | None) -> Path | None:
    """The profile a ``run.json`` in ``folder`` names: relative to the folder; an absolute path (runs written
    before the profile was kept beside them) must still exist, else one line says which file to put where."""
    if not named:
        return None
    path = Path(named)
    if not path.is_absolute():
        return folder / path
    if not path.exists():
        raise InputError("profile", named, f"the calibration profile this run was made with: copy that file to "
                         f"{folder / RUN_PROFILE} and set \"profile\": \"{RUN_PROFILE}\" in {folder / 'run.json'}")
    return path


def build_cost_model(ranks: int, latency_s: float | None, bandwidth_Bps: float | None,
                     profile: str | Path | None = None) -> Any:
    """The cost model of the log: the link as a cluster, calibrated by ``profile`` where it has fits."""
    from flexcomm.real_backend.hooks import DEFAULT_PRIOR_BANDWIDTH_BPS, DEFAULT_PRIOR_LATENCY_S

    cluster = link_cluster(max(int(ranks), 1), DEFAULT_PRIOR_LATENCY_S if latency_s is None else latency_s,
                           DEFAULT_PRIOR_BANDWIDTH_BPS if bandwidth_Bps is None else bandwidth_Bps)
    loaded = CalibrationProfile.load(profile) if profile else None
    return CostModel.from_cluster(cluster, profile=loaded)


# --- the worker ----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DDPWorkerConfig:
    """What every rank of ``flexcomm train-ddp`` runs: the parent's request, sent to the ranks as one JSON
    argument (:mod:`real_backend.worker_config`) and checked again where it is built, in each rank."""

    strategy: str  #: the strategies' labels, comma-separated (``name@ratio`` allowed)
    out: str  #: the run folder (absolute: ranks may run elsewhere)
    workload: str = "mlp-digits"
    ratio: float | None = None  #: for the ratio strategies given without ``@``
    steps: int = 20  #: a cap when ``duration_s`` is set
    hidden: str | None = None  #: mlp-digits' hidden widths, ``1024,1024``
    batch_size: int | None = None  #: samples per rank; None: the workload's
    lr: float | None = None
    seed: int = 0
    compute_steps: int = 6
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    latency_s: float | None = None  #: the log's link (prior)
    bandwidth_Bps: float | None = None  #: the log's link (prior)
    profile: str | None = None  #: a calibration profile pricing the log
    backend: str | None = None
    powersgd_rank: int = 1
    moo_reeval_steps: int = 20  #: MOO re-optimises every this many steps
    op_timeout_s: float | None = None
    duration_s: float | None = None  #: each strategy trains until this much time has passed
    trace_testbed: str | None = None  #: testbed whose trace restarts at each strategy's first step
    overlap: bool = True  #: False: hooks block inside DDP (no overlap with backward)
    torch_profile: bool = False  #: record the steps after warm-up; rank 0 writes STRATEGY/trace.json

    def __post_init__(self) -> None:
        parse_strategies(self.strategy, self.ratio)
        parse_hidden(self.hidden)
        check_training_options(self.batch_size, self.lr)
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise InputError("steps", self.steps, "an integer >= 1")


def _workload(config: DDPWorkerConfig) -> Any:
    from flexcomm.workloads import MLP, get_workload

    workload = get_workload(config.workload, seed=config.seed)
    hidden = parse_hidden(config.hidden)
    if hidden is not None:
        if workload.name != "mlp-digits":
            raise InputError("hidden", config.hidden, "only with --workload mlp-digits")
        workload.model_factory = lambda: MLP(64, 10, hidden=hidden)
    return workload


def _step(model: Any, optimizer: Any, loss_fn: Any, inputs: Any, targets: Any) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return float(loss.item())


def _compute_only(workload: Any, config: DDPWorkerConfig, info: Any, stream: Any) -> float:
    """Median seconds of a step without DDP (no communication), max over ranks."""
    import torch.distributed as dist

    model = workload.build_model(config.seed).to(info.device)
    optimizer = workload.make_optimizer(model, lr=config.lr)
    dist.barrier()
    return _median_step_max_over_ranks(model, optimizer, workload, stream, info, max(1, config.compute_steps),
                                       warmup=max(1, config.warmup_steps))


def _median_step_max_over_ranks(model: Any, optimizer: Any, workload: Any, stream: Any, info: Any, steps: int,
                                warmup: int, guard: Callable[[int], Any] | None = None,
                                after_step: Callable[[], Any] | None = None) -> float:
    """Median seconds of ``steps`` timed steps after ``warmup`` untimed ones, the slowest rank's.

    Every step starts at a barrier (as in training every rank starts together) and is bracketed by device
    syncs; ``guard(step)`` wraps a step (a watchdog), ``after_step`` runs inside it after the timing.
    """
    import contextlib

    import torch
    import torch.distributed as dist

    sync = torch.cuda.synchronize if info.device.type == "cuda" else (lambda: None)
    times = []
    for step in range(warmup + steps):
        _, inputs, targets = next(stream)
        inputs, targets = inputs.to(info.device), targets.to(info.device)
        with guard(step) if guard is not None else contextlib.nullcontext():
            dist.barrier()
            sync()
            start = time.perf_counter()
            _step(model, optimizer, workload.loss_fn, inputs, targets)
            sync()
            if step >= warmup:
                times.append(time.perf_counter() - start)
            if after_step is not None:
                after_step()
    local = torch.tensor([statistics.median(times)], dtype=torch.float64, device=info.device)
    dist.all_reduce(local, op=dist.ReduceOp.MAX)
    return float(local.item())


def _write_json(path: Path, document: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(document, indent=2, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _median(values: Sequence[float]) -> float:
    values = _finite(values)
    return float(statistics.median(values)) if values else math.nan


def solo_step_seconds(spec: StrategySpec, workload: Any, config: DDPWorkerConfig, info: Any, solo_group: Any,
                      watchdog: Any) -> float:
    """Median step with the strategy's hook on a group of this rank alone, max over ranks.

    Everything the hook does except moving bytes between ranks (selection, packing, casts, PowerSGD's
    matmuls, the scatter-add, the future machinery) at the CPU share training has (every rank runs its own
    solo group at once): the *compute + codec* term of a predicted step.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from flexcomm.real_backend.hooks import register
    from flexcomm.workloads import batch_stream, shard

    model = workload.build_model(config.seed).to(info.device)
    ddp = DDP(model, device_ids=[info.device.index] if info.device.type == "cuda" else None,
              process_group=solo_group)
    with warnings.catch_warnings():  # the solo step prices nothing: no cost model on purpose
        warnings.simplefilter("ignore", UserWarning)
        state = register(ddp, spec.strategy, spec.ratio, group=solo_group, powersgd_rank=config.powersgd_rank,
                         overlap=config.overlap)
    optimizer = workload.make_optimizer(ddp, lr=config.lr)
    data = shard(workload.train_set, info.rank, info.world_size, seed=config.seed)
    stream = batch_stream(data, config.batch_size or workload.batch_size, seed=config.seed + 2, rank=info.rank)
    seconds = _median_step_max_over_ranks(
        ddp, optimizer, workload, stream, info, max(1, config.compute_steps), warmup=config.warmup_steps,
        guard=lambda step: watchdog.guard(f"{spec.label} solo step {step}"), after_step=state.take_steps)
    state.close()
    return seconds


def run_strategy(spec: StrategySpec, workload: Any, config: DDPWorkerConfig, info: Any, cost_model: Any,
                 out: Path, compute_s: float, watchdog: Any, solo_s: float = math.nan) -> dict[str, Any]:
    """Train ``config.steps`` steps with one strategy; rank 0 logs them. Returns the summary (rank 0's)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from flexcomm.real_backend.hooks import CsvLog, register
    from flexcomm.workloads import batch_stream, shard

    rank, world = info.rank, info.world_size
    model = workload.build_model(config.seed).to(info.device)
    ddp = DDP(model, device_ids=[info.device.index] if info.device.type == "cuda" else None)
    folder = out / spec.label
    if rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("steps.csv", "exchanges.csv"):
            (folder / name).unlink(missing_ok=True)
    moo = MOOConfig(reeval_every=config.moo_reeval_steps) if spec.strategy == "moo" else None
    state = register(ddp, spec.strategy, spec.ratio, cost_model=cost_model, overlap=config.overlap,
                     log_path=folder / "exchanges.csv", powersgd_rank=config.powersgd_rank, moo_config=moo)
    optimizer = workload.make_optimizer(ddp, lr=config.lr)
    data = shard(workload.train_set, rank, world, seed=config.seed)
    stream = batch_stream(data, config.batch_size or workload.batch_size, seed=config.seed, rank=rank)
    log = CsvLog(folder / "steps.csv", STEP_COLUMNS) if rank == 0 else None
    run = _StrategyRun(spec, workload, config, info, optimizer, state, watchdog,
                       RunClock.start(config, spec.label, rank))
    profiler = step_profiler(config, folder / "trace.json", rank)
    try:
        rows = _train_steps(run, ddp, stream, log, profiler)
    finally:
        if profiler is not None:
            profiler.stop()
        if log is not None:
            log.close()
        state.close()
    result = _strategy_summary(run, sum(p.numel() for p in model.parameters()), rows, compute_s, solo_s)
    if state.moo is not None and rank == 0 and state.moo.controller.probes:
        import pandas as pd

        write_csv_atomic(pd.concat(state.moo.controller.probes, ignore_index=True), folder / "moo_probes.csv")
    if rank == 0:
        _write_json(folder / "summary.json", result)
    del ddp
    dist.barrier()
    return result


@dataclass
class _StrategyRun:
    """One strategy's training as its steps and its summary see it."""

    spec: StrategySpec
    workload: Any
    config: DDPWorkerConfig
    info: Any  # real_backend.dist's rank info: rank, world_size, device
    optimizer: Any
    state: Any  # real_backend.hooks' HookState
    watchdog: Any
    run_clock: RunClock


def _train_steps(run: _StrategyRun, ddp: Any, stream: Any, log: Any, profiler: Any) -> list[dict[str, Any]]:
    """The steps, each after a barrier and timed between device syncs: its time is the max over ranks, its loss
    this rank's (and the mean over ranks). Stops early where rank 0's trace clock says so; a non-finite loss is an
    error."""
    import torch
    import torch.distributed as dist

    spec, info, config, run_clock = run.spec, run.info, run.config, run.run_clock
    sync = torch.cuda.synchronize if info.device.type == "cuda" else (lambda: None)
    gathered = [torch.zeros(3, dtype=torch.float64, device=info.device) for _ in range(info.world_size)]
    rows: list[dict[str, Any]] = []
    for step in range(config.steps):
        _, inputs, targets = next(stream)
        inputs, targets = inputs.to(info.device), targets.to(info.device)
        with run.watchdog.guard(f"{spec.label} step {step}"):
            dist.barrier()
            sync()
            start_epoch = time.time()
            start = time.perf_counter()
            loss = _step(ddp, run.optimizer, run.workload.loss_fn, inputs, targets)
            sync()
            seconds = time.perf_counter() - start
            stop = float(run_clock.over(time.time()))  # rank 0's clock decides; every rank sees its flag
            dist.all_gather(gathered, torch.tensor([loss, seconds, stop], dtype=torch.float64,
                                                   device=info.device))
        losses = [float(g[0]) for g in gathered]
        step_s = max(float(g[1]) for g in gathered)
        row = _step_row(run, step, loss, losses, step_s, start_epoch)
        rows.append(row)
        if log is not None:
            log.write(row)
        if profiler is not None:
            profiler.step()
        if not math.isfinite(loss):
            raise RuntimeError(f"{spec.label}: loss is {loss} at step {step}")
        if any(float(g[2]) for g in gathered):
            break
    return rows


def _step_row(run: _StrategyRun, step: int, loss: float, losses: list[float], step_s: float,
              start_epoch: float) -> dict[str, Any]:
    """One row of ``steps.csv``: the step's times and loss, and what the hook logged of it (NaN where it logged
    nothing, as DDP's builtin allreduce does)."""
    spec, state = run.spec, run.state
    done = state.take_steps()
    summary = done[-1] if done else None
    return {
        "step": step, "strategy": spec.strategy, "label": spec.label, "loss": loss,
        "loss_mean": sum(losses) / len(losses), "step_s": step_s,
        "hook_s": summary.hook_s if summary else math.nan,
        "comm_s": summary.measured_comm_s if summary else math.nan,
        "codec_s": summary.codec_s if summary else math.nan,
        "mechanism_s": summary.mechanism_s if summary and state.strategy in ("flexible", "moo") else math.nan,
        "predicted_comm_s": summary.predicted_comm_s if summary else math.nan,
        "payload_bytes": summary.payload_bytes if summary else math.nan,
        "control_bytes": summary.control_bytes if summary else math.nan,
        "scheme": summary.scheme if summary else spec.strategy,
        "ratio": state.ratio if summary is None else summary.ratio,
        "buckets": summary.buckets if summary else math.nan,
        "records": ";".join(f"{c}/{a}/{n}" for c, a, n in summary.records) if summary else "",
        "gain": state.moo.step_gain if state.moo is not None else math.nan,
        **run.run_clock.columns(start_epoch),
    }


def _strategy_summary(run: _StrategyRun, numel: int, rows: list[dict[str, Any]], compute_s: float,
                      solo_s: float) -> dict[str, Any]:
    """``summary.json``: medians over the steps after warm-up (all of them when there are no more), the losses,
    and what an adaptive strategy decided."""
    spec, config, state = run.spec, run.config, run.state
    steady = rows[config.warmup_steps:] or rows
    result: dict[str, Any] = {
        "label": spec.label, "strategy": spec.strategy, "ratio": spec.ratio, "ranks": run.info.world_size,
        "numel": numel, "gradient_bytes": numel * 4, "steps": len(rows), "warmup_steps": config.warmup_steps,
        "compute_only_s": compute_s, "solo_step_s": solo_s,
        "median_step_s": _median([r["step_s"] for r in steady]),
        "median_hook_s": _median([r["hook_s"] for r in steady]),
        "median_comm_s": _median([r["comm_s"] for r in steady]),
        "median_codec_s": _median([r["codec_s"] for r in steady]),
        "median_mechanism_s": _median([r["mechanism_s"] for r in steady]),
        "median_predicted_comm_s": _median([r["predicted_comm_s"] for r in steady]),
        "median_payload_bytes": _median([r["payload_bytes"] for r in steady]),
        "first_loss": rows[0]["loss"] if rows else math.nan, "last_loss": rows[-1]["loss"] if rows else math.nan,
        "losses": [r["loss"] for r in rows],
        "schemes": sorted({r["scheme"] for r in rows}),
    }
    comp = state.compressor
    if comp is not None and hasattr(comp, "decisions"):
        result["decisions"] = len(comp.decisions)
        result["switches"] = int(sum(bool(d.get("switched")) for d in comp.decisions))
    if state.moo is not None:
        result["moo_events"] = state.moo.controller.events
    if run.run_clock.start_epoch is not None:
        result["trace_start_epoch"] = run.run_clock.start_epoch
    return result


def step_profiler(config: DDPWorkerConfig, path: Path, rank: int) -> Any:
    """With ``torch_profile``: a started ``torch.profiler.profile`` recording the steps after warm-up (every
    rank records, so each pays the same overhead; rank 0 writes the Chrome trace, atomically), else None.

    A schedule, because torch marks ``ProfilerStep#N`` only with one; shapes, because they are the
    collectives' sizes (see :mod:`workloads.profiler_trace`)."""
    if not config.torch_profile:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule

    active = max(1, config.steps - config.warmup_steps - 1)

    def write(prof: Any) -> None:
        if rank == 0:
            partial = path.with_name(path.name + ".partial")
            prof.export_chrome_trace(str(partial))
            partial.replace(path)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if _cuda_available() else [])
    profiler = profile(activities=activities, record_shapes=True, on_trace_ready=write,
                       schedule=schedule(wait=max(0, config.warmup_steps - 1), warmup=1, active=active, repeat=1))
    profiler.start()
    return profiler


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@dataclass
class RunClock:
    """When a strategy's run started (its trace's time zero on a traced testbed) and when it must stop."""

    start_epoch: float | None
    duration_s: float | None
    trace: Any = None

    @classmethod
    def start(cls, config: DDPWorkerConfig, label: str, rank: int) -> RunClock:
        """Rank 0 restarts the testbed's trace (``trace_testbed``) and takes its time zero; others hold none."""
        if rank != 0:
            return cls(None, None)
        if not config.trace_testbed:
            return cls(time.time(), config.duration_s)

        text = trace_file(config.trace_testbed, "csv").read_text(encoding="utf-8")
        trace = parse_trace(text, "trace", 10**6)
        token = f"{label}-{time.time():.6f}"
        return cls(request_start(config.trace_testbed, token), config.duration_s or trace.duration_s, trace)

    def over(self, now_epoch: float) -> bool:
        return self.start_epoch is not None and self.duration_s is not None and (
            now_epoch - self.start_epoch >= self.duration_s)

    def columns(self, start_epoch: float) -> dict[str, Any]:
        """The step's start: wall clock, seconds into the run (trace time), and the trace phase in force."""
        offset = start_epoch - self.start_epoch if self.start_epoch is not None else math.nan
        phase = self.trace.state_at(offset)[0] if self.trace is not None else math.nan
        return {"start_epoch_s": start_epoch, "trace_s": offset, "trace_phase": phase}


def worker_main(config: DDPWorkerConfig) -> int:
    """One rank: compute-only measurement, then every strategy in turn."""
    import torch

    specs = parse_strategies(config.strategy, config.ratio)
    workload = _workload(config)
    info = init_from_env(backend=config.backend, timeout_s=config.op_timeout_s)
    torch.manual_seed(config.seed)
    out = Path(config.out)
    if info.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    watchdog = Watchdog(info.timeout_s + 10.0, label=f"flexcomm train-ddp: rank {info.rank}")
    cost_model = build_cost_model(info.world_size, config.latency_s, config.bandwidth_Bps, config.profile)
    status = 0
    try:
        from flexcomm.workloads import batch_stream, shard

        data = shard(workload.train_set, info.rank, info.world_size, seed=config.seed)
        stream = batch_stream(data, config.batch_size or workload.batch_size, seed=config.seed + 1, rank=info.rank)
        with watchdog.guard("compute-only measurement"):
            compute_s = _compute_only(workload, config, info, stream)
        import torch.distributed as dist

        # one group per rank holding that rank alone (every rank must create every group, in order)
        solo_groups = [dist.new_group([r]) for r in range(info.world_size)]
        results = []
        for spec in specs:
            solo_s = math.nan
            if config.compute_steps > 0:
                solo_s = solo_step_seconds(spec, workload, config, info, solo_groups[info.rank], watchdog)
            results.append(run_strategy(spec, workload, config, info, cost_model, out, compute_s, watchdog, solo_s))
            if info.rank == 0:
                print(summary_line(spec.label, results[-1]), flush=True)
        if info.rank == 0:
            _write_json(out / "run.json", {
                "workload": workload.name, "hidden": parse_hidden(config.hidden), "ranks": info.world_size,
                "backend": info.backend, "device": str(info.device), "steps": config.steps,
                "compute_only_s": compute_s, "latency_s": config.latency_s, "bandwidth_Bps": config.bandwidth_Bps,
                "profile": keep_profile_beside(out, config.profile), "strategies": [s.label for s in specs],
                "moo_reeval": config.moo_reeval_steps,
                "duration_s": config.duration_s, "trace_testbed": config.trace_testbed,
            })
    except InputError:
        raise
    except Exception as exc:  # a peer died, a collective timed out, a NaN loss
        print(f"flexcomm train-ddp: rank {info.rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        status = 1
    if status == 0:
        with watchdog.guard("shutdown", timeout_s=30.0):
            shutdown()
    watchdog.close()
    return status


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms" if math.isfinite(seconds) else "       - ms"


def summary_line(label: str, r: Mapping[str, float]) -> str:
    """One strategy's medians; ``builtin`` runs DDP's own allreduce inside backward, so it has no hook to time
    (its comm columns say so instead of printing nan)."""
    if label == "builtin":
        comm = "comm (inside DDP's backward, not timed)"
    else:
        comm = f"comm {_ms(r['median_comm_s'])}  predicted comm {_ms(r['median_predicted_comm_s'])}  " \
               f"bytes {r['median_payload_bytes']:.0f}"
    return (f"{label:<18} loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}  step {_ms(r['median_step_s'])}  "
            f"solo {_ms(r['solo_step_s'])}  {comm}")


def check_training_options(batch_size: int | None, lr: float | None) -> None:
    """Refuse a batch size or learning rate every rank would otherwise trip over (or silently replace)."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise InputError("batch-size", batch_size, "an integer >= 1 samples per rank")
    if lr is not None and not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise InputError("lr", lr, "a positive, finite learning rate such as 0.05")


# --- the parent --------------------------------------------------------------------------------------


def worker_command(workload: str, strategies: Sequence[StrategySpec], steps: int, out: str | Path, *,
                   ratio: float | None = None, hidden: str | None = None, batch_size: int | None = None,
                   lr: float | None = None, seed: int = 0, compute_steps: int = 6,
                   warmup_steps: int = DEFAULT_WARMUP_STEPS, latency_s: float | None = None,
                   bandwidth_Bps: float | None = None, profile: str | Path | None = None, backend: str | None = None,
                   op_timeout_s: float | None = None, powersgd_rank: int = 1, moo_reeval: int = 20,
                   duration_s: float | None = None, trace_testbed: str | None = None,
                   overlap: bool = True, torch_profile: bool = False) -> list[str]:
    """The ``python -m flexcomm.real_backend.ddp_train '<DDPWorkerConfig JSON>'`` command every rank runs."""
    config = DDPWorkerConfig(
        workload=workload, strategy=",".join(s.label for s in strategies), steps=steps, out=str(Path(out).resolve()),
        ratio=ratio, hidden=hidden, batch_size=batch_size, lr=lr, seed=seed, compute_steps=compute_steps,
        warmup_steps=warmup_steps, latency_s=latency_s, bandwidth_Bps=bandwidth_Bps,
        profile=str(Path(profile).resolve()) if profile else None, backend=backend, powersgd_rank=powersgd_rank,
        moo_reeval_steps=moo_reeval, op_timeout_s=op_timeout_s, duration_s=duration_s, trace_testbed=trace_testbed,
        overlap=overlap, torch_profile=torch_profile)
    return [sys.executable, "-m", "flexcomm.real_backend.ddp_train", to_argument(config)]


def run_training(nproc: int | None, workload: str, strategies: str | Sequence[StrategySpec], steps: int,
                 out: str | Path, *, ratio: float | None = None, testbed: Any = None, timeout_s: float | None = None,
                 log_dir: str | Path | None = None, quiet: bool = False, **options: Any) -> Any:
    """Launch the worker on ``nproc`` local ranks (or in ``testbed``); returns the LaunchResult.

    ``options`` go to :func:`worker_command`. On a testbed without ``bandwidth_Bps`` the log's link is
    the testbed's goodput (``Testbed.effective_bandwidth_Bps``).
    """
    from flexcomm.workloads import get_workload

    specs = parse_strategies(strategies, ratio) if isinstance(strategies, str) else list(strategies)
    get_workload(workload)  # validate the name before starting anything
    parse_hidden(options.get("hidden"))
    check_training_options(options.get("batch_size"), options.get("lr"))
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError("steps", steps, "an integer >= 1")
    MAX_TRAINING_STEPS.check("steps", steps)
    backend = options.get("backend")
    if testbed is not None:
        count = testbed.ranks if nproc is None else nproc
        if not 1 <= count <= testbed.ranks:
            raise InputError("nproc", nproc, f"1..{testbed.ranks} (the testbed's ranks)")
        if options.get("bandwidth_Bps") is None:
            options["bandwidth_Bps"] = float(testbed.effective_bandwidth_Bps)
    else:
        count = 2 if nproc is None else nproc
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InputError("nproc", nproc, "an integer >= 1")
    cmd = worker_command(workload, specs, steps, out, ratio=ratio, **options)
    Path(out).mkdir(parents=True, exist_ok=True)
    if testbed is not None:
        return testbed.launch(cmd, nproc=count, timeout_s=timeout_s, backend=backend, log_dir=log_dir)
    return launch(cmd, count, backend=backend, timeout_s=timeout_s, log_dir=log_dir, quiet=quiet)


if __name__ == "__main__":
    try:
        sys.exit(worker_main(config_from_argv(DDPWorkerConfig, "flexcomm train-ddp")))
    except InputError as error:
        print(f"flexcomm train-ddp: error: {error}", file=sys.stderr)
        sys.exit(2)
