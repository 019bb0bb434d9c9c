"""Figures of the controller: training curves (gSDE vs Gaussian) and the held-out comparison."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.plotting import coinciding_line, readable_log_axis, use_file_backend  # noqa: E402

use_file_backend()  # files only, unless a notebook's pyplot is already in use
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from flexcomm.costmodel.atomic import save_figure_atomic  # noqa: E402
from flexcomm.emulation.seeds import accuracy_bands  # noqa: E402

COLOURS = {"gsde": "#9467bd", "gaussian": "#ff7f0e", "moo": "#d62728", "dense": "#7f7f7f"}  # far apart in RGB
STATIC_STYLES = {"topk-ag": "-", "topk-ar": "--"}


#: A static baseline's colour by its ratio (a hue each: six shades of one blue could not be told apart); its
#: scheme is its line style and marker (:data:`STATIC_STYLES`, :data:`STATIC_MARKERS`).
RATIO_COLOURS = {0.1: "#1f77b4", 0.01: "#2ca02c", 0.001: "#8c564b", 0.0001: "#e377c2"}
STATIC_MARKERS = {"topk-ag": "o", "topk-ar": "^"}


def _colour(name: str) -> str | None:
    if name in COLOURS:
        return COLOURS[name]
    if name.startswith(("topk-ag", "topk-ar")):
        ratio = float(name.split("@")[1]) if "@" in name else 0.01
        nearest = min(RATIO_COLOURS, key=lambda r: abs(np.log10(r) - np.log10(ratio)))
        return RATIO_COLOURS[nearest]
    return None


def _marker(name: str) -> str:
    return STATIC_MARKERS.get(name.split("@")[0], "o")


def _style(name: str) -> str:
    return STATIC_STYLES.get(name.split("@")[0], "-")


def plot_training_curves(curves: pd.DataFrame, path: str | Path, window: int = 10,
                         evals: pd.DataFrame | None = None) -> Path:
    """Left: rollout episode returns against timesteps (dots) and their running mean of ``window``.
    Right (with ``evals``): the deterministic policy's mean return on the fixed episodes against timesteps,
    with the references (random policy, static c) as horizontal lines.

    With a ``seed`` column (several training runs), one line per (variant, seed), styles by seed.
    """
    import matplotlib.patheffects as effects

    panels = 2 if evals is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(7.5 * panels, 4.8), squeeze=False)
    ax = axes[0, 0]
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D"]  # one per seed: dots of two seeds in one colour stay two series
    seeds = list(dict.fromkeys(curves["seed"])) if "seed" in curves else [None]
    outline = [effects.Stroke(linewidth=4.2, foreground="white"), effects.Normal()]
    for variant, part in curves.groupby("variant", sort=False):
        colour = COLOURS.get(str(variant))
        for i, seed in enumerate(seeds):
            run = part if seed is None else part[part["seed"] == seed]
            if run.empty:
                continue
            suffix = "" if seed is None else f" seed {seed}"
            # every episode's return, plainly visible: the running mean alone hides how noisy they are
            ax.scatter(run["timesteps"], run["return"], s=14, alpha=0.55, color=colour, lw=0,
                       marker=markers[i % len(markers)], zorder=2, label=f"{variant}{suffix}: one episode")
            smooth = run["return"].rolling(window, min_periods=1).mean()
            ax.plot(run["timesteps"], smooth, color=colour, lw=2.2, ls=styles[i % len(styles)], zorder=3,
                    path_effects=outline, label=f"{variant}{suffix}: running mean of {window}")
    ax.set_xlabel("timesteps (env steps = reconfiguration intervals)")
    ax.set_ylabel("rollout episode return")
    ax.set_title("rollouts (exploration on, random trace per episode)")
    if evals is not None:
        ax_eval = axes[0, 1]
        references = {"random": "#bcbd22", "c=0.01 auto": "#17becf"}
        eval_seeds = list(dict.fromkeys(evals["seed"])) if "seed" in evals else [None]
        drawn = 0
        for i, seed in enumerate(eval_seeds):
            part = evals if seed is None else evals[evals["seed"] == seed]
            suffix = "" if seed is None else f" seed {seed}"
            for variant, run in part.groupby("variant", sort=False):
                if variant in references:
                    # beneath the policies, widest first: a reference equal to another line (a policy that
                    # learnt the static c, the random policy's return) shows as its border, not hidden by it
                    width = WIDTHS[min(len(WIDTHS) - 1, drawn)]
                    drawn += 1
                    ax_eval.axhline(run["mean_return"].iloc[0], color=references[str(variant)],
                                    ls=styles[i % len(styles)], lw=width, alpha=0.6, zorder=1,
                                    label=f"{variant}{suffix}")
                else:
                    ax_eval.plot(run["timesteps"], run["mean_return"], marker="o", color=COLOURS.get(str(variant)),
                                 ls=styles[i % len(styles)], lw=1.6, zorder=3, label=f"{variant}{suffix}")
        ax_eval.set_xlabel("timesteps")
        ax_eval.set_ylabel("mean return on the fixed episodes (deterministic policy)")
        ax_eval.set_title("evaluation: same traces and model seeds every time")
        ax_eval.grid(alpha=0.3)
        ax_eval.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle("PPO on the compression environment: gSDE vs Gaussian exploration")
    fig.tight_layout()
    return save_figure_atomic(fig, path)


#: Line widths in drawing order (widest first), so coinciding runs nest instead of hiding each other.
WIDTHS = (8.0, 5.0, 3.0, 1.8, 1.1, 0.8, 0.6)


def plot_comparison(frames: pd.DataFrame, path: str | Path, targets: dict[str, float] | None = None) -> Path:
    """Per held-out trace (columns): test accuracy vs simulated time, chosen c vs step, and the link's bandwidth."""
    traces = list(dict.fromkeys(frames["trace"]))
    fig, axes = plt.subplots(3, len(traces), figsize=(5.2 * len(traces), 11), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2, 1]})
    for col, trace in enumerate(traces):
        ax_acc, ax_c, ax_net = axes[0, col], axes[1, col], axes[2, col]
        part = frames[frames["trace"] == trace]
        drawn, low, triangles = 0, 0.5, False
        accuracy_lines: list = []  # (line, x, y) drawn in this column's accuracy panel
        ratio_lines: list = []
        for name, runs in part.groupby("strategy", sort=False):
            name = str(name)
            per_seed = [r for _, r in runs.groupby("seed", sort=False)] if "seed" in runs else [runs]
            run = per_seed[0]  # the chosen c of one seed: several seeds' decisions would only blur each other
            band = accuracy_bands(per_seed)
            learned = name in ("gsde", "gaussian", "moo")
            # drawn widest first: runs that coincide (short or static traces) show as a line inside a line
            width = WIDTHS[min(len(WIDTHS) - 1, drawn)]
            drawn += 1
            low = min(low, float(band["test_acc_lo"].min())) if len(band) else low
            twin = coinciding_line(band["sim_time_s"], band["test_acc"], accuracy_lines, rtol=0.005)
            if twin is not None:  # the same curve (a short or static trace): drawn once, named for both
                twin.set_label(f"{twin.get_label()} = {name}")
            else:
                if len(per_seed) > 1 and (learned or name == "dense"):  # the static baselines' bands overlapped
                    ax_acc.fill_between(band["sim_time_s"], band["test_acc_lo"], band["test_acc_hi"],
                                        color=_colour(name), alpha=0.12, lw=0, zorder=1)
                (line,) = ax_acc.plot(band["sim_time_s"], band["test_acc"], color=_colour(name), ls=_style(name),
                                      lw=width, marker=_marker(name), ms=2 + width,
                                      markevery=max(1, len(band) // 8), label=name, zorder=3)
                accuracy_lines.append((line, band["sim_time_s"].to_numpy(dtype=float),
                                       band["test_acc"].to_numpy(dtype=float)))
            ratio_twin = coinciding_line(run["step"], run["ratio"], ratio_lines, rtol=0.005) if learned else None
            if ratio_twin is not None:
                ratio_twin.set_label(f"{ratio_twin.get_label()} = {name}")
            elif learned:
                (line,) = ax_c.plot(run["step"], run["ratio"], color=_colour(name), lw=width, label=name)
                ratio_lines.append((line, run["step"].to_numpy(dtype=float), run["ratio"].to_numpy(dtype=float)))
                ar = run[run["scheme"] == "topk-ar"]
                if len(ar):
                    ax_c.scatter(ar["step"], ar["ratio"], marker="^", s=8, color=_colour(name), zorder=5)
                    triangles = True
        if targets and trace in targets and np.isfinite(targets[trace]):
            ax_acc.axhline(targets[trace], color="k", lw=0.6, ls=":")
        first = part[part["strategy"] == part["strategy"].iloc[0]]
        if "seed" in first:  # the trace is the same for every seed
            first = first[first["seed"] == first["seed"].iloc[0]]
        ax_net.step(first["step"], first["net_bandwidth_Bps"] * 8 / 1e9, where="post", color="k")
        latency_ms = first["net_latency_s"].to_numpy(dtype=float) * 1e3
        if np.ptp(latency_ms) > 0:  # a second axis only for a latency that changes: two flat lines coincided
            ax_lat = ax_net.twinx()
            ax_lat.step(first["step"], latency_ms, where="post", color="tab:red", lw=0.8, ls="--")
            ax_lat.set_ylabel("latency (ms)", color="tab:red")
        else:
            ax_net.set_title(f"latency {latency_ms[0]:.3g} ms throughout", fontsize=8)
        ax_acc.set_xscale("log")
        readable_log_axis(ax_acc, "x")  # the ticks that fit, whatever span the runs' times cover
        ax_acc.set_ylim(max(0.0, low - 0.05), 1.0)  # no run below the frame, however short
        seeds = part["seed"].nunique() if "seed" in part else 1
        ax_acc.set_title(f"trace {trace}" + (f": mean over {seeds} seeds, 95 % band for the learned and dense"
                                             if seeds > 1 else ""))
        ax_acc.set_xlabel("simulated time (s)")
        ax_acc.set_ylabel("test accuracy")
        ax_c.set_yscale("log")
        ax_c.set_ylim(8e-4, 0.12)
        ax_c.set_xlabel("iteration")
        ax_c.set_ylabel("compression ratio c" + (" (triangles: topk-ar)" if triangles else "")
                        + (", first seed" if seeds > 1 else ""))
        ax_net.set_xlabel("iteration")
        ax_net.set_ylabel("bandwidth (Gbit/s)")
        for ax in (ax_acc, ax_c):
            ax.grid(alpha=0.3)
        # every column its own legend: coinciding runs are merged per trace, so the names differ by column
        ax_acc.legend(fontsize=7)
        if ratio_lines:
            ax_c.legend(fontsize=7)
    fig.tight_layout()
    return save_figure_atomic(fig, path)
