"""Replaying a traced run: pricing across trace changes, the two-rate calibration, decisions as the hooks take them."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from flexcomm.compression.comm import GLOO_HINTS, LocalCommunicator
from flexcomm.compression.flexible import FlexibleCompressor
from flexcomm.costmodel.calibration import CalibrationProfile, FitResult
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend.net_trace import parse_trace
from flexcomm.real_backend.trace_replay import (
    CollectiveTiming,
    DecisionReplay,
    LoggedRun,
    TraceCalibration,
    TraceTimeline,
    latency_rounds,
    replay_run,
)
from flexcomm.real_backend.validate import _coefficients

TRACE = parse_trace("time_s,link,bandwidth,latency\n0,*,80Mbit/s,0.5ms\n1,*,8Mbit/s,\n3,*,,10ms\n5,*,,\n", "t", 2)


def _calibration(**overrides: float) -> TraceCalibration:
    values = {"alpha_s": 0.0, "delay_slope": 0.0, "wire_per_byte": 1.0}
    values.update(overrides)
    timing = CollectiveTiming("allgather", "ring", **values)
    return TraceCalibration({("allgather", "ring"): timing}, 1e-3, 10e6)


def test_bytes_drain_at_the_rate_in_force_across_a_change() -> None:
    timeline = TraceTimeline(TRACE, _calibration(), bucket=False)
    # 10 MB/s until 1 s, then 1 MB/s: 10 MB from 0.5 s = 5 MB by 1 s, then 5 MB more -> 6 s
    assert timeline.end_of("allgather", "ring", 10e6, 0.5) == pytest.approx(6.0)
    assert timeline.end_of("allgather", "ring", 1e6, 0.0) == pytest.approx(0.1)
    assert timeline.at(2.0) == (pytest.approx(1e6), pytest.approx(1e-3))
    assert timeline.at(4.0) == (pytest.approx(1e6), pytest.approx(20e-3))


def test_the_tbf_bucket_lets_a_burst_through_and_refills_while_idle() -> None:
    timeline = TraceTimeline(TRACE, _calibration())
    burst = 64 * 1024  # at 1 MB/s (8 Mbit/s) the bucket is the 64 KiB floor: 65 ms of traffic
    first = timeline.end_of("allgather", "ring", 100_000, 2.0)  # a full bucket at the start
    assert first == pytest.approx(2.0 + (100_000 - burst) / 1e6)
    second = timeline.end_of("allgather", "ring", 100_000, first)  # back to back: no tokens left
    assert second - first == pytest.approx(0.1)
    third = timeline.end_of("allgather", "ring", 100_000, second + 0.03)  # 30 ms idle: 30 KB of tokens
    assert third - (second + 0.03) == pytest.approx((100_000 - 30_000) / 1e6)
    timeline.reset()
    assert timeline.end_of("allgather", "ring", 50_000, 2.0) == pytest.approx(2.0)  # within the bucket


def test_latency_follows_the_delay_at_the_start() -> None:
    timeline = TraceTimeline(TRACE, _calibration(alpha_s=0.004, delay_slope=6.0), bucket=False)
    assert timeline.end_of("allgather", "ring", 0, 0.2) == pytest.approx(0.2 + 0.004)
    assert timeline.end_of("allgather", "ring", 0, 3.5) == pytest.approx(3.5 + 0.004 + 6.0 * (20e-3 - 1e-3))
    with pytest.raises(InputError, match="allreduce/ring"):
        timeline.end_of("allreduce", "ring", 1, 0.0)


def _profile(alpha_total: float, beta_total: float, ranks: int = 4) -> CalibrationProfile:
    a, b = _coefficients("allgather", "ring", 1.0, ranks)
    fit = FitResult("allgather", "ring", "inter", alpha_total / a, beta_total / b, 10, 1.0, 0.0, 0.0)
    return CalibrationProfile([fit])


def test_the_calibration_takes_wire_bytes_from_the_fast_rate_and_the_slope_from_the_far_delay() -> None:
    wire, alpha, rate = 3.0, 6e-3, 25e6
    fast = _profile(alpha, wire / rate)
    far = _profile(alpha + 7.0 * 0.049, wire / rate)
    timing = TraceCalibration.fit(fast, rate, 1e-3, 4, far=far, far_delay_s=0.05).timing("allgather", "ring")
    assert timing.wire_per_byte == pytest.approx(wire)
    assert timing.alpha_s == pytest.approx(alpha)
    assert timing.delay_slope == pytest.approx(7.0)
    calibration = TraceCalibration.fit(fast, rate, 1e-3, 4)
    assert TraceCalibration.from_dict(calibration.to_dict()).timing("allgather", "ring") == \
        calibration.timing("allgather", "ring")
    without_far = calibration.timing("allgather", "ring")
    assert without_far.delay_slope == pytest.approx(2 * latency_rounds("allgather", "ring", 4)) == 6.0
    with pytest.raises(InputError, match="rate"):
        TraceCalibration.fit(fast, 0.0, 1e-3, 4)


def test_replayed_decisions_are_the_compressors_own() -> None:
    """With no agreement in flight, the replay decides exactly as FlexibleCompressor does on the same times."""
    world, numel = 4, 200_000
    prior = CostModel.from_link(1e-4, 125e6)

    def seconds(collective: str, nbytes: int, phase: int) -> float:
        latency, rate = ((1e-3, 25e6), (1e-3, 1e6), (50e-3, 1e6))[phase]
        rounds = {"allgather": 3, "allreduce": 6, "broadcast": 2}[collective]
        return rounds * 2 * latency + nbytes * 3 / rate

    replay = DecisionReplay(0.05, prior, world, in_flight=0)
    emulated = FlexibleCompressor(0.05, cost_model=prior)
    comm = LocalCommunicator(world, algorithms=GLOO_HINTS)
    chosen_replay, chosen_emulated = [], []
    for step in range(60):
        phase = min(2, step // 20)
        scheme, stats = replay.choose(step, 0, numel)
        replay.observe(stats, [seconds(r.collective, r.nbytes, phase) for r in _timed(stats)])
        replay.end_iteration()
        chosen_replay.append(scheme)
        emulated.clock = lambda record, _w, phase=phase: seconds(record.collective, record.nbytes, phase)
        result = emulated.exchange([torch.randn(numel) for _ in range(world)], comm)
        chosen_emulated.append(result.stats.scheme)
    assert chosen_replay == chosen_emulated
    assert {"topk-ag", "topk-ar"} <= set(chosen_replay)  # the network changes made it switch


def _timed(stats):  # noqa: ANN001, ANN202
    from flexcomm.compression.network_estimate import timed_records

    return timed_records(stats)


def test_a_static_run_is_priced_from_its_log_open_and_closed() -> None:
    steps = pd.DataFrame({"step": [0, 1, 2], "trace_s": [0.5, 0.8, 1.5], "step_s": [0.2, 0.6, 0.2],
                          "trace_phase": [0, 0, 1], "ratio": [0.01] * 3, "gain": [math.nan] * 3})
    exchanges = pd.DataFrame({"step": [0, 1, 2], "bucket": [0, 0, 0], "numel": [100] * 3,
                              "scheme": ["topk-ag"] * 3, "collectives": ["allgather/ring/1000000"] * 3})
    run = LoggedRun("topk-ag", "topk-ag", 0.01, 2, 0.05, steps, exchanges, None, {})
    timeline = TraceTimeline(TRACE, _calibration(), bucket=False)
    opened = replay_run(run, timeline, "open")
    # 1 MB at 10 MB/s = 0.1 s (+ solo 0.05); step 1 starts at 0.8 s: 0.2 s at 10 MB/s = 2 MB... done by 0.9 s
    assert opened["predicted_s"].tolist() == pytest.approx([0.15, 0.15, 0.05 + 1.0])
    closed = replay_run(run, timeline, "closed")
    assert closed["sim_start_s"].iloc[0] == 0.5
    # the next simulated step starts after the simulated one plus the real gap between the steps
    assert closed["sim_start_s"].iloc[1] == pytest.approx(0.5 + 0.15 + (0.8 - 0.5 - 0.2))
    assert (closed["scheme_real"] == closed["scheme_sim"]).all()
    with pytest.raises(InputError, match="mode"):
        replay_run(run, timeline, "sideways")


def test_a_run_reads_its_profile_beside_its_run_json_and_an_old_absolute_one_names_the_file(tmp_path) -> None:
    """Issue 41: a committed run holds the profile its hooks priced with (``profile.json`` beside ``run.json``);
    a run written before that names an absolute path, which works only where it still exists."""
    import json

    from flexcomm.real_backend.ddp_train import RUN_PROFILE, keep_profile_beside, run_profile_path

    made = tmp_path / "elsewhere" / "profile-fast.json"
    made.parent.mkdir()
    _profile(2e-3, 1e-6, ranks=2).save(made)
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    assert keep_profile_beside(run_folder, str(made)) == RUN_PROFILE == "profile.json"
    assert json.loads((run_folder / RUN_PROFILE).read_text()) == json.loads(made.read_text())
    assert keep_profile_beside(run_folder, str(run_folder / RUN_PROFILE)) == RUN_PROFILE  # already there: kept
    assert keep_profile_beside(run_folder, None) is None
    steps = pd.DataFrame({"step": [0], "trace_s": [0.0], "step_s": [0.1]})
    run = LoggedRun("flexible", "flexible", 0.01, 2, 0.05, steps, pd.DataFrame(), None,
                    {"profile": RUN_PROFILE, "bandwidth_Bps": 1e6}, run_folder)
    made.unlink()  # the machine it was made on is gone: the copy beside the run is what prices it
    assert run.prior().profile == CalibrationProfile.load(run_folder / RUN_PROFILE)
    assert run_profile_path(run_folder, None) is None
    old = str(tmp_path / "work" / "results" / "profile-fast.json")
    with pytest.raises(InputError) as error:
        run_profile_path(run_folder, old)
    line = str(error.value)
    assert "\n" not in line and old in line and str(run_folder / RUN_PROFILE) in line
