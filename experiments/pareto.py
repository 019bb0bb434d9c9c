"""The Pareto front of parallel vs statistical efficiency for one workload on one cluster.

Why a separate study: inside emulated training the ratio controller builds fronts online and moves on;
a user choosing c wants to *look* at one: every candidate (c, scheme) priced by the shared cost model and
measured for compression gain on real gradients, which of them are dominated, the NSGA-II front, and the
points each selection rule (ASF 0.6/0.4 as the paper, knee, utopia) would operate at.

Recipe: warm the workload up for ``warmup_steps`` (the MOO strategy's own early steps), probe the gain at
the paper's candidate ratios from the trained state (``probe_steps`` each, restored in between), fit the
monotone gain model, price every (c, scheme) on a log grid, sort them with pymoo's non-dominated sorting,
and run the NSGA-II front the controller uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.compression.flexible import FlexibleCompressor
from flexcomm.compression.moo import RULES, GainModel, ParetoFront, choose_point, objectives, pareto_front
from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.plotting import readable_log_axis, use_file_backend
from flexcomm.emulation.engine import EmulatedRun
from flexcomm.experiments.options import pareto_configs

SPARSE = ("topk-ag", "topk-ar")


@dataclass
class ParetoResult:
    """Candidates (every c x scheme, with ``dominated``), the NSGA-II front, the rules' picks, the probes."""

    candidates: pd.DataFrame
    front: ParetoFront
    picks: pd.DataFrame
    probes: pd.DataFrame
    info: dict[str, Any] = field(default_factory=dict)


def non_dominated(F: np.ndarray) -> np.ndarray:
    """Boolean mask of the first non-dominated front (pymoo's sorting, minimisation)."""
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    mask = np.zeros(len(F), dtype=bool)
    mask[NonDominatedSorting().do(F, only_non_dominated_front=True)] = True
    return mask


def pareto_study(
    workload: str = "mlp-digits",
    cluster: str | Cluster = "8x1-v100-40g",
    *,
    workers: int = 8,
    warmup_steps: int = 50,
    probe_steps: int = 5,
    grid_points: int = 40,
    rule: str = "asf",
    price_params: int | None = None,
    compute_time_s: float | None = None,
    seed: int = 0,
) -> ParetoResult:
    """Measure, price and sort; see the module docstring. Same seed, same numbers."""
    moo, config = pareto_configs(workload, cluster, workers=workers, warmup_steps=warmup_steps,
                                 probe_steps=probe_steps, grid_points=grid_points, rule=rule,
                                 price_params=price_params, compute_time_s=compute_time_s, seed=seed)
    run = EmulatedRun(config)
    run.run(progress=False)
    ratios, gains, _ = run.probe(warmup_steps)  # from the warmed-up state
    gain_model = GainModel(ratios, gains)
    flex = run.compressor
    assert isinstance(flex, FlexibleCompressor)
    predictor = flex.predictor(run.comm)
    lo, hi = moo.bounds  # type: ignore[misc]
    c = np.logspace(np.log10(lo), np.log10(hi), grid_points)
    rows = []
    for scheme in SPARSE:
        F, cols = objectives(c, lambda r, s=scheme: predictor.seconds(s, run.numel, r, workers), gain_model, moo,
                             run.compute_s)
        rows.append(pd.DataFrame({**cols, "scheme": scheme, "f_time": F[:, 0], "f_gain": F[:, 1]}))
    candidates = pd.concat(rows, ignore_index=True)
    candidates["dominated"] = ~non_dominated(candidates[["f_time", "f_gain"]].to_numpy())

    def time_fn(r: np.ndarray) -> np.ndarray:
        return predictor.best_sparse_seconds(run.numel, r, workers, SPARSE)[0]

    def scheme_of(r: np.ndarray) -> dict[str, Any]:
        return {"scheme": [SPARSE[i] for i in predictor.best_sparse_seconds(run.numel, r, workers, SPARSE)[1]]}

    front = pareto_front(time_fn, gain_model, moo, compute_s=run.compute_s, extra_columns=scheme_of)
    F = front.frame[["f_time", "f_gain"]].to_numpy()
    picks = []
    for name in RULES:
        point = front.frame.iloc[choose_point(F, name, moo.weights)]
        picks.append({"rule": name, **{k: point[k] for k in ("c", "scheme", "step_s", "comm_s", "gain")}})
    probes = pd.DataFrame({"c": ratios, "gain": gains})
    alpha, beta = flex.estimator.estimate() if flex.estimator is not None else (np.nan, np.nan)
    info = {"workload": workload, "cluster": run.cluster.name, "workers": workers, "numel": run.numel,
            "price_params": price_params, "compute_s": run.compute_s, "warmup_steps": warmup_steps,
            "probe_steps": probe_steps, "rule": rule, "seed": seed, "alpha_s": alpha, "beta_s_per_byte": beta}
    return ParetoResult(candidates, front, pd.DataFrame(picks), probes, info)


#: Marker of each sparse scheme, on the front and among the dominated candidates alike.
SCHEME_MARKERS = {"topk-ag": "o", "topk-ar": "^"}
#: The zoom panel is drawn when the rules' corner spans less than this share of the full step-time range.
ZOOM_SHARE = 0.5


def plot_pareto(result: ParetoResult, path: str | Path, ax: Any = None) -> Path | None:
    """Dominated candidates (hollow), the NSGA-II front (filled, coloured by c), each marked by its scheme
    (o Allgather, ^ AR-compatible Top-k), the rules' points annotated; beside it, a zoom on the rules' corner.

    Why the zoom: at small c both schemes' candidates crowd into a fraction of a millisecond, where the
    dominated ones sat under the front's points; the zoom spreads that corner, where every rule picks.
    With ``ax`` given, draws the full view into it and returns None (for multi-panel figures).
    """
    use_file_backend()
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm


    own = ax is None
    box = _zoom_box(result)
    zoom = None
    if own:
        if box is not None:
            fig, (ax, zoom) = plt.subplots(1, 2, figsize=(12.5, 5.6), layout="constrained", width_ratios=(3, 2))
        else:
            fig, ax = plt.subplots(figsize=(7.5, 5.6), layout="constrained")
    cand = result.candidates
    norm = LogNorm(vmin=float(cand["c"].min()), vmax=float(cand["c"].max()))
    points = _draw_pareto(ax, result, norm)
    ax.set_xlabel("predicted step time (ms): compute + communication + compression")
    ax.set_ylabel("compression gain (statistical efficiency)")
    info = result.info
    ax.set_title(f"{info['workload']} on {info['cluster']} ({info['workers']} workers)", fontsize=9)
    # below the panel: inside it, any corner hides candidates of some workload
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
              title="filled: NSGA-II front, coloured by c; hollow: dominated; o Allgather, ^ AR-compatible Top-k",
              title_fontsize=7)
    _grey_shape_keys(ax)
    if zoom is not None and box is not None:
        from matplotlib.patches import Rectangle

        _draw_pareto(zoom, result, norm)
        (x0, x1), (y0, y1) = box
        zoom.set_xlim(x0, x1)
        zoom.set_ylim(y0, y1)
        zoom.set_xlabel("predicted step time (ms)")
        zoom.set_ylabel("compression gain")
        zoom.set_title(f"zoom on the rules' corner (c <= {_zoom_ratio(result):.3g}): the dashed box",
                       fontsize=9)
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ls="--", lw=0.9, ec="0.3", zorder=5))
    if not own:
        return None

    bar = fig.colorbar(points, ax=[a for a in (ax, zoom) if a is not None], label="compression ratio c (fraction kept)")
    readable_log_axis(bar.ax, "y")
    return save_figure_atomic(fig, path)


def _draw_pareto(ax: Any, result: ParetoResult, norm: Any) -> Any:
    """The candidates, the front and the rules' picks into ``ax``; returns the front's scatter (for a colour bar)."""
    cand = result.candidates
    for scheme, part in cand.groupby("scheme"):
        dom = part[part["dominated"]]
        if dom.empty:  # no legend entry for a scheme none of whose candidates is dominated
            continue
        ax.scatter(dom["step_s"] * 1e3, dom["gain"], facecolors="none", edgecolors="0.35", s=26, linewidths=0.9,
                   zorder=3.5, marker=SCHEME_MARKERS.get(str(scheme), "s"),
                   label=f"dominated: {scheme}")  # hollow, over the front
    front = result.front.frame.sort_values("step_s")
    schemes = front["scheme"].astype(str) if "scheme" in front else None
    points = None
    for scheme in ([None] if schemes is None else sorted(set(schemes))):
        part = front if scheme is None else front[schemes == scheme]
        points = ax.scatter(part["step_s"] * 1e3, part["gain"], c=part["c"], cmap="viridis", norm=norm,
                            marker=SCHEME_MARKERS.get(str(scheme), "o"), s=20 if scheme == "topk-ar" else 16,
                            zorder=3, label="NSGA-II front" + ("" if scheme is None else f": {scheme}"))
    # one marker per distinct point: rules that pick the same (c, scheme) share it and its legend entry
    styles = {"asf": ("*", 300, "#d62728"), "utopia": ("P", 140, "#8c564b"), "knee": ("D", 70, "#9467bd")}
    groups: dict[tuple, list] = {}
    for pick in result.picks.itertuples():
        groups.setdefault((round(float(pick.c), 12), pick.scheme), []).append(pick)
    for picks in groups.values():
        rules = sorted((p.rule for p in picks), key=list(styles).index)
        pick = picks[0]
        marker, size, colour = styles[rules[0]]
        x, y = pick.step_s * 1e3, pick.gain
        names = ", ".join(f"{r} (chosen)" if r == result.info["rule"] else r for r in rules)
        ax.scatter([x], [y], marker=marker, s=size, color=colour, zorder=4, edgecolors="k", linewidths=0.5,
                   label=f"{names}: c = {pick.c:.3g}, {pick.scheme}, {x:.3g} ms, gain {y:.2f}")
    ax.grid(True, which="both", alpha=0.25)
    return points


def _grey_shape_keys(ax: Any) -> None:
    """The front's legend keys in grey: their shape names the scheme; a colour there would be one c's."""
    legend = ax.get_legend()
    for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
        if text.get_text().startswith("NSGA-II front"):
            handle.set_array(None)
            handle.set_facecolor("0.45")
            handle.set_edgecolor("0.45")


def _zoom_ratio(result: ParetoResult) -> float:
    """The largest c the zoom shows: 1.5 x the largest c any rule picked."""
    return 1.5 * float(result.picks["c"].max())


def _zoom_box(result: ParetoResult) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """(x, y) limits in (ms, gain) around every candidate and front point with c up to :func:`_zoom_ratio`,
    or None when that corner already fills much of the full view (no zoom needed)."""
    points = pd.concat([result.candidates[["c", "step_s", "gain"]], result.front.frame[["c", "step_s", "gain"]]])
    near = points[points["c"] <= _zoom_ratio(result)]
    if len(near) < 2:
        return None
    xs, ys = near["step_s"].to_numpy() * 1e3, near["gain"].to_numpy()
    full = float(np.ptp(points["step_s"].to_numpy() * 1e3))
    width, height = float(np.ptp(xs)), float(np.ptp(ys))
    if full <= 0 or width <= 0 or height <= 0 or width > ZOOM_SHARE * full:
        return None
    return ((xs.min() - 0.06 * width, xs.max() + 0.06 * width), (ys.min() - 0.08 * height, ys.max() + 0.08 * height))


def summary_lines(result: ParetoResult) -> list[str]:
    """Plain-text summary for the terminal and notes."""
    cand = result.candidates
    lines = [f"{len(cand)} candidates (c x scheme), {int((~cand['dominated']).sum())} non-dominated; "
             f"NSGA-II front {len(result.front.frame)} points"]
    for pick in result.picks.itertuples():
        lines.append(f"{pick.rule:7s} c={pick.c:.4g} {pick.scheme:8s} step {pick.step_s * 1e3:.4g} ms "
                     f"(comm+compress {pick.comm_s * 1e3:.4g} ms) gain {pick.gain:.3f}")
    return lines
