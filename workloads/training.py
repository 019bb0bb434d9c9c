"""Single-process reference training and evaluation.

The data-parallel backends (emulated and real) are judged against this: same model seed, same
data, the workload's own optimizer on one worker. It is also how the tests show each workload actually learns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from flexcomm.costmodel.errors import InputError
from flexcomm.workloads.data import TensorData, batch_stream

if TYPE_CHECKING:
    from flexcomm.workloads.registry import Workload

__all__ = ["evaluate", "train", "TrainResult"]


def evaluate(
    model: nn.Module,
    dataset: TensorData,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    batch_size: int = 512,
) -> tuple[float, float]:
    """(mean loss, accuracy) of ``model`` on ``dataset``, in eval mode, without gradients.

    Batched so a large synthetic test set never needs one huge activation tensor; the model's
    train/eval modes are restored afterwards so a training loop can call this mid-run.
    """
    if len(dataset) == 0:
        raise InputError("dataset", dataset, "a non-empty dataset")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError("batch_size", batch_size, "an integer >= 1")
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    modes = {m: m.training for m in model.modules()}
    total_loss, correct = 0.0, 0
    try:
        model.eval()
        with torch.no_grad():
            for begin in range(0, len(dataset), batch_size):
                inputs = dataset.inputs[begin : begin + batch_size]
                targets = dataset.targets[begin : begin + batch_size]
                logits = model(inputs)
                total_loss += float(loss_fn(logits, targets)) * len(targets)
                correct += int((logits.argmax(dim=1) == targets).sum())
    finally:
        for m, training in modes.items():
            m.training = training
    return total_loss / len(dataset), correct / len(dataset)


@dataclass
class TrainResult:
    """What one reference run reached, and how long it took (training only, not evaluation)."""

    workload: str
    steps: int
    seconds: float
    test_loss: float
    test_accuracy: float
    losses: list[float] = field(default_factory=list, repr=False)

    @property
    def final_train_loss(self) -> float:
        """Mean of the last ten minibatch losses: one batch alone is too noisy to compare."""
        tail = self.losses[-10:]
        return sum(tail) / len(tail) if tail else float("nan")


def train(
    workload: Workload,
    steps: int,
    *,
    seed: int = 0,
    batch_size: int | None = None,
    lr: float | None = None,
    model: nn.Module | None = None,
) -> tuple[nn.Module, TrainResult]:
    """The workload's optimizer on one worker for ``steps`` minibatches; returns the model and a summary.

    Defaults (optimizer, batch size, learning rate, momentum, weight decay) are the workload's own. ``seed``
    fixes both the initial weights and the batch order, so two calls give the same run.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError("steps", steps, "an integer >= 1")
    model = model if model is not None else workload.build_model(seed)
    optimizer = workload.make_optimizer(model, lr=lr)
    stream = batch_stream(workload.train_set, batch_size or workload.batch_size, seed=seed)
    losses: list[float] = []
    model.train()
    start = time.perf_counter()
    for _ in range(steps):
        _, inputs, targets = next(stream)
        optimizer.zero_grad(set_to_none=True)
        loss = workload.loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    test_loss, accuracy = evaluate(model, workload.test_set, workload.loss_fn)
    return model, TrainResult(workload.name, steps, seconds, test_loss, accuracy, losses)
