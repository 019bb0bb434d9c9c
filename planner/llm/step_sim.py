"""One training step of a 3-D parallel (and MoE) plan, simulated with contention on the whole fabric.

The transformer planner prices a plan in closed form (:mod:`planner.llm.pricing`): every collective alone on
its links. Here the same step runs on the discrete-event simulator (:class:`sim.network.Network`), on the
cluster's real topology, so tensor-parallel rings, pipeline sends, data-parallel allreduces and MoE all-to-
alls that cross the same NICs and spines slow each other down.

What runs (ranks as the planner lays them out: tensor innermost, then data, then pipeline):

* per stage, micro-batch and pass (forward, backward), the stage's compute (its layers' GEMMs and memory-bound
  kernels from the planner's pricer; backward twice the forward; selective / full recomputation; the logit
  head on the last stage), then its tensor-parallel communication: per layer the all-gather + reduce-scatter
  pairs of sequence parallelism (or two allreduces), 4(t-1)/t x b s h bytes per rank in 4(t-1) ring steps,
  run as one ring coflow per stage carrying every layer's bytes and latencies and every data-parallel
  replica's tensor group at once (the replicas are identical, so one coupled coflow is exact for them); inside
  a node on a cluster with a ``gpu_fabric``, the ring carries the bytes that take NCCL's time for those calls
  uncontended (the planner's price), so the two engines agree where nothing is shared;
* with ``experts``: per MoE layer the dispatch and combine all-to-all inside each expert-parallel group
  (``ep`` consecutive data-parallel replicas), every group's flows as one coflow (it ends with its slowest
  flow, as a synchronous all-to-all does);
* pipeline sends of each micro-batch's boundary activations (b s h / t per rank) between neighbouring
  stages, every replica's at once as one coflow, in 1F1B order (warm-up forwards, one-forward-one-backward,
  cool-down); with v virtual stages (interleaved 1F1B), each GPU holds v chunks of l/(p v) layers and runs
  Megatron-LM's interleaved order (``forward_backward_pipelining_with_interleaving``: (p - s - 1) x 2 +
  (v - 1) x p warm-up forwards, chunks taken p micro-batches at a time), a micro-batch leaving the last
  stage's chunk c entering the first stage's chunk c + 1;
* tensor groups wider than a node run one ring per NIC (NCCL's channels), rail-aligned and rotated, so
  each channel crosses between nodes on its own rail;
* each stage's data-parallel ring allreduce of its gradients, started with its last backward pass (DDP's
  overlap), then the optimizer step.

Stragglers (``stragglers={rank: factor}``): a stage computes at its slowest GPU's speed. Every data-parallel
replica of a stage moves in lockstep here (the symmetry below), which is exact when the slow GPUs sit in one
replica of each stage (a slow node holds one tensor group) and an upper bound when they sit in different
replicas of different stages.

Symmetry keeps the event count independent of the data-parallel degree: 16,384 GPUs cost a few thousand
coflows. What is not modelled: ZeRO's extra gathers, kernel-level overlap of tensor-parallel communication
with compute.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.documents import read_document
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gradient_exchange import GradientScheme
from flexcomm.planner.llm.gpt import Transformer
from flexcomm.planner.llm.pricing import LLMPlan, LLMPricer, dp_members_per_node
from flexcomm.planner.llm.timing import Hardware
from flexcomm.sim.network import CountingEnvironment, Network


@dataclass(frozen=True)
class Experts:
    """Mixture of experts: ``every``-th layer is an MoE layer, tokens go to ``top_k`` of the experts spread
    over ``ep`` data-parallel replicas (expert parallelism)."""

    ep: int
    top_k: int = 2
    every: int = 2


@dataclass(frozen=True)
class StepPlan:
    """What a step needs: the model, the batch and the plan (from ``best_plan.json`` or a YAML)."""

    model: Transformer
    batch_size: int
    plan: LLMPlan
    precision: str = "bf16"
    experts: Experts | None = None
    #: how attention runs (:data:`planner.llm.pricing.ATTENTION`): the plan's, fused unless it says otherwise
    attention: str = "fused"
    #: how the data-parallel groups exchange gradients (``plan --scheme``): dense unless the plan says otherwise
    exchange: GradientScheme = field(default_factory=GradientScheme)


@dataclass
class StepResult:
    step_s: float
    analytical_s: float  #: the planner's closed-form price of the dense plan (every collective alone, no MoE)
    busy_s: dict[str, float] = field(default_factory=dict)  #: per kind, summed over the stages' critical paths
    coflows: int = 0
    events: int = 0
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "analytical_s": self.analytical_s,
                "contention_slowdown": self.step_s / self.analytical_s if self.analytical_s else None,
                "busy_s": self.busy_s, "coflows": self.coflows, "events": self.events,
                "wall_s": self.wall_s}


def load_step_plan(path: str | Path) -> StepPlan:
    """A plan from ``flexcomm plan --model gpt``'s ``best_plan.json`` or a YAML/JSON with the same keys
    (``best: {tp, pp, dp, micro_batch_size, ...}``, ``options: {layers, hidden, heads, seq_len, vocab}``,
    ``batch_size``, ``precision``) plus an optional ``experts: {ep, top_k, every}``."""
    data = read_document(path, "llm-plan", "plan file")
    if not isinstance(data, dict) or "best" not in data or "options" not in data:
        raise InputError("llm-plan", str(path), "a best_plan.json of `flexcomm plan --model gpt` (keys best, options, "
                         "batch_size) or a YAML with the same keys")
    best, options = data["best"], data["options"]
    try:
        model = Transformer(**{k: int(options[k]) for k in ("layers", "hidden", "heads", "seq_len", "vocab")})
        plan = LLMPlan(tp=int(best["tp"]), pp=int(best["pp"]), dp=int(best["dp"]),
                       micro_batch_size=int(best.get("micro_batch_size", 1)),
                       virtual_stages=int(best.get("virtual_stages", 1)),
                       sequence_parallel=bool(best.get("sequence_parallel", False)),
                       recompute=str(best.get("recompute", "none")), zero=int(best.get("zero", 0)))
    except KeyError as exc:
        raise InputError(f"llm-plan.{exc.args[0]}", None, "a value (see best_plan.json)") from None
    experts = None
    if data.get("experts") is not None:
        e = data["experts"]
        experts = Experts(ep=int(e["ep"]), top_k=int(e.get("top_k", 2)), every=int(e.get("every", 2)))
    ratio = data.get("ratio")
    exchange = GradientScheme(str(data.get("scheme", "dense")), *(() if ratio is None else (float(ratio),)))
    return StepPlan(model, int(data["batch_size"]), plan, str(data.get("precision", "bf16")), experts,
                    str(data.get("attention", options.get("attention", "fused"))), exchange)


def _channel_ring(group: np.ndarray, dpn: int, channel: int) -> np.ndarray:
    """Channel ``channel``'s ring over a tensor group of whole nodes: each node's GPUs rotated by the channel,
    every other node walked backwards (a snake), so consecutive nodes meet on one local index (one rail)."""
    nodes = group.reshape(-1, dpn)
    rows = [np.roll(node, -channel) if k % 2 == 0 else np.roll(node, -channel)[::-1] for k, node in enumerate(nodes)]
    return np.concatenate(rows)


class _Stage:
    """Per-stage rank matrices and the flows of its communications (built once)."""

    def __init__(self, sim: StepSimulator, s: int) -> None:
        t, d = sim.plan.tp, sim.plan.dp
        base = s * d * t
        grid = base + np.arange(d * t).reshape(d, t)  # [dp replica, tp rank]
        self.ranks = grid
        # a tensor group spanning nodes runs one ring per NIC (NCCL's channels), each rail-aligned and rotated:
        # channel c enters and leaves every node on its own local GPUs, so its hops between nodes stay on one
        # rail and the channels together use every NIC; each carries 1/channels of the bytes
        dpn = sim.cluster.devices_per_node
        self.channels = (sim.cluster.nics_per_node or 1) if t > dpn else 1
        pairs = []
        for c in range(self.channels if t > 1 else 0):
            ring = np.array([_channel_ring(row, dpn, c) for row in grid]) if t > dpn else grid
            pairs.append(np.stack([ring.ravel(), np.roll(ring, -1, axis=1).ravel()], axis=1))
        self.tp = np.concatenate(pairs) if pairs else None
        self.dp = np.stack([grid.T.ravel(), np.roll(grid.T, -1, axis=1).ravel()], axis=1) if d > 1 else None
        if sim.dp_nccl_s is not None and d > dpn:  # whole nodes: one ring, its hops between nodes on one rail
            ring = _channel_ring(grid[:, 0], dpn, 0)
            self.dp = np.stack([ring, np.roll(ring, -1)], axis=1)
        # to the next stage; the last stage's next is the first stage's next chunk (interleaved stages only)
        if s + 1 < sim.plan.pp or sim.plan.virtual_stages > 1:
            nxt = (grid + d * t) % (sim.plan.pp * d * t)
            self.send_next = np.stack([grid.ravel(), nxt.ravel()], axis=1)
            self.send_back = self.send_next[:, ::-1].copy()
        else:
            self.send_next = self.send_back = None
        self.moe = None
        if sim.experts is not None and sim.experts.ep > 1:
            ep = sim.experts.ep
            pairs = []
            for group in range(d // ep):
                members = grid[group * ep:(group + 1) * ep]  # ep replicas x t
                for a in range(ep):
                    for b in range(ep):
                        if a != b:
                            pairs.append(np.stack([members[a], members[b]], axis=1))
            self.moe = np.concatenate(pairs)


class StepSimulator:
    """Runs :func:`simulate_step`; see the module docstring."""

    def __init__(self, cluster: Cluster, step: StepPlan, sharing: str = "max-min",
                 stragglers: dict[int, float] | None = None) -> None:
        plan, model = step.plan, step.model
        self.cluster, self.plan, self.model, self.experts = cluster, plan, model, step.experts
        world = plan.tp * plan.pp * plan.dp
        if world != cluster.world_size:
            raise InputError("llm-plan", f"t{plan.tp} x p{plan.pp} x d{plan.dp} = {world} GPUs",
                             f"the cluster's {cluster.world_size} GPUs ({cluster.name})")
        if step.experts is not None and (step.experts.ep < 1 or plan.dp % step.experts.ep):
            raise InputError("llm-plan.experts.ep", step.experts.ep, f"a divisor of the data-parallel degree {plan.dp}")
        for rank, factor in (stragglers or {}).items():
            if not 0 <= rank < world or not factor > 0:
                raise InputError("straggler", f"{rank}={factor}", f"a rank 0..{world - 1} of the plan and a positive "
                                 "factor")
        stage_size = plan.dp * plan.tp
        #: each stage computes at its slowest GPU's speed (see the module doc)
        self.slowdown = [max([1.0, *[f for r, f in (stragglers or {}).items() if r // stage_size == st]])
                         for st in range(plan.pp)]
        self.pricer = LLMPricer(model, Hardware.of(cluster), world, step.batch_size, cluster.device.memory_bytes,
                                precision=step.precision, attention=step.attention, exchange=step.exchange)
        self.pricer.check(plan)
        self.cost = self.pricer.price(plan)
        t, b = plan.tp, plan.micro_batch_size
        sp = plan.sequence_parallel and t > 1
        forward, backward, extra = self.pricer.layer_passes_s(b, t, sp, plan.recompute)
        tp_pass = self.pricer._tp_pass_s(b, t, sp)  # the rings below carry it
        self.chunks = plan.virtual_stages
        self.layers = model.layers // (plan.pp * self.chunks)  # one chunk's layers (all of a stage's when v = 1)
        self.fwd_s = self.layers * (forward - tp_pass)
        self.bwd_s = self.layers * (backward - tp_pass + extra)
        self.head_s = self.pricer.head_s(b, t)
        e = self.pricer.element_bytes
        tokens = model.seq_len * b
        self.tp_bytes = self.layers * 4 * (t - 1) / t * tokens * model.hidden * e  # per flow, per pass
        self.tp_rounds = self.layers * 4 * (t - 1)
        # inside a node on a GPU fabric the planner prices these calls as NCCL runs them: the ring then carries
        # the bytes that take that time uncontended (as sim/nccl_flows does for the training simulator)
        self.tp_nccl_s = None
        if t > 1 and self.pricer.hw.nccl_cluster is not None and t <= cluster.devices_per_node:
            self.tp_nccl_s = self.layers * self.pricer._tp_pass_s(b, t, sp)
        self.send_bytes = tokens * model.hidden * e / t
        params_stage = model.layers // plan.pp * model.layer_parameters + model.embedding_parameters
        self.grad_bytes = params_stage / t * (4.0 if step.precision == "fp32" else 2.0)
        # a data-parallel group inside a node or of whole nodes is priced by the planner as NCCL runs it (every
        # NIC): its ring carries the bytes that take that time uncontended through one link of the path (as the
        # tensor rings here and sim/nccl_flows in the training simulator do), so contention still slows it; a
        # group spread thinly over nodes keeps one plain ring per tensor rank
        per_node = dp_members_per_node(cluster.devices_per_node, t, plan.dp)
        self.dp_nccl_s = self.pricer.hw.nccl_s("allreduce", self.grad_bytes, plan.dp, per_node) \
            if plan.dp > 1 and t == 1 else None
        #: a compressed exchange (``plan --scheme``): its calls as the planner prices them, carried by the ring the
        #: same way, and its device work on the stage after them, as the closed form adds it
        self.dp_device_s = 0.0
        if plan.dp > 1 and not step.exchange.dense:
            stage_layers = model.layers // plan.pp
            self.dp_nccl_s, self.dp_device_s, _ = self.pricer._dp_exchange(
                params_stage / t, t, stage_layers, plan.dp, per_node, self.grad_bytes)
        self.dp_link_Bps = (cluster.inter_link if plan.dp > cluster.devices_per_node
                            else cluster.intra_link).bandwidth_Bps
        self.optimizer_s = self.cost.optimizer_s
        if step.experts is not None and step.experts.ep > 1:
            ep = step.experts.ep
            moe_layers = self.layers // step.experts.every
            # each rank's tokens x top_k go out, (ep - 1)/ep of them to the other replicas, evenly; twice a pass
            self.moe_bytes = 2 * moe_layers * tokens * model.hidden * e / t * step.experts.top_k / ep
            self.moe_rounds = 2 * moe_layers
        else:
            self.moe_bytes, self.moe_rounds = 0.0, 0
        self.env = CountingEnvironment()
        self.net = Network(self.env, cluster, sharing=sharing)
        self.stages = [_Stage(self, s) for s in range(plan.pp)]
        self.busy: dict[str, float] = {"compute": 0.0, "tp": 0.0, "moe": 0.0, "pp_send": 0.0, "dp": 0.0}
        self.coflows = 0

    # --- communications ---------------------------------------------------------------------------
    def _pattern(self, pairs: np.ndarray, key: Any) -> Any:
        return self.net.cached(key) or self.net.pattern(pairs, key=key)

    def _ring(self, pairs: np.ndarray, key: Any, nbytes: float, rounds: int) -> Any:
        pattern = self._pattern(pairs, key)
        self.coflows += 1
        return self.net.transfer(pattern, nbytes, latency_s=rounds * pattern.latency())

    def _pass(self, s: int, kind: str, last_chunk: bool = True) -> Generator[Any, Any, None]:
        """One forward or backward pass of one micro-batch through one chunk of stage s: compute (at the stage's
        slowest GPU's speed), TP rings, MoE all-to-alls; the logit head on the last stage's last chunk."""
        stage, env = self.stages[s], self.env
        compute = self.fwd_s if kind == "fwd" else self.bwd_s
        if s == self.plan.pp - 1 and last_chunk:
            compute += self.head_s / 3 if kind == "fwd" else 2 * self.head_s / 3
        compute *= self.slowdown[s]
        start = env.now
        yield env.timeout(compute)
        self.busy["compute"] += compute if s == 0 else 0.0
        if stage.tp is not None:
            t0 = env.now
            nbytes = self.tp_bytes / stage.channels
            if self.tp_nccl_s is not None:
                latency = self.tp_rounds * self._pattern(stage.tp, ("tp", s)).latency()
                nbytes = max(0.0, self.tp_nccl_s - latency) * self.cluster.intra_link.bandwidth_Bps
            yield self._ring(stage.tp, ("tp", s), nbytes, self.tp_rounds)
            self.busy["tp"] += (env.now - t0) if s == 0 else 0.0
        if stage.moe is not None:
            t0 = env.now
            # every expert group's all-to-all at once, one coupled coflow: it ends with its slowest flow, as the
            # synchronous all-to-all does (independent flows, Network.send, cost one event per finishing flow)
            yield self._ring(stage.moe, ("moe", s), self.moe_bytes, self.moe_rounds)
            self.busy["moe"] += (env.now - t0) if s == 0 else 0.0
        del start

    def _send(self, s: int, forward: bool, arrived: simpy.Event) -> Generator[Any, Any, None]:
        """Stage s's boundary activations to the next stage (forward) or its gradients to the previous one."""
        p = self.plan.pp
        stage = self.stages[s if forward else (s - 1) % p]
        pairs = stage.send_next if forward else stage.send_back
        t0 = self.env.now
        # every replica's tensor ranks send the same shard at the same moment: one coupled coflow
        yield self._ring(pairs, ("send", s, forward), self.send_bytes, 1)
        self.busy["pp_send"] += self.env.now - t0 if s == 0 else 0.0
        arrived.succeed()

    def _order(self, s: int, m: int) -> list[tuple[str, int, int]]:
        """(pass, micro-batch, chunk) in the order stage s runs them: 1F1B, or Megatron-LM's interleaved 1F1B
        with v chunks (p micro-batches per chunk in turn; the backward takes the chunks in reverse)."""
        p, v = self.plan.pp, self.chunks
        total = m * v
        warmup = min(total, (p - s - 1) if v == 1 else (p - s - 1) * 2 + (v - 1) * p)

        def op(k: int, forward: bool) -> tuple[int, int]:
            group, within = divmod(k, p * v)
            chunk = within // p
            return group * p + within % p, chunk if forward else v - 1 - chunk

        order = [("fwd", *op(k, True)) for k in range(warmup)]
        f, bw = warmup, 0
        while bw < total:
            if f < total:
                order.append(("fwd", *op(f, True)))
                f += 1
            order.append(("bwd", *op(bw, False)))
            bw += 1
        return order

    def _stage(self, s: int, fwd_in: dict, bwd_in: dict, done: list[float]) -> Generator[Any, Any, None]:
        """Stage s's passes in :meth:`_order`; ``fwd_in[(k, i)]`` / ``bwd_in[(k, i)]``: micro-batch i's input to
        virtual stage k = chunk x p + s arrived (activations from k - 1, gradients from k + 1)."""
        p, m, env = self.plan.pp, self.pricer.micro_batches(self.plan), self.env
        last = p * self.chunks - 1
        dp_proc = None
        order = self._order(s, m)
        final_backward = len(order) - 1  # every schedule ends on a backward
        for position, (kind, i, chunk) in enumerate(order):
            k = chunk * p + s
            if kind == "fwd":
                if k > 0:
                    yield fwd_in[(k, i)]
                yield from self._pass(s, "fwd", k == last)
                if k < last:
                    env.process(self._send(s, True, fwd_in[(k + 1, i)]))
            else:
                if k < last:
                    yield bwd_in[(k, i)]
                if position == final_backward and self.stages[s].dp is not None:  # gradients start flowing
                    dp_proc = env.process(self._dp(s))
                yield from self._pass(s, "bwd", k == last)
                if k > 0:
                    env.process(self._send(s, False, bwd_in[(k - 1, i)]))
        if dp_proc is not None:
            yield dp_proc
            if self.dp_device_s:  # a compressor's work after its calls (none for dense: no event)
                yield env.timeout(self.dp_device_s)
        yield env.timeout(self.optimizer_s)
        done[s] = env.now

    def _dp(self, s: int) -> Generator[Any, Any, None]:
        t0 = self.env.now
        d = self.plan.dp
        stage = self.stages[s]
        rounds = 2 * (d - 1)
        nbytes = 2 * (d - 1) / d * self.grad_bytes
        if self.dp_nccl_s is not None:
            latency = rounds * self._pattern(stage.dp, ("dp", s)).latency()
            nbytes = max(0.0, self.dp_nccl_s - latency) * self.dp_link_Bps
        yield self._ring(stage.dp, ("dp", s), nbytes, rounds)
        self.busy["dp"] += self.env.now - t0 if s == 0 else 0.0

    def run(self) -> StepResult:
        started = time.perf_counter()
        p, m, env = self.plan.pp, self.pricer.micro_batches(self.plan), self.env
        virtual = p * self.chunks
        fwd_in = {(k, i): env.event() for k in range(1, virtual) for i in range(m)}
        bwd_in = {(k, i): env.event() for k in range(virtual - 1) for i in range(m)}
        done = [0.0] * p
        for s in range(p):
            env.process(self._stage(s, fwd_in, bwd_in, done))
        env.run()
        events = env.events_processed
        return StepResult(max(done), self.cost.step_s, dict(self.busy), self.coflows, events,
                          time.perf_counter() - started)


def simulate_step(cluster: Cluster, step: StepPlan, sharing: str = "max-min",
                  stragglers: dict[int, float] | None = None) -> StepResult:
    """Simulate one training step of ``step`` on ``cluster`` (every GPU of it); see the module docstring."""
    return StepSimulator(cluster, step, sharing, stragglers).run()


def write_step(result: StepResult, path: str | Path) -> Path:
    return write_text_atomic(path, json.dumps(result.as_dict(), indent=2, default=float) + "\n")
