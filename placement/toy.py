"""Small synthetic operator graphs with the attributes of ``planner.graphs``, for tests and benchmarks.

Why: the placement code must be testable without the torch.fx graph builder; these graphs carry
the same node/edge attributes (``kind``, ``flops``, ``param_bytes``, ``activation_bytes``,
``grad_bytes``; edge ``bytes``; graph ``name``, ``batch_size``, ``parameters``).
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from flexcomm.costmodel.errors import InputError


def _op(graph: nx.DiGraph, name: str, kind: str, flops: float, params: float, act: float) -> None:
    graph.add_node(name, kind=kind, flops=float(flops), param_bytes=float(params), activation_bytes=float(act),
                   grad_bytes=float(params))


def _link(graph: nx.DiGraph, u: str, v: str) -> None:
    graph.add_edge(u, v, bytes=graph.nodes[u]["activation_bytes"])


def chain_graph(length: int = 8, *, flops: float = 2e11, act_bytes: float = 8e6, param_bytes: float = 4e6,
                seed: int | None = None) -> nx.DiGraph:
    """A linear chain; with a seed, op FLOPs vary log-uniformly over x0.25..x4 around ``flops``."""
    if length < 1:
        raise InputError("length", length, "an integer >= 1")
    rng = np.random.default_rng(seed) if seed is not None else None
    graph = nx.DiGraph(name=f"chain{length}", batch_size=32)
    prev = None
    for i in range(length):
        f = flops * (float(np.exp(rng.uniform(np.log(0.25), np.log(4.0)))) if rng is not None else 1.0)
        _op(graph, f"op{i}", "linear", f, param_bytes, act_bytes)
        if prev is not None:
            _link(graph, prev, f"op{i}")
        prev = f"op{i}"
    graph.graph["parameters"] = int(sum(d["param_bytes"] for _, d in graph.nodes(data=True)) / 4)
    return graph


def branchy_graph(branches: int = 4, depth: int = 3, blocks: int = 2, *, flops: float = 4e11,
                  act_bytes: float = 2e6, param_bytes: float = 4e6) -> nx.DiGraph:
    """Inception-like: ``blocks`` times a fan-out into ``branches`` chains of ``depth`` ops and a concat.

    Branches are independent heavy work joined by cheap concats, so spreading them over devices
    pays when links are fast: the graph a placer should beat the single device on.
    """
    if branches < 1 or depth < 1 or blocks < 1:
        raise InputError("branches", (branches, depth, blocks), "branches, depth and blocks >= 1")
    graph = nx.DiGraph(name=f"branchy{branches}x{depth}x{blocks}", batch_size=32)
    _op(graph, "input", "placeholder", 0.0, 0.0, act_bytes)
    prev = "input"
    for b in range(blocks):
        ends = []
        for k in range(branches):
            last = prev
            for d in range(depth):
                name = f"b{b}_br{k}_op{d}"
                _op(graph, name, "conv", flops * (1 + 0.5 * k) / (1 + 0.5 * (branches - 1) / 2), param_bytes, act_bytes)
                _link(graph, last, name)
                last = name
            ends.append(last)
        cat = f"b{b}_concat"
        _op(graph, cat, "cat", 0.0, 0.0, act_bytes * branches)
        for end in ends:
            _link(graph, end, cat)
        prev = cat
    _op(graph, "head", "linear", flops / 10, param_bytes, 4e3)
    _link(graph, prev, "head")
    graph.graph["parameters"] = int(sum(d["param_bytes"] for _, d in graph.nodes(data=True)) / 4)
    return graph


def random_dag(ops: int = 30, *, edge_prob: float = 0.15, seed: int = 0) -> nx.DiGraph:
    """A random DAG (edges only from lower to higher index), each op with random FLOPs and sizes."""
    if ops < 1:
        raise InputError("ops", ops, "an integer >= 1")
    rng = np.random.default_rng(seed)
    graph = nx.DiGraph(name=f"random{ops}-{seed}", batch_size=32)
    for i in range(ops):
        _op(graph, f"op{i}", "op", 10 ** rng.uniform(9, 12), 10 ** rng.uniform(4, 7), 10 ** rng.uniform(4, 7))
    for j in range(1, ops):
        preds = [i for i in range(j) if rng.random() < edge_prob] or [int(rng.integers(0, j))]
        for i in preds:
            _link(graph, f"op{i}", f"op{j}")
    graph.graph["parameters"] = int(sum(d["param_bytes"] for _, d in graph.nodes(data=True)) / 4)
    return graph
