"""The adaptive machinery prices itself: probes, re-optimisations and the report of what adapting cost."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pandas as pd
import pytest
import torch

from flexcomm.compression.comm import GLOO_HINTS, LocalCommunicator
from flexcomm.compression.flexible import FlexibleCompressor, MechanismTimer
from flexcomm.compression.moo import MOOConfig, RatioController
from flexcomm.compression.network_estimate import NetworkEstimator
from flexcomm.real_backend.adaptive_verdict import (
    gains_agree,
    markdown_lines,
    mechanism_cost,
    moo_against_its_ratio,
    network_bound_phases,
    phase_comparison,
)
from flexcomm.real_backend.comm_thread import CommThread


def _flexible(alpha: float, bandwidth: float, budget: float = 0.02) -> tuple[FlexibleCompressor, LocalCommunicator]:
    estimator = NetworkEstimator(alpha, 1.0 / bandwidth)
    return FlexibleCompressor(0.01, estimator=estimator, probe_budget=budget), LocalCommunicator(
        3, algorithms=GLOO_HINTS)


def test_a_latency_probe_is_taken_only_when_it_costs_less_than_its_budget() -> None:
    # an unidentified estimate wants a probe; on a 100 us link it is cheap next to 8 exchanges of 1M elements
    comp, comm = _flexible(1e-4, 1e6)
    assert comp.estimator is not None and comp.estimator.wants_probe()
    assert comp.should_probe(1_000_000, comm, "topk-ag")
    # at 50 ms per round a 4-byte allgather costs more than 2 % of eight exchanges of 10k elements
    comp, comm = _flexible(50e-3, 1e8)
    assert not comp.should_probe(10_000, comm, "topk-ag")
    comp, comm = _flexible(50e-3, 1e8, budget=0.0)  # no budget: the estimator alone decides, as before
    assert comp.should_probe(10_000, comm, "topk-ag")
    comp.estimator.probe_sent()  # a probe went out: none until probe_interval more observations
    assert not comp.should_probe(10_000, comm, "topk-ag")


def test_exchanges_log_the_mechanism_by_part() -> None:
    comp, comm = _flexible(1e-4, 1e8)
    comp.clock = lambda record, world: 1e-3  # a simulated network: observed at once, no agreement
    comp.exchange([torch.randn(10_000) for _ in range(3)], comm)
    parts = comp.mechanism.take()
    assert set(parts) == {"decide", "agree", "probe", "estimate"}
    assert parts["decide"] > 0 and parts["estimate"] > 0 and parts["agree"] == 0
    assert comp.mechanism.take() == dict.fromkeys(parts, 0.0)  # take() resets
    timer = MechanismTimer(("a",))
    with timer.part("a"):
        time.sleep(0.01)
    assert timer.take()["a"] >= 0.01


def _controller(ratio: float = 0.011) -> RatioController:
    ctl = RatioController(MOOConfig())
    ctl.fit_gains(0, MOOConfig().candidates, [0.99, 0.9, 0.8, 0.7, 0.5])
    ctl.ratio = ratio
    return ctl


def test_a_gain_probe_costing_more_than_it_can_buy_is_not_taken() -> None:
    ctl = _controller()
    flat = lambda c: np.full(np.shape(c), 0.1)  # noqa: E731 - the ratio changes nothing: nothing to buy
    steep = lambda c: 10.0 * np.asarray(c)  # noqa: E731 - 0.011 -> 0.033 costs 0.22 s a step
    assert ctl.worth("initial", flat, probe_cost_s=1e9)  # no ratio yet: always
    assert not ctl.worth("gain", flat, probe_cost_s=0.5)
    assert ctl.worth("gain", steep, probe_cost_s=0.5)  # 0.22 s x 100 steps > 0.5 s
    assert not ctl.worth("gain", steep, probe_cost_s=100.0)


def test_a_reoptimisation_is_skipped_when_the_screen_keeps_the_ratio() -> None:
    steep = lambda c: 10.0 * np.asarray(c)  # noqa: E731
    ctl = _controller()
    picked = ctl.screen(steep)
    assert MOOConfig().bounds[0] <= picked <= MOOConfig().bounds[1]
    ctl.ratio = picked
    assert not ctl.worth("network", steep)  # NSGA-II would land where it is
    ctl.ratio = 0.1 if picked < 0.05 else 0.001
    assert ctl.worth("network", steep)
    estimator = NetworkEstimator(1e-3, 1e-8)
    ctl.skip(7, "network", estimator)
    assert ctl.events[-1] == {"step": 7, "reason": "network (not worth it)", "ratio": ctl.ratio}
    assert ctl.due(8, estimator) is None  # the timer restarted and the estimate is the new reference


def test_the_comm_thread_runs_follow_up_work_after_the_future_is_complete() -> None:
    engine = CommThread("test")
    order: list[str] = []
    released = threading.Event()
    future = engine.submit(lambda: torch.ones(1), torch.device("cpu"),
                           after=lambda: (released.wait(5), order.append("after")))
    assert float(future.wait()[0]) == 1.0  # complete while its follow-up still waits
    assert order == []
    nxt = engine.submit(lambda: (order.append("next"), torch.zeros(1))[1], torch.device("cpu"))
    released.set()
    nxt.wait()
    assert order == ["after", "next"]  # the next job sees the follow-up's outcome
    failing = engine.submit(lambda: torch.ones(1), torch.device("cpu"), after=lambda: 1 / 0)
    failing.wait()
    with pytest.raises(RuntimeError, match="follow-up work failed"):
        engine.submit(lambda: torch.ones(1), torch.device("cpu")).wait()
    engine.close()


def _entry(strategy: str, phases: dict[int, float], **extra: object) -> dict:
    return {"strategy": strategy, "open": {"by_phase": {p: {"measured_mean_step_s": v, "predicted_mean_step_s": v}
                                                        for p, v in phases.items()}}, **extra}


def test_the_verdict_compares_each_phase_with_its_best_static_scheme() -> None:
    strategies = {
        "topk-ag": _entry("topk-ag", {0: 0.10, 1: 0.50}),
        "topk-ar": _entry("topk-ar", {0: 0.12, 1: 0.30}),
        "flexible": _entry("flexible", {0: 0.102, 1: 0.40}, vs_static={"topk-ag": -0.2, "topk-ar": 0.01},
                           vs_static_simulated={"topk-ag": -0.17, "topk-ar": -0.05}),
    }
    rows = phase_comparison(strategies)["flexible"]
    assert rows[0]["best_static"] == "topk-ag" and rows[0]["within_goal"]  # 2 % over
    assert rows[1]["best_static"] == "topk-ar" and not rows[1]["within_goal"]
    assert rows[1]["vs_best"] == pytest.approx(0.4 / 0.3 - 1)
    assert network_bound_phases(strategies, 0.04) == [1]  # phase 0: 0.10 s < 3 x 0.04 s
    assert network_bound_phases(strategies, math.nan) == []
    gains = gains_agree(strategies["flexible"])
    assert gains["topk-ag"]["agree"] and not gains["topk-ar"]["agree"]  # signs differ
    assert moo_against_its_ratio(strategies) is None
    strategies["moo"] = _entry("moo", {0: 0.1}, trace_steps={"measured": 100.0})
    strategies["topk-ar@0.02"] = _entry("topk-ar", {0: 0.1}, trace_steps={"measured": 110.0})
    moo = moo_against_its_ratio(strategies)
    assert moo == {"static": "topk-ar@0.02", "vs_static": pytest.approx(0.1), "no_slower": False}
    text = "\n".join(markdown_lines({"phases": phase_comparison(strategies), "gains": {"flexible": gains},
                                     "moo_vs_its_ratio": moo, "unshaped_step_s": 0.04, "network_bound_phases": [1]}))
    assert "| 1 | topk-ar | 300 ms | 400 ms | 33.3 % | no |" in text
    assert "network-bound phases (every static step >= 3x it): 1" in text


def test_mechanism_cost_is_per_step_after_warm_up() -> None:
    exchanges = pd.DataFrame({"step": [0, 3, 3, 4], "decide_s": [9.0, 0.001, 0.001, 0.002],
                              "agree_s": [0, 0, 0.001, 0], "probe_s": [0, 0, 0, 0.004], "estimate_s": [0] * 4,
                              "moo_s": [0] * 4, "mechanism_s": [9.0, 0.001, 0.002, 0.006],
                              "housekeeping_s": [0, 0.003, 0, 0.001]})
    steps = pd.DataFrame({"step": [0, 3, 4], "step_s": [10.0, 0.1, 0.1]})
    cost = mechanism_cost(steps, exchanges, warmup=3)
    assert cost["mechanism_s_mean"] == pytest.approx(0.0045)  # steps 3 and 4: 3 ms and 6 ms
    assert cost["decide_s_mean"] == pytest.approx(0.002) and cost["probe_s_mean"] == pytest.approx(0.002)
    assert cost["housekeeping_s_mean"] == pytest.approx(0.002)
    assert cost["share_of_step"] == pytest.approx(0.045)


def test_a_switch_must_save_more_than_it_costs() -> None:
    comp, _ = _flexible(1e-4, 1e8)
    comp.decide({"topk-ag": 1.0, "topk-ar": 2.0})  # first decision: topk-ag
    cheap = {"topk-ag": 1.0, "topk-ar": 0.4}  # urgent: saves 0.6 s an exchange
    assert comp.decide(cheap) == ("topk-ar", True, "topk-ar")
    costly, _ = _flexible(1e-4, 1e8)
    costly.switch_cost_s = 2.0  # 0.6 s x patience 3 = 1.8 s < 2 s: stays
    costly.decide({"topk-ag": 1.0, "topk-ar": 2.0})
    assert costly.decide(cheap) == ("topk-ag", False, "topk-ar")
    with pytest.raises(Exception, match="switch_cost_s"):
        FlexibleCompressor(0.01, estimator=NetworkEstimator(1e-4, 1e-8), switch_cost_s=-1.0)


def test_the_switch_cost_is_the_first_exchange_after_a_switch_over_the_next_ones() -> None:
    from flexcomm.real_backend.adaptive_verdict import switch_cost

    exchanges = pd.DataFrame({
        "bucket": [0] * 6, "scheme": ["topk-ag", "topk-ag", "topk-ar", "topk-ar", "topk-ar", "topk-ar"],
        "switched": [1, 0, 1, 0, 0, 0],  # as the log writes it; the first row is the first decision
        "measured_comm_s": [0.5, 0.1, 0.30, 0.20, 0.22, 0.18]})
    assert switch_cost(exchanges) == {"switches": 1, "excess_s_median": pytest.approx(0.10)}
    assert switch_cost(exchanges.drop(columns="switched"))["switches"] == 0


def test_a_caller_driven_agreement_never_blocks_and_is_folded_by_settle() -> None:
    """A DDP hook agrees once per iteration (agree_every=0): the allreduce is started, never waited for on
    the path, and folded by settle(keep=1) after the next iteration (a blocking one cost a round trip)."""
    from types import SimpleNamespace

    from flexcomm.compression.comm import PendingAllreduce

    started = []

    def refuse(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a blocking allreduce on the critical path")

    comm = SimpleNamespace(emulated=False, local_workers=[0], world_size=2, allreduce=refuse,
                           allreduce_async=lambda t, purpose: started.append(t) or PendingAllreduce(lambda: 2 * t))
    comp = FlexibleCompressor(0.01, estimator=NetworkEstimator(1e-4, 1e-8), agree_every=0)
    local = LocalCommunicator(2, algorithms=GLOO_HINTS)
    stats = comp.inner["topk-ag"].exchange([torch.randn(1000) for _ in range(2)], local).stats
    for _ in range(2):
        comp._pending.append((stats, [0.01] * len(_timed(stats))))
        comp.agree(comm)
    assert len(started) == 2 and len(comp._inflight) == 2
    comp.settle(keep=1)  # the older is folded, the newer stays in flight
    assert len(comp._inflight) == 1 and comp.estimator is not None and comp.estimator.count > 0


def _timed(stats):  # noqa: ANN001, ANN202
    from flexcomm.compression.network_estimate import timed_records

    return timed_records(stats)


def test_a_boolean_is_no_budget_and_no_cost() -> None:
    with pytest.raises(Exception, match="probe_budget"):
        FlexibleCompressor(0.01, estimator=NetworkEstimator(1e-4, 1e-8), probe_budget=True)
    with pytest.raises(Exception, match="switch_cost_s"):
        FlexibleCompressor(0.01, estimator=NetworkEstimator(1e-4, 1e-8), switch_cost_s=True)
