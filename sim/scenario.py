"""Several jobs sharing one fabric: a scenario file, the jobs' iteration times, and what sharing cost each.

A scenario (YAML) names a cluster and lists jobs. Each job is either a *training workload* (its DDP
iteration as :mod:`sim.training` models it: forward, then gradient buckets ready during backward, each
allreduced as soon as it is ready and the previous one is done) or a *collective pattern* repeated
(``{collective: allreduce, algorithm: ring, size: 256MiB}``, or ``collective: alltoall-flows`` for an
all-to-all of independent flows as MoE dispatch sends, or ``p2p`` for each rank sending to the next as
pipeline stages do, with an optional ``compute`` gap per iteration). A job has a placement (``packed``:
the first free GPUs; ``spread``: one GPU per node across racks first; ``random``: seeded; or explicit
``nodes`` / ``gpus``), a ``start`` time and an ``iterations`` count; ``order`` arranges its ring. On a
cluster with a ``gpu_fabric`` a job's collectives run as NCCL runs them (``algorithm: auto``, the default;
a pattern without an algorithm likewise), channel by channel on the fabric (:mod:`sim.nccl_flows`).

All jobs run in one simulation on one :class:`~sim.network.Network` (``sharing`` and ``coupling`` as
there), then each job runs alone on the same GPUs: its *slowdown* is its mean iteration time shared over
alone. Link utilization (bytes moved / capacity per time bin) is recorded for the heat map.

Example (``experiments/studies/scenario-two-jobs.yaml``)::

    name: two jobs on one spine
    cluster: 16x8-h100-2to1
    jobs:
      - {name: resnet50, workload: resnet50, gpus: 64, placement: spread, iterations: 10}
      - {name: allreduce, pattern: {collective: allreduce, size: 512MiB}, gpus: 32, start: 20ms, iterations: 20}
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import simpy

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.device_compute import model_layer_seconds
from flexcomm.costmodel.documents import read_document
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.ring_orders import ORDERS, ring_order
from flexcomm.costmodel.units import parse_size, parse_time
from flexcomm.sim.buckets import DEFAULT_BUCKET_CAP, bucket_ready_seconds, make_buckets
from flexcomm.sim.collectives import run_collective
from flexcomm.sim.nccl_flows import all_pairs
from flexcomm.sim.network import COUPLINGS, SHARINGS, Network
from flexcomm.sim.training_config import default_algorithm
from flexcomm.sim.workload import get_training_workload

PLACEMENTS = ("packed", "spread", "random")
PATTERNS = ("allreduce", "allgather", "reduce-scatter", "broadcast", "alltoall", "alltoall-flows", "p2p")
#: Utilization is averaged over this many bins of the scenario's simulated time.
TIME_BINS = 200
_MAX_ITERATIONS = 100_000


@dataclass
class JobSpec:
    """One job of a scenario, validated (``ranks``: its GPUs, in the order its collectives use)."""

    name: str
    ranks: list[int]
    start_s: float
    iterations: int
    workload: str | None = None
    algorithm: str = "ring"
    pattern: dict[str, Any] = field(default_factory=dict)


@dataclass
class Scenario:
    name: str
    cluster: Cluster
    jobs: list[JobSpec]
    sharing: str = "max-min"
    coupling: str = "coflow"
    seed: int = 0


# --- reading and placing ------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (every problem one InputError naming ``scenario.<field>``)."""
    path = Path(path)
    data = read_document(path, "scenario", "scenario file")
    return scenario_from_dict(data, path.parent)


def _field(where: str, name: str) -> str:
    return f"scenario.{where}{'.' if where else ''}{name}"


def _whole(value: Any, where: str, name: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum and value > maximum):
        bound = f"an integer >= {minimum}" + (f" and <= {maximum:,}" if maximum else "")
        raise InputError(_field(where, name), value, bound)
    return value


def scenario_from_dict(data: Any, folder: Path | None = None) -> Scenario:
    if not isinstance(data, dict):
        raise InputError("scenario", data, "a mapping with cluster and jobs")
    known = {"name", "cluster", "jobs", "sharing", "coupling", "seed", "description"}
    for key in data:
        if key not in known:
            raise InputError(_field("", str(key)), data[key], "one of the keys " + ", ".join(sorted(known)))
    if "cluster" not in data:
        raise InputError("scenario.cluster", None, "an embedded cluster name or a cluster file")
    spec = data["cluster"]
    if isinstance(spec, str) and folder is not None and (folder / spec).is_file():
        spec = folder / spec
    cluster = load_cluster(spec)
    sharing = data.get("sharing", "max-min")
    if sharing not in SHARINGS:
        raise InputError("scenario.sharing", sharing, "one of " + ", ".join(SHARINGS))
    coupling = data.get("coupling", "coflow")
    if coupling not in COUPLINGS:
        raise InputError("scenario.coupling", coupling, "one of " + ", ".join(COUPLINGS))
    seed = _whole(data.get("seed", 0), "", "seed", 0)
    jobs_data = data.get("jobs")
    if not isinstance(jobs_data, list) or not jobs_data:
        raise InputError("scenario.jobs", jobs_data, "a non-empty list of jobs")
    held: dict[int, str] = {}
    jobs = []
    names: set[str] = set()
    for i, job in enumerate(jobs_data):
        spec_job = _job(job, f"jobs.{i}", cluster, held, seed + i)
        if spec_job.name in names:
            raise InputError(_field(f"jobs.{i}", "name"), spec_job.name, "a name no other job has")
        names.add(spec_job.name)
        for r in spec_job.ranks:
            held[r] = spec_job.name
        jobs.append(spec_job)
    return Scenario(str(data.get("name", "scenario")), cluster, jobs, sharing, coupling, seed)


def _job(data: Any, where: str, cluster: Cluster, held: dict[int, str], seed: int) -> JobSpec:
    if not isinstance(data, dict):
        raise InputError(_field(where, ""), data, "a mapping with name, workload or pattern, gpus, placement")
    known = {"name", "workload", "pattern", "gpus", "placement", "start", "iterations", "algorithm", "order", "seed"}
    for key in data:
        if key not in known:
            raise InputError(_field(where, str(key)), data[key], "one of the keys " + ", ".join(sorted(known)))
    name = str(data.get("name", where))
    if ("workload" in data) == ("pattern" in data):
        raise InputError(_field(where, "workload"), data.get("workload"), "exactly one of workload or pattern")
    start = parse_time(data.get("start", 0), _field(where, "start"))
    iterations = _whole(data.get("iterations", 10), where, "iterations", 1, _MAX_ITERATIONS)
    ranks = _place(data, where, cluster, held, int(data.get("seed", seed)))
    order = data.get("order", "rank")
    if order not in ORDERS:
        raise InputError(_field(where, "order"), order, "one of " + ", ".join(ORDERS))
    ranks = ring_order(cluster, ranks, order, seed) if order != "rank" else ranks
    cluster.fabric.check_connected(ranks)
    algorithm = str(data.get("algorithm", "auto"))
    job = JobSpec(name, ranks, start, iterations,
                  algorithm=default_algorithm(cluster) if algorithm == "auto" else algorithm)
    if "workload" in data:
        job.workload = str(data["workload"])
        get_training_workload(job.workload)  # the name, checked now
        return job
    pattern = data["pattern"]
    if not isinstance(pattern, dict) or pattern.get("collective") not in PATTERNS:
        raise InputError(_field(where, "pattern.collective"), pattern.get("collective") if isinstance(
            pattern, dict) else pattern, "one of " + ", ".join(PATTERNS))
    job.pattern = {"collective": pattern["collective"], "algorithm": pattern.get("algorithm"),
                   "size": parse_size(pattern.get("size", "64MiB"), _field(where, "pattern.size")),
                   "compute": parse_time(pattern.get("compute", 0), _field(where, "pattern.compute"))}
    return job


def _place(data: dict[str, Any], where: str, cluster: Cluster, held: dict[int, str], seed: int) -> list[int]:
    """The job's GPUs: explicit ``placement: {nodes: [...]}`` / ``{gpus: [...]}``, or ``gpus: N`` placed by
    ``packed``, ``spread`` or ``random`` among the GPUs no earlier job holds."""
    world = cluster.world_size
    placement = data.get("placement", "packed")
    if isinstance(placement, dict):
        if "nodes" in placement:
            nodes = placement["nodes"]
            if not isinstance(nodes, list) or not nodes:
                raise InputError(_field(where, "placement.nodes"), nodes, "a non-empty list of node indices")
            for n in nodes:
                if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < cluster.nodes:
                    raise InputError(_field(where, "placement.nodes"), n, f"node indices 0..{cluster.nodes - 1} of "
                                     f"cluster {cluster.name}")
            ranks = [r for n in nodes for r in cluster.ranks_on_node(n)]
        elif "gpus" in placement:
            ranks = placement["gpus"]
            if not isinstance(ranks, list) or not ranks:
                raise InputError(_field(where, "placement.gpus"), ranks, "a non-empty list of GPU (rank) indices")
            for r in ranks:
                if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world:
                    raise InputError(_field(where, "placement.gpus"), r, f"GPU indices 0..{world - 1} of cluster "
                                     f"{cluster.name}")
        else:
            raise InputError(_field(where, "placement"), placement, "packed, spread, random, {nodes: [...]} or "
                             "{gpus: [...]}")
        if len(set(ranks)) != len(ranks):
            raise InputError(_field(where, "placement"), ranks, "each GPU once")
        taken = [r for r in ranks if r in held]
        if taken:
            raise InputError(_field(where, "placement"), taken[0], f"GPUs no other job holds (job {held[taken[0]]} "
                             "holds this one)")
        return list(ranks)
    if placement not in PLACEMENTS:
        raise InputError(_field(where, "placement"), placement, "packed, spread, random, {nodes: [...]} or "
                         "{gpus: [...]}")
    free = [r for r in range(world) if r not in held]
    count = _whole(data.get("gpus", len(free)), where, "gpus", 1)
    if count > len(free):
        raise InputError(_field(where, "gpus"), count, f"at most {len(free)}, the GPUs of cluster {cluster.name} "
                         "the earlier jobs leave free")
    if placement == "packed":
        return free[:count]
    if placement == "random":
        return sorted(int(r) for r in np.random.default_rng(seed).choice(free, size=count, replace=False))
    # spread: one GPU per node before a second one, and nodes taken position-in-rack first, rack second, so
    # consecutive picks land on different racks
    dpn = cluster.devices_per_node
    position: dict[int, tuple[int, int]] = {}
    seen: dict[int, int] = {}
    for n in range(cluster.nodes):
        rack = cluster.leaf_of(n)
        position[n] = (seen.get(rack, 0), rack)
        seen[rack] = seen.get(rack, 0) + 1
    spread = sorted(free, key=lambda r: (r % dpn, position[r // dpn], r // dpn))
    return sorted(spread[:count])


# --- running ---------------------------------------------------------------------------------------


class UtilizationRecorder:
    """Bytes each link carried per time bin (a :meth:`Network.observe` observer)."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float, np.ndarray, np.ndarray]] = []

    def interval(self, t0: float, t1: float, network: Network) -> None:
        load = network.link_load()
        used = np.flatnonzero(load > 0)
        if len(used):
            self.spans.append((t0, t1, used, load[used]))

    def binned(self, network: Network, end: float, bins: int = TIME_BINS) -> tuple[np.ndarray, np.ndarray]:
        """(bin edges, links x bins utilization in [0, 1]) over [0, end]."""
        edges = np.linspace(0.0, end, bins + 1)
        moved = np.zeros((network.n_resources, bins))
        for t0, t1, used, load in self.spans:
            lo, hi = np.searchsorted(edges, t0, "right") - 1, np.searchsorted(edges, t1, "left")
            for b in range(max(lo, 0), min(hi, bins)):
                overlap = min(t1, edges[b + 1]) - max(t0, edges[b])
                if overlap > 0:
                    moved[used, b] += load * overlap
        width = np.diff(edges)
        capacity = network.cluster_bandwidth[:, None] * width[None, :]
        return edges, np.divide(moved, capacity, out=np.zeros_like(moved), where=capacity > 0)


@dataclass(frozen=True)
class ScenarioResult:
    """Both runs of a scenario: per-iteration times shared and alone, the spans a trace draws, and link
    utilization per time bin (what ``link_utilization.png`` shows)."""

    scenario: Scenario
    iterations: pd.DataFrame  #: job, iteration, start_s, end_s, seconds (shared run)
    alone: pd.DataFrame  #: the same, each job alone
    spans: pd.DataFrame  #: job, iteration, kind, start_s, end_s (for the trace)
    utilization: np.ndarray
    bin_edges: np.ndarray
    link_names: list[str]
    end_s: float

    def summary(self) -> pd.DataFrame:
        """One row per job: GPUs, iterations, mean iteration shared and alone, slowdown (``jobs.csv``)."""
        rows = []
        for job in self.scenario.jobs:
            shared = self.iterations[self.iterations["job"] == job.name]["seconds"]
            alone = self.alone[self.alone["job"] == job.name]["seconds"]
            rows.append({"job": job.name, "gpus": len(job.ranks), "kind": job.workload or job.pattern["collective"],
                         "iterations": len(shared), "mean_iteration_s": float(shared.mean()),
                         "alone_iteration_s": float(alone.mean()),
                         "slowdown": float(shared.mean() / alone.mean()) if alone.mean() > 0 else math.nan,
                         "finished_s": float(self.iterations[self.iterations["job"] == job.name]["end_s"].max())})
        return pd.DataFrame(rows)

    def utilization_table(self) -> pd.DataFrame:
        """Utilization per time bin of every link that carried anything (``utilization.csv``)."""
        busy = np.flatnonzero(self.utilization.max(axis=1) > 0)
        util = pd.DataFrame(self.utilization[busy].T, columns=[self.link_names[i] for i in busy])
        util.insert(0, "time_s", self.bin_edges[:-1])
        return util

    def info(self) -> dict[str, Any]:
        """The scenario, its settings, every job's summary and placement (``summary.json``)."""
        scenario = self.scenario
        return {"scenario": scenario.name, "cluster": scenario.cluster.name, "sharing": scenario.sharing,
                "coupling": scenario.coupling, "seed": scenario.seed, "end_s": self.end_s,
                "jobs": self.summary().to_dict("records"), "placements": {job.name: job.ranks for job in scenario.jobs}}


def _job_process(env: simpy.Environment, net: Network, job: JobSpec, rows: list[dict[str, Any]],
                 spans: list[dict[str, Any]]) -> Generator[Any, Any, None]:
    if job.start_s > 0:
        yield env.timeout(job.start_s)
    if job.workload is not None:
        workload = get_training_workload(job.workload)
        buckets = make_buckets(workload.model, DEFAULT_BUCKET_CAP)
        slowest = min((net.cluster.rank_devices[r] for r in job.ranks), key=lambda d: d.peak_flops)
        fwd, bwd = model_layer_seconds(workload.model, workload.batch_per_rank, slowest)
        ready = bucket_ready_seconds(fwd, bwd, buckets)
        compute = float(fwd.sum() + bwd.sum())
    for i in range(job.iterations):
        t0 = env.now
        if job.workload is not None:
            end = t0
            for b, bucket in enumerate(buckets):
                start = max(end, t0 + float(ready[b]))
                if start > env.now:
                    yield env.timeout(start - env.now)
                yield run_collective(env, net, "allreduce", job.algorithm, job.ranks, bucket.nbytes,
                                     tag=f"{job.name}:i{i}:b{b}")
                end = env.now
                spans.append({"job": job.name, "iteration": i, "kind": f"allreduce bucket {b}", "start_s": start,
                              "end_s": end})
            spans.append({"job": job.name, "iteration": i, "kind": "compute", "start_s": t0,
                          "end_s": t0 + compute})
            if t0 + compute > env.now:
                yield env.timeout(t0 + compute - env.now)
        else:
            yield from _pattern_iteration(env, net, job, i, spans)
        rows.append({"job": job.name, "iteration": i, "start_s": t0, "end_s": env.now, "seconds": env.now - t0})


def _pattern_iteration(env: simpy.Environment, net: Network, job: JobSpec, i: int,
                       spans: list[dict[str, Any]]) -> Generator[Any, Any, None]:
    pattern = job.pattern
    kind, size, gap = pattern["collective"], pattern["size"], pattern["compute"]
    if gap > 0:
        spans.append({"job": job.name, "iteration": i, "kind": "compute", "start_s": env.now,
                      "end_s": env.now + gap})
        yield env.timeout(gap)
    start = env.now
    ranks = np.asarray(job.ranks, dtype=np.int64)
    tag = f"{job.name}:i{i}"
    if kind == "alltoall-flows":
        yield net.send(all_pairs(ranks), size / len(ranks), tag=tag)
    elif kind == "p2p":
        yield net.send(np.stack([ranks, np.roll(ranks, -1)], axis=1), size, tag=tag)
    else:
        formula_default = {"alltoall": "pairwise", "broadcast": "binomial"}.get(kind, "ring")
        algorithm = pattern["algorithm"] or ("nccl" if net.cluster.gpu_fabric is not None else formula_default)
        yield run_collective(env, net, kind, algorithm, job.ranks, size, tag=tag)
    spans.append({"job": job.name, "iteration": i, "kind": kind, "start_s": start, "end_s": env.now})


def _simulate(scenario: Scenario, jobs: Sequence[JobSpec], record: bool) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                  Network, UtilizationRecorder | None]:
    env = simpy.Environment()
    net = Network(env, scenario.cluster, sharing=scenario.sharing, coupling=scenario.coupling)
    recorder = None
    if record:
        recorder = UtilizationRecorder()
        net.observe(recorder)
    rows: list[dict[str, Any]] = []
    spans: list[dict[str, Any]] = []
    for job in jobs:
        env.process(_job_process(env, net, job, rows, spans))
    env.run()
    return pd.DataFrame(rows), pd.DataFrame(spans), net, recorder


def run_scenario(scenario: Scenario) -> ScenarioResult:
    """All jobs together, then each alone on the same GPUs (same seed, same numbers)."""
    shared, spans, net, recorder = _simulate(scenario, scenario.jobs, record=True)
    alone = pd.concat([_simulate(scenario, [job], record=False)[0] for job in scenario.jobs], ignore_index=True)
    end = float(shared["end_s"].max())
    assert recorder is not None
    edges, util = recorder.binned(net, end)
    return ScenarioResult(scenario, shared, alone, spans, util, edges, list(net.link_names), end)


def simulate_scenario(scenario: str | Path | dict[str, Any] | Scenario, *, sharing: str | None = None,
                      coupling: str | None = None) -> ScenarioResult:
    """A scenario (its file, its mapping or a loaded :class:`Scenario`), every field checked before anything
    runs, simulated with ``sharing`` / ``coupling`` in place of the file's where given."""
    if isinstance(scenario, Scenario):
        loaded = scenario
    elif isinstance(scenario, dict):
        loaded = scenario_from_dict(scenario)
    else:
        loaded = load_scenario(scenario)
    for option, value, allowed in (("sharing", sharing, SHARINGS), ("coupling", coupling, COUPLINGS)):
        if value is not None:
            if value not in allowed:
                raise InputError(option, value, "one of " + ", ".join(allowed))
            loaded = replace(loaded, **{option: value})
    return run_scenario(loaded)
