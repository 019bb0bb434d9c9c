"""Max-min fair rates of coflows and independent flows on links of known capacities: the simulator's sharing rule.

Why a module of its own: how bandwidth is shared is the model the simulator's numbers rest on, and it needs
nothing but link capacities and which links each row crosses. Kept apart from routing (:mod:`sim.routes`)
and from the event loop (:mod:`sim.network`, which decides when rows start and end and calls
:meth:`RateAllocator.reallocate`), it can be checked directly, without simpy or a cluster
(``tests/test_rate_allocation.py``).

Rows
    A *coflow* (:class:`CoflowShare`) is flows that all advance at one common rate; its demand on a link
    is (its flows crossing that link) x its rate, so flows are treated fairly one by one, as TCP-like
    transports do. A *flow set* (:class:`FlowShares`) is independent flows, each a row of its own,
    given as a sparse flow x link matrix of each flow's use of each link.

Filling
    Progressive filling: raise every row's rate together until a link is full, freeze the rows crossing
    it, repeat. ``sharing="rtt"`` weights every row's share by the inverse of its route latency, SimGrid
    CM02's sharing penalty (see :mod:`sim.referee`).

Speed
    A coflow alone takes its own narrowest link's share (cached per capacity version on its
    :class:`Demand`). With several coflows, links only one of them crosses collapse into one virtual link
    per coflow and the filling runs as a heap over the shared links in plain Python (numpy above
    ``_SMALL_FILL`` entries). Flow sets (and RTT sharing) fill over a sparse row x link matrix (scipy), one
    numpy pass per bottleneck level, so a thousand flows cost a few passes rather than a thousand coflows.
    A capacity change on links that are nobody's bottleneck and still carry their load keeps the rates
    (:meth:`RateAllocator.still_fair`), so most congestion flips cost no reallocation.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from flexcomm.costmodel.errors import InputError

#: Links whose fair share is within this relative distance of the bottleneck's freeze together.
_TIE = 1e-12
#: Below this many (coflow, link) pairs rates are filled in plain Python, above it with numpy.
_SMALL_FILL = 256
#: How rows share between them: plain max-min, or RTT-weighted (share inversely proportional to route
#: latency, SimGrid CM02).
SHARINGS = ("max-min", "rtt")


class Demand:
    """What a coflow asks of the links: the link ids it crosses (sorted) and how many of its flows cross each.

    Why a class: a collective's steps reuse one demand (the p-1 steps of a ring), so what depends only on
    it (its narrowest link at given capacities, its links as Python lists) is computed once and kept here.
    :class:`sim.routes.Pattern` is the demand of routed flows; build one directly to test the filling.
    """

    __slots__ = ("res", "cnt", "_lat", "_solo_version", "_solo", "_lists")

    def __init__(self, res: np.ndarray, cnt: np.ndarray, latency_s: float = 0.0) -> None:
        self.res = res
        self.cnt = cnt
        self._lat = latency_s
        self._solo_version = -1
        self._solo: tuple[float, int, float, float] = (0.0, -1, 0.0, 0.0)
        self._lists: tuple[list[int], list[float]] | None = None

    def latency(self) -> float:
        """The route latency RTT sharing weights this coflow by (its slowest flow's)."""
        return self._lat

    def solo_rate(self, cap: np.ndarray, cap_version: int) -> tuple[float, int, float, float]:
        """Rate per flow, bottleneck link, its capacity and its flow count when this runs alone on ``cap``.

        ``cap_version`` names the capacities: the answer is recomputed only when it changes.
        """
        if self._solo_version != cap_version:
            share = cap[self.res] / self.cnt
            j = int(share.argmin())
            res = int(self.res[j])
            self._solo = (float(share[j]), res, float(cap[res]), float(self.cnt[j]))
            self._solo_version = cap_version
        return self._solo

    def lists(self) -> tuple[list[int], list[float]]:
        """The links and counts as Python lists (for the small-problem filling loop)."""
        if self._lists is None:
            self._lists = (self.res.tolist(), self.cnt.tolist())
        return self._lists


class CoflowShare:
    """A coflow as the allocator sees it: its demand, and the rate and bottleneck the filling gave it.

    ``rate`` is bytes/s per flow; ``bneck`` the link that froze it (-1: none yet), ``bcap`` that link's
    capacity and ``bflows`` the flows crossing it then (what a record names). The other slots cache which
    of its links it shares with other coflows (set by :meth:`RateAllocator.reallocate`).
    """

    __slots__ = ("demand", "rate", "bneck", "bcap", "bflows", "sh", "sh_lists", "pv", "pv_version", "pv_min")

    def __init__(self, demand: Demand) -> None:
        self.demand = demand
        self.rate = 0.0
        self.bneck = -1
        self.bcap = 0.0
        self.bflows = 0.0
        # links shared with other active coflows, and the private rest (set by RateAllocator.reallocate)
        self.sh: tuple[np.ndarray, np.ndarray] = (demand.res, demand.cnt)
        self.sh_lists: tuple[list[int], list[float]] = ([], [])
        self.pv: tuple[np.ndarray, np.ndarray] | None = None
        self.pv_version = -1
        self.pv_min: tuple[float, int, float] = (0.0, -1, 0.0)


class FlowShares:
    """Independent flows as the allocator sees them: one row each, filled together with the coflows.

    ``matrix``: sparse flows x links, each flow's use of each link (its share of the flow's bytes);
    ``latency``: each flow's route latency (RTT sharing's weight); ``moving``: the flows that take a share
    now (default all). The filling writes each moving flow's ``rate`` and ``bneck`` (-1: none).
    """

    __slots__ = ("matrix", "latency", "moving", "rate", "bneck")

    def __init__(self, matrix: Any, latency: np.ndarray, moving: np.ndarray | None = None) -> None:
        n = matrix.shape[0]
        self.matrix = matrix
        self.latency = latency
        self.moving = np.ones(n, dtype=bool) if moving is None else moving
        self.rate = np.zeros(n)
        self.bneck = np.full(n, -1, dtype=np.int64)


class RateAllocator:
    """Max-min fair (or RTT-weighted) rates of the rows on links of capacities ``cap`` (bytes/s per link).

    The owner keeps ``coflows`` and ``flowsets`` (the rows that take a share now), adds 1 to ``struct_version``
    whenever rows come or go (or a flow set's moving flows change: which links are shared must then be redone;
    a counter, not a method, as it changes twice per collective step) and calls :meth:`reallocate` to refill; it
    changes capacities only through :meth:`set_capacity`. ``cap`` is the caller's array, changed in place,
    never copied.
    """

    def __init__(self, cap: np.ndarray, sharing: str = "max-min") -> None:
        if sharing not in SHARINGS:
            raise InputError("sharing", sharing, "one of " + ", ".join(SHARINGS))
        self.cap = cap
        self.n_resources = len(cap)
        self.sharing = sharing
        self.cap_version = 0
        self.coflows: list[CoflowShare] = []
        self.flowsets: list[FlowShares] = []
        self.struct_version = 0
        self._split_version = -1

    def set_capacity(self, ids: np.ndarray, values: np.ndarray) -> None:
        """New capacities of links ``ids``; the rates stay until :meth:`reallocate`."""
        self.cap[ids] = values
        self.cap_version += 1

    def reallocate(self) -> None:
        """Max-min fair rates of the rows (progressive filling).

        Links that only one active coflow crosses cannot be shared, so each coflow's private links
        collapse into one virtual link carrying its private minimum (capacity / its flows there);
        filling then runs over the links coflows really share plus one virtual link per coflow,
        which keeps a 1024-rank ring plus a few background flows a problem of a few dozen links.
        """
        active = self.coflows
        if self.flowsets or (self.sharing == "rtt" and active):
            self._fill_rows()
            return
        if not active:
            return
        if len(active) == 1:
            c = active[0]
            c.rate, c.bneck, c.bcap, c.bflows = c.demand.solo_rate(self.cap, self.cap_version)
            return
        if sum(len(c.demand.res) for c in active) <= _SMALL_FILL:
            self._fill_small(active, split=False)  # small enough as it is
            return
        if self._split_version != self.struct_version:  # coflows came or went: who shares what
            self._split_shared(active)
        if sum(len(c.sh[0]) for c in active) + len(active) <= _SMALL_FILL:
            self._fill_small(active, split=True)
        else:
            self._fill(active)

    def still_fair(self, ids: np.ndarray) -> bool:
        """Whether the coflows' current rates stay max-min fair after links ``ids`` changed capacity.

        True when none of them is a coflow's bottleneck and each still carries what crosses it:
        every coflow is then still saturated at its unchanged bottleneck with the largest rate
        there, which characterises the (unique) max-min fair allocation. Saves a reallocation
        for most changes on links with slack or unused (a congestion flip, a trace on an idle path).
        """
        active = self.coflows
        bottlenecks = {c.bneck for c in active}
        cap = self.cap
        for link in ids.tolist():
            if link in bottlenecks:
                return False
            carried = 0.0
            for c in active:
                res = c.demand.res
                j = int(np.searchsorted(res, link))
                if j < len(res) and res[j] == link:
                    carried += c.demand.cnt[j] * c.rate
            if carried > cap[link] * (1 + _TIE):
                return False
        return True

    def link_load(self) -> np.ndarray:
        """Bytes/s each link carries now: every coflow's and moving flow's rate times its use."""
        load = np.zeros(self.n_resources)
        for c in self.coflows:
            if c.rate > 0:
                np.add.at(load, c.demand.res, c.demand.cnt * c.rate)
        for fs in self.flowsets:
            if fs.moving.any():
                load += fs.matrix.T @ np.where(fs.moving, fs.rate, 0.0)
        return load

    # --- coflows only: shared links, private minimum, filling -------------------------------------
    def _split_shared(self, active: list[CoflowShare]) -> None:
        """Split each coflow's links into those another active coflow crosses too and its private rest."""
        users = np.bincount(np.concatenate([c.demand.res for c in active]), minlength=self.n_resources)
        for c in active:
            res, cnt = c.demand.res, c.demand.cnt
            shared = users[res] > 1
            if shared.all():
                c.sh = (res, cnt)
                c.pv = None
            else:
                c.sh = (res[shared], cnt[shared])
                c.pv = (res[~shared], cnt[~shared])
            c.sh_lists = (c.sh[0].tolist(), c.sh[1].tolist())
            c.pv_version = -1
        self._split_version = self.struct_version

    def _private_min(self, c: CoflowShare) -> tuple[float, int, float] | None:
        """(fair share, link, flows there) of the coflow's narrowest private link, or None."""
        if c.pv is None:
            return None
        if c.pv_version != self.cap_version:
            res, cnt = c.pv
            share = self.cap[res] / cnt
            j = int(share.argmin())
            c.pv_min = (float(share[j]), int(res[j]), float(cnt[j]))
            c.pv_version = self.cap_version
        return c.pv_min

    def _set_rate(self, c: CoflowShare, level: float, key: int, meta: dict, load0: float) -> None:
        c.rate = level
        if key < 0:  # a coflow's virtual link: name its narrowest private link
            _, res, flows = meta[key]
            c.bneck, c.bcap, c.bflows = res, float(self.cap[res]), flows
        else:
            c.bneck, c.bcap, c.bflows = key, float(self.cap[key]), load0

    def _small_entries(self, active: list[CoflowShare], split: bool) -> tuple[
            dict[int, float], dict[int, float], dict[int, tuple[float, int, float]],
            list[tuple[list[int], list[float]]], dict[int, list[int]]]:
        """The plain-Python filling's tables: capacity left and load per link, virtual links' private minima,
        each coflow's (links, counts) and each link's coflows."""
        cap = self.cap
        remaining: dict[int, float] = {}
        load: dict[int, float] = {}  # only links with live coflows left on them
        meta: dict[int, tuple[float, int, float]] = {}
        entries: list[tuple[list[int], list[float]]] = []
        users: dict[int, list[int]] = {}
        for k, c in enumerate(active):
            keys, counts = c.sh_lists if split else c.demand.lists()
            for r, n in zip(keys, counts, strict=True):
                if r in load:
                    load[r] += n
                    users[r].append(k)
                else:
                    load[r] = n
                    remaining[r] = float(cap[r])
                    users[r] = [k]
            private = self._private_min(c) if split else None
            if private is not None:
                key = -1 - k
                remaining[key], load[key], meta[key] = private[0], 1.0, private
                users[key] = [k]
                keys, counts = [*keys, key], [*counts, 1.0]
            entries.append((keys, counts))
        return remaining, load, meta, entries, users

    def _fill_small(self, active: list[CoflowShare], split: bool) -> None:
        """Progressive filling in plain Python: faster than numpy for a few dozen links.

        ``split``: use the coflows' shared links plus one virtual link for their private ones
        (see :meth:`reallocate`); otherwise every link of every coflow.
        """
        remaining, load, meta, entries, users = self._small_entries(active, split)
        load0 = dict(load)
        # Pop links in order of fair share; a link's share never drops below the level already
        # reached (rem >= level * load before, so (rem - n level) / (load - n) >= level), so a heap
        # of (share, link) with stale entries skipped is exact: O(entries log links), not
        # O(levels x links).
        heap = [(remaining[r] / n, r) for r, n in load.items()]
        heapq.heapify(heap)
        frozen = [False] * len(active)
        level = 0.0
        while heap:
            share, link = heapq.heappop(heap)
            n = load.get(link)
            if n is None or share != remaining[link] / n:
                continue  # drained, or an outdated entry of a link that changed since
            if share > level:
                level = share
            for k in users[link]:
                if frozen[k]:
                    continue
                frozen[k] = True
                self._set_rate(active[k], level, link, meta, load0[link])
                keys, counts = entries[k]
                for r, m in zip(keys, counts, strict=True):
                    left = load[r] - m
                    if left > 0:
                        load[r] = left
                        rest = remaining[r] - m * level
                        remaining[r] = rest if rest > 0 else 0.0
                        if r != link:
                            heapq.heappush(heap, (remaining[r] / left, r))
                    else:
                        del load[r]

    def _fill(self, active: list[CoflowShare]) -> None:
        """Progressive filling with numpy, for many shared links (e.g. concurrent collectives)."""
        n = len(active)
        meta: dict[int, tuple[float, int, float]] = {}
        key_parts: list[np.ndarray] = []
        cnt_parts: list[np.ndarray] = []
        for k, c in enumerate(active):
            keys, counts = c.sh
            private = self._private_min(c)
            if private is not None:
                meta[-1 - k] = private
                keys, counts = np.append(keys, -1 - k), np.append(counts, 1.0)
            key_parts.append(keys)
            cnt_parts.append(counts)
        keys_all = np.concatenate(key_parts)
        cnt_all = np.concatenate(cnt_parts)
        rows = np.repeat(np.arange(n), [len(p) for p in key_parts])
        touched, cols = np.unique(keys_all, return_inverse=True)
        remaining = np.empty(len(touched))
        real = touched >= 0
        remaining[real] = self.cap[touched[real]]
        remaining[~real] = [meta[int(key)][0] for key in touched[~real]]
        load = np.bincount(cols, weights=cnt_all, minlength=len(touched))
        load0 = load.copy()
        rate = np.zeros(n)
        bneck = np.full(n, -1, dtype=np.int64)
        live = np.ones(n, dtype=bool)
        entry_live = np.ones(len(rows), dtype=bool)
        share = np.empty(len(touched))
        while live.any():
            share.fill(np.inf)
            np.divide(remaining, load, out=share, where=load > 0)
            level = float(share.min())
            tight = share <= level * (1 + _TIE)
            hit = entry_live & tight[cols]
            hit_rows, first = np.unique(rows[hit], return_index=True)
            rate[hit_rows] = level
            bneck[hit_rows] = cols[np.flatnonzero(hit)[first]]
            frozen = np.zeros(n, dtype=bool)
            frozen[hit_rows] = True
            leaving = entry_live & frozen[rows]
            dec = np.bincount(cols[leaving], weights=cnt_all[leaving], minlength=len(touched))
            remaining -= dec * level
            np.maximum(remaining, 0.0, out=remaining)
            load -= dec
            live &= ~frozen
            entry_live &= ~leaving
        for k, c in enumerate(active):
            col = int(bneck[k])
            self._set_rate(c, float(rate[k]), int(touched[col]), meta, float(load0[col]))

    # --- coflows and flow sets together: the sparse row x link filling ----------------------------
    def _fill_rows(self) -> None:
        """Max-min fair rates of every coflow and every moving independent flow together, by progressive
        filling over a sparse row x link matrix (a row: one coflow, or one flow of a flow set).

        With ``sharing="rtt"`` a row's share is inversely proportional to its route latency (rate = level /
        latency), SimGrid CM02's sharing penalty; coflows take their slowest route's latency.
        """
        coflows = self.coflows
        matrix, weight, moving_sets = self._row_matrix(coflows)
        rate, bneck = self._fill_matrix(matrix, weight)
        for k, c in enumerate(coflows):
            res = int(bneck[k])
            c.rate, c.bneck = float(rate[k]), res
            c.bcap = float(self.cap[res]) if res >= 0 else 0.0
            c.bflows = float(c.demand.cnt[np.searchsorted(c.demand.res, res)]) if res >= 0 else 0.0
        offset = len(coflows)
        for fs, rows in moving_sets:
            fs.rate[:] = 0.0
            fs.rate[rows] = rate[offset: offset + len(rows)]
            fs.bneck[rows] = bneck[offset: offset + len(rows)]
            offset += len(rows)

    def _row_matrix(self, coflows: list[CoflowShare]) -> tuple[Any, np.ndarray, list[tuple[FlowShares, np.ndarray]]]:
        """The rows x links matrix (coflows first, then every flow set's moving flows), each row's weight (its
        latency under RTT sharing, else 1) and which rows each flow set holds."""
        from scipy import sparse

        row_res: list[np.ndarray] = [c.demand.res for c in coflows]
        row_cnt: list[np.ndarray] = [c.demand.cnt for c in coflows]
        weights = [c.demand.latency() for c in coflows] if self.sharing == "rtt" else [1.0] * len(coflows)
        n_cof = len(coflows)
        blocks = [sparse.csr_matrix((np.concatenate(row_cnt) if row_cnt else np.zeros(0),
                                     np.concatenate(row_res) if row_res else np.zeros(0, dtype=np.int64),
                                     np.concatenate([[0], np.cumsum([len(r) for r in row_res])]).astype(np.int64)),
                                    shape=(n_cof, self.n_resources))]
        w = [np.asarray(weights, dtype=float)]
        moving_sets = []
        for fs in self.flowsets:
            rows = np.flatnonzero(fs.moving)
            if len(rows):
                blocks.append(fs.matrix[rows])
                w.append(fs.latency[rows] if self.sharing == "rtt" else np.ones(len(rows)))
                moving_sets.append((fs, rows))
        matrix = sparse.vstack(blocks, format="csr")
        weight = np.concatenate(w)
        weight[weight <= 0] = 1e-12  # a zero-latency route under RTT sharing: the largest share
        return matrix, weight, moving_sets

    def _fill_matrix(self, matrix: Any, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Progressive filling over ``matrix`` (rows x links), a row's share scaled by 1 / its ``weight``:
        each row's rate and the link that froze it (-1: none)."""
        from scipy import sparse

        n = matrix.shape[0]
        rate = np.zeros(n)
        bneck = np.full(n, -1, dtype=np.int64)
        if not n:
            return rate, bneck
        scaled = sparse.diags(1.0 / weight) @ matrix  # demand per unit of level
        scaled_t = scaled.T.tocsr()
        remaining = self.cap.astype(float).copy()
        live = np.ones(n)
        load = scaled_t @ live
        # live rows per link, counted exactly: a link whose rows have all frozen keeps a rounding residue of load
        # (~1e-10 under RTT weights of ~1e5 per second), which must not make it a bottleneck of no row
        crossing_t = (matrix != 0).T.tocsr().astype(float)
        live_rows = crossing_t @ live
        while live.any():
            share = np.full(len(remaining), np.inf)
            np.divide(remaining, load, out=share, where=live_rows > 0.5)
            level = float(share.min())
            if not math.isfinite(level):
                break  # rows on no link (cannot happen for real flows)
            tight = (share <= level * (1 + _TIE)).astype(float)
            hit = (matrix @ tight > 0) & (live > 0)
            frozen = np.flatnonzero(hit)
            rate[frozen] = level / weight[frozen]
            on = (matrix[frozen] @ sparse.diags(tight)).tocsr()  # each frozen row's tight links
            on.eliminate_zeros()
            first = on.indptr[:-1]
            has = np.diff(on.indptr) > 0
            bneck[frozen[has]] = on.indices[first[has]]  # the link its record names
            leaving = np.zeros(n)
            leaving[frozen] = 1.0
            dec = scaled_t @ leaving
            remaining = np.maximum(remaining - dec * level, 0.0)
            load = load - dec
            live_rows = live_rows - crossing_t @ leaving
            live[frozen] = 0.0
        return rate, bneck
