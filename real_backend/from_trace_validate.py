"""``flexcomm validate --from-trace``: trace one setting on the testbed, predict the others, measure them.

The loop a user of ``simulate --from-trace`` would run on their cluster, closed on this machine:

1. **trace**: ``train-ddp --torch-profile`` with DDP's own allreduce (``builtin``) at the traced setting (default
   3 ranks at 200 Mbit/s: faster links make the 2 cores, not the network, the bottleneck);
2. **predict** from that one trace every other setting: the rates of ``--bandwidths`` and the rank counts of
   ``--rank-counts``, each with every strategy (``builtin`` replayed as dense, ``topk-ag``, ``topk-ar``), on hosts
   linked at the testbed's goodput (0.956 x the tc rate, :data:`real_backend.validate.GOODPUT_FACTOR`), compute
   scaled for ranks sharing the host's cores, Top-k's rate measured on this host
   (:mod:`real_backend.codec_rate`);
3. **measure** every setting for real, profiled the same way; the measured step is the median ``ProfilerStep``
   of each run's trace, the same window the replay predicts;
4. **report** per-setting error, the traced setting's own reproduction, and whether the predicted ranking of the
   settings matches the measured one (``from_trace.csv``, ``from_trace.md``, ``from_trace.png``,
   ``summary.json``).

Targets (issue 32): the traced setting within 3 %, the others within 10 % median and 20 % worst, the ranking right.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic, write_csv_atomic, write_text_atomic
from flexcomm.costmodel.bounded_stream import read_csv_bounded, read_json_bounded
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.plotting import SCHEME_COLOURS, readable_log_axis, square_log_axes
from flexcomm.costmodel.units import format_bandwidth, parse_bandwidth
from flexcomm.real_backend.codec_rate import measure_topk_elements_per_s
from flexcomm.real_backend.ddp_train import DEFAULT_WARMUP_STEPS, parse_hidden, run_training
from flexcomm.real_backend.testbed import Testbed, require_privileges
from flexcomm.real_backend.validate import GOODPUT_FACTOR, parse_bandwidths
from flexcomm.sim.profile_replay import host_compute_scale, link_target, predicted_step_s, replay
from flexcomm.sim.traced_step import step_profile
from flexcomm.workloads.profiler_trace import read_profiler_trace

TRACED_RANKS = 3
TRACED_BANDWIDTH = "200Mbit/s"
BANDWIDTHS = "50Mbit/s,100Mbit/s"
RANK_COUNTS = "2,4"
STRATEGIES = ("builtin", "topk-ag", "topk-ar")
#: The replay's scheme for each strategy the testbed runs (``builtin`` is DDP's own dense allreduce).
SCHEME_OF = {"builtin": "dense", "topk-ag": "topk-ag", "topk-ar": "topk-ar"}
TARGET_TRACED = 0.03
TARGET_MEDIAN = 0.10
TARGET_WORST = 0.20
COLUMNS = ("setting", "ranks", "bandwidth", "strategy", "traced", "measured_step_s", "measured_iqr_s",
           "predicted_step_s", "error", "measured_rank", "predicted_rank", "hook_comm_s", "predicted_comm_s",
           "hook_codec_s", "predicted_codec_s", "compute_scale", "steps", "naive_step_s", "naive_error")
#: Bytes a kept element costs on the wire (float32 value; Allgather-Top-k adds an int32 index).
VALUE_BYTES = 4
INDEX_BYTES = 4


@dataclass(frozen=True)
class Setting:
    """One testbed condition: rank count and tc rate (bytes/s)."""

    ranks: int
    rate_Bps: float

    @property
    def slug(self) -> str:
        return f"{self.ranks}r-{format_bandwidth(self.rate_Bps).replace('/', '').replace(' ', '')}"

    @property
    def label(self) -> str:
        return f"{self.ranks} ranks, {format_bandwidth(self.rate_Bps)}"


def parse_rank_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or any(c < 2 for c in counts):
        raise InputError("rank-counts", text, "a comma list of rank counts >= 2, e.g. 2,4")
    return counts


def settings_of(traced_ranks: int, traced_rate: float, rates: list[float], rank_counts: list[int]) -> list[Setting]:
    """The traced setting first, then the other rates at the traced rank count, then the other rank counts at
    the traced rate (no duplicates)."""
    out = [Setting(traced_ranks, traced_rate)]
    for setting in [Setting(traced_ranks, r) for r in rates] + [Setting(p, traced_rate) for p in rank_counts]:
        if setting not in out:
            out.append(setting)
    return out


def _log(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"flexcomm validate --from-trace: {message}", file=sys.stderr, flush=True)


def measure(settings: list[Setting], out: Path, *, workload: str, hidden: str | None, steps: int, ratio: float,
            timeout_s: float, quiet: bool) -> list[str]:
    """Train every strategy, profiled, at every setting on a fresh testbed; returns what failed."""
    failures = []
    for setting in settings:
        folder = out / setting.slug
        if folder.exists():
            shutil.rmtree(folder)
        started = time.monotonic()
        _log(f"{setting.label}: {','.join(STRATEGIES)} x {steps} steps, profiled", quiet)
        with Testbed.up(setting.ranks, setting.rate_Bps) as testbed:
            result = run_training(setting.ranks, workload, ",".join(STRATEGIES), steps, folder, ratio=ratio,
                                  testbed=testbed, timeout_s=timeout_s, log_dir=folder / "logs", quiet=True,
                                  hidden=hidden, torch_profile=True)
        if result.returncode != 0:
            failures.append(f"{setting.label}: training exited {result.returncode} (logs in {folder / 'logs'})")
        _log(f"{setting.label}: {time.monotonic() - started:.0f}s", quiet)
    return failures


def measured_step_s(path: Path) -> tuple[float, float, int]:
    """Median ``ProfilerStep`` of one run's trace, its interquartile range and how many steps it holds."""
    durations = [s.duration_s for s in read_profiler_trace(path).steps]
    q1, q2, q3 = np.percentile(durations, [25, 50, 75])
    return float(q2), float(q3 - q1), len(durations)


def hook_medians(path: Path) -> tuple[float, float]:
    """Median seconds per step a compression hook spent in its collectives and compressing and decoding (its own
    log, ``comm_s`` and ``codec_s``, after warm-up); NaN for DDP's builtin allreduce, which logs nothing."""
    if not path.exists():
        return math.nan, math.nan
    log = read_csv_bounded(path, "out", "train-ddp steps.csv").iloc[DEFAULT_WARMUP_STEPS:]
    comm, codec = (log[column].dropna() for column in ("comm_s", "codec_s"))
    return (float(comm.median()) if len(comm) else math.nan, float(codec.median()) if len(codec) else math.nan)


def codec_rates(out: Path, numel: int, ratio: float, rank_counts: list[int], seed: int = 0) -> dict[int, float]:
    """Top-k elements/s of one rank alone at each rank count: measured once, kept in ``codec_rate.json`` so a
    ``--predict-only`` rerun gives the same numbers."""
    path = out / "codec_rate.json"
    key = {"numel": numel, "ratio": ratio}
    kept = read_json_bounded(path, "out", "codec_rate.json") if path.exists() else {}
    kept = kept if isinstance(kept, dict) else {}
    rates = {int(p): float(r) for p, r in kept.get("elements_per_s", {}).items()} if kept.get("key") == key else {}
    missing = [p for p in rank_counts if p not in rates]
    for p in missing:
        rates[p] = measure_topk_elements_per_s(numel, ratio, p, seed=seed)
    if missing:
        write_text_atomic(path, json.dumps({"key": key, "elements_per_s": {str(p): r for p, r in sorted(rates.items())},
                                            "measured": "torch.topk + gather + P index_add_, one thread, median of 7"},
                                           indent=2) + "\n")
    return rates


def naive_step_s(profile: Any, ranks: int, rate_Bps: float, strategy: str, ratio: float, compute_scale: float) -> float:
    """The naive baseline: the traced compute (scaled as the replay scales it) with nothing hidden, plus the
    strategy's bytes per bucket at the nominal tc rate with no latency and no codec (what one works out by hand)."""
    from flexcomm.real_backend.hooks import nominal_records_seconds

    compute = (profile.forward_s + profile.backward_s + profile.after_s) * compute_scale
    records = []
    for nbytes in profile.bucket_bytes:
        kept = max(1, int(ratio * nbytes // VALUE_BYTES))
        records += {"builtin": [("allreduce", "ring", nbytes)],
                    "topk-ag": [("allgather", "ring", kept * (VALUE_BYTES + INDEX_BYTES))],
                    "topk-ar": [("broadcast", "binomial", kept * INDEX_BYTES),
                                ("allreduce", "ring", kept * VALUE_BYTES)]}[strategy]
    return compute + nominal_records_seconds(records, ranks, rate_Bps)


def with_naive_baseline(table: pd.DataFrame, profile: Any, ratio: float) -> pd.DataFrame:
    """``table`` with the naive baseline's step and error beside the replay's (a finished table can be given it)."""
    table = table.copy()
    table["naive_step_s"] = [naive_step_s(profile, int(r["ranks"]), parse_bandwidth(str(r["bandwidth"])),
                                          str(r["strategy"]), ratio, float(r["compute_scale"]))
                             for r in table.to_dict("records")]
    table["naive_error"] = table["naive_step_s"] / table["measured_step_s"] - 1.0
    return table


def predict(settings: list[Setting], out: Path, ratio: float, seed: int = 0) -> pd.DataFrame:
    """Every (setting, strategy): measured from its own trace, predicted from the traced setting's builtin trace."""
    traced = settings[0]
    profile = step_profile(read_profiler_trace(out / traced.slug / "builtin" / "trace.json"))
    cores = os.cpu_count() or 1
    # measured alone on one core; the replay takes the rate at the traced setting's load (it rescales it per target)
    load = host_compute_scale(1, traced.ranks, cores)
    alone = codec_rates(out, profile.largest_bucket_elements, ratio, sorted({s.ranks for s in settings}), seed)
    rates = {p: rate / load for p, rate in alone.items()}
    rows = []
    for setting in settings:
        scale = host_compute_scale(traced.ranks, setting.ranks, cores)
        cluster = link_target(setting.ranks, GOODPUT_FACTOR * setting.rate_Bps)
        for strategy in STRATEGIES:
            path = out / setting.slug / strategy / "trace.json"
            measured, spread, steps = measured_step_s(path) if path.exists() else (math.nan, math.nan, 0)
            result = replay(profile, cluster, ranks=setting.ranks, scheme=SCHEME_OF[strategy], ratio=ratio,
                            compute_scale=scale, compress_elements_per_s=rates[setting.ranks], seed=seed)
            predicted = predicted_step_s(result)
            summary = result.summary()
            hook_comm, hook_codec = hook_medians(out / setting.slug / strategy / "steps.csv")
            rows.append({"setting": setting.label, "ranks": setting.ranks,
                         "bandwidth": format_bandwidth(setting.rate_Bps),
                         "strategy": strategy, "traced": setting == traced and strategy == "builtin",
                         "measured_step_s": measured, "measured_iqr_s": spread, "predicted_step_s": predicted,
                         "hook_comm_s": hook_comm,
                         "predicted_comm_s": summary["median_comm_s"],
                         "hook_codec_s": hook_codec,
                         "predicted_codec_s": summary["median_compression_s"],
                         "error": (predicted - measured) / measured if measured > 0 else math.nan,
                         "compute_scale": scale, "steps": steps})
    table = pd.DataFrame(rows)
    table["measured_rank"] = table["measured_step_s"].rank(method="min")
    table["predicted_rank"] = table["predicted_step_s"].rank(method="min")
    return with_naive_baseline(table, profile, ratio)[list(COLUMNS)]


def concordance(table: pd.DataFrame, distinguishable: bool = False) -> tuple[float, int]:
    """Fraction of setting pairs the prediction orders as measured (Kendall's pairwise agreement) and how many
    pairs count; ``distinguishable``: only pairs whose measured medians differ by more than half the sum of
    their interquartile ranges (a closer pair's order is the noise's to decide)."""
    measured = table["measured_step_s"].to_numpy()
    spread = table["measured_iqr_s"].to_numpy()
    predicted = table["predicted_step_s"].to_numpy()
    agree = total = 0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            gap = abs(measured[i] - measured[j])
            if gap == 0 or (distinguishable and not gap > (spread[i] + spread[j]) / 2):
                continue
            total += 1
            agree += (measured[i] < measured[j]) == (predicted[i] < predicted[j])
    return (agree / total if total else math.nan), total


def summarize(table: pd.DataFrame) -> dict[str, Any]:
    traced = table[table["traced"]]
    others = table[~table["traced"]].dropna(subset=["error"])
    errors = others["error"].abs()
    traced_error = float(traced["error"].iloc[0]) if len(traced) else math.nan
    measured = table.dropna(subset=["measured_step_s"])
    best_measured = table.loc[table["measured_step_s"].idxmin()] if table["measured_step_s"].notna().any() else None
    best_predicted = table.loc[table["predicted_step_s"].idxmin()]
    naive = others["naive_error"].abs() if "naive_error" in others else pd.Series(dtype=float)
    summary = {
        "traced_error": traced_error,
        "median_abs_error": float(errors.median()) if len(errors) else math.nan,
        "worst_abs_error": float(errors.max()) if len(errors) else math.nan,
        "naive_median_abs_error": float(naive.median()) if len(naive) else math.nan,
        "naive_worst_abs_error": float(naive.max()) if len(naive) else math.nan,
        "model_closer_than_naive": int((errors < naive.reindex(errors.index)).sum()) if len(naive) else 0,
        "points": int(len(others)),
        "pairwise_order_agreement": concordance(measured)[0],
        "distinguishable_pairs": concordance(measured, distinguishable=True)[1],
        "distinguishable_order_agreement": concordance(measured, distinguishable=True)[0],
        "ranks_identical": bool((table["measured_rank"] == table["predicted_rank"]).all()),
        "fastest_measured": None if best_measured is None else
        f"{best_measured['setting']} {best_measured['strategy']}",
        "fastest_predicted": f"{best_predicted['setting']} {best_predicted['strategy']}",
        "targets": {"traced": TARGET_TRACED, "median": TARGET_MEDIAN, "worst": TARGET_WORST},
    }
    summary["ranking_matches"] = bool(summary["distinguishable_order_agreement"] == 1.0)
    summary["meets_targets"] = bool(abs(traced_error) <= TARGET_TRACED and summary["median_abs_error"] <= TARGET_MEDIAN
                                    and summary["worst_abs_error"] <= TARGET_WORST and summary["ranking_matches"])
    return summary


def markdown(table: pd.DataFrame, summary: dict[str, Any]) -> str:
    lines = ["# Replaying one profiled step on other settings of the testbed", "",
             "Naive = the baseline: the traced compute with nothing hidden plus the strategy's bytes at the nominal "
             "tc rate, no latency, no codec.", "",
             "| setting | strategy | measured | predicted | error | naive | naive error | rank measured / predicted "
             "| hook's collectives measured / predicted | hook's codec measured / predicted |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in table.to_dict("records"):
        mark = " (traced)" if row["traced"] else ""
        lines.append(f"| {row['setting']}{mark} | {row['strategy']} | {row['measured_step_s'] * 1e3:.1f} ms | "
                     f"{row['predicted_step_s'] * 1e3:.1f} ms | {row['error'] * 100:+.1f} % | "
                     f"{row['naive_step_s'] * 1e3:.1f} ms | {row['naive_error'] * 100:+.1f} % | "
                     f"{row['measured_rank']:.0f} / {row['predicted_rank']:.0f} | "
                     + (f"{row['hook_comm_s'] * 1e3:.1f} / {row['predicted_comm_s'] * 1e3:.1f} ms | "
                        f"{row['hook_codec_s'] * 1e3:.1f} / {row['predicted_codec_s'] * 1e3:.1f} ms |"
                        if math.isfinite(row["hook_comm_s"]) else "(inside DDP) | - |"))
    lines += ["", *(f"- {line}" for line in summary_lines(summary))]
    return "\n".join(lines) + "\n"


def summary_lines(summary: dict[str, Any]) -> list[str]:
    def pct(x: float) -> str:
        return f"{x * 100:.1f} %" if math.isfinite(x) else "n/a"

    return [
        f"traced setting reproduced at {summary['traced_error'] * 100:+.1f} % (target {pct(TARGET_TRACED)})",
        f"other settings: median |error| {pct(summary['median_abs_error'])}, worst {pct(summary['worst_abs_error'])} "
        f"over {summary['points']} points (targets {pct(TARGET_MEDIAN)} / {pct(TARGET_WORST)}); naive baseline "
        f"{pct(summary.get('naive_median_abs_error', math.nan))} / "
        f"{pct(summary.get('naive_worst_abs_error', math.nan))}, the replay closer on "
        f"{summary.get('model_closer_than_naive', 0)} of {summary['points']}",
        f"ranking of settings: {pct(summary['distinguishable_order_agreement'])} of the "
        f"{summary['distinguishable_pairs']} pairs measured apart (medians further apart than their spread) ordered "
        f"as measured, {pct(summary['pairwise_order_agreement'])} of all pairs; ranks "
        f"{'identical' if summary['ranks_identical'] else 'not identical'}",
        f"fastest measured {summary['fastest_measured']}, predicted {summary['fastest_predicted']}",
        f"targets {'met' if summary['meets_targets'] else 'not met'}",
    ]


def plot(table: pd.DataFrame, path: Path) -> Path:
    """Predicted against measured step, one marker per strategy, the naive baseline in grey crosses, the y = x
    line and the 10 % band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    measured = table["measured_step_s"].to_numpy() * 1e3
    predicted = table["predicted_step_s"].to_numpy() * 1e3
    naive = table["naive_step_s"].to_numpy() * 1e3 if "naive_step_s" in table else predicted
    finite = np.concatenate([v[np.isfinite(v)] for v in (measured, predicted, naive)])
    low, high = float(finite.min()) * 0.8, float(finite.max()) * 1.25
    line = np.geomspace(low, high, 50)
    ax.plot(line, line, color="0.3", lw=1, label="predicted = measured")
    ax.fill_between(line, line * 0.9, line * 1.1, color="0.85", label="within 10 %")
    for strategy, marker in zip(STRATEGIES, ("o", "s", "^"), strict=True):
        rows = table[table["strategy"] == strategy]
        ax.scatter(rows["measured_step_s"] * 1e3, rows["predicted_step_s"] * 1e3, marker=marker, s=36,
                   color=SCHEME_COLOURS.get(SCHEME_OF[strategy]), label=f"{strategy}", zorder=3)
    if "naive_step_s" in table:
        ax.scatter(table["measured_step_s"] * 1e3, table["naive_step_s"] * 1e3, marker="x", s=30, color="0.45",
                   linewidths=1.0, label="naive baseline (bytes at the tc rate)", zorder=5)
    traced = table[table["traced"]]
    ax.scatter(traced["measured_step_s"] * 1e3, traced["predicted_step_s"] * 1e3, s=140, facecolors="none",
               edgecolors="black", label="traced setting", zorder=4)
    square_log_axes(ax, low, high, "measured step (ms)", "predicted from one trace (ms)")
    # ticks chosen when drawn, from the axis' length: a fixed locator's labels overlapped for some measured ranges
    readable_log_axis(ax, "x")
    readable_log_axis(ax, "y")
    ax.set_title("One profiled step replayed on other settings")
    ax.legend(loc="upper left", fontsize=8)
    return save_figure_atomic(fig, path)


def run_from_trace_validation(out: str | Path = "results/validate-from-trace", *, traced_ranks: int = TRACED_RANKS,
                              traced_bandwidth: str = TRACED_BANDWIDTH, bandwidths: str = BANDWIDTHS,
                              rank_counts: str = RANK_COUNTS, steps: int = 10, ratio: float = 0.01,
                              workload: str = "mlp-digits", hidden: str | None = "512,512", timeout_s: float = 1800.0,
                              measure_runs: bool = True, quiet: bool = False) -> tuple[Path, dict[str, Any], list[str]]:
    """Measure (unless ``measure_runs`` is False: only predict from an existing folder), predict, report."""
    if isinstance(traced_ranks, bool) or not isinstance(traced_ranks, int) or traced_ranks < 2:
        raise InputError("ranks", traced_ranks, "an integer >= 2 (the traced setting's ranks)")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 4:
        raise InputError("steps", steps, "an integer >= 4 (warm-up steps, then profiled ones)")
    if not 0 < ratio <= 1:
        raise InputError("ratio", ratio, "a fraction of elements kept in (0, 1]")
    parse_hidden(hidden)
    traced_rate = parse_bandwidths(traced_bandwidth)[0]
    settings = settings_of(traced_ranks, traced_rate, parse_bandwidths(bandwidths), parse_rank_counts(rank_counts))
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    if measure_runs:

        require_privileges()
        failures = measure(settings, folder, workload=workload, hidden=hidden, steps=steps, ratio=ratio,
                           timeout_s=timeout_s, quiet=quiet)
    traced_trace = folder / settings[0].slug / "builtin" / "trace.json"
    if not traced_trace.exists():
        raise InputError("out", str(folder), f"a folder with the traced run ({traced_trace} is missing)")
    table = predict(settings, folder, ratio)
    summary = summarize(table)
    summary.update({"settings": [s.label for s in settings], "workload": workload, "hidden": hidden, "steps": steps,
                    "ratio": ratio, "host_cores": os.cpu_count(), "failures": failures})

    write_csv_atomic(table, folder / "from_trace.csv")
    write_text_atomic(folder / "from_trace.md", markdown(table, summary))
    write_text_atomic(folder / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    plot(table, folder / "from_trace.png")
    return folder, summary, failures
