"""The compression-ratio optimiser: rules on known fronts, NSGA-II against brute force, determinism, triggers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq

from flexcomm.compression.moo import GainModel, MOOConfig, RatioController, choose_point, pareto_front
from flexcomm.compression.network_estimate import NetworkEstimator
from flexcomm.costmodel.errors import InputError

# a smooth synthetic trade-off: time grows linearly with c, gain like c^0.35 (as probed gains do)
LO, HI = 0.001, 0.1


def time_fn(c: np.ndarray) -> np.ndarray:
    return 0.004 + 0.3 * np.asarray(c)


def gain_fn(c: np.ndarray) -> np.ndarray:
    return (np.asarray(c) / HI) ** 0.35


# --- the rules on a front with closed-form answers ------------------------------------------------------


@pytest.fixture(scope="module")
def parabola() -> tuple[np.ndarray, np.ndarray]:
    """Front y = (1 - x)^2 on x in [0, 1]: already normalised, convex."""
    x = np.linspace(0.0, 1.0, 100_001)
    return x, np.column_stack([x, (1 - x) ** 2])


def test_knee_is_farthest_from_the_extremes_line(parabola: tuple[np.ndarray, np.ndarray]) -> None:
    x, F = parabola
    # distance to x + y = 1 is (1 - x - (1-x)^2)/sqrt 2, maximal where 1 - 2(1-x) = 0
    assert x[choose_point(F, "knee")] == pytest.approx(0.5, abs=1e-4)


def test_utopia_is_nearest_the_origin(parabola: tuple[np.ndarray, np.ndarray]) -> None:
    x, F = parabola
    expected = brentq(lambda t: 2 * t - 4 * (1 - t) ** 3, 0, 1)  # d/dx [x^2 + (1-x)^4] = 0
    assert x[choose_point(F, "utopia")] == pytest.approx(expected, abs=1e-4)


def test_asf_balances_weighted_objectives(parabola: tuple[np.ndarray, np.ndarray]) -> None:
    x, F = parabola
    # min max(0.6 x, 0.4 (1-x)^2): the two terms are equal at the optimum
    expected = brentq(lambda t: 0.6 * t - 0.4 * (1 - t) ** 2, 0, 1)
    assert x[choose_point(F, "asf", (0.6, 0.4))] == pytest.approx(expected, abs=1e-4)
    # more weight on time pushes the pick towards lower time
    assert x[choose_point(F, "asf", (0.9, 0.1))] < x[choose_point(F, "asf", (0.6, 0.4))]


def test_rules_are_scale_free() -> None:
    x = np.linspace(0, 1, 1001)
    F = np.column_stack([x, (1 - x) ** 2])
    G = np.column_stack([5 + 1e-3 * x, 20 + 7 * (1 - x) ** 2])
    for rule in ("asf", "knee", "utopia"):
        assert choose_point(F, rule) == choose_point(G, rule)


# --- NSGA-II against brute force ----------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["asf", "knee", "utopia"])
def test_nsga2_pick_matches_brute_force_on_a_fine_grid(rule: str) -> None:
    config = MOOConfig(rule=rule)
    front = pareto_front(time_fn, gain_fn, config)
    grid = np.linspace(LO, HI, 200_001)
    F = np.column_stack([time_fn(grid), 1.0 / gain_fn(grid)])
    expected = grid[choose_point(F, rule)]
    assert front.ratio == pytest.approx(expected, rel=0.08)
    frame = front.frame
    assert {"c", "comm_s", "step_s", "efficiency", "gain", "f_time", "f_gain", "n_time", "n_gain"} <= set(frame)
    assert frame["c"].is_monotonic_increasing and frame["c"].min() >= LO and frame["c"].max() <= HI
    assert len(frame) >= 30  # the front covers the range, not a point
    assert front.point["c"] == front.ratio and front.rule == rule


def test_same_seed_same_front_and_settings_are_the_papers() -> None:
    config = MOOConfig()
    assert (config.pop_size, config.n_offsprings, config.n_gen, config.sbx_prob, config.sbx_eta, config.pm_eta) == (
        40, 10, 40, 0.9, 15.0, 20.0)
    assert config.bounds == (0.001, 0.1) and config.weights == (0.6, 0.4) and config.rule == "asf"
    a = pareto_front(time_fn, gain_fn, config)
    b = pareto_front(time_fn, gain_fn, config)
    assert a.frame.equals(b.frame) and a.chosen == b.chosen
    c = pareto_front(time_fn, gain_fn, MOOConfig(seed=7))
    assert not np.array_equal(a.frame["c"].to_numpy(), c.frame["c"].to_numpy())


def test_efficiency_objective_and_compute_time() -> None:
    front = pareto_front(time_fn, gain_fn, MOOConfig(time_objective="efficiency"), compute_s=0.01)
    frame = front.frame
    np.testing.assert_allclose(frame["efficiency"], 0.01 / (0.01 + time_fn(frame["c"].to_numpy())))
    np.testing.assert_allclose(frame["f_time"], -frame["efficiency"])


# --- the gain model --------------------------------------------------------------------------------------


def test_gain_model_is_monotone_through_noisy_probes() -> None:
    ratios = [0.001] * 3 + [0.004] * 3 + [0.011] * 3 + [0.033] * 3 + [0.1] * 3
    gains = [0.02, 0.03, 0.025, 0.05, 0.06, 0.04, 0.045, 0.05, 0.04, 0.2, 0.18, 0.19, 0.5, 0.45, 0.55]
    model = GainModel(ratios, gains)
    c = np.geomspace(0.001, 0.1, 500)
    g = model(c)
    assert np.all(np.diff(g) >= -1e-12)
    assert float(model(0.1)) == pytest.approx(0.5) and float(model(0.033)) == pytest.approx(0.19)
    # the 0.004 and 0.011 means (0.05, 0.045) violate monotonicity: pooled to their average
    assert float(model(0.004)) == pytest.approx(0.0475) and float(model(0.011)) == pytest.approx(0.0475)
    assert float(model(1e-5)) == pytest.approx(float(model(0.001)))  # clamped outside the probed range


# --- the online controller -----------------------------------------------------------------------------------


def test_controller_triggers_initial_network_gain_and_period() -> None:
    ctl = RatioController(MOOConfig(reeval_every=50, min_probe_interval=20, gain_min_samples=5, gain_ewma=0.5))
    est = NetworkEstimator(1e-5, 1e-9)
    assert ctl.due(0, est) == "initial" and ctl.needs_probe("initial")
    ctl.fit_gains(0, [0.001, 0.01, 0.1], [0.05, 0.2, 0.6])
    front = ctl.optimize(0, "initial", time_fn, estimator=est)
    assert ctl.ratio == front.ratio and ctl.due(1, est) is None
    # the network estimate moves: re-optimise (no probe)
    est._estimate = (1e-3, 1e-9)
    assert ctl.due(10, est) == "network" and not ctl.needs_probe("network")
    ctl.optimize(10, "network", time_fn, estimator=est)
    assert ctl.due(11, est) is None
    # measured gains at c drift 30% below the model: re-probe, once the minimum interval has passed
    expected = float(ctl.gain_model(ctl.ratio))  # type: ignore[misc]
    for _ in range(10):
        ctl.observe_gain(0.7 * expected)
    assert ctl.gain_drift() == pytest.approx(0.3, rel=0.01)
    assert ctl.due(15, est) is None  # too soon after the last probe
    assert ctl.due(25, est) == "gain" and ctl.needs_probe("gain")
    ctl.fit_gains(25, [0.001, 0.01, 0.1], [0.05, 0.2, 0.6])
    ctl._ewma = None
    assert ctl.due(60, est) == "period"
    events = ctl.events_frame()
    assert list(events["reason"]) == ["initial", "network"]
    assert len(ctl.fronts_frame()) == sum(len(f.frame) for _, f in ctl.fronts)


def test_bad_settings_are_one_line_errors() -> None:
    with pytest.raises(InputError, match="rule"):
        MOOConfig(rule="median")
    with pytest.raises(InputError, match="candidates"):
        MOOConfig(candidates=(0.1, 0.0))
    with pytest.raises(InputError, match="weights"):
        choose_point(np.ones((3, 2)), "asf", (1.0, 0.0))
    with pytest.raises(InputError, match="front"):
        choose_point(np.ones((3, 3)), "knee")
    with pytest.raises(InputError, match="gain_model"):
        RatioController().optimize(0, "initial", time_fn)
