"""Offline, seed-deterministic datasets and per-worker sharding for data-parallel runs.

Nothing is downloaded: the digits ship inside scikit-learn, Fashion-MNIST comes from Debian's
``dataset-fashion-mnist`` package (``make data``), the rest is generated. Every set is a
pair of whole in-memory tensors (:class:`TensorData`) because index slicing is far cheaper than a
``DataLoader`` on two CPU cores, and because an emulated run of N logical workers in one process
needs N disjoint views of the same tensors, not N loader processes.

Sharding follows one rule on every worker: a permutation seeded only by ``seed`` (so all workers
agree on it without talking), then rank r takes every N-th index from position r. Shards are
disjoint, cover the set and differ in size by at most one sample, so workers must agree on a
step count (:func:`steps_per_epoch`) or a collective would wait for a worker that has run out.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from flexcomm.costmodel.errors import InputError
from flexcomm.workloads.idx import read_image_set

__all__ = [
    "TensorData",
    "digits",
    "fashion_mnist",
    "fashion_mnist_dir",
    "FASHION_MNIST_CLASSES",
    "synthetic_images",
    "motif_sequences",
    "SYNTHETIC_PATTERNS",
    "shard_indices",
    "shard",
    "steps_per_epoch",
    "batches",
    "batch_stream",
]


class TensorData(Dataset):
    """Inputs and integer labels as two aligned tensors; also a map-style torch ``Dataset``.

    ``info`` carries how the set was made (pattern names, the planted motifs) so a test or a plot
    can check labels without re-deriving the generator.
    """

    def __init__(
        self, inputs: torch.Tensor, targets: torch.Tensor, name: str = "", info: dict[str, Any] | None = None
    ) -> None:
        if inputs.shape[0] != targets.shape[0]:
            raise InputError("targets", tuple(targets.shape), f"{inputs.shape[0]} labels, one per input")
        self.inputs = inputs
        self.targets = targets
        self.name = name
        self.info = dict(info or {})

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]

    def __repr__(self) -> str:
        return f"TensorData({self.name!r}, n={len(self)}, input={tuple(self.inputs.shape[1:])})"

    def subset(self, indices: Sequence[int] | np.ndarray | torch.Tensor) -> TensorData:
        """The samples at ``indices``, in that order (copies: a shard owns its memory)."""
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        return TensorData(self.inputs[idx], self.targets[idx], self.name, self.info)

    @property
    def num_classes(self) -> int:
        return int(self.targets.max().item()) + 1 if len(self) else 0


def _rng(*keys: int) -> np.random.Generator:
    """A generator keyed by a tuple, so (seed, rank, epoch) streams never collide or correlate."""
    for key in keys:
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or key < 0:
            raise InputError("seed", key, "a non-negative integer")
    return np.random.default_rng(np.random.SeedSequence([int(k) for k in keys]))


def _count(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(name, value, f"an integer >= {minimum}")
    return int(value)


def _stratified_split(
    labels: np.ndarray, test_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per-class split so a small test set still has every class in proportion."""
    train, test = [], []
    for label in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == label))
        n_test = int(round(len(idx) * test_fraction))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


# --- handwritten digits ---------------------------------------------------------------------------


def digits(seed: int = 0, image_size: int = 8, test_fraction: float = 0.2) -> tuple[TensorData, TensorData]:
    """scikit-learn's bundled 8x8 digits (1797 samples, 10 classes), stratified train/test split.

    Images are (1, S, S) float32, standardised with the *training* mean and std; ``image_size``
    > 8 upsamples bilinearly (16 gives the CNNs room for two stride-2 stages). The split depends
    on ``seed`` only.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise ImportError("the digits workloads need scikit-learn (pip install scikit-learn)") from exc
    _count("image_size", image_size, minimum=8)
    if not 0.0 < test_fraction < 1.0:
        raise InputError("test_fraction", test_fraction, "a fraction in (0, 1)")
    bunch = load_digits()
    images = torch.from_numpy(bunch.images.astype(np.float32) / 16.0).unsqueeze(1)
    if image_size != 8:
        images = F.interpolate(images, size=(image_size, image_size), mode="bilinear", align_corners=False)
    labels = bunch.target.astype(np.int64)
    train_idx, test_idx = _stratified_split(labels, test_fraction, _rng(seed))
    mean, std = images[train_idx].mean(), images[train_idx].std()
    images = (images - mean) / std
    targets = torch.from_numpy(labels)
    name = f"digits{image_size}"
    info = {"source": "sklearn.datasets.load_digits", "seed": seed}
    return (
        TensorData(images[train_idx].contiguous(), targets[train_idx], name, {**info, "indices": train_idx}),
        TensorData(images[test_idx].contiguous(), targets[test_idx], name, {**info, "indices": test_idx}),
    )


# --- Fashion-MNIST ---------------------------------------------------------------------------------

#: Where Debian's dataset-fashion-mnist puts the IDX files; ``FLEXCOMM_FASHION_MNIST`` points elsewhere.
FASHION_MNIST_DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_ENV = "FLEXCOMM_FASHION_MNIST"
#: Label names (Xiao, Rasul & Vollgraf 2017, arXiv 1708.07747, Table 1).
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                         "Bag", "Ankle boot")
_FASHION_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                  "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
#: The test subset's order is fixed (this seed, not the run's), so every run and strategy scores the same images.
FASHION_TEST_ORDER_SEED = 0
INSTALL_HINT = ("Fashion-MNIST's IDX files: `make data` installs Debian's dataset-fashion-mnist (apt, as root), "
                f"or set {FASHION_MNIST_ENV}=DIR to a folder holding them")


def fashion_mnist_dir() -> Path:
    return Path(os.environ.get(FASHION_MNIST_ENV) or FASHION_MNIST_DEFAULT_DIR)


def _idx_path(folder: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    raise InputError("dataset", str(folder / f"{stem}.gz"), INSTALL_HINT)


@cache
def _fashion_arrays(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {split: read_image_set(_idx_path(folder, images), _idx_path(folder, labels))
            for split, (images, labels) in _FASHION_FILES.items()}


def fashion_mnist(seed: int = 0, n_train: int | None = None, n_test: int | None = None,
                  root: str | Path | None = None) -> tuple[TensorData, TensorData]:
    """Fashion-MNIST (60,000 train / 10,000 test 28x28 greyscale images, 10 balanced classes).

    Images are (1, 28, 28) float32 standardised with the training set's mean and std. ``n_train`` keeps a
    class-stratified subset of the training set chosen by ``seed``; ``n_test`` the first ``n_test`` images
    of one fixed permutation of the test set (the same for every seed and strategy; default all 10,000,
    where the standard error of an accuracy near 90 % is 0.3 points).
    """
    folder = Path(root) if root is not None else fashion_mnist_dir()
    arrays = _fashion_arrays(folder)
    (x_train, y_train), (x_test, y_test) = arrays["train"], arrays["test"]
    train_idx = np.arange(len(y_train))
    if n_train is not None:
        _count("n_train", n_train)
        if n_train < len(y_train):
            fraction = 1.0 - n_train / len(y_train)
            train_idx, _ = _stratified_split(y_train.astype(np.int64), fraction, _rng(seed, 1))
            train_idx = np.sort(train_idx[:n_train])
    test_idx = _rng(FASHION_TEST_ORDER_SEED, 2).permutation(len(y_test))
    if n_test is not None:
        _count("n_test", n_test)
        test_idx = test_idx[: min(n_test, len(y_test))]
    train = torch.from_numpy(x_train[train_idx].astype(np.float32) / 255.0).unsqueeze(1)
    test = torch.from_numpy(x_test[test_idx].astype(np.float32) / 255.0).unsqueeze(1)
    mean, std = train.mean(), train.std()
    info = {"source": str(folder), "seed": seed, "classes": FASHION_MNIST_CLASSES}
    return (
        TensorData((train - mean) / std, torch.from_numpy(y_train[train_idx].astype(np.int64)), "fashion-mnist",
                   {**info, "indices": train_idx}),
        TensorData((test - mean) / std, torch.from_numpy(y_test[test_idx].astype(np.int64)), "fashion-mnist",
                   {**info, "indices": test_idx}),
    )


# --- synthetic CIFAR-like images ------------------------------------------------------------------

#: The class of a synthetic image is its pattern; colours, position, size and phase are random.
SYNTHETIC_PATTERNS = (
    "disc",
    "square",
    "ring",
    "plus",
    "diamond",
    "triangle",
    "horizontal-stripes",
    "vertical-stripes",
    "diagonal-stripes",
    "checkerboard",
)


def _pattern_masks(pattern: str, n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """(n, size, size) boolean foreground masks of one pattern with random geometry."""
    grid = np.arange(size, dtype=np.float32) + 0.5
    yy, xx = grid[None, :, None], grid[None, None, :]
    cy, cx = (rng.uniform(0.3, 0.7, (2, n, 1, 1)) * size).astype(np.float32)
    r = (rng.uniform(0.18, 0.32, (n, 1, 1)) * size).astype(np.float32)
    dy, dx = yy - cy, xx - cx
    period = rng.uniform(4.0, 8.0, (n, 1, 1)).astype(np.float32)
    freq = 2 * np.pi / period
    phase = rng.uniform(0, 2 * np.pi, (2, n, 1, 1)).astype(np.float32)
    if pattern == "disc":
        return dx**2 + dy**2 < r**2
    if pattern == "square":
        return np.maximum(np.abs(dx), np.abs(dy)) < r * 0.85
    if pattern == "ring":
        dist = np.sqrt(dx**2 + dy**2)
        return (dist < r) & (dist > 0.6 * r)
    if pattern == "plus":
        return ((np.abs(dx) < r / 3) & (np.abs(dy) < r)) | ((np.abs(dy) < r / 3) & (np.abs(dx) < r))
    if pattern == "diamond":
        return np.abs(dx) + np.abs(dy) < r
    if pattern == "triangle":
        return (np.abs(dy) < r) & (np.abs(dx) < (dy + r) / 2)
    if pattern == "horizontal-stripes":
        return np.broadcast_to(np.sin(freq * yy + phase[0]) > 0, (n, size, size))
    if pattern == "vertical-stripes":
        return np.broadcast_to(np.sin(freq * xx + phase[0]) > 0, (n, size, size))
    if pattern == "diagonal-stripes":
        return np.sin(freq * (xx + yy) / np.sqrt(2) + phase[0]) > 0
    if pattern == "checkerboard":
        return np.sin(freq * xx + phase[0]) * np.sin(freq * yy + phase[1]) > 0
    raise InputError("pattern", pattern, "one of " + ", ".join(SYNTHETIC_PATTERNS))


def synthetic_images(
    n_train: int = 4000,
    n_test: int = 1000,
    seed: int = 0,
    image_size: int = 32,
    num_classes: int = 10,
    noise: float = 0.15,
) -> tuple[TensorData, TensorData]:
    """A CIFAR-like task of any size: class = pattern, drawn in random colours over noise.

    Each image is (3, S, S): a random background colour, a foreground pattern whose colour differs
    from it by 0.35-0.65 in every channel (so shape, not colour, carries the label), and Gaussian
    pixel noise of std ``noise``; then scaled to roughly zero mean, unit variance. Classes are
    balanced and shuffled. The same ``seed`` gives the same tensors; train and test come from one
    stream, so they never share an image.
    """
    n_train, n_test = _count("n_train", n_train), _count("n_test", n_test)
    size = _count("image_size", image_size, minimum=8)
    classes = _count("num_classes", num_classes, minimum=2)
    if classes > len(SYNTHETIC_PATTERNS):
        raise InputError("num_classes", num_classes, f"at most {len(SYNTHETIC_PATTERNS)} (one per pattern)")
    if not noise >= 0:
        raise InputError("noise", noise, "a non-negative pixel noise std")
    rng = _rng(seed)
    n = n_train + n_test
    labels = rng.permutation(np.arange(n) % classes)
    masks = np.empty((n, size, size), dtype=bool)
    for label in range(classes):
        idx = np.flatnonzero(labels == label)
        masks[idx] = _pattern_masks(SYNTHETIC_PATTERNS[label], len(idx), size, rng)
    background = rng.uniform(0, 1, (n, 3, 1, 1)).astype(np.float32)
    foreground = (background + rng.uniform(0.35, 0.65, (n, 3, 1, 1)).astype(np.float32)) % 1.0
    images = np.where(masks[:, None], foreground, background)
    images += rng.normal(0.0, noise, images.shape).astype(np.float32)
    images = (images - 0.5) / 0.3
    inputs, targets = torch.from_numpy(images.astype(np.float32)), torch.from_numpy(labels.astype(np.int64))
    name, info = f"synthetic{size}", {"patterns": SYNTHETIC_PATTERNS[:classes], "seed": seed, "noise": noise}
    return (
        TensorData(inputs[:n_train].contiguous(), targets[:n_train], name, info),
        TensorData(inputs[n_train:].contiguous(), targets[n_train:], name, info),
    )


# --- synthetic sequences --------------------------------------------------------------------------


def _occurs(tokens: np.ndarray, motif: np.ndarray) -> np.ndarray:
    """Per row: does ``motif`` appear as a contiguous run?"""
    windows = np.lib.stride_tricks.sliding_window_view(tokens, len(motif), axis=1)
    return (windows == motif).all(axis=2).any(axis=1)


def motif_sequences(
    n_train: int = 4000,
    n_test: int = 1000,
    seed: int = 0,
    seq_len: int = 24,
    vocab_size: int = 16,
    num_motifs: int = 4,
    motif_len: int = 3,
    distractor_rate: float = 0.1,
) -> tuple[TensorData, TensorData]:
    """Which of K motifs is planted in a noisy token sequence? Labels are the motif index.

    The K motifs are distinct orderings of the *same* ``motif_len`` tokens, so counting tokens
    cannot solve it: a model must see order. Background tokens come from the rest of the
    vocabulary, and with probability ``distractor_rate`` a position holds a stray motif token
    instead; sequences where a stray run happens to form a second motif are redrawn, so every
    label is exact.
    """
    n_train, n_test = _count("n_train", n_train), _count("n_test", n_test)
    length, vocab = _count("seq_len", seq_len), _count("vocab_size", vocab_size)
    k, m = _count("num_motifs", num_motifs, minimum=2), _count("motif_len", motif_len, minimum=2)
    if m >= vocab or length < m:
        raise InputError("motif_len", motif_len, f"less than vocab_size={vocab} and at most seq_len={length}")
    if not 0.0 <= distractor_rate < 1.0:
        raise InputError("distractor_rate", distractor_rate, "a probability in [0, 1)")
    if k > math.factorial(m):
        raise InputError("num_motifs", num_motifs, f"at most {math.factorial(m)} (orderings of {m} tokens)")
    rng = _rng(seed)
    alphabet = rng.choice(vocab, size=m, replace=False)
    orders: set[tuple[int, ...]] = set()
    while len(orders) < k:
        orders.add(tuple(rng.permutation(m)))
    motifs = np.array([alphabet[list(order)] for order in sorted(orders)])
    background = np.setdiff1d(np.arange(vocab), alphabet)

    n = n_train + n_test
    labels = rng.permutation(np.arange(n) % k)
    tokens = np.empty((n, length), dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        rows = rng.choice(background, size=(todo.size, length))
        stray = rng.random((todo.size, length)) < distractor_rate
        rows[stray] = rng.choice(alphabet, size=int(stray.sum()))
        start = rng.integers(0, length - m + 1, size=todo.size)
        cols = start[:, None] + np.arange(m)
        rows[np.arange(todo.size)[:, None], cols] = motifs[labels[todo]]
        tokens[todo] = rows
        clash = np.zeros(todo.size, dtype=bool)
        for j, motif in enumerate(motifs):
            clash |= (labels[todo] != j) & _occurs(rows, motif)
        todo = todo[clash]
    inputs, targets = torch.from_numpy(tokens), torch.from_numpy(labels.astype(np.int64))
    info = {"motifs": motifs, "vocab_size": vocab, "seed": seed, "distractor_rate": distractor_rate}
    return (
        TensorData(inputs[:n_train].contiguous(), targets[:n_train], "motifs", info),
        TensorData(inputs[n_train:].contiguous(), targets[n_train:], "motifs", info),
    )


# --- sharding and batching ------------------------------------------------------------------------


def _rank(rank: int, world_size: int) -> tuple[int, int]:
    world = _count("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world:
        raise InputError("rank", rank, f"an integer in [0, {world})")
    return int(rank), world


def shard_indices(n: int, rank: int, world_size: int, seed: int = 0) -> np.ndarray:
    """Indices of worker ``rank``'s shard: every ``world_size``-th entry of a seed-only permutation.

    The permutation mixes classes even when the set is sorted by label; being seeded only by
    ``seed`` makes every worker compute the same partition independently. Sorted, so a shard reads
    memory in order.
    """
    rank, world = _rank(rank, world_size)
    n = _count("n", n, minimum=0)
    if world > n:
        raise InputError("world_size", world_size, f"at most the {n} samples, so no shard is empty")
    return np.sort(_rng(seed).permutation(n)[rank::world])


def shard(dataset: TensorData, rank: int, world_size: int, seed: int = 0) -> TensorData:
    """Worker ``rank``'s disjoint part of ``dataset`` (see :func:`shard_indices`)."""
    return dataset.subset(shard_indices(len(dataset), rank, world_size, seed))


def steps_per_epoch(n: int, world_size: int, batch_size: int) -> int:
    """Full batches the *smallest* shard holds: a step count every worker can run in lock-step."""
    n, world, batch = _count("n", n, minimum=0), _count("world_size", world_size), _count("batch_size", batch_size)
    return (n // world) // batch


def batches(
    dataset: TensorData,
    batch_size: int,
    *,
    seed: int = 0,
    rank: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = True,
    num_batches: int | None = None,
    first: int = 0,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch of (inputs, targets) batches; the order is a function of (seed, rank, epoch) only.

    Keyed per worker and per epoch so workers see different orders and a rerun sees the same
    ones. ``drop_last`` keeps batch shapes fixed (compressed-gradient sizes then stay fixed too);
    ``num_batches`` caps the epoch, e.g. at :func:`steps_per_epoch` to keep workers in lock-step; the epoch
    starts at batch ``first`` (a resumed run's place in it).
    """
    batch = _count("batch_size", batch_size)
    n = len(dataset)
    order = _rng(seed, int(rank), _count("epoch", epoch, minimum=0)).permutation(n) if shuffle else np.arange(n)
    stop = (n // batch) * batch if drop_last else n
    if num_batches is not None:
        stop = min(stop, _count("num_batches", num_batches, minimum=0) * batch)
    for begin in range(_count("first", first, minimum=0) * batch, stop, batch):
        idx = torch.from_numpy(order[begin : min(begin + batch, stop)])
        yield dataset.inputs[idx], dataset.targets[idx]


def batch_stream(
    dataset: TensorData, batch_size: int, *, seed: int = 0, rank: int = 0, start_epoch: int = 0, skip: int = 0
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """Endless (epoch, inputs, targets) batches, reshuffled each epoch: for step-counted training.

    ``skip`` batches are passed over without being built: a run resumed at step N with ``skip=N`` sees the
    batches the uninterrupted run saw from step N on (the order is a function of seed, rank and epoch)."""
    if _count("batch_size", batch_size) > len(dataset):
        raise InputError("batch_size", batch_size, f"at most the {len(dataset)} samples of the shard")
    per_epoch = len(dataset) // batch_size  # drop_last, as batches() does
    skip = _count("skip", skip, minimum=0)
    epoch = _count("start_epoch", start_epoch, minimum=0) + skip // per_epoch
    offset = skip % per_epoch
    while True:
        for inputs, targets in batches(dataset, batch_size, seed=seed, rank=rank, epoch=epoch, first=offset):
            yield epoch, inputs, targets
        offset = 0
        epoch += 1
