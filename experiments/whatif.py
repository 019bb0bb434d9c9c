"""The embedded default study: which gradient exchange is fastest, where, and by how much.

For each model size it prices dense ring allreduce, Top-k over Allgather and Allreduce-compatible
Top-k over a grid of compression ratios, bandwidths, latencies and rank counts (or, given a
cluster, over that cluster's own links at every rank count it can hold). Every configuration is
one vectorised call of the shared cost model, so the whole default grid (~300k predictions)
takes well under a second; the CSV and the plots take the rest. The bandwidths reach NVLink's
(1 Gbit/s to 3.2 Tbit/s), so GPU fabrics sit inside the maps, not beyond them.

On a cluster with a ``gpu_fabric`` the study is the one a GPU user asks: every scheme, the dense
baseline included, is priced call by call as NCCL runs it (:meth:`CostModel.scheme_choices`), over
the rank counts the cluster holds and a sweep of its NIC speed (10-800 Gbit/s and its own), with
PowerSGD and fp16/bf16 beside the Top-k exchanges, their device work priced per scheme
(:mod:`costmodel.compression_compute`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from flexcomm.costmodel.collective_libraries.topology import packs_evenly
from flexcomm.costmodel.compressed import (
    PRICED_SCHEMES,
    SCHEMES,
    SchemeAlgorithms,
    SparsePayload,
    powersgd_sides,
    scheme_coefficients,
)
from flexcomm.costmodel.compression_compute import device_compression_seconds
from flexcomm.costmodel.compute import MODEL_ZOO, V100_TOPK_ELEMENTS_PER_S, get_model
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_time
from flexcomm.experiments.whatif_step import (
    StepPricer,
    accuracy_costs,
    rank_schemes,
    step_columns,
)
from flexcomm.sim.workload import TrainingWorkload, get_training_workload, workload_names
from flexcomm.workloads.names import FACTORY_FORM

if TYPE_CHECKING:
    from flexcomm.costmodel.cluster import Cluster

#: Model sizes of the default study (parameters): ResNet-50, VGG-16 and a 1.3B transformer.
DEFAULT_MODELS: dict[str, float] = {"resnet50": 25.557e6, "vgg16": 138.36e6, "transformer-1.3b": 1.3e9}


#: NIC speeds a GPU cluster's study sweeps (Gbit/s): 10/25 GbE to NDR 400G and XDR 800G.
NIC_SWEEP_GBIT = (10.0, 25.0, 50.0, 100.0, 200.0, 400.0, 800.0)


@dataclass
class WhatIfGrid:
    """Axes of the sweep; every combination is priced for every model and scheme."""

    models: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    #: per-layer parameter counts of models the zoo does not hold (a user's ``module:factory``): PowerSGD's matrices
    layers: dict[str, list[float]] = field(default_factory=dict)
    #: the training job of each model (layers, batch per GPU) that a cluster's step is priced on, as simulate
    #: prices it; a model left out is the zoo's of that name
    workloads: dict[str, TrainingWorkload] = field(default_factory=dict)
    ratios: np.ndarray = field(default_factory=lambda: np.logspace(-1, -4, 13))
    bandwidths_Bps: np.ndarray = field(default_factory=lambda: np.logspace(0, 3.5, 15) * 1.25e8)  # 1..3162 Gbit/s
    latencies_s: np.ndarray = field(default_factory=lambda: np.array([1e-6, 1e-5, 1e-4, 1e-3, 1e-2]))
    ranks: np.ndarray = field(default_factory=lambda: 2 ** np.arange(1, 11))  # 2..1024
    payload: SparsePayload = field(default_factory=SparsePayload)
    algorithms: SchemeAlgorithms = field(default_factory=SchemeAlgorithms)
    reduce_gamma_s_per_byte: float = 0.0
    #: Top-k selection throughput in gradient elements per second, or 0 for free compression.
    #: Default from Tyagi & Swany 2023's V100 measurements: layer-wise Top-k took ~14 ms for
    #: ResNet-18's 11.7M and ~36 ms for ResNet-50's 25.6M elements (~0.75e9 elements/s), nearly
    #: constant in the ratio, so it is priced as numel / throughput whatever the ratio.
    #: Top-k selection rate (elements/s); None: V100's, or on a GPU cluster its device's; 0: free
    compress_elements_per_s: float | None = None

    #: with a gpu_fabric cluster: the NIC speeds swept (bytes/s per NIC; the cluster's own is added)
    nic_bandwidths_Bps: np.ndarray = field(default_factory=lambda: np.array(NIC_SWEEP_GBIT) * 1.25e8)

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
    rate = V100_TOPK_ELEMENTS_PER_S if grid.compress_elements_per_s is None else grid.compress_elements_per_s
    if scheme == "dense" or rate <= 0:
        return 0.0
    return numel / rate


def run_whatif(
    grid: WhatIfGrid | None = None, cluster: Cluster | None = None, shard: tuple[int, int] = (0, 1)
) -> pd.DataFrame:
    """A tidy table: one row per (model, scheme, ratio, bandwidth, latency, ranks) with its time.

    ``seconds`` = communication (the cost model) + compression (Top-k selection, see the grid).
    ``shard=(k, n)`` keeps every n-th configuration starting at k, so n machines can split a sweep
    and their CSVs concatenate into exactly the unsharded table.
    """
    grid = grid or WhatIfGrid()
    if cluster is not None and cluster.gpu_fabric is not None:
        return run_library_whatif(grid, cluster, shard)
    configs = _cluster_grid(grid, cluster) if cluster is not None else _link_grid(grid)
    index, count = shard
    configs = configs.iloc[index::count].reset_index(drop=True)  # shard K of N: every N-th configuration
    alpha = configs["latency_s"].to_numpy()
    beta = 1.0 / configs["bandwidth_Bps"].to_numpy()
    ranks = configs["ranks"].to_numpy(dtype=float)
    ratio = configs["ratio"].to_numpy()
    # with a cluster, a device to compute on: the step, as simulate prices it on these links
    link_model = CostModel.from_cluster(cluster, gamma=grid.reduce_gamma_s_per_byte) if cluster is not None else None
    frames = []
    for model_name, params in grid.models.items():
        per_scheme = []
        for scheme in SCHEMES:
            cost = scheme_coefficients(scheme, params, ranks, ratio, grid.payload, grid.algorithms).time(
                alpha, beta, grid.reduce_gamma_s_per_byte)
            compress = np.full_like(cost.total, _compress_seconds(grid, scheme, params))
            frame = configs.copy()
            frame.insert(0, "model", model_name)
            frame.insert(1, "params", params)
            frame.insert(2, "scheme", scheme)
            frame["seconds"] = cost.total + compress
            frame["communication_seconds"] = cost.total
            frame["compression_seconds"] = compress
            frame["latency_seconds"] = cost.latency
            frame["bandwidth_seconds"] = cost.bandwidth
            frame["compute_seconds"] = cost.compute
            per_scheme.append(frame)
        frame = pd.concat(per_scheme, ignore_index=True)
        if link_model is not None:
            steps = step_columns(frame, _pricer(grid, cluster, model_name),
                                 {float(b): link_model for b in frame["bandwidth_Bps"].unique()})
            frame = pd.concat([frame, steps], axis=1)
        frames.append(frame)
    return _finish(pd.concat(frames, ignore_index=True))


RANK_KEYS = ["model", "ratio", "bandwidth_Bps", "latency_s", "ranks"]  #: what one configuration is


def _finish(table: pd.DataFrame) -> pd.DataFrame:
    """Rank the schemes of every configuration (by the step where there is one) and say their accuracy cost."""
    table = rank_schemes(table, RANK_KEYS)
    table["accuracy_cost"] = accuracy_costs(table["scheme"], table["ratio"])
    table["bandwidth_gbit_s"] = table["bandwidth_Bps"] * 8 / 1e9
    return table


def _pricer(grid: WhatIfGrid, cluster: Cluster, model_name: str) -> StepPricer:
    workload = grid.workloads.get(model_name) or get_training_workload(model_name)  # the default models: zoo's
    rate = grid.compress_elements_per_s
    return StepPricer(cluster, workload, None if rate is None else (rate if rate > 0 else math.inf))


def _nic_grid(grid: WhatIfGrid, cluster: Cluster) -> pd.DataFrame:
    """(ranks, NIC bandwidth, ratio) for a GPU cluster: every rank count of the grid it holds as whole NVLink
    domains (or within one; NCCL's model describes those), the whole cluster, one node's ranks only once
    (NVLink does not see the NIC), and the swept NIC speeds plus its own."""
    world, per_node = cluster.world_size, cluster.devices_per_node
    ranks = sorted(r for r in {int(r) for r in grid.ranks if 2 <= r <= world} | {world} if packs_evenly(cluster, r))
    own = float(cluster.inter_link.bandwidth_Bps)
    speeds = sorted({float(b) for b in grid.nic_bandwidths_Bps} | {own})
    rows = []
    for p in ranks:
        for bandwidth in (speeds if p > per_node else [own]):
            for ratio in grid.ratios:
                rows.append({"ratio": float(ratio), "bandwidth_Bps": bandwidth,
                             "latency_s": float(cluster.inter_link.latency_s), "ranks": p,
                             "fabric_nic": bandwidth == own})
    return pd.DataFrame(rows)


def _layer_params(model_name: str, grid: WhatIfGrid | None = None) -> list[float] | None:
    """The parameter counts of a model flexcomm knows layer by layer (PowerSGD's matrices); None otherwise."""
    if grid is not None and model_name in grid.layers:
        return grid.layers[model_name]
    if model_name not in MODEL_ZOO:
        return None
    return [float(layer.params) for layer in get_model(model_name).layers if layer.params > 0]


def grid_models(names: list[str], batch_per_rank: float | None = None
                ) -> tuple[dict[str, float], dict[str, list[float]], dict[str, TrainingWorkload]]:
    """Parameters, per-layer parameters and the training job of each model named: a zoo model, a workloads
    package model or ``module:factory`` / ``file.py:factory`` (the user's own, counted off the module), each
    read as ``simulate --workload`` reads it (``batch_per_rank`` as its ``--batch``, default the workload's),
    so both count the same parameters and price the same step."""
    params: dict[str, float] = {}
    layers: dict[str, list[float]] = {}
    workloads: dict[str, TrainingWorkload] = {}
    for name in names:
        try:
            workload = get_training_workload(name, batch_per_rank)
        except InputError as error:
            if error.field != "workload":
                raise
            raise InputError("model", name, "one of " + ", ".join(workload_names())
                             + f", or your model as {FACTORY_FORM}") from None
        spec = workload.model
        params[spec.name] = float(spec.params)
        layers[spec.name] = [float(layer.params) for layer in spec.layers if layer.params > 0]
        workloads[spec.name] = workload
    return params, layers, workloads


def _with_nic(cluster: Cluster, bandwidth_Bps: float) -> Cluster:
    link = cluster.inter_link.model_copy(update={"bandwidth_Bps": bandwidth_Bps})
    return cluster.model_copy(update={"inter_link": link})


def run_library_whatif(grid: WhatIfGrid, cluster: Cluster, shard: tuple[int, int] = (0, 1)) -> pd.DataFrame:
    """The study on a GPU cluster (see the module doc): one row per (model, scheme, ratio, NIC speed,
    ranks), every exchange priced call by call as NCCL runs it, plus ``nccl_runs`` (what it ran)."""
    configs = _nic_grid(grid, cluster)
    index, count = shard
    configs = configs.iloc[index::count].reset_index(drop=True)
    models = {bw: CostModel.from_cluster(_with_nic(cluster, bw), gamma=grid.reduce_gamma_s_per_byte)
              for bw in configs["bandwidth_Bps"].unique()}
    library = SchemeAlgorithms(library="nccl", index_owner=grid.algorithms.index_owner,
                               powersgd_rank=grid.algorithms.powersgd_rank)
    device = cluster.device
    frames = []
    for model_name, params in grid.models.items():
        layers = _layer_params(model_name, grid)
        payload = replace(grid.payload, matrix_sides=None if layers is None else powersgd_sides(layers))
        priced: dict[tuple[str, float, int, float], tuple[float, float, float, str]] = {}
        columns: dict[str, list] = {k: [] for k in ("scheme", "comm", "lat", "bw", "red", "runs", "compress")}
        for scheme in PRICED_SCHEMES:
            rate = grid.compress_elements_per_s
            topk_rate = None if rate is None else (rate if rate > 0 else float("inf"))
            compress = device_compression_seconds(scheme, params, device, topk_rate, library.powersgd_rank,
                                                  matrices=layers)
            for row in configs.itertuples(index=False):
                ratio = row.ratio if scheme.startswith("topk") else 1.0
                key = (scheme, row.bandwidth_Bps, row.ranks, ratio)
                if key not in priced:
                    calls = models[row.bandwidth_Bps].scheme_choices(scheme, params, row.ranks, ratio, payload,
                                                                     library)
                    priced[key] = (sum(c.latency_s for _, c in calls), sum(c.bandwidth_s for _, c in calls),
                                   sum(grid.reduce_gamma_s_per_byte * m.extra_reduce_bytes for m, _ in calls),
                                   " + ".join(c.label for _, c in calls))
                lat, bw, red, runs = priced[key]
                for name, value in (("scheme", scheme), ("comm", lat + bw + red), ("lat", lat), ("bw", bw),
                                    ("red", red), ("runs", runs), ("compress", compress)):
                    columns[name].append(value)
        frame = pd.concat([configs] * len(PRICED_SCHEMES), ignore_index=True)
        frame.insert(0, "model", model_name)
        frame.insert(1, "params", params)
        frame.insert(2, "scheme", columns["scheme"])
        comm, compress = np.array(columns["comm"]), np.array(columns["compress"])
        frame["seconds"] = comm + compress
        frame["communication_seconds"] = comm
        frame["compression_seconds"] = compress
        frame["latency_seconds"] = columns["lat"]
        frame["bandwidth_seconds"] = columns["bw"]
        frame["compute_seconds"] = columns["red"]
        frame["nccl_runs"] = columns["runs"]
        steps = step_columns(frame, _pricer(grid, cluster, model_name), models)
        frames.append(pd.concat([frame, steps], axis=1))
    return _finish(pd.concat(frames, ignore_index=True))


def where_compression_does_not_pay(table: pd.DataFrame) -> list[str]:
    """Plain sentences per model, ranked by the training step: at the cluster's own NIC speed, the fastest
    step per rank count and each compressed scheme that never shortens it and why (with what its exchange
    alone would have suggested), schemes that do not fit the device's memory; over the NIC sweep, where
    compression starts to pay; and what the project measured of their accuracy cost."""
    lines = []
    own = table[table["fabric_nic"]] if "fabric_nic" in table else table
    for model_name, rows in own.groupby("model", sort=False):
        dense = rows[rows["scheme"] == "dense"]
        lines.append(f"{model_name} (batch {rows['batch_per_gpu'].iloc[0]:g} per GPU): dense step "
                     f"{_span(dense['step_seconds'])}, of which the exchange exposes at most "
                     f"{format_time(float(dense['step_exposed_exchange_seconds'].max()))}")
        for scheme in [s for s in rows["scheme"].unique() if s != "dense"]:
            mine = rows[rows["scheme"] == scheme]
            if not mine["fits_memory"].any():
                lines.append(f"  {scheme}: does not fit ({mine['memory_GB'].min():.1f} GB per GPU with its error "
                             "feedback)")
            elif not (mine["speedup_vs_dense"] > 1).any():
                exchange = float(mine["exchange_speedup_vs_dense"].max())
                hidden = (f"; its exchange alone is up to {exchange:.2f}x dense's, but the backward hides dense's"
                          if exchange > 1 else "")
                lines.append(f"  {scheme}: never shortens the step, its device work "
                             f"({format_time(float(mine['step_device_work_seconds'].min()))}) is on the critical "
                             f"path{hidden}")
        lines.append("  fastest step per rank count: " + _fastest_by(rows, "ranks", lambda v: f"{int(v)}"))
        if "fabric_nic" in table:
            sweep = table[(table["model"] == model_name) & (table["ranks"] == table["ranks"].max())]
            if sweep["bandwidth_Bps"].nunique() > 1:
                lines.append(f"  at {int(sweep['ranks'].iloc[0])} ranks by NIC speed: "
                             + _fastest_by(sweep, "bandwidth_gbit_s", lambda v: f"{v:g}G"))
    lines += _accuracy_lines(own)
    return lines


def _span(values: pd.Series) -> str:
    low, high = format_time(float(values.min())), format_time(float(values.max()))
    return low if low == high else f"{low}-{high}"


def _fastest_by(rows: pd.DataFrame, column: str, label) -> str:
    """The fastest fitting scheme at each value of ``column`` and its step's speedup over dense."""
    fitting = rows[rows["fits_memory"]]
    if fitting.empty:
        return "nothing fits"
    best = fitting.loc[fitting.groupby(column)["seconds"].idxmin()]
    return ", ".join(f"{label(getattr(r, column))} {r.scheme}"
                     + ("" if r.scheme == "dense" else f" {r.speedup_vs_dense:.2f}x") for r in best.itertuples())


def _accuracy_lines(table: pd.DataFrame) -> list[str]:
    measured = table[table["accuracy_cost"].str.startswith("measured")]
    at = {s: sorted(set(rows["ratio"].round(6)), reverse=True) for s, rows in measured.groupby("scheme")}
    unpriced = [s for s in table["scheme"].unique() if s != "dense" and s not in at]
    parts = [f"{s} measured on Fashion-MNIST at c = {', '.join(f'{r:g}' for r in ratios)} (column accuracy_cost)"
             for s, ratios in at.items()]
    if unpriced:
        parts.append(f"{', '.join(unpriced)} not priced")
    return ["accuracy: " + "; ".join(parts)] if parts else []


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
