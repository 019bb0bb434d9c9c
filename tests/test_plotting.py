"""Figures drawn from measurements must read for *any* measured data: the log-axis labels fit the axis as
drawn (they overlapped on a short panel of ``trace_validation.png`` for one run's step times, not another's)."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from figure_check import (  # noqa: E402
    CHECK_DPI,
    _overlapping_ticks,
    _tick_labels,
    figure_problems,
    title_overlap_problems,
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flexcomm.costmodel.plotting import plain_number, readable_log_axis  # noqa: E402


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(low=st.floats(-6, 6), decades=st.floats(0.02, 14), height_in=st.floats(0.5, 4.0),
       width_in=st.floats(1.0, 8.0), font=st.sampled_from([6, 7, 8, 10, 12]), which=st.sampled_from("xy"),
       dpi=st.sampled_from([CHECK_DPI, 80, 110]))
def test_log_axis_labels_never_overlap_and_never_vanish(low: float, decades: float, height_in: float,
                                                       width_in: float, font: int, which: str, dpi: int) -> None:
    fig, ax = plt.subplots(figsize=(width_in, height_in), dpi=dpi, constrained_layout=True)
    try:
        values = [10.0 ** low, 10.0 ** (low + decades)]
        if which == "y":
            ax.plot([0, 1], values)
            ax.set_yscale("log")
        else:
            ax.plot(values, [0, 1])
            ax.set_xscale("log")
        ax.tick_params(labelsize=font)
        readable_log_axis(ax, which)
        fig.canvas.draw()
        assert _tick_labels(ax, which), "no tick label on the axis"
        assert not _overlapping_ticks(fig, ax, which), [t.get_text() for t in
                                                         (ax.yaxis if which == "y" else ax.xaxis).get_ticklabels()]
    finally:
        plt.close(fig)


@given(st.floats(1e-9, 1e12))
def test_plain_numbers_have_no_exponent_between_1e_4_and_1e6(value: float) -> None:
    text = plain_number(value)
    if 1e-4 <= value < 1e6:
        assert "e" not in text and "$" not in text
        assert float(text) == pytest.approx(value, rel=5e-3)
    else:
        assert text.startswith("$")


def _replay(steps: np.ndarray, labels: list[str]) -> pd.DataFrame:
    rows = []
    for label in labels:
        for i, step in enumerate(steps):
            for mode in ("open", "closed"):
                rows.append({"label": label, "mode": mode, "trace_s": float(i), "sim_start_s": float(i),
                             "measured_s": float(step), "predicted_s": float(step) * 1.1,
                             "scheme_real": "topk-ag", "scheme_sim": "topk-ar"})
    return pd.DataFrame(rows)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(low=st.floats(-3.5, 0.5), decades=st.floats(0.05, 3.5), seed=st.integers(0, 2**16))
def test_trace_validation_figure_ticks_read_for_any_step_times(low: float, decades: float, seed: int,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    """The figure that failed a clean-clone CI: random step times in any range, every panel's ticks read."""
    from flexcomm.real_backend.trace_validate import plot_trace_validation

    rng = np.random.default_rng(seed)
    steps = 10.0 ** rng.uniform(low, low + decades, size=40)
    timeline = SimpleNamespace(times=np.array([0.0, 10.0, 20.0]), rates=np.array([25e6, 1e6, 25e6]),
                               delays=np.array([1e-3, 0.05, 1e-3]))
    captured: list = []
    original = matplotlib.figure.Figure.savefig

    def keep(fig, *args, **kwargs):  # noqa: ANN001, ANN202
        captured.append([p for p in figure_problems(fig) if "tick" in p])

    matplotlib.figure.Figure.savefig = keep
    try:
        plot_trace_validation(_replay(steps, ["topk-ag", "flexible", "moo"]), timeline,
                              tmp_path_factory.mktemp("fig") / "trace_validation.png")
    finally:
        matplotlib.figure.Figure.savefig = original
    assert captured == [[]]


def test_a_line_that_would_lie_on_another_is_found_and_one_that_would_not_is_not() -> None:
    from flexcomm.costmodel.plotting import coinciding_line

    x = np.array([1.0, 2.0, 3.0])
    drawn = [("a", x, np.array([1.0, 2.0, 3.0])), ("b", x, np.array([5.0, 5.0, 5.0]))]
    assert coinciding_line(x, [1.01, 2.0, 2.99], drawn, rtol=0.02) == "a"
    assert coinciding_line(x, [1.1, 2.0, 3.0], drawn, rtol=0.02) is None  # apart at one point: both drawn
    assert coinciding_line([1.0, 2.0, 4.0], [1.0, 2.0, 3.0], drawn) is None  # other x: not the same line
    assert coinciding_line(x, [5.0, 5.0, 5.0], []) is None


def test_a_title_that_runs_into_the_next_panel_is_found() -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
    left.plot([1, 2])
    right.plot([1, 3])
    left.set_title("the best 10 plans, ranked by the simulated step for the 3 simulated, then the model's " * 2)
    right.set_title("stage split")
    fig.tight_layout()
    fig.canvas.draw()
    assert any("runs into another panel" in p for p in title_overlap_problems(fig))
    left.set_title("the best 10 plans,\nranked by the simulated step")
    fig.canvas.draw()
    assert title_overlap_problems(fig) == []
    left.twinx().plot([3, 1], color="tab:red")  # a twin axes is the same panel, not another one
    assert title_overlap_problems(fig) == []
    plt.close(fig)


def test_an_axis_whose_unit_is_too_large_for_its_values_is_found() -> None:
    from figure_check import unit_scale_problems

    fig, ax = plt.subplots()
    ax.bar([0, 1], [0.004, 0.009])
    ax.set_ylabel("ms of compute per micro-batch")  # defect 20: values 0.000-0.010 under "ms"
    fig.canvas.draw()
    assert unit_scale_problems(ax, "plan") and "smaller unit" in unit_scale_problems(ax, "plan")[0]
    ax.cla()
    ax.bar([0, 1], [4.0, 9.0])
    ax.set_ylabel("us of compute per micro-batch")
    fig.canvas.draw()
    assert unit_scale_problems(ax, "plan") == []
    ax.cla()
    ax.plot([0, 1], [0.001, 0.005])
    ax.set_ylabel("compression ratio c (fraction kept)")  # no unit: small values are the point
    fig.canvas.draw()
    assert unit_scale_problems(ax, "ratio") == []
    ax.set_ylabel("seconds lost (s)")
    assert unit_scale_problems(ax, "lost")
    plt.close(fig)
