"""A data-parallel training job's settings and their checks: what to train, how gradients are exchanged, which
ranks straggle, and whether the job fits its devices.

Why a module of its own: the commands, the Python API and the what-if read and check these settings without
running the simulator (:mod:`sim.training`), so they should not need its event engine to do so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.collective_libraries.algorithms import is_nccl_algorithm
from flexcomm.costmodel.compressed import PRICED_SCHEMES, SchemeAlgorithms, SparsePayload, scheme_memory_bytes
from flexcomm.costmodel.compute import ModelSpec
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_SIM_ITERATIONS
from flexcomm.costmodel.training_state import state_bytes_per_param
from flexcomm.sim.buckets import DEFAULT_BUCKET_CAP, Bucket
from flexcomm.sim.collectives import GRANULARITIES
from flexcomm.sim.workload import TrainingWorkload


@dataclass(frozen=True)
class TrainingConfig:
    """What to train and how gradients are exchanged (faults: :class:`sim.faults.FaultPolicy`).

    ``ranks``: ranks 0..ranks-1 of the cluster (default all). ``algorithm``: the allreduce (``ring``,
    ``tree``, ``rabenseifner``, ``recursive-doubling``, or ``hierarchical`` for dense). ``granularity``
    ``auto`` simulates ring phases step by step only when network dynamics are attached (see
    :mod:`sim.collectives`). ``optimizer_s`` is the (unscaled) optimizer step after the last bucket.
    """

    workload: str | TrainingWorkload = "resnet50"
    iterations: int = 10
    ranks: int | None = None
    batch_per_rank: float | None = None
    scheme: str = "dense"
    ratio: float = 0.01
    algorithm: str = "auto"
    bucket_cap: float | str | None = DEFAULT_BUCKET_CAP
    bucket_count: int | None = None
    first_bucket_cap: float | str | None = None
    #: fraction of peak FLOP/s for the flat FLOP model; None: priced on the device (costmodel.device_compute)
    efficiency: float | None = None
    optimizer_s: float = 0.0
    gamma: float = 0.0
    #: Top-k selection rate; None: the device's (the V100 measurement scaled by HBM bandwidth)
    compress_elements_per_s: float | None = None
    stragglers: Mapping[int, float] = field(default_factory=dict)
    compute_jitter: float = 0.0
    granularity: str = "auto"
    seed: int = 0
    record_flows: bool = True
    #: refuse a job whose data-parallel state does not fit its devices (the what-if reports it instead)
    check_memory: bool = True

    def __post_init__(self) -> None:
        it = self.iterations
        if isinstance(it, bool) or not isinstance(it, (int, np.integer)) or it < 1:
            raise InputError("iterations", it, "an integer >= 1")
        MAX_SIM_ITERATIONS.check("iterations", it)
        if self.scheme not in PRICED_SCHEMES:
            raise InputError("scheme", self.scheme, "one of " + ", ".join(PRICED_SCHEMES))
        if self.scheme != "dense" and not (0 < self.ratio <= 1):
            raise InputError("ratio", self.ratio, "a fraction of elements kept in (0, 1]")
        if self.granularity != "auto" and self.granularity not in GRANULARITIES:
            raise InputError("granularity", self.granularity, "auto, " + ", ".join(GRANULARITIES))
        for name, value in (("optimizer", self.optimizer_s), ("gamma", self.gamma),
                            ("compute-jitter", self.compute_jitter)):
            if not (math.isfinite(value) and value >= 0):
                raise InputError(name, value, "a non-negative number")
        if self.compress_elements_per_s is not None and not self.compress_elements_per_s > 0:
            raise InputError("compress_elements_per_s", self.compress_elements_per_s, "a positive rate")
        for rank, factor in self.stragglers.items():
            if not (math.isfinite(factor) and factor > 0):
                raise InputError("straggler", f"{rank}={factor}", "RANK=FACTOR with a positive factor, e.g. 3=1.5")


# --- stragglers -----------------------------------------------------------------------------------


def parse_straggler(text: str) -> tuple[int, float]:
    """``"3=1.5"`` -> (3, 1.5): rank 3 computes 1.5x slower."""
    rank, sep, factor = str(text).partition("=")
    try:
        r, f = int(rank), float(factor)
    except ValueError:
        r, f = -1, math.nan
    if not sep or r < 0 or not (math.isfinite(f) and f > 0):
        raise InputError("straggler", text, "RANK=FACTOR or nodeN=FACTOR with a rank or node >= 0 and a positive "
                         "factor, e.g. 3=1.5 or node1=1.3")
    return r, f


def parse_stragglers(texts: str | Sequence[str], devices_per_node: int | None,
                     nodes: int | None = None) -> dict[int, float]:
    """``["3=1.5", "node1=1.3"]`` -> {rank: factor}: a rank, or every GPU of a node (a slow node is one flag,
    not one per GPU; ``nodes``, the cluster's count, checks N); a rank named twice keeps its slowest factor."""
    found: dict[int, float] = {}
    for text in [texts] if isinstance(texts, str) else texts:
        head, sep, factor = str(text).partition("=")
        if head.strip().lower().startswith("node"):
            if devices_per_node is None:
                raise InputError("straggler", text, "RANK=FACTOR here (nodeN=FACTOR needs a cluster's nodes)")
            last = f"node{nodes - 1}" if nodes else "nodeN"
            try:
                node, f = parse_straggler(f"{head.strip()[4:]}{sep}{factor}")
            except InputError:  # said with what the user wrote, not the rank form it was read as
                raise InputError("straggler", text, f"node0..{last}=FACTOR, a factor > 0") from None
            if nodes is not None and node >= nodes:
                raise InputError("straggler", text, f"node0..{last}=FACTOR (the cluster has {nodes} nodes)")
            ranks = range(node * devices_per_node, (node + 1) * devices_per_node)
        else:
            rank, f = parse_straggler(text)
            ranks = range(rank, rank + 1)
        for rank in ranks:
            found[rank] = max(found.get(rank, f), f)
    return found


# --- algorithms -----------------------------------------------------------------------------------


def default_algorithm(cluster: Cluster) -> str:
    """``auto``: ``nccl`` on a cluster with a ``gpu_fabric`` (what a GPU job runs), else the ring formula."""
    return "nccl" if cluster.gpu_fabric is not None else "ring"


def scheme_algorithms(algorithm: str) -> SchemeAlgorithms:
    """A job's ``--algorithm`` as a scheme's: a formula's allreduce, or every call through NCCL."""
    if is_nccl_algorithm(algorithm):
        return SchemeAlgorithms(library=algorithm)
    return SchemeAlgorithms(allreduce=algorithm)


# --- memory ---------------------------------------------------------------------------------------


def data_parallel_memory_bytes(model: ModelSpec, precision: str, scheme: str, buckets: Sequence[Bucket],
                               payloads: Sequence[SparsePayload]) -> float:
    """What every data-parallel rank keeps on its device beside activations: weights, gradients and Adam's
    moments (:func:`costmodel.training_state.state_bytes_per_param`) and the scheme's error-feedback memory.
    One count for ``simulate`` and ``whatif``, so neither prices a job that cannot be loaded."""
    state = float(model.params) * state_bytes_per_param(precision)
    return state + sum(scheme_memory_bytes(scheme, b.numel, payloads[b.index]) for b in buckets)


def smallest_device(cluster: Cluster, ranks: int):  # -> costmodel.cluster.Device
    """The device of least memory among the nodes ranks 0..ranks-1 run on: what a data-parallel job must fit."""
    dpn = cluster.devices_per_node
    return min((cluster.node_device(n) for n in range(-(-ranks // dpn))), key=lambda d: d.memory_bytes)


def check_data_parallel_memory(cluster: Cluster, ranks: int, workload: str, need_bytes: float) -> None:
    """Refuse a data-parallel job whose state alone does not fit the smallest device it runs on."""
    device = smallest_device(cluster, ranks)
    if need_bytes > device.memory_bytes:
        raise InputError("memory", f"{workload}: {need_bytes / 1e9:.1f} GB per GPU",
                         f"at most the {device.name}'s {device.memory_bytes / 1e9:.1f} GB: in data parallel every "
                         "GPU holds weights, gradients and Adam's moments (16 bytes a parameter, ZeRO SC'20 "
                         "section 3.1) and the scheme's error feedback, activations not counted; shard the model "
                         "(plan --model, simulate --llm-plan) or use devices with more memory")
