"""Megatron-LM's published weak-scaling table, and pricing its rows with the transformer planner.

The table is Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC'21), Table 1 (selected rows, as in ``shared/data/megatron-table1.md``): GPT models on
Selene's DGX A100-80GB nodes (8 HDR NICs each), V = 51,200, s = 2048, mixed precision, activation
recomputation; achieved teraFLOP/s per GPU = F / (iteration time x GPUs) with the paper's F.

Why "as published" is a feature set: in 2021 Megatron recomputed every layer (``full``), had neither
sequence parallelism nor selective recomputation (Korthikanti et al., 2022) nor a distributed optimizer;
the published run is priced with those settings (micro-batch size and virtual stages are not in the table,
so the best of them is taken). The free search may use every feature, so it is reported next to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.planner.llm.model import Transformer
from flexcomm.planner.llm.pricing import LLMPlanCost, LLMPricer
from flexcomm.planner.llm.search import LLMSearchResult, search
from flexcomm.planner.llm.timing import Hardware

CLUSTER = "dgx-a100-80g"
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


TABLE_1 = (
    MegatronRow(24, 2304, 24, 1, 1, 32, 512, 1.7, 137),
    MegatronRow(32, 3072, 30, 2, 1, 64, 512, 3.6, 138),
    MegatronRow(32, 4096, 36, 4, 1, 128, 512, 7.5, 142),
    MegatronRow(48, 6144, 40, 8, 1, 256, 1024, 18.4, 135),
    MegatronRow(96, 12288, 80, 8, 8, 1536, 2304, 145.6, 148),
    MegatronRow(128, 20480, 105, 8, 35, 2520, 2520, 529.6, 163),
)


def row_cluster(row: MegatronRow) -> Cluster:
    """The embedded DGX A100 cluster grown to the row's GPUs."""
    base = load_cluster(CLUSTER)
    return base.with_nodes(math.ceil(row.gpus / base.devices_per_node))


def pricer(row: MegatronRow, gemm_ceiling: float) -> LLMPricer:
    cluster = row_cluster(row)
    return LLMPricer(row.model, Hardware.of(cluster, gemm_ceiling), row.gpus, row.batch, cluster.device.memory_bytes)


def as_published(result: LLMSearchResult) -> LLMPlanCost:
    """The fastest plan with 2021 Megatron's features: full recomputation, no sequence parallelism, ZeRO 0."""
    old = [c for c in result.ranked if c.plan.recompute == "full" and not c.plan.sequence_parallel
           and c.plan.zero == 0]
    return old[0]


def published_cost(row: MegatronRow, gemm_ceiling: float) -> LLMPlanCost:
    """The published (t, p) with the published features, priced (best micro-batch size and virtual stages)."""
    return as_published(search(pricer(row, gemm_ceiling), tp=row.tp, pp=row.pp))


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
