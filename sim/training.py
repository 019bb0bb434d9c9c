"""Data-parallel training iterations on the simulated cluster: compute, gradient buckets, overlap, faults.

Per iteration every rank runs the forward pass, then the backward pass layer by layer in reverse
(layer times priced on the cluster's device by :mod:`costmodel.device_compute`: GEMMs by shape at its measured
matmul rate, memory-bound kernels by bytes at its HBM bandwidth; or FLOPs at a given ``efficiency`` of peak; or
the measured profile). Gradients are grouped into buckets as PyTorch DDP does (reverse
layer order, a bucket closes once it holds ``bucket_cap`` bytes; or ``bucket_count`` buckets of
about equal size). A bucket is exchanged as soon as its last gradient is ready on *every* rank
(a collective starts when all its ranks reached it), one bucket after the other (one
communication stream, as NCCL/DDP), overlapping the rest of the backward pass; the optimizer
step follows the last bucket. A compressed scheme (``topk-ag``, ``topk-ar``, ``powersgd``, ``fp16``,
``bf16``) first compresses on the device (:mod:`costmodel.compression_compute`, priced per device):
that work runs on the compute stream when the bucket is ready (a DDP communication hook's kernels
delay the backward kernels queued behind them), then the exchange
runs as :func:`sim.collectives.run_scheme`.

Why compute is not simulated event by event: a device's kernels do not contend with other
devices, so each rank's layer finish times are closed-form (a cumulative sum scaled by the rank's
slowdown); only what ranks share, the network, goes through the event engine (one collective per
bucket, its coflows sharing links with dynamics and cross traffic). That keeps 64 ranks x 25
buckets x 100 iterations at a few seconds while every bucket still waits for its slowest rank.
Stragglers: a fixed per-rank factor (``stragglers={3: 1.5}``) and/or a seeded lognormal per-rank,
per-iteration factor of mean 1 (``compute_jitter``) scale a rank's forward, backward and compression; a rank
on a node of another device type (``node_devices``) computes at that device's peak rate relative to the
cluster's ``device`` (on top of any straggler factor).

Per iteration and rank the time splits exactly into compute, compression, exposed communication
(a collective is running while the rank has nothing left to compute) and stall (the rank is idle
and no collective runs: it waits for a straggler, or for a hung collective to time out); the
iteration frame reports the mean over ranks (the total is the same for every rank). Failures and
restarts: :mod:`sim.faults`. The buckets are :mod:`sim.buckets`'s, the settings and their checks
:mod:`sim.training_config`'s; this module runs the job and reports it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import simpy
from simpy.events import Timeout

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.collective_libraries.algorithms import is_nccl_algorithm, parse_nccl_algorithm
from flexcomm.costmodel.compressed import SparsePayload, powersgd_sides
from flexcomm.costmodel.compression_compute import device_compression_seconds
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.device_compute import model_layer_seconds
from flexcomm.costmodel.errors import InputError
from flexcomm.sim.buckets import (
    ONE_LAYER_PER_BUCKET,
    Bucket,
    bucket_ready_seconds,
    make_buckets,
)
from flexcomm.sim.collectives import run_collective, run_scheme
from flexcomm.sim.faults import (
    Fault,
    FaultInjector,
    FaultPolicy,
    FaultSource,
    LostTime,
    RandomNodeFaults,
    check_random_failures,
    parse_faults,
)
from flexcomm.sim.network import CountingEnvironment, Network
from flexcomm.sim.records import Recorder
from flexcomm.sim.training_config import (
    TrainingConfig,
    check_data_parallel_memory,
    data_parallel_memory_bytes,
    default_algorithm,
    scheme_algorithms,
)
from flexcomm.sim.workload import get_training_workload

__all__ = [
    "BUCKET_COLUMNS", "ITERATION_COLUMNS", "TrainingResult", "TrainingSimulator", "analytical_iteration",
    "bucket_exchange_seconds", "overlapped_iteration", "simulate_training",
]

# --- results --------------------------------------------------------------------------------------

ITERATION_COLUMNS = (
    "attempt", "step", "epoch", "world_size", "status", "start_s", "end_s", "time_s", "compute_s", "compression_s",
    "exposed_comm_s", "stall_s", "comm_s", "samples",
)
BUCKET_COLUMNS = (
    "attempt", "step", "epoch", "bucket", "layers", "numel", "bytes", "ready_first_s", "ready_last_s", "start_s",
    "end_s", "comm_s", "wait_s", "compression_s", "status",
)


@dataclass
class _Attempt:
    """One iteration attempt: enough to recompute its breakdown and redraw its timeline."""

    index: int
    step: int
    epoch: int
    world: np.ndarray
    speed: np.ndarray
    scale: float
    t0: float
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    t_end: float = math.nan
    status: str = "ok"
    hung_bucket: int = -1
    hung_start: float = math.nan  # NaN: the hung collective never started (a participant was dead)
    t_fail: float = math.nan
    dead: np.ndarray | None = None  # world positions of ranks that died during the attempt


@dataclass
class _JobState:
    """Where the job stands between attempts: its nodes and ranks, its progress and its last checkpoint."""

    nodes: list[int]
    world: np.ndarray
    epoch_start: float
    ckpt_time: float
    step: int = 0
    ckpt_step: int = 0
    epoch: int = 0
    since_ckpt: list[_Attempt] = field(default_factory=list)
    invalid_writes: float = 0.0  # seconds of checkpoint writes a failure made invalid


@dataclass
class TrainingResult:
    """Frames of one simulated job: iterations, buckets, job events, faults; :meth:`summary` for the gist."""

    iterations: pd.DataFrame
    buckets: pd.DataFrame
    events: pd.DataFrame
    faults: pd.DataFrame
    flows: pd.DataFrame
    lost: LostTime
    job_time_s: float
    completed: int
    sim_events: int
    config: dict[str, Any]
    attempts: list[_Attempt] = field(repr=False)
    bucket_list: list[Bucket] = field(repr=False)
    layer_times: tuple[np.ndarray, np.ndarray] = field(repr=False)
    compression_s: np.ndarray = field(repr=False)
    optimizer_s: float = 0.0
    aborted: bool = False

    @property
    def useful(self) -> pd.DataFrame:
        """Iterations that count (completed and not rolled back by a restart)."""
        return self.iterations[self.iterations["status"] == "ok"]

    def summary(self) -> dict[str, Any]:
        """Median iteration time and breakdown over useful iterations, throughput, time lost to faults."""
        ok = self.useful
        med = {f"median_{c}": float(ok[c].median()) if len(ok) else math.nan
               for c in ("time_s", "compute_s", "compression_s", "exposed_comm_s", "stall_s", "comm_s")}
        samples = float(ok["samples"].sum())
        return {
            "iterations": self.completed, "attempts": len(self.iterations), "job_time_s": self.job_time_s, **med,
            "mean_time_s": float(ok["time_s"].mean()) if len(ok) else math.nan,
            "samples_per_s": samples / self.job_time_s if self.job_time_s > 0 else math.nan,
            "buckets": len(self.bucket_list), "sim_events": self.sim_events, "aborted": self.aborted,
            "time_lost": self.lost.as_dict(),
        }


# --- the simulator --------------------------------------------------------------------------------


class _NullRecorder(Recorder):
    """Keeps no coflow records (``record_flows=False``), so long runs' memory stays flat."""

    def add(self, record: Any) -> None:
        return


class TrainingSimulator:
    """Runs one training job on a cluster (see the module doc); :meth:`run` returns a :class:`TrainingResult`."""

    def __init__(self, cluster: Cluster | str, config: TrainingConfig | None = None, dynamics: Any = None,
                 faults: Sequence[FaultSource | str] = (), policy: FaultPolicy | None = None) -> None:
        self.cluster = load_cluster(cluster)
        self.config = config = config or TrainingConfig()
        self.policy = policy or FaultPolicy()
        self.workload = get_training_workload(config.workload, config.batch_per_rank)
        world = self.cluster.world_size
        ranks = world if config.ranks is None else config.ranks
        if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or not 1 <= ranks <= world:
            raise InputError("ranks", ranks, f"a rank count 1..{world} of cluster {self.cluster.name}")
        self.ranks = int(ranks)
        if config.algorithm == "auto":  # as the job would run: NCCL where the cluster describes its GPU fabric
            config = self.config = replace(config, algorithm=default_algorithm(self.cluster))
        for rank in config.stragglers:
            if not (isinstance(rank, (int, np.integer)) and 0 <= rank < self.ranks):
                raise InputError("straggler", rank, f"a rank 0..{self.ranks - 1} of the job")
        dense_algorithms = ("ring", "tree", "rabenseifner", "recursive-doubling", "hierarchical")
        hierarchical_sparse = config.scheme != "dense" and config.algorithm == "hierarchical"
        nccl = is_nccl_algorithm(config.algorithm)
        if nccl:
            parse_nccl_algorithm(config.algorithm)
            if self.cluster.gpu_fabric is None:
                raise InputError("cluster.gpu_fabric", None, f"a gpu_fabric section in cluster {self.cluster.name} "
                                 "for --algorithm nccl (see docs/cost-model.md); or a formula's algorithm")
        elif config.algorithm not in dense_algorithms or hierarchical_sparse:
            allowed = dense_algorithms if config.scheme == "dense" else dense_algorithms[:-1]
            raise InputError("algorithm", config.algorithm, "one of " + ", ".join(allowed))
        if dynamics is None:
            dynamics = []
        self.dynamics = list(dynamics) if isinstance(dynamics, (list, tuple)) else [dynamics]
        self.fault_sources = parse_faults(faults, config.seed)
        model = self.workload.model
        if self.workload.measured_buckets:  # a profiled step: its buckets are its parameter layers, as measured
            self.buckets = make_buckets(model, ONE_LAYER_PER_BUCKET, None, ONE_LAYER_PER_BUCKET)
        else:
            self.buckets = make_buckets(model, config.bucket_cap, config.bucket_count, config.first_bucket_cap)
        if self.workload.after_exchange_s:
            config = self.config = replace(config, optimizer_s=config.optimizer_s + self.workload.after_exchange_s)
        fwd, bwd = model_layer_seconds(model, self.workload.batch_per_rank, self.cluster.device, config.efficiency)
        self.fwd, self.bwd = fwd, bwd
        forward = float(fwd.sum())
        self.forward_s = forward
        self.backward_s = float(bwd.sum())
        self.bucket_compute = bucket_ready_seconds(fwd, bwd, self.buckets)
        device = self.cluster.device
        self.compress = np.array([device_compression_seconds(
            config.scheme, b.numel, device, config.compress_elements_per_s,
            matrices=[model.layers[i].params for i in b.layers if model.layers[i].params]) for b in self.buckets])
        self.compress_cum = np.cumsum(self.compress)
        # PowerSGD's factors: one square matrix per layer of the bucket (see costmodel.compressed.powersgd_sides)
        self.payloads = [SparsePayload(matrix_sides=powersgd_sides([model.layers[i].params for i in b.layers]))
                         for b in self.buckets]
        self.compute_total = forward + self.backward_s
        dpn = self.cluster.devices_per_node
        self.job_nodes = sorted({r // dpn for r in range(self.ranks)})
        self.memory_bytes = data_parallel_memory_bytes(model, self.cluster.device.precision, config.scheme,
                                                       self.buckets, self.payloads)
        if config.check_memory:
            check_data_parallel_memory(self.cluster, self.ranks, self.workload.name, self.memory_bytes)
        check_random_failures(self.fault_sources, len(self.job_nodes), config.iterations, self.compute_total,
                              self.policy.checkpoint_every, self.policy.elastic,
                              self.policy.max_restarts)  # before a run that would not end for minutes
        self.granularity = config.granularity
        if self.granularity == "auto":
            self.granularity = "steps" if self.dynamics else "aggregate"
        # each rank computes at its own node's device (node_devices): the layer times above are the cluster
        # device's, so a rank on a slower device is slower by the ratio of peak rates (a V100 among A100s: 2.5x)
        reference = self.cluster.device.peak_flops
        base = np.array([reference / self.cluster.node_device(r // dpn).peak_flops for r in range(self.ranks)])
        for rank, factor in config.stragglers.items():
            base[int(rank)] *= float(factor)
        self.base_speed = base

    # --- helpers --------------------------------------------------------------------------------
    def _world_of(self, nodes: Sequence[int]) -> np.ndarray:
        dpn = self.cluster.devices_per_node
        keep = set(nodes)
        return np.array([r for r in range(self.ranks) if r // dpn in keep], dtype=np.int64)

    def _exchange(self, world: list[int] | int, bucket: Bucket, tag: str) -> simpy.Process:
        cfg = self.config
        if cfg.scheme == "dense":
            return run_collective(self.env, self.network, "allreduce", cfg.algorithm, world, bucket.nbytes, tag=tag,
                                  gamma=cfg.gamma, granularity=self.granularity)
        return run_scheme(self.env, self.network, cfg.scheme, bucket.numel, world, cfg.ratio,
                          payload=self.payloads[bucket.index], algorithms=scheme_algorithms(cfg.algorithm), tag=tag,
                          gamma=cfg.gamma, granularity=self.granularity)

    def _watchdog(self, token: object, _event: Any) -> None:
        watch = self._watch
        if watch is not None and watch[0] is token and not watch[1].triggered:
            self._job.interrupt("watchdog")

    # --- one iteration attempt ------------------------------------------------------------------
    def _attempt(self, att: _Attempt, epoch_start: float) -> Generator[Any, Any, None]:
        env = self.env
        timeout = self.policy.timeout_s
        world = att.world
        # ranks 0..p-1 in order: pass the count, which run_collective turns into a range without checks
        world_list: list[int] | int = len(world) if world[-1] == len(world) - 1 else world.tolist()
        nodes = self._current_nodes
        speed = att.speed
        smax, smin = float(speed.max()), float(speed.min())
        t0 = att.t0
        ready = (att.scale * self.bucket_compute + self.compress_cum).tolist()
        injector = self.injector
        arm = self._arm_watchdog
        end = t0
        for b, bucket in enumerate(self.buckets):
            rb = ready[b]
            start = max(end, t0 + smax * rb)
            if start > env.now:
                yield env.timeout(start - env.now)
            if injector is not None and injector.node_failed_since(nodes, epoch_start) is not None:
                # the dead ranks never reach this collective: the survivors' watchdog fires
                live = self._live_positions(att, epoch_start)
                first = max(end, t0 + float(speed[live].min()) * rb) if len(live) else env.now
                att.hung_bucket = b
                detect = max(env.now, first + timeout)
                yield env.timeout(detect - env.now)
                att.status, att.t_end = "failed", env.now
                return
            proc = self._exchange(world_list, bucket, f"e{att.epoch}:i{att.index}:b{b}")
            if arm:
                token = object()
                self._watch = (token, proc)
                first = max(end, t0 + smin * rb)
                Timeout(env, max(0.0, first + timeout - env.now)).callbacks.append(
                    functools.partial(self._watchdog, token))
            try:
                yield proc
            except simpy.Interrupt:
                self._watch = None
                att.hung_bucket, att.hung_start = b, start
                if injector is not None:
                    self._live_positions(att, epoch_start)
                att.status, att.t_end = "failed", env.now
                return
            self._watch = None
            end = env.now
            att.starts.append(start)
            att.ends.append(end)
        busy = att.scale * self.compute_total + float(self.compress_cum[-1])
        t1 = max(end, t0 + smax * busy) + self.config.optimizer_s
        if t1 > env.now:
            yield env.timeout(t1 - env.now)
        att.t_end = env.now

    def _live_positions(self, att: _Attempt, since: float) -> np.ndarray:
        dpn = self.cluster.devices_per_node
        assert self.injector is not None
        dead_nodes = {n for t, n in self.injector._node_failures if t >= since}
        alive = np.array([int(r) // dpn not in dead_nodes for r in att.world], dtype=bool)
        att.dead = np.flatnonzero(~alive)
        return np.flatnonzero(alive)

    # --- the job --------------------------------------------------------------------------------
    def _event(self, kind: str, start: float, end: float | None = None, **info: Any) -> None:
        self._events.append({"kind": kind, "start_s": start, "end_s": start if end is None else end, **info})

    def _job_process(self) -> Generator[Any, Any, None]:
        """The job: attempt iterations until the last one; checkpoint, fail, restart and grow on the way."""
        env = self.env
        cfg = self.config
        params = self.workload.model.params
        write_s, load_s = self.policy.write_seconds(params), self.policy.load_seconds(params)
        rng = np.random.default_rng([cfg.seed, 7])
        nodes = list(self.job_nodes)
        job = _JobState(nodes, self._world_of(nodes), epoch_start=env.now, ckpt_time=env.now)
        self._current_nodes = nodes
        while job.step < cfg.iterations:
            att = self._new_attempt(job, rng)
            yield from self._attempt(att, job.epoch_start)
            if att.status == "ok":
                if not (yield from self._completed(job, att, write_s, load_s)):
                    break
                continue
            if not (yield from self._recover(job, att, load_s)):
                break
        self.completed = job.step

    def _new_attempt(self, job: _JobState, rng: np.random.Generator) -> _Attempt:
        """The next attempt: every rank's speed (its base, times this iteration's jitter) and the batch scale."""
        sigma = self.config.compute_jitter
        if sigma > 0:
            jitter = rng.lognormal(-0.5 * sigma * sigma, sigma, size=self.ranks)
            speed = (self.base_speed * jitter)[job.world]
        else:
            speed = self.base_speed[job.world]
        scale = 1.0
        if len(job.world) < self.ranks and self.policy.elastic_batch == "global":
            scale = self.ranks / len(job.world)
        att = _Attempt(len(self.attempts), job.step, job.epoch, job.world, speed, scale, self.env.now)
        self.attempts.append(att)
        return att

    def _completed(self, job: _JobState, att: _Attempt, write_s: float,
                   load_s: float) -> Generator[Any, Any, bool]:
        """Count a completed iteration and checkpoint when one is due; False when the job was aborted."""
        cfg, policy = self.config, self.policy
        job.since_ckpt.append(att)
        job.step += 1
        if self.progress is not None:
            self.progress(job.step, cfg.iterations)
        if policy.checkpoint_every and job.step % policy.checkpoint_every == 0 and job.step < cfg.iterations:
            return (yield from self._checkpoint(job, write_s, load_s))
        return True

    def _checkpoint(self, job: _JobState, write_s: float, load_s: float) -> Generator[Any, Any, bool]:
        """Write a checkpoint; a valid one (no node of the job died meanwhile) may let an elastic job grow back.

        False when growing back exceeded the relaunches allowed (the job is aborted).
        """
        env, injector, lost = self.env, self.injector, self.lost
        t_write = env.now
        if write_s > 0:
            yield env.timeout(write_s)
        lost.checkpoint_s += env.now - t_write
        dead = injector.node_failed_since(job.nodes, t_write) if injector is not None else None
        self._event("checkpoint", t_write, env.now, step=job.step, valid=dead is None)
        if dead is not None:  # incomplete: the failure's lost window will cover this write
            job.invalid_writes += env.now - t_write
            return True
        job.ckpt_step, job.ckpt_time = job.step, env.now
        job.since_ckpt = []
        job.invalid_writes = 0.0
        if self.policy.elastic and injector is not None:
            back = injector.usable_nodes(self.job_nodes, env.now)
            if len(back) > len(job.nodes) and not injector.node_failed_since(job.nodes, job.epoch_start):
                return (yield from self._grow(job, load_s))
        return True

    def _grow(self, job: _JobState, load_s: float) -> Generator[Any, Any, bool]:
        """Relaunch an elastic job on the nodes repaired since it shrank; False when aborted."""
        env = self.env
        t_restart = env.now
        relaunched = yield from self._restart(job.nodes, load_s, grow=True)
        if relaunched is None:
            self.aborted = True
            return False
        job.nodes = relaunched
        self.lost.grows += 1
        self._event("grow", t_restart, env.now, world_size=len(self._world_of(relaunched)))
        job.world = self._world_of(relaunched)
        self._current_nodes = relaunched
        job.epoch += 1
        job.epoch_start = env.now
        return True

    def _account_failure(self, job: _JobState, att: _Attempt) -> tuple[float, float, float, float]:
        """A failure detected now: abort the epoch's collectives, mark what it caused and lost; returns
        (detected, failed, lost work, detection) seconds."""
        env, injector, lost = self.env, self.injector, self.lost
        t_detect = env.now
        self.network.cancel(f"e{job.epoch}:")
        causes = injector.faults_between(job.epoch_start, t_detect) if injector is not None else []
        hitting = [r for r in causes if not r.nodes or set(r.nodes) & set(job.nodes)]
        t_fail = hitting[0].time_s if hitting else (att.hung_start if math.isfinite(att.hung_start) else t_detect)
        att.t_fail = t_fail
        for k, record in enumerate(hitting):
            record.effect = "caused restart" if k == 0 else "same restart"
            record.detected_s = t_detect
        for old in job.since_ckpt:
            old.status = "lost"
        job.since_ckpt = []
        # the window from the last checkpoint (or restart) to the detection is lost: split at the failure
        window_start = max(job.ckpt_time, job.epoch_start)
        lost_work = max(0.0, t_fail - window_start)
        detection = t_detect - max(t_fail, window_start)
        lost.checkpoint_s -= job.invalid_writes
        job.invalid_writes = 0.0
        lost.lost_work_s += lost_work
        lost.detection_s += detection
        lost.restarts += 1
        self._event("failure", t_fail, t_detect, cause=hitting[0].spec if hitting else "collective timeout")
        self._event("detected", t_detect, step=job.step, resume_step=job.ckpt_step)
        return t_detect, t_fail, lost_work, detection

    def _recover(self, job: _JobState, att: _Attempt, load_s: float) -> Generator[Any, Any, bool]:
        """After a failed attempt: account the failure, restart from the last checkpoint; False when aborted."""
        env, lost = self.env, self.lost
        t_detect, t_fail, lost_work, detection = self._account_failure(job, att)
        t_restart = env.now
        restart_before, wait_before = lost.restart_s, lost.repair_wait_s
        old_size = len(job.world)
        job.step = job.ckpt_step
        relaunched = yield from self._restart(job.nodes, load_s, grow=False)
        if relaunched is None:
            self.aborted = True
            self._event("aborted", env.now, relaunches=lost.relaunches)
            return False
        job.nodes = relaunched
        job.world = self._world_of(relaunched)
        self._current_nodes = relaunched
        if len(job.world) < old_size:
            lost.shrinks += 1
        lost.per_restart.append({
            "detected_s": t_detect, "failed_s": t_fail, "lost_work_s": lost_work, "detection_s": detection,
            "repair_wait_s": lost.repair_wait_s - wait_before, "restart_s": lost.restart_s - restart_before,
            "resumed_s": env.now, "resume_step": job.ckpt_step, "world_size": len(job.world),
        })
        self._event("restart", t_restart, env.now, world_size=len(job.world), resume_step=job.ckpt_step)
        job.epoch += 1
        job.epoch_start = env.now
        return True

    def _restart(self, nodes: list[int], load_s: float, grow: bool) -> Generator[Any, Any, list[int] | None]:
        """Wait for what must be repaired, relaunch and load the checkpoint; returns the new job's nodes.

        None when the relaunches exceed ``max_restarts`` (the job is aborted).
        """
        env = self.env
        policy, injector, lost = self.policy, self.injector, self.lost
        while True:
            if lost.relaunches >= policy.max_restarts:
                return None
            if injector is not None:
                if policy.elastic:
                    usable = injector.usable_nodes(self.job_nodes, env.now)
                    if usable and not injector.blocking_links():
                        nodes = usable
                    else:  # nothing to run on yet: wait for the next repair
                        t = env.now
                        yield env.timeout(max(injector.next_repair(env.now) - env.now, 0.0))
                        lost.repair_wait_s += env.now - t
                        self._event("repair-wait", t, env.now)
                        continue
                else:
                    nodes = list(self.job_nodes)
                    ready_at = injector.repaired_at(nodes)
                    if ready_at > env.now:
                        t = env.now
                        yield env.timeout(ready_at - env.now)
                        lost.repair_wait_s += env.now - t
                        self._event("repair-wait", t, env.now)
                        continue
            t = env.now
            cost = policy.restart_s + load_s
            lost.relaunches += 1
            if cost > 0:
                yield env.timeout(cost)
            lost.restart_s += env.now - t
            self._event("relaunch", t, env.now, grow=grow, world_size=len(self._world_of(nodes)))
            if injector is not None:
                during = [r for r in injector.faults_between(t, env.now) if not r.nodes or set(r.nodes) & set(nodes)]
                for record in during:
                    record.effect = "during restart"
                if during:
                    continue  # a node or link of the new job failed while it restarted: rendezvous again
            return nodes

    # --- running --------------------------------------------------------------------------------
    def run(self, progress: Callable[[int, int], None] | None = None) -> TrainingResult:
        """Simulate the job to its last iteration (``progress(done, total)`` after each useful one)."""
        self.env = env = CountingEnvironment()
        recorder = Recorder() if self.config.record_flows else _NullRecorder()
        self.injector = FaultInjector(self.fault_sources, self.policy.repair_s, self.job_nodes) \
            if self.fault_sources else None
        dynamics = [*self.dynamics, *([self.injector] if self.injector is not None else [])]
        self.network = Network(env, self.cluster, dynamics=dynamics or None, recorder=recorder)
        self._arm_watchdog = bool(dynamics)
        self._watch: tuple[object, simpy.Process] | None = None
        self.attempts: list[_Attempt] = []
        self._events: list[dict[str, Any]] = []
        self.lost = LostTime()
        self.progress = progress
        self.aborted = False
        self.completed = 0
        self._job = env.process(self._job_process())
        env.run(until=self._job)
        return self._result(recorder)

    def _result(self, recorder: Recorder) -> TrainingResult:
        job_time = self.env.now
        rows, bucket_rows = [], []
        for att in self.attempts:
            rows.append(self._iteration_row(att))
            bucket_rows.extend(self._bucket_rows(att))
        iterations = pd.DataFrame(rows, columns=list(ITERATION_COLUMNS))
        ok = iterations[iterations["status"] == "ok"]
        full = ok[ok["world_size"] == self.ranks]["time_s"]
        reference = float(full.median()) if len(full) else math.nan
        shrunk = ok[ok["world_size"] < self.ranks]
        if len(shrunk) and math.isfinite(reference):
            share = 1.0 if self.policy.elastic_batch == "global" else shrunk["world_size"] / self.ranks
            self.lost.reduced_throughput_s = float((shrunk["time_s"] - share * reference).sum())
        fault_rows = [{"time_s": r.time_s, "kind": r.kind, "target": r.target, "spec": r.spec,
                       "repaired_s": r.time_s + r.repair_s, "effect": r.effect, "detected_s": r.detected_s}
                      for r in (self.injector.records if self.injector is not None else [])]
        for source in self.fault_sources:  # scheduled for after the job had finished: never happened
            if isinstance(source, Fault) and source.at_s > job_time:
                target = f"node{source.target}" if source.kind == "node" else source.target
                fault_rows.append({"time_s": source.at_s, "kind": source.kind, "target": target,
                                   "spec": source.spec, "repaired_s": math.nan, "effect": "after job end",
                                   "detected_s": math.nan})
            elif isinstance(source, RandomNodeFaults) and not any(
                    r.spec == source.spec for r in (self.injector.records if self.injector is not None else [])):
                # nothing drawn within the job: say so, with how many failures the MTBF made likely
                expected = len(self.job_nodes) * job_time / source.mtbf_s
                fault_rows.append({"time_s": math.nan, "kind": "node", "target": "random", "spec": source.spec,
                                   "repaired_s": math.nan, "effect": f"none drawn before job end "
                                   f"({expected:.2g} expected)", "detected_s": math.nan})
        faults = pd.DataFrame(fault_rows, columns=["time_s", "kind", "target", "spec", "repaired_s", "effect",
                                                   "detected_s"])
        events = pd.DataFrame(self._events, columns=["kind", "start_s", "end_s"] + sorted(
            {k for e in self._events for k in e} - {"kind", "start_s", "end_s"}))
        cfg = asdict(self.config)
        cfg["workload"] = self.workload.name
        cfg["workload_description"] = self.workload.description
        cfg["parameters"] = float(self.workload.model.params)
        cfg["batch_per_rank"] = self.workload.batch_per_rank
        cfg["stragglers"] = {str(k): v for k, v in self.config.stragglers.items()}
        cfg.update(cluster=self.cluster.name, ranks=self.ranks, granularity=self.granularity,
                   devices_per_node=self.cluster.devices_per_node,
                   policy=asdict(self.policy), faults=[getattr(f, "spec", str(f)) for f in self.fault_sources])
        return TrainingResult(
            iterations=iterations, buckets=pd.DataFrame(bucket_rows, columns=list(BUCKET_COLUMNS)), events=events,
            faults=faults, flows=recorder.frame(), lost=self.lost, job_time_s=job_time, completed=self.completed,
            sim_events=self.env.events_processed, config=cfg, attempts=self.attempts, bucket_list=self.buckets,
            layer_times=(self.fwd, self.bwd), compression_s=self.compress, optimizer_s=self.config.optimizer_s,
            aborted=self.aborted,
        )

    # --- breakdowns -----------------------------------------------------------------------------
    def _per_rank(self, att: _Attempt) -> dict[str, np.ndarray]:
        """Per live rank: compute, compression, exposed comm and stall seconds of one attempt."""
        live = np.ones(len(att.world), dtype=bool)
        if att.dead is not None and len(att.dead) < len(att.world):  # every rank dead: show them all
            live[att.dead] = False
        s = att.speed[live]
        g = att.scale
        horizon = att.t_end - att.t0
        opt = self.config.optimizer_s if att.status != "failed" else 0.0
        busy_full = s * (g * self.compute_total + float(self.compress_cum[-1]))
        if att.status != "failed":
            compression = s * float(self.compress_cum[-1])
            compute = busy_full - compression + opt
            win_start, win_end = att.t0 + busy_full, np.full(len(s), att.t_end - opt)
        else:
            busy = np.minimum(busy_full, horizon)
            before = np.concatenate([[0.0], self.compress_cum[:-1]])
            begin = s[:, None] * (g * self.bucket_compute + before)[None, :]
            compression = np.clip(horizon - begin, 0.0, s[:, None] * self.compress[None, :]).sum(axis=1)
            compute = busy - compression
            win_start, win_end = att.t0 + busy, np.full(len(s), att.t_end)
        starts, ends = list(att.starts), list(att.ends)
        if math.isfinite(att.hung_start):  # the hung collective moved bytes until the failure
            starts.append(att.hung_start)
            ends.append(max(att.hung_start, min(att.t_fail, att.t_end)))
        if starts:
            st, en = np.array(starts), np.array(ends)
            dur = en - st

            def covered(t: np.ndarray) -> np.ndarray:
                return np.clip(t[:, None] - st[None, :], 0.0, dur[None, :]).sum(axis=1)

            exposed = np.maximum(covered(win_end) - covered(win_start), 0.0)
        else:
            exposed = np.zeros(len(s))
        idle = np.maximum(win_end - win_start, 0.0)
        return {"compute": compute, "compression": compression, "exposed": exposed, "stall": idle - exposed}

    def _iteration_row(self, att: _Attempt) -> dict[str, Any]:
        parts = self._per_rank(att)
        batch = self.workload.batch_per_rank
        samples = batch * (self.ranks if att.scale != 1.0 else len(att.world))
        return {
            "attempt": att.index, "step": att.step, "epoch": att.epoch, "world_size": len(att.world),
            "status": att.status, "start_s": att.t0, "end_s": att.t_end, "time_s": att.t_end - att.t0,
            "compute_s": float(parts["compute"].mean()), "compression_s": float(parts["compression"].mean()),
            "exposed_comm_s": float(parts["exposed"].mean()), "stall_s": float(parts["stall"].mean()),
            "comm_s": float(sum(e - s for s, e in zip(att.starts, att.ends, strict=True))),
            "samples": samples if att.status != "failed" else 0.0,
        }

    def _bucket_rows(self, att: _Attempt) -> list[dict[str, Any]]:
        rows = []
        smin, smax = float(att.speed.min()), float(att.speed.max())
        ready = att.scale * self.bucket_compute + self.compress_cum
        layers = self.workload.model.layers
        for b, bucket in enumerate(self.buckets):
            started = b < len(att.starts)
            if not started and b != att.hung_bucket:
                break
            rows.append({
                "attempt": att.index, "step": att.step, "epoch": att.epoch, "bucket": b,
                "layers": f"{layers[bucket.layers[0]].name}..{layers[bucket.layers[-1]].name}",
                "numel": bucket.numel, "bytes": bucket.nbytes,
                "ready_first_s": att.t0 + smin * ready[b], "ready_last_s": att.t0 + smax * ready[b],
                "start_s": att.starts[b] if started else att.hung_start,
                "end_s": att.ends[b] if started else math.nan,
                "comm_s": att.ends[b] - att.starts[b] if started else math.nan,
                "wait_s": (att.starts[b] - max(att.t0 + smin * ready[b], att.ends[b - 1] if b else att.t0))
                if started else math.nan,
                "compression_s": float(self.compress[b]),
                "status": "ok" if started else "hung",
            })
        return rows


def simulate_training(cluster: Cluster | str, config: TrainingConfig | None = None, *, dynamics: Any = None,
                      faults: Sequence[FaultSource | str] = (), policy: FaultPolicy | None = None,
                      progress: Callable[[int, int], None] | None = None, **overrides: Any) -> TrainingResult:
    """Build a :class:`TrainingSimulator` and run it; ``overrides`` replace fields of ``config``.

    ``simulate_training("4x8-a100-ib", workload="resnet50", iterations=20, stragglers={3: 1.5})``
    """
    base = config or TrainingConfig()
    if overrides:
        known = set(TrainingConfig.__dataclass_fields__)
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise InputError("config", unknown, "fields of TrainingConfig: " + ", ".join(sorted(known)))
        base = TrainingConfig(**{**{k: getattr(base, k) for k in known}, **overrides})
    return TrainingSimulator(cluster, base, dynamics=dynamics, faults=faults, policy=policy).run(progress)


# --- the analytical twin --------------------------------------------------------------------------


def analytical_iteration(cluster: Cluster | str, config: TrainingConfig | None = None,
                         ranks: int | None = None) -> dict[str, float]:
    """One fault-free iteration priced with :class:`CostModel` instead of simulated collectives.

    Same buckets, same compute and the same overlap recurrence (bucket b starts at max(end of b-1,
    ready_b)), every rank at speed 1: what the simulator must reproduce on an uncontended network,
    and its cheap baseline in the benchmark. Returns compute, compression, comm (sum of bucket
    times), exposed comm and total seconds.
    """
    sim = TrainingSimulator(cluster, config or TrainingConfig())
    model = CostModel.from_cluster(sim.cluster, gamma=sim.config.gamma)
    p = ranks or sim.ranks
    return overlapped_iteration(sim, bucket_exchange_seconds(sim, model, p, sim.config.ratio))


def bucket_exchange_seconds(sim: TrainingSimulator, model: CostModel, ranks: int, ratio: float) -> np.ndarray:
    """Each bucket's exchange in ``sim``'s scheme on ``ranks`` ranks, priced by ``model`` (the cost model of the
    cluster, or of a variant of it: the what-if prices other NIC speeds through the same buckets)."""
    cfg = sim.config
    numel = np.array([b.numel for b in sim.buckets], dtype=float)
    if ranks == 1:
        return np.zeros(len(numel))
    if cfg.scheme == "dense":
        times = np.asarray(model.collective("allreduce", cfg.algorithm, numel * 4.0, ranks).total, dtype=float)
        return np.array(np.broadcast_to(times, numel.shape))
    algorithms = scheme_algorithms(cfg.algorithm)
    priced: dict[tuple[float, object], float] = {}  # equal buckets (a transformer's blocks) priced once
    times = []
    for b, n in enumerate(numel.tolist()):
        key = (n, sim.payloads[b].matrix_sides)
        if key not in priced:
            priced[key] = float(model.scheme(cfg.scheme, n, ranks, ratio, sim.payloads[b], algorithms).total)
        times.append(priced[key])
    return np.array(times)


def overlapped_iteration(sim: TrainingSimulator, exchange_s: np.ndarray) -> dict[str, float]:
    """The iteration of ``sim``'s buckets exchanged in ``exchange_s`` each: bucket b starts at max(end of b-1,
    ready_b), where ready_b is its gradient's backward plus the device work of compressing it and the
    buckets before it; the optimizer runs after the last exchange and all the compute."""
    cfg = sim.config
    ready = sim.bucket_compute + sim.compress_cum
    end = 0.0
    for r, t in zip(ready.tolist(), exchange_s.tolist(), strict=True):
        end = max(end, r) + t
    busy = sim.compute_total + float(sim.compress_cum[-1])
    total = max(end, busy) + cfg.optimizer_s
    return {"compute_s": sim.compute_total + cfg.optimizer_s, "compression_s": float(sim.compress_cum[-1]),
            "comm_s": float(exchange_s.sum()), "exposed_comm_s": total - busy - cfg.optimizer_s, "time_s": total}
