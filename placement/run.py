"""Device placement as one call: an operator graph, a cluster's first ranks and the placers in, every placer's
placement priced by the step simulator and the best chosen out, as data (``flexcomm place`` and
``flexcomm.place(...)`` both call it).

Why one function that returns data: the command line and the Python API must mean the same thing by the same
options, with the same defaults and one-line errors; each then only turns the result into files and lines or a
table in memory. Nothing here parses flags, prints or writes a file. The searches and the tracer need torch: they
are imported once every option is checked, so a mistyped one is refused before torch loads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from flexcomm.costmodel.calibration import CalibrationProfile, calibrated_cluster
from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_LOCAL_PROCESSES
from flexcomm.placement.baselines import BASELINES, PlacerResult
from flexcomm.placement.devices import DeviceSet
from flexcomm.placement.es import RULES, ESConfig
from flexcomm.placement.methods import parse_methods
from flexcomm.placement.simulator import PlacementProblem
from flexcomm.planner.graph_plan import GRAPH_NAMES
from flexcomm.planner.plan_options import at_least
from flexcomm.planner.rank_devices import PlanCluster, load_plan_cluster

if TYPE_CHECKING:
    import networkx as nx

    from flexcomm.placement.compare import Comparison, Progress


@dataclass(frozen=True)
class PlacementRun:
    """Every placer's result on one problem, the comparison table and the placement chosen.

    ``table()`` is ``comparison.csv``, ``curves()`` ``curves.csv``, ``placement_table()`` ``placement.csv`` and
    ``summary()`` ``placement.json``; ``comparison`` is what ``search_curves.png`` is drawn from and ``problem``
    with ``chosen.placement`` what ``timeline.png`` is (:func:`placement.plots.draw`)."""

    model: str
    batch_size: int
    micro_batches: int
    seed: int
    devices: DeviceSet
    graph: nx.DiGraph
    problem: PlacementProblem
    comparison: Comparison
    frame: pd.DataFrame
    chosen: PlacerResult

    @property
    def title(self) -> str:
        return (f"{self.model} (batch {self.batch_size}, {self.micro_batches} micro-batches) on "
                f"{self.devices.count} devices of {self.devices.cluster_name}")

    def table(self) -> pd.DataFrame:
        """One row per method: step time, speedups over single and the best baseline, resources, cost."""
        return self.frame

    def curves(self) -> pd.DataFrame:
        """Each search's best step time against wall time and evaluations."""
        rows = [{"method": m, "wall_s": w, "evaluations": e, "best_step_time_s": b}
                for m, curve in self.comparison.curves.items() for w, e, b in curve]
        return pd.DataFrame(rows, columns=["method", "wall_s", "evaluations", "best_step_time_s"])

    def placement_table(self) -> pd.DataFrame:
        """The chosen placement: each op, its kind and its device."""
        names = self.devices.names
        return pd.DataFrame({"op": [str(v) for v in self.problem.nodes],
                             "kind": [self.graph.nodes[v].get("kind", "") for v in self.problem.nodes],
                             "device": self.chosen.placement,
                             "device_name": [names[d] for d in self.chosen.placement]})

    @property
    def speedup_vs_single(self) -> float:
        frame = self.frame
        return float(frame.loc[frame.method == self.chosen.method, "speedup_vs_single"].iloc[0])

    def summary(self) -> dict[str, Any]:
        """The job, the chosen method, its step time and memory, and every op's device: ``placement.json``."""
        names, chosen = self.devices.names, self.chosen
        return {
            "model": self.model, "batch_size": self.batch_size, "micro_batches": self.micro_batches,
            "cluster": self.devices.cluster_name, "devices": list(names), "method": chosen.method,
            "step_time_s": chosen.step_time_s, "feasible": chosen.feasible,
            "speedup_vs_single": self.speedup_vs_single,
            "memory_bytes": self.problem.simulate(chosen.placement).memory_bytes.tolist(), "seed": self.seed,
            "placement": {str(v): names[d] for v, d in zip(self.problem.nodes, chosen.placement, strict=True)},
        }


def _real(name: str, value: object, ok: Callable[[float], bool], expected: str) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not ok(float(value)):
        raise InputError(name, value, expected)


def check_options(model: str, batch_size: int, *, budget_s: float, iterations: int | None, micro_batches: int,
                  workers: int, measure_steps: float, eval_jitter: float, rl_share: float, groups: int,
                  ppo_batch: int, efficiency: float, seed: int, method: str, es_start: str, rule: str) -> None:
    """Every option's own form, before the cluster is read or torch loaded (errors name the command's flags)."""
    if model not in GRAPH_NAMES:
        raise InputError("model", model, "one of " + ", ".join(GRAPH_NAMES))
    at_least("batch-size", batch_size, 1)
    _real("budget-s", budget_s, lambda v: math.isfinite(v) and v > 0, "seconds > 0")
    at_least("iterations", iterations, 1)
    at_least("micro-batches", micro_batches, 1)
    at_least("workers", workers, 1)
    MAX_LOCAL_PROCESSES.check("workers", workers)
    _real("measure-steps", measure_steps, lambda v: math.isfinite(v) and v >= 0, "a number >= 0")
    _real("eval-jitter", eval_jitter, lambda v: math.isfinite(v) and v >= 0, "a number >= 0")
    _real("rl-share", rl_share, lambda v: 0 <= v < 1, "a fraction in [0, 1)")
    for value, least in ((groups, 1), (ppo_batch, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InputError("groups", (groups, ppo_batch), "--groups >= 1 and --ppo-batch >= 2")
    _real("efficiency", efficiency, lambda v: math.isfinite(v) and 0 < v <= 1, "a fraction in (0, 1]")
    at_least("seed", seed, 0)  # numpy's generators refuse it, after minutes of baselines, with a traceback
    parse_methods(method)
    if es_start != "best" and es_start not in BASELINES:
        raise InputError("es-start", es_start, "best or one of " + ", ".join(BASELINES))
    if rule not in RULES:
        raise InputError("rule", rule, "one of " + ", ".join(RULES))


def device_set(cluster: str | Path | Cluster | PlanCluster, devices: int,
               profile: str | Path | None = None) -> DeviceSet:
    """The first ``devices`` ranks of ``cluster`` (0: all of them), its links calibrated by ``profile``."""
    plan = load_plan_cluster(cluster)
    if profile:
        plan = plan.with_cluster(calibrated_cluster(plan.cluster, CalibrationProfile.load(profile)))
    if isinstance(devices, bool) or not isinstance(devices, int):
        raise InputError("devices", devices, f"0 (all) or 1..{plan.world_size} (ranks of {plan.name})")
    count = plan.world_size if devices == 0 else devices
    if not 1 <= count <= plan.world_size:
        raise InputError("devices", devices, f"0 (all) or 1..{plan.world_size} (ranks of {plan.name})")
    return DeviceSet.from_cluster(plan.cluster, count, rank_devices=plan.devices)


def place_graph(cluster: str | Path | Cluster | PlanCluster = "4x8-a100-ib", model: str = "inception",
                batch_size: int = 128, *, devices: int = 8, method: str | Sequence[str] = "all",
                budget_s: float = 20.0, iterations: int | None = None, micro_batches: int = 4, workers: int = 2,
                measure_steps: float = 5.0, eval_jitter: float = 0.5, rule: str = "linear", rl_share: float = 0.0,
                es_start: str = "best", groups: int = 16, ppo_batch: int = 16, efficiency: float = 0.65,
                contention: bool = True, seed: int = 0, profile: str | Path | None = None,
                progress: Progress | None = None,
                before_work: Callable[[], object] | None = None) -> PlacementRun:
    """Trace ``model`` at ``batch_size``, place it on the first ``devices`` ranks of ``cluster`` (0: all) by every
    baseline and the searches ``method`` names (``all``, or some of :data:`placement.methods.METHODS`), each
    search given ``budget_s`` wall seconds (and at most ``iterations`` updates), and choose the fastest.

    ``micro_batches`` GPipe micro-batches per step; ES: ``workers`` processes, ``measure_steps`` simulated steps
    waited per evaluation (x a log-normal factor of sigma ``eval_jitter``), mean-update ``rule``, ``rl_share`` of
    candidates from PPO, started from ``es_start``; PPO: ``groups`` groups, ``ppo_batch`` placements per update.
    ``before_work`` is called once every option and the cluster are checked, before torch loads and the model is
    traced (a caller creates its output folder there)."""
    method = method if isinstance(method, str) else ",".join(method)
    check_options(model, batch_size, budget_s=budget_s, iterations=iterations, micro_batches=micro_batches,
                  workers=workers, measure_steps=measure_steps, eval_jitter=eval_jitter, rl_share=rl_share,
                  groups=groups, ppo_batch=ppo_batch, efficiency=efficiency, seed=seed, method=method,
                  es_start=es_start, rule=rule)
    chosen_devices = device_set(cluster, devices, profile)
    if before_work is not None:
        before_work()
    from flexcomm.placement.compare import compare, table  # torch
    from flexcomm.placement.ppo import PPOConfig
    from flexcomm.planner.graphs import build_graph

    methods = parse_methods(method)
    graph = build_graph(model, batch_size=batch_size)
    problem = PlacementProblem(graph, chosen_devices, efficiency=efficiency, micro_batches=micro_batches,
                               contention=contention)
    max_evals = None if iterations is None else iterations * ppo_batch
    es = ESConfig(workers=workers, budget_s=budget_s, max_evaluations=max_evals, rule=rule,
                  measure_steps=measure_steps, eval_jitter=eval_jitter, seed=seed, rl_share=rl_share)
    ppo = PPOConfig(groups=groups, batch=ppo_batch, budget_s=budget_s, iterations=iterations, seed=seed)
    comparison = compare(problem, methods, es=es, ppo=ppo, progress=progress, es_start=es_start)
    return PlacementRun(model, batch_size, micro_batches, seed, chosen_devices, graph, problem, comparison,
                        table(problem, comparison), comparison.best(methods))
