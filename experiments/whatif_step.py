"""The what-if at the training step: each scheme priced as ``flexcomm simulate`` prices one iteration.

Why: an exchange that is 1.9x faster can still make the step slower. Dense's buckets overlap the backward
and hide most of their exchange; a compressor adds device work on the critical path (PowerSGD's passes over
every layer, Top-k's selection) and error-feedback memory. So the what-if ranks schemes by the step: the same
buckets, the same per-layer compute on the cluster's device (:mod:`costmodel.device_compute`), the same
device work and the same overlap recurrence as the simulator's analytical twin
(:func:`sim.training.overlapped_iteration`), and the same memory check (:func:`sim.training.
data_parallel_memory_bytes`). The exchange alone stays as a secondary column, said as such.

Accuracy is not a time: where the project has measured what a scheme costs in accuracy (the Fashion-MNIST
reproduction, ``validation/references/compression-accuracy-fashion-mnist.csv``), the table carries it beside
the step; everywhere else it says the accuracy cost is not priced.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.model import CostModel
from flexcomm.sim.training import (
    TrainingConfig,
    TrainingSimulator,
    bucket_exchange_seconds,
    overlapped_iteration,
)
from flexcomm.sim.workload import TrainingWorkload
from flexcomm.validation import reference_rows

#: The project's own accuracy measurements of compressed training (see the module doc).
ACCURACY_REFERENCE = "compression-accuracy-fashion-mnist"
#: What the table says where nothing was measured.
NOT_PRICED = "not priced (no measurement)"


@dataclass
class StepPricer:
    """One model on one cluster: a prepared simulator per scheme (buckets, compute, device work, memory), so
    every (ranks, NIC speed, ratio) of the sweep costs only the buckets' exchanges."""

    cluster: Cluster
    workload: TrainingWorkload
    compress_elements_per_s: float | None = None

    def __post_init__(self) -> None:
        self._sims: dict[str, TrainingSimulator] = {}

    def simulator(self, scheme: str) -> TrainingSimulator:
        if scheme not in self._sims:
            config = TrainingConfig(workload=self.workload, scheme=scheme, iterations=1, check_memory=False,
                                    compress_elements_per_s=self.compress_elements_per_s)
            self._sims[scheme] = TrainingSimulator(self.cluster, config)
        return self._sims[scheme]

    def step(self, scheme: str, model: CostModel, ranks: int, ratio: float) -> dict[str, float]:
        """One iteration's times (s) and the rank's memory (bytes), as the simulator's analytical twin."""
        sim = self.simulator(scheme)
        priced = overlapped_iteration(sim, bucket_exchange_seconds(sim, model, int(ranks), float(ratio)))
        return {**priced, "memory_bytes": sim.memory_bytes}


def step_columns(frame: pd.DataFrame, pricer: StepPricer, models: dict[float, CostModel]) -> pd.DataFrame:
    """The step of every row of one model's what-if table (``scheme``, ``ranks``, ``ratio`` and the
    ``bandwidth_Bps`` keying ``models``): compute, device work, exposed exchange, step, memory, fits."""
    device = pricer.cluster.device
    priced: dict[tuple, dict[str, float]] = {}
    rows = []
    for scheme, ranks, ratio, bandwidth in zip(frame["scheme"], frame["ranks"], frame["ratio"],
                                               frame["bandwidth_Bps"], strict=True):
        ratio = float(ratio) if str(scheme).startswith("topk") else 1.0  # only Top-k keeps a fraction
        key = (scheme, int(ranks), ratio, float(bandwidth))
        if key not in priced:
            priced[key] = pricer.step(scheme, models[float(bandwidth)], int(ranks), ratio)
        rows.append(priced[key])
    steps = pd.DataFrame(rows, index=frame.index)
    return pd.DataFrame({
        "batch_per_gpu": pricer.workload.batch_per_rank,
        "step_seconds": steps["time_s"],
        "step_compute_seconds": steps["compute_s"],
        "step_device_work_seconds": steps["compression_s"],
        "step_exposed_exchange_seconds": steps["exposed_comm_s"],
        "memory_GB": steps["memory_bytes"] / 1e9,
        "fits_memory": steps["memory_bytes"] <= device.memory_bytes,
    }, index=frame.index)


def rank_schemes(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``seconds``, ``speedup_vs_dense``, ``best_scheme`` and ``is_best`` by the step where the table has one
    (schemes that do not fit the device's memory never win), else by the exchange; the exchange's own ranking
    kept as ``exchange_*`` columns. ``ranked_by`` says which."""
    table = table.copy()
    table["exchange_seconds"] = table["seconds"]
    has_step = "step_seconds" in table
    exchange_dense = _per_config(table, keys, "exchange_seconds", "dense")
    table["exchange_speedup_vs_dense"] = exchange_dense / table["exchange_seconds"]
    table["exchange_best_scheme"] = _best(table, keys, "exchange_seconds", None)
    if has_step:
        table["seconds"] = table["step_seconds"]
    table["ranked_by"] = "training step" if has_step else "exchange"
    table["speedup_vs_dense"] = _per_config(table, keys, "seconds", "dense") / table["seconds"]
    table["best_scheme"] = _best(table, keys, "seconds", "fits_memory" if has_step else None)
    table["is_best"] = table["best_scheme"] == table["scheme"]
    return table


def _per_config(table: pd.DataFrame, keys: list[str], column: str, scheme: str) -> np.ndarray:
    """``column`` of ``scheme``'s row of each row's configuration."""
    mine = table[table["scheme"] == scheme].set_index(keys)[column]
    return mine.reindex(pd.MultiIndex.from_frame(table[keys])).to_numpy()


def _best(table: pd.DataFrame, keys: list[str], column: str, allowed: str | None) -> np.ndarray:
    """The fastest scheme of each row's configuration among the allowed rows; "none fits" where none is."""
    candidates = table if allowed is None else table[table[allowed]]
    best = candidates.loc[candidates.groupby(keys, sort=False)[column].idxmin()].set_index(keys)["scheme"]
    found = best.reindex(pd.MultiIndex.from_frame(table[keys]))
    return found.fillna("none fits").to_numpy()


def accuracy_cost(scheme: str, ratio: float) -> str:
    """What the project measured a scheme to cost in final accuracy at this ratio, in points against dense
    (the Fashion-MNIST reproduction), or :data:`NOT_PRICED`."""
    if scheme == "dense":
        return "none (the reference)"
    measured = [row for row in _accuracy_rows() if row["scheme"] == scheme
                and math.isclose(float(row["ratio"]), ratio, rel_tol=1e-6)]
    if not measured:
        return NOT_PRICED
    parts = []
    for row in measured:
        drop = float(row["final_percent"]) - float(row["dense_final_percent"])
        parts.append(f"{drop:+.1f} points ({row['model']}, {row['seeds']} seeds)")
    return "measured on Fashion-MNIST: " + "; ".join(parts)


@functools.cache
def _accuracy_rows() -> tuple[dict[str, str], ...]:
    return tuple(reference_rows(ACCURACY_REFERENCE))
