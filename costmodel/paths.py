"""Collectives priced on the real paths of a cluster's fabric: the cost model's topology-aware side.

Why: an alpha-beta formula prices a collective on one link, the group's slowest. That is exact on a
uniform network, but a ring whose order crosses racks at every hop, a recursive-doubling step whose
partners share a torus link, or the q instances of a hierarchical allreduce on a rail-optimized fabric
load some links with several of the collective's own flows. Here every step of the algorithm's schedule
(:mod:`costmodel.schedules`, the same schedules the simulator runs) is priced on the links its flows
cross (:class:`~costmodel.topologies.fabric.Fabric`, the same routes and ECMP choices the simulator
uses): a step's coflow moves at the rate of its tightest link, capacity / (its flows there, weighted by
their share of the path), after the largest latency of its routes. Coflows started together in one step
share links max-min fairly, solved exactly as a fluid (progressive filling, refilled when one finishes
or starts), which is what the simulator's coupled coflows do; so on an otherwise idle network this and
the simulator agree to rounding on every topology.

Flows between ranks of one island (a node, or an NVLink domain) cross only their two device ports
(``intra_link``); flows between islands cross the fabric's route and not the ports (GPU-direct).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.schedules import Segment

#: A priced coflow: (resources, flows on each, latency of its slowest route).
Use = tuple[np.ndarray, np.ndarray, float]


class PathPricer:
    """Prices schedules on one cluster's fabric (build once per cluster; patterns are cached)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        fabric = cluster.fabric
        self.fabric = fabric
        edges = list(fabric.graph.edges(data=True))
        self.edge_id = {(u, v): i for i, (u, v, _) in enumerate(edges)}
        res_of = np.empty(len(edges), dtype=np.int64)
        capacity: list[float] = []
        for i, (u, v, data) in enumerate(edges):
            twin = self.edge_id.get((v, u))
            if data.get("duplex", "full") == "half" and twin is not None and twin < i:
                res_of[i] = res_of[twin]
                continue
            res_of[i] = len(capacity)
            capacity.append(float(data["bandwidth_Bps"]))
        self.edge_res = res_of
        self.edge_latency = np.array([float(d["latency_s"]) for _, _, d in edges])
        world = cluster.world_size
        intra = cluster.intra_link
        self.dev_out = len(capacity) + 2 * np.arange(world, dtype=np.int64)
        self.dev_in = self.dev_out + 1
        self.capacity = np.concatenate([np.array(capacity, dtype=float), np.full(2 * world, intra.bandwidth_Bps)])
        self.port_latency = intra.latency_s  # half on the way out, half on the way in
        self.island = fabric.island_of_rank
        self._uses: dict[Any, Use] = {}

    # --- one coflow ------------------------------------------------------------------------------
    def use(self, src: np.ndarray, dst: np.ndarray, key: Any = None) -> Use:
        """The resources a coflow of flows src[i] -> dst[i] loads, how many of its flows each carries,
        and the largest latency of their routes."""
        if key is not None and key in self._uses:
            return self._uses[key]
        load: dict[int, float] = {}
        latency = 0.0
        for s, d in zip(src.tolist(), dst.tolist(), strict=True):
            if s == d:
                raise InputError("pairs", (s, d), "a flow between two different ranks")
            if self.island[s] == self.island[d]:
                for r in (int(self.dev_out[s]), int(self.dev_in[d])):
                    load[r] = load.get(r, 0.0) + 1.0
                latency = max(latency, self.port_latency)
                continue
            paths = self.fabric.flow_paths(s, d)
            for path, share in paths:
                for e in path:
                    r = int(self.edge_res[self.edge_id[e]])
                    load[r] = load.get(r, 0.0) + share
            first = paths[0][0]
            latency = max(latency, float(sum(self.edge_latency[self.edge_id[e]] for e in first)))
        res = np.fromiter(load.keys(), dtype=np.int64, count=len(load))
        cnt = np.fromiter(load.values(), dtype=float, count=len(load))
        found = (res, cnt, latency)
        if key is not None:
            self._uses[key] = found
        return found

    def rate(self, use: Use) -> float:
        """Bytes/s per flow of a coflow alone on the network."""
        res, cnt, _ = use
        return float((self.capacity[res] / cnt).min()) if len(res) else math.inf

    # --- steps and plans -------------------------------------------------------------------------
    def step_seconds(self, coflows: Sequence[tuple[Use, float, float]]) -> float:
        """Seconds until the last of ``coflows`` (use, bytes per flow, latency paid first) finishes, sharing
        links max-min fairly as a fluid (exact for the simulator's coupled coflows)."""
        if len(coflows) == 1:
            use, nbytes, latency = coflows[0]
            return latency + (nbytes / self.rate(use) if nbytes > 0 else 0.0)
        start = np.array([lat for _, _, lat in coflows])
        left = np.array([b for _, b, _ in coflows], dtype=float)
        now, end = 0.0, 0.0
        live = left > 0
        end = float(start[~live].max()) if (~live).any() else 0.0
        while live.any():
            moving = live & (start <= now + 1e-15)
            if not moving.any():
                now = float(start[live].min())
                continue
            rates = _max_min([coflows[i][0] for i in np.flatnonzero(moving)], self.capacity)
            full = np.zeros(len(coflows))
            full[moving] = rates
            with np.errstate(divide="ignore"):
                finish = np.where(moving, left / np.where(full > 0, full, np.nan), np.inf)
            finish = np.nan_to_num(finish, nan=np.inf)
            pending = start[live & ~moving]
            dt = min(float(finish.min()), float(pending.min()) - now if len(pending) else math.inf)
            if not math.isfinite(dt):
                raise InputError("network", "a link with no capacity", "links that can carry the collective")
            left = left - full * dt
            now += dt
            done = moving & (left <= 1e-9 * np.array([b for _, b, _ in coflows]))
            end = max(end, now) if done.any() else end
            live &= ~done
        return max(end, now)

    def plan_seconds(self, segments: Iterable[Segment], gamma: float = 0.0) -> tuple[float, float, float]:
        """(latency, bandwidth, reduction) seconds of a collective's plan, step after step."""
        latency = bandwidth = reduction = 0.0
        for ranks, steps, _prefix in segments:
            gkey = (ranks.shape, ranks.tobytes())
            for groups, reduce_bytes, rounds, _phase in steps:
                coflows = []
                for local_key, src, dst, nbytes in groups:
                    use = self.use(ranks[:, src].ravel(), ranks[:, dst].ravel(), key=(gkey, local_key))
                    coflows.append((use, float(nbytes), rounds * use[2]))
                total = self.step_seconds(coflows)
                step_latency = max(lat for _, _, lat in coflows) if coflows else 0.0
                latency += step_latency
                bandwidth += total - step_latency
                if gamma > 0 and reduce_bytes > 0:
                    reduction += gamma * reduce_bytes
        return latency, bandwidth, reduction


def _max_min(uses: Sequence[Use], capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rate per coflow (progressive filling; a coflow's demand on a link is its flows there)."""
    n = len(uses)
    rows = np.concatenate([np.full(len(u[0]), k) for k, u in enumerate(uses)])
    res = np.concatenate([u[0] for u in uses])
    cnt = np.concatenate([u[1] for u in uses])
    touched, cols = np.unique(res, return_inverse=True)
    remaining = capacity[touched].astype(float)
    load = np.bincount(cols, weights=cnt, minlength=len(touched))
    rate = np.zeros(n)
    live = np.ones(n, dtype=bool)
    entry_live = np.ones(len(rows), dtype=bool)
    while live.any():
        share = np.full(len(touched), np.inf)
        np.divide(remaining, load, out=share, where=load > 1e-12)
        level = float(share.min())
        tight = share <= level * (1 + 1e-12)
        frozen_rows = np.unique(rows[entry_live & tight[cols]])
        rate[frozen_rows] = level
        frozen = np.zeros(n, dtype=bool)
        frozen[frozen_rows] = True
        leaving = entry_live & frozen[rows]
        dec = np.bincount(cols[leaving], weights=cnt[leaving], minlength=len(touched))
        remaining = np.maximum(remaining - dec * level, 0.0)
        load -= dec
        live &= ~frozen
        entry_live &= ~leaving
    return rate

