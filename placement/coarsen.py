"""Contract linear runs of ops into units, so that searches move whole chains (conv-bn-relu) at once.

Why: an op graph has many cheap element-wise ops whose best device is their neighbour's; searching
per op wastes evaluations on moves that can only add transfers. Contracting every edge u->v where u
has a single successor and v a single predecessor keeps the unit graph acyclic (that edge is the
only path between them) and loses no placement that a chain would want split -- except inside
long plain chains, which ``max_unit_ops`` caps (so a deep chain can still be cut into stages).
"""

from __future__ import annotations

from flexcomm.placement.simulator import PlacementProblem


def chain_units(problem: PlacementProblem, max_unit_ops: int | None = None,
                respect: list[int] | None = None) -> list[list[int]]:
    """Units of op indices (each a run u1->u2->... in topological order); together every op once.

    With ``respect`` (a placement), a unit never spans two of its devices, so that placement is
    exactly representable by one device per unit.
    """
    n = len(problem.nodes)
    if max_unit_ops is None:
        max_unit_ops = max(1, n // 16)
    head = list(range(n))  # unit id of each op = index of its first op
    units: dict[int, list[int]] = {}
    for i in range(n):  # problem.nodes is topological, so a predecessor's unit exists already
        preds = problem.preds[i]
        if len(preds) == 1:
            p = preds[0][0]
            same = respect is None or respect[p] == respect[i]
            if same and len(problem.succs[p]) == 1 and len(units[head[p]]) < max_unit_ops:
                head[i] = head[p]
                units[head[p]].append(i)
                continue
        units[i] = [i]
    return [units[k] for k in sorted(units)]


def expand(units: list[list[int]], unit_devices: list[int], n_ops: int) -> list[int]:
    """Op placement from a device per unit."""
    place = [0] * n_ops
    for unit, d in zip(units, unit_devices, strict=True):
        for op in unit:
            place[op] = int(d)
    return place


def unit_devices_of(units: list[list[int]], placement: list[int]) -> list[int]:
    """The device of each unit's first op (a placement projected onto units)."""
    return [int(placement[unit[0]]) for unit in units]
