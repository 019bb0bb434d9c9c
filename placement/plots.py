"""Figures of a placement run: search curves against wall time, and a per-device timeline."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.plotting import readable_log_axis, use_file_backend
from flexcomm.placement.compare import Comparison
from flexcomm.placement.run import PlacementRun
from flexcomm.placement.simulator import PlacementProblem

_COLOURS = {"ppo": "tab:purple", "sync-es": "tab:orange", "async-es": "tab:green"}
#: Widths, drawn widest first, that keep every search visible where they run together (the ES both start
#: from the best baseline; a short search may never leave it).
_WIDTHS = {"sync-es": 7.0, "ppo": 4.5, "async-es": 2.0}
#: One colour and dash per baseline (no two alike), none of them a search's colour.
_BASELINE_STYLES = [("black", "--"), ("tab:blue", ":"), ("tab:brown", "-."), ("tab:gray", (0, (5, 1))),
                    ("tab:olive", (0, (3, 1, 1, 1, 1, 1))), ("tab:cyan", (0, (1, 1)))]


def _flat_on_baseline(curve: list[tuple[float, int, float]], baselines: dict[float, list[str]]) -> float | None:
    """The baseline step time (ms, a key of ``baselines``) a search's whole curve lies on, or None."""
    values = {round(c[2] * 1e3, 6) for c in curve}
    if len(values) == 1:
        (ms,) = values
        return ms if ms in baselines else None
    return None


def search_curves(comparison: Comparison, path: str | Path, title: str) -> Path:
    """Best step time found against wall time per search, the baselines as horizontal lines.

    A search that never beat its start lies on that baseline's line for its whole run: drawn, one hides the
    other, so it is named in the baseline's legend entry instead ("partition = sync-es: never beat it").
    Searches are drawn over the baselines, thin enough that a search running along a baseline before it
    leaves it shows both."""
    use_file_backend()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 4.5))
    horizon = max([c[-1][0] for c in comparison.curves.values() if c] + [1e-3])
    horizon = max([horizon] + [r.search_s for r in comparison.results if r.method in comparison.curves])
    # baselines that found the same step time are one line (listed together), not lines drawn on each other
    same: dict[float, list[str]] = {}
    for r in comparison.results:
        if r.method not in comparison.curves:
            same.setdefault(round(r.step_time_s * 1e3, 6), []).append(r.method)
    evaluations = {r.method: r.evaluations for r in comparison.results}
    stuck: dict[float, list[str]] = {}
    for method, curve in sorted(comparison.curves.items(), key=lambda item: -_WIDTHS.get(item[0], 3)):
        if not curve:
            continue
        flat = _flat_on_baseline(curve, same)
        if flat is not None:
            stuck.setdefault(flat, []).append(method)
            continue
        xs = [max(c[0], 1e-3) for c in curve] + [horizon]
        ys = [c[2] * 1e3 for c in curve] + [curve[-1][2] * 1e3]
        # opaque: a search running along a baseline hides it there (at alpha 0.85 the baseline's dashes showed
        # through async-es's line, which read as the search running under it)
        ax.step(xs, ys, where="post", label=method, color=_COLOURS.get(method), lw=_WIDTHS.get(method, 3),
                zorder=3)
    for k, (ms, methods) in enumerate(same.items()):
        colour, dash = _BASELINE_STYLES[k % len(_BASELINE_STYLES)]
        label = f"{', '.join(methods)} ({ms:.3g} ms)"
        for method in stuck.get(ms, []):
            label += f"\n= {method}: never beat it\n  ({evaluations.get(method, 0)} evaluations)"
        ax.axhline(ms, ls=dash, color=colour, lw=1.6 if ms in stuck else 1.2, zorder=2, label=label)
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
    readable_log_axis(ax, "x")
    if ax.get_yscale() == "log":
        readable_log_axis(ax, "y")
    return save_figure_atomic(fig, path)


def timeline(problem: PlacementProblem, placement: list[int], path: str | Path, title: str) -> Path:
    """Gantt chart of one simulated step: per device (every one, those holding no op included), its ops,
    forward in blues and backward in reds, one shade per micro-batch, and beneath them the tensors it has in
    flight to other devices (leaving its port until they arrive)."""
    use_file_backend()
    import matplotlib.pyplot as plt

    sim = problem.simulate(placement, trace=True)
    devices = problem.devices.count
    micro = max([mb for _, mb, *_ in sim.schedule] + [0]) + 1
    holding = {d for _, _, d, _, _, _ in sim.schedule}
    fig, ax = plt.subplots(figsize=(10.5, 0.55 * devices + 1.8))
    scale = 1e3  # ms
    for bwd, cmap, word in ((False, "Blues", "forward"), (True, "Reds", "backward")):
        shades = plt.get_cmap(cmap)
        for mb in range(micro):
            bars = [((start) * scale, (end - start) * scale, d) for _, m, d, b, start, end in sim.schedule
                    if b == bwd and m == mb]
            if not bars:
                continue
            shade = shades(0.85 - 0.45 * mb / max(1, micro - 1)) if micro > 1 else shades(0.7)
            for d in sorted({bar[2] for bar in bars}):
                ax.broken_barh([(x, w) for x, w, dd in bars if dd == d], (d - 0.36, 0.5), facecolors=[shade],
                               edgecolors="white", linewidth=0.3,
                               label=f"{word}, micro-batch {mb}" if micro > 1 else word)
    sending: dict[int, list[tuple[float, float]]] = {}
    for src, _dst, start, arrive, _ in sim.transfers:
        sending.setdefault(src, []).append((start * scale, (arrive - start) * scale))
    for d, spans in sorted(sending.items()):
        ax.broken_barh(spans, (d + 0.18, 0.16), facecolors=["0.25"], linewidth=0,
                       label="tensor in flight to another device")
    names = problem.devices.names
    ax.set_yticks(range(devices), [names[d] + ("" if d in holding else " (no ops)") for d in range(devices)],
                  fontsize=8)
    ax.set_ylim(devices - 0.5, -0.5)
    ax.set_xlim(0, sim.makespan_s * scale * 1.01)
    ax.set_xlabel("time in step (ms)")
    ax.set_title(f"{title}: step {sim.makespan_s * 1e3:.3g} ms; ops on {len(holding)} of {devices} devices",
                 fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))  # one entry per pass and micro-batch, not per device
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def draw(run: PlacementRun, out: Path) -> list[Path]:
    """``search_curves.png`` (where a search ran) and ``timeline.png`` of the chosen placement, under ``out``."""
    drawn = [search_curves(run.comparison, out / "search_curves.png", run.title)] if run.comparison.curves else []
    chosen = run.chosen
    return [*drawn, timeline(run.problem, chosen.placement, out / "timeline.png",
                             f"{chosen.method} on {run.devices.count} devices")]
