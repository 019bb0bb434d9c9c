"""Simulated training-step time of a placement (op -> device): forward, backward, transfers, memory.

Model (one training step of one model replica split over devices):

* every op runs forward on its device, then backward (``backward_factor`` x the forward time) on
  the same device; an op's time is ``planner.graphs.op_time_s`` when that module is importable,
  else ``flops / (efficiency x peak)`` (``measured_s`` where a node carries it);
* a tensor crossing devices (an edge's ``bytes`` forward, the same bytes of gradient backward)
  costs ``latency + bytes / bandwidth`` on the link between the two devices; an activation is sent
  once per consuming device, a gradient once per input it belongs to; with ``contention`` each
  device's egress port sends one tensor at a time;
* each device runs one op at a time, non-preemptively, in an event simulation: when a device is
  free it starts the ready op of highest priority (earliest micro-batch, then longest remaining path),
  i.e. a list schedule; no device idles while it has a ready op;
* with ``micro_batches`` M > 1 the batch is split GPipe-style: every op runs M times on 1/M of
  the work and bytes, so any placement -- chains and multi-branch stages alike -- pipelines;
* memory per device = sum over its ops of ``memory_factor`` x ``param_bytes`` (weights, gradients,
  optimizer state) + ``activation_bytes`` (kept for backward). Over the device's memory the
  placement is infeasible: its step time is multiplied by ``2 + 10 x overflow`` (the penalty a
  search sees), and :class:`Simulation` says ``feasible=False``.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from flexcomm.costmodel.cluster_parts import Device
from flexcomm.costmodel.errors import InputError
from flexcomm.placement.devices import DeviceSet

Placement = Sequence[int] | np.ndarray

_FREE, _ARRIVE, _DISPATCH = 0, 1, 2  # at one instant: frees, then arrivals, then starts


def _fallback_op_time(graph: nx.DiGraph, node: object, peak_flops: float, efficiency: float) -> float:
    data = graph.nodes[node]
    if data.get("measured_s") is not None:
        return float(data["measured_s"])
    return float(data.get("flops", 0.0)) / (efficiency * peak_flops)


def op_time_table(graph: nx.DiGraph, nodes: Sequence[object], devices: DeviceSet, efficiency: float) -> np.ndarray:
    """Forward seconds of every op on every device, shape (ops, devices)."""
    times = np.zeros((len(nodes), devices.count))
    unique = sorted(set(devices.peak_flops.tolist()))
    for peak in unique:
        cols = np.flatnonzero(devices.peak_flops == peak)
        col = np.array([_fallback_op_time(graph, v, peak, efficiency) for v in nodes])
        times[:, cols] = col[:, None]
    return times


@dataclass
class Simulation:
    """One simulated step: the makespan, what the search sees (penalised), memory and the schedule."""

    step_time_s: float  # penalised when infeasible
    makespan_s: float
    feasible: bool
    memory_bytes: np.ndarray
    busy_s: np.ndarray
    transfer_bytes: float
    schedule: list[tuple[int, int, int, bool, float, float]] = field(default_factory=list)
    # schedule rows: (op index, micro-batch, device, backward?, start, end)
    transfers: list[tuple[int, int, float, float, float]] = field(default_factory=list)
    # transfer rows (traced): (from device, to device, leaves its port, arrives, bytes)


class PlacementProblem:
    """A graph on a device set, compiled to arrays once so that a placement is priced fast."""

    def __init__(self, graph: nx.DiGraph, devices: DeviceSet, *, efficiency: float = 0.65,
                 backward_factor: float = 2.0, micro_batches: int = 1, memory_factor: float = 4.0,
                 contention: bool = True, op_times: np.ndarray | None = None) -> None:
        if graph.number_of_nodes() == 0:
            raise InputError("graph", graph.graph.get("name", "?"), "a graph with at least one op")
        if not nx.is_directed_acyclic_graph(graph):
            raise InputError("graph", graph.graph.get("name", "?"), "a directed acyclic graph of ops")
        if not 0 < efficiency <= 1:
            raise InputError("efficiency", efficiency, "a fraction in (0, 1]")
        if backward_factor < 0:
            raise InputError("backward_factor", backward_factor, "a number >= 0")
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
            raise InputError("micro_batches", micro_batches, "an integer >= 1")
        self.graph = graph
        self.devices = devices
        self.backward_factor = backward_factor
        self.micro_batches = micro_batches
        self.memory_factor = memory_factor
        self.contention = contention
        self.nodes: list[object] = list(nx.lexicographical_topological_sort(graph, key=str))
        self.index: dict[object, int] = {v: i for i, v in enumerate(self.nodes)}
        n = len(self.nodes)
        if op_times is None:
            op_times = self._op_times(efficiency)
        self.fwd_s = np.asarray(op_times, dtype=float)
        if self.fwd_s.shape != (n, devices.count):
            raise InputError("op_times", self.fwd_s.shape, f"shape ({n}, {devices.count})")
        self.preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        self.succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for u, v, data in graph.edges(data=True):
            i, j = self.index[u], self.index[v]
            nbytes = float(data.get("bytes", graph.nodes[u].get("activation_bytes", 0.0)))
            self.succs[i].append((j, nbytes))
            self.preds[j].append((i, nbytes))
        attrs = [graph.nodes[v] for v in self.nodes]
        self.op_memory = np.array([memory_factor * float(a.get("param_bytes", 0.0))
                                   + float(a.get("activation_bytes", 0.0)) for a in attrs])
        mean = self.fwd_s.mean(axis=1)
        # Bottom level of the forward+backward DAG (no communication): the longest path to the end.
        # Backward tasks form the mirrored graph, so bwd_level[i] = bwd time of i + max over preds.
        bwd_level = np.zeros(n)
        for i in range(n):
            bwd_level[i] = backward_factor * mean[i] + max((bwd_level[p] for p, _ in self.preds[i]), default=0.0)
        fwd_level = np.zeros(n)
        for i in reversed(range(n)):
            tail = max((fwd_level[s] for s, _ in self.succs[i]), default=0.0)
            fwd_level[i] = mean[i] + max(tail, bwd_level[i])
        self.fwd_level = fwd_level
        self.bwd_level = bwd_level
        self._compile()

    def _op_times(self, efficiency: float) -> np.ndarray:
        try:
            from flexcomm.planner.graphs import op_time_s  # the graph builder's own op cost, when it exists
        except ImportError:
            return op_time_table(self.graph, self.nodes, self.devices, efficiency)
        times = np.zeros((len(self.nodes), self.devices.count))
        cache: dict[float, np.ndarray] = {}
        for d in range(self.devices.count):
            peak = float(self.devices.peak_flops[d])
            if peak not in cache:

                device = Device(name=self.devices.names[d], peak_flops=peak,
                                memory_bytes=float(self.devices.memory_bytes[d]))
                cache[peak] = np.array([op_time_s(self.graph, v, device, efficiency=efficiency) for v in self.nodes])
            times[:, d] = cache[peak]
        return times

    def _compile(self) -> None:
        """Task arrays: task t = (micro-batch m, op i, backward?), t = (m * 2 + b) * n + i."""
        n, m = len(self.nodes), self.micro_batches
        tasks = 2 * n * m
        self.n_tasks = tasks
        self.task_op = [t % n for t in range(tasks)]
        self.task_mb = [t // (2 * n) for t in range(tasks)]
        self.task_bwd = [(t // n) % 2 == 1 for t in range(tasks)]
        succ: list[list[tuple[int, float]]] = [[] for _ in range(tasks)]
        indeg = [0] * tasks
        for mb in range(m):
            f0, b0 = (mb * 2) * n, (mb * 2 + 1) * n
            for i in range(n):
                for j, nbytes in self.succs[i]:
                    succ[f0 + i].append((f0 + j, nbytes / m))  # activation forward
                    succ[b0 + j].append((b0 + i, nbytes / m))  # its gradient backward
                succ[f0 + i].append((b0 + i, 0.0))  # backward of an op after its forward, same device
        for t in range(tasks):
            for s, _ in succ[t]:
                indeg[s] += 1
        self.task_succ = succ
        self.task_indeg = indeg
        # Priority: earlier micro-batch first (so a stage hands each micro-batch on as soon as it can),
        # then larger bottom level, then index (deterministic).
        level = [(self.bwd_level[self.task_op[t]] if self.task_bwd[t] else self.fwd_level[self.task_op[t]])
                 for t in range(tasks)]
        order = sorted(range(tasks), key=lambda t: (self.task_mb[t], -level[t], t))
        self.task_rank = [0] * tasks
        for r, t in enumerate(order):
            self.task_rank[t] = r
        scale = np.where(np.array(self.task_bwd)[:, None], self.backward_factor, 1.0) / m
        self.task_time = (self.fwd_s[np.array(self.task_op)] * scale).tolist()  # per task, per device

    # --- pricing ----------------------------------------------------------------------------------
    def check(self, placement: Placement) -> list[int]:
        """The placement as a list of device indices, one per op in ``self.nodes`` order; else InputError."""
        p = [int(d) for d in np.asarray(placement).ravel()]
        if len(p) != len(self.nodes):
            raise InputError("placement", len(p), f"one device per op ({len(self.nodes)})")
        if p and (min(p) < 0 or max(p) >= self.devices.count):
            raise InputError("placement", [min(p), max(p)], f"device indices 0..{self.devices.count - 1}")
        return p

    def from_mapping(self, mapping: Mapping[object, int]) -> list[int]:
        """A placement from ``{op name: device index}``."""
        missing = [v for v in self.nodes if v not in mapping]
        if missing:
            raise InputError("placement", missing[:3], "a device for every op")
        return self.check([mapping[v] for v in self.nodes])

    def memory(self, placement: Placement) -> np.ndarray:
        return np.bincount(np.asarray(placement, dtype=int), weights=self.op_memory, minlength=self.devices.count)

    def penalty(self, memory: np.ndarray) -> float:
        over = float(np.max(memory / self.devices.memory_bytes)) - 1.0
        return 1.0 if over <= 0 else 2.0 + 10.0 * over

    def step_time(self, placement: Placement) -> float:
        """Penalised simulated step time (what a search minimises)."""
        return self.simulate(placement).step_time_s

    def simulate(self, placement: Placement, *, trace: bool = False, validate: bool = True) -> Simulation:
        """One step of ``placement``: the event simulation's makespan, penalised by memory over the devices'."""
        p = self.check(placement) if validate else list(placement)
        makespan, busy, moved, schedule, transfers = self._run_schedule(p, trace)
        memory = np.bincount(np.asarray(p, dtype=int), weights=self.op_memory, minlength=self.devices.count)
        factor = self.penalty(memory)
        return Simulation(step_time_s=makespan * factor, makespan_s=makespan, feasible=factor == 1.0,
                          memory_bytes=memory, busy_s=np.asarray(busy), transfer_bytes=moved, schedule=schedule,
                          transfers=transfers)

    def _run_schedule(self, p: list[int], trace: bool) -> tuple[float, list[float], float, list, list]:
        """The event simulation of placement ``p``: (makespan, busy seconds per device, bytes moved, schedule,
        transfers). One loop on purpose: it runs per task and per edge, so its state stays in locals."""
        D = self.devices.count
        task_op, task_succ, task_time, task_rank = self.task_op, self.task_succ, self.task_time, self.task_rank
        task_bwd = self.task_bwd
        lat_l, beta_l = self.devices.latency_s.tolist(), self.devices.beta_s_per_byte.tolist()
        contention = self.contention
        remaining = list(self.task_indeg)
        ready_at = [0.0] * self.n_tasks
        idle = [True] * D
        egress = [0.0] * D
        queues: list[list[tuple[int, int]]] = [[] for _ in range(D)]
        sent: dict[tuple[int, int], float] = {}
        busy = [0.0] * D
        moved = makespan = 0.0
        done = 0
        schedule: list[tuple[int, int, int, bool, float, float]] = []
        transfers: list[tuple[int, int, float, float, float]] = []
        # (time, kind, seq, payload): the tasks with no inputs arrive at 0
        events = [(0.0, _ARRIVE, seq, t) for seq, t in enumerate(t for t in range(self.n_tasks) if remaining[t] == 0)]
        seq = len(events)
        heapq.heapify(events)
        while events:
            now, kind, _, payload = heapq.heappop(events)
            if kind != _DISPATCH:  # a task arrived or a device freed: start at ``now`` once all are in
                if kind == _ARRIVE:
                    d = p[task_op[payload]]
                    heapq.heappush(queues[d], (task_rank[payload], payload))
                else:
                    d = payload
                    idle[d] = True
                if idle[d]:
                    heapq.heappush(events, (now, _DISPATCH, seq, d))
                    seq += 1
                continue
            d = payload
            if not idle[d] or not queues[d]:
                continue
            _, t = heapq.heappop(queues[d])
            idle[d] = False
            dur = task_time[t][d]
            end = now + dur
            busy[d] += dur
            done += 1
            if end > makespan:
                makespan = end
            if trace:
                schedule.append((task_op[t], self.task_mb[t], d, self.task_bwd[t], now, end))
            heapq.heappush(events, (end, _FREE, seq, d))
            seq += 1
            for s, nbytes in task_succ[t]:
                ds = p[task_op[s]]
                if ds == d:
                    arrive = end
                else:
                    # a forward output goes once to each consuming device; gradients differ per input
                    key = (t, ds) if not task_bwd[t] else (t, -1 - s)
                    arrive = sent.get(key, -1.0)
                    if arrive < 0.0:
                        occupy = nbytes * beta_l[d][ds]
                        start = end
                        if contention:
                            start = max(end, egress[d])
                            egress[d] = start + occupy
                        arrive = start + lat_l[d][ds] + occupy
                        sent[key] = arrive
                        moved += nbytes
                        if trace:
                            transfers.append((d, ds, start, arrive, nbytes))
                if arrive > ready_at[s]:
                    ready_at[s] = arrive
                remaining[s] -= 1
                if remaining[s] == 0:
                    heapq.heappush(events, (ready_at[s], _ARRIVE, seq, s))
                    seq += 1
        if done != self.n_tasks:  # pragma: no cover - the graph is a DAG, so every task runs
            raise RuntimeError(f"simulated {done} of {self.n_tasks} tasks")
        return makespan, busy, moved, schedule, transfers

    def single_device_s(self, device: int = 0) -> float:
        """Sum of every task's time on one device: the step time of placing everything there."""
        return float(self.fwd_s[:, device].sum() * (1.0 + self.backward_factor))
