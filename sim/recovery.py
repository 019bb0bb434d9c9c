"""Long-horizon goodput of a training job under node failures, for each recovery policy.

Why a plan-level engine: a week of a 1,024-GPU job is ~10^5 iterations and hundreds of failures; the
discrete-event simulator (:mod:`sim.training`) would replay every flow of every iteration. Here a plan's
step time is priced once (the transformer planner, :mod:`planner.llm`) and reused until the plan
changes, so only failures, repairs, checkpoints and restarts are events: simulated days take milliseconds.

Failures: every node fails after exponentially distributed up-times of mean ``mtbf_s`` and comes back
``repair_s`` later (then draws a new up-time); optionally whole racks of ``rack_nodes`` fail together with
mean ``rack_mtbf_s``. Every draw comes from one seeded generator per node (and per rack), so a seed gives
the same failures whatever the policy.

What a failure of a node the job uses costs (all charged, and reported per cause):
``detection_s`` (the hung collective's timeout), the work since the last checkpoint (lost), ``restart_s``
(relaunch and rendezvous) and the checkpoint load (training state at ``storage_Bps``); the policies differ
in what runs next:

* ``restart``: wait for the node's repair, then resume on the same plan.
* ``shrink``: resume at once on the surviving nodes with the same tensor x pipeline split and fewer data-
  parallel replicas (each replica keeps its micro-batches, so the global batch shrinks); grow back to the
  original plan at the first checkpoint after enough nodes are repaired (a restart, charged).
* ``replan``: call the planner on the surviving GPUs (its own measured search time is charged), reshard the
  training state when the tensor/pipeline split changes (state bytes over the nodes' NICs), resume on the
  new plan and stay on it.
* ``replan+grow``: as ``replan``, and plan again (at the next checkpoint) whenever repaired nodes would give
  a faster plan.

Checkpoints are written every ``checkpoint_every_s`` of training (the job pauses to write them).
Goodput = samples of work that survived (never lost to a failure) per second of wall time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_RECOVERY_CHECKPOINTS, MAX_RECOVERY_FAILURES
from flexcomm.costmodel.training_state import checkpoint_bytes_per_param
from flexcomm.costmodel.units import format_duration, parse_time

POLICIES = ("restart", "shrink", "replan", "replan+grow")
#: One node's mean time between failures in a large fleet: Llama 3's pre-training (Dubey et al., "The Llama 3
#: Herd of Models", 2024, section 3.3.4) saw 419 unexpected interruptions in a 54-day snapshot on 16,384 H100s,
#: i.e. 2,048 eight-GPU nodes: one interruption about every 3.1 h, 54 d x 2,048 / 419 = 264 d per node.
FLEET_NODE_MTBF_S = 54 * 86400.0 * (16384 // 8) / 419
FLEET_NODE_MTBF_SOURCE = "Llama 3's fleet: 419 interruptions in 54 days on 2,048 nodes"
#: Training state per parameter in a checkpoint: 16-bit weights + fp32 master weights and Adam's two moments.
CHECKPOINT_BYTES_PER_PARAM = checkpoint_bytes_per_param("bf16")
#: Lost-time causes, in report order.
CAUSES = ("detection", "lost_work", "restart", "checkpoint_load", "checkpoint_save", "repair_wait", "planning",
          "reshard", "reduced_throughput")


@dataclass(frozen=True)
class Plan:
    """A running configuration: its label, split, GPUs, step time and samples per step."""

    label: str
    tp: int
    pp: int
    dp: int
    step_s: float
    samples_per_step: float

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_step / self.step_s


class Planner:
    """What the policies ask of a planner: the best plan on ``gpus`` GPUs, or the same split on fewer.

    ``best(gpus)`` returns (plan or None, seconds the search took); ``shrunk(plan, gpus)`` the same
    tensor x pipeline split with as many data-parallel replicas as fit (None if none does).
    """

    def best(self, gpus: int) -> tuple[Plan | None, float]:
        raise NotImplementedError

    def shrunk(self, plan: Plan, gpus: int) -> Plan | None:
        raise NotImplementedError

    def can_shrink(self, plan: Plan) -> bool:
        """Whether :meth:`shrunk` knows this plan (False: shrinking it means planning afresh)."""
        return True

    def best_on(self, nodes: list[int], devices_per_node: int) -> tuple[Plan | None, float]:
        """The best plan on these nodes; a pool of one device type only needs their GPU count (override for
        mixed pools, where which nodes survive decides the device types)."""
        return self.best(len(nodes) * devices_per_node)


@dataclass(frozen=True)
class RecoveryConfig:
    """The failure model and the costs of recovering (seconds, bytes/s).

    ``detection_s`` defaults to PyTorch's NCCL collective timeout (``kProcessGroupNCCLDefaultTimeout`` = 10 min,
    ``ProcessGroupNCCL.hpp``); repair (4 h), relaunch (2 min) and storage (10 GB/s) are stated assumptions a
    user should replace with their cluster's numbers, not measurements.
    """

    policy: str
    horizon_s: float
    mtbf_s: float
    repair_s: float = 4 * 3600.0
    checkpoint_every_s: float = 3600.0
    detection_s: float = 600.0
    restart_s: float = 120.0
    storage_Bps: float = 10e9
    rack_mtbf_s: float | None = None
    rack_nodes: int = 8
    seed: int = 0
    #: Seconds charged per re-plan; None charges the planner's measured search time (the honest default, but a
    #: measured time differs in its last digits between runs: a fixed charge makes a study bit-reproducible).
    planning_s: float | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise InputError("recovery", self.policy, "one of " + ", ".join(POLICIES) + " (or all)")
        for name, form in (("horizon_s", "a positive duration such as 7d"), ("mtbf_s", "a positive MTBF such as 2d"),
                           ("storage_Bps", "a positive storage bandwidth such as 10GB/s")):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InputError(name.removesuffix("_s").removesuffix("_Bps").replace("_", "-")
                                 .replace("storage", "storage-bandwidth"), value, form)
        for name in ("repair_s", "detection_s", "restart_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(name.removesuffix("_s").replace("_", "-"), value, "a duration >= 0")
        if not (math.isfinite(self.checkpoint_every_s) and self.checkpoint_every_s > 0):
            raise InputError("checkpoint-interval", self.checkpoint_every_s,
                             "a positive interval such as 1h (every policy restarts from a checkpoint)")
        if self.rack_mtbf_s is not None and not (math.isfinite(self.rack_mtbf_s) and self.rack_mtbf_s > 0):
            raise InputError("rack-mtbf", self.rack_mtbf_s, "a positive MTBF such as 30d")
        if self.rack_nodes < 1:
            raise InputError("rack-nodes", self.rack_nodes, "an integer >= 1")
        if self.planning_s is not None and not (math.isfinite(self.planning_s) and self.planning_s >= 0):
            raise InputError("planning-time", self.planning_s, "measured or a duration >= 0 such as 30s")


@dataclass
class RecoveryResult:
    """One policy's run: goodput, time lost per cause, and the timeline of plans and events."""

    policy: str
    horizon_s: float
    samples: float
    ideal_samples_per_s: float
    lost_s: dict[str, float]
    timeline: list[dict]  # time_s, samples_per_s (until the next row), plan, event
    events: list[dict]  # time_s, kind (failure, repair, replan, grow, shrink, checkpoint...), detail
    failures: int = 0
    planner_s: float = 0.0
    wall_s: float = 0.0

    @property
    def goodput(self) -> float:
        return self.samples / self.horizon_s

    @property
    def efficiency(self) -> float:
        return self.goodput / self.ideal_samples_per_s

    def summary(self) -> dict[str, float | int | str]:
        return {"policy": self.policy, "goodput_samples_per_s": self.goodput, "ideal_samples_per_s":
                self.ideal_samples_per_s, "efficiency": self.efficiency, "failures": self.failures,
                **{f"lost_{k}_s": v for k, v in self.lost_s.items()}, "planner_search_s": self.planner_s,
                "simulated_s": self.horizon_s, "wall_s": self.wall_s}


def checkpoint_write_s(parameters: float, storage_Bps: float) -> float:
    """Seconds to write (or read) the training state of ``parameters`` at ``storage_Bps``."""
    return parameters * CHECKPOINT_BYTES_PER_PARAM / storage_Bps


def young_daly_s(save_s: float, job_mtbf_s: float) -> float:
    """Young's first-order optimal checkpoint interval sqrt(2 delta M) (Young 1974; Daly 2006 refines it)."""
    return math.sqrt(2.0 * save_s * job_mtbf_s)


def checkpoint_interval_s(text: str, parameters: float, storage_Bps: float, node_mtbf_s: float, nodes: int,
                          field: str = "checkpoint-interval") -> float:
    """A checkpoint interval as written (``30min``) or ``young-daly``: Young's interval for this job's state
    size and storage, with the job's MTBF = the node MTBF / its nodes (any node's failure stops the job)."""
    if text.strip().lower() == "young-daly":
        return young_daly_s(checkpoint_write_s(parameters, storage_Bps), node_mtbf_s / nodes)
    return parse_time(text, field)


def planning_charge_s(text: str, field: str = "planning-time") -> float | None:
    """``measured`` (None: charge the planner's own search time) or a fixed duration per re-plan."""
    if text.strip().lower() == "measured":
        return None
    try:
        return parse_time(text, field)
    except InputError:
        raise InputError(field, text, "measured or a duration >= 0 such as 2s") from None


def check_run_size(nodes: int, config: RecoveryConfig, field: str = "horizon") -> None:
    """Refuse, before anything is planned, a horizon with more failures or checkpoints than the limits allow.

    Why: the run takes a step per checkpoint and re-plans per failure, and a failure is drawn per node about
    every MTBF + repair; ``--horizon 1e9d`` asked for 2.4e10 checkpoints and ran on, silently."""
    cycle = config.mtbf_s + config.repair_s
    failures = nodes * config.horizon_s / cycle
    if config.rack_mtbf_s is not None:
        failures += math.ceil(nodes / config.rack_nodes) * config.horizon_s / (config.rack_mtbf_s + config.repair_s)
    checkpoints = config.horizon_s / config.checkpoint_every_s
    got = format_duration(config.horizon_s)
    MAX_RECOVERY_FAILURES.check(field, failures, got)
    MAX_RECOVERY_CHECKPOINTS.check(field, checkpoints, got)


def failure_times(nodes: int, config: RecoveryConfig) -> list[tuple[float, tuple[int, ...]]]:
    """Every failure within the horizon: (time, nodes that fail), from seeded per-node (and per-rack) draws."""
    events: list[tuple[float, tuple[int, ...]]] = []
    for node in range(nodes):
        rng = np.random.default_rng([config.seed, 0, node])
        t = 0.0
        while True:
            t += float(rng.exponential(config.mtbf_s))
            if t >= config.horizon_s:
                break
            events.append((t, (node,)))
            t += config.repair_s
    if config.rack_mtbf_s is not None:
        for rack in range(math.ceil(nodes / config.rack_nodes)):
            rng = np.random.default_rng([config.seed, 1, rack])
            members = tuple(range(rack * config.rack_nodes, min(nodes, (rack + 1) * config.rack_nodes)))
            t = 0.0
            while True:
                t += float(rng.exponential(config.rack_mtbf_s))
                if t >= config.horizon_s:
                    break
                events.append((t, members))
                t += config.repair_s
    return sorted(events)


class _Run:
    """The state of one policy's run; its methods advance the clock and charge every second to a cause."""

    def __init__(self, planner: Planner, nodes: int, devices_per_node: int, parameters: float,
                 config: RecoveryConfig, nic_Bps_per_node: float) -> None:
        self.planner, self.nodes, self.dpn, self.config = planner, nodes, devices_per_node, config
        self.nic_Bps_per_node = nic_Bps_per_node
        self.state_bytes = parameters * CHECKPOINT_BYTES_PER_PARAM
        self.load_s = self.save_s = checkpoint_write_s(parameters, config.storage_Bps)
        self.planner_s = 0.0
        self.lost = dict.fromkeys(CAUSES, 0.0)
        self.now = 0.0
        self.samples = 0.0  # safe (checkpointed) samples
        self.since_checkpoint_s = 0.0
        self.unsaved_samples = 0.0
        self.up_at = [0.0] * nodes
        self.timeline: list[dict] = []
        self.events: list[dict] = []
        full, _ = planner.best_on(list(range(nodes)), devices_per_node)
        if full is None:
            raise InputError("nodes", nodes, "a job some plan fits on")
        self.full: Plan = full
        self.plan: Plan | None = full
        self.in_use: set[int] = set(range(nodes))

    # --- bookkeeping -------------------------------------------------------------------------------

    def spend(self, cause: str, seconds: float) -> None:
        """Advance the clock by ``seconds`` spent on ``cause`` (only what falls within the horizon counts)."""
        inside = max(0.0, min(self.now + seconds, self.config.horizon_s) - self.now)
        self.lost[cause] += inside
        self.now += seconds

    def record(self, event: str, detail: str = "") -> None:
        rate = self.plan.samples_per_s if self.plan is not None else 0.0
        self.timeline.append({"time_s": min(self.now, self.config.horizon_s), "samples_per_s": rate,
                              "plan": self.plan.label if self.plan else "", "event": event})
        if event != "start":
            self.events.append({"time_s": self.now, "kind": event, "detail": detail})

    def up_nodes(self) -> list[int]:
        return [n for n in range(self.nodes) if self.up_at[n] <= self.now]

    def plan_on(self, nodes: list[int]) -> Plan | None:
        """The planner's best plan on ``nodes``; its search time is spent (the job runs the search every time)."""
        plan, searched = self.planner.best_on(nodes, self.dpn)
        self.planner_s += searched
        self.spend("planning", searched if self.config.planning_s is None else self.config.planning_s)
        return plan

    # --- training ----------------------------------------------------------------------------------

    def train_until(self, t_end: float) -> None:
        """Train from now to ``t_end`` on the current plan, writing checkpoints on schedule."""
        every = self.config.checkpoint_every_s
        if self.plan is None:  # no plan can run on what is left, and nothing is being repaired
            self.spend("repair_wait", max(0.0, t_end - self.now))
            return
        while self.now < t_end - 1e-9:
            plan = self.plan
            span = min(every - self.since_checkpoint_s, t_end - self.now)
            self.since_checkpoint_s += span
            self.unsaved_samples += span * plan.samples_per_s
            inside = max(0.0, min(self.now + span, self.config.horizon_s) - self.now)
            self.lost["reduced_throughput"] += inside * (1 - plan.samples_per_s / self.full.samples_per_s)
            self.now += span
            if self.since_checkpoint_s >= every - 1e-9:
                self.spend("checkpoint_save", self.save_s)
                self.samples += self.unsaved_samples
                self.since_checkpoint_s = self.unsaved_samples = 0.0
                self.maybe_grow()

    def switch(self, plan: Plan, kind: str) -> None:
        """Relaunch on ``plan`` with the nodes up now: restart, load, and reshard if the split changed."""
        changed = self.plan is None or (plan.tp, plan.pp) != (self.plan.tp, self.plan.pp)
        available = self.up_nodes()
        self.spend("restart", self.config.restart_s)
        self.spend("checkpoint_load", self.load_s)
        if changed and kind != "restart":
            self.spend("reshard", self.state_bytes / (self.nic_Bps_per_node * max(1, len(available))))
        self.plan = plan
        self.in_use = set(available[: math.ceil(plan.gpus / self.dpn)])
        self.record(kind, plan.label)

    def maybe_grow(self) -> None:
        """At a checkpoint: shrink returns to the full plan once every node is back; replan+grow plans again."""
        policy = self.config.policy
        if policy not in ("shrink", "replan+grow") or self.plan is None:
            return
        available = self.up_nodes()
        if len(available) <= len(self.in_use):
            return
        if policy == "shrink":
            if len(available) == self.nodes:
                self.switch(self.full, "grow")
            return
        candidate = self.plan_on(available)
        if candidate is not None and candidate.samples_per_s > self.plan.samples_per_s * (1 + 1e-9):
            self.switch(candidate, "grow")

    def wait_for_repair(self) -> None:
        later = [t for t in self.up_at if t > self.now]
        self.spend("repair_wait", (min(later) - self.now) if later else 0.0)

    def fail(self, t: float, members: tuple[int, ...]) -> None:
        """A failure at ``t`` of ``members``: if the job uses one of them, detect, lose, and recover by policy."""
        for node in members:
            self.up_at[node] = max(self.up_at[node], t + self.config.repair_s)
        if self.plan is None or not self.in_use.intersection(members):
            self.events.append({"time_s": t, "kind": "failure (idle node)", "detail": ",".join(map(str, members))})
            return
        self.now = max(self.now, t)
        # the work since the last checkpoint is gone (in seconds at the full plan's rate: the rest of that time
        # is already counted as reduced throughput)
        self.lost["lost_work"] += self.unsaved_samples / self.full.samples_per_s
        self.since_checkpoint_s = self.unsaved_samples = 0.0
        policy, old = self.config.policy, self.plan
        assert old is not None
        self.plan = None  # nothing trains until the relaunch
        self.record("failure", ",".join(f"node{n}" for n in members))
        self.spend("detection", self.config.detection_s)
        while True:
            gpus = len(self.up_nodes()) * self.dpn
            if policy == "restart":
                target = old if len(self.up_nodes()) >= self.nodes else None
            elif policy == "shrink":
                # a plan the planner cannot shrink (a mixed pool's uneven stages) is planned afresh instead
                target = self.planner.shrunk(old, gpus)
                if target is None and not self.planner.can_shrink(old):
                    target = self.plan_on(self.up_nodes())
            else:
                target = self.plan_on(self.up_nodes())
            if target is not None:
                break
            if not any(t > self.now for t in self.up_at):  # nothing left to wait for: the job cannot run
                self.spend("repair_wait", max(0.0, self.config.horizon_s - self.now))
                self.plan = None
                return
            self.wait_for_repair()
        self.plan = old  # what switch compares the new split with
        kind = {"restart": "restart", "shrink": "shrink"}.get(policy, "replan")
        self.switch(target, kind)


def simulate_recovery(planner: Planner, nodes: int, devices_per_node: int, parameters: float,
                      config: RecoveryConfig, nic_Bps_per_node: float,
                      failures: list[tuple[float, tuple[int, ...]]] | None = None) -> RecoveryResult:
    """Run one policy over the horizon; the full plan is ``planner.best(nodes x devices_per_node)``.

    ``failures`` (time, nodes) replaces the drawn ones (the config's MTBF then only documents the run)."""
    check_run_size(nodes, config)
    started = time.perf_counter()
    run = _Run(planner, nodes, devices_per_node, parameters, config, nic_Bps_per_node)
    run.record("start")
    failures = failure_times(nodes, config) if failures is None else sorted(failures)
    for t, members in failures:
        if t >= config.horizon_s:
            break
        if t > run.now:
            run.train_until(t)
        run.fail(t, members)
        if run.now >= config.horizon_s:
            break
    if run.now < config.horizon_s:
        run.train_until(config.horizon_s)
    run.samples += run.unsaved_samples  # the job has not failed since its last checkpoint: that work counts
    run.record("end")
    return RecoveryResult(config.policy, config.horizon_s, run.samples, run.full.samples_per_s, run.lost,
                          run.timeline, run.events, failures=sum(1 for e in run.events if e["kind"] == "failure"),
                          planner_s=run.planner_s, wall_s=time.perf_counter() - started)
