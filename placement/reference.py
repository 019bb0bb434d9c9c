"""A deliberately plain re-implementation of the simulator's schedule, to check it and to time it against.

It walks the networkx graph on every call (no compiled arrays, no event heap): repeatedly, among
tasks whose inputs are all done, every device's next start is ``max(device free, earliest ready)``;
the device with the earliest start runs its highest-priority task ready by then. With positive op
times and link latencies this is the same list schedule as :meth:`PlacementProblem.simulate`
without port contention (with contention the order in which one port's transfers queue would need
the event order, which this loop does not have). Used by the tests (agreement on random DAGs) and
by ``benchmarks/bench_placement.py`` (its placements-per-second baseline).
"""

from __future__ import annotations

from flexcomm.placement.simulator import PlacementProblem


def reference_makespan(problem: PlacementProblem, placement: list[int]) -> float:
    """Makespan of one step of ``placement`` (op index -> device), contention off."""
    graph, nodes, devices = problem.graph, problem.nodes, problem.devices
    m, n = problem.micro_batches, len(nodes)
    index = {v: i for i, v in enumerate(nodes)}
    dev = {v: placement[index[v]] for v in nodes}

    def preds(task: tuple[int, object, bool]) -> list[tuple[tuple[int, object, bool], float]]:
        mb, v, bwd = task
        if not bwd:
            return [((mb, u, False), graph.edges[u, v]["bytes"] / m) for u in graph.predecessors(v)]
        return [((mb, v, False), 0.0)] + [((mb, w, True), graph.edges[v, w]["bytes"] / m)
                                          for w in graph.successors(v)]

    def duration(task: tuple[int, object, bool]) -> float:
        mb, v, bwd = task
        forward = problem.fwd_s[index[v], dev[v]] / m
        return forward * problem.backward_factor if bwd else forward

    def rank(task: tuple[int, object, bool]) -> int:
        mb, v, bwd = task
        return problem.task_rank[(mb * 2 + int(bwd)) * n + index[v]]

    todo = {(mb, v, bwd) for mb in range(m) for v in nodes for bwd in (False, True)}
    end: dict[tuple[int, object, bool], float] = {}
    free = [0.0] * devices.count
    while todo:
        ready: dict[int, list[tuple[float, tuple[int, object, bool]]]] = {}
        for task in todo:
            inputs = preds(task)
            if all(p in end for p, _ in inputs):
                d = dev[task[1]]
                at = max((end[p] + devices.transfer_s(dev[p[1]], d, nbytes) for p, nbytes in inputs), default=0.0)
                ready.setdefault(d, []).append((at, task))
        starts = {d: max(free[d], min(at for at, _ in tasks)) for d, tasks in ready.items()}
        d = min(starts, key=lambda k: (starts[k], k))
        start = starts[d]
        task = min((t for at, t in ready[d] if at <= start), key=rank)
        end[task] = start + duration(task)
        free[d] = end[task]
        todo.remove(task)
    return max(end.values())
