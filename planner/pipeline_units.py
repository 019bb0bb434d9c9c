"""An operator graph cut into a chain of pipeline-able units, with per-sample work, memory and bytes.

A pipeline stage boundary must be a point where one tensor crosses: cutting inside a residual
block or between Inception's branches would ship several tensors (and their gradients) per
micro-batch. Walking the ops in traced order, a *clean cut* is a point after which exactly one
producer still has consumers ahead; the ops between two clean cuts form a unit (a ResNet block,
half a transformer block ending at its residual add, an Inception block ending at its concat).
This is the rule-based detection of repeated layers the planner's search works on.

Work is in "seconds x FLOP/s": an op's forward seconds on a device of peak P are work / P, so
one number serves every device type; calibrated ops contribute their measured median scaled by
the measuring device's peak (see :func:`planner.graphs.op_time_s`). Priced on a device
(``compute``), an op's work is its forward and backward on that device, as ``simulate`` prices them
(:func:`planner.graphs.op_step_s`), split forward : backward as 1 : 2: the step is the simulator's,
the split within it the planner's. On a mixed pool the other devices scale that work by their peak,
so their memory-bound kernels are scaled by peak FLOP/s, not by HBM bandwidth (an approximation,
said here).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from flexcomm.costmodel.compute import DEFAULT_BACKWARD_FACTOR, DEFAULT_EFFICIENCY
from flexcomm.costmodel.device_compute import DeviceCompute
from flexcomm.costmodel.errors import InputError
from flexcomm.planner.graphs import SHARDABLE_KINDS, VIEW_KINDS, op_step_s, op_time_s


@dataclass(frozen=True)
class Units:
    """Per-unit arrays, all per sample (bytes, or work = forward seconds x peak FLOP/s).

    ``*_shard`` is what tensor parallelism divides by tp (matmuls, convolutions, embeddings);
    ``*_rep`` is replicated on every tensor-parallel rank (norms, elementwise ops).
    ``boundary[i]`` is the tensor leaving unit i (the last unit's is its input, the size a
    vocabulary-parallel head allreduces). ``tp_allreduces[i]`` counts the tensor-parallel
    allreduces per forward (Megatron: one per attention or MLP half-block), as many backward.
    """

    model: str
    batch_size: int
    names: tuple[str, ...]
    ops: tuple[tuple[str, ...], ...]
    work_shard: np.ndarray
    work_rep: np.ndarray
    param_shard: np.ndarray
    param_rep: np.ndarray
    act_shard: np.ndarray
    act_rep: np.ndarray
    boundary: np.ndarray
    tp_allreduces: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    @property
    def param_bytes(self) -> float:
        return float(self.param_shard.sum() + self.param_rep.sum())


def clean_cuts(graph: nx.DiGraph) -> tuple[list[str], list[int]]:
    """Ops in traced order and the positions after which exactly one tensor crosses forward."""
    order = sorted(graph.nodes, key=lambda n: graph.nodes[n]["order"])
    remaining = {n: graph.out_degree(n) for n in order}
    live: set[str] = set()
    cuts: list[int] = []
    for i, node in enumerate(order):
        for pred in graph.predecessors(node):
            remaining[pred] -= 1
            if remaining[pred] == 0:
                live.discard(pred)
        if remaining[node] > 0:
            live.add(node)
        if len(live) == 1 and i < len(order) - 1:
            cuts.append(i)
    return order, cuts


def build_units(graph: nx.DiGraph, efficiency: float = DEFAULT_EFFICIENCY,
                reference_peak_flops: float | None = None, compute: DeviceCompute | None = None) -> Units:
    """Group the graph's ops into units between clean cuts (merging units with no work of their own).

    ``reference_peak_flops`` is the peak of the device calibrated times were measured on when
    the calibration did not record it.
    """
    if graph.number_of_nodes() == 0:
        raise InputError("graph", graph.graph.get("name"), "a graph with at least one op")
    batch = int(graph.graph["batch_size"])
    order, cuts = clean_cuts(graph)
    bounds = [-1, *cuts, len(order) - 1]
    groups = [order[a + 1 : b + 1] for a, b in zip(bounds, bounds[1:], strict=False)]
    # A unit of pure views/inputs (no work, no params) joins the next one: nothing to balance.
    merged: list[list[str]] = []
    carry: list[str] = []
    for ops in groups:
        carry += ops
        if any(graph.nodes[n]["flops"] > 0 or graph.nodes[n]["param_bytes"] > 0 for n in carry):
            merged.append(carry)
            carry = []
    if carry:
        if merged:
            merged[-1] += carry
        else:
            merged.append(carry)
    has_reference = reference_peak_flops is not None or graph.graph.get("measured_peak_flops")
    if not has_reference and any("measured_s" in graph.nodes[n] for n in order):
        raise InputError("reference_peak_flops", None, "the peak FLOP/s of the device the op times were measured on")
    unit_peak = 1.0
    rows = []
    for ops in merged:
        ws = wr = ps = pr = as_ = ar = 0.0
        shardable = False
        for n in ops:
            a = graph.nodes[n]
            if "measured_s" in a and not graph.graph.get("measured_peak_flops"):
                work = a["measured_s"] * float(reference_peak_flops)  # type: ignore[arg-type]
            elif compute is not None and "measured_s" not in a:
                work = op_step_s(graph, n, compute) / (1.0 + DEFAULT_BACKWARD_FACTOR) * compute.peak_flops
            else:
                work = op_time_s(graph, n, unit_peak, efficiency)
            act = 0.0 if a["kind"] in VIEW_KINDS else a["activation_bytes"]
            if a["kind"] in SHARDABLE_KINDS:
                ws, ps, as_ = ws + work, ps + a["param_bytes"], as_ + act
                shardable = shardable or a["param_bytes"] > 0
            else:
                wr, pr, ar = wr + work, pr + a["param_bytes"], ar + act
        rows.append((ws, wr, ps, pr, as_, ar, shardable))
    arr = np.array([r[:6] for r in rows], dtype=float) / np.array([batch, batch, 1, 1, batch, batch])
    boundary = np.zeros(len(merged))
    for i, ops in enumerate(merged[:-1]):
        members = set(ops)
        crossing = {u for u in ops for v in graph.successors(u) if v not in members}
        boundary[i] = sum(graph.nodes[u]["activation_bytes"] for u in crossing) / batch
    if len(merged) > 1:
        boundary[-1] = boundary[-2]
    names = tuple(_label(graph, ops) for ops in merged)
    return Units(
        model=str(graph.graph.get("name")), batch_size=batch, names=names, ops=tuple(tuple(o) for o in merged),
        work_shard=arr[:, 0], work_rep=arr[:, 1], param_shard=arr[:, 2], param_rep=arr[:, 3],
        act_shard=arr[:, 4], act_rep=arr[:, 5], boundary=boundary,
        tp_allreduces=np.array([1.0 if r[6] else 0.0 for r in rows]),
    )


def _label(graph: nx.DiGraph, ops: list[str]) -> str:
    """The unit's owning modules: their common dotted prefix (``layer1.0``), else ``first..last``."""
    paths = [graph.nodes[n]["module"].split(".") for n in ops if graph.nodes[n]["module"]]
    if not paths:
        return ops[-1]
    common: list[str] = []
    for parts in zip(*paths, strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    if common:
        return ".".join(common)
    return f"{'.'.join(paths[0][:2])}..{'.'.join(paths[-1][:2])}"
