"""Online network estimate and flexible Allgather/Allreduce switching: recovery, tracking, direction, hysteresis."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flexcomm.compression import LocalCommunicator, make_compressor
from flexcomm.compression.comm import CollectiveRecord
from flexcomm.compression.flexible import FlexibleCompressor, SchemePredictor, TopkTimeModel
from flexcomm.compression.network_estimate import NetworkEstimator, record_coefficients, timed_records
from flexcomm.costmodel.compressed import scheme_coefficients
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError

torch.set_num_threads(1)

ALPHA, BETA = 20e-6, 1 / 1.25e9  # 20 us, 10 Gbit/s


def diverse_points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of a mix of collectives: latency-heavy and bandwidth-heavy ones."""
    rng = np.random.default_rng(seed)
    a = rng.choice([3.0, 14.0, 17.0, 6.0], n)
    b = 10 ** rng.uniform(2, 7, n)
    return a, b


def test_estimator_recovers_alpha_and_beta_from_noisy_step_times() -> None:
    est = NetworkEstimator(ALPHA * 5, BETA / 3)  # a prior far from the truth
    a, b = diverse_points(60, 0)
    noise = np.random.default_rng(1).normal(1.0, 0.02, 60)
    for ai, bi, ni in zip(a, b, noise, strict=True):
        est.observe(ai, bi, (ai * ALPHA + bi * BETA) * ni)
    alpha, beta = est.estimate()
    assert est.identified
    assert alpha == pytest.approx(ALPHA, rel=0.05)
    assert beta == pytest.approx(BETA, rel=0.05)


def test_estimator_returns_the_prior_until_it_has_points() -> None:
    est = NetworkEstimator(ALPHA, BETA, min_points=3)
    assert est.estimate() == (ALPHA, BETA)
    est.observe(3.0, 1e5, 1.0)
    est.observe(14.0, 1e6, 2.0)
    assert est.estimate() == (ALPHA, BETA) and not est.identified


def test_estimator_tracks_a_step_change_and_flags_it() -> None:
    est = NetworkEstimator(ALPHA, BETA)
    a, b = diverse_points(200, 2)
    for ai, bi in zip(a[:100], b[:100], strict=True):
        est.observe(ai, bi, ai * ALPHA + bi * BETA)
    est.mark()
    assert not est.moved(0.1)
    alpha2, beta2 = 5e-3, BETA * 10  # latency x250, bandwidth / 10
    for ai, bi in zip(a[100:115], b[100:115], strict=True):
        est.observe(ai, bi, ai * alpha2 + bi * beta2)
    alpha, beta = est.estimate()
    assert alpha == pytest.approx(alpha2, rel=0.05) and beta == pytest.approx(beta2, rel=0.05)
    assert est.moved(0.1) and est.changes >= 1
    # prediction-based trigger: a purely latency-bound exchange moved, too
    assert est.moved(0.1, coefficients=[(3.0, 0.0)])


def test_single_direction_is_predicted_exactly_and_asks_for_a_latency_probe() -> None:
    est = NetworkEstimator(ALPHA, BETA)
    for _ in range(10):  # always the same allgather: alpha and beta are not separable
        est.observe(3.0, 8e6, 3 * 1e-3 + 8e6 * BETA)
    assert not est.identified and est.wants_probe()
    assert float(est.predict(3.0, 8e6)) == pytest.approx(3e-3 + 8e6 * BETA, rel=1e-3)
    est.observe(3.0, 4.0, 3e-3, probe=True)  # a 4-byte allgather: 3 alpha
    assert est.identified
    assert est.estimate()[0] == pytest.approx(1e-3, rel=0.02)


def test_record_coefficients_match_the_cost_model_and_scale_payload_only() -> None:
    rec = CollectiveRecord("allreduce", "ring", 4000, "float32")
    a, b, _ = record_coefficients(rec, 8)
    model = CostModel.from_link(ALPHA, 1 / BETA)
    assert a * ALPHA + b * BETA == pytest.approx(float(model.collective("allreduce", "ring", 4000, 8).total))
    assert record_coefficients(rec, 8, 10.0)[1] == pytest.approx(10 * b)
    control = CollectiveRecord("allgather", "bruck", 4, "int32", purpose="control")
    assert record_coefficients(control, 8, 10.0) == record_coefficients(control, 8)


# --- the flexible compressor ----------------------------------------------------------------------------


class ScriptedEstimator(NetworkEstimator):
    """An estimate the test sets by hand (the decision logic is what is under test)."""

    def __init__(self, alpha: float, beta: float) -> None:
        super().__init__(alpha, beta, probe_interval=0)
        self.value = (alpha, beta)

    def estimate(self) -> tuple[float, float]:
        return self.value

    def predict(self, a, b, g=0.0):  # type: ignore[no-untyped-def]
        return np.asarray(a) * self.value[0] + np.asarray(b) * self.value[1]


def grads(n_workers: int, numel: int, step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(numel, generator=gen) for _ in range(n_workers)]


def crossover_alpha(numel: int, ratio: float, ranks: int, beta: float, scale: float) -> float:
    """alpha at which the cost model prices topk-ag and topk-ar equally (independent of the compressor)."""
    ag = scheme_coefficients("topk-ag", numel, ranks, ratio)
    ar = scheme_coefficients("topk-ar", numel, ranks, ratio)
    return float((ag.beta - ar.beta) * scale * beta / (ar.alpha - ag.alpha))


def test_choice_moves_from_allreduce_to_allgather_as_latency_grows() -> None:
    n, numel, ratio, scale = 8, 4000, 0.01, 5000.0  # priced like a 20M-element gradient
    est = ScriptedEstimator(1e-6, BETA)
    flex = FlexibleCompressor(ratio, estimator=est, price_scale=scale, hysteresis=0.1, patience=2)
    comm = LocalCommunicator(n)
    cross = crossover_alpha(numel, ratio, n, BETA, scale)
    alphas = np.geomspace(cross / 100, cross * 100, 40)
    chosen = []
    for step, alpha in enumerate(alphas):
        est.value = (float(alpha), BETA)
        flex.exchange(grads(n, numel, step), comm)
        chosen.append(flex.current())
    # which way is right, from the cost model directly: AG's latency is lg N, AR's 2(N-1) + lg N
    model_low = CostModel.from_link(alphas[0], 1 / BETA)
    model_high = CostModel.from_link(alphas[-1], 1 / BETA)
    big = numel * scale
    assert float(model_low.scheme("topk-ar", big, n, ratio).total) < float(
        model_low.scheme("topk-ag", big, n, ratio).total)
    assert float(model_high.scheme("topk-ag", big, n, ratio).total) < float(
        model_high.scheme("topk-ar", big, n, ratio).total)
    assert chosen[0] == "topk-ar" and chosen[-1] == "topk-ag"
    switches = sum(a != b for a, b in zip(chosen, chosen[1:], strict=False))
    assert switches == 1
    # the switch happens past the crossover by the hysteresis margin, never before it
    first_ag = chosen.index("topk-ag")
    assert alphas[first_ag] > cross
    log = flex.decisions_frame()
    assert {"step", "key", "pred_topk-ag_s", "pred_topk-ar_s", "chosen", "alpha_s", "measured_comm_s"} <= set(log)
    assert len(log) == len(alphas)


def test_hysteresis_limits_flips_near_the_crossover() -> None:
    rng = np.random.default_rng(0)
    noisy = [{"topk-ag": 1.0 * rng.normal(1, 0.04), "topk-ar": 1.0 * rng.normal(1, 0.04)} for _ in range(400)]

    def flips(hysteresis: float, patience: int) -> int:
        flex = FlexibleCompressor(0.01, estimator=ScriptedEstimator(ALPHA, BETA), hysteresis=hysteresis,
                                  patience=patience, urgent=None)
        picks = [flex.decide(p)[0] for p in noisy]
        return sum(a != b for a, b in zip(picks, picks[1:], strict=False))

    eager, damped = flips(0.0, 1), flips(0.1, 3)
    assert eager > 100  # argmin alone flips on noise about every other step
    assert damped <= 2


def test_patience_and_urgent_margin() -> None:
    flex = FlexibleCompressor(0.01, estimator=ScriptedEstimator(ALPHA, BETA), hysteresis=0.1, patience=3, urgent=0.5)
    assert flex.decide({"topk-ag": 1.0, "topk-ar": 2.0}) == ("topk-ag", True, "topk-ag")
    # 20% faster: needs three decisions in a row
    assert [flex.decide({"topk-ag": 1.2, "topk-ar": 1.0})[0] for _ in range(3)] == ["topk-ag", "topk-ag", "topk-ar"]
    # 3x faster: at once
    assert flex.decide({"topk-ag": 1.0, "topk-ar": 3.0})[0] == "topk-ag"


def test_switching_keeps_each_workers_residual() -> None:
    """Error feedback across switches: sum of aggregates + mean residual == sum of mean gradients."""
    n, numel = 4, 300
    plan = ["topk-ag", "topk-ar", "topk-ag", "topk-ar", "topk-ar", "topk-ag", "dense", "topk-ar", "topk-ag"]
    wanted = {"scheme": plan[0]}

    def compress_time(scheme: str, numel: float) -> float:  # steers the choice: others cost a second more
        return 0.0 if scheme == wanted["scheme"] else 1.0

    flex = FlexibleCompressor(0.05, estimator=ScriptedEstimator(ALPHA, BETA),
                              candidates=("dense", "topk-ag", "topk-ar"), patience=1, hysteresis=0.0,
                              compress_time=compress_time)
    comm = LocalCommunicator(n)
    applied = torch.zeros(numel, dtype=torch.float64)
    truth = torch.zeros(numel, dtype=torch.float64)
    seen = []
    for step, scheme in enumerate(plan):
        wanted["scheme"] = scheme
        g = grads(n, numel, step)
        before = [flex.residual(r) for r in range(n)]
        result = flex.exchange(g, comm)
        seen.append(result.stats.scheme)
        if scheme != "dense" and step > 0 and plan[step - 1] != "dense":
            assert all(b is not None for b in before)  # the residual survived the switch
        applied += result.aggregates[0].double()
        truth += torch.stack(g).double().mean(0)
        if scheme == "dense":
            assert all(flex.residual(r) is None for r in range(n))  # flushed into the dense exchange
    residual = torch.stack([flex.residual(r) for r in range(n)]).double().mean(0)
    assert seen == plan
    torch.testing.assert_close(applied + residual, truth, rtol=0, atol=1e-5)


def test_flexible_with_one_candidate_is_that_scheme_bitwise() -> None:
    n, numel = 4, 500
    flex = FlexibleCompressor(0.02, estimator=ScriptedEstimator(ALPHA, BETA), candidates=("topk-ag",))
    plain = make_compressor("topk-ag", 0.02)
    comm = LocalCommunicator(n)
    for step in range(5):
        g = grads(n, numel, step)
        a = flex.exchange([x.clone() for x in g], comm).aggregates[0]
        b = plain.exchange([x.clone() for x in g], comm).aggregates[0]
        assert torch.equal(a, b)


def test_clock_feeds_the_estimator_and_a_probe_separates_alpha_from_beta() -> None:
    n, numel, ratio, scale = 8, 4000, 0.01, 3000.0
    true = CostModel.from_link(2e-3, 1e9)  # 2 ms latency: the cluster prior (50 us) is far off

    def clock(record: CollectiveRecord, world: int) -> float:
        nbytes = record.nbytes * (scale if record.purpose == "payload" else 1)
        return float(true.collective(record.collective, record.algorithm, nbytes, world).total)

    flex = FlexibleCompressor(ratio, cost_model=CostModel.from_link(50e-6, 5e9), price_scale=scale, clock=clock)
    comm = LocalCommunicator(n)
    for step in range(20):
        flex.exchange(grads(n, numel, step), comm)
    assert flex.estimator is not None
    alpha, beta = flex.estimator.estimate()
    assert alpha == pytest.approx(2e-3, rel=0.05) and beta == pytest.approx(1e-9, rel=0.05)
    log = flex.decisions_frame()
    assert log["latency_probe"].any()
    last = log.iloc[-1]
    assert last["measured_comm_s"] == pytest.approx(last["pred_comm_s"], rel=0.02)
    # at 2 ms the Allgather's lg N latency wins (checked against the cost model itself)
    big = numel * scale
    assert float(true.scheme("topk-ag", big, n, ratio).total) < float(true.scheme("topk-ar", big, n, ratio).total)
    assert flex.current() == "topk-ag"


def test_predictor_adds_compression_time_and_timed_records_skip_measurement() -> None:
    est = NetworkEstimator(ALPHA, BETA)
    pred = SchemePredictor(est, compress_time=TopkTimeModel(1e9))
    comm_only = float(pred.comm_seconds("topk-ar", 10_000, 0.01, 8))
    assert float(pred.seconds("topk-ar", 10_000, 0.01, 8)) == pytest.approx(comm_only + 1e-5)
    assert float(pred.seconds("dense", 10_000, 0.01, 8)) == pytest.approx(float(pred.comm_seconds("dense", 10_000,
                                                                                                  0.01, 8)))
    result = make_compressor("topk-ag", 0.1).exchange(grads(2, 100, 0), LocalCommunicator(2))
    assert all(r.purpose != "measure" for r in timed_records(result.stats))


def test_bad_options_are_one_line_errors() -> None:
    est = ScriptedEstimator(ALPHA, BETA)
    with pytest.raises(InputError, match="candidates"):
        FlexibleCompressor(0.01, estimator=est, candidates=("topk-ag", "randomk"))
    with pytest.raises(InputError, match="patience"):
        FlexibleCompressor(0.01, estimator=est, patience=0)
    with pytest.raises(InputError, match="estimator"):
        FlexibleCompressor(0.01)
    with pytest.raises(InputError, match="ratio"):
        FlexibleCompressor(1.5, estimator=est)
    with pytest.raises(InputError, match="forgetting"):
        NetworkEstimator(ALPHA, BETA, forgetting=0.0)


# --- real ranks: decisions must agree or the collectives would not match ----------------------------------


def _gloo_worker(rank: int, port: int, out_dir: str) -> None:
    import datetime
    import os

    import torch.distributed as dist

    from flexcomm.compression import TorchDistCommunicator

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    try:
        comm = TorchDistCommunicator()
        # a prior at the crossover: loopback timings (different on each rank) decide the scheme
        numel, ratio = 2000, 0.05
        cross = crossover_alpha(numel, ratio, 2, 1e-9, 1.0)
        flex = FlexibleCompressor(ratio, estimator=NetworkEstimator(cross, 1e-9), hysteresis=0.0, patience=1)
        aggs = [flex.exchange([grads(2, numel, step)[rank]], comm).aggregates[0] for step in range(12)]
        log = flex.decisions_frame()
        assert flex.estimator is not None
        torch.save({"aggs": torch.stack(aggs), "chosen": list(log["chosen"]), "probe": list(log["latency_probe"]),
                    "estimate": flex.estimator.estimate()}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(180)
def test_real_ranks_agree_on_every_decision(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_gloo_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    assert r0["chosen"] == r1["chosen"] and r0["probe"] == r1["probe"]
    assert r0["estimate"] == r1["estimate"]  # agreed (averaged) timings: identical estimators
    torch.testing.assert_close(r0["aggs"], r1["aggs"])
