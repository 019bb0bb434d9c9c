"""Replay a priced plan on the discrete-event simulator: per-rank clocks, real flows, contention.

The analytic price (:mod:`planner.plans`) charges each stage its own sends and prices each
collective alone. Here every (replica, stage) is a simpy process running the 1F1B schedule with
its own clock; activations and gradients travel as flows on :class:`sim.network.Network` (so
the pipeline's sends and the tensor-parallel allreduces share device ports and NICs), a stage
waits for its inputs (waiting is the bubble), and each stage's data-parallel allreduce runs in DDP's
buckets, each once every replica's last backward has filled it (:mod:`planner.overlap`; a compressed
scheme after the stage has drained in every replica), overlapping the backward and the other stages'
cool-down and contending with them for the NICs. The simulated step time re-ranks the best few plans.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from flexcomm.costmodel.compressed import SchemeAlgorithms
from flexcomm.planner.overlap import gradient_buckets
from flexcomm.planner.plans import GRADIENT_BYTES, PlanCost, Pricer
from flexcomm.sim.collectives import run_collective, run_scheme
from flexcomm.sim.network import CountingEnvironment, Network


@dataclass(frozen=True)
class SimulatedPlan:
    """Simulated step of one plan, and how much of it the devices sat waiting."""

    step_s: float
    busy_fraction: float  # mean over (replica, stage) of compute time / step
    events: int


def one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """The 1F1B order of stage ``stage``: warm-up forwards, alternating F/B, cool-down backwards."""
    warm = min(stages - stage - 1, micro_batches)
    order = [("F", i) for i in range(warm)]
    for i in range(micro_batches - warm):
        order += [("F", warm + i), ("B", i)]
    order += [("B", i) for i in range(micro_batches - warm, micro_batches)]
    return order


def simulate_plan(pricer: Pricer, cost: PlanCost) -> SimulatedPlan:
    """Simulated seconds of one training step of ``cost``'s plan on ``pricer``'s cluster."""
    cfg, det = cost.config, cost.detail
    dp, pp, tp, m = cfg.dp, cfg.pp, cfg.tp, cfg.micro_batches
    ranks: np.ndarray = det["ranks"]
    env = CountingEnvironment()
    net = Network(env, pricer.cluster.cluster)
    fwd_ready = [[[env.event() for _ in range(m)] for _ in range(pp)] for _ in range(dp)]
    bwd_ready = [[[env.event() for _ in range(m)] for _ in range(pp)] for _ in range(dp)]
    drained = [0] * pp
    stage_done = [env.event() for _ in range(pp)]
    busy = np.zeros((dp, pp))
    # a dense exchange runs in DDP's buckets, each once every replica's last backward has filled it
    overlap = dp > 1 and pricer.exchange.dense
    buckets = [gradient_buckets(det["bucket_grads"][p], det["bucket_work"][p]) for p in range(pp)] if overlap else []
    filled = [[0] * len(buckets[p][0]) for p in range(pp)] if overlap else []
    bucket_full = [[env.event() for _ in buckets[p][0]] for p in range(pp)] if overlap else []

    def fill(p: int, k: int) -> None:
        filled[p][k] += 1
        if filled[p][k] == dp:
            bucket_full[p][k].succeed()

    def bucketed_exchange(p: int) -> Generator[Any, Any, None]:
        for k, nbytes in enumerate(buckets[p][1]):
            # each bucket by the algorithm the pricer chose for its size (a small bucket over many ranks is
            # latency-bound: a tree or NCCL's choice, not the whole gradient's ring)
            alg = pricer.bucket_algorithm(ranks[:, p, 0], float(nbytes), float(det["dp_shares"][p])) or "ring"
            yield bucket_full[p][k]
            yield env.all_of([run_collective(env, net, "allreduce", alg, [int(r) for r in ranks[:, p, t]],
                                             float(nbytes), tag=f"dp.{p}.{t}") for t in range(tp)])

    exchanges = [env.process(bucketed_exchange(p)) for p in range(pp)] if overlap else []

    def backward(p: int, seconds: float, last: bool) -> Generator[Any, Any, None]:
        """The backward of one micro-batch; the last one fills the stage's buckets as it goes."""
        if not (last and overlap and len(buckets[p][0])):
            yield env.timeout(seconds)
            return
        ready, whole = buckets[p][0], max(float(buckets[p][0][-1]), 1e-30)
        elapsed = 0.0
        for k, at in enumerate(ready):
            at = max(elapsed, seconds * float(at) / whole)  # ready times never run backwards, rounding or not
            yield env.timeout(at - elapsed)
            elapsed = at
            fill(p, k)

    def send(d: int, src: int, dst: int, nbytes: float, ready: simpy.Event, tag: str) -> Generator[Any, Any, None]:
        if nbytes > 0:
            pairs = np.stack([ranks[d, src], ranks[d, dst]], axis=1)
            yield net.transfer(pairs, nbytes / tp, tag)
        ready.succeed()

    def tp_allreduce(d: int, p: int, tag: str) -> Any:
        nbytes = float(det["tp_bytes"][p] * det["mb"][d])
        if tp == 1 or nbytes <= 0:
            return None
        return run_collective(env, net, "allreduce", "ring", [int(r) for r in ranks[d, p]], nbytes, tag=tag)

    def stage(d: int, p: int) -> Generator[Any, Any, None]:
        fwd = float(det["forward"][d, p])
        bwd = float(det["compute"][d, p]) - fwd
        for kind, i in one_f_one_b(p, pp, m):
            if kind == "F":
                if p > 0:
                    yield fwd_ready[d][p][i]
                yield env.timeout(fwd)
                busy[d, p] += fwd
                ar = tp_allreduce(d, p, f"tp{d}.{p}")
                if ar is not None:
                    yield ar
                if p < pp - 1:
                    env.process(send(d, p, p + 1, float(det["send_fwd"][p] * det["mb"][d]), fwd_ready[d][p + 1][i],
                                     f"act{d}.{p}"))
                else:
                    bwd_ready[d][p][i].succeed()
            else:
                yield bwd_ready[d][p][i]
                yield from backward(p, bwd, i == m - 1)
                busy[d, p] += bwd
                ar = tp_allreduce(d, p, f"tp{d}.{p}")
                if ar is not None:
                    yield ar
                if p > 0:
                    env.process(send(d, p, p - 1, float(det["send_bwd"][p] * det["mb"][d]), bwd_ready[d][p - 1][i],
                                     f"grad{d}.{p}"))
        drained[p] += 1
        if drained[p] < dp:
            yield stage_done[p]
            return
        if overlap:
            yield exchanges[p]
        elif dp > 1 and det["params"][p] > 0:
            alg = str(det["dp_algs"][p]) or "ring"
            if pricer.exchange.dense:
                runs = [run_collective(env, net, "allreduce", alg, [int(r) for r in ranks[:, p, t]],
                                       float(det["params"][p]), tag=f"dp.{p}.{t}") for t in range(tp)]
            else:  # plan --scheme: the device work, then the scheme's calls as the pricer priced them
                yield env.timeout(cost.extra.get("dp_device_work_s", 0.0))
                algorithms = SchemeAlgorithms(library="nccl") if alg.endswith("/nccl") else SchemeAlgorithms()
                runs = [run_scheme(env, net, pricer.exchange.scheme, float(det["params"][p]) / GRADIENT_BYTES,
                                   [int(r) for r in ranks[:, p, t]], pricer.exchange.ratio, algorithms=algorithms,
                                   tag=f"dp.{p}.{t}") for t in range(tp)]
            yield env.all_of(runs)
        stage_done[p].succeed()

    processes = [env.process(stage(d, p)) for d in range(dp) for p in range(pp)]
    env.run(until=env.all_of(processes))
    step = float(env.now)
    return SimulatedPlan(step, float(busy.mean() / step) if step > 0 else 0.0, env.events_processed)
