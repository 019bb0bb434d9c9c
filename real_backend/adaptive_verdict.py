"""Does adapting pay on real ranks? The adaptive strategies' own cost, and their gains phase by phase.

``validate --network-trace`` trains static and adaptive strategies on the same changing network. The
paper's claim holds on real ranks only if switching (``flexible``) and choosing the ratio (``moo``) gain
more than their machinery costs. This module reads a finished folder's logs and summary and says, per
adaptive strategy:

* **mechanism cost**: seconds per step the adaptive hook spends beyond the exchange it chose, by part
  (decide, agree, probe, estimate, moo: :data:`real_backend.hooks.MECHANISM_COLUMNS`), on the critical
  path, and the housekeeping it does off the path (folding agreements, refitting, optimising);
* **per phase**: its measured mean step against the best static scheme's in that phase (goal: within
  :data:`GOAL_PHASE_MARGIN`);
* **network-bound phases**: those where the static schemes' steps are at least :data:`NETWORK_BOUND`
  times the run's unshaped step (the per-step error goal is judged there);
* **gains agree**: its measured and simulated gain over each static scheme, same sign and within
  :data:`GOAL_GAIN_POINTS`;
* ``moo`` against the static scheme at the ratio it chose (the run labelled ``<scheme>@<ratio>``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.costmodel.bounded_stream import read_csv_bounded
from flexcomm.costmodel.units import format_percent

#: Goals of the comparison (issue 33): adaptive within 3 % of the per-phase best static scheme; simulated
#: and measured gains within 5 points; a phase is network-bound when its steps are >= 3x the unshaped one.
GOAL_PHASE_MARGIN = 0.03
GOAL_GAIN_POINTS = 0.05
NETWORK_BOUND = 3.0
ADAPTIVE = ("flexible", "moo")
PARTS = ("decide", "agree", "probe", "estimate", "moo")


def mechanism_cost(steps: pd.DataFrame, exchanges: pd.DataFrame, warmup: int) -> dict[str, float]:
    """Mean seconds per step of each part of the adaptive machinery (steps from ``warmup`` on), the total on
    the critical path, the housekeeping off it, and the total's share of the mean step."""
    steady = exchanges[exchanges["step"] >= warmup]
    per_step = steady.groupby("step")[[f"{p}_s" for p in PARTS if f"{p}_s" in steady] +
                                      [c for c in ("mechanism_s", "housekeeping_s") if c in steady]].sum()
    out = {f"{col}_mean": float(per_step[col].mean()) for col in per_step}
    timed = steps[steps["step"] >= warmup]["step_s"]
    if "mechanism_s_mean" in out and len(timed):
        out["share_of_step"] = out["mechanism_s_mean"] / float(timed.mean())
    return out


def switch_cost(exchanges: pd.DataFrame, following: int = 3) -> dict[str, float]:
    """What a switch costs beyond its exchange: the measured communication of each bucket's first exchange
    after a switch, minus the median of the next ``following`` exchanges of that bucket with the same
    scheme (the network may change meanwhile: the median over switches is the estimate)."""
    excess = []
    if "switched" not in exchanges or "measured_comm_s" not in exchanges:
        return {"switches": 0, "excess_s_median": math.nan}
    for _, bucket in exchanges.groupby("bucket"):
        rows = bucket.reset_index(drop=True)
        for i in rows.index[1:]:
            if str(rows.at[i, "switched"]).strip().lower() not in ("true", "1", "1.0"):  # the log writes 1/0
                continue
            after = rows.iloc[i + 1:i + 1 + following]
            after = after[after["scheme"] == rows.at[i, "scheme"]]
            if len(after):
                excess.append(float(rows.at[i, "measured_comm_s"]) - float(after["measured_comm_s"].median()))
    return {"switches": len(excess), "excess_s_median": float(np.median(excess)) if excess else math.nan}


def _by_phase(entry: dict[str, Any], kind: str = "measured", lengths: dict[int, float] | None = None
              ) -> dict[int, float]:
    """Mean step per phase; with ``lengths`` (seconds per phase) only the phases that last (the trace's end
    line opens a phase of length 0, where at most the one step that saw it falls)."""
    return {int(p): float(v[f"{kind}_mean_step_s"]) for p, v in entry.get("open", {}).get("by_phase", {}).items()
            if lengths is None or lengths.get(int(p), 0.0) > 0}


def phase_comparison(strategies: dict[str, Any], lengths: dict[int, float] | None = None
                     ) -> dict[str, dict[int, dict[str, Any]]]:
    """Per adaptive strategy and phase: its measured mean step, the best static one's, and how far apart.

    ``flexible`` is compared with the static schemes at the run's ratio; ``moo``, which picks its own ratio,
    with the static run at that ratio (``<scheme>@<ratio>``) when there is one."""
    at_ratio = {k: _by_phase(v, lengths=lengths) for k, v in strategies.items()
                if v["strategy"] not in ADAPTIVE and "@" not in k}
    at_moo = {k: _by_phase(v, lengths=lengths) for k, v in strategies.items()
              if v["strategy"] not in ADAPTIVE and "@" in k}
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for label, entry in strategies.items():
        static = at_moo if entry["strategy"] == "moo" and at_moo else at_ratio
        if entry["strategy"] not in ADAPTIVE or not static:
            continue
        rows = {}
        for phase, mine in _by_phase(entry, lengths=lengths).items():
            candidates = {k: v[phase] for k, v in static.items() if phase in v}
            if not candidates:
                continue
            best = min(candidates, key=candidates.__getitem__)
            rows[phase] = {"mean_step_s": mine, "best_static": best, "best_static_s": candidates[best],
                           "vs_best": mine / candidates[best] - 1.0,
                           "within_goal": mine <= candidates[best] * (1 + GOAL_PHASE_MARGIN)}
        out[label] = rows
    return out


def network_bound_phases(strategies: dict[str, Any], unshaped_s: float, lengths: dict[int, float] | None = None
                         ) -> list[int]:
    """Phases where every static scheme's mean step is at least :data:`NETWORK_BOUND` x the unshaped step."""
    static = [_by_phase(v, lengths=lengths) for k, v in strategies.items()
              if v["strategy"] not in ADAPTIVE and "@" not in k]
    if not static or not (math.isfinite(unshaped_s) and unshaped_s > 0):
        return []
    phases = set.intersection(*(set(s) for s in static))
    return sorted(p for p in phases if min(s[p] for s in static) >= NETWORK_BOUND * unshaped_s)


def error_in_phases(replay: pd.DataFrame, label: str, phases: list[int], warmup: int) -> float:
    """Median |per-step error| (open clock) of ``label``'s steps in ``phases``."""
    part = replay[(replay["label"] == label) & (replay["mode"] == "open") & (replay["step"] >= warmup)
                  & replay["phase"].isin(phases)]
    return float(part["rel_error"].abs().median()) if len(part) else math.nan


def gains_agree(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Measured vs simulated gain over each static scheme: same sign and within :data:`GOAL_GAIN_POINTS`."""
    out = {}
    for static, measured in entry.get("vs_static", {}).items():
        simulated = entry.get("vs_static_simulated", {}).get(static, math.nan)
        out[static] = {"measured": measured, "simulated": simulated,
                       "agree": bool(np.sign(measured) == np.sign(simulated)
                                     and abs(measured - simulated) <= GOAL_GAIN_POINTS)}
    return out


def moo_against_its_ratio(strategies: dict[str, Any]) -> dict[str, Any] | None:
    """``moo``'s time per step over the trace against the static run at its chosen ratio (None without one)."""
    moo = next((v for v in strategies.values() if v["strategy"] == "moo" and "trace_steps" in v), None)
    static = next(((k, v) for k, v in strategies.items() if "@" in k and "trace_steps" in v), None)
    if moo is None or static is None:
        return None
    label, entry = static
    vs = entry["trace_steps"]["measured"] / moo["trace_steps"]["measured"] - 1.0
    return {"static": label, "vs_static": vs, "no_slower": vs <= 0}


def verdict(summary: dict[str, Any], replay: pd.DataFrame, folder: Path, warmup: int,
            unshaped_s: float = math.nan, lengths: dict[int, float] | None = None) -> dict[str, Any]:
    """Everything above, for summary.json's ``adaptive`` entry (``lengths``: seconds per trace phase)."""
    strategies = summary.get("strategies", {})
    out: dict[str, Any] = {"phases": phase_comparison(strategies, lengths), "mechanism": {}, "gains": {}}
    bound = network_bound_phases(strategies, unshaped_s, lengths)
    out["unshaped_step_s"] = unshaped_s
    out["network_bound_phases"] = bound
    out["error_network_bound"] = {label: error_in_phases(replay, label, bound, warmup) for label in strategies}
    for label, entry in strategies.items():
        if entry["strategy"] not in ADAPTIVE:
            continue
        run = folder / "ddp" / label
        if (run / "exchanges.csv").exists() and (run / "steps.csv").exists():
            exchanges = read_csv_bounded(run / "exchanges.csv", "folder", "train-ddp exchanges.csv")
            if "mechanism_s" in exchanges:
                steps = read_csv_bounded(run / "steps.csv", "folder", "train-ddp steps.csv")
                out["mechanism"][label] = mechanism_cost(steps, exchanges, warmup)
                out["mechanism"][label].update({f"switch_{k}": v for k, v in switch_cost(exchanges).items()})
        out["gains"][label] = gains_agree(entry)
    out["moo_vs_its_ratio"] = moo_against_its_ratio(strategies)
    return out


def markdown_lines(adaptive: dict[str, Any]) -> list[str]:
    """errors.md's section on whether adapting pays."""
    lines = ["", "## Does adapting pay?", ""]
    unshaped = adaptive.get("unshaped_step_s", math.nan)
    bound = adaptive.get("network_bound_phases", [])
    if math.isfinite(unshaped):
        lines.append(f"Unshaped step (the same run on unshaped links): {1e3 * unshaped:.0f} ms; network-bound "
                     f"phases (every static step >= {NETWORK_BOUND:g}x it): "
                     f"{', '.join(map(str, bound)) if bound else 'none'}.")
        lines.append("")
    mechanism = adaptive.get("mechanism", {})
    if mechanism:
        lines += ["The adaptive machinery's own cost per step (mean, ms; on the critical path unless marked):", "",
                  "| strategy | " + " | ".join(PARTS) + " | total on path | share of step | off path |",
                  "|---|" + "---|" * (len(PARTS) + 3)]
        for label, cost in mechanism.items():
            cells = [f"{1e3 * cost.get(f'{p}_s_mean', math.nan):.1f}" for p in PARTS]
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {1e3 * cost.get('mechanism_s_mean', math.nan):.1f}"
                         f" | {format_percent(cost.get('share_of_step'))} | "
                         f"{1e3 * cost.get('housekeeping_s_mean', math.nan):.1f} |")
        lines.append("")
        for label, cost in mechanism.items():
            if cost.get("switch_switches"):
                lines.append(f"- {label}: {cost['switch_switches']} switches; the first exchange after one took "
                             f"{1e3 * cost['switch_excess_s_median']:+.1f} ms (median) beyond the next ones of the "
                             "same scheme: what a switch itself costs")
        lines.append("")
    for label, phases in adaptive.get("phases", {}).items():
        if not phases:
            continue
        own = any("@" in row["best_static"] for row in phases.values())
        versus = "the static run at its own ratio" if own else "the best static scheme of each phase"
        lines += [f"{label} against {versus} (goal: within {GOAL_PHASE_MARGIN:.0%}):", "",
                  "| phase | best static | its step | "
                  f"{label} | {label} vs best | within goal |", "|---|---|---|---|---|---|"]
        for phase, row in sorted(phases.items()):
            lines.append(f"| {phase} | {row['best_static']} | {1e3 * row['best_static_s']:.0f} ms | "
                         f"{1e3 * row['mean_step_s']:.0f} ms | {format_percent(row['vs_best'])} | "
                         f"{'yes' if row['within_goal'] else 'no'} |")
        lines.append("")
    for label, gains in adaptive.get("gains", {}).items():
        if gains:
            parts = [f"vs {k}: measured {format_percent(v['measured'])}, simulated {format_percent(v['simulated'])}"
                     f" ({'agree' if v['agree'] else 'disagree'})" for k, v in gains.items()]
            lines.append(f"- {label} time per step over the trace, " + "; ".join(parts) +
                         f" (agree: same sign and within {GOAL_GAIN_POINTS * 100:.0f} points)")
    errors = {k: v for k, v in adaptive.get("error_network_bound", {}).items() if math.isfinite(v)}
    if errors:
        lines.append("- per-step error median in the network-bound phases: " +
                     ", ".join(f"{k} {format_percent(v)}" for k, v in errors.items()))
    moo = adaptive.get("moo_vs_its_ratio")
    if moo:
        lines.append(f"- moo against {moo['static']} (the static scheme at its chosen ratio): "
                     f"{format_percent(moo['vs_static'])} time per step "
                     f"({'no slower' if moo['no_slower'] else 'slower'})")
    return lines
