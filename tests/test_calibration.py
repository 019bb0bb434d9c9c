"""Calibration must recover known alpha/beta from noisy data and reject malformed inputs clearly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.calibration import (
    FORMAT,
    CalibrationProfile,
    FitResult,
    fit,
    load_measurements,
    synthetic_measurements,
)
from flexcomm.costmodel.collectives import FORMULAS
from flexcomm.costmodel.errors import InputError

ALPHA = 2e-5  # 20 us
BETA = 1 / 5e9  # 5 GB/s

PAIRS = [
    ("allreduce", "ring"),
    ("allreduce", "recursive-doubling"),
    ("allreduce", "tree"),
    ("allreduce", "rabenseifner"),
    ("allgather", "ring"),
    ("allgather", "bruck"),
    ("reduce-scatter", "ring"),
    ("broadcast", "pipelined-ring"),
    ("broadcast", "scatter-allgather"),
    ("alltoall", "pairwise"),
]


def rel(got: float, want: float) -> float:
    return abs(got / want - 1.0)


def param_error(result: FitResult, alpha: float = ALPHA, beta: float = BETA) -> float:
    return max(rel(result.alpha_s, alpha), rel(result.beta_s_per_byte, beta))


def only_fit(profile: CalibrationProfile) -> FitResult:
    assert len(profile.fits) == 1
    return profile.fits[0]


# --- recovery -----------------------------------------------------------------------------------


@pytest.mark.parametrize("pair", PAIRS, ids="/".join)
@pytest.mark.parametrize(("alpha", "bandwidth"), [(ALPHA, 1 / BETA), (3e-6, 2.5e10)])
def test_recovers_alpha_beta_from_5_percent_noise(
    pair: tuple[str, str], alpha: float, bandwidth: float
) -> None:
    data = synthetic_measurements(*pair, alpha, 1 / bandwidth, noise=0.05, seed=7)
    result = only_fit(fit(data))
    assert (result.collective, result.algorithm, result.link_class) == (*pair, "inter")
    assert param_error(result, alpha, 1 / bandwidth) < 0.05
    assert result.bandwidth_Bps == pytest.approx(bandwidth, rel=0.05)
    assert result.points == len(data)
    assert result.r2 > 0.99
    assert result.median_abs_rel_error < 0.06  # about the noise level, no worse


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    pair=st.sampled_from(sorted(FORMULAS)),
    alpha=st.floats(1e-6, 1e-2),
    bandwidth=st.floats(1e7, 1e11),
)
def test_clean_data_is_fitted_exactly(pair: tuple[str, str], alpha: float, bandwidth: float) -> None:
    result = only_fit(fit(synthetic_measurements(*pair, alpha, 1 / bandwidth, noise=0.0)))
    assert rel(result.alpha_s, alpha) < 1e-6
    assert rel(result.beta_s_per_byte, 1 / bandwidth) < 1e-6
    assert result.r2 == pytest.approx(1.0, abs=1e-9)
    assert result.max_abs_rel_error < 1e-6


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    pair=st.sampled_from(sorted(FORMULAS)),
    alpha=st.floats(1e-6, 1e-2),
    bandwidth=st.floats(1e7, 1e11),
)
def test_noisy_fit_predicts_the_true_model(pair: tuple[str, str], alpha: float, bandwidth: float) -> None:
    """Over the whole range one parameter can be weakly identified (e.g. 10 ms latency at 100 GB/s

    hides the bandwidth term), so the invariant is on predicted times, which are what matters.
    The noise draw is fixed (seed 0): hypothesis explores the parameters, not the noise's tail."""
    truth = synthetic_measurements(*pair, alpha, 1 / bandwidth, noise=0.0)
    profile = fit(synthetic_measurements(*pair, alpha, 1 / bandwidth, noise=0.05, seed=0))
    predicted = profile.predict(*pair, truth["bytes"], truth["ranks"])
    error = np.abs(predicted / truth["seconds"].to_numpy() - 1.0)
    assert np.median(error) < 0.02
    assert np.max(error) < 0.06


SEEDS = range(8)


@pytest.mark.parametrize("pair", [("allreduce", "ring"), ("allgather", "bruck"), ("alltoall", "pairwise")])
@pytest.mark.parametrize("outlier_range", [(3.0, 10.0), (0.1, 0.33)], ids=["slow", "fast"])
def test_robust_loss_resists_gross_outliers_and_linear_does_not(
    pair: tuple[str, str], outlier_range: tuple[float, float]
) -> None:
    """10 % of rows slowed x3..x10 (or sped up x3..x10). Log-ratio residuals weigh both alike:
    plain least squares is pulled tens of percent off, the default robust loss stays close."""
    for noise, bound in [(0.05, 0.04), (0.01, 0.01)]:
        robust, linear = [], []
        for seed in SEEDS:
            data = synthetic_measurements(*pair, ALPHA, BETA, noise=noise, outlier_fraction=0.1, seed=seed,
                                          outlier_range=outlier_range)
            robust.append(param_error(only_fit(fit(data))))
            linear.append(param_error(only_fit(fit(data, loss="linear"))))
        assert max(robust) < bound
        assert np.mean(linear) > 0.1 > 3 * np.mean(robust)


@pytest.mark.parametrize("loss", ["huber", "soft_l1"])
def test_other_robust_losses_also_recover(loss: str) -> None:
    data = synthetic_measurements("allreduce", "ring", ALPHA, BETA, outlier_fraction=0.1, seed=3)
    assert param_error(only_fit(fit(data, loss=loss))) < 0.05


def test_repetitions_are_medianed_but_every_row_is_reported() -> None:
    data = synthetic_measurements(
        "allreduce", "ring", ALPHA, BETA, noise=0.05, outlier_fraction=0.2, repeats=5, seed=1
    )
    result = only_fit(fit(data))
    assert result.points == len(data) == 3 * 16 * 5
    assert param_error(result) < 0.05
    assert result.max_abs_rel_error > 0.6  # a x3+ outlier row is still visible in the report


def test_single_rank_rows_are_left_out_of_the_fit() -> None:
    data = synthetic_measurements("allreduce", "ring", ALPHA, BETA, noise=0.0)
    extra = pd.DataFrame([{"collective": "allreduce", "algorithm": "ring", "ranks": 1, "bytes": 1e6,
                           "seconds": 1e-6}])
    result = only_fit(fit(pd.concat([data, extra], ignore_index=True)))
    assert result.points == len(data)
    assert param_error(result) < 1e-6


def test_groups_by_collective_algorithm_and_link_class() -> None:
    intra = synthetic_measurements("allreduce", "ring", 2e-6, 1 / 1e11, link_class="intra", seed=1)
    inter = synthetic_measurements("allreduce", "ring", ALPHA, BETA, link_class="inter", seed=2)
    gather = synthetic_measurements("allgather", "bruck", ALPHA, BETA, seed=3).drop(columns="link_class")
    table = pd.concat([intra, inter, gather], ignore_index=True)  # gather's link_class: NaN
    assert (load_measurements(table)["link_class"].iloc[-len(gather):] == "inter").all()
    profile = fit(table)
    keys = [(f.collective, f.algorithm, f.link_class) for f in profile.fits]
    assert keys == [("allgather", "bruck", "inter"), ("allreduce", "ring", "inter"),
                    ("allreduce", "ring", "intra")]
    assert rel(profile.get("allreduce", "ring", "intra").bandwidth_Bps, 1e11) < 0.05
    assert rel(profile.get("allreduce", "ring").alpha_s, ALPHA) < 0.05
    # Fallback: a link class never measured borrows the same algorithm's fit ("inter" first).
    assert profile.get("allgather", "bruck", "intra") is profile.get("allgather", "bruck", "inter")
    assert profile.get("allgather", "bruck", "intra", strict=True) is None
    assert profile.get("allreduce", "tree") is None


# --- profile API ----------------------------------------------------------------------------------


def test_predict_is_formula_times_fitted_parameters() -> None:
    fitted = FitResult("allreduce", "rabenseifner", "inter", 1e-5, 2e-10, 10, 1.0, 0, 0)
    profile = CalibrationProfile([fitted])
    nbytes = np.array([[0.0], [1e3], [1e9]])
    ranks = np.array([2, 6, 16])
    coef = FORMULAS[("allreduce", "rabenseifner")](nbytes, ranks)
    expected = coef.alpha * 1e-5 + (coef.beta + coef.gamma) * 2e-10
    got = profile.predict("allreduce", "rabenseifner", nbytes, ranks)
    assert got.shape == (3, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-14)
    assert profile.predict("allreduce", "rabenseifner", 1e6, 1) == 0.0  # one rank: no communication
    with pytest.raises(InputError) as err:
        profile.predict("allgather", "ring", 1e6, 4)
    assert err.value.field == "profile"


def test_residuals_and_summary() -> None:
    data = synthetic_measurements("broadcast", "binomial", ALPHA, BETA, noise=0.05, seed=5)
    data.index = data.index + 100  # the caller's index survives
    other = pd.DataFrame([{"collective": "alltoall", "algorithm": "pairwise", "ranks": 4, "bytes": 8.0,
                           "seconds": 1e-4, "link_class": "inter"}], index=[7])
    profile = fit(data)
    table = profile.residuals(pd.concat([data, other]))
    assert list(table.index) == [*data.index, 7]
    assert {"predicted_seconds", "rel_error"} <= set(table.columns)
    own = table.loc[data.index]
    np.testing.assert_allclose(own["rel_error"], own["predicted_seconds"] / own["seconds"] - 1, rtol=1e-12)
    result = only_fit(profile)
    assert np.median(np.abs(own["rel_error"])) == pytest.approx(result.median_abs_rel_error)
    assert np.max(np.abs(own["rel_error"])) == pytest.approx(result.max_abs_rel_error)
    assert math.isnan(table.loc[7, "predicted_seconds"])  # not fitted: NaN, not an error

    summary = profile.summary()
    assert list(summary.columns) == [
        "collective", "algorithm", "link_class", "alpha_s", "beta_s_per_byte", "bandwidth_Bps",
        "points", "r2", "median_abs_rel_error", "max_abs_rel_error",
    ]
    assert summary.loc[0, "bandwidth_Bps"] == pytest.approx(1 / result.beta_s_per_byte)


def test_save_load_round_trip(tmp_path: Path) -> None:
    data = pd.concat(
        [synthetic_measurements(*pair, ALPHA, BETA, seed=i) for i, pair in enumerate(PAIRS[:3])],
        ignore_index=True,
    )
    csv = tmp_path / "bench.csv"
    data.to_csv(csv, index=False)
    profile = fit(csv)
    assert profile.source == str(csv) and profile.created
    path = tmp_path / "out" / "profile.json"
    profile.save(path)
    document = json.loads(path.read_text())
    assert document["format"] == FORMAT
    assert set(document["fits"][0]) == {
        "collective", "algorithm", "link_class", "alpha_s", "beta_s_per_byte", "points", "r2",
        "median_abs_rel_error", "max_abs_rel_error",
    }
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind
    loaded = CalibrationProfile.load(path)
    assert loaded == profile
    assert loaded.get("allreduce", "tree").alpha_s == profile.get("allreduce", "tree").alpha_s

    degenerate = CalibrationProfile([FitResult("allgather", "ring", "intra", 1e-6, 0.0, 2, math.nan, 0, 0)])
    degenerate.save(path)  # overwrite; NaN R^2 becomes null and back
    back = CalibrationProfile.load(path)
    assert math.isnan(back.fits[0].r2) and back.fits[0].bandwidth_Bps == math.inf


# --- errors -------------------------------------------------------------------------------------

GOOD_CSV = "collective,algorithm,ranks,bytes,seconds\nallreduce,ring,4,1024,1e-5\nallreduce,ring,8,1e6,2e-3\n"


@pytest.mark.parametrize(
    ("text", "field", "where"),
    [
        ("collective,algorithm,ranks,bytes\nallreduce,ring,4,1024\n", "measurements.seconds", None),
        (GOOD_CSV + "allreduce,ring,4,1024,fast\n", "measurements.seconds", "CSV line 4"),
        (GOOD_CSV + "allreduce,ring,4,1024,0\n", "measurements.seconds", "CSV line 4"),
        (GOOD_CSV + "allreduce,ring,4,1024,\n", "measurements.seconds", "CSV line 4"),
        (GOOD_CSV + "allreduce,ring,0,1024,1e-5\n", "measurements.ranks", "CSV line 4"),
        (GOOD_CSV + "allreduce,ring,2.5,1024,1e-5\n", "measurements.ranks", "CSV line 4"),
        (GOOD_CSV + "allreduce,ring,4,-1,1e-5\n", "measurements.bytes", "CSV line 4"),
        (GOOD_CSV + "allreduce,ring,4,1KiB,1e-5\n", "measurements.bytes", "CSV line 4"),
        (GOOD_CSV + "allscatter,ring,4,1024,1e-5\n", "measurements.collective", "CSV line 4"),
        (GOOD_CSV + "allreduce,bruck,4,1024,1e-5\n", "measurements.algorithm", "CSV line 4"),
        ("collective,algorithm,ranks,bytes,seconds\n", "measurements", None),
    ],
)
def test_malformed_csv_names_the_field(tmp_path: Path, text: str, field: str, where: str | None) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_measurements(path)
    assert err.value.field == field
    if where:
        assert where in str(err.value)
    with pytest.raises(InputError):
        fit(path)


def test_load_measurements_normalises(tmp_path: Path) -> None:
    path = tmp_path / "ok.csv"
    path.write_text("collective, algorithm, ranks, bytes, seconds\n AllReduce , ring , 4 , 1024 , 1e-5 \n")
    table = load_measurements(path)
    assert table.loc[0, "collective"] == "allreduce" and table.loc[0, "link_class"] == "inter"
    assert table["ranks"].dtype == np.int64 and table.loc[0, "seconds"] == 1e-5
    with pytest.raises(InputError) as err:
        load_measurements(tmp_path / "missing.csv")
    assert err.value.field == "measurements"
    frame = pd.DataFrame({"collective": ["allreduce"], "algorithm": ["ring"], "ranks": [4], "bytes": [8],
                          "seconds": [-1.0]}, index=["run-a"])
    with pytest.raises(InputError, match="row 'run-a'") as err:
        load_measurements(frame)
    assert err.value.field == "measurements.seconds"


def test_hierarchical_allreduce_is_calibrated_through_its_parts() -> None:
    data = synthetic_measurements("allreduce", "ring", ALPHA, BETA)
    data.loc[0, "algorithm"] = "hierarchical"
    assert load_measurements(data).loc[0, "algorithm"] == "hierarchical"  # a known algorithm ...
    with pytest.raises(InputError, match="through its parts") as err:  # ... but not fittable
        fit(data)
    assert err.value.field == "measurements.algorithm"
    with pytest.raises(InputError, match="through its"):
        synthetic_measurements("allreduce", "hierarchical", ALPHA, BETA)


def test_unidentifiable_or_bad_arguments() -> None:
    one_point = synthetic_measurements("allreduce", "ring", ALPHA, BETA, ranks=(4,), sizes=(1e6,), repeats=3)
    with pytest.raises(InputError, match="not proportional") as err:
        fit(one_point)
    assert err.value.field == "measurements"
    data = synthetic_measurements("allreduce", "ring", ALPHA, BETA)
    with pytest.raises(InputError) as err:
        fit(data, loss="l2")
    assert err.value.field == "loss"
    with pytest.raises(InputError):
        fit(data, f_scale=0.0)


def write_profile(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "profile.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


GOOD_FIT = {"collective": "allreduce", "algorithm": "ring", "link_class": "inter", "alpha_s": 1e-5,
            "beta_s_per_byte": 1e-10, "points": 12, "r2": 0.99, "median_abs_rel_error": 0.01,
            "max_abs_rel_error": 0.1}


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ("{not json", "profile"),
        ([], "profile"),
        ({"fits": []}, "profile.format"),
        ({"format": "flexcomm-calibration/0", "fits": []}, "profile.format"),
        ({"format": FORMAT}, "profile.fits"),
        ({"format": FORMAT, "fits": [GOOD_FIT], "source": 3}, "profile.source"),
        ({"format": FORMAT, "fits": ["ring"]}, "profile.fits[0]"),
        ({"format": FORMAT, "fits": [{k: v for k, v in GOOD_FIT.items() if k != "alpha_s"}]},
         "profile.fits[0].alpha_s"),
        ({"format": FORMAT, "fits": [GOOD_FIT, {**GOOD_FIT, "beta_s_per_byte": -1.0}]},
         "profile.fits[1].beta_s_per_byte"),
        ({"format": FORMAT, "fits": [{**GOOD_FIT, "points": "many"}]}, "profile.fits[0].points"),
        ({"format": FORMAT, "fits": [{**GOOD_FIT, "algorithm": "hierarchical"}]},
         "profile.fits[0].algorithm"),
        ({"format": FORMAT, "fits": [{**GOOD_FIT, "link_class": ""}]}, "profile.fits[0].link_class"),
        ({"format": FORMAT, "fits": [GOOD_FIT, GOOD_FIT]}, "profile.fits"),
    ],
)
def test_malformed_profile_names_the_field(tmp_path: Path, document: object, field: str) -> None:
    with pytest.raises(InputError) as err:
        CalibrationProfile.load(write_profile(tmp_path, document))
    assert err.value.field == field


def test_missing_profile_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        CalibrationProfile.load(tmp_path / "nope.json")
    assert err.value.field == "profile"


# --- synthetic data -------------------------------------------------------------------------------


def test_synthetic_measurements_are_deterministic_and_shaped() -> None:
    a = synthetic_measurements("allgather", "ring", ALPHA, BETA, outlier_fraction=0.1, seed=4)
    b = synthetic_measurements("allgather", "ring", ALPHA, BETA, outlier_fraction=0.1, seed=4)
    c = synthetic_measurements("allgather", "ring", ALPHA, BETA, outlier_fraction=0.1, seed=5)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["seconds"], c["seconds"])
    assert list(a.columns) == ["collective", "algorithm", "link_class", "ranks", "bytes", "seconds"]
    assert len(a) == 3 * 16 and (a["seconds"] > 0).all()
    clean = synthetic_measurements("allgather", "ring", ALPHA, BETA, noise=0.0)
    ratio = a["seconds"] / clean["seconds"]
    assert ((ratio > 2.5).sum()) == round(0.1 * len(a))  # the outliers, and only them
    assert load_measurements(a).shape[0] == len(a)  # valid input for the loader
    with pytest.raises(InputError):
        synthetic_measurements("allgather", "ring", ALPHA, BETA, ranks=(1, 2))
    with pytest.raises(InputError):
        synthetic_measurements("allgather", "ring", ALPHA, BETA, outlier_fraction=1.0)


def test_calibrate_warns_about_a_fit_worse_than_a_constant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Times that fall as sizes grow fit no alpha + n beta line with beta >= 0: R^2 < 0 must not pass silently."""
    from flexcomm.experiments.cli import main

    rows = [{"collective": "allreduce", "algorithm": "ring", "ranks": 4, "bytes": 2.0**k, "seconds": 1.0 / k}
            for k in range(10, 24)]
    measured = tmp_path / "m.csv"
    pd.DataFrame(rows).to_csv(measured, index=False)
    assert main(["calibrate", str(measured), "-o", str(tmp_path / "p.json")]) == 0
    err = capsys.readouterr().err
    assert "warning: allreduce/ring" in err and "R^2 = " in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "p.json").exists()  # the profile is still written: the user decides
