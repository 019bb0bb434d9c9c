"""Collective cost formulas: hand-derived values, the forms the papers print, and properties.

Hand values use p = 8 and p = 6 ranks, n = 64 MiB, alpha = 10 us, beta = 1/(1.25 GB/s) = 0.8 ns/B
and gamma = 0.2 ns/B; the coefficients are written out so a change of formula shows up as a
changed number, not as a changed helper.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.collective_formulas import (
    PIPELINE_SEGMENT_BYTES,
    Coefficients,
    CostBreakdown,
    allgather_bruck,
    allgather_recursive_doubling,
    allgather_ring,
    allreduce_rabenseifner,
    allreduce_recursive_doubling,
    allreduce_ring,
    allreduce_tree,
    broadcast_binomial,
    broadcast_pipelined_ring,
    broadcast_scatter_allgather,
    ceil_log2,
    floor_log2,
    reduce_scatter_ring,
)
from flexcomm.costmodel.collectives import BUS_BANDWIDTH_FACTOR, FORMULAS, algorithms, formula
from flexcomm.costmodel.errors import InputError

MIB64 = 67_108_864  # 64 MiB
ALPHA = 10e-6
BETA = 1 / 1.25e9  # 8e-10 s/B
GAMMA = 2e-10

# (collective, algorithm) -> (alpha count, beta bytes, gamma bytes) for p = 8, n = 64 MiB; lg 8 = 3.
# 7/8 n = 58_720_256; 2 * 7/8 n = 117_440_512; 3n = 201_326_592; 6n = 402_653_184; 7n = 469_762_048.
HAND_P8 = {
    ("allreduce", "ring"): (14, 117_440_512, 58_720_256),  # 2(p-1); 2(p-1)/p n; (p-1)/p n
    ("allreduce", "recursive-doubling"): (3, 201_326_592, 201_326_592),  # lg p; n lg p; n lg p
    ("allreduce", "tree"): (6, 402_653_184, 201_326_592),  # 2 lg p; 2 lg p n; lg p n
    ("allreduce", "rabenseifner"): (6, 117_440_512, 58_720_256),  # 2 lg p; 2(p-1)/p n; (p-1)/p n
    ("allgather", "ring"): (7, 469_762_048, 0),  # p-1; (p-1) m
    ("allgather", "recursive-doubling"): (3, 469_762_048, 0),  # lg p; (p-1) m
    ("allgather", "bruck"): (3, 469_762_048, 0),
    ("reduce-scatter", "ring"): (7, 58_720_256, 58_720_256),  # p-1; (p-1)/p n; (p-1)/p n
    ("broadcast", "binomial"): (3, 201_326_592, 0),  # lg p; lg p n
    # gloo: the root feeds ranks 1, 2, 4 at once (3 n), rank 1 then 3 and 5 (2 n), rank 3 then 7 (n)
    ("broadcast", "binomial-async"): (3, 402_653_184, 0),
    # S = 64 MiB / 512 KiB = 128 segments: p-2+S = 134; n + (p-2) * 512 KiB = n + 3_145_728.
    ("broadcast", "pipelined-ring"): (134, 70_254_592, 0),
    ("broadcast", "scatter-allgather"): (10, 117_440_512, 0),  # lg p + p - 1; 2(p-1)/p n
    ("alltoall", "pairwise"): (7, 58_720_256, 0),  # p-1; (p-1)/p n
}

# The same at p = 8 in seconds: alpha*a + 8e-10*b + 2e-10*g, added up by hand.
HAND_P8_SECONDS = {
    ("allreduce", "ring"): 0.1058364608,  # 1.4e-4 + 0.0939524096 + 0.0117440512
    ("allreduce", "recursive-doubling"): 0.201356592,  # 3e-5 + 0.1610612736 + 0.0402653184
    ("allreduce", "tree"): 0.3624478656,  # 6e-5 + 0.3221225472 + 0.0402653184
    ("allreduce", "rabenseifner"): 0.1057564608,  # 6e-5 + 0.0939524096 + 0.0117440512
    ("allgather", "ring"): 0.3758796384,  # 7e-5 + 0.3758096384
    ("allgather", "recursive-doubling"): 0.3758396384,  # 3e-5 + 0.3758096384
    ("allgather", "bruck"): 0.3758396384,
    ("reduce-scatter", "ring"): 0.058790256,  # 7e-5 + 0.0469762048 + 0.0117440512
    ("broadcast", "binomial"): 0.1610912736,  # 3e-5 + 0.1610612736
    ("broadcast", "binomial-async"): 0.3221525472,  # 3e-5 + 0.3221225472
    ("broadcast", "pipelined-ring"): 0.0575436736,  # 1.34e-3 + 0.0562036736
    ("broadcast", "scatter-allgather"): 0.0940524096,  # 1e-4 + 0.0939524096
    ("alltoall", "pairwise"): 0.0470462048,  # 7e-5 + 0.0469762048
}

# p = 6 (not a power of two): ceil lg 6 = 3, floor lg 6 = 2; 5/6 n = 55_924_053.33..
FIVE_SIXTHS = 5 * MIB64 / 6
HAND_P6 = {
    ("allreduce", "ring"): (10, 2 * FIVE_SIXTHS, FIVE_SIXTHS),
    # MPICH folds 2 extra ranks in and out: floor lg + 2 rounds of n, floor lg + 1 reductions.
    ("allreduce", "recursive-doubling"): (4, 268_435_456, 201_326_592),
    ("allreduce", "tree"): (6, 402_653_184, 201_326_592),
    ("allreduce", "rabenseifner"): (6, 2 * FIVE_SIXTHS, FIVE_SIXTHS),
    ("allgather", "ring"): (5, 335_544_320, 0),
    ("allgather", "recursive-doubling"): (3, 335_544_320, 0),
    ("allgather", "bruck"): (3, 335_544_320, 0),
    ("reduce-scatter", "ring"): (5, FIVE_SIXTHS, FIVE_SIXTHS),
    ("broadcast", "binomial"): (3, 201_326_592, 0),
    # root -> {1, 2, 4} (3 n), then 2 -> 3 and 4 -> 5 (n): two hops, 4 n
    ("broadcast", "binomial-async"): (2, 268_435_456, 0),
    ("broadcast", "pipelined-ring"): (132, 69_206_016, 0),  # 4 + 128; n + 4 * 524_288
    ("broadcast", "scatter-allgather"): (8, 2 * FIVE_SIXTHS, 0),
    ("alltoall", "pairwise"): (5, FIVE_SIXTHS, 0),
}


def _coefs(key: tuple[str, str], n: object, p: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c = FORMULAS[key](n, p)
    return c.alpha, c.beta, c.gamma


def test_hand_tables_cover_every_formula() -> None:
    assert set(HAND_P8) == set(FORMULAS) == set(HAND_P6) == set(HAND_P8_SECONDS)


@pytest.mark.parametrize("key", sorted(HAND_P8))
def test_hand_values_p8(key: tuple[str, str]) -> None:
    a, b, g = _coefs(key, MIB64, 8)
    assert (float(a), float(b), float(g)) == pytest.approx(HAND_P8[key], rel=1e-12)
    cost = FORMULAS[key](MIB64, 8).time(ALPHA, BETA, GAMMA)
    assert float(cost.total) == pytest.approx(HAND_P8_SECONDS[key], rel=1e-12)
    assert float(cost.latency) == pytest.approx(HAND_P8[key][0] * 1e-5, rel=1e-12)


@pytest.mark.parametrize("key", sorted(HAND_P6))
def test_hand_values_p6(key: tuple[str, str]) -> None:
    a, b, g = _coefs(key, MIB64, 6)
    assert (float(a), float(b), float(g)) == pytest.approx(HAND_P6[key], rel=1e-12)


@pytest.mark.parametrize("key", sorted(FORMULAS))
@pytest.mark.parametrize("n", [0, 1, MIB64, 3.5e9])
def test_one_rank_costs_nothing(key: tuple[str, str], n: float) -> None:
    cost = FORMULAS[key](n, 1).time(ALPHA, BETA, GAMMA)
    assert float(cost.total) == 0.0
    assert float(cost.latency) == float(cost.bandwidth) == float(cost.compute) == 0.0


def test_gamma_defaults_to_zero() -> None:
    cost = allreduce_ring(MIB64, 8).time(ALPHA, BETA)
    assert float(cost.compute) == 0.0
    assert float(cost.total) == pytest.approx(1.4e-4 + 0.0939524096, rel=1e-12)


# --- the paper forms (Tyagi & Swany, IEEE BigData 2023, Table I; N workers, M bytes) ---------


@pytest.mark.parametrize("N", [2, 4, 8, 16, 64, 1024])
@pytest.mark.parametrize("M", [4.0, 1e6, 46.76e6, 2.0**30])
def test_paper_forms_power_of_two(N: int, M: float) -> None:
    a, b = 4e-3, 1 / 2.5e9  # 4 ms, 20 Gbit/s: their Table IV network
    lg = math.log2(N)
    # tree allreduce: 2 alpha log N + 2 log N M beta (gamma not priced in the paper)
    tree = 2 * a * lg + 2 * lg * M * b
    assert float(allreduce_tree(M, N).time(a, b).total) == pytest.approx(tree, rel=1e-12)
    # ring allreduce: 2(N-1) alpha + 2(N-1)/N M beta
    ring = 2 * (N - 1) * a + 2 * (N - 1) / N * M * b
    assert float(allreduce_ring(M, N).time(a, b).total) == pytest.approx(ring, rel=1e-12)
    # binomial broadcast: alpha log N + log N M beta
    bcast = a * lg + lg * M * b
    assert float(broadcast_binomial(M, N).time(a, b).total) == pytest.approx(bcast, rel=1e-12)
    # allgather with M per rank: alpha log N + (N-1) M beta
    for gather in (allgather_recursive_doubling, allgather_bruck):
        assert float(gather(M, N).time(a, b).total) == pytest.approx(a * lg + (N - 1) * M * b, rel=1e-12)


def test_mpich_gathered_total_convention() -> None:
    """MPICH writes allgather as (p-1)/p n beta with n = p m gathered: the same number."""
    p, m = 8, 1_000_000.0
    n = p * m
    assert float(allgather_ring(m, p).beta) == pytest.approx((p - 1) / p * n, rel=1e-15)


# --- hypothesis properties ------------------------------------------------------------------

ranks_st = st.integers(min_value=1, max_value=4096)
size_st = st.floats(min_value=0.0, max_value=1e11, allow_nan=False, allow_infinity=False)
alpha_st = st.floats(min_value=0.0, max_value=1e-1, allow_nan=False)
beta_st = st.floats(min_value=0.0, max_value=1e-6, allow_nan=False)
keys_st = st.sampled_from(sorted(FORMULAS))
FAST = settings(deadline=None, max_examples=150)


@FAST
@given(keys_st, ranks_st, size_st, size_st, alpha_st, beta_st, beta_st)
def test_time_grows_with_size(
    key: tuple[str, str], p: int, n1: float, n2: float, a: float, b: float, g: float
) -> None:
    small, large = sorted((n1, n2))
    t_small = FORMULAS[key](small, p).time(a, b, g)
    t_large = FORMULAS[key](large, p).time(a, b, g)
    assert float(t_small.total) <= float(t_large.total)
    assert float(t_small.latency) <= float(t_large.latency)
    assert float(t_small.bandwidth) <= float(t_large.bandwidth)


def test_pipelined_broadcast_has_no_drop_at_segment_boundaries() -> None:
    """Crossing a segment boundary adds one latency and one byte, never makes it cheaper."""
    sizes = np.array([k * PIPELINE_SEGMENT_BYTES + d for k in range(1, 6) for d in (-1, 0, 1)], dtype=float)
    for p in (2, 3, 8, 64):
        totals = broadcast_pipelined_ring(sizes, p).time(ALPHA, BETA).total
        assert np.all(np.diff(totals) >= 0)
        zero_alpha = broadcast_pipelined_ring(sizes, p).time(0.0, BETA).total
        assert np.all(np.diff(zero_alpha) >= 0)


LOWER_BOUND = {
    # bytes through each rank's link (nccl-tests PERFORMANCE.md; allgather in per-rank m)
    "allreduce": lambda n, p: 2 * (p - 1) / p * n,
    "allgather": lambda n, p: (p - 1) * n,
    "reduce-scatter": lambda n, p: (p - 1) / p * n,
    "alltoall": lambda n, p: (p - 1) / p * n,
    "broadcast": lambda n, p: n if p > 1 else 0.0,  # every non-root must receive all n bytes
}


@FAST
@given(keys_st, ranks_st, size_st)
def test_never_below_bandwidth_lower_bound(key: tuple[str, str], p: int, n: float) -> None:
    beta_bytes = float(FORMULAS[key](n, p).beta)
    assert beta_bytes >= LOWER_BOUND[key[0]](n, p) * (1 - 1e-12)


@FAST
@given(ranks_st, size_st)
def test_reduction_bytes_at_least_reduce_scatter_share(p: int, n: float) -> None:
    """Every allreduce reduces at least (p-1)/p n bytes on the critical rank."""
    for alg in algorithms()["allreduce"]:
        if alg == "hierarchical":
            continue
        assert float(formula("allreduce", alg)(n, p).gamma) >= (p - 1) / p * n * (1 - 1e-12)


@FAST
@given(ranks_st, size_st)
def test_ring_and_rabenseifner_share_bandwidth_and_reduction(p: int, n: float) -> None:
    ring, rab = allreduce_ring(n, p), allreduce_rabenseifner(n, p)
    assert float(ring.beta) == float(rab.beta)
    assert float(ring.gamma) == float(rab.gamma)


@FAST
@given(st.integers(min_value=2, max_value=1 << 20), size_st)
def test_logarithmic_latency_never_above_linear(p: int, n: float) -> None:
    assert float(allreduce_rabenseifner(n, p).alpha) <= float(allreduce_ring(n, p).alpha)
    assert float(allreduce_tree(n, p).alpha) <= float(allreduce_ring(n, p).alpha)
    assert float(allgather_bruck(n, p).alpha) <= float(allgather_ring(n, p).alpha)
    assert float(broadcast_binomial(n, p).alpha) <= float(broadcast_scatter_allgather(n, p).alpha)
    # floor lg p (+2 folding rounds when p is not a power of two) <= 2(p-1)
    assert float(allreduce_recursive_doubling(n, p).alpha) <= float(allreduce_ring(n, p).alpha)
    # ... paid for in bytes: tree and recursive doubling move at least the ring's bytes
    assert float(allreduce_tree(n, p).beta) >= float(allreduce_ring(n, p).beta)
    assert float(allreduce_recursive_doubling(n, p).beta) >= float(allreduce_ring(n, p).beta)


@FAST
@given(st.integers(min_value=0, max_value=40))
def test_power_of_two_exact_log(k: int) -> None:
    p = float(2**k)
    assert float(ceil_log2(p)) == k == float(floor_log2(p))
    assert float(allreduce_recursive_doubling(1.0, p).alpha) == k
    if k >= 1:
        assert float(ceil_log2(p + 1)) == k + 1
        assert float(floor_log2(p + 1)) == k
    if k >= 2:
        assert float(ceil_log2(p - 1)) == k
        assert float(floor_log2(p - 1)) == k - 1


@FAST
@given(
    keys_st,
    st.lists(st.tuples(ranks_st, size_st, alpha_st, beta_st, beta_st), min_size=1, max_size=30),
)
def test_vectorised_equals_elementwise(
    key: tuple[str, str], rows: list[tuple[int, float, float, float, float]]
) -> None:
    p, n, a, b, g = (np.array(col, dtype=float) for col in zip(*rows, strict=True))
    fn = FORMULAS[key]
    vec = fn(n, p).time(a, b, g)
    for i in range(len(rows)):
        one = fn(float(n[i]), int(p[i])).time(float(a[i]), float(b[i]), float(g[i]))
        assert float(one.latency) == vec.latency[i]
        assert float(one.bandwidth) == vec.bandwidth[i]
        assert float(one.compute) == vec.compute[i]
        assert float(one.total) == vec.total[i]


@pytest.mark.parametrize("key", sorted(FORMULAS))
def test_broadcasting_scalar_against_array(key: tuple[str, str]) -> None:
    ranks = np.array([1, 2, 3, 6, 8, 1000])
    sizes = np.array([[0.0], [1e3], [MIB64]])
    c = FORMULAS[key](sizes, ranks)
    assert c.alpha.shape == c.beta.shape == c.gamma.shape == (3, 6)
    for i, n in enumerate(sizes[:, 0]):
        for j, p in enumerate(ranks):
            single = FORMULAS[key](n, p)
            assert (float(single.alpha), float(single.beta), float(single.gamma)) == (
                c.alpha[i, j],
                c.beta[i, j],
                c.gamma[i, j],
            )


# --- lookup and input errors ----------------------------------------------------------------


def test_algorithms_table() -> None:
    table = algorithms()
    assert set(table) == {"allreduce", "allgather", "reduce-scatter", "broadcast", "alltoall"}
    assert table["allreduce"] == ["ring", "recursive-doubling", "tree", "rabenseifner", "hierarchical"]
    assert table["broadcast"] == ["binomial", "binomial-async", "pipelined-ring", "scatter-allgather"]
    for collective, algorithm in FORMULAS:
        assert formula(collective, algorithm) is FORMULAS[(collective, algorithm)]
    assert set(BUS_BANDWIDTH_FACTOR) == set(table)


def test_unknown_collective_names_field_and_choices() -> None:
    with pytest.raises(InputError) as err:
        formula("allscatter", "ring")
    assert err.value.field == "collective"
    assert err.value.got == "allscatter"
    for name in ("allgather", "allreduce", "alltoall", "broadcast", "reduce-scatter"):
        assert name in str(err.value)
    assert isinstance(err.value, ValueError)


def test_unknown_algorithm_names_field_and_choices() -> None:
    with pytest.raises(InputError) as err:
        formula("allreduce", "butterfly")
    assert err.value.field == "algorithm"
    assert "rabenseifner" in str(err.value) and "ring" in str(err.value)
    with pytest.raises(InputError) as err:
        formula("broadcast", "ring")
    assert err.value.field == "algorithm"
    assert "pipelined-ring" in str(err.value)


def test_hierarchical_is_listed_but_not_a_single_link_formula() -> None:
    assert "hierarchical" in algorithms()["allreduce"]
    with pytest.raises(InputError) as err:
        formula("allreduce", "hierarchical")
    assert err.value.field == "algorithm"


@pytest.mark.parametrize("key", sorted(FORMULAS))
@pytest.mark.parametrize("bad", [-1.0, -1e-9, math.nan, math.inf, -math.inf, [1.0, -2.0]])
def test_bad_sizes_raise(key: tuple[str, str], bad: object) -> None:
    with pytest.raises(InputError) as err:
        FORMULAS[key](bad, 8)
    assert err.value.field == "size"


@pytest.mark.parametrize("key", sorted(FORMULAS))
@pytest.mark.parametrize("bad", [0, -4, 0.5, 2.5, 1 + 1e-9, math.nan, math.inf, [2, 3, 0], [4, 4.5]])
def test_bad_ranks_raise(key: tuple[str, str], bad: object) -> None:
    with pytest.raises(InputError) as err:
        FORMULAS[key](1024.0, bad)
    assert err.value.field == "ranks"


def test_integral_float_ranks_accepted() -> None:
    assert float(allreduce_ring(MIB64, 8.0).alpha) == 14.0
    assert float(allreduce_ring(MIB64, np.int64(8)).alpha) == 14.0


# --- the small value types ------------------------------------------------------------------


def test_coefficients_add_and_breakdown() -> None:
    rs, ag = reduce_scatter_ring(MIB64, 8), allgather_ring(MIB64 / 8, 8)
    both = rs + ag
    assert isinstance(both, Coefficients)
    ring = allreduce_ring(MIB64, 8)
    assert float(both.alpha) == float(ring.alpha)
    assert float(both.beta) == pytest.approx(float(ring.beta), rel=1e-15)
    assert float(both.gamma) == float(ring.gamma)

    t = ring.time(ALPHA, BETA, GAMMA)
    summed = t + t
    assert isinstance(summed, CostBreakdown)
    assert float(summed.total) == pytest.approx(2 * HAND_P8_SECONDS[("allreduce", "ring")], rel=1e-12)
    d = t.as_dict()
    assert set(d) == {"seconds", "latency_s", "bandwidth_s", "reduction_s"}
    assert d["seconds"] == pytest.approx(0.1058364608, rel=1e-12)
    assert isinstance(d["seconds"], float)
    vec = allreduce_ring([1e3, 1e6], 8).time(ALPHA, BETA).as_dict()
    assert isinstance(vec["seconds"], list) and len(vec["seconds"]) == 2


def test_bus_bandwidth_factors() -> None:
    p = np.array([1.0, 2.0, 8.0])
    assert BUS_BANDWIDTH_FACTOR["allreduce"](p).tolist() == [0.0, 1.0, 1.75]
    assert BUS_BANDWIDTH_FACTOR["allgather"](p).tolist() == [0.0, 0.5, 0.875]
    assert BUS_BANDWIDTH_FACTOR["broadcast"](p).tolist() == [1.0, 1.0, 1.0]
    # an algorithm at the lower bound runs at bus bandwidth = link bandwidth
    n, ranks = float(MIB64), 8.0
    t = float(allreduce_ring(n, ranks).time(0.0, BETA).total)
    bus = n / t * float(BUS_BANDWIDTH_FACTOR["allreduce"](np.array(ranks)))
    assert bus == pytest.approx(1.25e9, rel=1e-12)


def test_predict_names_the_link_as_cost_does() -> None:
    """flexcomm.predict(..., latency="10us", bandwidth="10Gbit/s"), the package docstring's example."""
    import numpy as np

    import flexcomm
    from flexcomm.costmodel.errors import InputError

    sizes = np.array([1e6, 1e8])
    named = flexcomm.predict("allreduce", "ring", sizes, 64, latency="10us", bandwidth="10Gbit/s")
    positional = flexcomm.predict("allreduce", "ring", sizes, 64, 10e-6, 1.25e9)
    assert np.array_equal(named.total, positional.total)
    with pytest.raises(InputError, match="latency: got 'given twice'"):
        flexcomm.predict("allreduce", "ring", 1e6, 64, 1e-6, 1e9, latency="10us")
    with pytest.raises(InputError, match="bandwidth"):
        flexcomm.predict("allreduce", "ring", 1e6, 64, latency="10us")


@pytest.mark.parametrize("field", ["size", "latency", "bandwidth"])
def test_a_boolean_is_never_a_size_time_or_bandwidth(field: str) -> None:
    import flexcomm
    from flexcomm.costmodel.errors import InputError

    args = {"ranks": 8, "size": "1MiB", "latency": "1us", "bandwidth": "1Gbit/s", field: True}
    with pytest.raises(InputError, match=rf"^{field}: got True"):
        flexcomm.cost("allreduce", "ring", **args)
