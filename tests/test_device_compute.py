"""Compute priced on the device: GEMMs by shape at the measured matmul rate, memory-bound kernels by bytes,
compression per device, and the one-GPU check's code and corpus (rehearsed on the CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.cluster_parts import Device
from flexcomm.costmodel.compression_compute import (
    V100_MEMORY_BANDWIDTH_Bps,
    compression_seconds,
    device_compression_seconds,
    topk_elements_per_s,
)
from flexcomm.costmodel.compute import V100_TOPK_ELEMENTS_PER_S, MeasuredProfile, get_model
from flexcomm.costmodel.device_compute import DeviceCompute, model_layer_seconds
from flexcomm.costmodel.devices import catalog
from flexcomm.costmodel.gemm_efficiency import (
    SIMT,
    SM80_TENSOR_OP,
    GemmShape,
    achievable_fraction,
    achievable_source,
    gemm_seconds,
    shape_fill,
    unmeasured_fraction,
)

# --- the GEMM model ------------------------------------------------------------------------------


@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 20000), count=st.integers(1, 64),
       sms=st.sampled_from([None, 80, 108, 132, 148]))
@settings(max_examples=200, deadline=None)
def test_shape_fill_is_a_fraction_and_a_bigger_k_never_hurts(m: int, n: int, k: int, count: int,
                                                             sms: int | None) -> None:
    fill = shape_fill(GemmShape(m, n, k, count), sms)
    assert 0 < fill <= 1
    assert shape_fill(GemmShape(m, n, 2 * k, count), sms) >= fill - 1e-12


@pytest.mark.parametrize("name", [n for n, d in catalog().items() if d.mamf is not None])
def test_each_measured_device_predicts_its_own_mamf_at_its_best_shape(name: str) -> None:
    """The achievable fraction divides the shape losses out, so the measured shape comes back as measured
    (unless the fraction had to be capped at 1)."""
    device = catalog()[name]
    m, n, k = device.mamf.shape
    shape = GemmShape(m, n, k)
    seconds = gemm_seconds(shape, device.peak("bf16"), achievable_fraction(name), device.units, None, 2)
    if achievable_fraction(name) < 1:
        assert shape.flops / seconds == pytest.approx(device.mamf.tflops * 1e12, rel=1e-9)
    assert "MAMF" in achievable_source(name)


def test_a_device_nobody_measured_takes_the_median_and_says_so() -> None:
    assert achievable_fraction("V100-SXM2-32GB") == unmeasured_fraction()
    assert "not measured" in achievable_source("V100-SXM2-32GB")
    measured = [achievable_fraction(n) for n, d in catalog().items() if d.mamf is not None]
    assert min(measured) <= unmeasured_fraction() <= max(measured)


def test_split_k_keeps_a_weight_gradient_off_one_sm() -> None:
    """ResNet-50's first convolution's weight gradient at batch 256: 64 x 147 outputs, K = 3.2M pixels."""
    wgrad = GemmShape(64, 147, 112 * 112 * 256)
    assert shape_fill(wgrad, 108) > 0.1  # unsplit: its one or two tiles on 108 SMs would be < 0.01


def test_small_k_and_fp32_pay_what_their_kernels_do() -> None:
    big, small_k = GemmShape(4096, 4096, 4096), GemmShape(4096, 4096, 64)
    assert shape_fill(small_k, 108) < 0.5 * shape_fill(big, 108)  # the pipeline's fill dominates at K = 64
    assert shape_fill(small_k, 108, SIMT) > shape_fill(small_k, 108, SM80_TENSOR_OP)  # SIMT's K-slice is 8


# --- layers on a device --------------------------------------------------------------------------


def _device(name: str, precision: str) -> Device:
    return Device.model_validate({"name": name, "precision": precision})


def test_a_cnn_is_mostly_memory_bound_where_flops_alone_said_compute() -> None:
    """ResNet-50 under AMP on an A100: its batch norms, ReLUs and residual adds (counted per element) take
    more time than its convolutions, which the flat FLOP model could not see."""
    model = get_model("resnet50")
    compute = DeviceCompute.of(_device("A100-SXM4-80GB", "fp16"))
    bn = [i for i, layer in enumerate(model.layers) if not layer.gemms]
    forward, backward = compute.layer_seconds(model, 256)
    assert (forward[bn] + backward[bn]).sum() > 0.4 * (forward + backward).sum()
    assert (backward >= forward).all()
    flat = model.iteration_seconds(256, 312e12)
    assert compute.iteration_seconds(model, 256) > 2 * flat


def test_precision_sets_the_peak_and_the_bytes() -> None:
    model = get_model("resnet50")
    fp32 = DeviceCompute.of(_device("V100-SXM2-32GB", "fp32")).iteration_seconds(model, 64)
    fp16 = DeviceCompute.of(_device("V100-SXM2-32GB", "fp16")).iteration_seconds(model, 64)
    assert fp32 > 2.5 * fp16


def test_a_measured_profile_still_wins_and_an_explicit_efficiency_keeps_the_flat_model() -> None:
    device = load_cluster("dgx-a100-80g").device
    model = get_model("resnet18")
    name = model.layers[0].name
    profiled = model.with_profile(MeasuredProfile(32, {name: (0.5, 1.0)}))
    forward, backward = model_layer_seconds(profiled, 32, device)
    assert (forward[0], backward[0]) == (0.5, 1.0)
    flat = model_layer_seconds(model, 32, device, efficiency=0.5)
    assert np.allclose(flat[0], model.layer_seconds(32, device.peak_flops, 0.5)[0])


def test_the_simulator_prices_compute_on_the_device_by_default() -> None:
    from flexcomm.sim.training import TrainingSimulator
    from flexcomm.sim.training_config import TrainingConfig
    from flexcomm.sim.workload import get_training_workload

    cluster = load_cluster("dgx-a100-80g")
    workload = get_training_workload("resnet50")
    sim = TrainingSimulator(cluster, TrainingConfig(workload=workload, iterations=1, ranks=8, record_flows=False))
    expected = DeviceCompute.of(cluster.device).iteration_seconds(workload.model, workload.batch_per_rank)
    assert sim.compute_total == pytest.approx(expected, rel=1e-12)


# --- compression on a device ----------------------------------------------------------------------


def test_topk_scales_with_hbm_bandwidth_and_a_given_rate_wins() -> None:
    h100 = load_cluster("dgx-h100").device
    assert topk_elements_per_s(h100.memory_bandwidth_Bps) == pytest.approx(
        V100_TOPK_ELEMENTS_PER_S * 3.35e12 / V100_MEMORY_BANDWIDTH_Bps)
    assert topk_elements_per_s(None) == V100_TOPK_ELEMENTS_PER_S
    numel = 1.3e9
    assert device_compression_seconds("topk-ag", numel, h100) == pytest.approx(
        numel / topk_elements_per_s(3.35e12))
    assert device_compression_seconds("topk-ag", numel, h100, 1e12) == pytest.approx(numel / 1e12)


def test_powersgd_on_a_large_matrix_is_bound_by_its_passes_over_it() -> None:
    h100 = load_cluster("dgx-h100").device
    seconds = device_compression_seconds("powersgd", 1e8, h100)
    assert seconds == pytest.approx(1e8 * 36 / 3.35e12, rel=1e-9)
    assert compression_seconds("threshold", 1e8, 1e15, 2e12) == pytest.approx(1e8 * 8 / 2e12)
    assert compression_seconds("dense", 1e8, 1e15, 2e12) == 0.0


# --- published 1-GPU rows and the one-GPU check ---------------------------------------------------


def test_the_published_one_gpu_rows_are_predicted_from_the_catalog_alone() -> None:
    from flexcomm.experiments.published_compute import TARGET, validate_compute
    from flexcomm.experiments.published_training import read_corpus

    path = Path(__file__).resolve().parents[1] / "validation" / "training-throughput" / "training-throughput.md"
    frame = validate_compute(read_corpus(path).rows)
    assert len(frame) == 18 and np.isfinite(frame["predicted_throughput"]).all()
    assert set(frame["device"]) == {"A100-SXM4-80GB", "V100-SXM2-16GB", "V100-SXM2-32GB"}
    assert (frame["within_target"] == (frame["rel_error"].abs() <= TARGET)).all()
    # measured: 10 of 18 within 20 % (ResNet-50 AMP on both GPUs, FP32 on V100; BERT at sequence 128)
    amp = frame[(frame["model"] == "resnet50") & frame["precision"].str.contains("AMP")]
    assert amp["within_target"].all()


def test_the_gpu_compute_check_runs_on_the_cpu_and_its_corpus_is_reported(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from flexcomm.experiments.cli import main as cli
    from flexcomm.experiments.commands.gpu_compute import main

    out = tmp_path / "corpus" / "cpu.csv"
    assert main(["--device", "cpu", "--quick", "--repeats", "1", "--sections", "gemm,compression",
                 "--device-name", "A100-SXM4-80GB", "--out", str(out)]) == 0
    rows = pd.read_csv(out)
    assert set(rows["section"]) == {"gemm", "compression"} and (rows["measured_s"] > 0).all()
    assert (rows["predicted_s"] > 0).all() and (rows["catalog_device"] == "A100-SXM4-80GB").all()
    capsys.readouterr()
    assert cli(["validate", "--gpu-compute", str(out.parent), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    assert "| gemm | 14 | 14 |" in printed and "GEMM targets" in printed
    assert (tmp_path / "report" / "gpu_compute.md").exists()
    assert main(["--device", "cpu", "--sections", "gemm,flops", "--out", str(tmp_path / "x.csv")]) == 2


def test_gpu_compute_corpus_refuses_a_file_without_its_columns(tmp_path: Path) -> None:
    from flexcomm.costmodel.errors import InputError
    from flexcomm.real_backend.gpu_compute_corpus import read_corpus

    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputError) as err:
        read_corpus(tmp_path)
    assert "bad.csv" in str(err.value) and "\n" not in str(err.value)
