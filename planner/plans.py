"""Price one parallel plan (data x tensor x pipeline parallel, micro-batches, ZeRO) with the cost model.

The PaddlePaddle-style model (Ao et al., arXiv 2112.02752) on the chain of units of
:mod:`planner.pipeline_units`:

* compute: work / peak of the stage's slowest device (work already carries the 0.65 efficiency
  or calibrated medians), backward = 2 x forward; tensor parallelism divides matmul/conv work;
* tensor parallelism: per unit with sharded weights one allreduce of its output forward and one
  backward (Megatron), on the tp group's link;
* pipeline: 1F1B; a replica's step is sum_p t_p + (m - 1) max_p t_p (t_p: one micro-batch's
  forward + backward + its sends on stage p), so the bubble is (pp - 1) t with equal stages;
* data parallelism: each stage's gradient shard allreduced over its dp group in DDP's 25 MiB buckets, each
  launched as the last micro-batch's backward fills it (:mod:`planner.overlap`; a compressed ``--scheme``
  runs after the drain, as its hook waits for the whole gradient), by the cheapest of ring / tree / Rabenseifner on
  the group's slowest link (ring: the ring's own hops; tree and Rabenseifner also share the NIC
  between the group's ranks on a node). The stage's tp groups cross each NIC together, and the
  stages' allreduces overlap (they drain one backward apart), so a NIC's load is summed over the
  stages crossing it. ZeRO-1/2 move the same bytes (reduce-scatter + allgather);
* pipeline sends: alpha + bytes x beta of the path between the stages' nodes, the NIC shared by the
  replicas whose stage sits on the same node (intra-node: each tp rank sends its 1/tp);
* memory per device: weights + gradients + Adam states (2 x fp32) with ZeRO sharding over dp,
  plus stored activations of the micro-batches in flight on the stage (min(pp - p, m) in 1F1B);
  a plan over any device's memory is rejected with the stage, the need and the limit.

Heterogeneous devices (``balance="speed"``): stage boundaries minimise the slowest stage's time
given each stage's device speed, and each data-parallel replica gets micro-batches in proportion
to its speed; ``balance="even"`` plans as if all devices were equal (the baseline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from flexcomm.costmodel.collectives import formula
from flexcomm.costmodel.compute import DEFAULT_BACKWARD_FACTOR
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gradient_exchange import GradientScheme
from flexcomm.costmodel.units import format_size
from flexcomm.planner.overlap import exposed_exchange_s, gradient_buckets
from flexcomm.planner.pipeline_units import Units
from flexcomm.planner.rank_devices import PlanCluster

ALLREDUCE_ALGORITHMS = ("ring", "tree", "rabenseifner")
ORDERS = ("tp-dp-pp", "tp-pp-dp")  # innermost to outermost rank dimension
BALANCES = ("speed", "even")
#: Adam keeps two fp32 moments per parameter: 2 x the fp32 parameter bytes.
ADAM_STATE_MULTIPLE = 2.0
#: Bytes of a gradient element: the graph planner's models train in fp32 (their parameter bytes are fp32's)
GRADIENT_BYTES = 4.0


@dataclass(frozen=True, order=True)
class PlanConfig:
    """One point of the search space."""

    dp: int
    tp: int
    pp: int
    micro_batches: int
    zero: int = 0
    order: str = "tp-dp-pp"

    @property
    def label(self) -> str:
        short = "dp-outer" if self.order == "tp-pp-dp" else "pp-outer"
        return f"dp{self.dp}-tp{self.tp}-pp{self.pp}-m{self.micro_batches}-z{self.zero}-{short}"


@dataclass
class PlanCost:
    """A priced plan: the step time, where it goes, its memory and whether it fits."""

    config: PlanConfig
    feasible: bool
    reason: str
    step_s: float
    compute_s: float
    tp_comm_s: float
    p2p_s: float
    bubble_s: float
    dp_comm_s: float
    peak_memory_bytes: float
    memory_use: float  # highest used / limit over devices
    stage_units: tuple[int, ...]
    replica_micro_batch: tuple[int, ...]
    dp_algorithm: str = ""
    #: the part of ``dp_comm_s`` the backward does not hide (DDP's buckets overlap it): what the step pays
    dp_exposed_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
    #: Per replica/stage arrays the simulator replays (see :meth:`Pricer.price`).
    detail: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def communication_s(self) -> float:
        return self.tp_comm_s + self.p2p_s + self.dp_exposed_s

    def row(self) -> dict[str, object]:
        c = self.config
        return {
            "plan": c.label, "dp": c.dp, "tp": c.tp, "pp": c.pp, "micro_batches": c.micro_batches, "zero": c.zero,
            "order": c.order, "feasible": self.feasible, "step_s": self.step_s, "compute_s": self.compute_s,
            "tp_comm_s": self.tp_comm_s, "p2p_s": self.p2p_s, "bubble_s": self.bubble_s, "dp_comm_s": self.dp_comm_s,
            "dp_exposed_s": self.dp_exposed_s, "peak_memory_GiB": self.peak_memory_bytes / 2**30,
            "memory_use": self.memory_use,
            "stage_units": "/".join(map(str, self.stage_units)),
            "replica_micro_batch": "/".join(map(str, self.replica_micro_batch)), "dp_algorithm": self.dp_algorithm,
            "reason": self.reason,
        }


def _coefficients(algorithm: str, p: int) -> tuple[float, float]:
    """(alpha count, beta bytes per byte) of an allreduce over p ranks: linear in the size."""
    coef = formula("allreduce", algorithm)(1.0, float(p))
    return float(coef.alpha), float(coef.beta)


@dataclass(slots=True)
class _StageSplit:
    """A plan's stages as :meth:`Pricer.price`'s phases share them: per-unit and per-stage sums, per-replica
    micro-batch sizes and the [replica, stage] groups' slowest device speed and memory."""

    group_speed: np.ndarray  # [dp, pp] peak FLOP/s of each group's slowest device
    group_memory: np.ndarray  # [dp, pp] usable bytes of each group's smallest device
    sizes: tuple[int, ...]  # units per stage
    seg: list[slice]  # each stage's units
    work_u: np.ndarray  # per unit, one tp rank's share
    param_u: np.ndarray
    work: np.ndarray  # per stage
    params: np.ndarray
    acts: np.ndarray
    tp_count: np.ndarray
    tp_bytes: np.ndarray
    send_fwd: np.ndarray
    send_bwd: np.ndarray
    mb: np.ndarray  # samples per micro-batch of each replica


class Pricer:
    """Prices :class:`PlanConfig` s of one model on one cluster; caches partitions and links.

    ``cache=False`` recomputes every partition, coefficient and link per plan (the benchmark's
    baseline).
    """

    def __init__(self, units: Units, cluster: PlanCluster, batch_size: int, *, balance: str = "speed",
                 backward_factor: float = DEFAULT_BACKWARD_FACTOR, optimizer_multiple: float = ADAM_STATE_MULTIPLE,
                 memory_fraction: float = 1.0, cache: bool = True, exchange: GradientScheme | None = None) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError("batch_size", batch_size, "an integer >= 1")
        if balance not in BALANCES:
            raise InputError("balance", balance, "one of " + ", ".join(BALANCES))
        if not 0 < memory_fraction <= 1:
            raise InputError("memory_fraction", memory_fraction, "a fraction in (0, 1]")
        self.units, self.cluster, self.batch_size = units, cluster, batch_size
        self.balance, self.backward_factor = balance, float(backward_factor)
        self.optimizer_multiple, self.memory_fraction = float(optimizer_multiple), float(memory_fraction)
        self.cache = cache
        #: how data-parallel groups exchange gradients (``plan --scheme``): dense allreduce unless told
        self.exchange = exchange or GradientScheme()
        self._peaks = cluster.peak_flops
        self._memory = cluster.memory_bytes * memory_fraction
        self._node = np.arange(cluster.world_size) // cluster.devices_per_node
        self._partitions: dict[tuple, tuple[int, ...]] = {}
        self._coef: dict[tuple[str, int], tuple[float, float]] = {}
        self._links: dict[tuple, tuple[float, float]] = {}
        # NCCL's own choice where the cluster describes NCCL's fabric: a DDP or Megatron job's gradient
        # allreduce runs there over every NIC of a node, not over the one a textbook ring crosses
        base = cluster.cluster
        self._nccl = (CostModel.from_cluster(base) if base.gpu_fabric is not None and not base.node_devices
                      else None)
        self._nccl_times: dict[tuple[int, float], float] = {}
        self._exchanges: dict[tuple, tuple[float, str]] = {}
        self._buckets: dict[tuple, float] = {}

    # --- validation -----------------------------------------------------------------------------
    def check(self, cfg: PlanConfig) -> None:
        """Raise InputError when ``cfg`` is not a plan of this model, batch and cluster."""
        world = self.cluster.world_size
        for name in ("dp", "tp", "pp", "micro_batches"):
            value = getattr(cfg, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name, value, "an integer >= 1")
        if cfg.dp * cfg.tp * cfg.pp != world:
            raise InputError("plan", cfg.label, f"dp x tp x pp = {world}, the ranks of cluster {self.cluster.name}")
        if cfg.pp > len(self.units):
            raise InputError("pp", cfg.pp, f"at most {len(self.units)} stages (the model's pipeline units)")
        if cfg.zero not in (0, 1, 2):
            raise InputError("zero", cfg.zero, "0, 1 or 2 (ZeRO stage)")
        if cfg.order not in ORDERS:
            raise InputError("order", cfg.order, "one of " + ", ".join(ORDERS))
        per_replica = self.batch_size / cfg.micro_batches
        if self.batch_size % cfg.micro_batches or per_replica < cfg.dp:
            raise InputError("micro_batches", cfg.micro_batches,
                             f"a divisor of the batch {self.batch_size} leaving at least one sample per replica")
        if self.balance == "even" and self.batch_size % (cfg.dp * cfg.micro_batches):
            raise InputError("micro_batches", cfg.micro_batches,
                             f"dp x micro-batches dividing the batch {self.batch_size} (even balance)")

    # --- layout -------------------------------------------------------------------------------
    @staticmethod
    def layout(cfg: PlanConfig) -> np.ndarray:
        """Ranks as an array [replica, stage, tp rank]; tp is always innermost (one node's fast link)."""
        ranks = np.arange(cfg.dp * cfg.pp * cfg.tp)
        if cfg.order == "tp-dp-pp":  # stage outermost: a stage's replicas sit together
            return ranks.reshape(cfg.pp, cfg.dp, cfg.tp).transpose(1, 0, 2)
        return ranks.reshape(cfg.dp, cfg.pp, cfg.tp)

    # --- partition ----------------------------------------------------------------------------
    def partition(self, pp: int, tp: int, speeds: tuple[float, ...]) -> tuple[int, ...]:
        """Units per stage minimising max_p(stage work / speed_p), stages in order, each non-empty.

        With unequal speeds greedy filling is not optimal (a fast stage that takes one unit too
        many can leave a slow stage a unit it cannot hold), so a bound is checked exactly: the
        set of cut positions reachable after each stage (an interval per reachable start, as
        the furthest end grows with the start), and a bisection on the bound finds the optimum.
        """
        key = (pp, tp, speeds)
        if self.cache and key in self._partitions:
            return self._partitions[key]
        work = self.units.work_shard / tp + self.units.work_rep
        prefix = np.concatenate([[0.0], np.cumsum(work)])
        n = len(work)
        s = np.asarray(speeds, dtype=float)
        positions = np.arange(n + 1)

        def reach(bound: float) -> list[np.ndarray] | None:
            layers = [positions == 0]
            for p in range(pp):
                starts = np.flatnonzero(layers[-1])
                if len(starts) == 0:
                    return None
                cap = bound * s[p] * (1 + 1e-12)
                furthest = np.searchsorted(prefix, prefix[starts] + cap, side="right") - 1
                diff = np.zeros(n + 2)
                ok = furthest > starts
                np.add.at(diff, starts[ok] + 1, 1)
                np.add.at(diff, furthest[ok] + 1, -1)
                layers.append(np.cumsum(diff)[: n + 1] > 0)
            return layers if layers[-1][n] else None

        lo, hi = prefix[-1] / s.sum(), (prefix[-1] + work.max()) / s.min()
        best = reach(hi)
        for _ in range(64):
            if hi - lo <= 1e-10 * hi:
                break
            mid = 0.5 * (lo + hi)
            got = reach(mid)
            if got is None:
                lo = mid
            else:
                hi, best = mid, got
        assert best is not None
        ends = [n]
        for p in range(pp - 1, -1, -1):  # walk back: the latest reachable start that can reach this end
            end = ends[-1]
            cap = hi * s[p] * (1 + 1e-12)
            starts = np.flatnonzero(best[p][:end] & (prefix[end] - prefix[:end] <= cap))
            ends.append(int(starts.max()))
        cuts = ends[::-1]
        sizes = tuple(int(b - a) for a, b in zip(cuts[:-1], cuts[1:], strict=True))
        if self.cache:
            self._partitions[key] = sizes
        return sizes

    # --- links --------------------------------------------------------------------------------
    def _coefficients(self, algorithm: str, p: int) -> tuple[float, float]:
        key = (algorithm, p)
        coef = self._coef.get(key) if self.cache else None
        if coef is None:
            coef = _coefficients(algorithm, p)
            self._coef[key] = coef
        return coef

    def _link(self, ranks: np.ndarray, ring: bool) -> tuple[float, float]:
        """(alpha, beta) a collective over ``ranks`` sees: a ring its own hops, others the slowest link."""
        key = (ring, ranks.tobytes())
        link = self._links.get(key) if self.cache else None
        if link is None:
            members = [int(r) for r in ranks]
            c = self.cluster.cluster
            _, lnk = c.ring_link(members) if ring else c.group_link(members)
            link = (lnk.alpha, lnk.beta)
            self._links[key] = link
        return link

    def _group_time(self, ranks: np.ndarray, nbytes: float, algorithm: str, share: float = 1.0,
                    calls: float = 1.0) -> float:
        """Seconds of ``calls`` allreduces moving ``nbytes`` in all over ``ranks``, bandwidth shared ``share`` ways."""
        p = len(ranks)
        if p <= 1 or nbytes <= 0:
            return 0.0
        a, b = self._coefficients(algorithm, p)
        alpha, beta = self._link(ranks, algorithm == "ring")
        return calls * a * alpha + b * nbytes * beta * share

    def _best_allreduce(self, ranks: np.ndarray, nbytes: float, share: float = 1.0) -> tuple[float, str]:
        """The cheapest allreduce algorithm. Tree and Rabenseifner exchange between all ranks of
        a node at once, so across nodes their bandwidth is also shared by the group's ranks per node
        (a ring's own hops already count its flows per NIC)."""
        nodes = self._node[ranks]
        per_node = float(np.bincount(nodes).max()) if len(np.unique(nodes)) > 1 else 1.0
        times = [(self._group_time(ranks, nbytes, a, share * (1.0 if a == "ring" else per_node)), a)
                 for a in ALLREDUCE_ALGORITHMS]
        if self._nccl is not None and share == 1.0 and self._whole_block(ranks):
            times.append((self._nccl_time(len(ranks), nbytes), "nccl"))
        return min(times)

    def _dp_exchange(self, ranks: np.ndarray, nbytes: float, share: float) -> tuple[float, str]:
        """A stage's gradient exchange over its data-parallel ``ranks``: the cheapest dense allreduce, or
        ``plan --scheme``'s exchange as whatif and simulate price it (NCCL's calls on a block of whole nodes
        of a GPU fabric, the formulas on the group's ring link otherwise, bandwidth shared ``share`` ways)."""
        if self.exchange.dense:
            return self._best_allreduce(ranks, nbytes, share)
        key = (ranks.tobytes(), nbytes, share)  # stages of many plans share a group and a shard
        hit = self._exchanges.get(key) if self.cache else None
        if hit is None:
            hit = self._exchanges[key] = self._compressed_exchange(ranks, nbytes, share)
        return hit

    def _bucket_exchange(self, ranks: np.ndarray, nbytes: float, share: float) -> tuple[float, str]:
        """One DDP bucket's allreduce and its algorithm: every bucket but a stage's last holds the cap, so
        most plans ask the same few (group, size) pairs."""
        key = (ranks.tobytes(), nbytes, share)
        hit = self._buckets.get(key) if self.cache else None
        if hit is None:
            hit = self._buckets[key] = self._dp_exchange(ranks, nbytes, share)
        return hit

    def bucket_algorithm(self, ranks: np.ndarray, nbytes: float, share: float) -> str:
        """The allreduce algorithm the price of a bucket of ``nbytes`` assumed (the simulator runs the same)."""
        return self._bucket_exchange(ranks, nbytes, share)[1]

    def _compressed_exchange(self, ranks: np.ndarray, nbytes: float, share: float) -> tuple[float, str]:
        numel = nbytes / GRADIENT_BYTES
        if self._nccl is not None and share == 1.0 and self._whole_block(ranks):
            return self.exchange.exchange_seconds(numel, len(ranks), self._nccl, True), f"{self.exchange.scheme}/nccl"
        alpha, beta = self._link(ranks, True)
        link = CostModel.from_link(alpha, 1.0 / (beta * share))
        return self.exchange.exchange_seconds(numel, len(ranks), link, False), f"{self.exchange.scheme}/ring"

    @property
    def _slowest_device(self):  # -> costmodel.cluster_parts.Device
        base = self.cluster.cluster
        return min(base.rank_devices, key=lambda device: device.peak_flops)

    def _whole_block(self, ranks: np.ndarray) -> bool:
        """Consecutive ranks filling whole nodes (or part of one): the group NCCL's model prices by its size."""
        n, per = len(ranks), self.cluster.devices_per_node
        first = int(ranks[0])
        if n <= 1 or not np.array_equal(ranks, np.arange(first, first + n)):
            return False
        return (first % per == 0 and n % per == 0) or first // per == (first + n - 1) // per

    def _nccl_time(self, ranks: int, nbytes: float) -> float:
        key = (ranks, nbytes)
        if key not in self._nccl_times:
            self._nccl_times[key] = float(self._nccl.nccl_choice("allreduce", "nccl", nbytes, ranks).seconds)
        return self._nccl_times[key]

    def _p2p_time(self, src: np.ndarray, dst: np.ndarray, nbytes: float, share: float = 1.0) -> float:
        """One stage's tp ranks sending a tensor to the next stage's; across nodes they share the NIC
        (with ``share`` replicas doing the same at the same time)."""
        if nbytes <= 0:
            return 0.0
        a, b = int(self._node[src[0]]), int(self._node[dst[0]])
        if a == b:
            link = self.cluster.cluster.intra_link
            return link.alpha + nbytes / len(src) * link.beta
        key = ("p2p", a, b)
        cached = self._links.get(key) if self.cache else None
        if cached is None:
            lnk = self.cluster.cluster.path_link(a, b)
            cached = (lnk.alpha, lnk.beta)
            self._links[key] = cached
        return cached[0] + nbytes * cached[1] * share

    # --- pricing ------------------------------------------------------------------------------
    def replica_micro_batches(self, cfg: PlanConfig, bottleneck: np.ndarray) -> tuple[int, ...]:
        """Samples per micro-batch of each replica: proportional to its speed (largest remainder)."""
        total = self.batch_size // cfg.micro_batches
        if self.balance == "even" or cfg.dp == 1:
            return (total // cfg.dp,) * cfg.dp
        rate = 1.0 / bottleneck
        ideal = rate / rate.sum() * total
        share = np.maximum(np.floor(ideal), 1).astype(int)
        while share.sum() > total:
            share[np.argmax(share - ideal)] -= 1
        order = np.argsort(-(ideal - share), kind="stable")
        i = 0
        while share.sum() < total:
            share[order[i % cfg.dp]] += 1
            i += 1
        return tuple(int(x) for x in share)

    def price(self, cfg: PlanConfig) -> PlanCost:
        """Step time, breakdown and memory of ``cfg`` (rejected plans are priced too, marked infeasible)."""
        self.check(cfg)
        m = cfg.micro_batches
        ranks = self.layout(cfg)
        split = self._stage_split(cfg, ranks)
        mb = split.mb
        fb = 1.0 + self.backward_factor
        compute, tp_comm, p2p = self._micro_batch_times(cfg, ranks, split, fb)
        per_mb = compute + tp_comm + p2p
        replica = per_mb.sum(axis=1) + (m - 1) * per_mb.max(axis=1)
        slow = int(np.argmax(replica))
        b = int(np.argmax(per_mb[slow]))

        dp_times, dp_algs, dp_shares, dp_comm = self._dp_exchanges(cfg, ranks, split.params)
        dp_alg = dp_algs[int(np.argmax(dp_times))]
        dp_exposed = dp_comm
        if dp_comm > 0 and self.exchange.dense:
            dp_exposed = self._dp_exposed(ranks, split, slow, dp_times, dp_shares, dp_comm)
        feedback, device_work = self._compressor_costs(cfg.dp, split.params)
        used, use, feasible, reason = self._memory_use(cfg, ranks, split, feedback)
        step = float(replica[slow] + device_work + dp_exposed)
        seg, work_u, param_u = split.seg, split.work_u, split.param_u
        return PlanCost(
            config=cfg, feasible=feasible, reason=reason, step_s=step,
            compute_s=float(m * compute[slow, b]), tp_comm_s=float(m * tp_comm[slow, b]),
            p2p_s=float(m * p2p[slow, b]), bubble_s=float(replica[slow] - m * per_mb[slow, b]),
            dp_comm_s=dp_comm, dp_exposed_s=dp_exposed, peak_memory_bytes=float(used.max()),
            memory_use=float(use.max()),
            stage_units=tuple(split.sizes), replica_micro_batch=tuple(int(x) for x in mb), dp_algorithm=dp_alg,
            extra={"samples_per_s": self.batch_size / step if step > 0 and math.isfinite(step) else 0.0,
                   "dp_device_work_s": device_work},
            detail={"ranks": ranks, "compute": compute, "forward": compute / fb, "mb": mb,
                    "tp_count": split.tp_count, "tp_bytes": split.tp_bytes, "send_fwd": split.send_fwd,
                    "send_bwd": split.send_bwd, "params": split.params, "dp_times": dp_times,
                    "dp_algs": np.array(dp_algs), "dp_shares": dp_shares, "replica": replica,
                    "bucket_work": [work_u[s] for s in seg], "bucket_grads": [param_u[s] for s in seg]},
        )

    def _stage_split(self, cfg: PlanConfig, ranks: np.ndarray) -> _StageSplit:
        """Cut the units into ``cfg``'s stages (by the stages' slowest devices under ``balance="speed"``), sum each
        stage's work, parameters, activations and tp traffic, and share the batch between the replicas."""
        u = self.units
        tp, pp = cfg.tp, cfg.pp
        group_speed = self._peaks[ranks].min(axis=2)  # [dp, pp]
        group_memory = self._memory[ranks].min(axis=2)
        stage_speed = group_speed.min(axis=0) if self.balance == "speed" else np.ones(pp)
        sizes = self.partition(pp, tp, tuple(float(x) for x in stage_speed / stage_speed.max()))
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        work_u = u.work_shard / tp + u.work_rep
        param_u = u.param_shard / tp + u.param_rep
        act_u = u.act_shard / tp + u.act_rep
        tp_bytes_u = u.tp_allreduces * u.boundary
        seg = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        work = np.array([work_u[s].sum() for s in seg])
        params = np.array([param_u[s].sum() for s in seg])
        acts = np.array([act_u[s].sum() for s in seg])
        tp_count = np.array([u.tp_allreduces[s].sum() for s in seg])
        tp_bytes = np.array([tp_bytes_u[s].sum() for s in seg])
        send_fwd = np.array([u.boundary[int(b) - 1] if p < pp - 1 else 0.0 for p, b in enumerate(bounds[1:])])
        send_bwd = np.array([u.boundary[int(a) - 1] if p > 0 else 0.0 for p, a in enumerate(bounds[:-1])])
        bottleneck = (work[None, :] / group_speed).max(axis=1)
        mb = np.array(self.replica_micro_batches(cfg, bottleneck), dtype=float)
        return _StageSplit(group_speed, group_memory, sizes, seg, work_u, param_u, work, params, acts, tp_count,
                           tp_bytes, send_fwd, send_bwd, mb)

    def _micro_batch_times(self, cfg: PlanConfig, ranks: np.ndarray, split: _StageSplit,
                           fb: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Seconds of one micro-batch per [replica, stage]: compute (forward + backward), tp allreduces, and the
        pipeline sends, the NIC shared by the replicas whose stage sits on the same node."""
        dp, tp, pp = cfg.dp, cfg.tp, cfg.pp
        mb, tp_count, tp_bytes = split.mb, split.tp_count, split.tp_bytes
        send_fwd, send_bwd = split.send_fwd, split.send_bwd
        compute = split.work[None, :] * mb[:, None] / split.group_speed * fb  # [dp, pp]
        tp_comm = np.zeros((dp, pp))
        p2p = np.zeros((dp, pp))
        # replicas whose stage p sits on each node: their sends leave through one NIC together
        replicas_on_node = [np.bincount(self._node[ranks[:, p, 0]], minlength=int(self._node[-1]) + 1)
                            for p in range(pp)]
        for d in range(dp):
            for p in range(pp):
                group = ranks[d, p]
                if tp > 1 and tp_count[p] > 0:  # forward and backward
                    tp_comm[d, p] = 2.0 * self._group_time(group, tp_bytes[p] * mb[d], "ring",
                                                           calls=float(tp_count[p]))
                share = float(replicas_on_node[p][int(self._node[group[0]])])
                if p < pp - 1:
                    p2p[d, p] += self._p2p_time(group, ranks[d, p + 1], send_fwd[p] * mb[d], share)
                if p > 0:
                    p2p[d, p] += self._p2p_time(group, ranks[d, p - 1], send_bwd[p] * mb[d], share)
        return compute, tp_comm, p2p

    def _dp_exchanges(self, cfg: PlanConfig, ranks: np.ndarray,
                      params: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray, float]:
        """Each stage's gradient exchange (seconds, algorithm, NIC share) and the whole step's: the stages'
        allreduces overlap, so a NIC's load is summed over the stages crossing it."""
        dp, pp = cfg.dp, cfg.pp
        dp_times = np.zeros(pp)
        dp_algs = [""] * pp
        dp_shares = np.ones(pp)
        dp_comm = 0.0
        if dp > 1:
            nic_load: dict[int, float] = {}
            for p in range(pp):
                nodes = self._node[ranks[:, p, :]]  # [dp, tp]
                share = 1.0
                if len(np.unique(nodes[:, 0])) > 1:  # the stage's tp groups cross each NIC together
                    share = float(max(int((nodes == n).any(axis=0).sum()) for n in np.unique(nodes)))
                dp_shares[p] = share
                dp_times[p], dp_algs[p] = self._dp_exchange(ranks[:, p, 0], float(params[p]), share)
                if len(np.unique(nodes)) > 1:
                    # stages drain one backward apart, so their allreduces overlap on the NICs they share
                    for n in np.unique(nodes).tolist():
                        nic_load[n] = nic_load.get(n, 0.0) + dp_times[p]
            dp_comm = float(max([dp_times.max(), *nic_load.values()]))
        return dp_times, dp_algs, dp_shares, dp_comm

    def _dp_exposed(self, ranks: np.ndarray, split: _StageSplit, slow: int, dp_times: np.ndarray,
                    dp_shares: np.ndarray, dp_comm: float) -> float:
        """The dense exchange the backward does not hide. DDP's buckets overlap the last micro-batch's backward
        (planner/overlap.py): the stage with the longest exchange, its buckets priced alone and slowed as the NICs'
        shared load slows the whole."""
        longest = int(np.argmax(dp_times))
        seg = split.seg[longest]
        backward = split.work_u[seg] * split.mb[slow] / split.group_speed[slow, longest] * self.backward_factor
        bucket_ready, bucket_bytes = gradient_buckets(split.param_u[seg], backward)
        contention = dp_comm / dp_times[longest]
        group, share = ranks[:, longest, 0], float(dp_shares[longest])
        bucket_s = [contention * self._bucket_exchange(group, size, share)[0] for size in bucket_bytes.tolist()]
        return exposed_exchange_s(bucket_ready, np.array(bucket_s), float(backward.sum()))

    def _compressor_costs(self, dp: int, params: np.ndarray) -> tuple[np.ndarray, float]:
        """A compressor's error feedback per stage (fp32, one element per gradient element) and its device work,
        every stage compressing its own gradients at once on its slowest device (nothing without data parallelism)."""
        feedback = np.array([self.exchange.memory_bytes(x / GRADIENT_BYTES) if dp > 1 else 0.0 for x in params])
        device_work = max((self.exchange.device_seconds(x / GRADIENT_BYTES, self._slowest_device)
                           for x in params), default=0.0) if dp > 1 else 0.0
        return feedback, device_work

    def _memory_use(self, cfg: PlanConfig, ranks: np.ndarray, split: _StageSplit,
                    feedback: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, str]:
        """Bytes per [replica, stage] device (weights, ZeRO-sharded gradients and optimizer states, error feedback,
        the activations of the micro-batches in flight in 1F1B), their share of the limit, and whether all fit."""
        dp, pp, m = cfg.dp, cfg.pp, cfg.micro_batches
        params, acts, mb, group_memory = split.params, split.acts, split.mb, split.group_memory
        grads = params / (dp if cfg.zero >= 2 else 1)
        optim = params * self.optimizer_multiple / (dp if cfg.zero >= 1 else 1)
        inflight = np.minimum(pp - np.arange(pp), m)
        used = (params + grads + optim + feedback)[None, :] + acts[None, :] * mb[:, None] * inflight[None, :]
        use = used / group_memory
        worst = np.unravel_index(int(np.argmax(use)), use.shape)
        feasible = bool(use.max() <= 1.0)
        reason = ""
        if not feasible:
            d, p = int(worst[0]), int(worst[1])
            dev = self.cluster.devices[int(ranks[d, p, 0])]
            reason = (f"memory: stage {p} needs {format_size(used[d, p])} per device, "
                      f"{dev.name} has {format_size(group_memory[d, p] / self.memory_fraction)}")
        return used, use, feasible, reason
