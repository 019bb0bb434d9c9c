"""``flexcomm reproduce`` and ``flexcomm pareto``: the studies' claims are checked against their own data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.compressed import SchemeAlgorithms, SparsePayload, scheme_coefficients
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.experiments.reproductions import (
    REPRODUCTIONS,
    accuracy_time,
    adaptation,
    crossover,
    resolve,
    run_reproductions,
    scaling,
    speedup,
)
from flexcomm.experiments.reproductions.base import Settings

PAPER = (SparsePayload(index_dtype="int32"), SchemeAlgorithms())


class Tiny(Settings):
    """Every study's step counts cut to a few steps: exercises the code paths, not the science."""

    def steps(self, small: int, full: int) -> int:
        return 12


def sparse_times(c: float, latency: float, bandwidth: float, ranks: int, params: float) -> tuple[float, float]:
    ag, ar = (float(scheme_coefficients(s, params, ranks, c, *PAPER).time(latency, 1 / bandwidth).total)
              for s in ("topk-ag", "topk-ar"))
    return ag, ar


@settings(max_examples=60, deadline=None)
@given(latency=st.floats(1e-6, 1e-1), gbits=st.floats(0.5, 400), ranks=st.sampled_from([4, 8, 16, 64, 256, 1024]),
       params=st.floats(1e7, 1e9))
def test_paper_closed_form_threshold_separates_allgather_from_ar_topk(latency: float, gbits: float, ranks: int,
                                                                      params: float) -> None:
    """Below c* Allgather Top-k is cheaper, above it AR-Top-k is: the closed form and the priced forms agree."""
    bandwidth = gbits * 1.25e8
    c_star = float(crossover.paper_threshold(latency, bandwidth, ranks, params))
    for c, ag_wins in ((0.9 * c_star, True), (1.1 * c_star, False)):
        if not (1e-6 * 1e3 / params < c <= 1):  # k >= 1000 keeps the floor of k out of the comparison
            continue
        ag, ar = sparse_times(c, latency, bandwidth, ranks, params)
        assert (ag < ar) == ag_wins


def test_crossover_study_finds_the_closed_form_and_writes_its_files(tmp_path: Path) -> None:
    outcome = crossover.run(Settings(progress=False), tmp_path)
    th = outcome.extra_tables["thresholds"]
    paper = th[th["variant"].str.startswith("paper") & np.isfinite(th["ag_below_c"]) & (th["ag_below_c"] > 0)]
    assert len(paper) > 10
    assert np.allclose(paper["ag_below_c"], paper["paper_closed_form_c"], rtol=0.01)
    assert set(outcome.table["scheme"]) == {"dense", "topk-ag", "topk-ar"}
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in outcome.figures)


def test_speedup_flexible_is_never_slower_than_a_static_scheme_and_sim_agrees(tmp_path: Path) -> None:
    outcome = speedup.run(Settings(progress=False), tmp_path)
    table = outcome.table
    keys = ["model", "network", "ratio"]
    flexible = table[table["strategy"] == "flexible"].set_index(keys)["step_s"]
    for strategy in ("topk-ag", "topk-ar"):
        static = table[table["strategy"] == strategy].set_index(keys)["step_s"]
        assert (flexible <= static.loc[flexible.index] * (1 + 1e-12)).all()
    assert outcome.extra_tables["simulator_check"]["relative_gap"].abs().max() < 1e-6
    # the paper's dense baseline (tree allreduce) at 4 ms / 20 Gbit/s is Table IV's dense step within 5%
    at = table[(table["network"] == "4ms/20G") & (table["strategy"] == "topk-ar") & (table["ratio"] == 0.1)]
    for row in at.itertuples():
        tree_dense_ms = row.step_s * row.speedup_vs_dense_tree * 1e3
        assert tree_dense_ms == pytest.approx(speedup.TABLE_IV_STEPS[(row.model, 1.0)], rel=0.05)


def test_scaling_efficiencies_are_fractions_and_flexible_tracks_the_better_topk(tmp_path: Path) -> None:
    outcome = scaling.run(Settings(progress=False), tmp_path)
    table = outcome.table
    assert sorted(table["ranks"].unique()) == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert ((table["efficiency"] > 0) & (table["efficiency"] <= 1 + 1e-9)).all()
    wide = table.pivot_table(index=["network", "ranks"], columns="strategy", values="efficiency")
    best_sparse = wide[["topk-ag c=0.01", "topk-ar c=0.01"]].max(axis=1)
    assert (wide["flexible c=0.01"] >= 0.95 * best_sparse).all()
    # Allgather's (N-1) k volume: it is the worst strategy at 1024 ranks on both networks
    at_max = wide.xs(1024, level="ranks")
    assert (at_max.idxmin(axis=1) == "topk-ag c=0.01").all()


def test_adaptation_and_accuracy_time_run_end_to_end_on_tiny_settings(tmp_path: Path) -> None:
    tiny = Tiny(progress=False)
    adapted = adaptation.run(tiny, tmp_path)
    assert set(adapted.table["network"]) == {"C1", "C2"}
    assert adapted.table["ratio"].between(0.001, 0.1).all()  # moo picks c inside the paper's bounds
    assert (tmp_path / "adaptation.png").exists()
    timed = accuracy_time.run(tiny, tmp_path)
    summary = timed.extra_tables["summary"]
    assert set(summary["label"]) == {label for label, _, _ in accuracy_time.STRATEGIES}
    assert summary.groupby("model").size().tolist() == [len(accuracy_time.STRATEGIES)] * 2
    dense = summary[summary["label"] == "dense"]
    assert (dense["speedup_to_target_vs_dense"].dropna() == 1.0).all()


def test_resolve_accepts_ids_numbers_and_all_and_rejects_the_rest() -> None:
    assert [r.id for r in resolve(["1", "table4", "crossover"])] == ["crossover", "table4"]
    assert len(resolve(["all"])) == len(REPRODUCTIONS) == 9
    with pytest.raises(InputError, match="ID"):
        resolve(["10"])


def test_reproduce_cli_writes_index_notes_and_is_deterministic(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a", "b"):
        assert main(["reproduce", "crossover", "table4", "--out", str(tmp_path / name), "--no-progress"]) == 0
    index = (tmp_path / "a" / "index.md").read_text()
    assert "crossover.md" in index and "table4.md" in index
    note = (tmp_path / "a" / "crossover.md").read_text()
    assert "What the literature reports" in note and "What we measure" in note
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / "crossover.csv"),
                                  pd.read_csv(tmp_path / "b" / "crossover.csv"))
    assert main(["reproduce", "nine", "--out", str(tmp_path / "c")]) == 2
    assert "ID" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_reproduce_into_a_used_folder_keeps_the_other_studies_in_the_index(tmp_path: Path) -> None:
    run_reproductions(["table4"], tmp_path, Settings(progress=False))
    run_reproductions(["crossover"], tmp_path, Settings(progress=False))
    def rows() -> list[str]:
        return [line for line in (tmp_path / "index.md").read_text().splitlines()
                if line.startswith("| ") and line.split("|")[1].strip().isdigit()]

    assert [row.split("|")[1].strip() for row in rows()] == ["1", "7"]  # both, in study order
    run_reproductions(["table4"], tmp_path, Settings(progress=False))  # a rerun replaces its own row only
    assert len(rows()) == 2 and "crossover.md" in rows()[0] and "table4.md" in rows()[1]


def test_run_reproductions_keeps_finished_studies_when_a_later_one_fails(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(settings: Settings, out: Path) -> None:
        raise RuntimeError("interrupted")

    import dataclasses

    monkeypatch.setitem(REPRODUCTIONS, "table4", dataclasses.replace(REPRODUCTIONS["table4"], run=boom))
    with pytest.raises(RuntimeError):
        run_reproductions(["crossover", "table4"], tmp_path, Settings(progress=False))
    assert (tmp_path / "crossover.csv").exists() and "crossover.md" in (tmp_path / "index.md").read_text()
    assert not (tmp_path / "table4.csv").exists()


def test_pareto_cli_marks_dominated_points_and_the_chosen_one(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    args = ["pareto", "--workload", "mlp-digits", "--workers", "4", "--warmup-steps", "5", "--probe-steps", "2",
            "--grid-points", "12", "--rule", "knee", "--price-params", "11.69M"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert "knee" in capsys.readouterr().out
    chosen = json.loads((tmp_path / "a" / "pareto.json").read_text())["chosen"]
    candidates = pd.read_csv(tmp_path / "a" / "candidates.csv")
    assert len(candidates) == 24 and candidates["dominated"].any() and (~candidates["dominated"]).any()
    # a dominated candidate is beaten on both objectives by some candidate
    F = candidates[["f_time", "f_gain"]].to_numpy()
    for i in np.flatnonzero(candidates["dominated"].to_numpy()):
        assert ((F <= F[i]).all(axis=1) & (F < F[i]).any(axis=1)).any()
    assert chosen["rule"] == "knee" and 0.001 <= chosen["c"] <= 0.1
    assert (tmp_path / "a" / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert main([*args, "--out", str(tmp_path / "b")]) == 0  # same seed, same numbers
    pd.testing.assert_frame_equal(candidates, pd.read_csv(tmp_path / "b" / "candidates.csv"))
    assert main(["pareto", "--rule", "elbow", "--out", str(tmp_path / "c")]) == 2
    assert "rule" in capsys.readouterr().err


def test_a_resumed_reproduction_says_which_runs_it_read_back(tmp_path: Path) -> None:
    """The note's time covers only what this invocation ran: reused runs are counted, not timed."""
    settings = Tiny(progress=False, runs_dir=tmp_path / "runs")
    run_reproductions(["adaptation"], tmp_path, settings)
    first = (tmp_path / "adaptation.md").read_text()
    assert "read back" not in first
    run_reproductions(["adaptation"], tmp_path, Tiny(progress=False, runs_dir=tmp_path / "runs"))
    runs = len(list((tmp_path / "runs").glob("*.csv")))
    assert f"({runs} of its {runs} emulated runs read back from `runs/`" in (tmp_path / "adaptation.md").read_text()
