"""Korthikanti et al.'s published iteration times, a second paper on Megatron-LM's A100 hardware.

The table is Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023,
arXiv:2205.05198): Table 3 (configurations) and Table 5 (end-to-end iteration time, seconds): GPT models on
Selene's DGX A100-80GB nodes, s = 2048, V = 51,200, mixed precision; the micro-batch size is not in those
tables, so, as for Megatron-LM's table, every size that fits is priced and the median is the prediction. Each
model runs twice: with full activation recomputation and no sequence parallelism (Megatron-LM's 2021 features),
and with the paper's sequence parallelism and selective recomputation ("present work").

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
from flexcomm.costmodel.devices import lookup
from flexcomm.planner.llm.megatron import CLUSTER, SEQ_LEN, VOCAB, KnobRange, PublishedRun
from flexcomm.planner.llm.pricing import LLMPlan, LLMPlanCost, LLMPricer
from flexcomm.planner.llm.search import MICRO_BATCH_SIZES
from flexcomm.planner.llm.timing import Hardware
from flexcomm.validation import reference_rows

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


def _table() -> tuple[KorthikantiRow, ...]:
    """``validation/references/korthikanti-2023.csv`` (each row with its provenance)."""
    return tuple(KorthikantiRow(int(r["heads"]), int(r["hidden"]), int(r["layers"]), int(r["tp"]), int(r["pp"]),
                                int(r["gpus"]), int(r["batch"]), r["label"], float(r["full_recompute_s"]),
                                float(r["present_work_s"])) for r in reference_rows("korthikanti-2023"))


TABLE = _table()


def row_cluster(row: KorthikantiRow) -> Cluster:
    base = load_cluster(CLUSTER)
    return base.with_nodes(math.ceil(row.gpus / base.devices_per_node))


def price_range(row: KorthikantiRow, recompute: str, sequence_parallel: bool,
                gemm_ceiling: float | None = None) -> KnobRange:
    """The published configuration priced by the planner (``gemm_ceiling`` None: the catalog's achievable
    fraction, nothing fitted): (t, p, d), recomputation and sequence parallelism as published, no virtual
    stages or ZeRO (neither is in the paper), over every micro-batch size that fits (the paper does not state
    it): fastest, median (the prediction) and slowest."""
    cluster = row_cluster(row)
    pricer = LLMPricer(row.model, Hardware.of(cluster, gemm_ceiling), row.gpus, row.batch,
                       cluster.device.memory_bytes, attention="unfused")  # the paper's 2022 Megatron-LM
    d = row.gpus // (row.tp * row.pp)
    costs = [pricer.price(LLMPlan(row.tp, row.pp, d, b, 1, sequence_parallel, recompute, 0))
             for b in MICRO_BATCH_SIZES if (row.batch // d) % b == 0]
    return KnobRange.of([c for c in costs if c.fits] or costs)


def price(row: KorthikantiRow, recompute: str, sequence_parallel: bool,
          gemm_ceiling: float | None = None) -> LLMPlanCost:
    """:func:`price_range`'s median: the prediction."""
    return price_range(row, recompute, sequence_parallel, gemm_ceiling).median


def naive_seconds(row: KorthikantiRow, recompute: str) -> float:
    """The naive baseline: the paper's model FLOPs (a full recomputation adds a forward: x 4/3) at the device's
    measured matmul rate on every GPU, nothing else."""
    found = lookup(row_cluster(row).device.name)
    rate = found.mamf.tflops * 1e12 if found is not None and found.mamf is not None else float("nan")
    return row.model_flops() * (4 / 3 if recompute == "full" else 1.0) / (row.gpus * rate)
