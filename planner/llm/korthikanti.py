"""Korthikanti et al.'s published iteration times, a second paper on Megatron-LM's A100 hardware.

The table is Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023,
arXiv:2205.05198): Table 3 (configurations) and Table 5 (end-to-end iteration time, seconds): GPT models on
Selene's DGX A100-80GB nodes, s = 2048, V = 51,200, mixed precision; the micro-batch size is not in those
tables, so, as for Megatron-LM's table, the fastest that fits is taken. Each model runs twice: with full
activation recomputation and no sequence parallelism (Megatron-LM's 2021 features), and with the paper's
sequence parallelism and selective recomputation ("present work").

Why it is here: the planner's compute model must hold on measurements it was not built or fitted on; these
eight iteration times are predicted from the device catalog and the NCCL model alone, with nothing fitted.
Every run has data-parallel size 1, so no gradient allreduce hides in them. The paper's Model FLOPs
Utilization (41.5, 51.4, 56.0 and 56.3 % for the present work) follows from these times with its FLOP count,
which the test of this module checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.planner.llm.megatron import CLUSTER, SEQ_LEN, VOCAB, PublishedRun
from flexcomm.planner.llm.pricing import LLMPlan, LLMPlanCost, LLMPricer
from flexcomm.planner.llm.search import MICRO_BATCH_SIZES
from flexcomm.planner.llm.timing import Hardware

#: The paper's two settings: (label, recomputation, sequence parallelism).
SETTINGS = (("full recompute", "full", False), ("present work", "selective", True))


@dataclass(frozen=True)
class KorthikantiRow(PublishedRun):
    """One model of Table 3 with its two iteration times from Table 5 (seconds)."""

    label: str
    full_recompute_s: float
    present_work_s: float

    def published_s(self, recompute: str) -> float:
        return self.full_recompute_s if recompute == "full" else self.present_work_s

    def model_flops(self) -> float:
        """The paper's model FLOPs per iteration (no recomputation counted): 72 B s l h^2 (1 + s/6h + V/12lh)."""
        b, s, n, h, v = self.batch, SEQ_LEN, self.layers, self.hidden, VOCAB
        return 72.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))


TABLE = (
    KorthikantiRow(64, 6144, 48, 8, 1, 8, 4, "22B", 1.42, 1.10),
    KorthikantiRow(96, 12288, 96, 8, 8, 64, 64, "175B", 18.13, 13.75),
    KorthikantiRow(128, 20480, 105, 8, 35, 280, 280, "530B", 49.05, 37.83),
    KorthikantiRow(160, 25600, 128, 8, 64, 512, 512, "1T", 94.42, 71.49),
)


def row_cluster(row: KorthikantiRow) -> Cluster:
    base = load_cluster(CLUSTER)
    return base.with_nodes(math.ceil(row.gpus / base.devices_per_node))


def price(row: KorthikantiRow, recompute: str, sequence_parallel: bool,
          gemm_ceiling: float | None = None) -> LLMPlanCost:
    """The published configuration priced by the planner (``gemm_ceiling`` None: the catalog's achievable
    fraction, nothing fitted): (t, p, d), recomputation and sequence parallelism as published, no virtual
    stages or ZeRO (neither is in the paper), the fastest micro-batch size that fits."""
    cluster = row_cluster(row)
    pricer = LLMPricer(row.model, Hardware.of(cluster, gemm_ceiling), row.gpus, row.batch,
                       cluster.device.memory_bytes)
    d = row.gpus // (row.tp * row.pp)
    costs = [pricer.price(LLMPlan(row.tp, row.pp, d, b, 1, sequence_parallel, recompute, 0))
             for b in MICRO_BATCH_SIZES if (row.batch // d) % b == 0]
    fitting = [c for c in costs if c.fits] or costs
    return min(fitting, key=lambda c: c.step_s)
