"""Megatron-LM's published weak-scaling table, and pricing its rows with the transformer planner.

The table is Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC'21), Table 1 (selected rows, as in ``shared/data/megatron-table1.md``): GPT models on
Selene's DGX A100-80GB nodes (8 HDR NICs each), V = 51,200, s = 2048, mixed precision, activation
recomputation; achieved teraFLOP/s per GPU = F / (iteration time x GPUs) with the paper's F.

Why "as published" is a feature set: in 2021 Megatron recomputed every layer (``full``), had neither
sequence parallelism nor selective recomputation (Korthikanti et al., 2022) nor a distributed optimizer;
the published run is priced with those settings. Micro-batch size and virtual stages are not in the table: they
are priced over every plausible value (:class:`KnobRange`), the median is the prediction and the spread is
reported beside it (the fastest alone would bias every prediction towards "too fast"). The free search may use
every feature, so it is reported next to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.devices import lookup
from flexcomm.planner.llm.gpt import Transformer
from flexcomm.planner.llm.pricing import LLMPlanCost, LLMPricer
from flexcomm.planner.llm.search import LLMSearchResult, search
from flexcomm.planner.llm.timing import Hardware
from flexcomm.validation import reference_rows

CLUSTER = "dgx-a100-80g"
#: Sequence length and vocabulary of every Megatron-LM and Korthikanti run (Narayanan et al., SC'21, Table 1's
#: caption; Korthikanti et al., MLSys 2023, Section 6).
SEQ_LEN = 2048
VOCAB = 51200


@dataclass(frozen=True)
class PublishedRun:
    """A published GPT run on Selene's A100s: the model's shape, its (t, p) split, GPUs and global batch."""

    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int

    @property
    def model(self) -> Transformer:
        return Transformer(self.layers, self.hidden, self.heads, SEQ_LEN, VOCAB)


@dataclass(frozen=True)
class MegatronRow(PublishedRun):
    """One row of the published table: its size in billions of parameters and achieved teraFLOP/s per GPU."""

    billions: float
    tflops_per_gpu: float

    @property
    def label(self) -> str:
        return f"{self.billions:g}B"


def _table_1() -> tuple[MegatronRow, ...]:
    """``validation/references/megatron-table1.csv`` (each row with its provenance)."""
    return tuple(MegatronRow(int(r["heads"]), int(r["hidden"]), int(r["layers"]), int(r["tp"]), int(r["pp"]),
                             int(r["gpus"]), int(r["batch"]), float(r["billions"]), float(r["tflops_per_gpu"]))
                 for r in reference_rows("megatron-table1"))


TABLE_1 = _table_1()


def row_cluster(row: MegatronRow) -> Cluster:
    """The embedded DGX A100 cluster grown to the row's GPUs."""
    base = load_cluster(CLUSTER)
    return base.with_nodes(math.ceil(row.gpus / base.devices_per_node))


def pricer(row: MegatronRow, gemm_ceiling: float) -> LLMPricer:
    cluster = row_cluster(row)
    # the paper's software: Megatron-LM of 2021 ran attention as separate kernels
    return LLMPricer(row.model, Hardware.of(cluster, gemm_ceiling), row.gpus, row.batch, cluster.device.memory_bytes,
                     attention="unfused")


def as_published(result: LLMSearchResult) -> LLMPlanCost:
    """The fastest plan with 2021 Megatron's features: full recomputation, no sequence parallelism, ZeRO 0."""
    return published_plans(result)[0]


def published_plans(result: LLMSearchResult) -> list[LLMPlanCost]:
    """Every plan with 2021 Megatron's features (full recomputation, no sequence parallelism, ZeRO 0), fastest
    first: the values the table leaves unstated (micro-batch size, virtual stages) range over these; the ones
    that fit in memory where any does."""
    old = [c for c in result.ranked if c.plan.recompute == "full" and not c.plan.sequence_parallel
           and c.plan.zero == 0]
    return [c for c in old if c.fits] or old


@dataclass(frozen=True)
class KnobRange:
    """A published configuration priced over the knobs its source leaves unstated: the fastest, the median and
    the slowest of the plausible values (the median is the prediction; the spread is reported beside it)."""

    fastest: LLMPlanCost
    median: LLMPlanCost
    slowest: LLMPlanCost
    count: int

    @classmethod
    def of(cls, costs: list[LLMPlanCost]) -> KnobRange:
        ordered = sorted(costs, key=lambda c: c.step_s)
        return cls(ordered[0], ordered[(len(ordered) - 1) // 2], ordered[-1], len(ordered))

    def place(self, published_step_s: float) -> str:
        """Where a published step falls: ``inside`` the priced spread, or faster / slower than all of it."""
        if published_step_s < self.fastest.step_s:
            return "faster than every plausible value"
        if published_step_s > self.slowest.step_s:
            return "slower than every plausible value"
        return "inside"


def published_cost(row: MegatronRow, gemm_ceiling: float | None) -> LLMPlanCost:
    """The published (t, p) with the published features, priced at the median of the unstated micro-batch sizes
    and virtual stages (:class:`KnobRange`)."""
    return published_range(row, gemm_ceiling).median


def published_range(row: MegatronRow, gemm_ceiling: float | None) -> KnobRange:
    """The published (t, p) with the published features over its unstated micro-batch sizes and virtual stages."""
    return KnobRange.of(published_plans(search(pricer(row, gemm_ceiling), tp=row.tp, pp=row.pp)))


def naive_tflops_per_gpu(row: MegatronRow) -> float:
    """The naive baseline: the paper's FLOPs at the device's measured matmul rate and nothing else (no memory-bound
    work, no communication, no bubble): the A100's MAMF, whatever the row."""
    found = lookup(row_cluster(row).device.name)
    return found.mamf.tflops if found is not None and found.mamf is not None else float("nan")


def fit_ceiling(rows: list[MegatronRow]) -> float:
    """The GEMM ceiling that best predicts ``rows``' published teraFLOP/s (least squares in log ratio)."""
    from scipy.optimize import minimize_scalar

    def loss(ceiling: float) -> float:
        return float(sum(math.log(published_cost(r, ceiling).tflops_per_gpu / r.tflops_per_gpu) ** 2 for r in rows))

    return float(minimize_scalar(loss, bounds=(0.2, 1.0), method="bounded", options={"xatol": 1e-4}).x)


def leave_one_out_ceilings(rows: tuple[MegatronRow, ...] = TABLE_1) -> list[float]:
    """For each row, the ceiling fitted on every other row (its prediction never sees its own number)."""
    return [fit_ceiling([r for j, r in enumerate(rows) if j != i]) for i in range(len(rows))]


def median_and_worst(errors: list[float]) -> tuple[float, float]:
    values = np.abs(np.asarray(errors, dtype=float))
    return float(np.median(values)), float(values.max())
