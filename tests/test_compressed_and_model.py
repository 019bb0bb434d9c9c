"""Scheme prices against the paper's closed forms, and the CostModel's link selection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flexcomm.costmodel.compressed import SchemeAlgorithms, SparsePayload, scheme_coefficients, topk_count
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError

ALPHA, BETA = 4e-3, 1 / 2.5e9  # 4 ms, 20 Gbit/s: the paper's Table IV network


def paper_topk_ag(alpha, beta, m_bytes, c, n):
    """Tyagi & Swany 2023: t_AG = alpha log N + 2 M c beta (N - 1), 4-byte values and indices."""
    return alpha * math.log2(n) + 2 * m_bytes * c * beta * (n - 1)


def paper_ar_ring(alpha, beta, m_bytes, c, n):
    return alpha * (2 * (n - 1) + math.log2(n)) + m_bytes * c * beta * (2 * (n - 1) / n + math.log2(n))


def paper_ar_tree(alpha, beta, m_bytes, c, n):
    return 3 * alpha * math.log2(n) + 3 * m_bytes * c * beta * math.log2(n)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 64])
@pytest.mark.parametrize("c", [0.1, 0.01, 0.001])
def test_schemes_reduce_to_paper_forms(n: int, c: float) -> None:
    numel = 1_000_000  # divisible so k = numel * c exactly
    m_bytes = 4 * numel
    ag = scheme_coefficients("topk-ag", numel, n, c).time(ALPHA, BETA)
    ar_ring = scheme_coefficients("topk-ar", numel, n, c, algorithms=SchemeAlgorithms(allreduce="ring")).time(
        ALPHA, BETA)
    ar_tree = scheme_coefficients("topk-ar", numel, n, c, algorithms=SchemeAlgorithms(allreduce="tree")).time(
        ALPHA, BETA)
    assert float(ag.latency + ag.bandwidth) == pytest.approx(paper_topk_ag(ALPHA, BETA, m_bytes, c, n), rel=1e-12)
    assert float(ar_ring.total) == pytest.approx(paper_ar_ring(ALPHA, BETA, m_bytes, c, n), rel=1e-12)
    assert float(ar_tree.total) == pytest.approx(paper_ar_tree(ALPHA, BETA, m_bytes, c, n), rel=1e-12)


def test_int64_indices_cost_more_than_the_paper_prices() -> None:
    int32 = scheme_coefficients("topk-ag", 1e6, 8, 0.01, SparsePayload(index_dtype="int32")).time(ALPHA, BETA)
    int64 = scheme_coefficients("topk-ag", 1e6, 8, 0.01, SparsePayload(index_dtype="int64")).time(ALPHA, BETA)
    # values 4 B + indices 8 B instead of 4 B: the bandwidth term grows by exactly 12/8
    assert float(int64.bandwidth) == pytest.approx(1.5 * float(int32.bandwidth))


def test_var_owner_election_adds_an_allgather_of_norms() -> None:
    star = scheme_coefficients("topk-ar", 1e6, 8, 0.01).time(ALPHA, BETA)
    var = scheme_coefficients("topk-ar", 1e6, 8, 0.01, algorithms=SchemeAlgorithms(index_owner="var")).time(
        ALPHA, BETA)
    assert float(var.latency - star.latency) == pytest.approx(3 * ALPHA)  # Bruck over 8 ranks: 3 rounds
    assert float(var.bandwidth - star.bandwidth) == pytest.approx(7 * 4 * BETA)


def test_dense_scheme_is_ring_allreduce() -> None:
    dense = scheme_coefficients("dense", 25e6, 8, 0.01).time(ALPHA, BETA)
    expected = 2 * 7 * ALPHA + 2 * 7 / 8 * 100e6 * BETA
    assert float(dense.total) == pytest.approx(expected)


@given(numel=st.integers(1, 10**9), ratio=st.floats(1e-6, 1.0))
def test_topk_count_convention(numel: int, ratio: float) -> None:
    k = float(topk_count(numel, ratio))
    assert 1 <= k <= numel
    assert k == max(1, math.floor(numel * ratio))


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan")])
def test_bad_ratio_is_an_input_error(bad: float) -> None:
    with pytest.raises(InputError, match="ratio"):
        scheme_coefficients("topk-ag", 1000, 4, bad)


def test_unknown_scheme_and_dtype() -> None:
    with pytest.raises(InputError, match="scheme"):
        scheme_coefficients("gossip", 1000, 4, 0.1)
    with pytest.raises(InputError, match="index_dtype"):
        scheme_coefficients("topk-ag", 1000, 4, 0.1, SparsePayload(index_dtype="int33"))


def test_flat_model_matches_formula_and_vectorises() -> None:
    model = CostModel.from_link(1e-5, 1.25e9)
    sizes = np.array([1e3, 1e6, 1e9])
    vec = model.collective("allreduce", "ring", sizes, 8).total
    one = [float(model.collective("allreduce", "ring", s, 8).total) for s in sizes]
    np.testing.assert_allclose(vec, one)
    assert one[1] == pytest.approx(14e-5 + 2 * 7 / 8 * 1e6 / 1.25e9)


def test_hierarchical_allreduce_on_one_node_is_rs_plus_ag() -> None:
    model = CostModel.from_link(1e-5, 1.25e9, ranks_per_node=8)
    n = 64 * 2**20
    hier = model.collective("allreduce", "hierarchical", n, 8)
    ring = model.collective("allreduce", "ring", n, 8)
    # one node: the inter-node phase is a 1-rank allreduce (free), the rest is exactly a ring allreduce
    assert float(hier.total) == pytest.approx(float(ring.total))


def test_hierarchical_beats_flat_ring_when_intra_is_fast() -> None:
    model = CostModel.from_link(1e-5, 1.25e9, ranks_per_node=8)
    model.links["intra"] = model.links["intra"].__class__(alpha=1e-6, beta=1 / 150e9)
    n = 64 * 2**20
    hier = float(model.collective("allreduce", "hierarchical", n, 64).total)
    ring = float(model.collective("allreduce", "ring", n, 64).total)
    assert hier < ring  # 7 inter hops of latency instead of 126


@pytest.mark.parametrize("ranks", [0, -1, 2.5])
def test_bad_ranks(ranks: float) -> None:
    with pytest.raises(InputError, match="ranks"):
        CostModel.from_link(1e-5, 1.25e9).collective("allreduce", "ring", 1e6, ranks)


@pytest.mark.parametrize("latency,bandwidth,field", [(1e-5, 0.0, "bandwidth"), (-1.0, 1e9, "latency")])
def test_bad_link(latency: float, bandwidth: float, field: str) -> None:
    with pytest.raises(InputError, match=field):
        CostModel.from_link(latency, bandwidth)


def test_predict_is_vectorised_over_links_and_matches_the_model() -> None:
    from flexcomm.costmodel import predict

    bandwidths = np.array([1.25e8, 1.25e9, 1.25e10])
    latencies = np.array([[1e-6], [1e-3]])  # broadcasts against bandwidths: a 2 x 3 grid
    grid = predict("allgather", "ring", 1e6, 16, latencies, bandwidths).total
    assert grid.shape == (2, 3)
    for i, lat in enumerate(latencies[:, 0]):
        for j, bw in enumerate(bandwidths):
            single = CostModel.from_link(lat, bw).collective("allgather", "ring", 1e6, 16).total
            assert grid[i, j] == pytest.approx(float(single))
    with pytest.raises(InputError, match="bandwidth"):
        predict("allreduce", "ring", 1e6, 8, 1e-6, np.array([1e9, 0.0]))


def test_atomic_write_replaces_whole_files_with_normal_permissions(tmp_path) -> None:
    import os
    import stat

    from flexcomm.costmodel.atomic import write_text_atomic

    target = tmp_path / "out.json"
    write_text_atomic(target, "first\n")
    write_text_atomic(target, "second\n")
    assert target.read_text() == "second\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file left behind
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_profile_prices_only_its_own_link_class_on_a_cluster() -> None:
    from flexcomm.costmodel.calibration import fit, synthetic_measurements
    from flexcomm.costmodel.cluster import load_cluster

    cluster = load_cluster("4x8-a100-ib")
    profile = fit(synthetic_measurements("allreduce", "ring", 1e-3, 1 / 1e8, noise=0.0))  # an "inter" fit
    calibrated = CostModel.from_cluster(cluster, profile=profile)
    nominal = CostModel.from_cluster(cluster)
    n = 2.0**26
    # 8 ranks stay inside one node: the NVLink link prices them, not the inter-node fit
    assert float(calibrated.collective("allreduce", "ring", n, 8).total) == pytest.approx(
        float(nominal.collective("allreduce", "ring", n, 8).total))
    # 32 ranks cross nodes: the fit prices them
    expected = 2 * 31 * 1e-3 + 3 * 31 / 32 * n / 1e8  # the effective beta also prices the reduced bytes
    assert float(calibrated.collective("allreduce", "ring", n, 32).total) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("collective,algorithm", [("allreduce", "ring"), ("reduce-scatter", "ring"),
                                                   ("allreduce", "recursive-doubling"), ("allgather", "bruck")])
def test_calibrated_model_predicts_exactly_what_the_profile_predicts(collective: str, algorithm: str) -> None:
    """The fitted beta is effective (it covers the reduced bytes too): the model must price b + g with it."""
    from flexcomm.costmodel.calibration import fit, synthetic_measurements

    profile = fit(synthetic_measurements(collective, algorithm, 2e-4, 1 / 1.25e9, noise=0.0))
    model = CostModel.from_profile(profile)
    sizes = np.array([2.0**10, 2.0**20, 2.0**27])
    np.testing.assert_allclose(model.collective(collective, algorithm, sizes, 8).total,
                               profile.predict(collective, algorithm, sizes, 8), rtol=1e-9)
