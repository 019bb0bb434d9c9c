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
    return _PlanReplay(pricer, cost).run()


class _PlanReplay:
    """One simulated step of a priced plan: the simpy processes of its (replica, stage)s and of its stages'
    bucketed gradient exchanges, and the events, bucket counts and busy seconds they share."""

    def __init__(self, pricer: Pricer, cost: PlanCost) -> None:
        cfg, det = cost.config, cost.detail
        self.pricer, self.cost, self.det = pricer, cost, det
        dp, pp, m = cfg.dp, cfg.pp, cfg.micro_batches
        self.dp, self.pp, self.tp, self.m = dp, pp, cfg.tp, m
        self.ranks: np.ndarray = det["ranks"]
        self.env = env = CountingEnvironment()
        self.net = Network(env, pricer.cluster.cluster)
        self.fwd_ready = [[[env.event() for _ in range(m)] for _ in range(pp)] for _ in range(dp)]
        self.bwd_ready = [[[env.event() for _ in range(m)] for _ in range(pp)] for _ in range(dp)]
        self.drained = [0] * pp
        self.stage_done = [env.event() for _ in range(pp)]
        self.busy = np.zeros((dp, pp))
        # a dense exchange runs in DDP's buckets, each once every replica's last backward has filled it
        self.overlap = overlap = dp > 1 and pricer.exchange.dense
        self.buckets = buckets = [gradient_buckets(det["bucket_grads"][p], det["bucket_work"][p])
                                  for p in range(pp)] if overlap else []
        self.filled = [[0] * len(buckets[p][0]) for p in range(pp)] if overlap else []
        self.bucket_full = [[env.event() for _ in buckets[p][0]] for p in range(pp)] if overlap else []
        self.exchanges = [env.process(self._bucketed_exchange(p)) for p in range(pp)] if overlap else []

    def run(self) -> SimulatedPlan:
        """Start every (replica, stage) and run until all have drained and exchanged their gradients."""
        env = self.env
        processes = [env.process(self._stage(d, p)) for d in range(self.dp) for p in range(self.pp)]
        env.run(until=env.all_of(processes))
        step = float(env.now)
        return SimulatedPlan(step, float(self.busy.mean() / step) if step > 0 else 0.0, env.events_processed)

    def _fill(self, p: int, k: int) -> None:
        filled = self.filled
        filled[p][k] += 1
        if filled[p][k] == self.dp:
            self.bucket_full[p][k].succeed()

    def _bucketed_exchange(self, p: int) -> Generator[Any, Any, None]:
        env, ranks = self.env, self.ranks
        for k, nbytes in enumerate(self.buckets[p][1]):
            # each bucket by the algorithm the pricer chose for its size (a small bucket over many ranks is
            # latency-bound: a tree or NCCL's choice, not the whole gradient's ring)
            alg = self.pricer.bucket_algorithm(ranks[:, p, 0], float(nbytes), float(self.det["dp_shares"][p])) \
                or "ring"
            yield self.bucket_full[p][k]
            yield env.all_of([run_collective(env, self.net, "allreduce", alg, [int(r) for r in ranks[:, p, t]],
                                             float(nbytes), tag=f"dp.{p}.{t}") for t in range(self.tp)])

    def _backward(self, p: int, seconds: float, last: bool) -> Generator[Any, Any, None]:
        """The backward of one micro-batch; the last one fills the stage's buckets as it goes."""
        env = self.env
        if not (last and self.overlap and len(self.buckets[p][0])):
            yield env.timeout(seconds)
            return
        ready, whole = self.buckets[p][0], max(float(self.buckets[p][0][-1]), 1e-30)
        elapsed = 0.0
        for k, at in enumerate(ready):
            at = max(elapsed, seconds * float(at) / whole)  # ready times never run backwards, rounding or not
            yield env.timeout(at - elapsed)
            elapsed = at
            self._fill(p, k)

    def _send(self, d: int, src: int, dst: int, nbytes: float, ready: simpy.Event,
              tag: str) -> Generator[Any, Any, None]:
        if nbytes > 0:
            pairs = np.stack([self.ranks[d, src], self.ranks[d, dst]], axis=1)
            yield self.net.transfer(pairs, nbytes / self.tp, tag)
        ready.succeed()

    def _tp_allreduce(self, d: int, p: int, tag: str) -> Any:
        nbytes = float(self.det["tp_bytes"][p] * self.det["mb"][d])
        if self.tp == 1 or nbytes <= 0:
            return None
        return run_collective(self.env, self.net, "allreduce", "ring", [int(r) for r in self.ranks[d, p]], nbytes,
                              tag=tag)

    def _stage(self, d: int, p: int) -> Generator[Any, Any, None]:
        """Replica ``d``'s stage ``p``: its 1F1B forwards and backwards, each waiting for its input, then the
        stage's gradient exchange once every replica has drained it."""
        env, det, pp, m = self.env, self.det, self.pp, self.m
        fwd_ready, bwd_ready, busy = self.fwd_ready, self.bwd_ready, self.busy
        fwd = float(det["forward"][d, p])
        bwd = float(det["compute"][d, p]) - fwd
        for kind, i in one_f_one_b(p, pp, m):
            if kind == "F":
                if p > 0:
                    yield fwd_ready[d][p][i]
                yield env.timeout(fwd)
                busy[d, p] += fwd
                ar = self._tp_allreduce(d, p, f"tp{d}.{p}")
                if ar is not None:
                    yield ar
                if p < pp - 1:
                    env.process(self._send(d, p, p + 1, float(det["send_fwd"][p] * det["mb"][d]),
                                           fwd_ready[d][p + 1][i], f"act{d}.{p}"))
                else:
                    bwd_ready[d][p][i].succeed()
            else:
                yield bwd_ready[d][p][i]
                yield from self._backward(p, bwd, i == m - 1)
                busy[d, p] += bwd
                ar = self._tp_allreduce(d, p, f"tp{d}.{p}")
                if ar is not None:
                    yield ar
                if p > 0:
                    env.process(self._send(d, p, p - 1, float(det["send_bwd"][p] * det["mb"][d]),
                                           bwd_ready[d][p - 1][i], f"grad{d}.{p}"))
        yield from self._drain(p)

    def _drain(self, p: int) -> Generator[Any, Any, None]:
        """The last replica to drain stage ``p`` runs (or, overlapped, waits for) its gradient exchange; the
        others wait for it."""
        env, det, pricer = self.env, self.det, self.pricer
        self.drained[p] += 1
        if self.drained[p] < self.dp:
            yield self.stage_done[p]
            return
        if self.overlap:
            yield self.exchanges[p]
        elif self.dp > 1 and det["params"][p] > 0:
            alg = str(det["dp_algs"][p]) or "ring"
            ranks, net = self.ranks, self.net
            if pricer.exchange.dense:
                runs = [run_collective(env, net, "allreduce", alg, [int(r) for r in ranks[:, p, t]],
                                       float(det["params"][p]), tag=f"dp.{p}.{t}") for t in range(self.tp)]
            else:  # plan --scheme: the device work, then the scheme's calls as the pricer priced them
                yield env.timeout(self.cost.extra.get("dp_device_work_s", 0.0))
                algorithms = SchemeAlgorithms(library="nccl") if alg.endswith("/nccl") else SchemeAlgorithms()
                runs = [run_scheme(env, net, pricer.exchange.scheme, float(det["params"][p]) / GRADIENT_BYTES,
                                   [int(r) for r in ranks[:, p, t]], pricer.exchange.ratio, algorithms=algorithms,
                                   tag=f"dp.{p}.{t}") for t in range(self.tp)]
            yield env.all_of(runs)
        self.stage_done[p].succeed()
