"""Replaying a run measured under a network trace: the same steps, priced and decided in simulation.

Why: the claim flexcomm makes is that a decision taken in simulation holds on real ranks when the network
changes. A traced testbed run (:mod:`real_backend.trace_supervisor`) logs every step (start in the trace,
measured time, trace phase) and every bucket exchange (size, scheme, ratio, the collectives sent). This
module replays that log on the same trace with a calibration and no measured time:

* **pricing** (:class:`TraceCalibration`, :class:`TraceTimeline`): each collective costs
  ``alpha + s (d - d_cal)`` then ``n w`` bytes through the busiest link at the rate in force: ``alpha`` and
  ``w`` (bytes on the busiest link per message byte, TCP goodput included) fitted per (collective, algorithm)
  on a static benchmark at the trace's fastest rate, ``s`` (latency per second of one-way delay) on one more
  at its largest delay. Expect ``s`` near 2 per round of the algorithm: in gloo's transport a send waits for
  the receiver's ready-to-receive notice (``gloo/transport/tcp/pair.cc``: "sends cannot execute until the
  remote side is ready to receive"), so each round pays two one-way delays; that is also the slope used
  when the trace never changes the delay. The bytes first spend the tbf bucket's tokens (refilled while the
  link is idle), then drain at the trace's rate as it changes, so a step that straddles a change is priced
  across it.
* **decisions**: ``flexible`` and ``moo`` are replayed with the same classes the hooks run
  (:class:`compression.flexible.FlexibleCompressor`, :class:`compression.moo.RatioController`), fed with
  the simulated times of the collectives they choose (folded in as late as the hooks' timing agreement
  folds the measured ones), on the run's own bucket sizes. The compression gains MOO optimises against
  are the run's measured ones (probes and per-step gains from the log): the simulator predicts time, not
  gradients.
* **two clocks**: ``open`` starts every simulated step where the real one started in the trace (the
  per-step error of the model given the network state); ``closed`` starts each where the simulated
  previous one ended (plus the real gap between steps), so errors accumulate as they would in a
  prediction made before the run (the total-time error).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.compression.moo import MOOConfig, RatioController
from flexcomm.costmodel.bounded_stream import read_csv_bounded, read_json_bounded
from flexcomm.costmodel.collectives import formula
from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend.ddp_train import build_cost_model, run_profile_path
from flexcomm.real_backend.testbed import burst_bytes, burst_rate_for
from flexcomm.real_backend.validate import _coefficients

#: One-way delays each step of a gloo collective waits (receiver's ready notice, then the data).
RENDEZVOUS_DELAYS = 2.0
#: What gloo runs for a label the hooks record (as in :data:`real_backend.validate.IMPLEMENTED_AS`).
GLOO_RUNS = {("broadcast", "binomial"): ("broadcast", "binomial-async"),
             ("reduce-scatter", "ring"): ("allreduce", "ring")}
MODES = ("open", "closed")


# --- pricing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CollectiveTiming:
    """One (collective, algorithm) on this testbed: ``latency(d) + n * wire / R`` through the tbf bucket."""

    collective: str
    algorithm: str
    alpha_s: float  #: whole latency term at the calibration delay
    delay_slope: float  #: seconds of latency per second of one-way delay (gloo: ~2 per round, see module)
    wire_per_byte: float  #: bytes through the busiest link per message byte (TCP goodput included)

    def latency_s(self, delay_s: float, delay_cal_s: float) -> float:
        return max(0.0, self.alpha_s + self.delay_slope * (delay_s - delay_cal_s))

    def seconds(self, nbytes: float, rate_Bps: float, delay_s: float, delay_cal_s: float) -> float:
        """Static time with an empty bucket (what a long benchmark of this size measures)."""
        return self.latency_s(delay_s, delay_cal_s) + nbytes * self.wire_per_byte / rate_Bps


def latency_rounds(collective: str, algorithm: str, ranks: int) -> float:
    """Latency coefficient of what gloo runs for this label (steps of one link latency)."""
    runs = GLOO_RUNS.get((collective, algorithm), (collective, algorithm))
    return float(formula(*runs)(1.0, float(ranks)).alpha)


def _totals(item: Any, ranks: int) -> tuple[float, float]:
    """A profile fit (per link step and per link byte, in the label's formula) as (latency s, s per byte)."""
    a, b = _coefficients(item.collective, item.algorithm, 1.0, ranks)
    return a * item.alpha_s, b * item.beta_s_per_byte


@dataclass
class TraceCalibration:
    """Per-collective timings fitted on static benchmarks: the trace's fastest rate at its first delay and
    (when the trace changes the delay) at its largest delay."""

    timings: dict[tuple[str, str], CollectiveTiming]
    delay_cal_s: float
    rate_cal_Bps: float

    @classmethod
    def fit(cls, fast: Any, fast_rate_Bps: float, delay_s: float, ranks: int, far: Any = None,
            far_delay_s: float | None = None) -> TraceCalibration:
        """``fast``/``far``: calibration profiles (:class:`costmodel.calibration.CalibrationProfile`) of
        benchmarks at ``fast_rate_Bps`` and one-way delay ``delay_s`` / ``far_delay_s``.

        Why only the fastest rate: its bucket (4 ms of traffic) is negligible beside the megabyte messages
        that fix the per-byte term, which then scales as 1/R (a two-rate fit here measured no host share);
        at the slowest rate the tbf bucket (64 KiB, 65 ms of traffic at 8 Mbit/s) lets the benchmark's
        small messages through unshaped and biases a straight-line fit, so the bucket is modelled in the
        replay (:class:`TraceTimeline`) instead of fitted. The latency's slope in the delay is what changes
        between the two delays; without ``far`` it is gloo's rendezvous (2 one-way delays per round)."""
        if not fast_rate_Bps > 0:
            raise InputError("rate", fast_rate_Bps, "a positive calibration rate in bytes/s")
        timings = {}
        for item in fast.fits:
            alpha, beta = _totals(item, ranks)
            slope = RENDEZVOUS_DELAYS * latency_rounds(item.collective, item.algorithm, ranks)
            distant = far.get(item.collective, item.algorithm, item.link_class, strict=True) if far else None
            if distant is not None and far_delay_s is not None and far_delay_s > delay_s:
                slope = max(0.0, (_totals(distant, ranks)[0] - alpha) / (far_delay_s - delay_s))
            timings[(item.collective, item.algorithm)] = CollectiveTiming(
                item.collective, item.algorithm, alpha, slope, beta * fast_rate_Bps)
        if not timings:
            raise InputError("calibration", "no fits", "a benchmark with at least one collective")
        return cls(timings, float(delay_s), float(fast_rate_Bps))

    def timing(self, collective: str, algorithm: str) -> CollectiveTiming:
        found = self.timings.get((collective, algorithm))
        if found is None:
            known = ", ".join("/".join(k) for k in sorted(self.timings))
            raise InputError("collective", f"{collective}/{algorithm}", f"one the calibration measured ({known})")
        return found

    def to_dict(self) -> dict[str, Any]:
        return {"delay_cal_s": self.delay_cal_s, "rate_cal_Bps": self.rate_cal_Bps,
                "timings": [dataclasses.asdict(t) for t in self.timings.values()]}

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> TraceCalibration:
        timings = {(t["collective"], t["algorithm"]): CollectiveTiming(**t) for t in document["timings"]}
        return cls(timings, float(document["delay_cal_s"]), float(document["rate_cal_Bps"]))


class TraceTimeline:
    """The trace's slowest rate and delay over time (piecewise constant), and collectives priced on it.

    The links are tbf-shaped, so bytes first spend the bucket's tokens (:func:`real_backend.testbed.burst_bytes`
    at the rate in force), which refill at the rate while the link is idle: at 200 Mbit/s the bucket is 4 ms
    of traffic, at 8 Mbit/s 65 ms, as much as a Top-k exchange there sends. :meth:`reset` empties the state
    (a new run).
    """

    def __init__(self, trace: Any, calibration: TraceCalibration, bucket: bool = True) -> None:
        times, rates, delays = [], [], []
        rate, delay = math.nan, calibration.delay_cal_s
        for change in trace.changes:
            if change.rates:
                rate = min(r for _, _, r in change.rates)
            if change.delay_s is not None:
                delay = change.delay_s
            if times and change.time_s == times[-1]:
                rates[-1], delays[-1] = rate, delay
            else:
                times.append(change.time_s)
                rates.append(rate)
                delays.append(delay)
        if not math.isfinite(rates[0]):
            raise InputError("trace", trace.name, "a first line that sets the bandwidth of every link")
        self.times = np.asarray(times)
        self.rates = np.asarray(rates)
        self.delays = np.asarray(delays)
        self.calibration = calibration
        self.trace = trace
        self.bucket = bucket

        self.burst_rate_Bps = burst_rate_for(float(self.rates.max()))  #: as the testbed sized its buckets
        self.reset()

    def reset(self) -> None:
        self._tokens = 0.0 if not self.bucket else self._burst(float(self.rates[0]))
        self._idle_since = -math.inf

    def _burst(self, rate_Bps: float) -> float:
        return float(burst_bytes(rate_Bps, self.burst_rate_Bps))

    def index(self, t: float) -> int:
        return max(0, int(np.searchsorted(self.times, t, side="right")) - 1)

    def at(self, t: float) -> tuple[float, float]:
        """(rate B/s, one-way delay s) at trace time ``t``."""
        i = self.index(t)
        return float(self.rates[i]), float(self.delays[i])

    def end_of(self, collective: str, algorithm: str, nbytes: float, start: float) -> float:
        """When a collective started at ``start`` ends: its latency at the delay in force, then its bytes
        (on the busiest link) spending the bucket's tokens and draining at the rate as the trace changes it."""
        timing = self.calibration.timing(collective, algorithm)
        rate, delay = self.at(start)
        if self.bucket and start > self._idle_since:  # the bucket refilled while the link was idle
            self._tokens = min(self._burst(rate), self._tokens + rate * (start - self._idle_since))
        t = start + timing.latency_s(delay, self.calibration.delay_cal_s)
        work = nbytes * timing.wire_per_byte
        if self.bucket:
            free = min(self._tokens, work)
            self._tokens -= free
            work -= free
        i = self.index(t)
        while True:
            rate = float(self.rates[i])
            boundary = float(self.times[i + 1]) if i + 1 < len(self.times) else math.inf
            if work <= rate * (boundary - t):
                end = t + work / rate
                break
            work -= rate * (boundary - t)
            t, i = boundary, i + 1
        self._idle_since = max(self._idle_since, end)
        return end


# --- decisions -----------------------------------------------------------------------------------------


class SchemeRecords:
    """The collectives a scheme issues for (numel, ratio) on N ranks, from one emulated exchange (cached).

    Sizes depend only on those three (Top-k sends k values and indices whatever the gradient holds), so
    one exchange of zeros through the compressor itself gives exactly what a real exchange sends."""

    def __init__(self, world: int, owner: str = "star") -> None:
        from flexcomm.compression.comm import GLOO_HINTS, LocalCommunicator

        self.world = world
        self.owner = owner
        self.comm = LocalCommunicator(world, algorithms=GLOO_HINTS)
        self._cache: dict[tuple[str, int, float], Any] = {}

    def stats(self, scheme: str, numel: int, ratio: float | None) -> Any:
        import torch

        from flexcomm.compression import make_compressor

        key = (scheme, int(numel), float(ratio or 1.0))
        if key not in self._cache:
            options = {"owner": self.owner} if scheme == "topk-ar" else {}
            comp = make_compressor(scheme, ratio if scheme != "dense" else None, **options)
            grads = [torch.zeros(int(numel)) for _ in range(self.world)]
            self._cache[key] = comp.exchange(grads, self.comm).stats
        return self._cache[key]


class DecisionReplay:
    """``flexible`` (and ``moo``'s scheme choice) on simulated times, mirroring the hook's timing agreement."""

    def __init__(self, ratio: float, prior: Any, world: int, in_flight: int) -> None:
        from flexcomm.compression.comm import GLOO_HINTS, LocalCommunicator
        from flexcomm.compression.flexible import FlexibleCompressor

        self.comp = FlexibleCompressor(ratio, cost_model=prior)
        self.comm = LocalCommunicator(world, algorithms=GLOO_HINTS)
        self.records = SchemeRecords(world)
        self.in_flight = in_flight
        self.exchanges = 0
        self.pending: deque[list[tuple[Any, list[float]]]] = deque()  #: one agreement per iteration
        self.unagreed: list[tuple[Any, list[float]]] = []

    def choose(self, step: int, key: int, numel: int) -> tuple[str, Any]:
        """The scheme for this bucket and the stats (collectives) it sends."""
        from flexcomm.compression.comm import CollectiveRecord

        self.exchanges += 1
        chosen, entry = self.comp.choose(numel, self.comm, key)
        stats = dataclasses.replace(self.records.stats(chosen, numel, self.comp.ratio), step=step, key=key)
        probed = self.comp.should_probe(numel, self.comm, chosen)
        if probed:
            assert self.comp.estimator is not None
            self.comp.estimator.probe_sent()
            probe = CollectiveRecord("allgather", self.comm.algorithms["allgather"], 4, "float32", "control", 0.0)
            stats = dataclasses.replace(stats, overhead=stats.overhead + (probe,))
        self.comp.decisions.append({"step": step, **entry, "latency_probe": probed})
        return chosen, stats

    def observe(self, stats: Any, seconds: Sequence[float]) -> None:
        """An exchange's simulated times, agreed (as the hook does) at the end of its iteration."""
        self.unagreed.append((stats, list(seconds)))

    def end_iteration(self) -> None:
        """The hook's one agreement per iteration, started now; then its housekeeping: every agreement but
        the ``in_flight`` newest folded in (one refit each), as :meth:`FlexibleCompressor.settle` does."""
        self.pending.append(self.unagreed)
        self.unagreed = []
        while len(self.pending) > self.in_flight:
            assert self.comp.estimator is not None
            with self.comp.estimator.deferred():
                for stats, seconds in self.pending.popleft():
                    self.comp.observe(stats, seconds)


class MOOReplay:
    """The ratio controller as the hook runs it (:func:`real_backend.hooks._moo_end_iteration` and
    :func:`real_backend.hooks._moo_housekeeping`), on the run's measured gains and probe costs and the
    replay's estimate of the network: a probe's gains are fitted and optimised after its iteration, the
    chosen ratio is broadcast after the next one and used from the one after; nothing blocks a step."""

    def __init__(self, config: Any, probes: pd.DataFrame | None, probe_costs: dict[int, float] | None = None) -> None:
        self.controller = RatioController(config)
        self.probing, self.reason = True, "initial"
        self.probes = probes if probes is not None and len(probes) else None
        self.probe_costs = probe_costs or {}
        self.probe_cost_s = 0.0
        self.proposed: tuple[float, str] | None = None

    def _gains(self, step: int) -> tuple[list[float], list[float]]:
        if self.probes is None:
            raise InputError("moo_probes.csv", "missing", "the MOO run's probed gains (a run logged by train-ddp)")
        steps = sorted(self.probes["step"].unique())
        chosen = max((s for s in steps if s <= step), default=steps[0])
        rows = self.probes[self.probes["step"] == chosen]
        return rows["c"].tolist(), rows["gain_measured"].tolist()

    def end_step(self, step: int, decisions: DecisionReplay, numels: Sequence[int], gain: float) -> str:
        """After a step: the ratio event it completes ("" if none)."""
        from flexcomm.real_backend.hooks import moo_time_fn

        comp, ctl = decisions.comp, self.controller
        event = ""
        broadcast, self.proposed = self.proposed, None  # in order: the last proposal goes out now
        probed, self.probing = self.probing, False
        if broadcast is not None:  # housekeeping: the broadcast ratio applies from the next step
            comp.set_ratio(broadcast[0])
            event = broadcast[1]
        time_fn = moo_time_fn(comp, decisions.comm, numels, decisions.comm.world_size)
        if probed:
            ratios, gains = self._gains(step)
            ctl.fit_gains(step, ratios, gains)
            self.probe_cost_s = self.probe_costs.get(step, self.probe_cost_s)
            self._propose(step, self.reason or "initial", time_fn, comp)
            return event
        if math.isfinite(gain):
            ctl.observe_gain(gain)
        reason = ctl.due(step, comp.estimator)
        if reason is None:
            return event
        if not ctl.worth(reason, time_fn, self.probe_cost_s):
            ctl.skip(step, reason, comp.estimator)
            return event
        if ctl.needs_probe(reason):
            self.probing, self.reason = True, reason
        else:
            self._propose(step, reason, time_fn, comp)
        return event

    def _propose(self, step: int, reason: str, time_fn: Any, comp: Any) -> None:
        front = self.controller.optimize(step, reason, time_fn, estimator=comp.estimator)
        self.proposed = (front.ratio, f"{reason}->{front.ratio:.4g}")


# --- one run ---------------------------------------------------------------------------------------------


@dataclass
class LoggedRun:
    """What a traced ``train-ddp`` run left in ``OUT/<label>/`` (and ``OUT/run.json``)."""

    label: str
    strategy: str
    ratio: float | None
    world: int
    solo_s: float
    steps: pd.DataFrame
    exchanges: pd.DataFrame
    probes: pd.DataFrame | None
    run: dict[str, Any]
    folder: Path = Path(".")  #: where ``run.json`` is: a relative ``profile`` is read from here

    @classmethod
    def load(cls, folder: str | Path, label: str) -> LoggedRun:
        folder = Path(folder)
        summary = read_json_bounded(folder / label / "summary.json", "run", "train-ddp summary")
        run = read_json_bounded(folder / "run.json", "run", "train-ddp run.json")
        steps = read_csv_bounded(folder / label / "steps.csv", "run", "train-ddp steps.csv")
        exchanges = read_csv_bounded(folder / label / "exchanges.csv", "run", "train-ddp exchanges.csv")
        probes_path = folder / label / "moo_probes.csv"
        probes = read_csv_bounded(probes_path, "run", "MOO probes CSV") if probes_path.exists() else None
        try:
            return cls(label, summary["strategy"], summary.get("ratio"), int(summary["ranks"]),
                       float(summary["solo_step_s"]), steps, exchanges, probes, run, folder)
        except (KeyError, TypeError, ValueError) as error:
            raise InputError("run", str(folder / label), f"a finished train-ddp run (summary.json: {error!r})") \
                from None

    def prior(self) -> Any:
        """The cost model the run's hooks took their prior from (the same arguments, so the same numbers)."""
        return build_cost_model(self.world, self.run.get("latency_s"), self.run.get("bandwidth_Bps"),
                                run_profile_path(self.folder, self.run.get("profile")))


def _records_of(text: str) -> list[tuple[str, str, int, str]]:
    from flexcomm.real_backend.hooks import parse_records

    return [(c, a, n, "") for c, a, n in parse_records(text)]


def _nominal_seconds(buckets: pd.DataFrame | None, world: int, rate_Bps: float) -> float:
    """The naive baseline's communication: the step's logged collectives, their bytes at the trace's rate when
    the step starts, no latency and no change of rate during the step (what a user would work out by hand)."""
    from flexcomm.real_backend.hooks import nominal_records_seconds, parse_records

    if buckets is None:
        return 0.0
    return nominal_records_seconds([r for text in buckets["collectives"] for r in parse_records(text)], world,
                                   rate_Bps)


def replay_run(run: LoggedRun, timeline: TraceTimeline, mode: str = "open", in_flight: int | None = None,
               moo_config: Any = None) -> pd.DataFrame:
    """One row per logged step: measured and simulated step time, and the scheme and ratio each chose."""
    from flexcomm.compression.network_estimate import timed_records
    from flexcomm.real_backend.hooks import AGREEMENTS_IN_FLIGHT

    if mode not in MODES:
        raise InputError("mode", mode, "open or closed")
    adaptive = run.strategy in ("flexible", "moo")
    decisions = None
    moo = None
    if adaptive:

        ratio = run.ratio if run.ratio is not None else max((moo_config or MOOConfig()).candidates)
        decisions = DecisionReplay(float(ratio), run.prior(), run.world,
                                   AGREEMENTS_IN_FLIGHT if in_flight is None else in_flight)
        if run.strategy == "moo":
            reeval = run.run.get("moo_reeval")
            costs = ({int(k): float(v) for k, v in run.probes.groupby("step")["probe_cost_s"].first().items()}
                     if run.probes is not None and "probe_cost_s" in run.probes else {})
            moo = MOOReplay(moo_config or MOOConfig(**({"reeval_every": reeval} if reeval else {})), run.probes, costs)
    timeline.reset()
    by_step = {int(s): g for s, g in run.exchanges.groupby("step", sort=True)}
    rows = []
    clock = math.nan
    steps = run.steps.sort_values("step").reset_index(drop=True)
    for i, real in steps.iterrows():
        step = int(real["step"])
        start = float(real["trace_s"]) if mode == "open" or i == 0 else clock
        t = start
        real_schemes, sim_schemes, numels = [], [], []
        sim_ratio = math.nan
        for _, bucket in by_step.get(step, pd.DataFrame()).iterrows():
            real_schemes.append(str(bucket["scheme"]))
            numels.append(int(bucket["numel"]))
            if decisions is not None:
                scheme, stats = decisions.choose(step, int(bucket["bucket"]), int(bucket["numel"]))
                sim_schemes.append(scheme)
                sim_ratio = float(decisions.comp.ratio or math.nan)
                seconds = []
                for record in timed_records(stats):
                    end = timeline.end_of(record.collective, record.algorithm, record.nbytes, t)
                    seconds.append(end - t)
                    t = end
                decisions.observe(stats, seconds)
            else:
                sim_schemes.append(str(bucket["scheme"]))
                for collective, algorithm, nbytes, _ in _records_of(bucket["collectives"]):
                    t = timeline.end_of(collective, algorithm, nbytes, t)
        event = ""
        if decisions is not None:
            decisions.end_iteration()
        if moo is not None and decisions is not None:
            event = moo.end_step(step, decisions, numels, float(real.get("gain", math.nan)))
        predicted = run.solo_s + (t - start)
        rate, delay = timeline.at(float(real["trace_s"]))
        naive = run.solo_s + _nominal_seconds(by_step.get(step), run.world, rate)
        gap = 0.0
        if i + 1 < len(steps):
            gap = max(0.0, float(steps.loc[i + 1, "trace_s"]) - float(real["trace_s"]) - float(real["step_s"]))
        clock = start + predicted + gap
        rows.append({
            "label": run.label, "strategy": run.strategy, "mode": mode, "step": step,
            "trace_s": float(real["trace_s"]), "sim_start_s": start, "phase": int(real["trace_phase"]),
            "rate_Bps": rate, "delay_s": delay, "measured_s": float(real["step_s"]), "predicted_s": predicted,
            "rel_error": predicted / float(real["step_s"]) - 1.0,
            "naive_s": naive, "naive_rel_error": naive / float(real["step_s"]) - 1.0,
            "scheme_real": "+".join(dict.fromkeys(real_schemes)), "scheme_sim": "+".join(dict.fromkeys(sim_schemes)),
            "buckets_agree": sum(a == b for a, b in zip(real_schemes, sim_schemes, strict=False)),
            "buckets": len(real_schemes), "ratio_real": float(real["ratio"]) if pd.notna(real["ratio"]) else math.nan,
            "ratio_sim": sim_ratio if adaptive else (float(real["ratio"]) if pd.notna(real["ratio"]) else math.nan),
            "event_sim": event,
        })
    return pd.DataFrame(rows)
