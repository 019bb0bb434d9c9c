"""Figures of a placement run: search curves against wall time, and a per-device timeline."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.placement.compare import Comparison
from flexcomm.placement.simulator import PlacementProblem

_COLOURS = {"ppo": "tab:purple", "sync-es": "tab:orange", "async-es": "tab:green"}


def search_curves(comparison: Comparison, path: str | Path, title: str) -> Path:
    """Best step time found against wall time per search, the baselines as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    horizon = max([c[-1][0] for c in comparison.curves.values() if c] + [1e-3])
    horizon = max([horizon] + [r.search_s for r in comparison.results if r.method in comparison.curves])
    for method, curve in comparison.curves.items():
        if not curve:
            continue
        xs = [max(c[0], 1e-3) for c in curve] + [horizon]
        ys = [c[2] * 1e3 for c in curve] + [curve[-1][2] * 1e3]
        ax.step(xs, ys, where="post", label=method, color=_COLOURS.get(method), lw=1.8)
    styles = ["--", ":", "-.", (0, (5, 1))]
    for k, r in enumerate(x for x in comparison.results if x.method not in comparison.curves):
        ax.axhline(r.step_time_s * 1e3, ls=styles[k % len(styles)], color="grey", lw=1,
                   label=f"{r.method} ({r.step_time_s * 1e3:.3g} ms)")
    ax.set_xscale("log")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("best simulated step time (ms)")
    ax.set_title(title, fontsize=10)
    finite = [r.step_time_s * 1e3 for r in comparison.results]
    lo, hi = min(finite), sorted(finite)[-1]
    ax.set_ylim(lo * 0.95, min(hi, lo * 3) * 1.05)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    return save_figure_atomic(fig, path)


def timeline(problem: PlacementProblem, placement: list[int], path: str | Path, title: str) -> Path:
    """Gantt chart of one simulated step: forward (blue) and backward (red) ops per device."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sim = problem.simulate(placement, trace=True)
    used = sorted({d for _, _, d, _, _, _ in sim.schedule})
    row = {d: k for k, d in enumerate(used)}
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(used) + 1.5))
    for _, _, d, bwd, start, end in sim.schedule:
        ax.barh(row[d], (end - start) * 1e3, left=start * 1e3, height=0.7,
                color="tab:red" if bwd else "tab:blue", alpha=0.8, lw=0)
    ax.set_yticks(range(len(used)), [problem.devices.names[d] for d in used], fontsize=8)
    ax.set_xlabel("time in step (ms)")
    ax.set_title(f"{title}: step {sim.makespan_s * 1e3:.3g} ms (blue forward, red backward)", fontsize=10)
    ax.invert_yaxis()
    return save_figure_atomic(fig, path)
