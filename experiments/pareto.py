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
from flexcomm.compression.moo import RULES, GainModel, MOOConfig, ParetoFront, choose_point, objectives, pareto_front
from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.emulation.engine import EmulatedRun, EmulationConfig

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
    if rule not in RULES:
        raise InputError("rule", rule, "one of " + ", ".join(RULES))
    for name, value, low in (("warmup-steps", warmup_steps, 1), ("probe-steps", probe_steps, 1),
                             ("grid-points", grid_points, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(name, value, f"an integer >= {low}")
    moo = MOOConfig(probe_steps=probe_steps, rule=rule, seed=seed + 1)
    config = EmulationConfig(workload=workload, workers=workers, cluster=cluster, strategy="moo",
                             steps=warmup_steps, seed=seed, eval_every=warmup_steps, price_params=price_params,
                             compute_time_s=compute_time_s, moo=moo)
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


def plot_pareto(result: ParetoResult, path: str | Path, ax: Any = None) -> Path | None:
    """Dominated candidates (hollow), the non-dominated ones and the NSGA-II front, the rules' points annotated.

    With ``ax`` given, draws into it and returns None (for multi-panel figures).
    """
    from flexcomm.costmodel.plotting import use_file_backend

    use_file_backend()
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    from flexcomm.costmodel.atomic import save_figure_atomic

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(7.5, 5.2), layout="constrained")
    cand = result.candidates
    markers = {"topk-ag": "o", "topk-ar": "^"}
    for scheme, part in cand.groupby("scheme"):
        dom = part[part["dominated"]]
        if dom.empty:  # no legend entry for a scheme none of whose candidates is dominated
            continue
        ax.scatter(dom["step_s"] * 1e3, dom["gain"], facecolors="none", edgecolors="0.45", s=22, zorder=3.5,
                   marker=markers[str(scheme)], label=f"dominated ({scheme})")  # hollow, over the front
    front = result.front.frame.sort_values("step_s")
    norm = LogNorm(vmin=float(cand["c"].min()), vmax=float(cand["c"].max()))
    points = ax.scatter(front["step_s"] * 1e3, front["gain"], c=front["c"], cmap="viridis", norm=norm, s=18, zorder=3,
                        label="NSGA-II front")
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
    ax.set_xlabel("predicted step time (ms): compute + communication + compression")
    ax.set_ylabel("compression gain (statistical efficiency)")
    info = result.info
    ax.set_title(f"{info['workload']} on {info['cluster']} ({info['workers']} workers)", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    # below the panel: inside it, any corner hides candidates of some workload
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
              title="hollow: dominated candidates; colour: c", title_fontsize=7)
    if not own:
        return None
    fig.colorbar(points, ax=ax, label="compression ratio c (fraction kept)")
    return save_figure_atomic(fig, path)


def summary_lines(result: ParetoResult) -> list[str]:
    """Plain-text summary for the terminal and notes."""
    cand = result.candidates
    lines = [f"{len(cand)} candidates (c x scheme), {int((~cand['dominated']).sum())} non-dominated; "
             f"NSGA-II front {len(result.front.frame)} points"]
    for pick in result.picks.itertuples():
        lines.append(f"{pick.rule:7s} c={pick.c:.4g} {pick.scheme:8s} step {pick.step_s * 1e3:.4g} ms "
                     f"(comm+compress {pick.comm_s * 1e3:.4g} ms) gain {pick.gain:.3f}")
    return lines
