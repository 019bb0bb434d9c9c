"""``flexcomm validate --network-trace``: bad input first, then a small end-to-end run on a traced testbed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import needs_netns

from flexcomm.experiments.cli import main
from flexcomm.real_backend import trace_validate
from flexcomm.real_backend.trace_validate import analyze_trace, run_trace_validation


@pytest.fixture(autouse=True)
def _private_state_dir(private_testbed_state: Path) -> None:
    """Every test here keeps its testbed state files to itself."""


@pytest.mark.parametrize(("argv", "field"), [
    (["--network-trace", "c3"], "trace"),
    (["--network-trace", "missing.csv"], "trace"),
    (["--network-trace", "c1", "--trace-duration=-5s"], "trace-duration"),
    (["--network-trace", "c1", "--trace-max-bandwidth", "fast"], "trace-max-bandwidth"),
    (["--network-trace", "c1", "--ranks", "1"], "ranks"),
    (["--network-trace", "c1", "--strategies", "topk-ag,zip"], "strategy"),
    (["--network-trace", "c1", "--strategies", "flexible,moo"], "strategies"),
    (["--replay-only"], "folder"),
])
def test_bad_requests_are_one_line_errors(argv: list[str], field: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"flexcomm: error: {field}"), err


@needs_netns
def test_a_small_traced_validation_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """2 ranks, two phases (40 -> 10 Mbit/s), static topk-ag and flexible: every step replayed, a report."""
    monkeypatch.setattr(trace_validate, "FAST_SIZES", "4KiB:256KiB")
    monkeypatch.setattr(trace_validate, "CALIBRATION_ITERS", {"fast": 2, "far": 1})
    monkeypatch.setattr(trace_validate, "SOLO_STEPS", 4)
    trace = tmp_path / "two.csv"
    trace.write_text("time_s,link,bandwidth\n0,*,40Mbit/s\n4,*,10Mbit/s\n8,*,,\n")
    result = run_trace_validation(str(trace), tmp_path / "out", ranks=2, strategies="topk-ag,flexible",
                                  hidden="256", timeout_s=300, quiet=True, cpu_bound_ok=True)
    assert result.failures == []
    out = tmp_path / "out"
    for name in ("calibration.json", "replay.csv", "errors.md", "summary.json", "trace_validation.png",
                 "trace_log.jsonl", "network_check.json"):
        assert (out / name).exists(), name
    check = json.loads((out / "network_check.json").read_text())
    assert check["ratio"] == pytest.approx(check["shaped_step_s"] / check["unshaped_step_s"])
    assert check["network_bound"] == (check["ratio"] >= 3.0)
    replay = pd.read_csv(out / "replay.csv")
    for label in ("topk-ag", "flexible"):
        steps = pd.read_csv(out / "ddp" / label / "steps.csv")
        assert steps["trace_s"].max() < 9.0 and steps["trace_s"].iloc[-1] >= 7.0  # trained the trace's length
        phases = steps["trace_phase"].value_counts()
        assert {0, 1} <= set(phases.index) <= {0, 1, 2} and phases.get(2, 0) <= 1  # at most the step that saw the end
        for mode in ("open", "closed"):
            part = replay[(replay["label"] == label) & (replay["mode"] == mode)]
            assert len(part) == len(steps) and (part["predicted_s"] > 0).all()
    summary = json.loads((out / "summary.json").read_text())
    agreement = summary["strategies"]["flexible"]["open"]["decision_agreement"]
    assert 0.0 <= agreement <= 1.0
    cost = summary["adaptive"]["mechanism"]["flexible"]  # the adaptive hook's own cost, logged per step
    assert cost["mechanism_s_mean"] > 0 and cost["decide_s_mean"] > 0 and 0 < cost["share_of_step"] < 1
    assert {int(p) for p in summary["adaptive"]["phases"]["flexible"]} == {0, 1}  # not the end line's phase
    assert "## Does adapting pay?" in (out / "errors.md").read_text()
    assert summary["lag"]["changes"] == 6 and summary["lag"]["worst_s"] < 0.5  # 3 lines x 2 runs
    assert math.isfinite(summary["strategies"]["topk-ag"]["open"]["median_abs_error"])
    again = analyze_trace(out)  # the replay is deterministic: re-running the analysis changes nothing
    assert json.loads(json.dumps(again.summary["strategies"])) == summary["strategies"]


def test_a_cpu_bound_setting_or_a_short_phase_is_a_one_line_error() -> None:
    """The network check's verdict: refused with the measured ratio, or a phase shorter than its step."""
    from flexcomm.costmodel.errors import InputError
    from flexcomm.real_backend.net_trace import parse_trace
    from flexcomm.real_backend.trace_validate import require_network_bound

    trace = parse_trace("time_s,link,bandwidth\n0,*,40Mbit/s\n10,*,1Mbit/s\n12,*,,\n", "t.csv", 2)
    check = {"ranks": 2, "rate_Bps": 5e6, "unshaped_step_s": 0.05, "shaped_step_s": 0.08, "ratio": 1.6,
             "network_bound": False}
    with pytest.raises(InputError, match=r"80 ms shaped vs 50 ms unshaped \(1\.6x < 3x\)") as error:
        require_network_bound(check, trace)
    assert "\n" not in str(error.value) and str(error.value).startswith("ranks")
    # network-bound, but at 1 Mbit/s a step takes 0.05 + 0.25 x 40 = 10.05 s: the 2 s phase is too short
    check.update(shaped_step_s=0.3, ratio=6.0, network_bound=True)
    with pytest.raises(InputError, match=r"phase 1 at 1Mbit/s.*'2 s long'.*predicted 10\.1 s"):
        require_network_bound(check, trace)
    long_trace = parse_trace("time_s,link,bandwidth\n0,*,40Mbit/s\n10,*,20Mbit/s\n20,*,,\n", "t.csv", 2)
    require_network_bound(check, long_trace)  # 0.55 s steps in 10 s phases: fine


def test_calibration_sizes_stop_near_a_second_of_traffic_and_start_at_a_few_bytes() -> None:
    from flexcomm.real_backend.bench import parse_sizes

    def sizes(spec: str, rate: float) -> list[int]:
        return parse_sizes(trace_validate.calibration_sizes(spec, rate))

    assert sizes("4KiB:4MiB", 25e6) == [8, 64, 512, *parse_sizes("4KiB:4MiB")]  # 200 Mbit/s: the range kept
    assert sizes("4KiB:4MiB", 625e3)[-1] == 512 * 1024  # 5 Mbit/s: about a second of traffic
    assert sizes("4KiB:1MiB", 1e3)[-1] == 256 * 1024  # never under 256 KiB


def test_moo_is_compared_with_its_own_scheme_and_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the trace's strategies, the static scheme MOO used most at the ratio it chose most is trained
    under the same trace and joins the run's folder (what errors.md compares MOO with)."""
    from types import SimpleNamespace


    ddp = tmp_path / "ddp"
    (ddp / "moo").mkdir(parents=True)
    (ddp / "run.json").write_text(json.dumps({"strategies": ["topk-ag", "moo"], "ranks": 3}))
    ratios = [0.1, 0.1, 0.1, 0.0174, 0.0174, 0.0166, 0.0174, 0.0174]  # per step, two buckets each
    pd.DataFrame({"step": [s for s in range(8) for _ in (0, 1)], "ratio": [r for r in ratios for _ in (0, 1)],
                  "scheme": ["topk-ag", "topk-ag"] * 3 + ["topk-ar", "topk-ag"] * 5,  # the big bucket by AR
                  "payload_bytes": [80_000, 5_000] * 8}).to_csv(ddp / "moo" / "exchanges.csv", index=False)
    calls = []

    def fake_training(ranks, workload, specs, steps, out, **kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append(specs)
        (Path(out) / specs[0].label).mkdir(parents=True)
        (Path(out) / specs[0].label / "steps.csv").write_text("step\n")
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(trace_validate, "run_training", fake_training)
    testbed = SimpleNamespace(ranks=3, id="abcdef", effective_bandwidth_Bps=1e6)
    assert trace_validate.train_at_moo_ratio(testbed, ddp, tmp_path, "mlp-digits", None, 0, 60.0, True) == []
    (spec,) = calls[0]
    assert (spec.label, spec.strategy, spec.ratio) == ("topk-ar@0.0174", "topk-ar", 0.0174)
    assert (ddp / "topk-ar@0.0174" / "steps.csv").exists() and not (tmp_path / "ddp-moo-ratio").exists()
    assert json.loads((ddp / "run.json").read_text())["strategies"] == ["topk-ag", "moo", "topk-ar@0.0174"]


def test_the_committed_c1_run_replays_to_its_committed_report(tmp_path: Path) -> None:
    """validation/network-trace/c1 (the docs' C1 numbers): the replay of its logs gives its summary again."""
    import shutil

    source = Path(__file__).resolve().parents[1] / "validation" / "network-trace" / "c1"
    folder = tmp_path / "c1"
    shutil.copytree(source, folder)
    committed = json.loads((source / "summary.json").read_text())
    again = analyze_trace(folder)
    fresh = json.loads(json.dumps(again.summary, default=trace_validate._jsonable))
    for label, entry in committed["strategies"].items():
        for mode in ("open", "closed"):
            for key in ("steps", "median_abs_error", "total_error", "naive_median_abs_error"):
                assert fresh["strategies"][label][mode][key] == pytest.approx(entry[mode][key], rel=1e-9), (label, key)
        # the naive baseline (logged bytes at the trace's rate, no latency) is further off on every strategy
        assert entry["open"]["median_abs_error"] < entry["open"]["naive_median_abs_error"], label
    assert "below the naive baseline's for 5 of 5 strategies" in (source / "errors.md").read_text()
    flexible = fresh["strategies"]["flexible"]
    assert flexible["beats_every_static"] and flexible["open"]["decision_agreement"] >= 0.9
    assert fresh["adaptive"]["moo_vs_its_ratio"]["no_slower"]
    assert fresh["network_check"]["network_bound"]


def test_the_trace_validation_figure_reads_for_any_measured_run(tmp_path: Path) -> None:
    """The testbed's measured steps and the trace's phases set what the figure shows; a slow phase that began
    where the measured run ended was drawn with no width and called hidden (it failed a clean-clone CI run)."""
    from types import SimpleNamespace

    import numpy as np
    from figure_check import capture_figures

    rng = np.random.default_rng(2)
    with capture_figures() as figures:
        for k in range(30):
            phases = int(rng.integers(2, 6))
            times = np.sort(np.concatenate([[0.0], rng.uniform(0.5, 20.0, phases - 1)]))
            rates = rng.choice([1e6, 2.5e5, 5e5], phases)
            timeline = SimpleNamespace(times=times, rates=rates, delays=rng.uniform(0, 0.01, phases))
            end = float(times[-1] + rng.uniform(0.0, 5.0) if rng.uniform() < 0.5 else times[-1] * rng.uniform(0.6, 1))
            rows = []
            for label in ("topk-ag", "flexible"):
                clock, steps = 0.0, 0
                while clock < end or steps < 3:  # a run has steps on both clocks
                    steps += 1
                    step = 10 ** rng.uniform(-1, 0.3)
                    scheme = str(rng.choice(["topk-ag", "topk-ar", "dense", "topk-ar+topk-ag"]))
                    for mode in ("open", "closed"):
                        rows.append({"label": label, "mode": mode, "trace_s": clock, "sim_start_s": clock,
                                     "measured_s": step, "predicted_s": step * rng.uniform(0.8, 1.25),
                                     "scheme_real": scheme, "scheme_sim": scheme})
                    clock += step
            trace_validate.plot_trace_validation(pd.DataFrame(rows), timeline, tmp_path / f"trace_{k}.png")
    bad = {name: problems for name, problems in figures.items() if problems}
    assert len(figures) == 30 and not bad, bad
