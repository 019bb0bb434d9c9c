"""The NCCL-grade cost model: a cluster's node, NCCL's topology search and tuner, one call's predicted time.

``--algorithm nccl`` asks for what NCCL would run (its own minimum over algorithms and protocols);
``nccl:ring``, ``nccl:tree/ll128`` or ``nccl:/simple`` force an algorithm and/or protocol as the
``NCCL_ALGO`` / ``NCCL_PROTO`` environment variables do. Collectives the tuner prices (allreduce,
allgather, reduce-scatter, broadcast, reduce) come from :mod:`costmodel.nccl_tuning` on the graphs of
:mod:`costmodel.nccl_topology`. All-to-all and send/recv are NCCL point-to-point operations, outside the
tuner: they are priced here by the bytes each GPU moves over NVLink and over its share of the NICs, with
one Simple-protocol step latency of the ring table (an assumption, said in ``protocol = "p2p"``).

Sizes follow nccl-tests' ``size`` column (NCCL's own ``nBytes``: the gathered output of an allgather).
"""

from __future__ import annotations

from dataclasses import dataclass

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.nccl_topology import nccl_system, node_links
from flexcomm.costmodel.nccl_tuning import (
    ALGORITHMS,
    BASE_LAT_US,
    HW_LAT_US,
    NCCL_NAMES,
    PROTOCOLS,
    TuningTable,
    algo_time_parts_us,
    choose,
    tune,
)

TUNED = ("allreduce", "allgather", "reduce-scatter", "broadcast", "reduce")
P2P = ("alltoall", "sendrecv")
_FORM = "nccl, or nccl:ALGO, nccl:ALGO/PROTO, nccl:/PROTO (ALGO: ring, tree, nvls, nvls_tree, collnet_direct, " \
        "collnet_chain; PROTO: ll, ll128, simple)"


@dataclass(frozen=True)
class NcclChoice:
    """One call as NCCL would run it: algorithm, protocol and the predicted seconds split in two."""

    algorithm: str
    protocol: str
    latency_s: float
    bandwidth_s: float

    @property
    def seconds(self) -> float:
        return self.latency_s + self.bandwidth_s

    @property
    def label(self) -> str:
        if self.protocol == "p2p":
            return "p2p"
        return f"{NCCL_NAMES[self.algorithm]}/{NCCL_NAMES[self.protocol]}"


def is_nccl_algorithm(name: str) -> bool:
    return name == "nccl" or name.startswith("nccl:")


def parse_nccl_algorithm(name: str) -> tuple[str | None, str | None]:
    """``nccl:tree/ll128`` -> NCCL_ALGO and NCCL_PROTO values (None: NCCL chooses)."""
    if name == "nccl":
        return None, None
    if not name.startswith("nccl:"):
        raise InputError("algorithm", name, _FORM)
    algo, _, proto = name[len("nccl:"):].partition("/")
    algo, proto = algo.strip().lower(), proto.strip().lower()
    if algo and algo not in ALGORITHMS:
        raise InputError("algorithm", name, _FORM)
    if proto and proto not in PROTOCOLS:
        raise InputError("algorithm", name, _FORM)
    if not algo and not proto:
        raise InputError("algorithm", name, _FORM)
    return (NCCL_NAMES[algo] if algo else None), (NCCL_NAMES[proto] if proto else None)


_TABLES: dict[tuple[object, ...], TuningTable] = {}
_MAX_TABLES = 512


def _table(cluster: Cluster, ranks: int, collective: str, algo_env: str | None, proto_env: str | None) -> TuningTable:
    """The tuner's table, cached on what the search reads (clusters themselves are not hashable)."""
    key = (cluster.gpu_fabric, cluster.devices_per_node, cluster.nics_per_node, cluster.inter_link.bandwidth_Bps,
           cluster.world_size, ranks, collective, algo_env, proto_env)
    if key not in _TABLES:
        if len(_TABLES) >= _MAX_TABLES:
            _TABLES.clear()
        _TABLES[key] = tune(nccl_system(cluster, ranks), collective, algo_env, proto_env)
    return _TABLES[key]


def predict(cluster: Cluster, collective: str, size_bytes: float, ranks: int, algorithm: str = "nccl",
            env: dict[str, str] | None = None) -> NcclChoice:
    """Predicted time of one NCCL call of nccl-tests ``size`` bytes over ranks 0..ranks-1 of ``cluster``.

    ``env`` holds NCCL_ALGO / NCCL_PROTO as a log shows them; an explicit ``nccl:...`` wins over it."""
    algo_env, proto_env = parse_nccl_algorithm(algorithm)
    env = env or {}
    algo_env = algo_env or env.get("NCCL_ALGO")
    proto_env = proto_env or env.get("NCCL_PROTO")
    if cluster.gpu_fabric is not None and cluster.gpu_fabric.library != "nccl":
        raise InputError("cluster.gpu_fabric.library", cluster.gpu_fabric.library,
                         "nccl (RCCL's own tuner is not modelled)")
    if collective in P2P:
        return _p2p(cluster, collective, size_bytes, ranks)
    if collective not in TUNED:
        raise InputError("collective", collective, "one of " + ", ".join(TUNED + P2P))
    if ranks < 2:
        return NcclChoice("ring", "simple", 0.0, 0.0)
    table = _table(cluster, int(ranks), collective, algo_env, proto_env)
    best = choose(table, size_bytes)
    parts = algo_time_parts_us(table, best.algorithm, best.protocol, size_bytes)
    assert parts is not None  # choose() only returns enabled cells
    return NcclChoice(best.algorithm, best.protocol, parts[0] * 1e-6, parts[1] * 1e-6)


def _p2p(cluster: Cluster, collective: str, size_bytes: float, ranks: int) -> NcclChoice:
    """All-to-all (each rank sends size/ranks to every rank) or one send/recv pair, by bytes per link."""
    node, nodes = node_links(cluster, ranks)
    g = node.gpus
    nvlink = node.nvlink_GBps if node.intra != "pcie" else node.pcie_ring_GBps
    if collective == "sendrecv":
        over_net = nodes > 1
        bw = node.nic_path_GBps if over_net else nvlink
        hw = "net" if over_net else ("nvlink" if node.intra != "pcie" else "pci")
        latency = (BASE_LAT_US["ring"][2] + HW_LAT_US[hw]["ring"][2]) * 1e-6
        return NcclChoice("ring", "p2p", latency, size_bytes / (bw * 1e9))
    intra_bytes = size_bytes * (g - 1) / ranks
    inter_bytes = size_bytes * (ranks - g) / ranks
    times = [intra_bytes / (nvlink * 1e9)] if g > 1 else [0.0]
    if nodes > 1:
        times.append(inter_bytes / (node.nics * node.nic_path_GBps / g * 1e9))
    hw = "net" if nodes > 1 else ("nvlink" if node.intra != "pcie" else "pci")
    latency = (BASE_LAT_US["ring"][2] + HW_LAT_US[hw]["ring"][2]) * 1e-6
    return NcclChoice("ring", "p2p", latency, max(times))
