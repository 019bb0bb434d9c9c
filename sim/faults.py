"""Failures of nodes and links during a simulated training job, and what the job does about them.

A failure takes elements of the network down through their own factor slot (capacity x 0, see
:meth:`sim.network.Network.add_factor_slot`), so collectives crossing them stall exactly as the
network model says, with no special case: a ring loses every step, a collective that does not
cross the element is untouched. A failed *node* also kills its ranks, so the next collective they
should join never starts. Either way the surviving ranks sit in a collective until a watchdog fires
``timeout_s`` after the first of them entered it (NCCL's watchdog, ``TORCH_NCCL_*`` timeout), and
the job restarts from its last checkpoint (:class:`FaultPolicy`): on the same ranks once the
element is repaired, or, ``elastic``, at once on the ranks of the nodes still up, growing back at
the first checkpoint after the repair.

Fault specs (``--fail``): ``node3@12s`` (node 3 fails 12 s into the job), ``link:node3->switch@5s``
(one direction of node 3's NIC; any link spec of :meth:`sim.network.Network.edges`, e.g.
``node3<->switch``, ``leaf0->spine``, ``dev5``) and ``random:mtbf=2h`` (every node of the job fails
after exponentially distributed times of mean 2 h, drawn from a seeded generator per node, so a
seed gives the same failures whatever else changes). Elements come back ``repair_s`` after failing.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_SIM_FAILURES
from flexcomm.costmodel.training_state import checkpoint_bytes_per_param
from flexcomm.costmodel.units import parse_bandwidth, parse_time

if TYPE_CHECKING:
    from flexcomm.sim.network import Network

FAULT_FORM = (
    "node<N>@<time> (e.g. node3@12s), link:<link>@<time> (e.g. link:node3->switch@5s) "
    "or random:mtbf=<time>[,seed=<int>] (e.g. random:mtbf=2h)"
)

#: Bytes of training state per parameter in a checkpoint: fp32 weights + Adam's two moments (these workloads
#: train in fp32; the transformer recovery engine checkpoints mixed-precision state, 14 B).
STATE_BYTES_PER_PARAM = checkpoint_bytes_per_param("fp32")


@dataclass(frozen=True)
class Fault:
    """One scheduled failure: ``kind`` ``node`` (target = node index) or ``link`` (target = link spec)."""

    kind: str
    target: str
    at_s: float
    spec: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("node", "link"):
            raise InputError("fail", self.kind, "a node or link fault")
        if not (math.isfinite(self.at_s) and self.at_s >= 0):
            raise InputError("fail", self.spec or self.at_s, "a failure time >= 0")


@dataclass(frozen=True)
class RandomNodeFaults:
    """Every node of the job fails after Exp(``mtbf_s``) seconds of uptime, again after each repair."""

    mtbf_s: float
    seed: int = 0
    spec: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mtbf_s) and self.mtbf_s > 0):
            raise InputError("fail", self.spec or self.mtbf_s, "a positive mean time between failures")


FaultSource = Fault | RandomNodeFaults

_NODE_RE = re.compile(r"^node(\d+)$")


def parse_fault(text: str, seed: int = 0) -> FaultSource:
    """A fault from its spec (see the module doc); ``seed`` seeds ``random:`` specs without their own."""
    raw = str(text).strip()
    if raw.startswith("random:"):
        options: dict[str, str] = {}
        for part in raw[len("random:"):].split(","):
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in ("mtbf", "seed") or key.strip() in options:
                raise InputError("fail", raw, FAULT_FORM)
            options[key.strip()] = value.strip()
        if "mtbf" not in options:
            raise InputError("fail", raw, FAULT_FORM)
        try:
            mtbf = parse_time(options["mtbf"], "fail")
            own_seed = int(options["seed"]) if "seed" in options else seed
        except (InputError, ValueError):
            raise InputError("fail", raw, FAULT_FORM) from None
        return RandomNodeFaults(mtbf, own_seed, raw)
    what, at, when = raw.rpartition("@")
    if not at or not what:
        raise InputError("fail", raw, FAULT_FORM)
    try:
        at_s = parse_time(when, "fail")
    except InputError:
        raise InputError("fail", raw, FAULT_FORM) from None
    match = _NODE_RE.match(what)
    if match:
        return Fault("node", match.group(1), at_s, raw)
    if what.startswith("link:") and what[len("link:"):].strip():
        return Fault("link", what[len("link:"):].strip(), at_s, raw)
    raise InputError("fail", raw, FAULT_FORM)


def parse_faults(texts: Iterable[str | FaultSource], seed: int = 0) -> list[FaultSource]:
    """Specs or already-built faults, in order."""
    return [t if isinstance(t, (Fault, RandomNodeFaults)) else parse_fault(t, seed) for t in texts]


def _nonnegative(field_name: str, value: float | str, expected: str = "a non-negative time such as 30s") -> float:
    seconds = parse_time(value, field_name) if isinstance(value, str) else float(value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise InputError(field_name, value, expected)
    return seconds


@dataclass(frozen=True)
class FaultPolicy:
    """How the job detects failures, checkpoints and restarts.

    Costs of a restart: ``timeout_s`` of detection (after the first surviving rank entered the hung
    collective), the work since the last checkpoint, ``restart_s`` to relaunch and rendezvous, and
    the checkpoint load; ``checkpoint_write_s`` is paid every ``checkpoint_every`` iterations
    (0: never, so a failure restarts from the beginning). Checkpoint times default to the
    training state (:data:`STATE_BYTES_PER_PARAM` per parameter) over ``storage_Bps``.
    ``elastic``: continue without the failed node's ranks and grow back at the first checkpoint
    after its repair; ``elastic_batch`` ``global`` keeps the global batch (each survivor computes
    more) or ``per-rank`` keeps each rank's batch (the global batch shrinks). A job that needs more
    than ``max_restarts`` relaunches (failures faster than it can restart) is aborted.
    """

    timeout_s: float = 30.0
    restart_s: float = 30.0
    repair_s: float = 300.0
    checkpoint_every: int = 0
    checkpoint_write_s: float | None = None
    checkpoint_load_s: float | None = None
    storage_Bps: float = 2e9
    elastic: bool = False
    elastic_batch: str = "global"
    max_restarts: int = 1000

    def __post_init__(self) -> None:
        for name in ("timeout_s", "restart_s", "repair_s"):
            object.__setattr__(self, name, _nonnegative(name.removesuffix("_s"), getattr(self, name)))
        for name in ("checkpoint_write_s", "checkpoint_load_s"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _nonnegative(name.removesuffix("_s"), getattr(self, name)))
        if isinstance(self.storage_Bps, str):
            object.__setattr__(self, "storage_Bps", parse_bandwidth(self.storage_Bps, "storage"))
        if not self.storage_Bps > 0:
            raise InputError("storage", self.storage_Bps, "a positive bandwidth")
        every = self.checkpoint_every
        if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 0:
            raise InputError("checkpoint-every", every, "an integer >= 0 (0: no checkpoints)")
        if self.elastic_batch not in ("global", "per-rank"):
            raise InputError("elastic_batch", self.elastic_batch, "global or per-rank")
        if not (isinstance(self.max_restarts, int) and self.max_restarts >= 0):
            raise InputError("max_restarts", self.max_restarts, "an integer >= 0")

    def write_seconds(self, params: int) -> float:
        """Seconds to write one checkpoint of a model with ``params`` parameters."""
        if self.checkpoint_write_s is not None:
            return self.checkpoint_write_s
        return params * STATE_BYTES_PER_PARAM / self.storage_Bps

    def load_seconds(self, params: int) -> float:
        """Seconds to load the checkpoint on restart."""
        if self.checkpoint_load_s is not None:
            return self.checkpoint_load_s
        return params * STATE_BYTES_PER_PARAM / self.storage_Bps


@dataclass
class FaultRecord:
    """A failure that happened, and (filled in by the job) what it did to the job."""

    time_s: float
    kind: str
    target: str
    repair_s: float
    spec: str
    nodes: tuple[int, ...] = ()
    effect: str = "no restart"
    detected_s: float = math.nan


@dataclass
class _LinkDown:
    record: FaultRecord
    resources: np.ndarray
    until: float


def check_random_failures(sources: Sequence[FaultSource], nodes: int, iterations: int, iteration_s: float,
                          checkpoint_every: int, elastic: bool, max_restarts: int | None = None) -> None:
    """Refuse, before running, random faults the job could not outlive within :data:`MAX_SIM_FAILURES`.

    Why: ``random:mtbf=2s`` on 8 nodes is a failure every 250 ms; a job that restarts from its last
    checkpoint must get through ``checkpoint_every`` iterations between two failures, which takes about
    e^(k T n / MTBF) tries (T: one iteration's compute, a lower bound of its time), so it ran for minutes,
    silently (a job that aborts after ``max_restarts`` relaunches meets no more of them than that). An
    elastic job drops the node and goes on: it meets about n N T / MTBF failures."""
    limit = MAX_SIM_FAILURES.value
    for source in sources:
        if not isinstance(source, RandomNodeFaults) or iteration_s <= 0:
            continue
        per_iteration = nodes * iteration_s / source.mtbf_s  # expected failures during one iteration
        if elastic:
            expected = iterations * per_iteration
        else:
            k = min(checkpoint_every or iterations, iterations)
            expected = math.ceil(iterations / k) * math.expm1(min(k * per_iteration, 700.0))
            if max_restarts is not None:
                expected = min(expected, max_restarts + 1)
        if expected > limit:
            raise InputError("fail", source.spec, f"at most {limit:,} failures in one simulated job, this asks for "
                             f"~{expected:,.3g} (a job MTBF of {source.mtbf_s / nodes:.3g} s over {nodes} nodes "
                             f"against >= {iteration_s:.3g} s per iteration, {iterations} iterations"
                             + ("" if elastic else f", restarting from a checkpoint every {k}")
                             + f"; set {MAX_SIM_FAILURES.env} to raise the limit)")


class FaultInjector:
    """Applies faults to a network over simulated time and answers what is down (for the job).

    ``job_nodes``: the nodes random faults strike (default every node). The injector owns one
    factor slot; an element stays at factor 0 while any of its faults is unrepaired.
    """

    def __init__(self, faults: Sequence[FaultSource], repair_s: float = 300.0,
                 job_nodes: Sequence[int] | None = None) -> None:
        self.faults = list(faults)
        self.repair_s = _nonnegative("repair", repair_s)
        self.job_nodes = None if job_nodes is None else sorted(set(job_nodes))
        self.records: list[FaultRecord] = []
        self._times: list[float] = []
        self.node_down_until: dict[int, float] = {}
        self.links_down: list[_LinkDown] = []
        self.last_node_failure = -math.inf
        self._node_failures: list[tuple[float, int]] = []
        self.network: Network | None = None

    # --- wiring ---------------------------------------------------------------------------------
    def attach(self, network: Network) -> None:
        """Validate targets against the network and start one process per fault source."""
        self.network = network
        self._slot = network.add_factor_slot()
        self._down = np.zeros(network.n_resources, dtype=np.int64)
        nodes = network.cluster.nodes
        env = network.env
        for fault in self.faults:
            if isinstance(fault, RandomNodeFaults):
                targets = self.job_nodes if self.job_nodes is not None else list(range(nodes))
                for node in targets:
                    rng = np.random.default_rng([fault.seed, node])
                    env.process(self._random_node(node, fault, rng))
                continue
            if fault.kind == "node":
                node = int(fault.target)
                if not 0 <= node < nodes:
                    raise InputError("fail", fault.spec, f"a node 0..{nodes - 1} of cluster {network.cluster.name}")
                env.process(self._scheduled(fault, self._node_resources(node), (node,)))
            else:
                try:
                    edges = network.edges(fault.target)
                except InputError as exc:
                    raise InputError("fail", fault.spec, f"a link of cluster {network.cluster.name}: "
                                     f"{exc.expected}") from None
                resources = np.unique(network.routes.edge_res[edges])
                env.process(self._scheduled(fault, resources, self._hosts_of(edges)))

    def _node_resources(self, node: int) -> np.ndarray:
        net = self.network
        assert net is not None
        dpn = net.cluster.devices_per_node
        specs = [*net.node_vertices(node), *(f"dev{r}" for r in range(node * dpn, (node + 1) * dpn))]
        return net.resources(specs)

    def _hosts_of(self, edges: np.ndarray) -> tuple[int, ...]:
        """Nodes an edge set touches: ``node<i>`` ends and the nodes of ``dev<r>`` ports."""
        net = self.network
        assert net is not None
        hosts: set[int] = set()
        for e in edges.tolist():
            for end in net.edge_names[e].split("->"):
                if end in net.vertex_node:
                    hosts.add(net.vertex_node[end])
                elif end.startswith("dev") and end[3:].isdigit():
                    hosts.add(net.node_of(int(end[3:])))
        return tuple(sorted(hosts))

    # --- processes ------------------------------------------------------------------------------
    def _set_down(self, resources: np.ndarray, delta: int) -> None:
        net = self.network
        assert net is not None
        self._down[resources] += delta
        net.set_factors(self._slot, resources, np.where(self._down[resources] > 0, 0.0, 1.0))

    def _fail_node(self, node: int, spec: str) -> Generator:
        net = self.network
        assert net is not None
        now = net.env.now
        record = FaultRecord(now, "node", f"node{node}", self.repair_s, spec, (node,))
        self.records.append(record)
        if len(self.records) > MAX_SIM_FAILURES.value:  # the estimate before the run is a lower bound
            raise InputError("fail", spec, f"at most {MAX_SIM_FAILURES.value:,} {MAX_SIM_FAILURES.what} (the job "
                             f"had not finished at {now:.3g} s simulated; set {MAX_SIM_FAILURES.env} to raise "
                             "the limit)")
        resources = self._node_resources(node)
        self._set_down(resources, +1)
        self.node_down_until[node] = max(self.node_down_until.get(node, -math.inf), now + self.repair_s)
        self._node_failures.append((now, node))
        self.last_node_failure = now
        yield net.env.timeout(self.repair_s)
        self._set_down(resources, -1)

    def _scheduled(self, fault: Fault, resources: np.ndarray, hosts: tuple[int, ...]) -> Generator:
        net = self.network
        assert net is not None
        env = net.env
        if fault.at_s > env.now:
            yield env.timeout(fault.at_s - env.now)
        if fault.kind == "node":
            yield from self._fail_node(int(fault.target), fault.spec)
            return
        record = FaultRecord(env.now, "link", fault.target, self.repair_s, fault.spec, hosts)
        self.records.append(record)
        down = _LinkDown(record, resources, env.now + self.repair_s)
        self.links_down.append(down)
        self._set_down(resources, +1)
        yield env.timeout(self.repair_s)
        self._set_down(resources, -1)
        self.links_down.remove(down)

    def _random_node(self, node: int, fault: RandomNodeFaults, rng: np.random.Generator) -> Generator:
        env = self.network.env if self.network is not None else None
        assert env is not None
        while True:
            yield env.timeout(float(rng.exponential(fault.mtbf_s)))
            yield from self._fail_node(node, fault.spec)

    # --- queries for the job --------------------------------------------------------------------
    def node_failed_since(self, nodes: Iterable[int], since: float) -> float | None:
        """Earliest failure time >= ``since`` of any of ``nodes``, or None."""
        if self.last_node_failure < since:
            return None
        wanted = set(nodes)
        times = [t for t, n in self._node_failures if t >= since and n in wanted]
        return min(times) if times else None

    def node_up(self, node: int, now: float) -> bool:
        return self.node_down_until.get(node, -math.inf) <= now

    def usable_nodes(self, nodes: Iterable[int], now: float) -> list[int]:
        """Nodes that are up and touch no link that is down."""
        cut = {h for d in self.links_down for h in d.record.nodes}
        return [n for n in nodes if self.node_up(n, now) and n not in cut]

    def blocking_links(self) -> list[_LinkDown]:
        """Down links no node can be dropped for (switch-to-switch): even an elastic job waits for them."""
        return [d for d in self.links_down if not d.record.nodes]

    def repaired_at(self, nodes: Iterable[int], links: bool = True) -> float:
        """When every one of ``nodes`` (and, with ``links``, every down link) is back up."""
        times = [self.node_down_until.get(n, -math.inf) for n in nodes]
        if links:
            times += [d.until for d in self.links_down]
        return max(times, default=-math.inf)

    def next_repair(self, now: float) -> float:
        """The next time a down node or link comes back (``now`` if nothing is down)."""
        times = [t for t in self.node_down_until.values() if t > now] + [d.until for d in self.links_down]
        return min(times, default=now)

    def faults_between(self, start: float, end: float) -> list[FaultRecord]:
        """Failures with ``start <= time <= end`` (records are appended in time order)."""
        times = self._times
        if len(times) != len(self.records):
            times[:] = [r.time_s for r in self.records]
        return self.records[bisect.bisect_left(times, start): bisect.bisect_right(times, end)]


@dataclass
class LostTime:
    """Where a faulty run's time went beyond useful iterations (seconds)."""

    lost_work_s: float = 0.0
    detection_s: float = 0.0
    repair_wait_s: float = 0.0
    restart_s: float = 0.0
    checkpoint_s: float = 0.0
    reduced_throughput_s: float = 0.0
    restarts: int = 0
    relaunches: int = 0
    shrinks: int = 0
    grows: int = 0
    per_restart: list[dict] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        """Lost work + detection + repair wait + restarts + checkpoint writes + reduced throughput."""
        return (self.lost_work_s + self.detection_s + self.repair_wait_s + self.restart_s + self.checkpoint_s
                + self.reduced_throughput_s)

    def as_dict(self) -> dict[str, float | int]:
        return {
            "lost_work_s": self.lost_work_s, "detection_s": self.detection_s, "repair_wait_s": self.repair_wait_s,
            "restart_s": self.restart_s, "checkpoint_s": self.checkpoint_s,
            "reduced_throughput_s": self.reduced_throughput_s, "total_s": self.total_s,
            "restarts": self.restarts, "relaunches": self.relaunches, "shrinks": self.shrinks, "grows": self.grows,
        }
