"""What ``flexcomm plan`` writes: the ranked table (CSV, markdown), the best plan (JSON) and a figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic, write_csv_atomic, write_text_atomic
from flexcomm.costmodel.plotting import use_file_backend
from flexcomm.costmodel.units import format_size, format_time
from flexcomm.planner.plans import PlanCost, Pricer
from flexcomm.planner.search import SearchResult, signature

PARTS = (("compute_s", "compute"), ("tp_comm_s", "tensor-parallel allreduce"), ("p2p_s", "pipeline sends"),
         ("bubble_s", "bubble"), ("dp_exposed_s", "gradient allreduce, exposed"))


def describe(pricer: Pricer, cost: PlanCost) -> dict[str, Any]:
    """The best plan in words and numbers: stages, their units and devices, each replica's batch."""
    cfg = cost.config
    ranks = cost.detail["ranks"]
    bounds = np.concatenate([[0], np.cumsum(cost.stage_units)])
    stages = []
    for p in range(cfg.pp):
        devices = sorted({pricer.cluster.devices[int(r)].name for r in ranks[:, p, :].ravel()})
        names = pricer.units.names[int(bounds[p]):int(bounds[p + 1])]
        stages.append({
            "stage": p, "units": len(names), "first": names[0], "last": names[-1], "devices": devices,
            "ranks": [[int(r) for r in ranks[d, p]] for d in range(cfg.dp)],
        })
    return {
        "plan": cfg.label, "dp": cfg.dp, "tp": cfg.tp, "pp": cfg.pp, "micro_batches": cfg.micro_batches,
        "zero": cfg.zero, "order": cfg.order, "step_s": cost.step_s,
        "samples_per_s": cost.extra.get("samples_per_s"), "breakdown_s": {k: getattr(cost, k) for k, _ in PARTS},
        "dp_comm_s": cost.dp_comm_s,  # the whole gradient exchange; the breakdown holds the part the step pays
        "peak_memory_bytes": cost.peak_memory_bytes, "memory_use": cost.memory_use,
        "replica_micro_batch": list(cost.replica_micro_batch), "dp_algorithm": cost.dp_algorithm, "stages": stages,
    }


def to_markdown(table: pd.DataFrame, top: int, header: str) -> str:
    """The top feasible plans (fastest ZeRO stage of each schedule) and the rejected count, in markdown."""
    feasible = table[table["feasible"]]
    feasible = feasible.drop_duplicates(subset=["dp", "tp", "pp", "micro_batches", "order"]).head(top)
    cols = ["rank", "plan", "step_s", "simulated_step_s", "slowdown", "compute_s", "tp_comm_s", "p2p_s", "bubble_s",
            "dp_comm_s", "dp_exposed_s", "peak_memory_GiB", "loses_on"]
    lines = [header, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in feasible[cols].itertuples(index=False):
        cells = []
        for col, value in zip(cols, row, strict=True):
            if value is None or (isinstance(value, float) and np.isnan(value)):
                cells.append("")
            elif col.endswith("_s"):
                cells.append(format_time(float(value)))
            elif isinstance(value, float):
                cells.append(f"{value:.3g}")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    rejected = table[~table["feasible"]]
    lines += ["", f"{len(rejected)} of {len(table)} plans rejected for memory."]
    if len(rejected):
        first = rejected.iloc[0]
        lines.append(f"Closest to fitting: {first['plan']} ({first['reason']}).")
    return "\n".join(lines) + "\n"


def time_unit(longest_s: float) -> tuple[float, str]:
    """(factor, unit) that puts ``longest_s`` between 1 and 1000 on an axis: s, ms or us."""
    if longest_s >= 1.0 or not longest_s > 0:
        return 1.0, "s"
    if longest_s >= 1e-3:
        return 1e3, "ms"
    return 1e6, "\u00b5s"


def plot(result: SearchResult, pricer: Pricer, top: int, path: Path) -> Path:
    """Step-time breakdown bars of the top plans (simulated step marked) and the best plan's stage split."""
    use_file_backend()
    import matplotlib.pyplot as plt

    seen: set[tuple] = set()
    shown = []
    for cost in result.ranked:
        if signature(cost.config) not in seen and len(shown) < top:
            seen.add(signature(cost.config))
            shown.append(cost)
    stages_panel = bool(shown) and shown[0].config.pp > 1  # one stage: a single bar says nothing
    if stages_panel:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, max(3.5, 0.45 * len(shown) + 1.5)),
                                      gridspec_kw={"width_ratios": [3, 2]})
    else:
        fig, ax = plt.subplots(figsize=(9, max(3.5, 0.45 * len(shown) + 1.5)))
    y = np.arange(len(shown))[::-1]
    simulated = np.array([result.simulated.get(c.config.label, np.nan) for c in shown])
    model_steps = np.array([sum(getattr(c, key) for key, _ in PARTS) for c in shown])
    longest = float(np.nanmax(np.concatenate([model_steps, simulated])))
    scale, unit = time_unit(longest)
    left = np.zeros(len(shown))
    for index, (key, label) in enumerate(PARTS):
        values = np.array([getattr(c, key) for c in shown]) * scale
        if not values.any():  # a part no shown plan has: no bar, no legend entry naming nothing
            continue
        ax.barh(y, values, left=left, label=label, color=f"C{index}")
        left += values
    beyond = np.where(np.isfinite(simulated), np.maximum(simulated - model_steps, 0.0), 0.0) * scale
    if beyond.any():  # the bar ends where the plan is ranked: the simulated step, when it is longer
        ax.barh(y, beyond, left=left, color="none", edgecolor="0.45", hatch="///", lw=0.6,
                label="simulated beyond the model (contention, overlap)")
    sims = np.isfinite(simulated)
    if sims.any():
        ax.scatter(simulated[sims] * scale, y[sims], marker="D", color="black", zorder=5, label="simulated step")
    ax.set_yticks(y, [f"{rank}. {c.config.label}" for rank, c in enumerate(shown, start=1)], fontsize=8)
    ax.set_xlabel(f"{unit} per training step")
    ax.margins(x=0.04, y=0.6 / max(len(shown), 1))  # no bar or marker against the frame
    ranked_by = (f"the simulated step (diamond, bar end) for the {int(sims.sum())} simulated, then the model's"
                 if sims.any() and not sims.all() else
                 "the simulated step (diamond, bar end)" if sims.any() else "the model's step (bar end)")
    ax.set_title(f"{pricer.units.model} on {pricer.cluster.name}, batch {pricer.batch_size}: top {len(shown)} "
                 f"plans,\nranked by {ranked_by}", fontsize=9)  # two lines: one overran the panel
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4, frameon=False)
    if stages_panel:
        best = shown[0]
        det = best.detail
        stages = np.arange(best.config.pp)
        work = np.array([det["compute"][:, p].mean() for p in stages])
        stage_scale, stage_unit = time_unit(float(work.max()))
        names = [pricer.cluster.devices[int(det["ranks"][0, p, 0])].name for p in stages]
        colours = {n: f"C{i}" for i, n in enumerate(sorted(set(names)))}
        ax2.bar(stages, work * stage_scale, color=[colours[n] for n in names])
        for p, units in zip(stages, best.stage_units, strict=True):
            label = f"{units} unit{'s' if units != 1 else ''}"
            ax2.annotate(label, (p, work[p] * stage_scale), ha="center", va="bottom", fontsize=7)
        from matplotlib.patches import Patch

        ax2.legend(handles=[Patch(color=c, label=n) for n, c in colours.items()], fontsize=7)
        ax2.set_xticks(stages)
        ax2.set_ylim(0, float(work.max()) * stage_scale * 1.15)  # room for the unit labels above the tallest bar
        ax2.set_xlabel("pipeline stage")
        ax2.set_ylabel(f"{stage_unit} of compute per micro-batch (forward + backward)")
        ax2.set_title(f"best plan {best.config.label}: stage split", fontsize=9)
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def summary(result: SearchResult, pricer: Pricer, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``best_plan.json``: the best plan described, the search's size and speed, the simulated steps and
    ``extra`` (what the plans were priced for)."""
    return {"best": describe(pricer, result.best), "plans_priced": len(result.costs),
            "plans_feasible": len(result.ranked), "pricing_s": result.pricing_s,
            "plans_per_s": len(result.costs) / result.pricing_s if result.pricing_s > 0 else None,
            "simulated": result.simulated, **(extra or {})}


def write_outputs(result: SearchResult, pricer: Pricer, out: Path, top: int,
                  extra: dict[str, Any] | None = None) -> list[Path]:
    """plans.csv (every priced plan), plans.md (top N), best_plan.json and plans.png under ``out``."""
    table = result.table()
    best = result.best
    header = (f"# Parallel plans: {pricer.units.model} on {pricer.cluster.name}, batch {pricer.batch_size}\n\n"
              f"Best: **{best.config.label}**, {format_time(best.step_s)} per step "
              f"({best.extra.get('samples_per_s', 0):.1f} samples/s), peak memory "
              f"{format_size(best.peak_memory_bytes)} per device.")
    return [
        write_csv_atomic(table, out / "plans.csv"),
        write_text_atomic(out / "plans.md", to_markdown(table, top, header)),
        write_text_atomic(out / "best_plan.json",
                          json.dumps(summary(result, pricer, extra), indent=2, default=float) + "\n"),
        plot(result, pricer, top, out / "plans.png"),
    ]
