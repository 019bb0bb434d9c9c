"""NCCL's topology search, by capacity: channels and per-channel bandwidth of the ring, tree and NVLS graphs.

NCCL builds, at start-up, one graph per algorithm (``ncclTopoCompute`` in ``src/graph/search.cc``): it
tries a per-channel speed from a fixed list, finds as many channels (rings through every GPU of the node,
entering and leaving through a NIC when there are other nodes) as the links can carry at that speed,
keeps the graph with the most bandwidth (channels x speed), doubles the channels when they are fast
(``ncclTopoDupChannels``), and tries faster speeds again with that many channels. The tuner
(:mod:`costmodel.collective_libraries.tuner`) prices calls from the result.

This module runs the same passes with the same speed lists and link bandwidths, but decides whether
*c* channels fit at speed *s* by counting capacity on the node's links instead of NCCL's recursive path
search. That is exact for the symmetric nodes the shipped clusters describe (every GPU alike: NVSwitch,
one NIC per GPU or per pair) and an approximation elsewhere (NVLink meshes, PCIe through two sockets),
said where it is made. Constants, each from the public source:

* link bandwidths, GB/s: ``SM70/80/90_NVLINK_BW`` 20/20/20.6 and ``SM86_NVLINK_BW`` 12 (topo.h at
  v2.20.3-1), ``SM100_NVLINK_BW`` 40.0 (v2.25.1-1) and 40.1 (v2.27.5-1 on); PCIe ``width*speed/80``
  (topo.cc); a NIC's port speed ``mbps/8000`` (topo.cc); inter-socket ``QPI_BW`` 6, ``SKL_QPI_BW`` 10,
  ``AMD_BW`` 16, ``ARM_BW`` 6; ``INTEL_P2P_OVERHEAD`` 6/5 on peer-to-peer PCIe paths through an Intel CPU
  (paths.cc). With PCIe peer-to-peer off (``gpu_fabric.pcie_p2p: false``, GeForce cards' stock drivers)
  NCCL moves data through host memory (its SHM transport): the P2P overhead does not apply. What else
  differs (each byte crossing the root complex and host memory; PCIe switches shared by two GPUs) is not
  in the description, and a measured difference beyond this is reported, not fitted.
* speed lists ``speedArrayIntra/Inter`` and ``sm90SpeedArrayIntra/Inter`` (search.cc @ v2.20.3-1
  L839-847; 11 GB/s added to the Hopper intra list at v2.21.5-1), ``sm100SpeedArrayIntra/Inter``
  (search.cc @ v2.26.2-1 L913-926, @ v2.27.7-1 L952-965, @ v2.30.7-1 L1051-1067); ``MAXCHANNELS`` 32
  (64 from 2.25), ring graphs up to ``MAXCHANNELS/2`` (init.cc), NVLS up to one channel per GPU.
* tree graphs: the ring's channel count, then pass 2 raises their intra speed while it is below twice the
  inter speed ("increase bwIntra for trees (2 nodes or collnet)", search.cc @ v2.20.3-1 ``ncclTopoCompute``):
  how the tuner credits a two-node tree with crossing the network with half a ring's bytes.

Versions: every list and constant that changed is chosen by the communicator's NCCL release
(:mod:`.versions`); Blackwell before 2.25 (no Blackwell rows) is searched as Hopper.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.cluster_parts import GpuFabric
from flexcomm.costmodel.collective_libraries.transports import plugin_latency_us
from flexcomm.costmodel.collective_libraries.tuner import Graph, NcclSystem
from flexcomm.costmodel.collective_libraries.versions import (
    DEFAULT,
    RCCL_DEFAULT,
    NcclVersion,
    max_channels,
    nvls_arity,
    parse_version,
)
from flexcomm.costmodel.errors import InputError

NVLINK_BW_GBPS = {70: 20.0, 80: 20.0, 86: 12.0, 89: 0.0, 90: 20.6, 100: 40.1}
SOCKET_BW_GBPS = {"intel": 10.0, "amd": 16.0, "arm": 6.0}  # SKL_QPI_BW, AMD_BW, ARM_BW
INTEL_P2P_OVERHEAD = 6 / 5
SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
                0.24, 0.12)
SM90_SPEEDS_INTRA = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0)
SM90_SPEEDS_INTRA_221 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SM90_SPEEDS_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
                     0.12)
SM100_SPEEDS_INTRA = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
SM100_SPEEDS_INTER = (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                      3.0, 2.4, 1.2, 0.24, 0.12)
#: Blackwell's lists by release: (intra, inter) from 2.25/2.26, 2.27, 2.29.2, 2.29.7 (2.30 is the pair above;
#: search.cc at each tag)
SM100_SPEEDS_BY_VERSION = (
    ((2, 25, 0), (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0), SM90_SPEEDS_INTER),
    ((2, 27, 0), (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
     (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)),
    ((2, 29, 2), SM100_SPEEDS_INTRA,
     (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)),
    ((2, 29, 7), SM100_SPEEDS_INTRA,
     (96.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
      0.12)),
    ((2, 30, 0), SM100_SPEEDS_INTRA, SM100_SPEEDS_INTER),
)


def nvlink_bw_GBps(compute_capability: int, version: NcclVersion = DEFAULT) -> float:
    """``ncclTopoNVLinkBw``: one NVLink's bandwidth for a GPU generation (0 for GPUs without NVLink)."""
    cc = compute_capability
    if cc >= 100 and version >= (2, 25):
        return NVLINK_BW_GBPS[100] if version >= (2, 27, 5) else 40.0
    if cc >= 90:  # Blackwell before 2.25 is read as Hopper
        return NVLINK_BW_GBPS[90]
    if cc in (86, 89):
        return NVLINK_BW_GBPS[cc]
    return NVLINK_BW_GBPS[80 if cc >= 80 else 70]


def _speeds(cc: int, net: bool, version: NcclVersion = DEFAULT) -> tuple[float, ...]:
    if cc >= 100 and version >= (2, 25):
        lists = [(intra, inter) for since, intra, inter in SM100_SPEEDS_BY_VERSION if version >= since]
        intra, inter = lists[-1]
        return inter if net else intra
    if cc >= 90:
        return SM90_SPEEDS_INTER if net else (SM90_SPEEDS_INTRA_221 if version >= (2, 21) else SM90_SPEEDS_INTRA)
    return SPEEDS_INTER if net else SPEEDS_INTRA


@dataclass(frozen=True)
class NodeLinks:
    """One NCCL node (an NVLink domain) as capacities, GB/s per direction."""

    gpus: int  # GPUs of the communicator in this node
    nvlink_GBps: float  # one GPU's NVLink bandwidth in all (0: none)
    intra: str
    gpu_pcie_GBps: float
    nics: int  # NICs the communicator's GPUs use (0 on one node)
    nic_path_GBps: float  # GPU -> NIC path: min(GPU PCIe, NIC PCIe, port speed)
    socket_GBps: float | None  # inter-socket link a PCIe ring crosses (None: one socket or NVLink)
    intel_cpu: bool  # peer-to-peer through an Intel CPU: NCCL's INTEL_P2P_OVERHEAD applies

    @property
    def pcie_ring_GBps(self) -> float:
        """What one PCIe ring channel may carry: a GPU's link (less Intel's P2P overhead) or the sockets'."""
        bw = self.gpu_pcie_GBps / (INTEL_P2P_OVERHEAD if self.intel_cpu else 1.0)
        return min(bw, self.socket_GBps) if self.socket_GBps else bw


def packs_evenly(cluster: Cluster, ranks: int) -> bool:
    """Whether ``ranks`` packed onto ``cluster`` fill whole NVLink domains (or fit in one): the groups
    :func:`node_links` can describe as NCCL's nodes."""
    fabric = cluster.gpu_fabric
    domain = (fabric.nvlink_domain if fabric is not None else None) or cluster.devices_per_node
    return 1 <= ranks <= cluster.world_size and (ranks <= domain or ranks % domain == 0)


def node_links(cluster: Cluster, ranks: int, version: NcclVersion = DEFAULT) -> tuple[NodeLinks, int]:
    """The NCCL node of ``ranks`` packed onto ``cluster`` and the number of such nodes."""
    fabric = _fabric(cluster)
    per_node = cluster.devices_per_node
    domain = fabric.nvlink_domain or per_node
    if domain % per_node:
        raise InputError("cluster.gpu_fabric.nvlink_domain", domain, f"a multiple of devices_per_node ({per_node})")
    if ranks > cluster.world_size:
        raise InputError("ranks", ranks, f"at most the cluster's {cluster.world_size}")
    gpus = min(ranks, domain)
    nodes = math.ceil(ranks / domain)
    if ranks % gpus:
        raise InputError("ranks", ranks, f"a multiple of the {gpus} GPUs of an NVLink domain, or fewer")
    # a domain of several servers has all their NICs; a communicator using part of a node uses the share of
    # the NICs nearest its GPUs (at least one)
    domain_nics = (cluster.nics_per_node or 1) * (domain // per_node)
    nics = 0 if nodes == 1 else max(1, round(domain_nics * gpus / domain))
    port_GBps = cluster.inter_link.bandwidth_Bps * 8 / 1e6 / 8000  # NCCL: mbps / 8000
    nic_path = min(fabric.gpu_pcie_GBps, fabric.nic_pcie_GBps, port_GBps)
    nvlink = (fabric.nvlinks_per_gpu * nvlink_bw_GBps(fabric.compute_capability, version)
              if fabric.intra != "pcie" else 0.0)
    socket = SOCKET_BW_GBPS[fabric.cpu] if fabric.intra == "pcie" and fabric.sockets > 1 and gpus > 1 else None
    links = NodeLinks(gpus, nvlink, fabric.intra, fabric.gpu_pcie_GBps, nics, nic_path, socket,
                      fabric.cpu == "intel" and fabric.pcie_p2p)
    return links, nodes


def _fabric(cluster: Cluster) -> GpuFabric:
    if cluster.gpu_fabric is None:
        raise InputError("cluster.gpu_fabric", None, "a gpu_fabric section (compute_capability, intra, "
                         "nvlinks_per_gpu, pcie, ...) for the NCCL-grade model; see docs/cost-model.md")
    return cluster.gpu_fabric


# --- capacity checks --------------------------------------------------------------------------------


def ring_channels(node: NodeLinks, speed: float, net: bool, max_channels: int) -> int:
    """Most ring channels of ``speed`` GB/s the node carries (0: none)."""
    g = node.gpus
    limit = max_channels
    if net:
        # each channel enters through one NIC and leaves through one (the same rail)
        limit = min(limit, node.nics * int(node.nic_path_GBps // speed) if speed <= node.nic_path_GBps else 0)
    if g > 1:
        if node.intra == "pcie":
            per_channel = int(node.pcie_ring_GBps // speed) if speed <= node.pcie_ring_GBps else 0
            limit = min(limit, per_channel)
        else:
            # a GPU sends on NVLink for every channel it does not hand to a NIC; on a mesh a channel's hop is
            # one link (approximation: the mesh's links are counted as one pool per GPU)
            link = nvlink_bw_GBps_of(node) if node.intra == "nvlink-mesh" else node.nvlink_GBps
            if speed > link:
                return 0
            fits = int(node.nvlink_GBps // speed + 1e-9)
            if net:  # per GPU ceil(c (g-1) / g) channels leave over NVLink
                c = limit
                while c > 0 and math.ceil(c * (g - 1) / g) > fits:
                    c -= 1
                limit = c
            else:
                limit = min(limit, fits)
    return max(limit, 0)


def nvlink_bw_GBps_of(node: NodeLinks) -> float:
    """One NVLink of this node (a mesh channel's hop rides one link)."""
    return node.nvlink_GBps / max(1, round(node.nvlink_GBps / 20.0)) if node.nvlink_GBps else 0.0


def nvls_channels(node: NodeLinks, speed_intra: float, speed_inter: float, net: bool, max_channels: int) -> int:
    """NVLS channels: every GPU sends and receives ``speed_intra`` per channel through the NVSwitch, the
    channel's head twice (``ncclTopoSearchTryNvls``); with other nodes each head also uses a NIC."""
    c = min(max_channels, node.gpus)
    while c > 0 and (c + 1) * speed_intra > node.nvlink_GBps + 1e-9:
        c -= 1
    if net:
        c = min(c, node.nics * int(node.nic_path_GBps // speed_inter) if speed_inter <= node.nic_path_GBps else 0)
    return c


# --- the search's passes ----------------------------------------------------------------------------


@dataclass
class _Found:
    channels: int
    bw_intra: float
    bw_inter: float


def _max_bw(node: NodeLinks, net: bool) -> float:
    """``system->maxBw``: the best path bandwidth from a GPU to a NIC (or to another GPU)."""
    if net:
        return node.nic_path_GBps
    if node.gpus == 1:
        return 5000.0  # LOC_BW
    if node.intra == "pcie":
        return node.gpu_pcie_GBps
    return node.nvlink_GBps if node.intra == "nvswitch" else 2 * nvlink_bw_GBps_of(node)


def _total_bw(node: NodeLinks) -> float:
    """``system->totalBw``: a GPU's NVLink bandwidth in all, or its PCIe link."""
    return max(node.nvlink_GBps, node.gpu_pcie_GBps)


def _start(speeds: tuple[float, ...], node: NodeLinks, net: bool, pattern_ring: bool) -> int:
    """The first speed tried: at most ``maxBw`` and, one channel, at most ``totalBw`` (scaled by g/(g-1)
    for one GPU or a non-ring pattern, as the source's local copy is)."""
    total = _total_bw(node)
    if node.gpus == 1 or not pattern_ring:
        total = math.inf if node.gpus == 1 else total * node.gpus / (node.gpus - 1)
    i = 0
    while (speeds[i] > _max_bw(node, net) or speeds[i] > total) and i < len(speeds) - 1:
        i += 1
    return i


def _pass1(speeds: tuple[float, ...], start: int, channels_at: Callable[[float], int],
           better: Callable[[int, float, _Found | None], bool], max_channels: int, total_bw: float,
           min_channels: int = 1) -> _Found | None:
    """Pass 1 of ``ncclTopoCompute``: from ``start``, slower speeds while they stay above 0.49 of the best
    found; stop once a graph reaches ``max_channels`` or ``channels x bwInter >= system->totalBw``."""
    i, best = start, None
    while True:
        s = speeds[i]
        c = channels_at(s)
        if c >= min_channels and better(c, s, best):
            best = _Found(c, s, s)
        if best is not None and (best.channels == max_channels or best.channels * best.bw_inter >= total_bw):
            return best
        if i < len(speeds) - 1 and (best is None or speeds[i + 1] / best.bw_inter > .49):
            i += 1
            continue
        return best


def _faster(speeds: tuple[float, ...], bw: float) -> list[float]:
    """Pass 2's candidates: the listed speeds above ``bw``, slowest first."""
    return sorted(s for s in speeds if s > bw)


def search_ring(node: NodeLinks, cc: int, net: bool, version: NcclVersion = DEFAULT) -> Graph | None:
    """The ring graph (``NCCL_TOPO_PATTERN_RING``), pass 1, channel duplication and pass 2."""
    speeds = _speeds(cc, net, version)
    max_ch = max_channels(version) // 2
    best = _pass1(speeds, _start(speeds, node, net, True), lambda s: ring_channels(node, s, net, max_ch),
                  lambda c, s, b: b is None or c * s > b.channels * b.bw_intra, max_ch, _total_bw(node))
    if best is None:
        return None
    _dup_channels(best, cc, max_ch)
    for s in _faster(speeds, best.bw_inter):  # pass 2: faster speeds with at least as many channels
        c = ring_channels(node, s, net, max_ch)
        if c >= best.channels and c * s > best.channels * best.bw_intra:
            best = _Found(c, s, s)
    return Graph(best.channels, best.bw_intra, best.bw_inter, intra="pci" if node.intra == "pcie" else "nvlink",
                 ll128_path=node.intra != "pcie")


def _dup_channels(found: _Found, cc: int, max_channels: int) -> None:
    """``ncclTopoDupChannels``: fast channels are split in two (same links, half the speed each)."""
    if found.bw_intra < 25.0 or (cc > 80 and found.bw_intra < 50.0 and found.channels > 4):
        return
    dup = min(found.channels * 2, max_channels)
    div = math.ceil(dup / found.channels)
    found.bw_intra /= div
    found.bw_inter /= div
    found.channels = dup


def search_tree(node: NodeLinks, cc: int, net: bool, ring: Graph, version: NcclVersion = DEFAULT) -> Graph:
    """The tree graph: the ring's channels and speed, then pass 2 raises the intra speed (NVLink or PCIe
    inside the node) one listed step at a time while it is below twice the inter speed and the node's links
    carry that many channels at it; the NICs stay at the inter speed."""
    speeds = _speeds(cc, net, version)
    bw_intra = ring.bw_intra_GBps
    for s in _faster(speeds, bw_intra):
        if bw_intra >= 2 * ring.bw_inter_GBps or ring_channels(node, s, False, ring.channels) < ring.channels:
            break
        bw_intra = s
    return Graph(ring.channels, bw_intra, ring.bw_inter_GBps, intra=ring.intra, ll128_path=ring.ll128_path,
                 latency_inter_us=ring.latency_inter_us)


def search_nvls(node: NodeLinks, cc: int, net: bool, version: NcclVersion = DEFAULT) -> Graph | None:
    """The NVLS graph: channels are head GPUs pulling through the NVSwitch's multicast (``PATTERN_NVLS``);
    more channels win, then more channels x bwInter."""
    if node.intra != "nvswitch" or cc < 90 or node.gpus < 2:
        return None
    speeds = _speeds(cc, net, version)
    max_ch = min(node.gpus, nvls_arity(version)) if version >= (2, 25) else node.gpus
    best = _pass1(speeds, _start(speeds, node, net, False), lambda s: nvls_channels(node, s, s, net, max_ch),
                  lambda c, s, b: b is None or c > b.channels or c * s > b.channels * b.bw_inter, max_ch,
                  _total_bw(node), min_channels=1 if net else max_ch)  # one node: every head pulls evenly
    if best is None:
        return None
    # pass 2: the same channels with a faster inter speed while it stays below twice the intra speed
    for s in _faster(speeds, best.bw_inter):
        fits = nvls_channels(node, best.bw_intra, s, net, best.channels)
        if best.bw_inter >= best.bw_intra * 2 or fits < best.channels:
            break
        best.bw_inter = s
    return Graph(best.channels, best.bw_intra, best.bw_inter, intra="nvlink")


def fabric_version(cluster: Cluster) -> NcclVersion:
    """The release a cluster names (``gpu_fabric.nccl_version``), else the newest modelled of its library."""
    fabric = _fabric(cluster)
    if fabric.nccl_version:
        return parse_version(fabric.nccl_version, "cluster.gpu_fabric.nccl_version")
    return RCCL_DEFAULT if fabric.library == "rccl" else DEFAULT


def call_version(cluster: Cluster, version: str | NcclVersion | None) -> NcclVersion:
    """The release a call is priced with: the one given (a log's header), else the cluster's."""
    if version is None:
        return fabric_version(cluster)
    return version if isinstance(version, NcclVersion) else parse_version(version)


def nccl_system(cluster: Cluster, ranks: int, version: NcclVersion | None = None,
                plugin_latency: bool = True) -> NcclSystem:
    """What the tuner sees for ``ranks`` on ``cluster``: ranks, nodes (NVLink domains), the searched graphs
    and the release (``version``, else the cluster's). ``plugin_latency``: the net plugin's reported
    latency in the graphs, as NCCL's tuner sees it (False: the system whose latencies are times).

    CollNet graphs are given the ring's channels and speeds: NCCL searches them with the ring's channel
    count as both minimum and maximum, and on the symmetric nodes described here their links are a subset
    of the ring's (an approximation where they are not)."""
    from dataclasses import replace


    fabric = _fabric(cluster)
    version = version or fabric_version(cluster)
    node, nodes = node_links(cluster, ranks, version)
    net = nodes > 1
    cc = fabric.compute_capability
    ring = search_ring(node, cc, net, version)
    if ring is None:
        raise InputError("cluster", cluster.name, "a node whose links carry at least one NCCL ring channel")
    ring = replace(ring, latency_inter_us=plugin_latency_us(fabric) if net and plugin_latency else 0.0)
    graphs = {"ring": ring, "tree": search_tree(node, cc, net, ring, version)}
    domain = fabric.nvlink_domain or cluster.devices_per_node
    mnnvl = domain > cluster.devices_per_node
    nvls = search_nvls(node, cc, net, version) if fabric.nvls else None
    if nvls is not None:
        graphs["nvls"] = replace(nvls, latency_inter_us=ring.latency_inter_us)
        if net:
            graphs["nvls_tree"] = graphs["nvls"]
    if fabric.collnet and net:
        graphs["collnet_direct"] = graphs["collnet_chain"] = graphs["tree"]
    return NcclSystem(ranks=ranks, nodes=nodes, compute_capability=cc, graphs=graphs,
                      cpu_vendor="intel" if fabric.cpu == "intel" else "amd" if fabric.cpu == "amd" else "other",
                      mnnvl=mnnvl and nodes == 1, collnet=fabric.collnet and net,
                      nvswitch=fabric.intra == "nvswitch", version=version, x86=fabric.cpu != "arm")
