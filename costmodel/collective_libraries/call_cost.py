"""One NCCL call priced end to end: the cluster's node, NCCL's topology search and tuner choosing, the runtime.

``--algorithm nccl`` asks for what NCCL would run (its own minimum over algorithms and protocols);
``nccl:ring``, ``nccl:tree/ll128`` or ``nccl:/simple`` force an algorithm and/or protocol as the
``NCCL_ALGO`` / ``NCCL_PROTO`` environment variables do. Collectives the tuner prices (allreduce,
allgather, reduce-scatter, broadcast, reduce) are chosen by :mod:`.tuner` on the graphs of
:mod:`.topology` for the cluster's NCCL release (:mod:`.versions`), then timed as the runtime runs them
(:mod:`.runtime`: channels and threads launched, pipeline fill, host launch, the fabric's latency).
All-to-all and send/recv are NCCL point-to-point operations, outside the tuner: they are priced here by the
bytes each GPU moves over NVLink and over its share of the NICs, with one Simple-protocol step latency of the
ring table (an assumption, said in ``protocol = "p2p"``). RCCL clusters (``library: rccl``) are priced by
:mod:`.rccl`.

Sizes follow nccl-tests' ``size`` column (NCCL's own ``nBytes``: the gathered output of an allgather).
"""

from __future__ import annotations

from dataclasses import dataclass

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.collective_libraries import fabric_calibration, transports
from flexcomm.costmodel.collective_libraries.algorithms import P2P, TUNED, parse_nccl_algorithm
from flexcomm.costmodel.collective_libraries.rccl import explain as rccl_explain
from flexcomm.costmodel.collective_libraries.runtime import Execution, execute
from flexcomm.costmodel.collective_libraries.topology import call_version, nccl_system, node_links
from flexcomm.costmodel.collective_libraries.tuner import TuningTable, choose, label, tune
from flexcomm.costmodel.collective_libraries.versions import NcclVersion, base_lat_us, hw_lat_us
from flexcomm.costmodel.errors import InputError


@dataclass(frozen=True)
class NcclChoice:
    """One call as NCCL would run it: algorithm, protocol and the predicted seconds split in two (the
    alpha-beta split every engine reads); :attr:`execution` has the full story."""

    algorithm: str
    protocol: str
    latency_s: float  # launch + per-step latency + pipeline fill
    bandwidth_s: float
    execution: Execution | None = None

    @property
    def seconds(self) -> float:
        return self.latency_s + self.bandwidth_s

    @property
    def label(self) -> str:
        return label(self.algorithm, self.protocol)


_TABLES: dict[tuple[object, ...], TuningTable] = {}
_MAX_TABLES = 512


def _table(cluster: Cluster, ranks: int, collective: str, algo_env: str | None, proto_env: str | None,
           version: NcclVersion, plugin_latency: bool = True) -> TuningTable:
    """The tuner's table, cached on what the search reads (clusters themselves are not hashable);
    ``plugin_latency=False``: the same table without the net plugin's reported latency (the times)."""
    key = (cluster.gpu_fabric, cluster.devices_per_node, cluster.nics_per_node, cluster.inter_link.bandwidth_Bps,
           cluster.world_size, ranks, collective, algo_env, proto_env, version, plugin_latency)
    if key not in _TABLES:
        if len(_TABLES) >= _MAX_TABLES:
            _TABLES.clear()
        _TABLES[key] = tune(nccl_system(cluster, ranks, version, plugin_latency), collective, algo_env, proto_env)
    return _TABLES[key]


def explain(cluster: Cluster, collective: str, size_bytes: float, ranks: int, algorithm: str = "nccl",
            env: dict[str, str] | None = None, gpus_per_process: int = 1,
            version: str | NcclVersion | None = None) -> Execution:
    """How NCCL (or RCCL) runs one call of nccl-tests ``size`` bytes over ranks 0..ranks-1 of ``cluster``:
    algorithm, protocol, channels, threads, chunk, steps and the time split into launch, latency, pipeline
    fill and bandwidth; on a calibrated cluster (``calibration:``) at the rates and latencies its own runs
    measured (:mod:`.fabric_calibration`).

    ``env`` holds NCCL_ALGO / NCCL_PROTO as a log shows them (an explicit ``nccl:...`` wins over it);
    ``gpus_per_process``: GPUs one thread drives (nccl-tests ``-g``; 1 under MPI or torchrun)."""
    run = explain_described(cluster, collective, size_bytes, ranks, algorithm, env, gpus_per_process, version)
    if cluster.calibration is None:
        return run
    return fabric_calibration.apply(cluster.calibration, run, transports.extra_latency_us(cluster))


def explain_described(cluster: Cluster, collective: str, size_bytes: float, ranks: int, algorithm: str = "nccl",
                      env: dict[str, str] | None = None, gpus_per_process: int = 1,
                      version: str | NcclVersion | None = None) -> Execution:
    """:func:`explain` from the cluster's description alone (what a calibration is fitted against)."""
    if cluster.gpu_fabric is None:
        raise InputError("cluster.gpu_fabric", None, "a gpu_fabric section (compute_capability, intra, "
                         "nvlinks_per_gpu, pcie, ...) for the NCCL-grade model; see docs/cost-model.md")
    if cluster.gpu_fabric.library == "rccl":

        return rccl_explain(cluster, collective, size_bytes, ranks, algorithm, env, gpus_per_process, version)
    release = call_version(cluster, version)
    algo_env, proto_env = parse_nccl_algorithm(algorithm, release)
    env = env or {}
    algo_env = algo_env or env.get("NCCL_ALGO")
    proto_env = proto_env or env.get("NCCL_PROTO")
    host_us = transports.host_launch_us_per_gpu()
    if collective in P2P:
        return _p2p(cluster, collective, size_bytes, ranks, gpus_per_process * host_us, release)
    if collective not in TUNED:
        raise InputError("collective", collective, "one of " + ", ".join(TUNED + P2P))
    if ranks < 2:
        return Execution.alone("nccl", release, collective, size_bytes, ranks)
    best = choose(_table(cluster, int(ranks), collective, algo_env, proto_env, release), size_bytes)
    timing = _table(cluster, int(ranks), collective, algo_env, proto_env, release, plugin_latency=False)
    return execute(timing, best.algorithm, best.protocol, size_bytes, gpus_per_process,
                   transports.extra_latency_us(cluster), host_us)


def predict(cluster: Cluster, collective: str, size_bytes: float, ranks: int, algorithm: str = "nccl",
            env: dict[str, str] | None = None, gpus_per_process: int = 1,
            version: str | NcclVersion | None = None) -> NcclChoice:
    """Predicted time of one NCCL call (see :func:`explain`), as the two-term choice every engine reads."""
    run = explain(cluster, collective, size_bytes, ranks, algorithm, env, gpus_per_process, version)
    return NcclChoice(run.algorithm, run.protocol, run.launch_s + run.latency_s + run.fill_s, run.bandwidth_s, run)


def _p2p(cluster: Cluster, collective: str, size_bytes: float, ranks: int, host_us: float,
         version: NcclVersion) -> Execution:
    """All-to-all (each rank sends size/ranks to every rank) or one send/recv pair, by bytes per link.

    No ring or tree steps: NCCL groups the sends and receives to every peer into one kernel, up to 8 peers a
    batch on each channel, all batches of one channel in turn (``scheduleP2pTasksToPlan``, src/enqueue.cc @
    v2.27.7-1 L1044-1080; ``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` 8, src/include/device.h L369), which is one batch
    on every channel while nodes x ceil(GPUs a node / 8) <= the p2p channels; NCCL's tuner has no latency model
    of it ("Send/Recv not included", src/include/nccl_common.h L53). The latency here is one network latency
    (:func:`~.transports.extra_latency_us` beyond InfiniBand) and one Simple ring step's constants; what a
    calibrated fabric measures beyond that is its ``p2p_call_overhead_us`` (:mod:`.fabric_calibration`)."""
    node, nodes = node_links(cluster, ranks, version)
    g = node.gpus
    nvlink = node.nvlink_GBps if node.intra != "pcie" else node.pcie_ring_GBps
    hw = "net" if nodes > 1 else ("nvlink" if node.intra != "pcie" else "pci")
    latency_us = base_lat_us(version)["ring"][2] + hw_lat_us(version)[hw]["ring"][2]
    if nodes > 1:
        latency_us += transports.extra_latency_us(cluster)
    if collective == "sendrecv":
        bw = node.nic_path_GBps if nodes > 1 else nvlink
        intra_s, net_s = (0.0, size_bytes / (bw * 1e9)) if nodes > 1 else (size_bytes / (bw * 1e9), 0.0)
    else:
        intra_bytes = size_bytes * (g - 1) / ranks
        inter_bytes = size_bytes * (ranks - g) / ranks
        intra_s = intra_bytes / (nvlink * 1e9) if g > 1 else 0.0
        net_s = inter_bytes / (node.nics * node.nic_path_GBps / g * 1e9) if nodes > 1 else 0.0
    bandwidth_s = max(intra_s, net_s)
    gpu_us = latency_us + bandwidth_s * 1e6
    return Execution("nccl", str(version), collective, float(size_bytes), int(ranks), nodes, "ring", "p2p", 0, 0, 0,
                     0, 1, max(0.0, host_us - gpu_us) * 1e-6, latency_us * 1e-6, 0.0, bandwidth_s, host_us * 1e-6,
                     intra_s=intra_s, network_s=net_s)
