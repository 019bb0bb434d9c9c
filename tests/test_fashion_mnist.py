"""Fashion-MNIST: our IDX reader (round trip, every damage named by file), the real package's files read
as an independent decoder reads them, and the three workloads built on it."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.errors import InputError
from flexcomm.workloads.data import FASHION_MNIST_ENV, fashion_mnist, fashion_mnist_dir
from flexcomm.workloads.idx import read_idx, read_image_set, write_idx

HAVE_DATA = (fashion_mnist_dir() / "train-images-idx3-ubyte.gz").is_file()
needs_data = pytest.mark.skipif(not HAVE_DATA, reason="Fashion-MNIST not installed (make data: apt-get install "
                                "dataset-fashion-mnist)")


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), gz=st.booleans(), seed=st.integers(0, 99))
def test_idx_round_trip(tmp_path_factory: pytest.TempPathFactory, shape: list[int], gz: bool, seed: int) -> None:
    array = np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)
    path = tmp_path_factory.mktemp("idx") / ("a.idx.gz" if gz else "a.idx")
    assert np.array_equal(read_idx(write_idx(path, array)), array)


def test_every_damage_is_one_error_naming_the_file(tmp_path: Path) -> None:
    good = write_idx(tmp_path / "x.idx", np.zeros((3, 2, 2), dtype=np.uint8)).read_bytes()
    cases = {
        "magic.idx": (b"\x12\x34" + good[2:], "magic"),
        "dtype.idx": (good[:2] + b"\x0d" + good[3:], "data type"),
        "short.idx": (good[:-1], "truncated"),
        "long.idx": (good + b"\x00", "trailing"),
        "header.idx": (good[:9], "header"),
        "empty.idx": (b"", "magic"),
    }
    for name, (blob, words) in cases.items():
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(InputError) as info:
            read_idx(tmp_path / name)
        assert info.value.field == str(tmp_path / name) and words in str(info.value)
    write_idx(tmp_path / "labels.idx", np.zeros(4, dtype=np.uint8))
    with pytest.raises(InputError, match="one per image"):
        read_image_set(tmp_path / "x.idx", tmp_path / "labels.idx")
    with pytest.raises(InputError, match="dimensions"):
        read_image_set(tmp_path / "labels.idx", tmp_path / "labels.idx")
    (tmp_path / "bad.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="unreadable"):
        read_idx(tmp_path / "bad.gz")


def _independent_pixels(path: Path) -> bytes:
    """The pixel bytes as the format's spec says, without our reader: gunzip, skip 16 header bytes."""
    return gzip.decompress(path.read_bytes())[16:]


@needs_data
def test_the_package_files_read_as_the_spec_says() -> None:
    folder = fashion_mnist_dir()
    for split, n in (("train", 60_000), ("t10k", 10_000)):
        images, labels = read_image_set(folder / f"{split}-images-idx3-ubyte.gz",
                                        folder / f"{split}-labels-idx1-ubyte.gz")
        assert images.shape == (n, 28, 28) and labels.shape == (n,)
        # Xiao et al. 2017: ten classes, 6,000 training and 1,000 test images each
        assert np.bincount(labels, minlength=10).tolist() == [n // 10] * 10
        raw = _independent_pixels(folder / f"{split}-images-idx3-ubyte.gz")
        assert hashlib.sha256(images.tobytes()).hexdigest() == hashlib.sha256(raw).hexdigest()


@needs_data
def test_subsets_are_balanced_and_the_test_order_is_fixed() -> None:
    train, test = fashion_mnist(seed=1, n_train=2000, n_test=500)
    assert len(train) == 2000 and len(test) == 500
    counts = np.bincount(train.targets.numpy(), minlength=10)
    assert counts.min() >= 190 and counts.max() <= 210
    _, again = fashion_mnist(seed=7, n_train=100, n_test=500)
    assert np.array_equal(test.info["indices"], again.info["indices"])  # every run scores the same images
    assert abs(float(train.inputs.mean())) < 1e-4 and abs(float(train.inputs.std()) - 1.0) < 1e-4


def test_the_workloads_build_without_the_data() -> None:
    from flexcomm.workloads.models import ECA
    from flexcomm.workloads.registry import get_workload

    for name in ("fashion-cnn", "fashion-resnet8", "fashion-eca-resnet8"):
        workload = get_workload(name)
        model = workload.build_model(0)
        assert model(workload.example_input(2)).shape == (2, 10)
        assert workload.spec().params == sum(p.numel() for p in model.parameters())
        has_eca = any(isinstance(m, ECA) for m in model.modules())
        assert has_eca == (name == "fashion-eca-resnet8")


def test_a_missing_data_set_is_one_line_saying_how_to_install(tmp_path: Path) -> None:
    env = {**os.environ, FASHION_MNIST_ENV: str(tmp_path / "none"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "flexcomm.experiments.cli", "train-emulated", "--workload",
                           "fashion-cnn", "--steps", "2", "--out", str(tmp_path / "out"), "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.count("\n") == 0 and "make data" in err and "dataset-fashion-mnist" in err
