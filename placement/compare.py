"""Run the placers side by side on one problem and tabulate them against the baselines.

Why one runner: the CLI, the benchmark and the tests need the same thing -- every baseline priced
by the same simulator, the searches started from the best baseline under the same wall-clock
budget, and one table of step times and speedups.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from flexcomm.costmodel.errors import InputError
from flexcomm.placement.baselines import BASELINES, PlacerResult
from flexcomm.placement.es import ESConfig, SearchResult, async_es, sync_es
from flexcomm.placement.methods import METHODS, RESULT_NAMES, SEARCHES, parse_methods  # noqa: F401 - kept here too
from flexcomm.placement.ppo import PPOConfig, PPOPlacer, train_ppo
from flexcomm.placement.simulator import PlacementProblem

Progress = Callable[[str], Callable[[float, float], None] | None]


@dataclass
class Comparison:
    """Every method's result (baselines always included) and the searches' curves."""

    results: list[PlacerResult]
    curves: dict[str, list[tuple[float, int, float]]] = field(default_factory=dict)
    start_method: str = ""

    def by_method(self, method: str) -> PlacerResult:
        for r in self.results:
            if r.method == method:
                return r
        raise KeyError(method)

    def best(self, methods: Sequence[str] | None = None) -> PlacerResult:
        wanted = None if methods is None else {RESULT_NAMES.get(m, m) for m in methods}
        pool = [r for r in self.results if wanted is None or r.method in wanted]
        return min(pool, key=lambda r: (not r.feasible, r.step_time_s))


def run_baselines(problem: PlacementProblem) -> list[PlacerResult]:
    """Every baseline, timed, priced by the simulator."""
    out = []
    for name, placer in BASELINES.items():
        start = time.perf_counter()
        placement = placer(problem)
        spent = time.perf_counter() - start
        sim = problem.simulate(placement)
        out.append(PlacerResult(name, placement, sim.step_time_s, sim.feasible, spent, 1))
    return out


def _as_result(search: SearchResult, detail: str = "") -> PlacerResult:
    return PlacerResult(search.method, search.placement, search.step_time_s, search.feasible, search.wall_s,
                        search.evaluations, detail)


def compare(problem: PlacementProblem, methods: Sequence[str], *, es: ESConfig | None = None,
            ppo: PPOConfig | None = None, progress: Progress | None = None, es_start: str = "best") -> Comparison:
    """Baselines, then the requested searches; ES starts from ``es_start`` (``best``: the best baseline's
    placement, or a baseline's name, e.g. ``single`` to watch the search do all the work)."""
    if es_start != "best" and es_start not in BASELINES:
        raise InputError("es-start", es_start, "best or one of " + ", ".join(BASELINES))
    es = es or ESConfig()
    ppo = ppo or PPOConfig()
    results = run_baselines(problem)
    if es_start == "best":
        start = min(results, key=lambda r: (not r.feasible, r.step_time_s))
    else:
        start = next(r for r in results if r.method == es_start)
    comparison = Comparison(results, start_method=start.method)
    for method in methods:
        if method not in SEARCHES:
            continue
        report = progress(method) if progress is not None else None
        if method == "ppo":
            search = train_ppo(problem, ppo, report)
            detail = f"{ppo.groups} groups, batch {ppo.batch}"
        elif method == "es":
            search = sync_es(problem, start.placement, es, report)
            detail = f"from {start.method}, population {es.population}, {es.workers} workers"
        else:
            policy = None
            threads = torch.get_num_threads()
            if es.rl_share > 0:
                torch.set_num_threads(1)  # the master shares the CPUs with the ES workers
                policy = PPOPlacer(problem, replace(ppo, seed=es.seed))
            try:
                search = async_es(problem, start.placement, es, report, rl_policy=policy)
            finally:
                torch.set_num_threads(threads)
            detail = f"from {start.method}, rule {es.rule}, {es.workers} workers"
            if es.rl_share > 0:
                detail += f", {search.rl_evaluations} of {search.evaluations} evaluations from PPO"
        comparison.results.append(_as_result(search, detail))
        comparison.curves[search.method] = search.curve
    return comparison


def table(problem: PlacementProblem, comparison: Comparison):  # -> pandas.DataFrame
    """One row per method: step time, speedups over single and the best baseline, resources, cost."""
    import pandas as pd

    # against the single device's own makespan: when it does not fit, its penalised time would flatter everyone
    single = problem.simulate(comparison.by_method("single").placement).makespan_s
    baselines = [r for r in comparison.results if r.method in BASELINES]
    best_base = min(baselines, key=lambda r: (not r.feasible, r.step_time_s))
    rows = []
    for r in comparison.results:
        sim = problem.simulate(r.placement)
        peak_mem = float(np.max(sim.memory_bytes / problem.devices.memory_bytes))
        rows.append({
            "method": r.method,
            "step_time_ms": r.step_time_s * 1e3,
            "feasible": r.feasible,
            "speedup_vs_single": single / r.step_time_s,  # penalised: an infeasible placement never gains
            "speedup_vs_best_baseline": best_base.step_time_s / r.step_time_s,
            "devices_used": len(set(r.placement)),
            "transfer_MB": sim.transfer_bytes / 1e6,
            "peak_memory_fraction": peak_mem,
            "evaluations": r.evaluations,
            "search_s": r.search_s,
            "detail": r.detail,
        })
    frame = pd.DataFrame(rows)
    frame.attrs["best_baseline"] = best_base.method
    return frame


def markdown(frame, title: str) -> str:  # frame: pandas.DataFrame
    """The comparison table as GitHub markdown (no tabulate dependency)."""
    cols = ["method", "step_time_ms", "feasible", "speedup_vs_single", "speedup_vs_best_baseline",
            "devices_used", "transfer_MB", "peak_memory_fraction", "evaluations", "search_s", "detail"]
    head = ["method", "step time (ms)", "feasible", "x single", f"x best baseline ({frame.attrs.get('best_baseline')})",
            "devices", "moved (MB)", "peak mem / cap", "evaluations", "search (s)", "detail"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, row in frame[cols].iterrows():
        cells = [
            row["method"], f"{row['step_time_ms']:.4g}", "yes" if row["feasible"] else "NO (penalised)",
            f"{row['speedup_vs_single']:.2f}x", f"{row['speedup_vs_best_baseline']:.2f}x", str(row["devices_used"]),
            f"{row['transfer_MB']:.1f}", f"{row['peak_memory_fraction']:.2f}", str(row["evaluations"]),
            f"{row['search_s']:.2f}", row["detail"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "x single: the single device's simulated step time (its memory limit ignored) over the method's; "
              "an infeasible placement's time carries the memory penalty."]
    return "\n".join(lines) + "\n"


def time_to_within(curve: Sequence[tuple[float, int, float]], target: float, rel: float = 0.05) -> float:
    """Wall seconds until a curve's best step time is within ``rel`` of ``target`` (inf if never)."""
    for wall, _, best in curve:
        if best <= target * (1.0 + rel):
            return wall
    return float("inf")
