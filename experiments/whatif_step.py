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
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.gradient_exchange import GradientScheme
from flexcomm.sim.training import TrainingSimulator, bucket_exchange_seconds, overlapped_iteration
from flexcomm.sim.training_config import TrainingConfig, smallest_device
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
    # simulate's rule: the smallest device of the ranks' nodes holds the state
    limit = {r: smallest_device(pricer.cluster, int(r)).memory_bytes for r in frame["ranks"].unique()}
    return pd.DataFrame({
        "batch_per_gpu": pricer.workload.batch_per_rank,
        "step_seconds": steps["time_s"],
        "step_compute_seconds": steps["compute_s"],
        "step_device_work_seconds": steps["compression_s"],
        "step_exposed_exchange_seconds": steps["exposed_comm_s"],
        "memory_GB": steps["memory_bytes"] / 1e9,
        "fits_memory": steps["memory_bytes"] <= frame["ranks"].map(limit),
    }, index=frame.index)


def rank_schemes(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``seconds``, ``speedup_vs_dense``, ``best_scheme`` and ``is_best`` by the step where the table has one
    (schemes that do not fit the device's memory never win), else by the exchange; the exchange's own ranking
    kept as ``exchange_*`` columns. ``ranked_by`` says which. Configurations are numbered once and ranked with
    numpy: the default link sweep has 87,750 rows, which pandas' grouping per column made 0.1 s of a 0.06 s
    pricing."""
    table = table.copy()
    config = table.groupby(keys, sort=False).ngroup().to_numpy()
    schemes = table["scheme"].to_numpy()
    table["exchange_seconds"] = table["seconds"]
    has_step = "step_seconds" in table
    exchange = table["exchange_seconds"].to_numpy(dtype=float)
    table["exchange_speedup_vs_dense"] = _dense_of(exchange, schemes, config) / exchange
    table["exchange_best_scheme"] = _fastest(exchange, schemes, config)
    if has_step:
        table["seconds"] = table["step_seconds"]
    table["ranked_by"] = "training step" if has_step else "exchange"
    seconds = table["seconds"].to_numpy(dtype=float)
    table["speedup_vs_dense"] = _dense_of(seconds, schemes, config) / seconds
    allowed = table["fits_memory"].to_numpy(dtype=bool) if has_step else None
    table["best_scheme"] = _fastest(seconds, schemes, config, allowed)
    table["is_best"] = table["best_scheme"] == table["scheme"]
    return table


def _dense_of(values: np.ndarray, schemes: np.ndarray, config: np.ndarray) -> np.ndarray:
    """Each row's configuration's value for the dense scheme."""
    per_config = np.full(config.max() + 1 if len(config) else 0, np.nan)
    dense = schemes == "dense"
    per_config[config[dense]] = values[dense]
    return per_config[config]


def _fastest(values: np.ndarray, schemes: np.ndarray, config: np.ndarray,
             allowed: np.ndarray | None = None) -> np.ndarray:
    """The scheme of each row's configuration with the smallest value among the allowed rows (the first in
    table order on a tie, as ``idxmin``); "none fits" where no row is allowed."""
    values = values if allowed is None else np.where(allowed, values, np.inf)
    order = np.lexsort((values, config))  # by configuration, then value; stable, so ties keep table order
    first = order[np.r_[True, config[order][1:] != config[order][:-1]]] if len(order) else order
    winner = np.where(np.isfinite(values[first]) | (allowed is None), schemes[first], "none fits")
    per_config = np.empty(len(first), dtype=object)
    per_config[config[first]] = winner
    return per_config[config]


def accuracy_costs(schemes: pd.Series, ratios: pd.Series) -> np.ndarray:
    """:func:`accuracy_cost` of every row (Top-k at its ratio, other schemes at none), worked out once per
    distinct (scheme, ratio): a sweep repeats a few of them over many rows (87,750 in the default one)."""
    effective = ratios.astype(float).where(schemes.str.startswith("topk"), 1.0)
    pairs = pd.MultiIndex.from_arrays([schemes.to_numpy(), effective.to_numpy()])
    distinct = pairs.unique()
    known = pd.Series([accuracy_cost(scheme, ratio) for scheme, ratio in distinct], index=distinct)
    return known.reindex(pairs).to_numpy()


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


def exchange_lines(exchange: GradientScheme) -> list[str]:
    """What a plan priced for a compressed data-parallel exchange and its measured accuracy cost (none for dense):
    the line ``flexcomm plan --scheme`` prints under its plans."""
    if exchange.dense:
        return []
    ratio = f" at ratio {exchange.ratio:g}" if exchange.scheme.startswith("topk") else ""
    return [f"data-parallel exchange: {exchange.scheme}{ratio} (its calls, device work and error-feedback memory "
            f"priced in every plan); accuracy cost: {accuracy_cost(exchange.scheme, exchange.ratio if ratio else 1.0)}"]


@functools.cache
def _accuracy_rows() -> tuple[dict[str, str], ...]:
    return tuple(reference_rows(ACCURACY_REFERENCE))
