"""Several seeds of an emulated run: Student-t intervals, the across-seed files, determinism, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.emulation.config import EmulationConfig
from flexcomm.emulation.seeds import accuracy_bands, format_ci, mean_ci, run_seeds
from flexcomm.experiments.cli import main


def test_mean_ci_is_the_student_t_interval() -> None:
    ci = mean_ci([1.0, 2.0, 3.0])
    assert ci["mean"] == 2.0 and ci["n"] == 3
    assert ci["ci95"] == pytest.approx(4.302652729911275 * 1.0 / math.sqrt(3))  # t(0.975, 2) x sd / sqrt(n)
    one = mean_ci([0.5, float("nan")])
    assert one["n"] == 1 and one["ci95"] is None and "no interval" in format_ci(one)
    assert mean_ci([])["n"] == 0


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=12), scale=st.floats(0.1, 10))
def test_intervals_scale_with_the_data(values: list[float], scale: float) -> None:
    base, scaled = mean_ci(values), mean_ci([v * scale for v in values])
    assert scaled["mean"] == pytest.approx(base["mean"] * scale, abs=1e-9)
    assert scaled["ci95"] == pytest.approx(base["ci95"] * scale, abs=1e-9)
    assert base["ci95"] >= 0


def _config() -> EmulationConfig:
    return EmulationConfig(workload="mlp-digits", workers=2, steps=10, eval_every=5)


def test_seeds_write_one_summary_with_every_seed_and_the_same_numbers_twice(tmp_path: Path) -> None:
    runs = run_seeds(_config(), ["dense", "topk-ag"], [0, 1, 2], tmp_path / "a")
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    final = summary["strategies"]["dense"]["final_test_acc"]
    assert final["n"] == 3 and final["values"] == [runs[s]["dense"].summary["final_test_acc"] for s in (0, 1, 2)]
    assert final["mean"] == pytest.approx(sum(final["values"]) / 3)
    frame = pd.read_csv(tmp_path / "a" / "emulated.csv")
    assert sorted(frame["seed"].unique()) == [0, 1, 2] and set(frame["strategy"]) == {"dense", "topk-ag"}
    bands = accuracy_bands([runs[s]["dense"].frame for s in (0, 1, 2)])
    assert list(bands["step"]) == [5, 10]
    assert (bands["test_acc_lo"] <= bands["test_acc"]).all() and (bands["test_acc"] <= bands["test_acc_hi"]).all()
    assert (tmp_path / "a" / "emulated.png").is_file() and (tmp_path / "a" / "seed1" / "steps_dense.csv").is_file()
    run_seeds(_config(), ["dense", "topk-ag"], [0, 1, 2], tmp_path / "b", plot=False)
    assert json.loads((tmp_path / "b" / "summary.json").read_text()) == summary
    # the seeds really differ: a band of identical runs would be a single line
    assert len({tuple(runs[s]["dense"].frame["loss"]) for s in (0, 1, 2)}) == 3


def test_cli_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train-emulated", "--workload", "mlp-digits", "--workers", "2", "--strategies", "dense",
                 "--steps", "6", "--eval-every", "3", "--seeds", "2", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2 seeds (0..1)" in out and "+-" in out
    assert main(["train-emulated", "--seeds", "0", "--out", str(tmp_path / "x")]) == 2
    assert "seeds" in capsys.readouterr().err


def test_without_an_adaptive_run_the_figure_draws_no_ratio_panel_and_promises_no_strip(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--seeds with static strategies at one c drew a quarter of the figure as one constant bar, under a title
    promising a scheme strip that was not drawn; the clock panel now says the c every run kept."""
    from flexcomm.emulation import plots
    from flexcomm.experiments.cli import main

    drawn = []
    monkeypatch.setattr(plots, "save_figure_atomic", lambda fig, path: drawn.append(fig) or path)
    assert main(["train-emulated", "--strategies", "dense,topk-ag", "--seeds", "2", "--steps", "6", "--workers", "2",
                 "--out", str(tmp_path), "--no-progress"]) == 0
    (fig,) = drawn
    titles = [ax.get_title() for ax in fig.axes]
    assert not any("compression ratio" in t or "beneath" in t for t in titles), titles
    assert any(t.endswith("every compressed run kept c = 0.01") for t in titles)
