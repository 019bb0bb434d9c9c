"""Compressors on the in-process emulation: aggregates against dense, error feedback, payloads, gains."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.compression import LocalCommunicator, make_compressor
from flexcomm.compression.compressors import COMPRESSORS, pack, random_subset, unpack
from flexcomm.costmodel.compressed import SchemeAlgorithms, scheme_parts, topk_count
from flexcomm.costmodel.errors import InputError

torch.set_num_threads(1)

SPARSE = [("topk-ag", {}), ("topk-ar", {"owner": "star"}), ("topk-ar", {"owner": "var"}),
          ("topk-ar-sketch", {"block": 4}), ("randomk", {}), ("threshold", {})]
EXACT_AT_ONE = [s for s in SPARSE if s[0] != "threshold"]
LOSSY = [*SPARSE, ("fp16", {}), ("bf16", {})]


def grads_for(n_workers: int, numel: int, seed: int = 0, scale: float = 1.0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=gen) * scale * (1 + w) for w in range(n_workers)]


def dense_mean(grads: list[torch.Tensor]) -> torch.Tensor:
    total = grads[0].clone()
    for g in grads[1:]:
        total.add_(g)
    return total.div_(len(grads))


def ratio_of(name: str, ratio: float) -> float | None:
    return ratio if COMPRESSORS[name].needs_ratio else None


# --- aggregates against dense ----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "opts"), EXACT_AT_ONE)
def test_ratio_one_equals_dense_exactly(name: str, opts: dict) -> None:
    comm = LocalCommunicator(3)
    comp = make_compressor(name, 1.0, **opts)
    for step in range(3):
        grads = grads_for(3, 101, seed=step)
        result = comp.exchange(grads, comm)
        expected = dense_mean(grads)
        for agg in result.aggregates:
            assert torch.equal(agg, expected)
        assert result.stats.gain == pytest.approx(1.0)


@pytest.mark.parametrize(("name", "eps"), [("fp16", 2**-10), ("bf16", 2**-7)])
def test_casts_within_their_precision(name: str, eps: float) -> None:
    comm = LocalCommunicator(4)
    comp = make_compressor(name, error_feedback=False)
    grads = grads_for(4, 500)
    expected = dense_mean(grads)
    agg = comp.exchange(grads, comm).aggregates[0]
    assert agg.dtype == torch.float32
    # one rounding per worker's value and one per partial sum: a few half-ulps of the largest magnitude
    bound = 4 * eps * max(g.abs().max().item() for g in grads)
    assert (agg - expected).abs().max().item() <= bound
    assert not torch.equal(agg, expected)


def test_dense_is_plain_mean_and_gain_one() -> None:
    comm = LocalCommunicator(4)
    grads = grads_for(4, 64)
    result = make_compressor("dense").exchange(grads, comm)
    assert all(torch.equal(a, dense_mean(grads)) for a in result.aggregates)
    assert result.stats.gain == 1.0 and result.stats.local_gain == 1.0
    assert [r.collective for r in result.stats.collectives] == ["allreduce"]
    assert not result.stats.overhead  # nothing to measure for dense
    assert all(torch.equal(g, h) for g, h in zip(grads, grads_for(4, 64), strict=True))  # inputs untouched


def test_powersgd_full_rank_equals_dense() -> None:
    comm = LocalCommunicator(3)
    comp = make_compressor("powersgd", rank=8, min_compression_rate=0.0, shapes=[(8, 8)], start_iter=2)
    for step in range(4):
        grads = grads_for(3, 64, seed=step)
        result = comp.exchange(grads, comm)
        assert torch.allclose(result.aggregates[0], dense_mean(grads), atol=1e-5)
    assert result.stats.extra.get("vanilla") is None  # step 3 was compressed
    assert result.stats.payload_bytes == 4 * (64 + 64)  # P (8x8) and Q (8x8), no uncompressed part


def test_powersgd_error_feedback_reduces_error_over_steps() -> None:
    """With a fixed gradient, EF makes the running mean of rank-1 aggregates approach the dense mean."""
    comm = LocalCommunicator(2)
    grads = grads_for(2, 12 * 10, seed=3)
    target = dense_mean(grads)

    def running_errors(error_feedback: bool) -> list[float]:
        comp = make_compressor("powersgd", rank=2, shapes=[(12, 10)], start_iter=2, warm_start=error_feedback,
                               error_feedback=error_feedback)
        total, errors = torch.zeros_like(target), []
        for step in range(60):
            total += comp.exchange(grads, comm).aggregates[0]
            errors.append(((total / (step + 1) - target).norm() / target.norm()).item())
        return errors

    with_ef, without_ef = running_errors(True), running_errors(False)
    assert with_ef[-1] < 0.25 * max(with_ef[:10])  # measured: 0.43 at step 5, 0.05 at step 60
    assert with_ef[-1] < 0.2 * without_ef[-1]  # without EF the bias stays (0.70)


def test_powersgd_uncompressed_vectors_and_stats() -> None:
    comm = LocalCommunicator(2)
    shapes = [(16, 8), (16,), (3, 2)]  # the bias and the tiny matrix are not worth compressing at rate 2
    comp = make_compressor("powersgd", rank=2, shapes=shapes, start_iter=2)
    for step in range(3):
        result = comp.exchange(grads_for(2, 128 + 16 + 6, seed=step), comm)
    sizes = [r.nbytes for r in result.stats.collectives]
    assert sizes == [4 * (16 + 6), 4 * 16 * 2, 4 * 8 * 2]  # uncompressed, P, Q
    assert result.stats.k == 22 + 32 + 16
    state = comp.state(0)
    assert state.total_numel_before_compression == 150  # torch's own counters are kept


def test_powersgd_rejects_torch_invalid_start() -> None:
    with pytest.raises(InputError) as err:
        make_compressor("powersgd", start_iter=1)
    assert err.value.field == "start_iter"


# --- error feedback --------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "opts"), LOSSY)
def test_error_feedback_invariant_is_exact(name: str, opts: dict) -> None:
    comm = LocalCommunicator(3)
    comp = make_compressor(name, ratio_of(name, 0.1), keep_sent=True, **opts)
    for step in range(4):
        grads = grads_for(3, 200, seed=step)
        old = [comp.residual(r) for r in range(3)]
        accs = [g + r if r is not None else g.clone() for g, r in zip(grads, old, strict=True)]
        result = comp.exchange(grads, comm)
        for rank in range(3):
            sent, new = result.sent[rank], comp.residual(rank)
            assert torch.equal(sent + new, accs[rank]), (name, step, rank)
        mean_sent = dense_mean(list(result.sent))
        eps = {"fp16": 2**-11, "bf16": 2**-8}.get(name, 2**-24)  # the wire's half-ulp
        bound = 4 * eps * max(a.abs().max().item() for a in accs)
        assert (result.aggregates[0] - mean_sent).abs().max().item() <= bound


@pytest.mark.parametrize(("name", "opts"), SPARSE)
def test_without_error_feedback_nothing_is_kept(name: str, opts: dict) -> None:
    comm = LocalCommunicator(2)
    comp = make_compressor(name, 0.1, error_feedback=False, **opts)
    grads = grads_for(2, 100)
    first = comp.exchange(grads, comm).aggregates[0]
    assert comp.residual(0) is None and comp.residual(1) is None
    if name in ("topk-ag", "topk-ar-sketch"):  # no residual and no owner rotation: the same step again
        assert torch.equal(comp.exchange(grads, comm).aggregates[0], first)


def test_error_feedback_eventually_sends_everything() -> None:
    """A fixed gradient: after enough steps every element was delivered (sum of aggregates ~ T * mean)."""
    comm = LocalCommunicator(2)
    comp = make_compressor("topk-ar", 0.25)
    grads = grads_for(2, 40)
    total = sum(comp.exchange(grads, comm).aggregates[0] for _ in range(40))
    residual_mean = dense_mean([comp.residual(0), comp.residual(1)])
    assert torch.allclose(total + residual_mean, 40 * dense_mean(grads), atol=1e-4)


# --- topk-ar specifics -----------------------------------------------------------------------------


@pytest.mark.parametrize("owner", ["star", "var"])
def test_topk_ar_sums_exactly_at_agreed_indices(owner: str) -> None:
    n_workers, numel, ratio = 4, 300, 0.05
    comm = LocalCommunicator(n_workers)
    comp = make_compressor("topk-ar", ratio, owner=owner)
    k = int(topk_count(numel, ratio))
    for step in range(5):
        grads = grads_for(n_workers, numel, seed=10 + step)
        old = [comp.residual(r) for r in range(n_workers)]
        accs = [g + r if r is not None else g.clone() for g, r in zip(grads, old, strict=True)]
        result = comp.exchange(grads, comm)
        idx = torch.topk(accs[result.stats.owner].abs(), k).indices
        expected = torch.zeros(numel)
        expected[idx] = dense_mean([a[idx] for a in accs])
        for agg in result.aggregates:
            assert torch.equal(agg, expected)
        mask = torch.ones(numel, dtype=torch.bool)
        mask[idx] = False
        for rank in range(n_workers):
            assert torch.equal(comp.residual(rank)[mask], accs[rank][mask])
            assert not comp.residual(rank)[idx].any()


def test_star_rotates_owners() -> None:
    comm = LocalCommunicator(3)
    comp = make_compressor("topk-ar", 0.1, owner="star")
    owners = [comp.exchange(grads_for(3, 50, seed=s), comm).stats.owner for s in range(7)]
    assert owners == [0, 1, 2, 0, 1, 2, 0]


def test_var_picks_largest_norm() -> None:
    comm = LocalCommunicator(4)
    comp = make_compressor("topk-ar", 0.1, owner="var", error_feedback=False)
    for big in (2, 0, 3):
        grads = grads_for(4, 50, seed=big)
        grads[big] = grads[big] * 100
        assert comp.exchange(grads, comm).stats.owner == big


def test_keys_keep_separate_state() -> None:
    comm = LocalCommunicator(2)
    comp = make_compressor("topk-ar", 0.1)
    a = comp.exchange(grads_for(2, 30), comm, key=0)
    b = comp.exchange(grads_for(2, 70), comm, key=1)
    assert a.stats.owner == 0 and b.stats.owner == 0  # each key counts its own steps
    assert comp.residual(0, key=0).numel() == 30 and comp.residual(0, key=1).numel() == 70
    assert comp.exchange(grads_for(2, 30), comm, key=0).stats.owner == 1


# --- payloads and the cost model -------------------------------------------------------------------


def _as_rows(parts: list) -> tuple[list[tuple[str, str]], list[float]]:
    rows = sorted((c, a, float(coef.alpha), float(coef.beta)) for c, a, coef in parts)
    return [r[:2] for r in rows], [x for r in rows for x in r[2:]]


@settings(max_examples=40, deadline=None)
@given(
    numel=st.integers(1, 3000),
    ratio=st.floats(1e-3, 1.0),
    n_workers=st.integers(1, 6),
    scheme=st.sampled_from(["dense", "topk-ag", "topk-ar-star", "topk-ar-var"]),
    allreduce=st.sampled_from(["ring", "tree"]),
)
def test_payload_matches_cost_model(numel: int, ratio: float, n_workers: int, scheme: str, allreduce: str) -> None:
    comm = LocalCommunicator(n_workers, algorithms={"allreduce": allreduce})
    owner = scheme.split("-")[-1] if scheme.startswith("topk-ar") else "star"
    name = "topk-ar" if scheme.startswith("topk-ar") else scheme
    opts = {"owner": owner} if name == "topk-ar" else {}
    comp = make_compressor(name, ratio if name != "dense" else None, **opts)
    stats = comp.exchange(grads_for(n_workers, numel), comm).stats
    algorithms = SchemeAlgorithms(allreduce=allreduce, index_owner=owner)
    expected = scheme_parts(name, numel, n_workers, ratio, algorithms=algorithms)
    got_names, got_terms = _as_rows(stats.parts())
    want_names, want_terms = _as_rows(expected)
    assert got_names == want_names
    assert got_terms == pytest.approx(want_terms)  # the same alpha and beta coefficients
    k = int(topk_count(numel, ratio))
    want = {"dense": {"allreduce": 4 * numel}, "topk-ag": {"allgather": 8 * k},
            "topk-ar": {"broadcast": 4 * k, "allreduce": 4 * k}}[name]
    if owner == "var" and name == "topk-ar":
        want = {**want, "allgather": 4}
    assert stats.bytes_by_collective() == want


def test_other_payloads() -> None:
    comm = LocalCommunicator(4)
    grads = grads_for(4, 1000)
    randomk = make_compressor("randomk", 0.05).exchange(grads, comm).stats
    assert randomk.bytes_by_collective() == {"allreduce": 4 * 50}
    sketch = make_compressor("topk-ar-sketch", 0.05, block=16).exchange(grads, comm).stats
    assert [r.nbytes for r in sketch.collectives] == [4 * math.ceil(1000 / 16), 4 * sketch.sent[0]]
    assert sketch.sent[0] <= math.ceil(50 / 16) * 16
    fp16 = make_compressor("fp16").exchange(grads, comm).stats
    assert fp16.bytes_by_collective() == {"allreduce": 2000} and fp16.collectives[0].dtype == "float16"
    int64 = make_compressor("topk-ag", 0.05, index_dtype="int64").exchange(grads, comm).stats
    assert int64.bytes_by_collective() == {"allgather": 50 * 12}  # the paper's code: int64 indices
    thr = make_compressor("threshold", 0.05).exchange(grads, comm).stats
    assert thr.bytes_by_collective() == {"allgather": 8 * max(thr.sent)}
    assert [(r.collective, r.nbytes, r.purpose) for r in thr.overhead][-1] == ("allgather", 4, "control")


def test_measurement_is_overhead_not_payload() -> None:
    comm = LocalCommunicator(2)
    stats = make_compressor("topk-ag", 0.1, gain_every=2).exchange(grads_for(2, 100), comm).stats
    assert [(r.collective, r.purpose) for r in stats.overhead] == [("allreduce", "measure")]
    assert stats.gain is not None
    stats = make_compressor("topk-ag", 0.1, gain_every=0).exchange(grads_for(2, 100), comm).stats
    assert stats.overhead == () and stats.gain is None and stats.local_gain is not None


# --- gains -----------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    numel=st.integers(2, 400),
    ratio=st.floats(0.01, 1.0),
    n_workers=st.integers(1, 5),
    name=st.sampled_from(["topk-ar", "topk-ar-sketch", "randomk", "powersgd"]),
    seed=st.integers(0, 1000),
)
def test_gain_of_index_agreeing_schemes_in_unit_interval(
    numel: int, ratio: float, n_workers: int, name: str, seed: int
) -> None:
    comm = LocalCommunicator(n_workers)
    comp = make_compressor(name, ratio_of(name, ratio))
    for step in range(3):
        stats = comp.exchange(grads_for(n_workers, numel, seed=seed + step), comm).stats
        assert 0 < stats.gain <= 1 + 1e-6
        assert stats.gain_norm == pytest.approx(math.sqrt(stats.gain))


def test_topk_ag_gain_can_exceed_one() -> None:
    """Different index sets can drop entries that would have cancelled: the aggregate grows."""
    comm = LocalCommunicator(2)
    grads = [torch.tensor([10.0, -9.0]), torch.tensor([-9.0, 10.0])]  # dense mean (0.5, 0.5)
    stats = make_compressor("topk-ag", 0.5).exchange(grads, comm).stats
    assert stats.gain > 1
    assert 0 < stats.local_gain <= 1  # each worker's own message is a projection of its gradient


def test_local_gain_is_papers_unsquared_ratio() -> None:
    comm = LocalCommunicator(1)
    g = torch.tensor([3.0, -4.0, 0.0, 0.0])
    stats = make_compressor("topk-ag", 0.25).exchange([g], comm).stats
    assert stats.local_gain_norm == pytest.approx(4 / 5)
    assert stats.local_gain == pytest.approx(16 / 25)


# --- properties --------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    numel=st.integers(1, 500),
    ratio=st.floats(1e-3, 1.0),
    n_workers=st.integers(1, 5),
    spec=st.sampled_from(SPARSE),
    seed=st.integers(0, 10_000),
)
def test_sparse_properties(numel: int, ratio: float, n_workers: int, spec: tuple, seed: int) -> None:
    name, opts = spec
    comm = LocalCommunicator(n_workers)
    comp = make_compressor(name, ratio, keep_sent=True, **opts)
    k = int(topk_count(numel, ratio))
    for step in range(2):
        grads = grads_for(n_workers, numel, seed=seed + step)
        old = [comp.residual(r) for r in range(n_workers)]  # live buffers: the exchange reuses them
        accs = [g + r if r is not None else g for g, r in zip(grads, old, strict=True)]
        result = comp.exchange(grads, comm)
        first = result.aggregates[0]
        assert all(torch.equal(a, first) for a in result.aggregates)  # every worker applies the same update
        for rank in range(n_workers):
            assert torch.equal(result.sent[rank] + comp.residual(rank), accs[rank])
            assert int((result.sent[rank] != 0).sum()) <= result.stats.sent[rank]
        if name in ("topk-ag", "topk-ar", "randomk"):
            assert result.stats.sent == (k,) * n_workers
        if name == "threshold":
            assert 1 <= max(result.stats.sent) and all(s <= k for s in result.stats.sent)
        assert torch.allclose(first, dense_mean(list(result.sent)), atol=1e-5)


def test_threshold_count_near_k_on_large_tensor() -> None:
    comm = LocalCommunicator(2)
    grads = grads_for(2, 200_000)
    k = 2000
    trimmed = make_compressor("threshold", 0.01).exchange(grads, comm).stats.sent
    assert all(0.6 * k <= s <= k for s in trimmed)
    loose = make_compressor("threshold", 0.01, second_pass=False, error_feedback=False)
    assert all(0.6 * k <= s <= 1.7 * k for s in loose.exchange(grads, comm).stats.sent)


def test_random_subset_is_distinct_and_seeded() -> None:
    for numel, k in [(1000, 10), (1000, 300), (1000, 1000), (50, 49)]:
        a = random_subset(numel, k, torch.Generator().manual_seed(5), torch.device("cpu"))
        b = random_subset(numel, k, torch.Generator().manual_seed(5), torch.device("cpu"))
        assert torch.equal(a, b) and a.numel() == k and torch.unique(a).numel() == k
        assert 0 <= int(a.min()) and int(a.max()) < numel
    counts = np.zeros(20)
    for seed in range(400):
        counts[random_subset(20, 2, torch.Generator().manual_seed(seed), torch.device("cpu")).numpy()] += 1
    assert counts.min() > 15 and counts.max() < 70  # ~40 each: uniform enough


def test_pack_round_trip_misaligned() -> None:
    values = torch.tensor([1.5, -2.0, 3.25], dtype=torch.float16)
    idx = torch.tensor([7, 0, 2], dtype=torch.int32)
    buf = pack(values, idx)
    assert buf.dtype == torch.uint8 and buf.numel() == 3 * 6
    shifted = torch.cat([torch.zeros(2, dtype=torch.uint8), buf])[2:]  # a slice at an odd-ish offset
    v, i = unpack(shifted, torch.float16, torch.int32)
    assert torch.equal(v, values) and torch.equal(i, idx)


# --- communicator and registry -------------------------------------------------------------------


def test_local_communicator_collectives() -> None:
    comm = LocalCommunicator(3)
    with comm.recording() as records:
        summed = comm.allreduce([torch.ones(4) * r for r in range(3)])
        gathered = comm.allgather([torch.arange(r, dtype=torch.float32) for r in range(3)], same_size=False)
        empty = comm.allgather([torch.empty(0) for _ in range(3)], same_size=False)
        bcast = comm.broadcast([torch.full((2,), float(r)) for r in range(3)], src=2)
    assert all(torch.equal(s, torch.full((4,), 3.0)) for s in summed)
    summed[0].add_(1)
    assert torch.equal(summed[1], torch.full((4,), 3.0))  # allreduce results are independent tensors
    assert [t.numel() for t in gathered[1]] == [0, 1, 2]
    assert all(t.numel() == 0 for t in empty[0])
    assert all(torch.equal(b, torch.full((2,), 2.0)) for b in bcast)
    assert [(r.collective, r.nbytes, r.purpose) for r in records] == [
        ("allreduce", 16, "payload"), ("allgather", 4, "control"), ("allgather", 8, "payload"),
        ("allgather", 4, "control"), ("broadcast", 8, "payload")]
    assert len(comm.history) == 5


def test_local_communicator_rejects_mismatches() -> None:
    comm = LocalCommunicator(2)
    with pytest.raises(InputError):
        comm.allreduce([torch.ones(3), torch.ones(4)])
    with pytest.raises(InputError):
        comm.allgather([torch.ones(3), torch.ones(4)])
    with pytest.raises(InputError):
        comm.allreduce([torch.ones(3)])
    with pytest.raises(InputError):
        comm.broadcast([torch.ones(3), torch.ones(3)], src=5)


@pytest.mark.parametrize(
    ("name", "ratio", "options", "field"),
    [
        ("topk", 0.1, {}, "strategy"),
        ("topk-ag", None, {}, "ratio"),
        ("topk-ag", 0.0, {}, "ratio"),
        ("topk-ag", 1.5, {}, "ratio"),
        ("topk-ag", float("nan"), {}, "ratio"),
        ("randomk", True, {}, "ratio"),
        ("dense", 0.1, {}, "ratio"),
        ("powersgd", 0.1, {}, "ratio"),
        ("topk-ar", 0.1, {"owner": "max"}, "owner"),
        ("topk-ar", 0.1, {"colour": "red"}, "options"),
        ("topk-ag", 0.1, {"index_dtype": "int16"}, "index_dtype"),
        ("topk-ar-sketch", 0.1, {"block": 0}, "block"),
        ("threshold", 0.1, {"sample_ratio": 2.0}, "sample_ratio"),
        ("powersgd", None, {"rank": 0}, "rank"),
        ("topk-ag", 0.1, {"gain_every": -1}, "gain_every"),
    ],
)
def test_registry_errors_name_the_field(name: str, ratio: object, options: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        make_compressor(name, ratio, **options)
    assert err.value.field == field


def test_exchange_rejects_bad_gradients() -> None:
    comm = LocalCommunicator(2)
    comp = make_compressor("topk-ag", 0.1)
    with pytest.raises(InputError):
        comp.exchange([torch.ones(3)], comm)
    with pytest.raises(InputError):
        comp.exchange([torch.ones(3), torch.ones(4)], comm)
    with pytest.raises(InputError):
        comp.exchange([torch.ones(2, 2), torch.ones(2, 2)], comm)
    with pytest.raises(InputError):
        comp.exchange([torch.ones(3, dtype=torch.int64)] * 2, comm)


def test_every_registered_scheme_runs_and_times() -> None:
    comm = LocalCommunicator(2)
    for name in COMPRESSORS:
        comp = make_compressor(name, ratio_of(name, 0.1))
        for _ in range(3):
            stats = comp.exchange(grads_for(2, 256), comm).stats
        assert stats.scheme == name and stats.compress_time_s >= 0 and stats.comm_time_s >= 0
        assert stats.payload_bytes > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", list(COMPRESSORS))
def test_cuda_matches_cpu(name: str) -> None:
    comm = LocalCommunicator(2)
    cpu, gpu = make_compressor(name, ratio_of(name, 1.0)), make_compressor(name, ratio_of(name, 1.0))
    for step in range(3):
        grads = grads_for(2, 300, seed=step)
        a = cpu.exchange(grads, comm).aggregates[0]
        b = gpu.exchange([g.cuda() for g in grads], comm).aggregates[0]
        assert b.is_cuda
        assert torch.allclose(a, b.cpu(), atol=1e-4)


def test_residual_restarts_when_the_bucket_changes_size() -> None:
    comm = LocalCommunicator(2)
    comp = make_compressor("topk-ag", 0.1)
    comp.exchange(grads_for(2, 100), comm)
    stats = comp.exchange(grads_for(2, 80), comm).stats  # DDP's bucket rebuild after iteration 1
    assert stats.extra == {"residual_reset": 1.0} and comp.residual(0).numel() == 80


# --- checkpoints of error feedback ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["topk-ag", "topk-ar", "randomk", "threshold"])
def test_a_restored_compressor_continues_exactly_as_the_uninterrupted_one(name: str) -> None:
    """Save every rank's state after 3 steps, load it into fresh compressors: steps 4-6 are bitwise the same;
    a fresh compressor without it is not (so the check can fail)."""
    workers, numel, ratio = 3, 257, 0.05
    comm = LocalCommunicator(workers)
    steady = make_compressor(name, ratio)
    for step in range(3):
        steady.exchange(grads_for(workers, numel, seed=step), comm, key=1)
    saved = [steady.state_dict(rank) for rank in range(workers)]
    restored, fresh = make_compressor(name, ratio), make_compressor(name, ratio)
    for rank, state in enumerate(saved):
        restored.load_state_dict(state, rank)
    assert all(state["residuals"] for state in saved)
    differs = False
    for step in range(3, 6):
        grads = grads_for(workers, numel, seed=step)
        a = steady.exchange(grads, comm, key=1).aggregates[0]
        b = restored.exchange([g.clone() for g in grads], comm, key=1).aggregates[0]
        c = fresh.exchange([g.clone() for g in grads], comm, key=1).aggregates[0]
        assert torch.equal(a, b)
        differs |= not torch.equal(a, c)
    assert differs


def test_a_checkpoint_of_another_scheme_is_refused() -> None:
    state = make_compressor("topk-ag", 0.1).state_dict(0)
    with pytest.raises(InputError) as info:
        make_compressor("topk-ar", 0.1).load_state_dict(state, 0)
    assert info.value.field == "resume"
