"""Figures of the recovery engine: throughput over time per policy (failures and plan changes marked) with
the time lost per cause, and the MTBF study's best policy per cell."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.plotting import use_file_backend
from flexcomm.sim.recovery import CAUSES, RecoveryResult

POLICY_COLOURS = {"restart": "#7f7f7f", "shrink": "#1f77b4", "replan": "#ff7f0e", "replan+grow": "#2ca02c"}
MARKERS = {"shrink": "v", "replan": "D", "grow": "^", "restart": "o"}


def binned_rate(result: RecoveryResult, bins: int = 240) -> tuple[list[float], list[float]]:
    """Mean samples/s in ``bins`` equal windows of the horizon (the piecewise-constant rate integrated):
    hundreds of failures a week make the raw rate a comb; the windowed mean shows what a job sees."""
    import numpy as np

    edges = np.linspace(0.0, result.horizon_s, bins + 1)
    times = np.array([row["time_s"] for row in result.timeline] + [result.horizon_s])
    rates = np.array([row["samples_per_s"] for row in result.timeline])
    done = np.concatenate([[0.0], np.cumsum(rates * np.diff(times))])  # samples trained by each change

    def trained(t: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(rates) - 1)
        return done[i] + rates[i] * (t - times[i])

    mean = np.diff(trained(edges)) / np.diff(edges)
    return list(0.5 * (edges[:-1] + edges[1:])), list(mean)


def plot_goodput(results: list[RecoveryResult], path: Path) -> Path:
    use_file_backend()
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(len(results) + 1, 1, figsize=(11, 2.0 * len(results) + 3.2),
                             gridspec_kw={"height_ratios": [2] * len(results) + [2.6]})
    hours = 3600.0
    for ax, r in zip(axes, results, strict=False):
        t, rate = binned_rate(r)
        window = r.horizon_s / len(t) / hours
        ax.plot(np.array(t) / hours, rate, color=POLICY_COLOURS[r.policy], lw=1.3,
                label=f"{r.policy}: samples/s trained (mean per {window:.2g} h)")
        # the reference level, named where it is drawn: a policy that loses nothing lies exactly on it
        ax.axhline(r.ideal_samples_per_s, color="black", lw=1.0, ls=":", zorder=4)
        ax.annotate("failure-free plan", (1.0, r.ideal_samples_per_s), xycoords=("axes fraction", "data"),
                    xytext=(-2, -3), textcoords="offset points", ha="right", va="top", fontsize=7)
        # events in a strip above the data, thin enough that hundreds stay marks, not a band over the plan line
        fails = [e["time_s"] / hours for e in r.events if e["kind"] == "failure"]
        many = len(fails) > 60
        if fails:
            ax.plot(fails, np.full(len(fails), r.ideal_samples_per_s * 1.10), "|", color="#d62728",
                    ms=4 if many else 7, mew=0.5 if many else 1.0, label=f"failure of a node in use ({len(fails)})")
        for kind, marker in MARKERS.items():
            at = [e["time_s"] / hours for e in r.events if e["kind"] == kind]
            if at:
                ax.plot(at, np.full(len(at), r.ideal_samples_per_s * 1.20), marker, color="black",
                        ms=2.5 if len(at) > 60 else 4, ls="none", label=f"{kind} ({len(at)})")
        # a little below 0, so a policy that trains nothing is a line, not the axis
        ax.set_ylim(-0.05 * r.ideal_samples_per_s, r.ideal_samples_per_s * 1.28)
        ax.set_xlim(0, r.horizon_s / hours)
        ax.set_ylabel("samples/s")
        ax.set_title(f"{r.policy}: goodput {r.goodput:.1f} samples/s = {r.efficiency * 100:.1f} % of the "
                     "failure-free plan" + ("" if fails else " (no node in use failed)"), fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the panel, never over a trough
    axes[len(results) - 1].set_xlabel("simulated hours")
    ax = axes[-1]
    left = np.zeros(len(results))
    y = np.arange(len(results))
    colours = plt.get_cmap("tab10").colors
    too_small = []  # causes under 0.2 % of the horizon: no bar, but named with their hours (the table has them)
    for i, cause in enumerate(CAUSES):
        hours_lost = np.array([r.lost_s[cause] for r in results]) / hours
        if hours_lost.max() <= 0.002 * results[0].horizon_s / hours:
            if hours_lost.max() > 0:
                too_small.append(f"{cause.replace('_', ' ')} {hours_lost.max():.2g} h")
            continue
        ax.barh(y, hours_lost, left=left, color=colours[i % 10], label=cause.replace("_", " "))
        left += hours_lost
    ax.set_yticks(y, [r.policy for r in results])
    ax.set_xlabel("hours lost (at the failure-free plan's rate), per cause"
                  + (f"\nnot drawn, under 0.2 % of the horizon each (at most): {', '.join(too_small)}"
                     if too_small else ""))
    if left.max() > 0:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:  # nothing worth a bar: say so rather than draw an empty frame
        ax.text(0.5, 0.5, "no cause lost more than 0.2 % of the horizon", transform=ax.transAxes, ha="center",
                va="center", fontsize=9)
    fig.tight_layout()
    return save_figure_atomic(fig, path)


#: A study cell where no policy trains at all (goodput 0): not any policy's colour.
NOTHING_TRAINS_COLOUR = "#d9d9d9"


def plot_study(table: pd.DataFrame, path: Path) -> Path:
    """Best policy per (node MTBF, job nodes) cell, coloured, with its goodput efficiency and interval."""
    use_file_backend()
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch, Rectangle

    best = table.loc[table.groupby(["mtbf_h", "nodes"])["efficiency"].idxmax()]
    mtbfs = sorted(best["mtbf_h"].unique())
    sizes = sorted(best["nodes"].unique())
    policies = list(POLICY_COLOURS)
    grid = best.pivot(index="nodes", columns="mtbf_h", values="policy").reindex(index=sizes, columns=mtbfs)
    codes = grid.apply(lambda col: col.map(policies.index)).to_numpy(dtype=float, copy=True)
    trains = best.pivot(index="nodes", columns="mtbf_h", values="efficiency").reindex(index=sizes, columns=mtbfs)
    codes[~(trains.to_numpy(dtype=float) > 0)] = np.nan  # nothing trains: no policy is best there
    fig, ax = plt.subplots(figsize=(1.6 * len(mtbfs) + 2.5, 0.9 * len(sizes) + 1.8))
    cmap = ListedColormap(list(POLICY_COLOURS.values())).with_extremes(bad="none")  # the patch draws the cell
    ax.imshow(np.ma.masked_invalid(codes), cmap=cmap, vmin=-0.5, vmax=len(policies) - 0.5, aspect="auto",
              origin="lower")
    for i, n in enumerate(sizes):
        for j, m in enumerate(mtbfs):
            row = best[(best["nodes"] == n) & (best["mtbf_h"] == m)].iloc[0]
            if np.isnan(codes[i, j]):  # a cell of its own colour, drawn as a patch the key can name
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, color=NOTHING_TRAINS_COLOUR, label="no policy trains"))
                ax.text(j, i, "nothing\ntrains", ha="center", va="center", fontsize=7, color="black")
                continue
            ax.text(j, i, f"{row['efficiency']:.0%}\n{row['interval_label']}", ha="center", va="center", fontsize=7,
                    color="white")
    ax.set_xticks(range(len(mtbfs)), [f"{m:g} h" for m in mtbfs])
    ax.set_yticks(range(len(sizes)), [str(n) for n in sizes])
    ax.set_xlabel("node MTBF")
    ax.set_ylabel("job nodes")
    ax.set_title("best recovery policy per cell (goodput efficiency, best checkpoint interval)", fontsize=9)
    shown = [p for p in policies if p in set(best.loc[best["efficiency"] > 0, "policy"])]
    handles = [Patch(color=POLICY_COLOURS[p], label=p) for p in shown]
    if np.isnan(codes).any():
        handles.append(next(patch for patch in ax.patches if patch.get_label() == "no policy trains"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return save_figure_atomic(fig, path)
