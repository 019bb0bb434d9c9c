"""Sim-vs-real validation: measure collectives and DDP steps, predict every point, tabulate the errors.

``flexcomm validate`` (:func:`run_validation`) runs, per *condition* (loopback, and with ``--testbed`` a
shaped testbed at each bandwidth, built and always removed):

1. the collective benchmark (:func:`real_backend.bench.run_benchmark`) into ``COND/bench.csv``;
2. a calibration on all of it (:func:`costmodel.calibration.fit`, ``COND/profile.json``), which prices the
   DDP runs' communication;
3. a short real DDP training with each strategy (:func:`real_backend.ddp_train.run_training`) into
   ``COND/ddp/``, whose hook logs say exactly what was sent.

Then :func:`analyze` predicts every measured point three ways and writes ``errors.csv``, ``errors.md``,
``predicted_vs_measured.png`` and ``summary.json``:

* **model** (calibrated cost model): alpha and beta fitted per (collective, algorithm) **leaving the
  predicted size out** (leave-one-size-out), so no error is measured on a point the fit saw;
* **link** (uncalibrated link parameters): beta = 1 / (0.956 x tc rate), the brief's TCP goodput, with the
  calibrated latency of that collective (leave-one-size-out too); on loopback there is no link rate, so
  the link is the ring allreduce's own fit (leave-one-size-out): "one link explains every collective";
* **sim**: :func:`sim.collectives.simulate_collective` on a cluster of N nodes x 1 device with that link
  (:func:`real_backend.ddp_train.link_cluster`).

The link and sim predictions price what gloo **implements** (:data:`IMPLEMENTED_AS`): its reduce-scatter
is a full ring allreduce that keeps one chunk, so it is priced as ``allreduce/ring``; its broadcast feeds all
of a rank's children at once (``broadcast/binomial-async``); the calibrated model fits each label as
measured and needs no such mapping.

DDP steps (collective ``ddp-step``, algorithm = strategy): measured = median step time (max over ranks,
warm-up steps left out); predicted = the **solo step** (the same model, DDP and hook on a process group of
each rank alone, all ranks at once: compute plus everything the hook does locally, with no bytes between
ranks; ``compute_s`` is the step without DDP, ``codec_s`` = solo - compute) + the communication the hook
*logged*, priced by the calibrated model (full fit of this condition's benchmark: the DDP points were never
fitted) or simulated.
``builtin`` (DDP's own allreduce) logs nothing: its communication is priced as one ring allreduce of the
gradient, and it overlaps backward, so it is predicted too slow by up to the compute time.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic, write_csv_atomic, write_text_atomic
from flexcomm.costmodel.bounded_stream import read_csv_bounded, read_json_bounded
from flexcomm.costmodel.calibration import CalibrationProfile, fit, load_measurements
from flexcomm.costmodel.collectives import formula, predict
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.plotting import readable_log_axis, use_file_backend
from flexcomm.costmodel.units import format_bandwidth, format_size, format_time, parse_bandwidth
from flexcomm.real_backend.bench import parse_collectives, parse_sizes, run_benchmark
from flexcomm.real_backend.ddp_train import build_cost_model, link_cluster, parse_hidden, parse_strategies, run_training
from flexcomm.real_backend.options import VALIDATE_SIZES, VALIDATE_STRATEGIES
from flexcomm.real_backend.testbed import GOODPUT_FACTOR, Testbed, burst_bytes, burst_rate_for, require_privileges
from flexcomm.sim.collectives import simulate_collective

DEFAULT_BANDWIDTHS = ("100Mbit/s", "1Gbit/s")
DEFAULT_SIZES = VALIDATE_SIZES
DEFAULT_COLLECTIVES = ("allreduce", "allgather", "broadcast", "reduce-scatter")
DEFAULT_STRATEGIES = VALIDATE_STRATEGIES
#: What gloo runs for each benchmarked label (read from its sources; see :mod:`real_backend.bench`).
IMPLEMENTED_AS: dict[tuple[str, str], tuple[str, str]] = {
    ("reduce-scatter", "ring"): ("allreduce", "ring"),
    ("broadcast", "binomial"): ("broadcast", "binomial-async"),
}
#: Messages at least this large are held to the targets (median and worst relative error).
TARGET_MIN_BYTES = 2**20
TARGET_MEDIAN = 0.10
#: The calibrated model predicting a size is fitted on the other sizes within this factor of it (a single
#: alpha-beta line does not span 4 KiB, where fixed overheads and the tbf bucket rule, to 16 MiB); the
#: fit over every other size is reported beside it (``model_global``).
FIT_WINDOW = 16
TARGET_WORST = 0.25
#: On a testbed, the summary also leaves out messages below this many tbf buckets (partly unshaped).
BURST_MULTIPLE = 4
#: The predictions of every point: calibrated (window, all sizes), link parameters, simulator, and the naive
#: baseline: the collective's bytes at the testbed's nominal tc rate, no latency (what a user would type).
KINDS = ("model", "model_global", "link", "sim", "nominal")
TABLE_COLUMNS = (
    "condition", "bandwidth", "collective", "algorithm", "implemented_as", "ranks", "bytes", "reps",
    "measured_s", "predicted_model_s", "predicted_model_global_s", "predicted_link_s", "predicted_sim_s",
    "predicted_nominal_s", "rel_error_model", "rel_error_model_global", "rel_error_link", "rel_error_sim",
    "rel_error_nominal", "compute_s", "codec_s", "measured_comm_s",
    "predicted_comm_model_s", "predicted_comm_sim_s", "fit",
)


@dataclass
class Condition:
    """Where one set of measurements was taken: loopback, or a testbed link of ``rate_Bps``."""

    name: str
    rate_Bps: float | None = None

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", self.name).strip("-").lower()

    @property
    def goodput_Bps(self) -> float | None:
        return None if self.rate_Bps is None else GOODPUT_FACTOR * self.rate_Bps

    @property
    def on_testbed(self) -> bool:
        return self.rate_Bps is not None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "slug": self.slug, "rate_Bps": self.rate_Bps, "goodput_Bps": self.goodput_Bps}


@dataclass
class ValidationResult:
    """What :func:`run_validation` produced: the table, per-condition summaries and any failures."""

    out: Path
    table: pd.DataFrame
    summary: dict[str, Any]
    failures: list[str] = field(default_factory=list)


def parse_bandwidths(spec: str | Sequence[str]) -> list[float]:
    """``100Mbit/s,1Gbit/s`` -> bytes/s (validated, one-line errors)."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    rates = [parse_bandwidth(i.strip(), "bandwidths") for i in items if str(i).strip()]
    if not rates or any(r <= 0 for r in rates):
        raise InputError("bandwidths", spec, "a comma list of positive rates such as 100Mbit/s,1Gbit/s")
    return rates


# --- running ---------------------------------------------------------------------------------------


def _log(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"flexcomm validate: {message}", file=sys.stderr, flush=True)


def run_condition(condition: Condition, out: Path, *, ranks: int, sizes: str, collectives: Sequence[str],
                  warmup: int, iters: int, strategies: str, ratio: float, steps: int, workload: str,
                  hidden: str | None, ddp: bool, timeout_s: float, quiet: bool) -> list[str]:
    """Benchmark, calibrate and train under one condition; returns what failed (empty when all ran)."""
    folder = out / condition.slug
    if folder.exists():
        shutil.rmtree(folder)  # a rerun replaces the condition (the bench CSV would otherwise append)
    folder.mkdir(parents=True)
    (folder / "condition.json").write_text(json.dumps(condition.to_dict(), indent=2) + "\n", encoding="utf-8")
    failures: list[str] = []

    def body(testbed: Any) -> None:
        started = time.monotonic()
        _log(f"{condition.name}: collective benchmark ({','.join(collectives)}, {sizes}, {ranks} ranks)", quiet)
        result = run_benchmark(ranks, sizes, folder / "bench.csv", collectives, warmup, iters, testbed=testbed,
                               timeout_s=timeout_s, quiet=True, log_dir=folder / "logs" / "bench")
        if result.returncode != 0:
            failures.append(f"{condition.name}: benchmark exited {result.returncode} (logs in {folder / 'logs'})")
            return
        profile_path = None
        try:
            profile = fit(folder / "bench.csv")
            profile.save(folder / "profile.json")
            profile_path = folder / "profile.json"
        except InputError as error:
            failures.append(f"{condition.name}: calibration failed: {error}")
        _log(f"{condition.name}: benchmark {time.monotonic() - started:.0f}s", quiet)
        if not ddp:
            return
        started = time.monotonic()
        _log(f"{condition.name}: DDP training ({strategies}, {steps} steps)", quiet)
        result = run_training(ranks, workload, strategies, steps, folder / "ddp", ratio=ratio, testbed=testbed,
                              timeout_s=timeout_s, log_dir=folder / "logs" / "ddp", quiet=True, hidden=hidden,
                              profile=profile_path, bandwidth_Bps=condition.goodput_Bps)
        if result.returncode != 0:
            failures.append(f"{condition.name}: DDP training exited {result.returncode} "
                            f"(logs in {folder / 'logs' / 'ddp'})")
        _log(f"{condition.name}: DDP {time.monotonic() - started:.0f}s", quiet)

    if condition.on_testbed:

        with Testbed.up(ranks, condition.rate_Bps) as testbed:  # removed however the block ends
            body(testbed)
    else:
        body(None)
    return failures


def run_validation(
    out: str | Path = "results/validate",
    *,
    testbed: bool = False,
    bandwidths: str | Sequence[str] = DEFAULT_BANDWIDTHS,
    ranks: int = 2,
    sizes: str = DEFAULT_SIZES,
    collectives: str | Sequence[str] = DEFAULT_COLLECTIVES,
    warmup: int = 1,
    iters: int = 5,
    strategies: str = DEFAULT_STRATEGIES,
    ratio: float = 0.01,
    steps: int = 12,
    workload: str = "mlp-digits",
    hidden: str | None = "1024,1024",
    loopback: bool = True,
    ddp: bool = True,
    timeout_s: float = 1800.0,
    quiet: bool = False,
) -> ValidationResult:
    """Measure every condition, then :func:`analyze` (see the module docstring)."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise InputError("ranks", ranks, "an integer >= 2 (one rank does not communicate)")
    parse_sizes(sizes)
    names = parse_collectives(collectives)
    if ddp:
        parse_strategies(strategies, ratio)
    parse_hidden(hidden)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError("steps", steps, "an integer >= 1")
    conditions = [Condition("loopback")] if loopback else []
    if testbed:

        require_privileges()  # one-line error before anything runs
        conditions += [Condition(format_bandwidth(rate), rate) for rate in parse_bandwidths(bandwidths)]
    if not conditions:
        raise InputError("conditions", "none", "loopback and/or --testbed")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for condition in conditions:
        failures += run_condition(condition, folder, ranks=ranks, sizes=sizes, collectives=names, warmup=warmup,
                                  iters=iters, strategies=strategies, ratio=ratio, steps=steps, workload=workload,
                                  hidden=hidden, ddp=ddp, timeout_s=timeout_s, quiet=quiet)
    table, summary = analyze(folder, [c.slug for c in conditions])
    summary["failures"] = failures
    write_outputs(folder, table, summary)
    return ValidationResult(folder, table, summary, failures)


# --- predicting ------------------------------------------------------------------------------------


def _fit_params(frame: pd.DataFrame) -> tuple[float, float] | None:
    """(alpha, beta) of one (collective, algorithm) group's rows, or None when they cannot be fitted."""
    try:
        profile = fit(frame)
    except InputError:
        return None
    if len(profile.fits) != 1:
        return None
    f = profile.fits[0]
    return f.alpha_s, f.beta_s_per_byte


def _coefficients(collective: str, algorithm: str, nbytes: float, ranks: int) -> tuple[float, float]:
    coef = formula(collective, algorithm)(float(nbytes), float(ranks))
    return float(coef.alpha), float(coef.beta + coef.gamma)


class _Simulator:
    """Cached :func:`sim.collectives.simulate_collective` on a link cluster."""

    def __init__(self) -> None:
        self.cache: dict[tuple, float] = {}

    def __call__(self, collective: str, algorithm: str, nbytes: float, ranks: int, alpha: float,
                 bandwidth: float) -> float:
        if not (math.isfinite(alpha) and math.isfinite(bandwidth) and bandwidth > 0):
            return math.nan
        key = (collective, algorithm, float(nbytes), int(ranks), float(alpha), float(bandwidth))
        if key not in self.cache:
            cluster = link_cluster(int(ranks), alpha, bandwidth, name="validate")
            self.cache[key] = float(simulate_collective(cluster, collective, algorithm, float(nbytes),
                                                        int(ranks)).seconds)
        return self.cache[key]


def _rel(predicted: float, measured: float) -> float:
    if not (math.isfinite(predicted) and math.isfinite(measured)) or measured <= 0:
        return math.nan
    return (predicted - measured) / measured


def bench_rows(condition: dict[str, Any], bench: pd.DataFrame | Path, simulate: _Simulator) -> list[dict[str, Any]]:
    """Every (collective, algorithm, ranks, bytes) point: measured median and the three predictions."""
    table = load_measurements(bench)
    goodput = condition.get("goodput_Bps")
    rows: list[dict[str, Any]] = []
    ar = table[(table["collective"] == "allreduce") & (table["algorithm"] == "ring")]
    for (collective, algorithm, ranks), group in table.groupby(["collective", "algorithm", "ranks"], sort=True):
        impl = IMPLEMENTED_AS.get((collective, algorithm), (collective, algorithm))
        for nbytes, points in group.groupby("bytes", sort=True):
            measured = float(points["seconds"].median())
            others = group[group["bytes"] != nbytes]
            near = others[(others["bytes"] >= nbytes / FIT_WINDOW) & (others["bytes"] <= nbytes * FIT_WINDOW)]
            everywhere = _fit_params(others)
            local = _fit_params(near)
            how = f"leave-one-size-out, sizes within {FIT_WINDOW}x"
            if local is None:
                local, how = everywhere, "leave-one-size-out"
            if everywhere is None:  # fewer than 2 other sizes: alpha and beta need two, so fit them all
                everywhere = local = _fit_params(group)
                how = "in-sample (too few sizes to leave one out)"
            model = model_global = link = sim = nominal = math.nan
            a, b = _coefficients(collective, algorithm, nbytes, ranks)
            if condition.get("rate_Bps"):
                nominal = float(predict(impl[0], impl[1], nbytes, ranks, 0.0, float(condition["rate_Bps"])).total)
            if local is not None:
                model = a * local[0] + b * local[1]
            if everywhere is not None:
                model_global = a * everywhere[0] + b * everywhere[1]
                if goodput:  # the calibrated latency: from all other sizes (the small ones pin it down)
                    link_alpha, link_bw = everywhere[0], goodput
                else:  # loopback: the ring allreduce's own fit, without this size, is "the link"
                    same = ar[ar["ranks"] == ranks]
                    own = _fit_params(same[same["bytes"] != nbytes]) if len(same) else None
                    if own is None and len(same):
                        own = _fit_params(same)
                    link_alpha, link_bw = (own[0], 1.0 / own[1]) if own and own[1] > 0 else (math.nan, math.nan)
                if math.isfinite(link_bw):
                    link = float(predict(impl[0], impl[1], nbytes, ranks, link_alpha, link_bw).total)
                    sim = simulate(impl[0], impl[1], nbytes, ranks, link_alpha, link_bw)
            rows.append({
                "condition": condition["name"], "bandwidth": condition.get("rate_Bps"), "collective": collective,
                "algorithm": algorithm, "implemented_as": "/".join(impl), "ranks": int(ranks), "bytes": int(nbytes),
                "reps": len(points), "measured_s": measured, "predicted_model_s": model,
                "predicted_model_global_s": model_global, "predicted_link_s": link, "predicted_sim_s": sim,
                "predicted_nominal_s": nominal, "fit": how,
            })
    return rows


def _condition_link(condition: dict[str, Any], profile: Any) -> tuple[float, float]:
    """(alpha, bandwidth) of the condition's link for the DDP predictions (sim and builtin)."""
    fit_ar = profile.get("allreduce", "ring") if profile is not None else None
    alpha = fit_ar.alpha_s if fit_ar is not None else math.nan
    if condition.get("goodput_Bps"):
        return alpha, float(condition["goodput_Bps"])
    bandwidth = fit_ar.bandwidth_Bps if fit_ar is not None else math.nan
    return alpha, bandwidth


def ddp_rows(condition: dict[str, Any], folder: Path, simulate: _Simulator) -> list[dict[str, Any]]:
    """One row per strategy run under ``folder/ddp``: measured vs predicted median step time."""
    from flexcomm.real_backend.hooks import nominal_records_seconds, parse_records, predict_records

    ddp = folder / "ddp"
    if not (ddp / "run.json").is_file():
        return []
    run = read_json_bounded(ddp / "run.json", "out", "train-ddp run.json")
    profile = CalibrationProfile.load(folder / "profile.json") if (folder / "profile.json").is_file() else None
    alpha, bandwidth = _condition_link(condition, profile)
    ranks = int(run["ranks"])
    model = None
    if profile is not None and math.isfinite(alpha) and math.isfinite(bandwidth):
        model = build_cost_model(ranks, alpha, bandwidth, folder / "profile.json")
    rows = []
    for label in run["strategies"]:
        summary_path, steps_path = ddp / label / "summary.json", ddp / label / "steps.csv"
        if not (summary_path.is_file() and steps_path.is_file()):
            continue
        summary = read_json_bounded(summary_path, "out", "train-ddp summary")
        steps = read_csv_bounded(steps_path, "out", "train-ddp steps.csv", keep_default_na=True)
        steady = steps.iloc[int(summary.get("warmup_steps", 0)):] if len(steps) > summary.get("warmup_steps", 0) \
            else steps
        measured = float(steady["step_s"].median())
        compute = float(run["compute_only_s"])
        solo = summary.get("solo_step_s")
        if solo is not None and math.isfinite(float(solo)):
            local = float(solo)  # compute + the hook's local work, measured on a group of one
        else:  # no solo measurement: the compressor's own codec timings (PowerSGD's hook has none)
            local = compute + (float(steady["codec_s"].fillna(0.0).median()) if "codec_s" in steady else 0.0)
        codec = local - compute  # signed: two noisy medians on 2 cores can put solo below compute-only
        comm_model, comm_sim, comm_nominal = [], [], []
        rate = condition.get("rate_Bps")
        for text in steady["records"].fillna(""):
            records = parse_records(text)
            if not records:  # builtin: DDP's own allreduce of the whole gradient
                records = [("allreduce", "ring", int(summary["gradient_bytes"]))]
            comm_model.append(predict_records(model, records, ranks))
            comm_sim.append(sum(simulate(c, a, n, ranks, alpha, bandwidth) for c, a, n in records))
            if rate:  # the naive baseline: the logged bytes at the nominal tc rate, no latency
                comm_nominal.append(nominal_records_seconds(
                    [(*IMPLEMENTED_AS.get((c, a), (c, a)), n) for c, a, n in records], ranks, float(rate)))
        pm, ps = float(np.median(comm_model)), float(np.median(comm_sim))
        nominal = local + float(np.median(comm_nominal)) if comm_nominal else math.nan
        measured_comm = float(steady["comm_s"].median()) if steady["comm_s"].notna().any() else math.nan
        rows.append({
            "condition": condition["name"], "bandwidth": condition.get("rate_Bps"), "collective": "ddp-step",
            "algorithm": label, "implemented_as": "", "ranks": ranks,
            "bytes": int(np.nanmedian(steady["payload_bytes"])) if steady["payload_bytes"].notna().any()
            else int(summary["gradient_bytes"]),
            "reps": len(steady), "measured_s": measured, "predicted_model_s": local + pm,
            "predicted_link_s": math.nan, "predicted_sim_s": local + ps, "predicted_nominal_s": nominal,
            "compute_s": compute,
            "codec_s": codec, "measured_comm_s": measured_comm, "predicted_comm_model_s": pm,
            "predicted_comm_sim_s": ps, "fit": "full calibration of this condition's benchmark",
        })
    return rows


def analyze(out: str | Path, slugs: Sequence[str] | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The error table and its summary from a validation folder (re-runnable on old measurements)."""
    folder = Path(out)
    simulate = _Simulator()
    if slugs is None:
        slugs = sorted(p.parent.name for p in folder.glob("*/condition.json"))
    rows: list[dict[str, Any]] = []
    conditions = []
    for slug in slugs:
        cond_dir = folder / slug
        if not (cond_dir / "condition.json").is_file():
            continue
        condition = read_json_bounded(cond_dir / "condition.json", "out", "condition.json")
        conditions.append(condition)
        if (cond_dir / "bench.csv").is_file() and (cond_dir / "bench.csv").stat().st_size > 0:
            try:
                rows += bench_rows(condition, cond_dir / "bench.csv", simulate)  # read bounded, checked
            except InputError:
                pass  # an empty or half-written benchmark: reported as missing below
        rows += ddp_rows(condition, cond_dir, simulate)
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    for kind in KINDS:
        table[f"rel_error_{kind}"] = [_rel(p, m) for p, m in zip(table[f"predicted_{kind}_s"], table["measured_s"],
                                                                  strict=True)]
    return table, summarize(table, conditions)


def _stats(errors: pd.Series) -> dict[str, Any]:
    values = errors.abs().dropna()
    if values.empty:
        return {"points": 0, "median_abs": None, "worst_abs": None}
    return {"points": int(len(values)), "median_abs": float(values.median()), "worst_abs": float(values.max())}


def _meets(stats: dict[str, Any]) -> bool:
    return bool(stats["median_abs"] <= TARGET_MEDIAN and stats["worst_abs"] <= TARGET_WORST)


def summarize(table: pd.DataFrame, conditions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and worst |relative error| per condition, for collectives >= 1 MiB and for DDP steps."""
    out: dict[str, Any] = {"target": {"min_bytes": TARGET_MIN_BYTES, "median_abs": TARGET_MEDIAN,
                                      "worst_abs": TARGET_WORST}, "conditions": []}
    for condition in conditions:
        rows = table[table["condition"] == condition["name"]]
        coll = rows[(rows["collective"] != "ddp-step") & (rows["bytes"] >= TARGET_MIN_BYTES)]
        steps = rows[rows["collective"] == "ddp-step"]
        entry: dict[str, Any] = {"condition": condition["name"], "rate_Bps": condition.get("rate_Bps"),
                                 "collectives_ge_1MiB": {}, "ddp_steps": {}, "per_collective": {}}
        rate = condition.get("rate_Bps")
        beyond = coll
        if rate:

            # tc tbf lets its bucket (max(rate/250, 64 KiB); smaller on slow testbeds) through at line rate: a
            # message of a few buckets is partly unshaped, faster than any alpha-beta model of the link can be
            burst = burst_bytes(rate, burst_rate_for(rate))
            entry["tbf_burst_bytes"] = burst
            entry["beyond_burst_min_bytes"] = max(TARGET_MIN_BYTES, BURST_MULTIPLE * burst)
            beyond = coll[coll["bytes"] >= entry["beyond_burst_min_bytes"]]
            entry["collectives_beyond_burst"] = {}
        for kind in KINDS:
            stats = _stats(coll[f"rel_error_{kind}"])
            if rate and stats["points"]:
                stats["meets_target"] = _meets(stats)
            entry["collectives_ge_1MiB"][kind] = stats
            if rate:
                stats = _stats(beyond[f"rel_error_{kind}"])
                if stats["points"]:
                    stats["meets_target"] = _meets(stats)
                entry["collectives_beyond_burst"][kind] = stats
            if kind in ("model", "sim", "nominal"):
                entry["ddp_steps"][kind] = _stats(steps[f"rel_error_{kind}"])
        for collective, group in coll.groupby("collective"):
            entry["per_collective"][collective] = {k: _stats(group[f"rel_error_{k}"]) for k in KINDS}
        out["conditions"].append(entry)
    return out


# --- writing -----------------------------------------------------------------------------------------


def _pct(value: Any) -> str:
    return "" if value is None or not math.isfinite(float(value)) else f"{100 * float(value):+.1f}%"


def _abs_pct(value: Any) -> str:
    return "n/a" if value is None or not math.isfinite(float(value)) else f"{100 * float(value):.1f}%"


def _time(value: Any) -> str:
    return "" if value is None or not math.isfinite(float(value)) else format_time(float(value))


def _cells(stats: dict[str, Any], kinds: Sequence[str] = KINDS) -> str:
    return " | ".join(f"{_abs_pct(stats[k]['median_abs'])} / {_abs_pct(stats[k]['worst_abs'])}" if k in stats else ""
                      for k in kinds)


def _verdict(stats: dict[str, Any]) -> str:
    target = stats["model"].get("meets_target")
    return "" if target is None else ("model meets it" if target else "model misses it")


def markdown(table: pd.DataFrame, summary: dict[str, Any]) -> str:
    """The error table as markdown: the summary against the targets, then every point."""
    lines = ["# Sim-vs-real validation", "",
             f"Relative error = (predicted - measured) / measured. Targets on the testbed for messages >= "
             f"{format_size(TARGET_MIN_BYTES)}: median |error| <= {TARGET_MEDIAN:.0%}, worst <= {TARGET_WORST:.0%}. "
             f"model = calibrated cost model fitted on the other sizes within {FIT_WINDOW}x of the predicted one "
             "(leave-one-size-out); model (all sizes) = the same fitted on every other size; link = beta from "
             "1448/1514 x the tc rate (TCP/IP headers) with the calibrated latency (loopback: the ring allreduce's "
             "own fit); sim = the discrete-event simulator on that link; naive = the baseline, the collective's "
             "bytes at the nominal tc rate with no latency (testbed only). DDP steps: the solo step (model, DDP "
             "and hook on a group of one rank: compute + the hook's local work) + the logged communication priced "
             "by the full "
             "calibration (model) or simulated (sim).", "",
             "## Summary (median / worst |error|)", "",
             "| condition | what | points | model | model (all sizes) | link | sim | naive | target |",
             "|---|---|---|---|---|---|---|---|---|"]
    for entry in summary["conditions"]:
        name = entry["condition"]
        c = entry["collectives_ge_1MiB"]
        lines.append(f"| {name} | collectives >= 1 MiB | {c['model']['points']} | {_cells(c)} | {_verdict(c)} |")
        if "collectives_beyond_burst" in entry:
            b = entry["collectives_beyond_burst"]
            lines.append(f"| {name} | collectives >= {format_size(entry['beyond_burst_min_bytes'])} (>= "
                         f"{BURST_MULTIPLE} tbf buckets of {format_size(entry['tbf_burst_bytes'])}) | "
                         f"{b['model']['points']} | {_cells(b)} | {_verdict(b)} |")
        for collective, stats in entry["per_collective"].items():
            lines.append(f"| {name} | {collective} >= 1 MiB | {stats['model']['points']} | {_cells(stats)} | |")
        d = entry["ddp_steps"]
        lines.append(f"| {name} | DDP steps | {d['model']['points']} | {_cells(d)} | |")
    lines += ["", "Against the naive baseline (median |error|, model vs naive):", "",
              *(f"- {line}" for line in baseline_lines(summary))]
    lines += ["", "## Every point", "",
              "| condition | collective | algorithm | ranks | bytes | measured (median) | model | link | sim | naive | "
              "err model | err model (all sizes) | err link | err sim | err naive |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table.itertuples(index=False):
        algorithm = row.algorithm if row.implemented_as in ("", row.collective + "/" + row.algorithm) else (
            f"{row.algorithm} (runs {row.implemented_as})")
        lines.append(f"| {row.condition} | {row.collective} | {algorithm} | {row.ranks} | {format_size(row.bytes)} | "
                     f"{_time(row.measured_s)} | {_time(row.predicted_model_s)} | {_time(row.predicted_link_s)} | "
                     f"{_time(row.predicted_sim_s)} | {_time(row.predicted_nominal_s)} | "
                     f"{_pct(row.rel_error_model)} | {_pct(row.rel_error_model_global)} | "
                     f"{_pct(row.rel_error_link)} | {_pct(row.rel_error_sim)} | {_pct(row.rel_error_nominal)} |")
    ddp = table[table["collective"] == "ddp-step"]
    if len(ddp):
        lines += ["", "## DDP steps: where the time goes", "",
                  "| condition | strategy | bytes/step | measured step | compute-only | hook's local work | "
                  "measured comm | predicted comm (model) | predicted comm (sim) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in ddp.itertuples(index=False):
            lines.append(f"| {row.condition} | {row.algorithm} | {format_size(row.bytes)} | {_time(row.measured_s)} | "
                         f"{_time(row.compute_s)} | {_time(row.codec_s)} | {_time(row.measured_comm_s)} | "
                         f"{_time(row.predicted_comm_model_s)} | {_time(row.predicted_comm_sim_s)} |")
    if summary.get("failures"):
        lines += ["", "## Failures", ""] + [f"- {f}" for f in summary["failures"]]
    return "\n".join(lines) + "\n"


#: Line width and smallest diameter (points) of the hollow markers of ``predicted_vs_measured.png``.
RING_WIDTH_PT = 1.6
RING_MIN_PT = 4.0


def plot(table: pd.DataFrame, path: Path) -> None:
    """Predicted vs measured, log-log, y = x, one colour per collective, one marker per condition; the naive
    baseline in grey crosses on both panels."""
    use_file_backend()
    import matplotlib.pyplot as plt


    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5), sharex=True, sharey=True)
    collectives = sorted(table["collective"].unique()) if len(table) else []
    colours = {c: plt.get_cmap("tab10")(i % 10) for i, c in enumerate(collectives)}
    markers = dict(zip(sorted(table["condition"].unique()) if len(table) else [], "osD^v<>px", strict=False))
    if "predicted_nominal_s" not in table:  # a table written before the baseline was added
        table = table.assign(predicted_nominal_s=math.nan)
    finite = table[["measured_s", "predicted_model_s", "predicted_sim_s", "predicted_nominal_s"]].to_numpy(
        dtype=float).ravel()
    finite = finite[np.isfinite(finite) & (finite > 0)]
    lo, hi = (finite.min() / 1.5, finite.max() * 1.5) if finite.size else (1e-4, 1.0)
    for ax, kind, title in ((axes[0], "model", "calibrated cost model (leave-one-size-out)"),
                            (axes[1], "sim", "simulator on the link")):
        for (collective, condition), group in table.groupby(["collective", "condition"]):
            ok = group[np.isfinite(group[f"predicted_{kind}_s"]) & (group[f"predicted_{kind}_s"] > 0)]
            if ok.empty:
                continue
            # collectives gloo runs alike (reduce-scatter is an allreduce; with 2 ranks a broadcast costs the
            # same) land on the same points: hollow markers, the earlier ones in the list drawn larger, each
            # ring's radius above the next one's by more than the line width, so every ring shows around the others
            rank = len(collectives) - 1 - collectives.index(collective)
            size = (RING_MIN_PT + 2.2 * RING_WIDTH_PT * rank) ** 2
            ax.scatter(ok["measured_s"], ok[f"predicted_{kind}_s"], facecolors="none", edgecolors=[colours[collective]],
                       marker=markers.get(condition, "o"), s=size, linewidths=RING_WIDTH_PT,
                       zorder=2 + collectives.index(collective), label=f"{collective}, {condition}")
        naive = table[np.isfinite(table["predicted_nominal_s"]) & (table["predicted_nominal_s"] > 0)]
        if len(naive):  # the baseline in the same panels: how much better than bytes at the tc rate each is
            ax.scatter(naive["measured_s"], naive["predicted_nominal_s"], marker="x", s=18, linewidths=0.8,
                       color="0.45", zorder=1, label="naive: bytes at the tc rate, no latency")
        ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="y = x")
        ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="grey", alpha=0.2,
                        label="+/-25%")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured seconds (median)")
        ax.set_title(title)
        ax.tick_params(labelleft=True)  # both panels readable on their own
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("predicted seconds")
    for ax in axes:  # before the layout, so it makes room for the labels these ticks get (they poked into the
        readable_log_axis(ax, "x")  # next panel when set after it)
        readable_log_axis(ax, "y")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    save_figure_atomic(fig, path)


def write_outputs(folder: Path, table: pd.DataFrame, summary: dict[str, Any]) -> None:
    """errors.csv, errors.md, predicted_vs_measured.png and summary.json, each written atomically."""
    write_csv_atomic(table, folder / "errors.csv")
    write_text_atomic(folder / "errors.md", markdown(table, summary))
    write_text_atomic(folder / "summary.json", json.dumps(summary, indent=2, default=_json) + "\n")
    plot(table, folder / "predicted_vs_measured.png")


def _json(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def baseline_lines(summary: dict[str, Any]) -> list[str]:
    """Per testbed condition and class of rows: does the calibrated model beat the naive baseline, by how much,
    and where it does not (the comparison a reader needs before trusting the model's numbers)."""
    lines = []
    for entry in summary["conditions"]:
        classes = {"collectives >= 1 MiB": entry["collectives_ge_1MiB"],
                   **{f"{name} >= 1 MiB": stats for name, stats in entry["per_collective"].items()},
                   "DDP steps": entry["ddp_steps"]}
        parts, worse = [], []
        for name, stats in classes.items():
            model, naive = stats.get("model", {}).get("median_abs"), stats.get("nominal", {}).get("median_abs")
            if model is None or naive is None:
                continue
            parts.append(f"{name} {_abs_pct(model)} vs {_abs_pct(naive)}")
            if not model < naive:
                worse.append(name)
        if not parts:
            continue
        verdict = (f"the model is closer in {len(parts) - len(worse)} of {len(parts)} classes"
                   + (f"; not for {', '.join(worse)}" if worse else ""))
        lines.append(f"{entry['condition']}: {verdict} ({'; '.join(parts)})")
    return lines


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """A few lines for the terminal: per condition, median / worst |error| for >= 1 MiB and DDP steps."""
    lines = []
    for entry in summary["conditions"]:
        c, d = entry["collectives_ge_1MiB"], entry["ddp_steps"]
        parts = [f"{kind} {_abs_pct(c[kind]['median_abs'])}/{_abs_pct(c[kind]['worst_abs'])}" for kind in KINDS]
        lines.append(f"{entry['condition']:>12}: collectives >= 1 MiB ({c['model']['points']} points), median/worst "
                     f"|error|: " + ", ".join(parts) + f"; DDP steps model {_abs_pct(d['model']['median_abs'])}/"
                     f"{_abs_pct(d['model']['worst_abs'])}, sim {_abs_pct(d['sim']['median_abs'])}/"
                     f"{_abs_pct(d['sim']['worst_abs'])}")
    return lines + baseline_lines(summary)
