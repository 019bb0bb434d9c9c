"""The transformer planner as the recovery engine's planner (:class:`sim.recovery.Planner`).

``best(gpus)`` searches the plan space on the GPUs a job has left (on a few GPU counts at or below it,
since a plan must use t x p x d GPUs exactly and a prime count leaves only t = p = 1), keeping the global
batch; ``shrunk(plan, gpus)`` keeps the plan's tensor x pipeline split and micro-batches per replica with
fewer replicas (elastic data parallelism: the global batch shrinks with them). The search time returned
is measured, so the recovery engine charges what planning really costs.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.planner.llm.gpt import Transformer
from flexcomm.planner.llm.hetero import DeviceGroup, search_hetero
from flexcomm.planner.llm.megatron import TABLE_1
from flexcomm.planner.llm.pricing import LLMPlan, LLMPlanCost, LLMPricer
from flexcomm.planner.llm.search import search
from flexcomm.planner.llm.timing import Hardware, device_precisions
from flexcomm.sim.recovery import Plan, Planner

#: Node counts tried at or below what is up: the largest few whose only prime factors are 2, 3 and 5 (a plan
#: needs t x p x d GPUs exactly, with d dividing the batch and t, p dividing heads and layers).
CANDIDATE_NODE_COUNTS = 4


def recovery_workloads() -> dict[str, Any]:
    """The jobs the recovery engine knows: ``gpt-<row>`` for every row of Megatron-LM's Table 1."""
    return {f"gpt-{row.label.lower()}": row for row in TABLE_1}


def training_precision(cluster: Cluster) -> str:
    """bf16 where every device has it (Ampere and later), else fp16 (a V100 in the pool)."""
    return "bf16" if all("bf16" in device_precisions(d.name) for d in cluster.rank_devices) else "fp16"


def nic_Bps_per_node(cluster: Cluster) -> float:
    """What one node can send off-node: its inter-node link times its NICs (resharding crosses these)."""
    return cluster.inter_link.bandwidth_Bps * (cluster.nics_per_node or 1)


def smooth_counts(limit: int, count: int = CANDIDATE_NODE_COUNTS) -> list[int]:
    """The largest ``count`` integers <= ``limit`` with no prime factor above 5, largest first."""
    found = []
    n = limit
    while n >= 1 and len(found) < count:
        m = n
        for prime in (2, 3, 5):
            while m % prime == 0:
                m //= prime
        if m == 1:
            found.append(n)
        n -= 1
    return found


def _plan(cost: LLMPlanCost, batch: int) -> Plan:
    p = cost.plan
    return Plan(p.label, p.tp, p.pp, p.dp, cost.step_s, float(batch))


class TransformerRecoveryPlanner(Planner):
    """Plans one transformer job on any number of a cluster's GPUs (same devices and links)."""

    def __init__(self, model: Transformer, cluster: Cluster, batch_size: int, precision: str = "bf16",
                 gemm_ceiling: float | None = None) -> None:
        self.model, self.cluster, self.batch_size, self.precision = model, cluster, batch_size, precision
        self.hardware = Hardware.of(cluster) if gemm_ceiling is None else Hardware.of(cluster, gemm_ceiling)
        # the pricer of a single-type pool uses its device (the slowest of a mixed cluster: its GPUs pace it)
        self._known: dict[str, tuple[LLMPlan, int]] = {}  # label -> (plan, micro-batches per replica)
        self._best: dict[int, tuple[Plan | None, float]] = {}  # gpus -> (plan, measured seconds of its search)
        self._mixed: dict[tuple, tuple[Plan | None, float]] = {}  # GPUs per device type -> the same

    def _pricer(self, gpus: int, batch: int) -> LLMPricer:
        return LLMPricer(self.model, self.hardware, gpus, batch, self.cluster.device.memory_bytes,
                         precision=self.precision)

    def best_on(self, nodes: list[int], devices_per_node: int) -> tuple[Plan | None, float]:
        """On a mixed cluster, the heterogeneous search over the device types of ``nodes`` (uneven stages);
        on a single-type one, :meth:`best` of their GPU count."""
        kinds: dict[str, int] = {}
        for node in nodes:
            name = self.cluster.node_device(node).name
            kinds[name] = kinds.get(name, 0) + devices_per_node
        if not self.cluster.node_devices:
            return self.best(len(nodes) * devices_per_node)
        key = tuple(sorted(kinds.items()))
        if key not in self._mixed:
            self._mixed[key] = self._search_mixed(kinds)
        return self._mixed[key]

    def _search_mixed(self, kinds: dict[str, int]) -> tuple[Plan | None, float]:
        started = time.perf_counter()
        devices = {d.name: d for d in self.cluster.rank_devices}
        groups = [DeviceGroup(name, gpus, replace(self.hardware, peak_flops=devices[name].peak_flops,
                                                  memory_bandwidth_Bps=devices[name].memory_bandwidth_Bps,
                                                  sms=devices[name].sms), devices[name].memory_bytes)
                  for name, gpus in kinds.items()]
        try:
            cost = search_hetero(self.model, groups, self.batch_size, self.precision)
        except InputError:
            return None, time.perf_counter() - started
        return (Plan(cost.label, cost.tp, cost.pp, cost.dp, cost.step_s, float(cost.samples_per_step)),
                time.perf_counter() - started)

    def best(self, gpus: int) -> tuple[Plan | None, float]:
        """The best plan on at most ``gpus`` GPUs, and the seconds its search took when it really ran (a repeated
        question is answered from memory but still reports that measured time: the job would search again)."""
        if gpus not in self._best:
            self._best[gpus] = self._search(gpus)
        return self._best[gpus]

    def _search(self, gpus: int) -> tuple[Plan | None, float]:
        started = time.perf_counter()
        dpn = self.cluster.devices_per_node
        nodes = gpus // dpn
        best: LLMPlanCost | None = None
        for world in (n * dpn for n in smooth_counts(nodes)):
            try:
                cost = search(self._pricer(world, self.batch_size)).best
            except InputError:  # no plan on this many GPUs (batch does not split, or nothing fits)
                continue
            if best is None or cost.step_s < best.step_s:
                best = cost
        elapsed = time.perf_counter() - started
        if best is None:
            return None, elapsed
        self._known[best.plan.label] = (best.plan, best.micro_batches)
        return _plan(best, self.batch_size), elapsed

    def can_shrink(self, plan: Plan) -> bool:
        return plan.label in self._known  # a mixed pool's uneven-stage plan is planned afresh instead

    def shrunk(self, plan: Plan, gpus: int) -> Plan | None:
        known = self._known.get(plan.label)
        if known is None:
            return None
        full, micro_batches = known
        dp = gpus // (plan.tp * plan.pp)
        if dp < 1:
            return None
        batch = dp * full.micro_batch_size * micro_batches
        candidate = LLMPlan(full.tp, full.pp, dp, full.micro_batch_size, full.virtual_stages,
                            full.sequence_parallel, full.recompute, full.zero)
        try:
            cost = self._pricer(full.tp * full.pp * dp, batch).price(candidate)
        except InputError:
            return None
        if not cost.fits:
            return None
        label = candidate.label
        self._known[label] = (candidate, micro_batches)
        return Plan(label, candidate.tp, candidate.pp, dp, cost.step_s, float(batch))
