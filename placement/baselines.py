"""Classic placers, each scored by the same simulator the learned searches use.

* ``single``: every op on the fastest device (the reference every speedup is quoted against);
* ``critical-path``: list scheduling in the style of Baechi's m-ETF -- ops in order of their
  longest remaining path, each on the device where it finishes earliest (transfers included)
  among those whose memory still holds it;
* ``partition``: a METIS k-way partition (pymetis) of the op graph, compute-balanced with the
  bytes crossing parts minimised, for every k up to the device count; the best k by the simulator;
* ``dp-chain``: the ops in a topological order cut into k contiguous stages by dynamic programming
  minimising the bottleneck stage (compute + bytes sent to later stages, memory-feasible), the
  pipeline objective; the best k by the simulator (with micro-batches this is a pipeline).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import numpy as np

from flexcomm.placement.simulator import PlacementProblem


@dataclass
class PlacerResult:
    """A placement found by a method, its simulated step time, and what finding it cost."""

    method: str
    placement: list[int]
    step_time_s: float
    feasible: bool
    search_s: float
    evaluations: int
    detail: str = ""


def _best_device(problem: PlacementProblem) -> int:
    peak = problem.devices.peak_flops
    return int(np.flatnonzero(peak == peak.max())[0])


def single(problem: PlacementProblem) -> list[int]:
    """Every op on the fastest device (the first of them)."""
    return [_best_device(problem)] * len(problem.nodes)


def critical_path(problem: PlacementProblem) -> list[int]:
    """m-ETF-style list scheduling of the forward graph, each op weighted by forward + backward time.

    Transfers are weighted by activation + gradient (both directions cross the same cut). A device
    whose memory the op would overflow is skipped unless none has room (then: earliest finish).
    """
    n, D = len(problem.nodes), problem.devices.count
    weight = problem.fwd_s * (1.0 + problem.backward_factor)
    lat, beta = problem.devices.latency_s, problem.devices.beta_s_per_byte
    free = np.zeros(D)
    used = np.zeros(D)
    cap = problem.devices.memory_bytes
    finish = np.zeros(n)
    place = [-1] * n
    indeg = [len(problem.preds[i]) for i in range(n)]
    ready = [i for i in range(n) if indeg[i] == 0]
    while ready:
        ready.sort(key=lambda i: (-problem.fwd_level[i], i))
        i = ready.pop(0)
        arrive = np.zeros(D)
        for p, nbytes in problem.preds[i]:
            dp = place[p]
            cost = 2.0 * (lat[dp] + nbytes * beta[dp])  # activation there, gradient back
            cost[dp] = 0.0
            arrive = np.maximum(arrive, finish[p] + cost)
        end = np.maximum(arrive, free) + weight[i]
        fits = used + problem.op_memory[i] <= cap
        candidates = np.flatnonzero(fits) if fits.any() else np.arange(D)
        d = int(candidates[np.argmin(end[candidates])])
        place[i] = d
        finish[i] = end[d]
        free[d] = end[d]
        used[d] += problem.op_memory[i]
        for s, _ in problem.succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return place


def _best_of(problem: PlacementProblem, candidates: list[list[int]]) -> tuple[list[int], int]:
    times = [problem.step_time(c) for c in candidates]
    k = int(np.argmin(times))
    return candidates[k], k


def partition(problem: PlacementProblem, *, seed: int = 0) -> list[int]:
    """The best (by the simulator) of METIS k-way partitions for k = 1..devices."""
    import pymetis

    n, D = len(problem.nodes), problem.devices.count
    order = problem.devices.bandwidth_rank()
    candidates = [single(problem)]
    if n < 2 or D < 2:
        return candidates[0]
    work = problem.fwd_s.mean(axis=1) * (1 + problem.backward_factor)
    vweights = np.maximum(1, np.round(work / max(work.max(), 1e-30) * 10_000)).astype(int).tolist()
    undirected: dict[tuple[int, int], float] = {}
    for i in range(n):
        for j, nbytes in problem.succs[i]:
            key = (min(i, j), max(i, j))
            undirected[key] = undirected.get(key, 0.0) + nbytes
    top = max(undirected.values(), default=1.0) or 1.0
    adjacency: list[list[int]] = [[] for _ in range(n)]
    eweight: list[list[int]] = [[] for _ in range(n)]
    for (i, j), nbytes in sorted(undirected.items()):
        w = max(1, int(round(nbytes / top * 10_000)))
        adjacency[i].append(j)
        eweight[i].append(w)
        adjacency[j].append(i)
        eweight[j].append(w)
    csr = pymetis.CSRAdjacency(np.cumsum([0] + [len(a) for a in adjacency]).tolist(),
                               [j for a in adjacency for j in a])
    eweights = [w for ws in eweight for w in ws]
    options = pymetis.Options(seed=seed)
    for k in range(2, min(D, n) + 1):
        _, parts = pymetis.part_graph(k, csr, vweights=vweights, eweights=eweights, options=options)
        candidates.append([order[int(part)] for part in parts])
    return _best_of(problem, candidates)[0]


def dfs_order(problem: PlacementProblem) -> list[int]:
    """A topological order that keeps each branch together (reverse DFS post-order from the sources)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(problem.nodes)))
    graph.add_edges_from((i, j) for i in range(len(problem.nodes)) for j, _ in problem.succs[i])
    return list(reversed(list(nx.dfs_postorder_nodes(graph, sort_neighbors=lambda nodes: sorted(nodes,
                                                                                                 reverse=True)))))


def chain_stages(problem: PlacementProblem, stages: int, order: list[int] | None = None) -> list[int] | None:
    """DP over contiguous cuts of ``order`` into ``stages`` stages on the best-connected devices.

    Minimises the bottleneck stage: (forward+backward compute + 2 x bytes sent to later stages over
    the link to the next stage) / micro-batches; a stage whose memory does not fit is not allowed.
    None when no memory-feasible split exists.
    """
    order = dfs_order(problem) if order is None else order
    n = len(order)
    devs = problem.devices.bandwidth_rank()[:stages]
    pos = {op: k for k, op in enumerate(order)}
    work = np.array([problem.fwd_s[op, devs[0]] for op in order]) * (1 + problem.backward_factor)
    mem = np.array([problem.op_memory[op] for op in order])
    cw = np.concatenate([[0.0], np.cumsum(work)])
    cm = np.concatenate([[0.0], np.cumsum(mem)])
    W = np.zeros((n, n + 1))  # W[a, b]: bytes from op at position a to op at position b
    for op in order:
        for s, nbytes in problem.succs[op]:
            W[pos[op], pos[s]] += nbytes
    # out[i, j] = bytes from positions [i, j) to positions >= j
    suffix = np.cumsum(W[:, ::-1], axis=1)[:, ::-1]  # suffix[a, j] = sum_{b >= j} W[a, b]
    pref = np.vstack([np.zeros(n + 1), np.cumsum(suffix, axis=0)])  # pref[i, j] = sum_{a < i} suffix[a, j]
    cap = problem.devices.memory_bytes
    m = problem.micro_batches
    INF = math.inf
    best = np.full((stages + 1, n + 1), INF)
    arg = np.zeros((stages + 1, n + 1), dtype=int)
    best[0, 0] = 0.0
    for s in range(1, stages + 1):
        d = devs[s - 1]
        nxt = devs[s] if s < stages else None
        for j in range(s, n + 1):
            i = np.arange(s - 1, j)  # the stage is positions [i, j)
            comm = np.zeros(len(i))
            if nxt is not None and j < n:
                out = pref[j, j] - pref[i, j]
                comm = np.where(out > 0, 2.0 * (problem.devices.latency_s[d, nxt]
                                                + out * problem.devices.beta_s_per_byte[d, nxt]), 0.0)
            cost = np.maximum(best[s - 1, i], (cw[j] - cw[i] + comm) / m)
            cost[(best[s - 1, i] == INF) | (cm[j] - cm[i] > cap[d])] = INF
            k = int(np.argmin(cost))
            if cost[k] < INF:
                best[s, j] = cost[k]
                arg[s, j] = i[k]
    if best[stages, n] == INF:
        return None
    place = [0] * len(problem.nodes)
    j = n
    for s in range(stages, 0, -1):
        i = arg[s, j]
        for k in range(i, j):
            place[order[k]] = devs[s - 1]
        j = i
    return place


def dp_chain(problem: PlacementProblem) -> list[int]:
    """The best (by the simulator) DP chain partition over k = 1..devices stages."""
    order = dfs_order(problem)
    candidates = [c for k in range(1, min(problem.devices.count, len(order)) + 1)
                  if (c := chain_stages(problem, k, order)) is not None]
    return _best_of(problem, candidates or [single(problem)])[0]


BASELINES: dict[str, Callable[[PlacementProblem], list[int]]] = {
    "single": single,
    "critical-path": critical_path,
    "partition": partition,
    "dp-chain": dp_chain,
}
