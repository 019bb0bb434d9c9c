"""Training workloads (model + offline data + metadata) for emulated and real data-parallel runs.

Each also hands the cost model its per-layer sizes and FLOPs (:meth:`Workload.spec`), so the
simulator, the emulator and the real backend all talk about the same network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexcomm._lazy import lazy_getattr

#: public name -> defining module; loaded on first use so that ``flexcomm.workloads.names`` stays torch-free
_LAZY: dict[str, str] = {
    **dict.fromkeys(["TensorData", "batch_stream", "batches", "shard", "shard_indices", "steps_per_epoch"],
                    "flexcomm.workloads.data"),
    **dict.fromkeys(["ECA", "MLP", "ECAResNet", "LSTMClassifier", "ResNet", "TransformerClassifier",
                     "eca_kernel_size"], "flexcomm.workloads.models"),
    **dict.fromkeys(["Workload", "get_workload", "workload_names"], "flexcomm.workloads.registry"),
    **dict.fromkeys(["TrainResult", "evaluate", "train"], "flexcomm.workloads.training"),
}

__all__ = [
    "ECA",
    "MLP",
    "ECAResNet",
    "LSTMClassifier",
    "ResNet",
    "TensorData",
    "TrainResult",
    "TransformerClassifier",
    "Workload",
    "batch_stream",
    "batches",
    "eca_kernel_size",
    "evaluate",
    "get_workload",
    "shard",
    "shard_indices",
    "steps_per_epoch",
    "train",
    "workload_names",
]

__getattr__ = lazy_getattr("flexcomm.workloads", _LAZY, globals())

if TYPE_CHECKING:
    from flexcomm.workloads.data import TensorData, batch_stream, batches, shard, shard_indices, steps_per_epoch
    from flexcomm.workloads.models import (
        ECA,
        MLP,
        ECAResNet,
        LSTMClassifier,
        ResNet,
        TransformerClassifier,
        eca_kernel_size,
    )
    from flexcomm.workloads.registry import Workload, get_workload, workload_names
    from flexcomm.workloads.training import TrainResult, evaluate, train
