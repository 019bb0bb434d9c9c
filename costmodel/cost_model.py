"""The one place predicted times come from: formulas + link parameters (+ calibration).

A :class:`CostModel` knows, for each *link class* (``intra`` inside a node, ``inter`` between
nodes), a latency alpha and a per-byte cost beta, optionally a reduction cost gamma, and
optionally a calibration profile whose fitted alpha/beta replace the link's for the
(collective, algorithm, link class) it covers. The simulator, the real backend and the
experiments all ask it, so one change of formula or calibration moves every engine together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from flexcomm.costmodel.cluster_parts import FABRIC_KINDS
from flexcomm.costmodel.collective_libraries.algorithms import is_nccl_algorithm
from flexcomm.costmodel.collective_libraries.call_cost import NcclChoice
from flexcomm.costmodel.collective_libraries.call_cost import predict as nccl_predict
from flexcomm.costmodel.collective_libraries.logs import size_column
from flexcomm.costmodel.collectives import HIERARCHICAL, CostBreakdown, canonical_collective, collective_plan, formula
from flexcomm.costmodel.compressed import (
    DEFAULT_ALGORITHMS,
    DEFAULT_PAYLOAD,
    Message,
    SchemeAlgorithms,
    SparsePayload,
    check_library_dtypes,
    scheme_messages,
    scheme_parts,
)
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.paths import PathPricer
from flexcomm.costmodel.units import coerce, parse_bandwidth, parse_count, parse_size, parse_time

#: Algorithms whose every step only talks to ring neighbours (priced on the ring's own hops).
NEIGHBOUR_ALGORITHMS = frozenset({
    ("allreduce", "ring"), ("allgather", "ring"), ("reduce-scatter", "ring"), ("broadcast", "pipelined-ring"),
})

if TYPE_CHECKING:
    from flexcomm.costmodel.calibration import CalibrationProfile
    from flexcomm.costmodel.cluster import Cluster


@dataclass(frozen=True)
class LinkParams:
    """alpha (s per message) and beta (s per byte) of one link class."""

    alpha: float
    beta: float

    @classmethod
    def from_bandwidth(cls, latency_s: float, bandwidth_Bps: float) -> LinkParams:
        if bandwidth_Bps <= 0:
            raise InputError("bandwidth", bandwidth_Bps, "a positive bandwidth")
        if latency_s < 0:
            raise InputError("latency", latency_s, "a non-negative latency")
        return cls(alpha=float(latency_s), beta=1.0 / float(bandwidth_Bps))


@dataclass
class CostModel:
    """Predicts collective and scheme times on a flat link or on a cluster.

    ``links`` maps link class to :class:`LinkParams`. With a ``cluster`` the link of a group of
    ``ranks`` (ranks 0..ranks-1, packed onto nodes) is the cluster's slowest link for that group;
    without one, every group uses ``links["inter"]`` (and ``links["intra"]`` for the intra-node
    phases of the hierarchical allreduce, defaulting to the inter link).
    """

    links: dict[str, LinkParams]
    gamma: float = 0.0
    cluster: Cluster | None = None
    profile: CalibrationProfile | None = None
    ranks_per_node: int | None = None
    _group_cache: dict[tuple[int, bool], tuple[str, LinkParams]] = field(default_factory=dict, repr=False)
    _pricer: PathPricer | None = field(default=None, repr=False)

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_link(
        cls, latency_s: float | str, bandwidth_Bps: float | str, gamma: float = 0.0, ranks_per_node: int | None = None
    ) -> CostModel:
        """A flat network: every group sees this one link (``"10us"``, ``"10Gbit/s"`` or seconds, bytes/s)."""
        link = LinkParams.from_bandwidth(coerce(latency_s, parse_time, "latency"),
                                         coerce(bandwidth_Bps, parse_bandwidth, "bandwidth"))
        return cls(links={"inter": link, "intra": link}, gamma=gamma, ranks_per_node=ranks_per_node)

    @classmethod
    def from_cluster(
        cls, cluster: Cluster, profile: CalibrationProfile | None = None, gamma: float = 0.0
    ) -> CostModel:
        links = {
            "intra": LinkParams(cluster.intra_link.alpha, cluster.intra_link.beta),
            "inter": LinkParams(cluster.inter_link.alpha, cluster.inter_link.beta),
        }
        return cls(
            links=links, gamma=gamma, cluster=cluster, profile=profile, ranks_per_node=cluster.devices_per_node
        )

    @classmethod
    def from_profile(cls, profile: CalibrationProfile, cluster: Cluster | None = None) -> CostModel:
        """A model whose every covered (collective, algorithm) uses the fitted parameters."""
        if cluster is not None:
            return cls.from_cluster(cluster, profile=profile)
        fallback = LinkParams(alpha=0.0, beta=0.0)
        return cls(links={"inter": fallback, "intra": fallback}, profile=profile)

    # --- link selection -----------------------------------------------------------------------
    def _check_ranks(self, ranks: ArrayLike) -> np.ndarray:
        p = np.asarray(ranks, dtype=float)
        if np.any(p < 1) or np.any(p != np.floor(p)):
            raise InputError("ranks", p.tolist() if p.ndim else float(p), "an integer >= 1")
        if self.cluster is not None and np.any(p > self.cluster.world_size):
            raise InputError(
                "ranks", int(p.max()), f"at most {self.cluster.world_size}, the size of cluster {self.cluster.name}"
            )
        return p

    def group_link(self, ranks: int, algorithm: tuple[str, str] | None = None) -> tuple[str, LinkParams]:
        """Link class and parameters seen by ``algorithm`` over ranks 0..ranks-1.

        Ring algorithms only talk to neighbours, so they see :meth:`Cluster.ring_link` (the hops
        they use, each shared by the ring's own flows); the others see the group's slowest link.
        """
        if self.cluster is None:
            return "inter", self.links["inter"]
        ring = algorithm in NEIGHBOUR_ALGORITHMS
        key = (int(ranks), ring)
        if key not in self._group_cache:
            members = list(range(int(ranks)))
            link_class, link = self.cluster.ring_link(members) if ring else self.cluster.group_link(members)
            self._group_cache[key] = (link_class, LinkParams(link.alpha, link.beta))
        return self._group_cache[key]

    def _inter_node_link(self, nodes: int, q: int, algorithm: str) -> LinkParams:
        """Link of the hierarchical allreduce's inter-node phase: one rank per node (0, q, 2q, ...)."""
        if self.cluster is None:
            return self.links["inter"]
        leaders = [node * q for node in range(nodes)]
        if ("allreduce", algorithm) in NEIGHBOUR_ALGORITHMS:
            _, link = self.cluster.ring_link(leaders)
        else:
            _, link = self.cluster.group_link(leaders)
        return LinkParams(link.alpha, link.beta)

    def _params(
        self, collective: str, algorithm: str, p: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """alpha, beta, gamma arrays for every entry of ``p`` (calibration first, then links)."""
        unique = np.unique(p)
        alpha = np.empty_like(p, dtype=float)
        beta = np.empty_like(p, dtype=float)
        gamma = np.full_like(p, self.gamma, dtype=float)
        for value in unique:
            link_class, link = self.group_link(int(value), (collective, algorithm))
            mask = p == value
            # On a cluster a fit measured on the other link class must not price this one: fall back to the link.
            fit = (self.profile.get(collective, algorithm, link_class, strict=self.cluster is not None)
                   if self.profile is not None else None)
            if fit is not None:
                # the fitted beta is effective: it prices the reduced bytes too (see calibration)
                alpha[mask], beta[mask], gamma[mask] = fit.alpha_s, fit.beta_s_per_byte, fit.beta_s_per_byte
            else:
                if self.profile is not None and self.cluster is None:
                    raise InputError(
                        "algorithm", f"{collective}/{algorithm}", "a collective covered by the calibration profile"
                    )
                alpha[mask], beta[mask] = link.alpha, link.beta
        return alpha, beta, gamma

    # --- predictions --------------------------------------------------------------------------
    def collective(
        self, collective: str, algorithm: str, nbytes: ArrayLike, ranks: ArrayLike
    ) -> CostBreakdown:
        """Predicted time of one collective (sizes as in :mod:`costmodel.collectives`; ``"64MiB"`` or bytes)."""
        nbytes = coerce(nbytes, parse_size, "nbytes")
        collective = canonical_collective(collective)
        if is_nccl_algorithm(algorithm):
            return self._nccl(collective, algorithm, nbytes, ranks)
        if self._on_fabric(collective, algorithm):
            n, p = np.broadcast_arrays(np.asarray(nbytes, dtype=float), np.asarray(ranks, dtype=float))
            self._check_ranks(p)
            parts = [self.on_ranks(collective, algorithm, float(n[i]), range(int(p[i]))) for i in np.ndindex(n.shape)]
            return CostBreakdown(*(np.array([getattr(c, f) for c in parts], dtype=float).reshape(n.shape)
                                   for f in ("latency", "bandwidth", "compute")))
        if (collective, algorithm) == HIERARCHICAL:
            return self.hierarchical_allreduce(nbytes, ranks)
        coef = formula(collective, algorithm)(nbytes, ranks)
        p = self._check_ranks(np.broadcast_to(np.asarray(ranks, dtype=float), coef.alpha.shape))
        alpha, beta, gamma = self._params(collective, algorithm, p)
        return coef.time(alpha, beta, gamma)

    def _on_fabric(self, collective: str, algorithm: str) -> bool:
        """Whether this cluster's collectives are priced on real paths: an explicit fabric (fat-tree,
        rail-optimized, nvlink-domain, torus, graph) with no calibration covering the call."""
        if self.cluster is None:
            return False

        if self.cluster.topology.kind not in FABRIC_KINDS:
            return False
        return self.profile is None or self.profile.get(collective, algorithm, "inter", strict=True) is None

    def on_ranks(self, collective: str, algorithm: str, nbytes: float | str, order: Iterable[int],
                 inter_algorithm: str = "ring") -> CostBreakdown:
        """One collective over the given ranks *in that order* (a ring follows it), priced step by step on
        the links and routes its flows really take (:mod:`costmodel.paths`): the topology-aware price,
        which the simulator reproduces on an otherwise idle network."""
        if self.cluster is None:
            raise InputError("cluster", None, "a cluster to price a group of ranks on its paths")
        collective = canonical_collective(collective)
        size = float(coerce(nbytes, parse_size, "nbytes"))
        group = np.array([self.cluster._check_rank(r) for r in order], dtype=np.int64)
        if len(group) == 0 or len(np.unique(group)) != len(group):
            raise InputError("ranks", group.tolist(), "a non-empty list of distinct ranks")
        if self._pricer is None:
            self._pricer = PathPricer(self.cluster)
        plan = collective_plan(self.cluster, collective, algorithm, group, size, False, inter_algorithm)
        latency, bandwidth, reduction = self._pricer.plan_seconds(plan, self.gamma)
        return CostBreakdown(np.array(latency), np.array(bandwidth), np.array(reduction))

    def nccl_choice(self, collective: str, algorithm: str, nbytes: float, ranks: int,
                    env: dict[str, str] | None = None, gpus_per_process: int = 1,
                    version: str | None = None) -> NcclChoice:
        """What NCCL (RCCL on an AMD cluster) runs for one call of ``nbytes`` (flexcomm's sizes) and its
        predicted time, from the cluster's ``gpu_fabric`` (:mod:`costmodel.collective_libraries.call_cost`);
        ``env`` holds NCCL_ALGO / NCCL_PROTO, ``gpus_per_process`` the GPUs one thread launches, ``version``
        the library release (else the cluster's)."""
        if self.cluster is None:
            raise InputError("algorithm", algorithm, "a cluster with a gpu_fabric section to price NCCL on")
        collective = canonical_collective(collective)
        self._check_ranks(ranks)
        size = size_column(collective, float(nbytes), int(ranks))
        return nccl_predict(self.cluster, collective, size, int(ranks), algorithm, env, gpus_per_process, version)

    def _nccl(self, collective: str, algorithm: str, nbytes: ArrayLike, ranks: ArrayLike) -> CostBreakdown:
        n, p = np.broadcast_arrays(np.asarray(nbytes, dtype=float), np.asarray(ranks, dtype=float))
        latency, bandwidth = np.empty(n.shape), np.empty(n.shape)
        for index in np.ndindex(n.shape):
            choice = self.nccl_choice(collective, algorithm, float(n[index]), int(p[index]))
            latency[index], bandwidth[index] = choice.latency_s, choice.bandwidth_s
        return CostBreakdown(latency, bandwidth, np.zeros(n.shape))

    def scheme_choices(self, scheme: str, numel: float, ranks: int, ratio: float,
                       payload: SparsePayload = DEFAULT_PAYLOAD,
                       algorithms: SchemeAlgorithms = DEFAULT_ALGORITHMS) -> list[tuple[Message, NcclChoice]]:
        """Each call of one exchange through ``algorithms.library`` (NCCL, or RCCL on an AMD cluster) and
        what the library runs for it: the baseline and the compressed schemes priced by one model."""
        if algorithms.library is None or not is_nccl_algorithm(algorithms.library):
            raise InputError("algorithm", algorithms.library, "nccl, nccl:ALGO or nccl:ALGO/PROTO")
        check_library_dtypes(scheme, payload)
        messages = scheme_messages(scheme, numel, ranks, ratio, payload, algorithms)
        return [(m, self.nccl_choice(m.collective, m.algorithm, m.nbytes, ranks)) for m in messages]

    def _library_scheme(self, scheme: str, numel: ArrayLike, ranks: ArrayLike, ratio: ArrayLike,
                        payload: SparsePayload, algorithms: SchemeAlgorithms) -> CostBreakdown:
        n, p, c = np.broadcast_arrays(np.asarray(numel, dtype=float), self._check_ranks(ranks),
                                      np.asarray(ratio, dtype=float))
        latency, bandwidth, compute = np.zeros(n.shape), np.zeros(n.shape), np.zeros(n.shape)
        for index in np.ndindex(n.shape):
            one = self.calls_breakdown(self.scheme_choices(scheme, float(n[index]), int(p[index]), float(c[index]),
                                                           payload, algorithms))
            latency[index], bandwidth[index], compute[index] = one.latency, one.bandwidth, one.compute
        return CostBreakdown(latency, bandwidth, compute)

    def calls_breakdown(self, calls: list[tuple[Message, NcclChoice]]) -> CostBreakdown:
        """One exchange's calls (from :meth:`scheme_choices`) as one breakdown: their latencies, bandwidth terms
        and the reductions their extra bytes cost at this model's gamma, each summed."""
        return CostBreakdown(np.array(sum(choice.latency_s for _, choice in calls)),
                             np.array(sum(choice.bandwidth_s for _, choice in calls)),
                             np.array(sum(self.gamma * message.extra_reduce_bytes for message, _ in calls)))

    def hierarchical_allreduce(
        self, nbytes: ArrayLike, ranks: ArrayLike, inter_algorithm: str = "ring"
    ) -> CostBreakdown:
        """Two-level allreduce: intra-node reduce-scatter, inter-node allreduce, intra-node allgather.

        With q ranks per node and N = ceil(p/q) nodes: T = RS_ring(n, q; intra) + AR(n/q, N; inter, x q)
        + AG_ring(n/q, q; intra). The q local ranks each allreduce their 1/q shard across nodes at
        the same time through the node's one NIC, so the inter phase's beta is multiplied by q.
        (Horovod/NCCL hierarchical allreduce; Sanders et al., "Two-tree", and Jia et al. 2018.)
        """
        n = np.asarray(nbytes, dtype=float)
        p = self._check_ranks(ranks)
        n, p = np.broadcast_arrays(n, p)
        q = np.minimum(p, float(self.ranks_per_node or 1))
        if np.any(p % q != 0):  # a partly filled node has no shard layout the two phases agree on
            bad = p[p % q != 0]
            raise InputError("ranks", int(bad.flat[0]), f"a multiple of the {int(self.ranks_per_node or 1)} ranks "
                             "per node (or at most that many) for the hierarchical allreduce")
        nodes = np.ceil(p / q)
        intra = self.links.get("intra", self.links["inter"])
        inter = np.empty_like(p)
        inter_alpha = np.empty_like(p)
        for value in np.unique(nodes * q):
            mask = nodes * q == value
            link = self._inter_node_link(int(np.max(nodes[mask])), int(np.max(q[mask])), inter_algorithm)
            inter[mask] = link.beta
            inter_alpha[mask] = link.alpha
        rs = formula("reduce-scatter", "ring")(n, q).time(intra.alpha, intra.beta, self.gamma)
        ar = formula("allreduce", inter_algorithm)(n / q, nodes).time(inter_alpha, inter * q, self.gamma)
        ag = formula("allgather", "ring")(n / q, q).time(intra.alpha, intra.beta, self.gamma)
        return rs + ar + ag

    def scheme(
        self,
        scheme: str,
        numel: ArrayLike,
        ranks: ArrayLike,
        ratio: ArrayLike,
        payload: SparsePayload = DEFAULT_PAYLOAD,
        algorithms: SchemeAlgorithms = DEFAULT_ALGORITHMS,
    ) -> CostBreakdown:
        """Predicted time of one gradient exchange (dense, topk-ag or topk-ar) of ``numel`` elements
        (a count such as ``"11.69M"`` or a number) over ``ranks``, keeping the fraction ``ratio``."""
        numel = coerce(numel, parse_count, "numel")
        if algorithms.library is not None:
            return self._library_scheme(scheme, numel, ranks, ratio, payload, algorithms)
        total: CostBreakdown | None = None
        for collective, algorithm, coef in scheme_parts(scheme, numel, ranks, ratio, payload, algorithms):
            p = self._check_ranks(np.broadcast_to(np.asarray(ranks, dtype=float), coef.alpha.shape))
            alpha, beta, gamma = self._params(collective, algorithm, p)
            part = coef.time(alpha, beta, gamma)
            total = part if total is None else total + part
        assert total is not None  # scheme_parts never returns an empty list
        return total
