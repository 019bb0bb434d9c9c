"""The embedded default study: which gradient exchange is fastest, where, and by how much.

For each model size it prices dense ring allreduce, Top-k over Allgather and Allreduce-compatible
Top-k over a grid of compression ratios, bandwidths, latencies and rank counts (or, given a
cluster, over that cluster's own links at every rank count it can hold). Every configuration is
one vectorised call of the shared cost model, so the whole default grid (~200k predictions)
takes well under a second; the CSV and the plots take the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from flexcomm.costmodel.compressed import SCHEMES, SchemeAlgorithms, SparsePayload, scheme_coefficients
from flexcomm.costmodel.compute import V100_TOPK_ELEMENTS_PER_S
from flexcomm.costmodel.model import CostModel

if TYPE_CHECKING:
    from flexcomm.costmodel.cluster import Cluster

#: Model sizes of the default study (parameters): ResNet-50, VGG-16 and a 1.3B transformer.
DEFAULT_MODELS: dict[str, float] = {"resnet50": 25.557e6, "vgg16": 138.36e6, "transformer-1.3b": 1.3e9}


@dataclass
class WhatIfGrid:
    """Axes of the sweep; every combination is priced for every model and scheme."""

    models: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    ratios: np.ndarray = field(default_factory=lambda: np.logspace(-1, -4, 13))
    bandwidths_Bps: np.ndarray = field(default_factory=lambda: np.logspace(0, 2, 11) * 1.25e8)  # 1..100 Gbit/s
    latencies_s: np.ndarray = field(default_factory=lambda: np.array([1e-6, 1e-5, 1e-4, 1e-3, 1e-2]))
    ranks: np.ndarray = field(default_factory=lambda: 2 ** np.arange(1, 11))  # 2..1024
    payload: SparsePayload = field(default_factory=SparsePayload)
    algorithms: SchemeAlgorithms = field(default_factory=SchemeAlgorithms)
    reduce_gamma_s_per_byte: float = 0.0
    #: Top-k selection throughput in gradient elements per second, or 0 for free compression.
    #: Default from Tyagi & Swany 2023's V100 measurements: layer-wise Top-k took ~14 ms for
    #: ResNet-18's 11.7M and ~36 ms for ResNet-50's 25.6M elements (~0.75e9 elements/s), nearly
    #: constant in the ratio, so it is priced as numel / throughput whatever the ratio.
    compress_elements_per_s: float = V100_TOPK_ELEMENTS_PER_S

    def size(self) -> int:
        return (len(self.models) * len(self.ratios) * len(self.bandwidths_Bps) * len(self.latencies_s)
                * len(self.ranks) * len(SCHEMES))


def _link_grid(grid: WhatIfGrid) -> pd.DataFrame:
    ratio, bandwidth, latency, ranks = np.meshgrid(
        grid.ratios, grid.bandwidths_Bps, grid.latencies_s, grid.ranks, indexing="ij"
    )
    return pd.DataFrame({
        "ratio": ratio.ravel(), "bandwidth_Bps": bandwidth.ravel(), "latency_s": latency.ravel(),
        "ranks": ranks.ravel().astype(int),
    })


def _cluster_grid(grid: WhatIfGrid, cluster: Cluster) -> pd.DataFrame:
    world = cluster.world_size
    ranks = sorted({int(r) for r in grid.ranks if r <= world} | {world})
    model = CostModel.from_cluster(cluster)
    rows = []
    for p in ranks:
        _, link = model.group_link(p)
        for ratio in grid.ratios:
            rows.append({"ratio": ratio, "bandwidth_Bps": 1.0 / link.beta, "latency_s": link.alpha, "ranks": p})
    return pd.DataFrame(rows)


def _compress_seconds(grid: WhatIfGrid, scheme: str, numel: float) -> float:
    if scheme == "dense" or grid.compress_elements_per_s <= 0:
        return 0.0
    return numel / grid.compress_elements_per_s


def run_whatif(
    grid: WhatIfGrid | None = None, cluster: Cluster | None = None, shard: tuple[int, int] = (0, 1)
) -> pd.DataFrame:
    """A tidy table: one row per (model, scheme, ratio, bandwidth, latency, ranks) with its time.

    ``seconds`` = communication (the cost model) + compression (Top-k selection, see the grid).
    ``shard=(k, n)`` keeps every n-th configuration starting at k, so n machines can split a sweep
    and their CSVs concatenate into exactly the unsharded table.
    """
    grid = grid or WhatIfGrid()
    configs = _cluster_grid(grid, cluster) if cluster is not None else _link_grid(grid)
    index, count = shard
    configs = configs.iloc[index::count].reset_index(drop=True)  # shard K of N: every N-th configuration
    alpha = configs["latency_s"].to_numpy()
    beta = 1.0 / configs["bandwidth_Bps"].to_numpy()
    ranks = configs["ranks"].to_numpy(dtype=float)
    ratio = configs["ratio"].to_numpy()
    frames = []
    for model_name, params in grid.models.items():
        times, compress = {}, {}
        for scheme in SCHEMES:
            cost = scheme_coefficients(scheme, params, ranks, ratio, grid.payload, grid.algorithms).time(
                alpha, beta, grid.reduce_gamma_s_per_byte)
            times[scheme] = cost
            compress[scheme] = np.full_like(cost.total, _compress_seconds(grid, scheme, params))
        stacked = np.vstack([times[s].total + compress[s] for s in SCHEMES])
        best = np.array(SCHEMES)[np.argmin(stacked, axis=0)]
        dense = times["dense"].total + compress["dense"]
        for scheme in SCHEMES:
            frame = configs.copy()
            frame.insert(0, "model", model_name)
            frame.insert(1, "params", params)
            frame.insert(2, "scheme", scheme)
            frame["seconds"] = times[scheme].total + compress[scheme]
            frame["communication_seconds"] = times[scheme].total
            frame["compression_seconds"] = compress[scheme]
            frame["latency_seconds"] = times[scheme].latency
            frame["bandwidth_seconds"] = times[scheme].bandwidth
            frame["compute_seconds"] = times[scheme].compute
            frame["speedup_vs_dense"] = dense / frame["seconds"].to_numpy()
            frame["best_scheme"] = best
            frame["is_best"] = best == scheme
            frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    table["bandwidth_gbit_s"] = table["bandwidth_Bps"] * 8 / 1e9
    return table


def winners(table: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: the fastest scheme, its time and its speedup over dense and runner-up."""
    keys = ["model", "ratio", "bandwidth_Bps", "latency_s", "ranks"]
    ordered = table.sort_values(keys + ["seconds"])
    first = ordered.groupby(keys, sort=False).nth(0).set_index(keys)
    second = ordered.groupby(keys, sort=False).nth(1).set_index(keys)
    out = first[["scheme", "seconds", "speedup_vs_dense"]].rename(columns={"scheme": "best_scheme"})
    out["runner_up"] = second["scheme"]
    out["margin_over_runner_up"] = second["seconds"] / first["seconds"]
    return out.reset_index()
