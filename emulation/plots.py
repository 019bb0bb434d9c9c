"""Figures of emulated training: accuracy against simulated time and steps, and what adaptive runs chose."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.plotting import use_file_backend  # noqa: E402

use_file_backend()  # files only, unless a notebook's pyplot is already in use
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from flexcomm.costmodel.atomic import save_figure_atomic  # noqa: E402
from flexcomm.costmodel.plotting import (  # noqa: E402
    SCHEME_COLOURS,  # noqa: E402
    readable_log_axis,
    strategy_style,
)

SCHEME_MARKERS = {"dense": "s", "topk-ag": "o", "topk-ar": "^"}
#: What each exchange is called where a figure explains it (a legend, a strip's key).
SCHEME_NAMES = {"topk-ag": "Top-k over Allgather (topk-ag)", "topk-ar": "AR-compatible Top-k (topk-ar)",
                "dense": "dense allreduce"}
ADAPTIVE = ("flexible", "moo")


def switches(frame: pd.DataFrame) -> int:
    """How often a run changed its exchange scheme between consecutive steps."""
    schemes = frame["scheme"].astype(str).to_numpy()
    return int((schemes[1:] != schemes[:-1]).sum())


def _same_curve(a: pd.DataFrame, b: pd.DataFrame, columns: tuple[str, ...]) -> bool:
    """Whether two runs draw the same line in every panel that plots ``columns`` (NaN equal to NaN)."""
    import numpy as np

    if len(a) != len(b) or any(c not in a or c not in b for c in columns):
        return False
    return all(np.allclose(a[c].to_numpy(dtype=float), b[c].to_numpy(dtype=float), rtol=1e-9, atol=0.0,
                           equal_nan=True) for c in columns)


def twins(data: dict[str, pd.DataFrame], columns: tuple[str, ...]) -> dict[str, str]:
    """Strategy -> the earlier strategy whose curve it repeats exactly (flexible that never left Allgather is
    topk-ag step for step). Such a line is drawn once and named for both: drawn twice, one hides the other."""
    found: dict[str, str] = {}
    names = list(data)
    for i, name in enumerate(names):
        for first in names[:i]:
            if first not in found and _same_curve(data[first], data[name], columns):
                found[name] = first
                break
    return found


def _names(frames: dict[str, pd.DataFrame]) -> dict[str, str]:
    """Legend names: an adaptive strategy says how often it switched (0 switches is why it equals a static one)."""
    out = {}
    for name, frame in frames.items():
        count = switches(frame) if name in ADAPTIVE and "scheme" in frame else None
        out[name] = name if count is None else f"{name} ({count} switch{'' if count == 1 else 'es'})"
    return out


def _merged_labels(names: dict[str, str], same: dict[str, str]) -> dict[str, str]:
    """The label of each drawn line, the strategies it stands for joined by ' = '."""
    labels = dict(names)
    for name, first in same.items():
        labels[first] = f"{labels[first]} = {names[name]}"
    return labels


def plot_emulation(frames: dict[str, pd.DataFrame], path: str | Path, title: str = "",
                   bands: dict[str, pd.DataFrame] | None = None) -> Path:
    """Test accuracy vs simulated time and vs step, the simulated clock (MOO's gain probes marked), the ratio
    each run used and, beneath it, the scheme each adaptive run used per step over the network's phases.

    Why both x axes: compression changes time per step *and* progress per step; only accuracy against
    time says which strategy is faster to a given accuracy. Why the scheme strip: the paper's mechanism is
    the switch between Allgather and AR-compatible Top-k when the network changes; a strip per adaptive run
    under the network's phases shows when it happened (or that it never did). Runs that coincide exactly
    (flexible that never switched is topk-ag) are drawn once and named for both ("topk-ag = flexible
    (0 switches)"); drawn twice, one would hide the other.
    ``bands`` (per strategy, from :func:`emulation.seeds.accuracy_bands`): the accuracy panels draw the mean
    over seeds with its 95 % band instead of one run; the clock, ratio and scheme panels show ``frames``
    (one seed).
    """
    adaptive = [n for n in frames if n in ADAPTIVE and "scheme" in frames[n]]
    network = _network_phases(next(iter(frames.values()))) if frames else []
    strip_rows = len(adaptive) + (1 if len(network) > 1 else 0) if adaptive else 0
    # a ratio panel only where the ratio tells something: a run that chose it, or runs at different ratios
    # (with one fixed c for every run it was a quarter of the figure holding one constant bar)
    fixed = {float(f["ratio"].iloc[0]) for n, f in frames.items() if n != "dense" and n not in adaptive and len(f)}
    ratio_panel = bool(adaptive) or len(fixed) > 1
    fig = plt.figure(figsize=(12, 9.0 + 0.25 * strip_rows), layout="constrained")
    grid = fig.add_gridspec(3, 2, height_ratios=(3.2, 2.4, 0.35 + 0.3 * strip_rows if strip_rows else 0.01))
    ax_time, ax_step = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_clock = fig.add_subplot(grid[1:, 0] if ratio_panel else grid[1:, :])
    names = _names(frames)
    _accuracy_panels(ax_time, ax_step, frames, bands, names)
    _clock_panel(ax_clock, frames, names)
    logs = [(ax_time, "x"), (ax_clock, "y")]
    if ratio_panel:
        ax_ratio = fig.add_subplot(grid[1, 1]) if strip_rows else fig.add_subplot(grid[1:, 1])
        _ratio_panel(ax_ratio, frames, names, beneath=bool(strip_rows))
        logs.append((ax_ratio, "y"))
        if strip_rows:
            _scheme_strip(fig.add_subplot(grid[2, 1]), frames, adaptive, network, names, ax_ratio)
    elif fixed:
        ax_clock.set_title(ax_clock.get_title() + f"; every compressed run kept c = {fixed.pop():.3g}")
    if title:
        fig.suptitle(title)
    for ax, which in logs:
        readable_log_axis(ax, which)
    return save_figure_atomic(fig, path)


def _accuracy_panels(ax_time, ax_step, frames: dict[str, pd.DataFrame],  # noqa: ANN001
                     bands: dict[str, pd.DataFrame] | None, names: dict[str, str]) -> None:
    """Accuracy against simulated time and against steps: one run, or the mean over seeds with its band."""
    if bands is not None:
        data = {n: bands[n] for n in frames if n in bands}
        same = twins(data, ("sim_time_s", "test_acc", "test_acc_lo", "test_acc_hi"))
    else:
        data = {n: f.dropna(subset=["test_acc"]) for n, f in frames.items()}
        same = twins(data, ("step", "sim_time_s", "test_acc"))
    labels = _merged_labels(names, same)
    for name, part in data.items():
        if name in same:
            continue
        style = strategy_style(name)
        for ax, x in ((ax_time, part["sim_time_s"]), (ax_step, part["step"])):
            if bands is not None:
                seeds = int(part["seeds"].max())
                ax.fill_between(x, part["test_acc_lo"], part["test_acc_hi"], color=style["color"], alpha=0.18,
                                lw=0, label=f"{labels[name]}: 95 % band ({seeds} seeds)")
                ax.plot(x, part["test_acc"], ms=4, label=f"{labels[name]} (mean)", **style)
            else:
                ax.plot(x, part["test_acc"], ms=4, label=labels[name], **style)
    ax_time.set_xscale("log")
    ax_time.set_xlabel("simulated time (s, log)")
    ax_time.set_title("accuracy vs simulated time")
    ax_step.set_xlabel("step")
    ax_step.set_title("accuracy vs steps")
    for ax in (ax_time, ax_step):
        ax.set_ylabel("test accuracy")
        ax.grid(True, which="both", alpha=0.3)
    ax_step.legend(fontsize=8)


def _clock_panel(ax, frames: dict[str, pd.DataFrame], names: dict[str, str]) -> None:  # noqa: ANN001
    """Simulated time against step; the steps where MOO probed its candidate ratios' gains are marked, since
    the probes' cost (steps trained and thrown away) is the jump there."""
    same = twins(frames, ("step", "sim_time_s"))
    labels = _merged_labels(names, same)
    for name, frame in frames.items():
        if name not in same:
            ax.plot(frame["step"], frame["sim_time_s"], label=labels[name], **strategy_style(name, markers=False))
        probes = frame[frame["probe_s"] > 0] if "probe_s" in frame else frame.iloc[:0]
        if len(probes):
            ax.scatter(probes["step"], probes["sim_time_s"], marker="X", s=70, color=strategy_style(name)["color"],
                       edgecolors="k", linewidths=0.6, zorder=6,
                       label=f"{name}: gain probes ({len(probes)} round{'' if len(probes) == 1 else 's'}, "
                             f"{probes['probe_s'].sum():.3g} s in all)")
    ax.set_xlabel("step")
    ax.set_ylabel("simulated time (s)")
    ax.set_yscale("log")
    ax.set_title("simulated clock (compute + communication + compression + probes)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def _ratio_panel(ax, frames: dict[str, pd.DataFrame], names: dict[str, str],  # noqa: ANN001
                 beneath: bool = True) -> None:
    """The ratio c each run kept per step: runs at one configured c share one wide band (named together); MOO's
    chosen c is a line, however rarely it changed."""
    fixed: dict[tuple, list[str]] = {}  # runs by their ratio series: identical ones share a band
    for name, frame in frames.items():
        if name == "dense":
            continue
        ratios = frame["ratio"].to_numpy(dtype=float)
        if name != "moo" and ratios.size and (ratios == ratios[0]).all():  # MOO's c is chosen, even if once
            fixed.setdefault(tuple(frame["ratio"].round(12)), []).append(name)
        else:
            ax.plot(frame["step"], frame["ratio"], drawstyle="steps-post", color=strategy_style(name)["color"],
                    lw=2.0, zorder=3, label=f"{names[name]}: c chosen per step")
    for ratios, members in fixed.items():
        first = frames[members[0]]
        ax.plot(first["step"], ratios, color=strategy_style(members[0])["color"], lw=10, alpha=0.45,
                solid_capstyle="butt", zorder=1, label=f"{', '.join(members)}: fixed c = {ratios[0]:.3g}")
    ax.margins(y=0.15)  # a band at the panel's edge would be half clipped
    ax.set_xlabel("step")
    ax.set_ylabel("compression ratio c\n(fraction kept)")
    ax.set_yscale("log")
    ax.set_title("compression ratio per step" + (" (scheme per step beneath)" if beneath else ""))
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _network_phases(frame: pd.DataFrame) -> list[tuple[int, int, float, float]]:
    """(first step, steps, latency s, bandwidth bytes/s) of each stretch of one network setting."""
    if "net_latency_s" not in frame or "net_bandwidth_Bps" not in frame or frame.empty:
        return []
    net = frame[["net_latency_s", "net_bandwidth_Bps"]].to_numpy(dtype=float)
    steps = frame["step"].to_numpy()
    starts = [0] + [i for i in range(1, len(net)) if (net[i] != net[i - 1]).any()]
    ends = starts[1:] + [len(net)]
    return [(int(steps[s]), int(e - s), float(net[s, 0]), float(net[s, 1])) for s, e in zip(starts, ends, strict=True)]


def _scheme_strip(ax, frames: dict[str, pd.DataFrame], adaptive: list[str],  # noqa: ANN001
                  network: list[tuple[int, int, float, float]], names: dict[str, str], ax_ratio) -> None:  # noqa: ANN001
    """One row per adaptive run, coloured by the scheme of each step, under a row of the network's phases."""
    from matplotlib.patches import Patch


    rows: list[str] = []
    if len(network) > 1:
        shades = plt.get_cmap("Greys")
        fast = max(bw for *_, bw in network)
        for start, length, latency, bandwidth in network:
            shade = shades(0.15 + 0.3 * (1 - bandwidth / fast))
            ax.broken_barh([(start - 0.5, length)], (-0.4, 0.8), facecolors=[shade], edgecolors="white", lw=0.8)
            ax.text(start - 0.5 + length / 2, 0, f"{bandwidth * 8 / 1e9:.3g} Gbit/s, {latency * 1e3:.3g} ms",
                    ha="center", va="center", fontsize=7, clip_on=True)
        rows.append("network")
    used: list[str] = []
    for name in adaptive:
        frame = frames[name]
        schemes = frame["scheme"].astype(str).to_numpy()
        steps = frame["step"].to_numpy()
        starts = [0] + [i for i in range(1, len(schemes)) if schemes[i] != schemes[i - 1]]
        ends = starts[1:] + [len(schemes)]
        for scheme in dict.fromkeys(schemes):
            spans = [(steps[s] - 0.5, e - s) for s, e in zip(starts, ends, strict=True) if schemes[s] == scheme]
            ax.broken_barh(spans, (len(rows) - 0.4, 0.8), facecolors=[SCHEME_COLOURS.get(scheme, "#444444")],
                           lw=0)
            used += [scheme] if scheme not in used else []
        rows.append(names[name])
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(ax_ratio.get_xlim())
    ax.set_xlabel("step")
    used.sort(key=lambda s: (list(SCHEME_NAMES).index(s) if s in SCHEME_NAMES else len(SCHEME_NAMES), s))
    handles = [Patch(facecolor=SCHEME_COLOURS.get(s, "#444444"), label=SCHEME_NAMES.get(s, s)) for s in used]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.55 if len(rows) < 3 else -0.4),
              ncol=len(handles), frameon=False)


#: The definition the figures print beside a "compression gain" axis (compression/base.py measures it).
GAIN_DEFINITION = "compression gain = |sent gradient|² / |error-fed gradient|² (1: nothing held back)"


def plot_pareto_fronts(fronts: pd.DataFrame, path: str | Path, max_panels: int = 4) -> Path:
    """One panel per ratio decision: the NSGA-II front (step time vs compression gain), coloured by the
    ratio c, marked by the scheme each point would use (o Allgather, ^ AR-compatible Top-k), with the
    operating point the rule picked starred.

    Why: the choice of c is a trade-off between time per step and gradient information kept; the front
    shows how much of one each unit of the other costs, and whether the chosen point sits at the knee. The
    panel's title says how far the step time moves along the front: on a fast network it barely moves
    (a few %), which is why the rule then keeps much of the gradient.
    """
    import numpy as np
    from matplotlib.colors import LogNorm
    steps = list(dict.fromkeys(fronts["step"]))
    if len(steps) > max_panels:  # first, last and evenly spaced ones between
        steps = [steps[int(i)] for i in np.linspace(0, len(steps) - 1, max_panels).round()]
    fig, axes = plt.subplots(1, len(steps), figsize=(4.4 * len(steps) + 1, 4.3), squeeze=False, layout="constrained")
    norm = LogNorm(vmin=float(fronts["c"].min()), vmax=float(fronts["c"].max()))
    points = None
    for ax, step in zip(axes[0], steps, strict=True):
        front = fronts[fronts["step"] == step].sort_values("step_s")
        schemes = front["scheme"].astype(str) if "scheme" in front else pd.Series("", index=front.index)
        for scheme in sorted(set(schemes), key=lambda s: (s not in SCHEME_MARKERS, s)):
            part = front[schemes == scheme]
            points = ax.scatter(part["step_s"] * 1e3, part["gain"], c=part["c"], cmap="viridis", norm=norm,
                                marker=SCHEME_MARKERS.get(scheme, "o"), s=22 if scheme == "topk-ar" else 16,
                                zorder=2, label=SCHEME_NAMES.get(scheme, scheme or "front"))
        chosen = front[front["chosen"].astype(bool)]
        picked = zip(chosen["c"], chosen.get("scheme", [None] * len(chosen)), strict=True)
        ax.scatter(chosen["step_s"] * 1e3, chosen["gain"], marker="*", s=180, color="#d62728", zorder=3,
                   edgecolors="k", linewidths=0.4,
                   label="chosen: " + ", ".join(f"c = {c:.3g}" + (f", {sc}" if isinstance(sc, str) else "")
                                                for c, sc in picked))
        reason = str(front["reason"].iloc[0]) if "reason" in front else ""
        lo, hi = float(front["step_s"].min()), float(front["step_s"].max())
        ax.set_title(f"step {step} ({reason}): step time moves {100 * (hi / lo - 1):.3g} % along the front",
                     fontsize=9)
        ax.set_xlabel("predicted step time (ms)")
        ax.set_ylabel("compression gain")
        ax.grid(True, alpha=0.3)
        legend = ax.legend(fontsize=7, loc="lower right")
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            if not text.get_text().startswith("chosen"):  # the shape is the key; the colour is c's
                handle.set_array(None)
                handle.set_facecolor("0.45")
                handle.set_edgecolor("0.45")
    if points is not None:
        bar = fig.colorbar(points, ax=axes[0].tolist(), label="compression ratio c (fraction kept)")
        readable_log_axis(bar.ax, "y")
    fig.suptitle("Pareto fronts of the compression ratio: time per step vs statistical efficiency\n"
                 + GAIN_DEFINITION, fontsize=10)
    return save_figure_atomic(fig, Path(path))
