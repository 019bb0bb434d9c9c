"""AMD's RCCL on Instinct MI300X / MI325X / MI350X nodes: its own tuning models, xGMI rings, its runtime.

RCCL is NCCL's code with AMD's tuner and topology (``ROCm/rccl``). What differs, and is modelled here:

* **Tuner** (``src/graph/tuning.cc``): base latencies 12 / 12 / 17 us (LL, LL128, Simple), and per platform a
  *tuning model* (``tuning_model_N``) of per-step latencies, bandwidth ratios and per-size correction factors;
  an 8-GPU MI300X-class node uses model 5 (``rome_models.cc``: ``tuning=5`` on the 8-GPU xGMI models
  79/81/84). NCCL's llMaxBw and per-channel caps are not applied on AMD. Values: RCCL 2.21.5 (ROCm 6.3,
  develop 0cbce2a7, tuning.cc L224-252) and 2.20.5 (tag rocm-6.2.2, L224-252), chosen by the cluster's
  ``nccl_version`` or the version a log states (RCCL numbers its releases as NCCL's). The time uses the
  chosen cell's latency and bandwidth as NCCL's model does; the per-size correction factors (down to 0.1)
  only steer the choice. Across nodes the model's network latencies are large (320 us a ring/Simple step
  in 2.21.5) and only runs of 1 GiB and more check them.
* **Topology**: every GPU pair has one xGMI link, counted at 48 GB/s per direction for gfx94x and gfx95x
  (``GFX94X_XGMI_WIDTH``, ``src/graph/topo.h`` @ 0cbce2a7 L31-33), so a GPU's ``totalBw`` is links x 48;
  rings come from fixed templates (``rome_model_79``: 28 rings on one node, 56 channels after doubling;
  ``rome_model_81``: 64 rail rings with 8 NICs), whose channels carry ``totalBw`` together
  (``rome_models.cc`` L1228-1229). Across nodes a ring also crosses the node's NICs: its bus bandwidth is
  at most their sum.
* **Runtime** (``enqueue.cc getChannnelThreadInfo`` @ 0cbce2a7 L1657-1687): 256 threads a block always;
  channels dropped while ``bytes < channels x 256 x threshold`` (8 nRanks for LL, 8 for LL128, 64 for
  Simple); bandwidth scales with the channels launched.

Not modelled, and said so in every row it applies to: the MSCCL "allpairs" kernels RCCL runs instead of its
ring for an 8-GPU one-node allreduce from 1 KiB to 16 MiB (on by default on that platform; RCCL 2.20 only
with one process per GPU), priced here as the ring would run; MSCCL++ (CUDA-graph capture only).
"""

from __future__ import annotations

from dataclasses import dataclass

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.collective_libraries import transports
from flexcomm.costmodel.collective_libraries.algorithms import P2P, TUNED, parse_nccl_algorithm
from flexcomm.costmodel.collective_libraries.runtime import Execution, split_bandwidth
from flexcomm.costmodel.collective_libraries.topology import call_version
from flexcomm.costmodel.collective_libraries.tuner import PROTOCOLS, _log2i, parse_list, steps
from flexcomm.costmodel.collective_libraries.versions import NcclVersion
from flexcomm.costmodel.errors import InputError

#: ``baseLat`` (us) per algorithm (tuning.cc @ 0cbce2a7 L57-60).
BASE_LAT_US = {"tree": (12.0, 12.0, 17.0), "ring": (12.0, 12.0, 17.0)}
#: xGMI link bandwidth RCCL counts for gfx90a / gfx94x / gfx95x (topo.h @ 0cbce2a7 L31-33, L257-265).
XGMI_GBPS = {"gfx90a": 36.0, "gfx942": 48.0, "gfx950": 48.0}
THREADS = 256
THRESHOLD = {"ll": 8, "ll128": 8, "simple": 64}
MSCCL_RANGE = (1024, 16 << 20)  # allpairs allreduce XMLs, 8 ranks (tools/msccl-algorithms @ 0cbce2a7)


@dataclass(frozen=True)
class TuningModel:
    """One ``tuning_model_N``: per-step latencies, bandwidth ratios and correction factors (LL, LL128, Simple)."""

    hw_lat: dict[str, dict[str, tuple[float, float, float]]]  # hw -> algorithm -> per protocol
    bw_ratio: tuple[dict[str, tuple[float, float, float]], dict[str, tuple[float, float, float]]]  # <=2 / >2 nodes
    tree_cf: dict[str, tuple[float, ...]]
    ring_cf: dict[str, tuple[float, ...]]


def _cf(*parts: tuple[float, int]) -> tuple[float, ...]:
    """A 27-entry correction list from (value, repeat) runs, as the source writes them."""
    values = tuple(v for value, count in parts for v in [value] * count)
    assert len(values) == 27, len(values)
    return values


ZERO = _cf((0.0, 27))
#: tuning_model_5 as RCCL 2.21.5 has it (tuning.cc @ 0cbce2a7 L224-252).
MODEL5_221 = TuningModel(
    hw_lat={"nvlink": {"tree": (0.9, 0.0, 2.3), "ring": (0.8, 0.0, 2.1)},
            "pci": {"tree": (2.2, 2.2, 5.7), "ring": (2.2, 2.2, 5.7)},
            "net": {"tree": (10.5, 0.0, 25.0), "ring": (9.5, 0.0, 320.0)}},
    bw_ratio=({"tree": (0.06, 0.0, 0.11), "ring": (0.08, 0.0, 1.0)},
              {"tree": (0.06, 0.0, 0.59), "ring": (0.08, 0.0, 1.0)}),
    tree_cf={"ll": _cf((0.1, 6), (1.0, 5), (0.6, 1), (1.0, 1), (0.9, 1), (1.0, 2), (0.1, 11)), "ll128": ZERO,
             "simple": _cf((0.1, 15), (0.7, 1), (1.0, 10), (0.8, 1))},
    ring_cf={"ll": _cf((0.1, 11), (1.0, 1), (0.2, 1), (1.0, 1), (0.4, 2), (0.1, 1), (0.2, 2), (0.1, 8)),
             "ll128": ZERO, "simple": _cf((0.1, 23), (0.8, 1), (1.0, 3))},
)
#: tuning_model_5 as RCCL 2.20.5 has it (tuning.cc @ rocm-6.2.2 L224-252).
MODEL5_220 = TuningModel(
    hw_lat={"nvlink": {"tree": (0.8, 0.0, 2.5), "ring": (0.8, 0.0, 3.6)},
            "pci": {"tree": (2.2, 2.2, 5.7), "ring": (2.2, 2.2, 5.7)},
            "net": {"tree": (12.5, 0.0, 22.4), "ring": (9.5, 0.0, 19.8)}},
    bw_ratio=({"tree": (0.41, 0.0, 1.0), "ring": (0.41, 0.0, 1.0)},
              {"tree": (0.41, 0.0, 0.86), "ring": (0.41, 0.0, 1.0)}),
    tree_cf={"ll": _cf((0.1, 5), (1.0, 2), (0.8, 1), (0.1, 1), (0.4, 1), (0.5, 1), (1.0, 1), (0.6, 1), (0.4, 1),
                       (0.6, 1), (0.1, 1), (0.3, 1), (0.4, 2), (0.3, 1), (0.2, 7)), "ll128": ZERO,
             "simple": _cf((0.1, 8), (1.0, 3), (0.4, 1), (1.0, 3), (0.2, 1), (0.7, 1), (1.0, 3), (0.8, 1), (0.7, 2),
                           (0.8, 3), (0.9, 1))},
    ring_cf={"ll": _cf((0.1, 7), (1.0, 1), (0.1, 1), (0.2, 2), (0.1, 1), (0.5, 1), (0.8, 1), (1.0, 1), (0.2, 1),
                       (0.4, 1), (0.5, 1), (0.4, 2), (0.3, 1), (0.2, 6)), "ll128": ZERO,
             "simple": _cf((0.1, 9), (0.7, 1), (0.1, 5), (1.0, 3), (0.9, 1), (1.0, 8))},
)


@dataclass(frozen=True)
class RcclNode:
    """An RCCL communicator: ranks, nodes, the rings' channels and their bus bandwidth (GB/s)."""

    ranks: int
    nodes: int
    arch: str
    graph_channels: int  # channels of the ring template (the tuner's)
    comm_channels: int  # channels a call starts from (the template's, doubled where it fits)
    bus_GBps: float  # what the rings carry together (totalBw; the NICs' sum across nodes, if lower)
    version: NcclVersion


def rccl_node(cluster: Cluster, ranks: int, version: NcclVersion) -> RcclNode:
    """The ring template RCCL matches on an xGMI node: 28 rings (56 channels) on one node, 64 rail rings
    across nodes with NICs (``rome_model_79`` / ``rome_model_81``); fewer GPUs: 32 (2) or 24 (4) channels
    (README.md @ 0cbce2a7 L203)."""
    fabric = cluster.gpu_fabric
    assert fabric is not None and fabric.gcn_arch is not None
    per_node = cluster.devices_per_node
    if ranks > cluster.world_size:
        raise InputError("ranks", ranks, f"at most the cluster's {cluster.world_size}")
    gpus = min(ranks, per_node)
    if ranks % gpus:
        raise InputError("ranks", ranks, f"a multiple of the node's {per_node} GPUs, or fewer")
    nodes = ranks // gpus
    links = fabric.xgmi_links_per_gpu if fabric.intra == "xgmi" else 0
    total = links * XGMI_GBPS[fabric.gcn_arch] if links else fabric.gpu_pcie_GBps
    if nodes == 1:
        graph, comm = {2: (16, 32), 4: (12, 24)}.get(gpus, (28, 56))
    else:
        graph = comm = 64
    bus = total
    if nodes > 1:
        nic_GBps = min(cluster.inter_link.bandwidth_Bps / 1e9, fabric.nic_pcie_GBps)
        bus = min(bus, (cluster.nics_per_node or 1) * nic_GBps)
    return RcclNode(ranks, nodes, fabric.gcn_arch, graph, comm, bus, version)


def _model(version: NcclVersion) -> TuningModel:
    return MODEL5_221 if version >= (2, 21) else MODEL5_220


def _cell(node: RcclNode, collective: str, algorithm: str, protocol: str, model: TuningModel,
          ll128: bool) -> tuple[float, float] | None:
    """(latency us, algorithm bandwidth GB/s) of one enabled cell, None where RCCL does not run it."""
    p = PROTOCOLS.index(protocol)
    if algorithm == "tree" and collective != "allreduce":
        return None
    if algorithm == "tree" and protocol == "simple" and node.nodes == 1 and node.arch in ("gfx942", "gfx950"):
        return None  # "no Tree/Simple on one gfx94 node" (tuning.cc @ 0cbce2a7 L364-370)
    if protocol == "ll128" and not ll128:
        return None
    ratio = model.bw_ratio[0 if node.nodes <= 2 else 1][algorithm][p]
    bus = node.bus_GBps * ratio
    if bus <= 0:
        return None
    nsteps, inter_steps = steps(collective, node.ranks, node.nodes, node.version)
    if (algorithm == "ring" and protocol == "ll" and collective in ("broadcast", "reduce") and node.nodes == 1
            and node.arch in ("gfx942", "gfx950")):
        bus *= 1.65
    algbw = bus * (node.ranks / nsteps if algorithm == "ring" else 0.5)
    intra = model.hw_lat["nvlink"][algorithm][p]
    inter = model.hw_lat["net"][algorithm][p]
    latency = BASE_LAT_US[algorithm][p]
    if algorithm == "ring":
        if collective in ("broadcast", "reduce"):
            latency += nsteps * (model.hw_lat["nvlink" if node.nodes == 1 else "net"]["tree" if p == 2 else "ring"][p])
        else:
            overhead = (2.0 * (3 if protocol == "simple" else 1)) if node.nodes > 1 else 0.0  # AMD CPU net overhead
            latency += (nsteps - inter_steps) * max(intra, overhead) + inter_steps * inter
    else:
        latency += 2 * ((node.ranks // node.nodes - 1) * intra + _log2i(node.nodes) * inter)
    return latency, algbw


def _corrected(model: TuningModel, node: RcclNode, algorithm: str, protocol: str, nbytes: float) -> float:
    index = min(_log2i(int(nbytes) >> 6), 26)
    if algorithm == "tree":
        return model.tree_cf[protocol][index]
    return model.ring_cf[protocol][index] if node.nodes > 1 else 1.0


def explain(cluster: Cluster, collective: str, size_bytes: float, ranks: int, algorithm: str = "nccl",
            env: dict[str, str] | None = None, gpus_per_process: int = 1,
            version: str | NcclVersion | None = None) -> Execution:
    """One RCCL call of nccl-tests ``size`` bytes: the tuner's choice (corrections applied), then its time."""
    fabric = cluster.gpu_fabric
    assert fabric is not None
    release = call_version(cluster, version)
    algo_env, proto_env = parse_nccl_algorithm(algorithm)
    env = env or {}
    algo_env = algo_env or env.get("NCCL_ALGO")
    proto_env = proto_env or env.get("NCCL_PROTO")
    if collective in P2P or collective not in TUNED:
        raise InputError("collective", collective, "a collective RCCL's tuner prices: " + ", ".join(TUNED))
    node = rccl_node(cluster, int(ranks), release)
    host_us = gpus_per_process * transports.host_launch_us_per_gpu()
    if ranks < 2:
        return Execution.alone("rccl", release, collective, size_bytes, ranks)
    algos = parse_list(algo_env, ("tree", "ring"), "NCCL_ALGO") if algo_env else {"tree", "ring"}
    protos = parse_list(proto_env, PROTOCOLS, "NCCL_PROTO")
    model = _model(release)
    ll128 = fabric.gcn_arch == "gfx90a" or (release >= (2, 22) and node.nodes > 1)
    best: tuple[float, str, str, float, float] | None = None
    for name in ("tree", "ring"):
        for protocol in PROTOCOLS:
            if name not in algos or protocol not in protos:
                continue
            cell = _cell(node, collective, name, protocol, model, ll128)
            if cell is None:
                continue
            latency, bw = cell
            factor = _corrected(model, node, name, protocol, size_bytes)
            if factor <= 0:
                continue
            chosen_time = latency + size_bytes / (1000 * bw * factor)
            if best is None or chosen_time < best[0]:
                best = (chosen_time, name, protocol, latency, bw)
    if best is None:
        forced = ("NCCL_ALGO", algo_env) if algo_env else ("NCCL_PROTO", proto_env)
        raise InputError(forced[0], forced[1], f"an algorithm and protocol RCCL runs for {collective} on "
                         f"{fabric.gcn_arch} (ring or tree; LL or Simple, LL128 only where RCCL enables it)")
    _, name, protocol, latency_us, bw = best
    channels = node.comm_channels
    threshold = THRESHOLD[protocol] * (node.ranks if (name, protocol) == ("ring", "ll") else 1)
    while size_bytes < channels * THREADS * threshold and channels >= 2:
        channels -= 1
    share = min(1.0, channels / node.comm_channels)
    bandwidth_us = size_bytes / (1000 * bw * share)
    hops = 0
    if node.nodes > 1:
        hops = steps(collective, node.ranks, node.nodes, release)[1] if name == "ring" else 2 * _log2i(node.nodes)
        latency_us += hops * transports.extra_latency_us(cluster)
    gpu_us = latency_us + bandwidth_us
    msccl = (node.nodes == 1 and node.ranks == 8 and collective == "allreduce" and name == "ring"
             and MSCCL_RANGE[0] <= size_bytes <= MSCCL_RANGE[1] and (release >= (2, 21) or gpus_per_process <= 1))
    note = ("msccl not modelled: RCCL runs this call with MSCCL's allpairs kernels (8 ranks, one node, 1 KiB to "
            "16 MiB); priced as its ring") if msccl else ""
    return Execution("rccl", str(release), collective, float(size_bytes), int(ranks), node.nodes, name, protocol,
                     channels, node.comm_channels, THREADS, int(min(size_bytes / channels, 2 << 20)),
                     steps(collective, node.ranks, node.nodes, release)[0], max(0.0, host_us - gpu_us) * 1e-6,
                     latency_us * 1e-6, 0.0, bandwidth_us * 1e-6, host_us * 1e-6, note, network_steps=float(hops),
                     **split_bandwidth(bandwidth_us * 1e-6, node.nodes > 1))
