"""Named training workloads: a model factory, its data and the metadata a trainer needs.

One name gives the simulator (via :meth:`Workload.spec`, per-layer sizes and FLOPs counted from
the real module) and the emulated / real backends (the module and data themselves) the *same*
model, so predicted and measured runs can be compared layer for layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import flexcomm.workloads.data as data
from flexcomm.costmodel.compute import ModelSpec, layers_from_torch
from flexcomm.costmodel.errors import InputError
from flexcomm.workloads.data import TensorData
from flexcomm.workloads.models import MLP, LSTMClassifier, ResNet, SmallCNN, TransformerClassifier
from flexcomm.workloads.names import FASHION_WORKLOADS, WORKLOADS, canonical_workload

__all__ = ["Workload", "get_workload", "workload_names", "WORKLOADS"]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Workload:
    """A model + dataset pair with the defaults that make it train in seconds on a CPU.

    Data is generated on first access and cached, so asking for ``spec()`` or a model never pays
    for building a large synthetic set.
    """

    name: str
    description: str
    model_factory: Callable[[], nn.Module]
    data_factory: Callable[[], tuple[TensorData, TensorData]]
    input_shape: tuple[int, ...]  #: one sample's shape, without the batch dimension
    num_classes: int
    input_dtype: torch.dtype = torch.float32
    vocab_size: int | None = None  #: token inputs are drawn from [0, vocab_size) by example_input
    batch_size: int = 64
    optimizer: str = "sgd"  #: "sgd" (momentum) or "adam": attention models do not train with plain SGD here
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    lr_schedule: str = "constant"  #: "constant" or "cosine" (decay to 0 over the run's steps)
    loss_fn: LossFn = field(default_factory=nn.CrossEntropyLoss)
    _data: tuple[TensorData, TensorData] | None = field(default=None, init=False, repr=False, compare=False)

    # --- model ---

    def build_model(self, seed: int | None = 0) -> nn.Module:
        """A fresh model; the same ``seed`` gives the same weights (every worker must start equal).

        Seeds a forked RNG, so the caller's global torch RNG state is left untouched; ``None``
        draws from (and advances) the global RNG instead.
        """
        if seed is None:
            return self.model_factory()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.model_factory()

    def make_optimizer(self, model: nn.Module, lr: float | None = None) -> torch.optim.Optimizer:
        """This workload's optimizer with its defaults (``lr`` overrides the learning rate)."""
        rate = self.lr if lr is None else lr
        if self.optimizer == "adam":
            return torch.optim.Adam(model.parameters(), lr=rate, weight_decay=self.weight_decay)
        if self.optimizer == "sgd":
            return torch.optim.SGD(model.parameters(), lr=rate, momentum=self.momentum, weight_decay=self.weight_decay)
        raise InputError("optimizer", self.optimizer, "sgd or adam")

    # --- data ---

    def datasets(self) -> tuple[TensorData, TensorData]:
        """(train, test), generated once per Workload object."""
        if self._data is None:
            self._data = self.data_factory()
        return self._data

    @property
    def train_set(self) -> TensorData:
        return self.datasets()[0]

    @property
    def test_set(self) -> TensorData:
        return self.datasets()[1]

    def example_input(self, batch_size: int = 8, seed: int = 0) -> torch.Tensor:
        """A random batch shaped like real input (no data generation): for FLOP counting and tests."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError("batch_size", batch_size, "an integer >= 1")
        gen = torch.Generator().manual_seed(seed)
        shape = (batch_size, *self.input_shape)
        if self.input_dtype.is_floating_point:
            return torch.randn(shape, generator=gen, dtype=self.input_dtype)
        return torch.randint(0, self.vocab_size or 2, shape, generator=gen, dtype=self.input_dtype)

    # --- cost model ---

    def spec(self, batch_size: int = 8, model: nn.Module | None = None) -> ModelSpec:
        """The cost model's view: per-layer params and forward FLOPs per sample, from the module.

        Counted by :func:`costmodel.compute.layers_from_torch` on one example batch (FLOPs are per
        sample, so the batch size only needs to be >= 1; eval mode keeps BN stats untouched).
        """
        module = model if model is not None else self.build_model(0)
        return layers_from_torch(
            module, self.example_input(batch_size), name=self.name, description=self.description
        )


# --- the catalogue ----------------------------------------------------------------------------------


def _digits_data(image_size: int, seed: int, options: dict[str, Any]) -> Callable[[], tuple[TensorData, TensorData]]:
    return lambda: data.digits(seed=seed, image_size=image_size, **options)


def _make(name: str, seed: int, options: dict[str, Any]) -> Workload:
    """The catalogue entry ``name`` (canonical, checked by :func:`get_workload`), by the family that builds it."""
    if name == "mlp-digits" or name in ("resnet-digits", "eca-resnet-digits"):
        return _digits_workload(name, seed, options)
    if name in FASHION_WORKLOADS:
        return _fashion_workload(name, seed, options)
    if name in ("resnet-synthetic", "eca-resnet-synthetic"):
        return _synthetic_images_workload(name, seed, options)
    if name in ("lstm-seq", "transformer-seq"):
        return _sequence_workload(name, seed, options)
    raise AssertionError(name)  # pragma: no cover - guarded by get_workload


def _digits_workload(name: str, seed: int, options: dict[str, Any]) -> Workload:
    """scikit-learn's digits: an MLP on the 8x8 images, a (ECA-)ResNet-8 on them upsampled to 16x16."""
    if name == "mlp-digits":
        return Workload(
            name,
            "MLP 64-128-64-10 on scikit-learn's 8x8 digits (1438 train / 359 test, stratified)",
            lambda: MLP(64, 10, hidden=(128, 64)),
            _digits_data(8, seed, options),
            (1, 8, 8),
            10,
            batch_size=32,
            lr=0.05,
        )
    eca = name.startswith("eca")
    return Workload(
        name,
        f"{'ECA-' if eca else ''}ResNet-8 (width 16) on the digits upsampled to 16x16",
        lambda: ResNet(8, 16, in_channels=1, num_classes=10, eca=eca),
        _digits_data(16, seed, options),
        (1, 16, 16),
        10,
        batch_size=32,
        lr=0.05,
    )


def _fashion_workload(name: str, seed: int, options: dict[str, Any]) -> Workload:
    """Fashion-MNIST: the small CNN or a (ECA-)ResNet-8."""
    eca = "eca" in name
    if name == "fashion-cnn":
        desc, factory = "small CNN (conv 16-32, fc 128)", lambda: SmallCNN(1, 10, 28)
    else:
        desc = f"{'ECA-' if eca else ''}ResNet-8 (width 16)"
        factory = lambda: ResNet(8, 16, in_channels=1, num_classes=10, eca=eca)  # noqa: E731
    return Workload(
        name,
        f"{desc} on Fashion-MNIST 28x28 (60,000 train / 10,000 test unless n_train / n_test)",
        factory,
        lambda: data.fashion_mnist(seed=seed, **options),
        (1, 28, 28),
        10,
        batch_size=64,
        # 0.1 per 256 images (Goyal et al. 2017, the linear-scaling rule's base), i.e. the default 4
        # workers x 64, decayed by a cosine so the run settles: the real data set is judged by final accuracy
        lr=0.1,
        lr_schedule="cosine",
    )


def _synthetic_images_workload(name: str, seed: int, options: dict[str, Any]) -> Workload:
    """A (ECA-)ResNet-8 on synthetic CIFAR-like images; ``image_size`` and ``num_classes`` shape the model too."""
    eca = name.startswith("eca")
    size = int(options.get("image_size", 32))
    classes = int(options.get("num_classes", 10))
    return Workload(
        name,
        f"{'ECA-' if eca else ''}ResNet-8 (width 16) on synthetic CIFAR-like {size}x{size}x3 patterns, "
        f"{classes} classes",
        lambda: ResNet(8, 16, in_channels=3, num_classes=classes, eca=eca),
        lambda: data.synthetic_images(seed=seed, **options),
        (3, size, size),
        classes,
        batch_size=64,
        lr=0.05,
    )


def _sequence_workload(name: str, seed: int, options: dict[str, Any]) -> Workload:
    """Motif classification of token sequences by an LSTM or a Transformer encoder (which needs Adam here);
    ``vocab_size``, ``seq_len`` and ``num_motifs`` shape the model too."""
    vocab = int(options.get("vocab_size", 16))
    length = int(options.get("seq_len", 24))
    motifs = int(options.get("num_motifs", 4))
    if name == "lstm-seq":
        desc, factory = "1-layer LSTM (hidden 64), max-pooled", lambda: LSTMClassifier(vocab, motifs)
    else:
        desc = "2-layer Transformer encoder (d 32, 4 heads), mean-pooled"
        factory = lambda: TransformerClassifier(vocab, motifs, max_len=max(length, 64))  # noqa: E731
    return Workload(
        name,
        f"{desc}: which of {motifs} order-only motifs is in a length-{length} token sequence",
        factory,
        lambda: data.motif_sequences(seed=seed, **options),
        (length,),
        motifs,
        input_dtype=torch.int64,
        vocab_size=vocab,
        batch_size=64,
        optimizer="sgd" if name == "lstm-seq" else "adam",
        lr=0.1 if name == "lstm-seq" else 3e-3,
        weight_decay=5e-4 if name == "lstm-seq" else 0.0,
    )


def workload_names() -> list[str]:
    """Every name :func:`get_workload` accepts."""
    return list(WORKLOADS)


def get_workload(name: str, *, seed: int = 0, **data_options: Any) -> Workload:
    """A fresh :class:`Workload` by name (case-insensitive).

    ``seed`` picks the data (split or generated samples; model weights take their own seed in
    :meth:`Workload.build_model`). ``data_options`` go to the data function, e.g.
    ``n_train=20000`` for the synthetic images or ``seq_len=32`` for the sequences; an option the
    function does not take fails with a ``TypeError`` when the data is first built.
    """
    key = canonical_workload(name)
    if key not in WORKLOADS:
        raise InputError("workload", name, "one of " + ", ".join(WORKLOADS))
    return _make(key, seed, dict(data_options))
