"""Training iterations on the simulator: buckets, agreement with the cost model, overlap, stragglers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.compute import get_model
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.sim.buckets import DEFAULT_BUCKET_CAP, make_buckets
from flexcomm.sim.dynamics import JitterDynamics
from flexcomm.sim.training import TrainingSimulator, analytical_iteration, simulate_training
from flexcomm.sim.training_config import TrainingConfig, parse_straggler
from flexcomm.sim.workload import DEFAULT_BATCH, get_training_workload

PARTS = ["compute_s", "compression_s", "exposed_comm_s", "stall_s"]


def _compute(cluster: str, workload: str, **kw: object) -> float:
    sim = TrainingSimulator(cluster, TrainingConfig(workload=workload, **kw))
    return sim.compute_total


# --- buckets ---------------------------------------------------------------------------------------


def test_buckets_follow_ddp_reverse_order_and_cap() -> None:
    model = get_model("resnet50")
    buckets = make_buckets(model, DEFAULT_BUCKET_CAP)
    layers = [i for b in buckets for i in b.layers]
    with_params = [i for i in range(len(model.layers) - 1, -1, -1) if model.layers[i].params > 0]
    assert layers == with_params  # every gradient once, in backward order
    assert all(b.nbytes >= DEFAULT_BUCKET_CAP for b in buckets[:-1])
    # a bucket closes at the first layer that reaches the cap: without its last layer it was below
    sizes = model.layer_gradient_bytes()
    assert all(b.nbytes - sizes[b.layers[-1]] < DEFAULT_BUCKET_CAP for b in buckets)
    assert sum(b.nbytes for b in buckets) == model.gradient_bytes()
    assert make_buckets(model, "25MiB", first_cap_bytes="1MiB")[0].layers == (len(model.layers) - 1,)  # fc alone


def test_bucket_count_gives_that_many_balanced_buckets() -> None:
    model = get_model("resnet50")
    buckets = make_buckets(model, count=25)
    assert len(buckets) == 25
    assert [i for b in buckets for i in b.layers] == [i for b in make_buckets(model) for i in b.layers]
    assert max(b.nbytes for b in buckets) < 3 * model.gradient_bytes() / 25
    assert len(make_buckets(model, count=1)) == 1
    with pytest.raises(InputError, match="buckets"):
        make_buckets(model, count=10_000)


def test_workloads_have_default_batches_and_reject_unknown_names() -> None:
    for name, batch in DEFAULT_BATCH.items():
        workload = get_training_workload(name)
        assert workload.batch_per_rank == batch and workload.model.params > 0
    assert get_training_workload("resnet50", 32).batch_per_rank == 32
    with pytest.raises(InputError, match="workload"):
        get_training_workload("resnet51")


def test_config_and_straggler_validation() -> None:
    assert parse_straggler("3=1.5") == (3, 1.5)
    for bad in ("3", "x=2", "3=0", "-1=2"):
        with pytest.raises(InputError, match="straggler"):
            parse_straggler(bad)
    with pytest.raises(InputError, match="iterations"):
        TrainingConfig(iterations=0)
    with pytest.raises(InputError, match="ranks"):
        TrainingSimulator("8x1-10gbe", TrainingConfig(ranks=9))
    with pytest.raises(InputError, match="algorithm"):
        TrainingSimulator("8x1-10gbe", TrainingConfig(scheme="topk-ar", algorithm="hierarchical"))


# --- agreement with the cost model ----------------------------------------------------------------


@pytest.mark.parametrize("cluster,workload,ranks", [("8x1-10gbe", "resnet18", 8), ("4x8-a100-ib", "resnet50", 32),
                                                    ("4x8-a100-ib", "vgg16", 8)])
def test_no_overlap_iteration_is_compute_plus_cost_model_allreduce(cluster: str, workload: str, ranks: int) -> None:
    """One bucket, ready when the backward ends: iteration = compute + CostModel's allreduce (within 1%)."""
    # the ring named: on a cluster with NCCL's fabric, "auto" would price NCCL's choice instead
    result = simulate_training(cluster, workload=workload, iterations=2, ranks=ranks, bucket_count=1,
                               algorithm="ring")
    model = get_training_workload(workload).model
    predicted = CostModel.from_cluster(load_cluster(cluster)).collective(
        "allreduce", "ring", model.gradient_bytes(), ranks).total
    compute = _compute(cluster, workload, ranks=ranks)
    for row in result.iterations.itertuples():
        assert row.time_s == pytest.approx(compute + float(predicted), rel=0.01)
        assert row.compute_s == pytest.approx(compute, rel=1e-12)
        assert row.exposed_comm_s == pytest.approx(float(predicted), rel=0.01)


def test_compressed_scheme_adds_compression_before_the_exchange() -> None:
    cluster, workload = "8x1-10gbe", "resnet18"
    result = simulate_training(cluster, workload=workload, iterations=1, bucket_count=1, scheme="topk-ar",
                               ratio=0.01, compress_elements_per_s=1e9)
    numel = get_training_workload(workload).model.params
    exchange = float(CostModel.from_cluster(load_cluster(cluster)).scheme("topk-ar", numel, 8, 0.01).total)
    row = result.iterations.iloc[0]
    assert row.compression_s == pytest.approx(numel / 1e9)
    assert row.time_s == pytest.approx(_compute(cluster, workload) + numel / 1e9 + exchange, rel=0.01)


@pytest.mark.parametrize("cluster,workload,scheme", [("8x1-10gbe", "resnet50", "dense"),
                                                     ("4x8-a100-ib", "resnet50", "dense"),
                                                     ("8x1-10gbe", "vgg16", "topk-ag")])
def test_overlap_lies_between_max_and_sum_and_matches_the_analytical_twin(cluster: str, workload: str,
                                                                          scheme: str) -> None:
    config = TrainingConfig(workload=workload, iterations=2, scheme=scheme, ratio=0.01)
    result = simulate_training(cluster, config)
    twin = analytical_iteration(cluster, config)
    compute = twin["compute_s"] + twin["compression_s"]
    for row in result.iterations.itertuples():
        assert max(compute, twin["comm_s"]) <= row.time_s * (1 + 1e-9)
        assert row.time_s <= (compute + twin["comm_s"]) * (1 + 1e-9)
        assert row.time_s == pytest.approx(twin["time_s"], rel=0.01)
        assert row.comm_s == pytest.approx(twin["comm_s"], rel=0.01)
    assert result.iterations["exposed_comm_s"].iloc[0] < result.iterations["comm_s"].iloc[0]  # some overlap


def test_breakdown_adds_up_to_the_iteration_time() -> None:
    result = simulate_training("4x8-a100-ib", workload="resnet50", iterations=4, scheme="topk-ag", ratio=0.01,
                               stragglers={5: 1.3}, compute_jitter=0.1, optimizer_s=1e-3)
    total = result.iterations[PARTS].sum(axis=1)
    np.testing.assert_allclose(total, result.iterations["time_s"], rtol=1e-9)
    assert (result.iterations[PARTS] >= -1e-12).all().all()
    assert np.allclose(result.iterations["start_s"].iloc[1:].to_numpy(), result.iterations["end_s"].iloc[:-1])


# --- stragglers -----------------------------------------------------------------------------------


def test_a_straggler_adds_its_extra_compute_to_everyones_iteration() -> None:
    cluster, workload = "8x1-10gbe", "resnet18"
    base = simulate_training(cluster, workload=workload, iterations=2, bucket_count=1)
    slow = simulate_training(cluster, workload=workload, iterations=2, bucket_count=1, stragglers={3: 1.5})
    compute = _compute(cluster, workload)
    extra = slow.iterations["time_s"] - base.iterations["time_s"]
    np.testing.assert_allclose(extra, 0.5 * compute, rtol=1e-9)
    # the 7 others wait for it (stall), it does not; the exchange is exposed for everyone
    np.testing.assert_allclose(slow.iterations["stall_s"], 7 / 8 * 0.5 * compute, rtol=1e-9)
    np.testing.assert_allclose(slow.iterations["exposed_comm_s"], base.iterations["exposed_comm_s"], rtol=1e-9)
    # with overlap, every bucket waits for rank 3: the iteration is at least its compute plus the last bucket
    overlap = simulate_training(cluster, workload=workload, iterations=2, stragglers={3: 1.5})
    last = overlap.buckets.groupby("attempt")["comm_s"].last().to_numpy()
    assert np.all(overlap.iterations["time_s"].to_numpy() >= 1.5 * compute + last - 1e-12)
    assert (overlap.buckets["wait_s"] > 0).any()


def test_compute_jitter_is_seeded() -> None:
    def run(seed: int) -> pd.DataFrame:
        return simulate_training("8x1-10gbe", workload="resnet18", iterations=5, compute_jitter=0.2,
                                 seed=seed).iterations

    pd.testing.assert_frame_equal(run(1), run(1), check_exact=True)
    assert not run(1)["time_s"].equals(run(2)["time_s"])
    assert run(1)["time_s"].nunique() > 1


def test_network_dynamics_switch_to_step_granularity_and_change_times() -> None:
    quiet = simulate_training("4x8-a100-ib", workload="resnet18", iterations=3)
    noisy = simulate_training("4x8-a100-ib", workload="resnet18", iterations=3,
                              dynamics=[JitterDynamics(0.3, 1e-4, seed=3)])
    assert quiet.config["granularity"] == "aggregate" and noisy.config["granularity"] == "steps"
    assert not np.allclose(quiet.iterations["comm_s"], noisy.iterations["comm_s"])


def test_hierarchical_allreduce_and_a_workloads_package_model() -> None:
    result = simulate_training("4x8-a100-ib", workload="resnet50", iterations=1, algorithm="hierarchical")
    assert result.iterations["status"].tolist() == ["ok"] and result.iterations["comm_s"].iloc[0] > 0
    small = simulate_training("8x1-10gbe", workload="mlp-digits", iterations=2)
    assert small.config["batch_per_rank"] == 32 and (small.iterations["time_s"] > 0).all()


def test_summary_reports_medians_and_throughput() -> None:
    result = simulate_training("8x1-10gbe", workload="alexnet", iterations=3)
    summary = result.summary()
    assert summary["iterations"] == 3 and summary["attempts"] == 3
    assert summary["median_time_s"] == pytest.approx(result.iterations["time_s"].median())
    assert summary["samples_per_s"] == pytest.approx(3 * 8 * 256 / result.job_time_s)
    assert summary["time_lost"]["total_s"] == 0
    assert len(result.flows) > 0 and result.sim_events > 0
