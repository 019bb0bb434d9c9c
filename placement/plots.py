"""Figures of a placement run: search curves against wall time, and a per-device timeline."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.plotting import readable_log_axis
from flexcomm.placement.compare import Comparison
from flexcomm.placement.simulator import PlacementProblem

_COLOURS = {"ppo": "tab:purple", "sync-es": "tab:orange", "async-es": "tab:green"}
#: Widths, drawn widest first, that keep every search visible where they run together (the ES both start
#: from the best baseline; a short search may never leave it).
_WIDTHS = {"sync-es": 7.0, "ppo": 4.5, "async-es": 2.0}
#: One colour and dash per baseline (no two alike), none of them a search's colour.
_BASELINE_STYLES = [("black", "--"), ("tab:blue", ":"), ("tab:brown", "-."), ("tab:gray", (0, (5, 1))),
                    ("tab:olive", (0, (3, 1, 1, 1, 1, 1))), ("tab:cyan", (0, (1, 1)))]


def search_curves(comparison: Comparison, path: str | Path, title: str) -> Path:
    """Best step time found against wall time per search, the baselines as horizontal lines."""
    from flexcomm.costmodel.plotting import use_file_backend

    use_file_backend()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    horizon = max([c[-1][0] for c in comparison.curves.values() if c] + [1e-3])
    horizon = max([horizon] + [r.search_s for r in comparison.results if r.method in comparison.curves])
    for method, curve in sorted(comparison.curves.items(), key=lambda item: -_WIDTHS.get(item[0], 3)):
        if not curve:
            continue
        xs = [max(c[0], 1e-3) for c in curve] + [horizon]
        ys = [c[2] * 1e3 for c in curve] + [curve[-1][2] * 1e3]
        # thick, under the baselines: a search that never beats its start lies on a baseline's line
        ax.step(xs, ys, where="post", label=method, color=_COLOURS.get(method), lw=_WIDTHS.get(method, 3),
                alpha=0.8, zorder=2)
    # baselines that found the same step time are one line (listed together), not lines drawn on each other
    same: dict[float, list[str]] = {}
    for r in comparison.results:
        if r.method not in comparison.curves:
            same.setdefault(round(r.step_time_s * 1e3, 6), []).append(r.method)
    for k, (ms, methods) in enumerate(same.items()):
        colour, dash = _BASELINE_STYLES[k % len(_BASELINE_STYLES)]
        ax.axhline(ms, ls=dash, color=colour, lw=1.3, zorder=3, label=f"{', '.join(methods)} ({ms:.3g} ms)")
    ax.set_xscale("log")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("best simulated step time (ms)")
    ax.set_title(title, fontsize=10)
    found = [r.step_time_s * 1e3 for r in comparison.results]
    lo, hi = min(found), max(found)
    if hi > 3 * lo:  # a search far behind the rest stays in the frame: log scale rather than clipping it
        ax.set_yscale("log")
        ax.set_ylim(lo * 0.9, hi * 1.1)
    else:
        ax.set_ylim(lo * 0.95, hi * 1.05)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside: inside, it hides lines
    ax.grid(alpha=0.3)
    fig.tight_layout()
    if ax.get_yscale() == "log":
        readable_log_axis(ax, "y")
    return save_figure_atomic(fig, path)


def timeline(problem: PlacementProblem, placement: list[int], path: str | Path, title: str) -> Path:
    """Gantt chart of one simulated step: forward (blue) and backward (red) ops per device."""
    from flexcomm.costmodel.plotting import use_file_backend

    use_file_backend()
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
