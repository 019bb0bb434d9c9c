"""Training workloads (model + offline data + metadata) for emulated and real data-parallel runs.

Each also hands the cost model its per-layer sizes and FLOPs (:meth:`Workload.spec`), so the
simulator, the emulator and the real backend all talk about the same network.
"""

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
