"""One figure per published run: bus bandwidth against size, measured and predicted, NCCL's choice marked,
and beneath it predicted / measured with the targets' bands.

Why busbw and not time: it is what nccl-tests prints and what people quote, and a flat asymptote shows the
bandwidth term while the small-size slope shows the latency term. Each predicted point is marked by the
(algorithm, protocol) NCCL's tuner picks at that size, so a miss at a switch-over is visible as such. Why the
second panel: on a busbw axis spanning ten decades a 25 % miss is a hair's width, so a run that misses its
targets looked like a perfect fit; the ratio panel shows every miss at its true size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.collectives import BUS_BANDWIDTH_FACTOR
from flexcomm.costmodel.plotting import plain_number, readable_log_axis, use_file_backend
from flexcomm.costmodel.units import format_size
from flexcomm.experiments.published_targets import MIN_ROWS, SUMMARY_MIN_BYTES, TARGET_MEDIAN, TARGET_WORST

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def verdict(result: Any) -> str:
    """The run against its targets in words: on a busbw axis over ten decades a 25 % miss looks like a fit, so
    the figure says the numbers the report judges (median and worst |error| of the rows >= 1 MiB)."""
    errors = [abs(r["predicted_s"] / r["measured_s"] - 1.0) for r in result.rows
              if r["bytes"] >= SUMMARY_MIN_BYTES and r["measured_s"] > 0]
    if not errors:
        return "relative error of the predicted time per size (no rows >= 1 MiB to judge)"
    median, worst = float(np.median(errors)), max(errors)
    baseline = [abs(r["baseline_s"] / r["measured_s"] - 1.0) for r in result.rows
                if r["bytes"] >= SUMMARY_MIN_BYTES and r.get("baseline_s")]
    against = f"; alpha-beta baseline {float(np.median(baseline)):.1%}" if baseline else ""
    met = median <= TARGET_MEDIAN and worst <= TARGET_WORST
    judged = (("targets met" if met else "targets missed") if len(errors) >= MIN_ROWS
              else f"{len(errors)} row{'' if len(errors) == 1 else 's'}: too few to judge")
    return (f"rows >= 1 MiB: median |error| {median:.1%}, worst {worst:.1%} "
            f"(targets {TARGET_MEDIAN:.0%} / {TARGET_WORST:.0%}: {judged}){against}")


#: Ratios the predicted / measured axis may label: round ones, symmetric about 1 on a log axis.
_RATIO_TICKS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)


def _ratio_ticks(ax: Any, spread: float) -> None:
    """Label the ratio axis at round ratios inside (1/spread, spread), at most seven, always 1: the default
    log ticks labelled only 1 and 1.5 on an axis whose points sat at 0.5."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator


    ticks = [t for t in _RATIO_TICKS if 1 / spread <= t <= spread]
    while len(ticks) > 7:
        ticks = ticks[::2] if 1.0 in ticks[::2] else ticks[1::2]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: plain_number(value)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def plot_run(result: Any, path: Path) -> Path:
    """``result``: a :class:`experiments.published.RunResult` or a pasted log's
    :class:`costmodel.collective_libraries.log_check.NcclTestsCheck` (``run_id``, ``collective``, ``ranks``,
    ``hardware_class``, ``rows``; typed loosely: either is drawn the same way)."""
    use_file_backend()
    import matplotlib.pyplot as plt

    ranks = float(result.ranks or 1)
    factor = float(BUS_BANDWIDTH_FACTOR.get(result.collective, lambda p: np.ones_like(p))(np.asarray(ranks)))
    sizes = np.array([r["bytes"] for r in result.rows], dtype=float)
    measured = sizes / np.array([r["measured_s"] for r in result.rows]) * factor / 1e9
    predicted = sizes / np.array([r["predicted_s"] for r in result.rows]) * factor / 1e9
    labels = [r["algorithm"] if r["protocol"] in (None, "p2p") else f"{r['algorithm']}/{r['protocol']}"
              for r in result.rows]
    fig, (ax, err) = plt.subplots(2, 1, figsize=(7, 6.0), sharex=True, height_ratios=(3, 2))
    few = len(sizes) < 3  # a line through one or two sizes is hardly a line: mark its points as well
    ax.plot(sizes, measured, "k-", lw=1.6, marker="_" if few else "None", ms=16, mew=2, label="measured (published)")
    ratio = np.array([r["predicted_s"] / r["measured_s"] for r in result.rows])
    for i, label in enumerate(dict.fromkeys(labels)):
        mask = np.array([lab == label for lab in labels])
        marker = _MARKERS[i % len(_MARKERS)]
        ax.plot(sizes[mask], predicted[mask], marker, ms=5, ls="none", label=f"predicted: {label}")
        err.plot(sizes[mask], ratio[mask], marker, ms=5, ls="none", color=f"C{i % 10}")
    if result.rows[0].get("baseline_s"):
        baseline = sizes / np.array([r["baseline_s"] for r in result.rows]) * factor / 1e9
        ax.plot(sizes, baseline, color="0.45", ls="-.", lw=1.0, marker="+" if few else "None", ms=8,
                label="naive baseline: alpha-beta at datasheet rates")
    if "loro_predicted_s" in result.rows[0]:
        loro = sizes / np.array([r["loro_predicted_s"] for r in result.rows]) * factor / 1e9
        ax.plot(sizes, loro, color="tab:orange", ls="--", lw=1.0, marker="x" if few else "None", ms=7,
                label="leave-one-run-out calibrated")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    low, high = sizes.min(), sizes.max()
    ticks = [2.0 ** e for e in range(0, 41, 2) if low / 2 <= 2.0 ** e <= high * 2]
    readable_log_axis(ax, "y")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{result.run_id}\n{result.collective}, {result.ranks} ranks, class {result.hardware_class}",
                 fontsize=9)
    ax.grid(True, which="both", alpha=.3)
    ax.legend(fontsize=7, loc="best")
    err.axhspan(1 - 0.05, 1 + 0.05, color="tab:green", alpha=0.25, lw=0, label="within 5 % (median target)")
    for k, bound in enumerate((1 - 0.15, 1 + 0.15)):
        err.axhline(bound, color="tab:green", ls=":", lw=1.0, label="15 % (worst-row target)" if k == 0 else "_")
    err.axhline(1.0, color="k", lw=0.8)
    err.set_yscale("log")
    spread = max(1.3, float(np.max(np.maximum(ratio, 1 / ratio))) * 1.15)
    err.set_ylim(1 / spread, spread)
    _ratio_ticks(err, spread)
    err.set_ylabel("predicted / measured time", fontsize=8)
    err.set_title(verdict(result), fontsize=8, loc="left")
    err.legend(fontsize=7, loc="best")
    err.set_xticks(ticks, [format_size(t) for t in ticks], fontsize=7, rotation=45)
    ax.tick_params(labelbottom=True, labelsize=7)  # both panels keep their sizes: each reads on its own
    err.set_xlabel("size (nccl-tests bytes)")
    err.grid(True, which="major", alpha=.3)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)
    return path


def plot_transfer(frame: Any, path: Path) -> Path:
    """Every judged (calibration run, predicted run) pair: the calibrated model's median |error| over the predicted
    run's rows >= 1 MiB against the bus-bandwidth baseline's, one colour per system, one marker per kind of change.
    Below the diagonal the model beats the baseline; inside the shaded corner both meet the 5 % target."""
    from matplotlib.ticker import FuncFormatter


    use_file_backend()
    import matplotlib.pyplot as plt

    judged = frame[(frame["judged"] == True) & frame["median_abs_error"].notna()  # noqa: E712
                   & frame["baseline_median_abs_error"].notna()]
    fig, ax = plt.subplots(figsize=(7.5, 6.0))
    floor = 0.002
    values = np.concatenate([judged["median_abs_error"].to_numpy(float),
                             judged["baseline_median_abs_error"].to_numpy(float)]) if len(judged) else np.array([1.0])
    top = max(1.0, float(np.nanmax(values)) * 1.5)
    kinds = {"collective": "s", "nodes": "o", "collective, nodes": "D"}
    kind = judged["change"].map(lambda c: c if c in kinds else "release, algorithm or a repeat")
    markers = {**kinds, "release, algorithm or a repeat": "^"}
    for i, (system, group) in enumerate(judged.groupby("system", sort=True)):
        for change, marker in markers.items():
            part = group[kind[group.index] == change]
            if len(part):
                ax.plot(np.maximum(part["baseline_median_abs_error"], floor), np.maximum(part["median_abs_error"],
                        floor), marker, color=f"C{i % 10}", ms=6, alpha=0.8, ls="none", label="_")
        ax.plot([], [], "o", color=f"C{i % 10}", label=f"{system} ({len(group)} pairs)")
    for change, marker in markers.items():
        if (kind == change).any():
            ax.plot([], [], marker, color="0.4", label=f"change: {change}")
    ax.plot([floor, top], [floor, top], color="k", lw=0.8, label="model = baseline")
    ax.fill_between([floor, TARGET_MEDIAN], floor, TARGET_MEDIAN, color="tab:green", alpha=0.15, lw=0,
                    label=f"both within {TARGET_MEDIAN:.0%}")
    ax.axhline(TARGET_MEDIAN, color="tab:green", ls=":", lw=1.0, label=f"model within {TARGET_MEDIAN:.0%} (target)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, top)
    ax.set_ylim(floor, top)
    percent = FuncFormatter(lambda v, _: f"{v:.0%}" if v >= 0.01 else f"{v:.1%}")
    ax.xaxis.set_major_formatter(percent)
    ax.yaxis.set_major_formatter(percent)
    ax.set_xlabel("baseline: the calibration run's bus bandwidth applied as is\n(median |error|, rows >= 1 MiB)")
    ax.set_ylabel("calibrated model (median |error|, rows >= 1 MiB)")
    met = int(judged["meets_target"].sum())
    beats = int((judged["median_abs_error"] < judged["baseline_median_abs_error"]).sum())
    ax.set_title(f"Calibrate on one run, predict the others of its system: {met} of {len(judged)} pairs meet the "
                 f"targets;\nthe model is closer than the baseline in {beats} (points below the diagonal)",
                 fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)
    return path
