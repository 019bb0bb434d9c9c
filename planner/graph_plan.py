"""The operator-graph planner as one call: a traced model, a cluster and a batch in, every (dp, tp, pp,
micro-batches, ZeRO stage, rank order) plan priced and the best few simulated out, as data (``flexcomm plan
--model resnet50`` and ``flexcomm.plan("resnet50", ...)`` both call it).

Why one function that returns data: the command line and the Python API must mean the same thing by the same
options, with the same defaults and the same one-line errors; each of them then only turns the result into what
it hands over (files and lines, or a table in memory). Nothing here parses flags, prints or writes a file.
Tracing needs torch: this module imports the graph, pricing and search modules only when it has a model to
trace, so a mistyped option is refused before torch loads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm.costmodel.calibration import CalibrationProfile, calibrated_cluster
from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.cluster_parts import Device
from flexcomm.costmodel.compute import DEFAULT_EFFICIENCY
from flexcomm.costmodel.device_compute import DeviceCompute
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gradient_exchange import DEFAULT_TOPK_RATIO, GradientScheme
from flexcomm.planner.plan_options import at_least, check_plan_options, gradient_exchange
from flexcomm.planner.rank_devices import PlanCluster, load_plan_cluster
from flexcomm.sim.workload import DEFAULT_BATCH
from flexcomm.workloads.names import FACTORY_FORM, is_factory_reference

if TYPE_CHECKING:
    import networkx as nx
    import pandas as pd

    from flexcomm.planner.pipeline_units import Units
    from flexcomm.planner.plans import PlanConfig, PlanCost, Pricer
    from flexcomm.planner.search import SearchResult

#: Default batch of the graph planner's models, per device, where ``simulate`` names no default of its own: Goyal
#: et al. 2017 ("Accurate, Large Minibatch SGD") train ResNet-50 with 32 images per GPU at every scale, as
#: data-parallel CNN training commonly does.
SAMPLES_PER_DEVICE = 32
#: :data:`planner.graphs.GRAPH_NAMES` without importing torch (tests/test_plan_place_engines.py keeps them equal).
GRAPH_NAMES = ("resnet18", "resnet50", "eca-resnet50", "eca-resnet20", "gpt", "inception")
#: :data:`planner.search.SEARCHES` and :data:`planner.plans.BALANCES`, likewise.
SEARCHES = ("exhaustive", "random")
BALANCES = ("speed", "even")

#: The search's progress wrapper: (plans, how many) -> the plans, iterated as they are priced.
Progress = Callable[[Iterable["PlanConfig"], int], Iterable["PlanConfig"]]


class NoPlanFits(InputError):
    """Every plan was rejected for memory: ``table`` holds each plan and why (the evidence a caller may keep)."""

    def __init__(self, field: str, got: object, expected: str, table: pd.DataFrame | None = None) -> None:
        super().__init__(field, got, expected)
        self.table = table


@dataclass(frozen=True)
class GraphPlanResult:
    """Every plan the operator-graph planner priced for one job, ranked, with the simulated step of the best few.

    ``table()`` is ``plans.csv``; ``summary()`` is ``best_plan.json``; ``search`` and ``pricer`` are what
    ``plans.png`` is drawn from (:func:`planner.report.plot`)."""

    #: the model as asked (a graph name or ``module:factory``); the traced graph names itself
    model: str
    graph: nx.DiGraph
    units: Units
    cluster: PlanCluster
    pricer: Pricer
    search: SearchResult
    batch_size: int
    batch_defaulted: bool
    balance: str
    seed: int
    method: str
    exchange: GradientScheme

    @property
    def best(self) -> PlanCost:
        return self.search.best

    def table(self) -> pd.DataFrame:
        """Ranked feasible plans, then the rejected ones, with each plan's verdict."""
        return self.search.table()

    def settings(self) -> dict[str, Any]:
        """What the plans were priced for (``best_plan.json``'s keys beside the best plan)."""
        graph = self.graph.graph
        return {"model": graph["name"], "parameters": graph["parameters"], "options": graph["options"],
                "cluster": self.cluster.name, "batch_size": self.batch_size, "balance": self.balance,
                "seed": self.seed, "search": self.method}

    def summary(self) -> dict[str, Any]:
        """The best plan, the search's size and speed, and :meth:`settings`: the keys of ``best_plan.json``."""
        from flexcomm.planner.report import summary  # imports the pricer's modules (torch)

        return summary(self.search, self.pricer, self.settings())


def check_search(search: str, samples: int, balance: str) -> None:
    """The search's options, which ``flexcomm plan`` checks for every model it searches the graph way."""
    at_least("samples", samples, 1)
    if search not in SEARCHES:
        raise InputError("search", search, " or ".join(SEARCHES))
    if balance not in BALANCES:
        raise InputError("balance", balance, "one of " + ", ".join(BALANCES))


def check_model(model: str) -> None:
    """A graph the planner traces, or the user's model as ``module:factory`` / ``file.py:factory``."""
    if model not in GRAPH_NAMES and not is_factory_reference(model):
        raise InputError("model", model, "one of " + ", ".join(GRAPH_NAMES) + f", or your model as {FACTORY_FORM}")


def default_batch_per_device(model: str) -> int:
    """Samples per device when no batch is given: ``simulate``'s default batch per rank for a model both engines
    name (one job, one default), else :data:`SAMPLES_PER_DEVICE`."""
    return DEFAULT_BATCH.get(str(model).strip().lower(), SAMPLES_PER_DEVICE)


def pricing_device(cluster: PlanCluster) -> Device:
    """The device the planner prices a traced model's kernels on: the fastest of the pool, as ``simulate`` prices
    each layer on its rank's device (:class:`costmodel.device_compute.DeviceCompute`); slower devices of a mixed
    pool scale that price by their peak (:mod:`planner.pipeline_units`)."""
    return max(cluster.devices, key=lambda device: device.peak_flops)


def plan_graph(cluster: str | Path | Cluster | PlanCluster, model: str, batch_size: int | None = None, *,
               layers: int | None = None, hidden: int | None = None, heads: int | None = None,
               seq_len: int | None = None, vocab: int | None = None, image_size: int | None = None,
               search: str = "exhaustive", samples: int = 200, seed: int = 0, simulate_top: int = 3,
               balance: str = "speed", efficiency: float | None = None, op_times: str | Path | None = None,
               memory_fraction: float = 1.0, scheme: str = "dense", ratio: float = DEFAULT_TOPK_RATIO,
               profile: str | Path | None = None, progress: Progress | None = None,
               before_work: Callable[[], object] | None = None) -> GraphPlanResult:
    """Trace ``model`` into its operator graph, price every plan of it training ``batch_size`` samples a step
    (default: :func:`default_batch_per_device` per device) on ``cluster``, rank them and re-rank the
    ``simulate_top`` best distinct schedules by the simulator.

    ``search="random"`` prices ``samples`` plans drawn with ``seed``; ``balance="even"`` splits work evenly on a
    mixed pool; ``efficiency`` prices FLOPs alone at that fraction of peak (default: each kernel on the device);
    ``op_times`` is a JSON file of measured per-op forward times; ``scheme``/``ratio`` price a compressed
    data-parallel exchange; ``profile`` is a calibration profile applied to the cluster's links.
    ``before_work`` is called once every option and the cluster are checked, before the model is traced (a
    caller creates its output folder there: a refused plan creates nothing, an unwritable one fails at once).
    Raises :class:`NoPlanFits` when no plan fits in memory.
    """
    shape = {k: v for k, v in (("layers", layers), ("hidden", hidden), ("heads", heads), ("seq_len", seq_len),
                               ("vocab", vocab), ("image_size", image_size)) if v is not None}
    check_model(model)
    check_search(search, samples, balance)
    check_plan_options(batch_size, simulate_top, memory_fraction, efficiency, shape)
    exchange = gradient_exchange(scheme, ratio)
    pool = load_plan_cluster(cluster)
    if profile:
        pool = pool.with_cluster(calibrated_cluster(pool.cluster, CalibrationProfile.load(profile)))
    defaulted = batch_size is None
    batch = default_batch_per_device(model) * pool.world_size if batch_size is None else batch_size
    if before_work is not None:
        before_work()
    graph, units, pricer = _pricer(model, pool, batch, shape, efficiency=efficiency, op_times=op_times,
                                   balance=balance, memory_fraction=memory_fraction, exchange=exchange)
    from flexcomm.planner.search import search as search_plans  # torch: loaded by the tracing above anyway

    found = search_plans(pricer, method=search, samples=samples, seed=seed, simulate_top=simulate_top,
                         progress=progress)
    if not found.ranked:
        table = found.table()
        raise NoPlanFits("cluster", str(cluster) if isinstance(cluster, (str, Path)) else pool.name,
                         f"devices with room for {graph.graph['name']} at batch {batch}: all {len(table)} plans "
                         f"rejected, closest: {table['reason'].iloc[0]}", table)
    return GraphPlanResult(model, graph, units, pool, pricer, found, batch, defaulted, balance, seed, search,
                           exchange)


def _pricer(model: str, pool: PlanCluster, batch: int, shape: dict[str, int], *, efficiency: float | None,
            op_times: str | Path | None, balance: str, memory_fraction: float,
            exchange: GradientScheme) -> tuple[nx.DiGraph, Units, Pricer]:
    """The model traced into its operator graph, cut into pipeline units and priced per plan on ``pool``."""
    from flexcomm.planner.graphs import build_graph, calibrate_op_times, load_op_times
    from flexcomm.planner.pipeline_units import build_units
    from flexcomm.planner.plans import Pricer

    compute = None if efficiency is not None else DeviceCompute.of(pricing_device(pool))
    if op_times:
        measured_batch, measured, peak = load_op_times(str(op_times))
        graph = build_graph(model, batch_size=measured_batch, **shape)
        calibrate_op_times(graph, measured, device=peak)
    else:  # traced at a data-parallel rank's batch: the shapes its kernels run at, priced per sample
        graph = build_graph(model, batch_size=max(1, round(batch / pool.world_size)), **shape)
    units = build_units(graph, efficiency=DEFAULT_EFFICIENCY if efficiency is None else efficiency,
                        reference_peak_flops=float(pool.peak_flops.max()) if op_times else None, compute=compute)
    pricer = Pricer(units, pool, batch, balance=balance, memory_fraction=memory_fraction, exchange=exchange)
    return graph, units, pricer
