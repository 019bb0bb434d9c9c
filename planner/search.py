"""Enumerate parallel plans, price them, rank them and say why each loser loses.

The space: every (dp, tp, pp) with dp x tp x pp = the cluster's ranks and pp <= the model's
pipeline units, micro-batch counts m (powers of two dividing the batch, at least one sample per
replica), ZeRO stage 0/1/2 (only with dp > 1) and two rank orders (pipeline stages outermost,
or data-parallel replicas outermost; the same when dp or pp is 1). ``search="random"`` prices a
seeded random sample of it instead of all of it. The best few feasible plans are re-ranked with
the simulator (:mod:`planner.simulate`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from flexcomm.costmodel.errors import InputError
from flexcomm.planner.plans import ORDERS, PlanConfig, PlanCost, Pricer
from flexcomm.planner.simulate import simulate_plan

SEARCHES = ("exhaustive", "random")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_plans(pricer: Pricer, max_micro_batches: int = 64) -> list[PlanConfig]:
    """Every valid plan of the pricer's model, batch and cluster, in a fixed order."""
    world, batch, units = pricer.cluster.world_size, pricer.batch_size, len(pricer.units)
    plans: list[PlanConfig] = []
    for tp in _divisors(world):
        for pp in _divisors(world // tp):
            if pp > units:
                continue
            dp = world // (tp * pp)
            m = 1
            while m <= min(max_micro_batches, batch):
                ok = batch % m == 0 and batch // m >= dp
                if pricer.balance == "even":
                    ok = ok and batch % (dp * m) == 0
                if ok:
                    for zero in (0, 1, 2) if dp > 1 else (0,):
                        for order in ORDERS if dp > 1 and pp > 1 else ORDERS[:1]:
                            plans.append(PlanConfig(dp, tp, pp, m, zero, order))
                m *= 2
    return plans


def loses_on(cost: PlanCost, best: PlanCost) -> str:
    """Why ``cost`` is slower than ``best``: memory (rejected), or the part of the step that grew most.

    ``tie`` when it is as fast (e.g. a ZeRO variant: same bytes moved, less memory). The ranked
    table says ``simulation`` for a plan the formulas price faster but the simulator re-ranked
    behind the best.
    """
    if not cost.feasible:
        return "memory"
    if cost is best:
        return "-"
    if cost.step_s <= best.step_s * (1 + 1e-9):
        return "tie"
    growth = {
        "compute": cost.compute_s - best.compute_s,
        "communication": cost.communication_s - best.communication_s,
        "bubble": cost.bubble_s - best.bubble_s,
    }
    return max(growth, key=lambda k: growth[k])


def signature(cfg: PlanConfig) -> tuple:
    """What the step's schedule depends on: everything but the ZeRO stage (memory only), and the micro-batch
    count where there is neither a pipeline nor a tensor-parallel collective per micro-batch (it then splits the
    same work into equal pieces back to back: memory only; plans.png showed six such rows of one plan)."""
    micro_batches = cfg.micro_batches if cfg.pp > 1 or cfg.tp > 1 else 1
    return (cfg.dp, cfg.tp, cfg.pp, micro_batches, cfg.order)


def _rank_key(cost: PlanCost) -> tuple:
    """Fastest first; on a tie the simpler plan (no ZeRO, fewer micro-batches), then less memory."""
    c = cost.config
    return (round(cost.step_s, 12), c.zero, c.micro_batches, cost.memory_use, c)


@dataclass
class SearchResult:
    """All priced plans, feasible ones ranked (best first), and how long pricing took."""

    costs: list[PlanCost]
    ranked: list[PlanCost]
    pricing_s: float
    simulated: dict[str, float]  # plan label -> simulated step seconds (the re-ranked few)
    simulate_s: float

    @property
    def best(self) -> PlanCost:
        if not self.ranked:
            raise InputError("cluster", "(memory)", "a cluster with enough memory for at least one plan "
                             "(every plan was rejected: try a smaller batch or more devices)")
        return self.ranked[0]

    def table(self) -> pd.DataFrame:
        """Ranked feasible plans, then the rejected ones; columns of :meth:`PlanCost.row` + rank and verdict."""
        rows = []
        best = self.ranked[0] if self.ranked else None
        rejected = sorted((c for c in self.costs if not c.feasible), key=lambda c: (c.memory_use, c.config))
        for rank, cost in enumerate([*self.ranked, *rejected], start=1):
            row = {"rank": rank if cost.feasible else None, **cost.row()}
            row["simulated_step_s"] = self.simulated.get(cost.config.label)
            row["slowdown"] = cost.step_s / best.step_s if best and cost.feasible else None
            row["loses_on"] = loses_on(cost, best) if best else "memory"
            if (best and cost is not best and cost.config.label in self.simulated
                    and self.simulated[cost.config.label] > self.simulated.get(best.config.label, np.inf)
                    and cost.step_s <= best.step_s * (1 + 1e-9)):
                row["loses_on"] = "simulation"  # faster on paper, slower once flows contend and clocks drift
            rows.append(row)
        return pd.DataFrame(rows)


def search(pricer: Pricer, *, method: str = "exhaustive", samples: int = 200, seed: int = 0,
           simulate_top: int = 3, progress: Callable[[Iterable[PlanConfig], int], Iterable[PlanConfig]] | None = None,
           max_micro_batches: int = 64) -> SearchResult:
    """Price the plan space (all of it, or ``samples`` of it drawn with ``seed``) and re-rank the top few.

    Feasible plans are ranked by the analytic step time; the best ``simulate_top`` distinct
    schedules (ZeRO variants share one) are then simulated and re-ordered by simulated time among
    themselves (they stay ahead of the rest).
    """
    if method not in SEARCHES:
        raise InputError("search", method, "one of " + ", ".join(SEARCHES))
    if isinstance(simulate_top, bool) or not isinstance(simulate_top, int) or simulate_top < 0:
        raise InputError("simulate_top", simulate_top, "an integer >= 0")
    plans = enumerate_plans(pricer, max_micro_batches)
    if not plans:
        raise InputError("batch_size", pricer.batch_size, f"a batch that {pricer.cluster.world_size} ranks can split")
    if method == "random":
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise InputError("samples", samples, "an integer >= 1")
        plans = sorted(random.Random(seed).sample(plans, min(samples, len(plans))))
    iterator: Iterable[PlanConfig] = progress(plans, len(plans)) if progress else plans
    start = time.perf_counter()
    costs = [pricer.price(cfg) for cfg in iterator]
    pricing_s = time.perf_counter() - start
    ranked = sorted((c for c in costs if c.feasible), key=_rank_key)
    simulated: dict[str, float] = {}
    start = time.perf_counter()
    if simulate_top and ranked:

        # ZeRO stages move the same bytes in the same time: simulate distinct schedules only
        by_signature: dict[tuple, float] = {}
        for cost in ranked:
            sig = signature(cost.config)
            if sig not in by_signature:
                if len(by_signature) == simulate_top:
                    break
                by_signature[sig] = simulate_plan(pricer, cost).step_s
        head = [c for c in ranked if signature(c.config) in by_signature]
        for cost in head:
            simulated[cost.config.label] = by_signature[signature(cost.config)]
        head = sorted(head, key=lambda c: (simulated[c.config.label], *_rank_key(c)))
        ranked = [*head, *(c for c in ranked if signature(c.config) not in by_signature)]
    return SearchResult(costs, ranked, pricing_s, simulated, time.perf_counter() - start)
