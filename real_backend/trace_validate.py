"""``flexcomm validate --network-trace``: real ranks under a changing network, and the simulator predicting them.

What it runs (:func:`run_trace_validation`), on one testbed of N ranks whose supervisor replays the trace:

0. **network check** (:func:`network_check`): the first static strategy for a few steps unshaped (ranks on
   loopback) and at the trace's fastest rate: a setting where the shaped step is not several times the
   unshaped one is CPU-bound and refused (``cpu_bound_ok`` runs it anyway), as is a phase shorter than a
   step at its rate (:func:`require_network_bound`);
1. **calibration**: the collective benchmark at the trace's fastest rate (static) at its first delay and
   at its largest, fitted into a :class:`real_backend.trace_replay.TraceCalibration` (``calibration.json``);
   no training step is among its points;
2. **training**: ``train-ddp`` with each strategy (default ``topk-ag, topk-ar, flexible, moo``), the trace
   restarted at each strategy's first step and every strategy training for the trace's whole length, so
   all see the same network at the same offsets (``ddp/<label>/steps.csv`` logs each step's start in the
   trace, its phase, scheme, ratio, time and the adaptive machinery's own seconds); then the static scheme
   at MOO's chosen ratio (:func:`train_at_moo_ratio`);
3. **replay** (:func:`real_backend.trace_replay.replay_run`) of every run, open and closed clock;
4. **report**: ``replay.csv`` (every step), ``errors.md``, ``summary.json`` and ``trace_validation.png``:
   per-step error (median, worst) and total-time error per strategy, decision agreement (share of bucket
   exchanges where real and simulated ``flexible`` chose the same scheme; MOO's ratio within one candidate
   step), the supervisor's lag, how each strategy fared against the static ones (time for the steps every
   strategy completed), and whether adapting paid (:mod:`real_backend.adaptive_verdict`).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.compression.moo import MOOConfig
from flexcomm.costmodel.atomic import save_figure_atomic, write_csv_atomic, write_text_atomic
from flexcomm.costmodel.bounded_stream import read_json_bounded
from flexcomm.costmodel.calibration import fit
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import read_text_bounded
from flexcomm.costmodel.plotting import SCHEME_COLOURS, readable_log_axis, use_file_backend
from flexcomm.costmodel.units import format_bandwidth, format_percent, parse_bandwidth, parse_size, parse_time
from flexcomm.real_backend.adaptive_verdict import NETWORK_BOUND, markdown_lines, verdict
from flexcomm.real_backend.bench import parse_sizes, run_benchmark
from flexcomm.real_backend.ddp_train import StrategySpec, parse_hidden, parse_strategies, run_training
from flexcomm.real_backend.net_trace import TestbedChange, load_trace, parse_trace
from flexcomm.real_backend.testbed import Testbed, require_privileges
from flexcomm.real_backend.trace_control import read_log
from flexcomm.real_backend.trace_replay import LoggedRun, TraceCalibration, TraceTimeline, replay_run
from flexcomm.real_backend.trace_supervisor import apply_change

DEFAULT_STRATEGIES = "topk-ag,topk-ar,flexible,moo"
#: The setting this 2-core machine runs network-bound (``network_check`` measured it; see docs/real-backend.md):
#: 3 ranks (4 share 2 cores and the CPU bounds the fast phases) and C1/C2 scaled to 10 Mbit/s at their fastest.
DEFAULT_RANKS = 3
DEFAULT_MAX_BANDWIDTH = "10Mbit/s"
ADAPTIVE = ("flexible", "moo")
CALIBRATION_COLLECTIVES = ("allreduce", "allgather", "broadcast")
FAST_SIZES = "4KiB:4MiB"
#: Message sizes (bytes) the calibration adds below FAST_SIZES/FAR_SIZES: almost pure latency.
LATENCY_SIZES = (8, 64, 512)
FAR_SIZES = "4KiB:1MiB"
#: Timed repetitions per size: more where a call is short (the first delay).
CALIBRATION_ITERS = {"fast": 6, "far": 3}
#: Steps of the compute-only and solo measurements (their medians price every step).
SOLO_STEPS = 20
#: Goals the report checks (the issue's): decisions, per-step error median / worst.
GOAL_AGREEMENT = 0.90
GOAL_MEDIAN = 0.10
GOAL_WORST = 0.20
#: Steps left out of the error statistics (DDP's first iterations: one bucket, then rebuilt buckets).
WARMUP_STEPS = 3
#: Steps of each of the network check's short runs (:func:`network_check`).
CHECK_STEPS = 12


@dataclass
class TraceValidation:
    folder: Path
    replay: pd.DataFrame
    summary: dict[str, Any]
    failures: list[str]


def _log(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"[validate --network-trace] {message}", flush=True)


def set_static(testbed: Any, rate_Bps: float, delay_s: float | None) -> None:
    """Every link of ``testbed`` at ``rate_Bps`` (both directions) and the delay line at ``delay_s``, now."""
    rates = tuple((r, d, rate_Bps) for r in range(testbed.ranks) for d in ("egress", "ingress"))
    apply_change(testbed, TestbedChange(0.0, rates, delay_s, 0))


def calibration_sizes(sizes: str, rate_Bps: float) -> str:
    """``sizes`` capped at about one second of traffic at ``rate_Bps`` (a power of two, at least 256 KiB),
    with :data:`LATENCY_SIZES` in front, as a comma list: at 5 Mbit/s a 4 MiB allgather takes 13 s a call,
    and training sends far less than a second's worth; at 10 Mbit/s 4 KiB is already 6.5 ms of bytes, so
    without a few-byte message a latency of 2 ms hides in the fit's noise (measured: fitted 0, then the
    simulated small exchanges were free and the replay's decisions differed from the real ones)."""
    low, high = sizes.split(":")
    cap = 2 ** int(math.floor(math.log2(max(rate_Bps, 2**18))))
    top = int(min(parse_size(high), cap)) // 1024
    listed = parse_sizes(f"{low}:{top}KiB")
    return ",".join(str(n) for n in sorted({*LATENCY_SIZES, *listed}))


def calibrate(testbed: Any, trace: Any, folder: Path, timeout_s: float, quiet: bool) -> tuple[Any, list[str]]:
    """Static benchmarks at the trace's fastest rate, at its first delay and (when the trace changes the
    delay) at its largest; their fit (None on failure)."""
    rate = max(r for c in trace.changes for _, _, r in c.rates)
    delays = [c.delay_s for c in trace.changes if c.delay_s is not None]
    delay = delays[0] if delays else testbed.delay_s
    conditions = [("fast", delay, calibration_sizes(FAST_SIZES, rate))]
    if delays and max(delays) > delay:
        conditions.append(("far", max(delays), calibration_sizes(FAR_SIZES, rate)))
    profiles = {}
    for name, at_delay, sizes in conditions:
        set_static(testbed, rate, at_delay if delays else None)
        started = time.monotonic()
        csv = folder / f"bench-{name}.csv"
        csv.unlink(missing_ok=True)
        result = run_benchmark(testbed.ranks, sizes, csv, CALIBRATION_COLLECTIVES, warmup=1,
                               iters=CALIBRATION_ITERS[name], testbed=testbed, timeout_s=timeout_s, quiet=True,
                               log_dir=folder / "logs" / f"bench-{name}")
        if result.returncode != 0:
            return None, [f"calibration benchmark at {format_bandwidth(rate)} exited {result.returncode}"]
        profiles[name] = fit(csv)
        profiles[name].save(folder / f"profile-{name}.json")
        _log(f"calibration at {format_bandwidth(rate)}, one-way delay {1e3 * at_delay:g} ms: "
             f"{time.monotonic() - started:.0f} s", quiet)
    calibration = TraceCalibration.fit(profiles["fast"], rate, delay, testbed.ranks, far=profiles.get("far"),
                                       far_delay_s=max(delays) if delays else None)
    (folder / "calibration.json").write_text(json.dumps(calibration.to_dict(), indent=2) + "\n", encoding="utf-8")
    return calibration, []


def _median_step(folder: Path, label: str) -> float:
    steps = pd.read_csv(folder / label / "steps.csv")
    return float(steps["step_s"].iloc[WARMUP_STEPS:].median())


def network_check(testbed: Any, trace: Any, spec: Any, workload: str, hidden: str | None, seed: int, folder: Path,
                  timeout_s: float, quiet: bool) -> dict[str, Any]:
    """The same short run (``spec``, :data:`CHECK_STEPS` steps) unshaped (the ranks on loopback) and on the
    testbed at the trace's fastest rate and first delay: how much slower the network makes a step
    (``network_check.json``). Where the ratio is small the CPU, not the network, bounds the run, and no
    network-aware decision can show."""
    rate = max(r for c in trace.changes for _, _, r in c.rates)
    delays = [c.delay_s for c in trace.changes if c.delay_s is not None]
    out: dict[str, Any] = {"strategy": spec.label, "ranks": testbed.ranks, "rate_Bps": rate}
    for name, shaped in (("unshaped", False), ("shaped", True)):
        if shaped:
            set_static(testbed, rate, delays[0] if delays else None)
        run = folder / "network-check" / name
        result = run_training(testbed.ranks, workload, [spec], CHECK_STEPS, run, ratio=spec.ratio,
                              testbed=testbed if shaped else None, timeout_s=timeout_s,
                              log_dir=folder / "logs" / f"check-{name}", quiet=True, hidden=hidden, seed=seed,
                              compute_steps=1)
        if result.returncode != 0:
            raise RuntimeError(f"the network check's {name} run exited {result.returncode} "
                               f"(logs in {folder / 'logs' / f'check-{name}'})")
        out[f"{name}_step_s"] = _median_step(run, spec.label)
    out["ratio"] = out["shaped_step_s"] / out["unshaped_step_s"]
    out["network_bound"] = out["ratio"] >= NETWORK_BOUND

    write_text_atomic(folder / "network_check.json", json.dumps(out, indent=2) + "\n")
    _log(f"network check ({spec.label}): unshaped step {1e3 * out['unshaped_step_s']:.0f} ms, at "
         f"{format_bandwidth(rate)} {1e3 * out['shaped_step_s']:.0f} ms: {out['ratio']:.1f}x", quiet)
    return out


def require_network_bound(check: dict[str, Any], trace: Any) -> None:
    """One-line errors: a setting the CPU bounds, or a phase shorter than one step at its rate.

    A phase's step is predicted from the check: the unshaped step plus the network's share of the shaped
    one, scaled by the fastest rate over the phase's (latency is left out, so it is a lower bound)."""
    if not check["network_bound"]:
        raise InputError("ranks", f"{check['ranks']} ranks at {format_bandwidth(check['rate_Bps'])}",
                         f"a setting the network bounds: measured step {1e3 * check['shaped_step_s']:.0f} ms "
                         f"shaped vs {1e3 * check['unshaped_step_s']:.0f} ms unshaped ({check['ratio']:.1f}x < "
                         f"{NETWORK_BOUND:g}x); lower --trace-max-bandwidth or --ranks, or pass --cpu-bound-ok")
    network_s = max(0.0, check["shaped_step_s"] - check["unshaped_step_s"])
    edges = [c.time_s for c in trace.changes]
    for index, change in enumerate(trace.changes[:-1]):
        _, rate, _ = trace.state_at(change.time_s)
        if not (math.isfinite(rate) and rate > 0):
            continue  # no rate set yet (the first line sets every link: load_trace checks it)
        length = edges[index + 1] - change.time_s
        step = check["unshaped_step_s"] + network_s * check["rate_Bps"] / rate
        if length < step:
            raise InputError(f"trace ({trace.name} phase {index} at {format_bandwidth(rate)})",
                             f"{length:.3g} s long", f"phases at least one step long (predicted {step:.3g} s at "
                             "that rate from the network check); lengthen --trace-duration")


def train_at_moo_ratio(testbed: Any, ddp: Path, folder: Path, workload: str, hidden: str | None, seed: int,
                       timeout_s: float, quiet: bool) -> list[str]:
    """The static scheme ``moo`` sent most bytes with, at the ratio it used for most of its steady steps,
    trained under the same trace: the comparison MOO must win (``ddp/<scheme>@<ratio>``)."""
    exchanges = pd.read_csv(ddp / "moo" / "exchanges.csv")
    exchanges = exchanges[exchanges["step"] >= WARMUP_STEPS]
    if not len(exchanges):
        return ["moo logged no steady step: no static run at its ratio"]
    ratio = float(f"{float(exchanges.groupby('step')['ratio'].first().mode().iloc[0]):.3g}")  # one MOO used
    scheme = str(exchanges.groupby("scheme")["payload_bytes"].sum().idxmax())  # the one most bytes went by
    spec = StrategySpec(f"{scheme}@{ratio:g}", scheme, ratio)
    _log(f"training {spec.label} (moo's scheme and ratio) under the trace", quiet)
    extra = folder / "ddp-moo-ratio"
    if extra.exists():
        shutil.rmtree(extra)
    result = run_training(testbed.ranks, workload, [spec], 10**6, extra, ratio=ratio, testbed=testbed,
                          timeout_s=timeout_s, log_dir=folder / "logs" / "ddp-moo-ratio", quiet=True, hidden=hidden,
                          seed=seed, trace_testbed=testbed.id, compute_steps=SOLO_STEPS,
                          profile=folder / "profile-fast.json", bandwidth_Bps=float(testbed.effective_bandwidth_Bps))
    if result.returncode != 0:
        return [f"training {spec.label} exited {result.returncode} (logs in {folder / 'logs' / 'ddp-moo-ratio'})"]
    target = ddp / spec.label
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(extra / spec.label), str(target))

    run = json.loads((ddp / "run.json").read_text())
    run["strategies"] = [*[s for s in run["strategies"] if s != spec.label], spec.label]
    write_text_atomic(ddp / "run.json", json.dumps(run, indent=2) + "\n")
    shutil.rmtree(extra)
    return []


def run_trace_validation(
    trace: str = "c1",
    out: str | Path = "results/validate-trace",
    *,
    ranks: int = DEFAULT_RANKS,
    strategies: str = DEFAULT_STRATEGIES,
    ratio: float = 0.01,
    workload: str = "mlp-digits",
    hidden: str | None = "1024,1024",
    duration: str | float = "120s",
    max_bandwidth: str | float = DEFAULT_MAX_BANDWIDTH,
    seed: int = 0,
    timeout_s: float = 1800.0,
    quiet: bool = False,
    cpu_bound_ok: bool = False,
) -> TraceValidation:
    """Calibrate, train every strategy under the trace, replay, report (see the module docstring)."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise InputError("ranks", ranks, "an integer >= 2 (one rank does not communicate)")
    specs = parse_strategies(strategies, ratio)
    if not any(spec.strategy not in ADAPTIVE for spec in specs):
        raise InputError("strategies", strategies, "at least one static scheme to compare the adaptive ones "
                         "against, e.g. topk-ag,topk-ar,flexible,moo")
    parse_hidden(hidden)
    duration_s = parse_time(duration, "trace-duration")
    if duration_s <= 0:
        raise InputError("trace-duration", duration, "a positive time such as 120s")
    parse_bandwidth(max_bandwidth, "trace-max-bandwidth")
    loaded = load_trace(trace, ranks, duration_s, max_bandwidth, lifetime_s=timeout_s)
    if not loaded.changes[0].rates or len({r for r, _, _ in loaded.changes[0].rates}) < ranks:
        raise InputError(f"bandwidth ({loaded.name} line {loaded.changes[0].line})", "a first line without "
                         "every link's rate", "a first line setting every link (e.g. on *)")
    require_privileges()
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trace.csv").write_text(loaded.csv_text, encoding="utf-8")
    failures: list[str] = []
    first_rate = min(r for _, _, r in loaded.changes[0].rates)
    first_delay = loaded.changes[0].delay_s or 0.0
    started = time.monotonic()
    static = next(spec for spec in specs if spec.strategy not in ADAPTIVE)
    with Testbed.up(ranks, first_rate, delay=first_delay, trace=loaded, trace_repeat=True) as testbed:
        check = network_check(testbed, loaded, static, workload, hidden, seed, folder, timeout_s, quiet)
        if not cpu_bound_ok:
            require_network_bound(check, loaded)
        calibration, failed = calibrate(testbed, loaded, folder, timeout_s, quiet)
        failures += failed
        if calibration is not None:
            _log(f"training {', '.join(s.label for s in specs)} for {loaded.duration_s:g} s each under "
                 f"{loaded.name}", quiet)
            ddp = folder / "ddp"
            if ddp.exists():
                shutil.rmtree(ddp)
            result = run_training(ranks, workload, specs, 10**6, ddp, ratio=ratio, testbed=testbed,
                                  timeout_s=timeout_s, log_dir=folder / "logs" / "ddp", quiet=True, hidden=hidden,
                                  seed=seed, trace_testbed=testbed.id, compute_steps=SOLO_STEPS,
                                  profile=folder / "profile-fast.json",
                                  bandwidth_Bps=float(testbed.effective_bandwidth_Bps))
            if result.returncode != 0:
                failures.append(f"training exited {result.returncode} (logs in {folder / 'logs' / 'ddp'})")
            elif any(spec.strategy == "moo" for spec in specs):
                failures += train_at_moo_ratio(testbed, ddp, folder, workload, hidden, seed, timeout_s, quiet)
        lag = read_log(testbed.id)
    with open(folder / "trace_log.jsonl", "w", encoding="utf-8") as stream:
        stream.writelines(json.dumps(entry) + "\n" for entry in lag)
    _log(f"measured in {time.monotonic() - started:.0f} s; replaying", quiet)
    if calibration is None:
        return TraceValidation(folder, pd.DataFrame(), {"failures": failures}, failures)
    return analyze_trace(folder, None, failures)  # every run in ddp/run.json, MOO's comparison included


def analyze_trace(folder: str | Path, labels: Sequence[str] | None = None,
                  failures: Sequence[str] = ()) -> TraceValidation:
    """Replay every logged run of ``folder`` and write the report (re-runnable on a finished folder)."""
    folder = Path(folder)
    try:
        calibration = TraceCalibration.from_dict(read_json_bounded(folder / "calibration.json", "folder"))
        run_info = read_json_bounded(folder / "ddp" / "run.json", "folder")
        trace_text = read_text_bounded(folder / "trace.csv", "folder", "trace CSV")
    except (ValueError, KeyError, TypeError) as error:
        raise InputError("folder", str(folder), f"a finished `validate --network-trace` folder ({error})") from None
    trace = parse_trace(trace_text, "trace.csv", int(run_info["ranks"]))
    timeline = TraceTimeline(trace, calibration)
    labels = list(labels or run_info["strategies"])
    frames = []
    for label in labels:
        if not (folder / "ddp" / label / "summary.json").exists():
            continue
        run = LoggedRun.load(folder / "ddp", label)
        for mode in ("open", "closed"):
            frames.append(replay_run(run, timeline, mode))
    replay = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    lag = _read_lag(folder / "trace_log.jsonl")
    edges = [*timeline.times.tolist(), trace.duration_s]
    lengths = {i: max(0.0, edges[i + 1] - edges[i]) for i in range(len(edges) - 1)}
    summary = summarize_trace(replay, lag, list(failures), lengths)
    summary.update(trace=trace.name, ranks=int(run_info["ranks"]), duration_s=trace.duration_s,
                   calibration=calibration.to_dict())
    check_path = folder / "network_check.json"
    check = read_json_bounded(check_path, "folder") if check_path.exists() else {}
    if check:
        summary["network_check"] = check
    if len(replay):
        summary["adaptive"] = verdict(summary, replay, folder, WARMUP_STEPS, check.get("unshaped_step_s", math.nan),
                                      lengths)

    write_csv_atomic(replay, folder / "replay.csv")
    write_text_atomic(folder / "summary.json", json.dumps(summary, indent=2, default=_jsonable) + "\n")
    write_text_atomic(folder / "errors.md", markdown(summary))
    if len(replay):
        plot_trace_validation(replay, timeline, folder / "trace_validation.png")
    return TraceValidation(folder, replay, summary, list(failures))


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)


def _read_lag(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        return [json.loads(line) for line in read_text_bounded(path, "folder", "trace log").splitlines()
                if line.strip()]
    except ValueError as error:
        raise InputError("folder", str(path), f"a trace log of JSON lines ({error})") from None


def _ratio_steps(real: pd.Series, sim: pd.Series, candidates: Sequence[float]) -> pd.Series:
    """How many candidate steps apart two ratios are."""
    grid = np.log(np.asarray(sorted(candidates), dtype=float))

    def position(value: float) -> float:
        return float(np.argmin(np.abs(grid - np.log(value)))) if value > 0 and math.isfinite(value) else math.nan

    return (real.map(position) - sim.map(position)).abs()


def summarize_trace(replay: pd.DataFrame, lag: list[dict[str, Any]], failures: list[str],
                    phase_lengths: dict[int, float] | None = None) -> dict[str, Any]:
    """Errors, agreement, lag and the strategies' comparison (the numbers errors.md shows).

    ``phase_lengths`` (seconds per trace phase) turn each strategy's mean step per phase into the steps the
    whole trace allows, measured and simulated alike: the comparison of strategies that all train for the
    trace's length."""
    out: dict[str, Any] = {"failures": failures, "strategies": {}}
    applied = [e["lag_s"] for e in lag if "lag_s" in e]
    out["lag"] = {"changes": len(applied), "median_s": float(np.median(applied)) if applied else math.nan,
                  "worst_s": float(np.max(applied)) if applied else math.nan}
    if not len(replay):
        return out
    for label, frame in replay.groupby("label", sort=False):
        entry: dict[str, Any] = {"strategy": str(frame["strategy"].iloc[0])}
        for mode, part in frame.groupby("mode"):
            steady = part[part["step"] >= WARMUP_STEPS]
            errors = steady["rel_error"].abs()
            entry[mode] = {
                "steps": int(len(part)), "median_abs_error": float(errors.median()),
                "worst_abs_error": float(errors.max()),
                "p90_abs_error": float(errors.quantile(0.9)),
                "naive_median_abs_error": float(steady["naive_rel_error"].abs().median()),
                "naive_worst_abs_error": float(steady["naive_rel_error"].abs().max()),
                "measured_total_s": float(part["measured_s"].sum()),
                "predicted_total_s": float(part["predicted_s"].sum()),
                "total_error": float(part["predicted_s"].sum() / part["measured_s"].sum() - 1.0),
                "measured_mean_step_s": float(part["measured_s"].mean()),
                "predicted_mean_step_s": float(part["predicted_s"].mean()),
                "by_phase": {int(p): {"steps": int(len(g)), "median_abs_error": float(g["rel_error"].abs().median()),
                                      "measured_mean_step_s": float(g["measured_s"].mean()),
                                      "predicted_mean_step_s": float(g["predicted_s"].mean())}
                             for p, g in steady.groupby("phase")},
            }
            if entry["strategy"] in ("flexible", "moo"):
                agree = part["buckets_agree"].sum() / max(1, part["buckets"].sum())
                entry[mode]["decision_agreement"] = float(agree)
                if entry["strategy"] == "moo":
                    apart = _ratio_steps(part["ratio_real"], part["ratio_sim"], MOOConfig().candidates)
                    entry[mode]["ratio_within_one_step"] = float((apart <= 1).mean())
        out["strategies"][label] = entry
    for entry in out["strategies"].values():
        phases = entry["open"]["by_phase"]
        if phase_lengths and all(p in phases for p in phase_lengths if phase_lengths[p] > 0):
            entry["trace_steps"] = {kind: float(sum(length / phases[p][f"{kind}_mean_step_s"]
                                                    for p, length in phase_lengths.items() if length > 0))
                                    for kind in ("measured", "predicted")}
    # the static schemes at the run's ratio (a `<scheme>@<ratio>` run is MOO's own comparison, made apart)
    static = {k: v for k, v in out["strategies"].items() if v["strategy"] not in ADAPTIVE and "@" not in k}
    for entry in out["strategies"].values():
        if entry["strategy"] in ("flexible", "moo") and static and "trace_steps" in entry and all(
                "trace_steps" in v for v in static.values()):
            # every strategy trains for the trace's whole length: the steps it allows are the comparison
            for kind, key in (("measured", "vs_static"), ("predicted", "vs_static_simulated")):
                mine = entry["trace_steps"][kind]
                entry[key] = {k: v["trace_steps"][kind] / mine - 1.0 for k, v in static.items()}  # time per step
            entry["beats_every_static"] = all(value < 0 for value in entry["vs_static"].values())
    return out


def baseline_line(summary: dict[str, Any]) -> str:
    """Where the replay beats the naive baseline's per-step median error (open clock), and where not."""
    entries = {label: e["open"] for label, e in summary.get("strategies", {}).items()
               if "naive_median_abs_error" in e.get("open", {})}
    if not entries:
        return "Naive baseline: not in this report (made before it was added; `analyze` the folder again)."
    worse = [label for label, o in entries.items() if not o["median_abs_error"] < o["naive_median_abs_error"]]
    text = (f"The replay's per-step median error is below the naive baseline's for {len(entries) - len(worse)} "
            f"of {len(entries)} strategies")
    return text + (f"; not for {', '.join(worse)}." if worse else ".")


def markdown(summary: dict[str, Any]) -> str:
    """errors.md: one table of the errors, one of the decisions, the lag, the comparison."""
    lines = [f"# Validation under a changing network: {summary.get('trace', '?')} on {summary.get('ranks', '?')} "
             "ranks", ""]
    lag = summary.get("lag", {})
    lines += [f"Trace changes applied: {lag.get('changes', 0)}; lag behind the trace median "
              f"{1e3 * lag.get('median_s', math.nan):.1f} ms, worst {1e3 * lag.get('worst_s', math.nan):.1f} ms.", ""]
    lines += ["Naive = the baseline: the solo step plus the step's logged collectives at the trace's rate when the "
              "step starts, with no latency (what one would work out by hand).", ""]
    lines += ["| strategy | steps | per-step error median (open) | worst (open) | naive median / worst | "
              "median (closed) | total-time error (closed) | decisions agree (open / closed) |",
              "|---|---|---|---|---|---|---|---|"]
    for label, entry in summary.get("strategies", {}).items():
        o, c = entry.get("open", {}), entry.get("closed", {})
        agree = "-"
        if "decision_agreement" in o:
            agree = f"{format_percent(o['decision_agreement'])} / {format_percent(c.get('decision_agreement'))}"
            if "ratio_within_one_step" in o:
                agree += f"; ratio within one step {format_percent(o['ratio_within_one_step'])}"
        lines.append(f"| {label} | {o.get('steps', 0)} | {format_percent(o.get('median_abs_error'))} | "
                     f"{format_percent(o.get('worst_abs_error'))} | "
                     f"{format_percent(o.get('naive_median_abs_error'))} / "
                     f"{format_percent(o.get('naive_worst_abs_error'))} | "
                     f"{format_percent(c.get('median_abs_error'))} | "
                     f"{format_percent(c.get('total_error'))} | {agree} |")
    lines += ["", baseline_line(summary)]
    lines += ["", f"Goals: decisions agree >= {GOAL_AGREEMENT:.0%}, per-step error <= {GOAL_MEDIAN:.0%} median and "
              f"<= {GOAL_WORST:.0%} worst (steps from {WARMUP_STEPS} on)."]
    strategies = summary.get("strategies", {})
    phases = sorted({int(k) for e in strategies.values() for k in e.get("open", {}).get("by_phase", {})})
    if phases:
        lines += ["", "Mean step time per trace phase, measured / simulated (open clock), and the per-step error "
                  "median:", "", "| phase | " + " | ".join(strategies) + " |", "|---|" + "---|" * len(strategies)]
        for phase in phases:
            cells = []
            for entry in strategies.values():
                p = entry.get("open", {}).get("by_phase", {}).get(phase) or entry.get("open", {}).get(
                    "by_phase", {}).get(str(phase))
                cells.append("-" if not p else f"{1e3 * p['measured_mean_step_s']:.0f} / "
                             f"{1e3 * p['predicted_mean_step_s']:.0f} ms ({format_percent(p['median_abs_error'])}, "
                             f"{p['steps']} steps)")
            lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    compared = [(label, e) for label, e in strategies.items() if "vs_static" in e]
    if compared:
        lines += ["", "Every strategy trains for the whole trace, so the comparison is the time per step over it "
                  "(the trace's phases divided by each one's mean step: steps the trace allows), measured on "
                  "real ranks and simulated:", ""]
        for label, entry in compared:
            real = ", ".join(f"{format_percent(v)} vs {k}" for k, v in entry["vs_static"].items())
            sim = ", ".join(f"{format_percent(v)} vs {k}" for k, v in entry["vs_static_simulated"].items())
            verdict = "faster than every static scheme" if entry["beats_every_static"] else \
                "not faster than every static scheme"
            lines.append(f"- {label}: {real} measured ({verdict}); {sim} simulated")
    if summary.get("adaptive"):
        lines += markdown_lines(summary["adaptive"])
    if summary.get("failures"):
        lines += ["", "Failures:", *[f"- {f}" for f in summary["failures"]]]
    return "\n".join(lines) + "\n"


#: The schemes a step may use, in the tool's colours (:data:`costmodel.plotting.SCHEME_COLOURS`).
SCHEME_COLORS = {s: SCHEME_COLOURS[s] for s in ("topk-ag", "topk-ar", "dense")}
SLOW_LABEL = "slower than the fastest rate"  #: the shaded phases
#: A step whose buckets used different schemes (``topk-ar+topk-ag``), drawn in a colour of its own.
MIXED = "mixed"
MIXED_COLOUR = "#e377c2"  # not a scheme's colour (costmodel.plotting.SCHEME_COLOURS)
SCHEME_LABELS = {MIXED: "both (buckets differ)"}


def _scheme_key(scheme: str) -> str:
    return MIXED if "+" in scheme else scheme


def _scheme_colour(scheme: str) -> str:
    key = _scheme_key(str(scheme))
    return MIXED_COLOUR if key == MIXED else SCHEME_COLORS.get(key, "#444444")


def plot_trace_validation(replay: pd.DataFrame, timeline: Any, path: Path) -> None:
    """Measured and simulated step times over the trace, the trace shaded, the scheme of every step."""
    use_file_backend()
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    labels = list(dict.fromkeys(replay["label"]))
    fig, axes = plt.subplots(len(labels) + 1, 1, figsize=(10, 2.2 * (len(labels) + 1)), sharex=True,
                             constrained_layout=True)
    end = float(replay["trace_s"].max())
    edges = [*timeline.times.tolist(), max(end, float(timeline.times[-1]))]
    top = axes[0]
    top.step(edges[:-1] + [edges[-1]], [*(timeline.rates * 8e-6).tolist(), float(timeline.rates[-1] * 8e-6)],
             where="post", color="k")
    top.set_ylabel("rate (Mbit/s)")
    twin = top.twinx()
    twin.step(edges[:-1] + [edges[-1]], [*(timeline.delays * 1e3).tolist(), float(timeline.delays[-1] * 1e3)],
              where="post", color="tab:red", linestyle="--")
    twin.set_ylabel("one-way delay (ms)", color="tab:red")
    top.set_title("trace")
    slow = timeline.rates < timeline.rates.max()
    # one shaded artist per panel, phases of no width left out: a phase the run ended before (or at) drew an
    # invisible span that the figure checks rightly called hidden
    spans = [(edges[i], edges[i + 1] - edges[i]) for i in range(len(slow)) if slow[i] and edges[i + 1] > edges[i]]
    for ax, label in zip(axes[1:], labels, strict=True):
        if spans:
            ax.broken_barh(spans, (0, 1), transform=ax.get_xaxis_transform(), color="0.9", zorder=0,
                           label=SLOW_LABEL)
        run = replay[(replay["label"] == label) & (replay["mode"] == "open")]
        closed = replay[(replay["label"] == label) & (replay["mode"] == "closed")]
        colors = [_scheme_colour(s) for s in run["scheme_real"]]
        # measured dots under the simulated crosses: where the model is right the cross sits on its dot and
        # both still show (a cross is thin lines); the closed clock's line between them
        ax.scatter(run["trace_s"], run["measured_s"], s=9, c=colors, label="measured (real scheme)", zorder=2)
        sim_colors = [_scheme_colour(s) for s in run["scheme_sim"]]
        ax.scatter(run["trace_s"], run["predicted_s"], s=10, marker="x", c=sim_colors, linewidths=0.6,
                   label="simulated (its scheme)", zorder=4)
        ax.plot(closed["sim_start_s"], closed["predicted_s"], color="k", linewidth=0.8, alpha=0.7, zorder=3,
                label="simulated, closed clock")
        ax.set_yscale("log")
        readable_log_axis(ax, "y")
        ax.set_ylabel("step (s)")
        ax.set_title(label)
    axes[-1].set_xlabel("time in the trace (s)")
    used = {_scheme_key(v) for v in pd.concat([replay["scheme_real"], replay["scheme_sim"]]).astype(str)}
    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=SCHEME_LABELS.get(k, k))
               for k, c in {**SCHEME_COLORS, MIXED: MIXED_COLOUR}.items() if k in used]
    handles += [Line2D([], [], marker="o", linestyle="", color="0.3", label="measured"),
                Line2D([], [], marker="x", linestyle="", color="0.3", label="simulated (open clock)"),
                Line2D([], [], color="k", linewidth=0.6, label="simulated (closed clock)")]
    if spans:
        handles.append(Patch(facecolor="0.9", edgecolor="none", label=SLOW_LABEL))
    # above the panels, never over a step: the slow phases' steps reach the top of their axes
    fig.legend(handles=handles, fontsize=8, ncol=min(len(handles), 5), loc="outside upper center")
    for ax in axes:
        ax.tick_params(labelbottom=True)

    save_figure_atomic(fig, path)  # atomically; FLEXCOMM_FIGURE_DPI draws the docs' copy


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """What the CLI prints at the end."""
    lines = []
    for label, entry in summary.get("strategies", {}).items():
        o, c = entry.get("open", {}), entry.get("closed", {})
        text = (f"{label:<10} {o.get('steps', 0):>5} steps  per-step error median "
                f"{format_percent(o.get('median_abs_error'))} worst {format_percent(o.get('worst_abs_error'))}  "
                f"total {format_percent(c.get('total_error'))}")
        if "naive_median_abs_error" in o:
            text += f"  (naive: median {format_percent(o['naive_median_abs_error'])})"
        if "decision_agreement" in o:
            text += f"  decisions agree {format_percent(o['decision_agreement'])}"
        if "ratio_within_one_step" in o:
            text += f"  ratio within one step {format_percent(o['ratio_within_one_step'])}"
        lines.append(text)
    lines.append(baseline_line(summary))
    lag = summary.get("lag", {})
    lines.append(f"trace lag: median {1e3 * lag.get('median_s', math.nan):.1f} ms, "
                 f"worst {1e3 * lag.get('worst_s', math.nan):.1f} ms over {lag.get('changes', 0)} changes")
    return lines
