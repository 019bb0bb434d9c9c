"""NCCL's own cost model: latency and bandwidth per (collective, algorithm, protocol) and its choice per size.

NCCL picks an algorithm (ring, tree, CollNet direct/chain, NVLS, NVLS-tree) and a protocol (LL, LL128,
Simple) for every call by the minimum of ``latency + bytes / bandwidth`` over a table it computes at
start-up (``ncclTopoTuneModel``) and refines per call (``ncclTopoGetAlgoTime``), both in
``src/graph/tuning.cc``. This module is that model, re-derived in Python from the public source
(``NVIDIA/nccl`` at commit b6475625, the NCCL 2.19/2.20 generation with NVLS): every constant below is
a value of that file, named as it is named there, and nothing is fitted to measurements.

Its inputs are what NCCL's topology search (``src/graph/search.cc``) hands the tuner, per algorithm:
the number of channels, the per-channel bandwidth inside a node and across nodes (GB/s), whether the
intra-node path is NVLink or PCI, and the extra network latency. :class:`Graph` holds them; producing
them from a cluster description is the topology search's job, not this module's.

Units follow the source: latencies in microseconds, bandwidths in GB/s (1e9 bytes/s), time in us.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from flexcomm.costmodel.errors import InputError

ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree")
PROTOCOLS = ("ll", "ll128", "simple")
#: NCCL's names, as NCCL_ALGO / NCCL_PROTO and its logs spell them.
NCCL_NAMES = {"tree": "Tree", "ring": "Ring", "collnet_direct": "CollnetDirect", "collnet_chain": "CollnetChain",
              "nvls": "NVLS", "nvls_tree": "NVLSTree", "ll": "LL", "ll128": "LL128", "simple": "Simple"}
COLLECTIVES = ("broadcast", "reduce", "allgather", "reduce-scatter", "allreduce")

#: ``baseLat`` (us) per algorithm and protocol (LL, LL128, Simple).
BASE_LAT_US: dict[str, tuple[float, float, float]] = {
    "tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0.0, 0.0, 0.0),
    "collnet_chain": (0.0, 0.0, 0.0), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0),
}
#: ``hwLat`` (us) per hardware (NVLink, PCI, network), algorithm and protocol.
HW_LAT_US: dict[str, dict[str, tuple[float, float, float]]] = {
    "nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0.0, 0.0, 3.7),
               "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, 23.0), "nvls_tree": (0.0, 0.0, 23.0)},
    "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0.0, 0.0, 3.7),
            "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0.0, 0.0, 31.0),
            "collnet_chain": (0.0, 0.0, 30.0), "nvls": (0.0, 0.0, 18.0), "nvls_tree": (0.0, 0.0, 14.0)},
}
#: ``llMaxBws`` (GB/s): rows Volta/Intel, Ampere/AMD, Hopper/AMD; columns 1 node, 2 nodes, more.
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0))
#: ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``, ``perChMaxTreeBws`` (GB/s per channel), arch x nodes.
PER_CH_MAX_RING_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))
PER_CH_MAX_TREE_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
PER_CH_MAX_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
#: ``treeCorrectionFactor`` per protocol, for log2(bytes / 64) = 0..22 (64 B to 256 MiB).
TREE_CORRECTION = {
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
#: ``getNetOverhead`` (us) by CPU vendor: Intel 1, AMD 2, others 1 (``NCCL_NET_OVERHEAD`` overrides).
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}


@dataclass(frozen=True)
class Graph:
    """What NCCL's topology search found for one algorithm (``struct ncclTopoGraph``'s fields it tunes on)."""

    channels: int
    bw_intra_GBps: float
    bw_inter_GBps: float
    intra: Literal["nvlink", "pci"] = "nvlink"
    latency_inter_us: float = 0.0
    tree_pattern: bool = False  # NCCL_TOPO_PATTERN_TREE: its tree bandwidth is discounted by 0.85
    ll128_path: bool = True  # typeInter <= PXB (or PXN on Hopper) and typeIntra <= NVB: LL128 allowed

    def __post_init__(self) -> None:
        if isinstance(self.channels, bool) or not isinstance(self.channels, int) or self.channels < 1:
            raise InputError("channels", self.channels, "an integer >= 1")
        for name in ("bw_intra_GBps", "bw_inter_GBps", "latency_inter_us"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(name, value, "a finite number >= 0")


@dataclass(frozen=True)
class NcclSystem:
    """One communicator as the tuner sees it: ranks, nodes, GPU generation and the searched graphs."""

    ranks: int
    nodes: int
    compute_capability: int
    graphs: dict[str, Graph]
    cpu_vendor: Literal["intel", "amd", "other"] = "intel"
    mnnvl: bool = False  # multi-node NVLink: the tuner treats the job as one node
    collnet: bool = False  # CollNet (SHARP) plugin present
    nvswitch: bool = False  # NVSwitches in the node (CollNet direct needs them)
    net_overhead_us: float | None = None
    cuda_runtime: int = 12000

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.nodes < 1 or self.ranks < self.nodes:
            raise InputError("ranks", f"{self.ranks} ranks on {self.nodes} nodes", "ranks >= nodes >= 1")
        if self.compute_capability < 70:
            raise InputError("compute_capability", self.compute_capability, "70 (Volta) or later")
        for name in self.graphs:
            if name not in ALGORITHMS:
                raise InputError("graphs", name, "algorithms among " + ", ".join(ALGORITHMS))
        if "ring" not in self.graphs:
            raise InputError("graphs", sorted(self.graphs), "a ring graph (every NCCL communicator has one)")

    @property
    def tuned_nodes(self) -> int:
        return 1 if self.mnnvl else self.nodes

    @property
    def arch(self) -> int:
        """The source's VOLTA/AMPERE/HOPPER_COMPCAP_IDX (0, 1, 2)."""
        cc = self.compute_capability
        return 2 if cc >= 90 else 1 if cc >= 80 else 0


@dataclass(frozen=True)
class Tuning:
    """One cell of NCCL's table: ``latency_us`` and algorithm bandwidth ``bandwidth_GBps`` (0: not usable)."""

    latency_us: float
    bandwidth_GBps: float


@dataclass
class TuningTable:
    """``comm->latencies`` / ``comm->bandwidths`` for one collective, and the ring backup bandwidths."""

    system: NcclSystem
    collective: str
    cells: dict[tuple[str, str], Tuning] = field(default_factory=dict)
    ring_backup: dict[str, float] = field(default_factory=dict)


def _steps(collective: str, ranks: int, nodes: int) -> tuple[int, int]:
    if collective == "allreduce":
        return 2 * (ranks - 1), (2 * nodes if nodes > 1 else 0)
    if collective in ("reduce-scatter", "allgather"):
        return ranks - 1, nodes - 1
    return ranks, nodes


def _allowed(collective: str, algorithm: str) -> bool:
    if collective in ("broadcast", "reduce"):
        return algorithm == "ring"
    if collective in ("reduce-scatter", "allgather"):
        return algorithm in ("ring", "nvls", "collnet_direct")
    return True


def _log2i(n: int) -> int:
    """NCCL's ``log2i``: floor(log2 n), and 0 for 0 and 1."""
    return max(0, n.bit_length() - 1)


def tune(system: NcclSystem, collective: str, algo_env: str | None = None,
         proto_env: str | None = None) -> TuningTable:
    """The tuner's table for ``collective`` (``ncclTopoTuneModel``), NCCL_ALGO / NCCL_PROTO applied."""
    if collective not in COLLECTIVES:
        raise InputError("collective", collective, "one of " + ", ".join(COLLECTIVES))
    nodes, ranks, arch = system.tuned_nodes, system.ranks, system.arch
    node_idx = nodes - 1 if nodes <= 2 else 2
    ll_max = LL_MAX_BW[arch if nodes == 1 else (1 if system.cpu_vendor == "amd" else 0)][node_idx]
    tree_max = PER_CH_MAX_TREE_BW[arch][node_idx]
    ring_ll128_max = PER_CH_MAX_RING_LL128_BW[arch][node_idx]
    tree_ll128_max = PER_CH_MAX_TREE_LL128_BW[arch][node_idx]
    ppn = ranks / nodes
    nsteps, inter_steps = _steps(collective, ranks, nodes)
    table = TuningTable(system, collective)
    for algorithm in ALGORITHMS:
        graph = system.graphs.get(algorithm)
        if graph is None or not _allowed(collective, algorithm):
            continue
        intra_hw = "nvlink" if graph.intra == "nvlink" else "pci"
        for p, protocol in enumerate(PROTOCOLS):
            if algorithm in ("nvls", "nvls_tree") and protocol != "simple":
                continue
            collnet = algorithm in ("collnet_direct", "collnet_chain")
            bw = graph.bw_intra_GBps if nodes <= 2 or collnet else graph.bw_inter_GBps
            if algorithm == "nvls":
                bw = min(graph.bw_intra_GBps, graph.bw_inter_GBps)
            if algorithm == "nvls_tree":
                bw = min(graph.bw_intra_GBps, graph.bw_inter_GBps if nodes <= 2 else graph.bw_inter_GBps / 2)
            bus = graph.channels * bw
            if algorithm == "ring" and protocol == "ll":
                shared = nodes > 1 or collective in ("allreduce", "reduce")
                bus = min(ll_max, bus * (1 / 4 if shared else 1 / 3))
            if algorithm == "ring" and protocol == "ll128":
                bus = min(bus * (0.7 if ppn < 2 else 0.92), graph.channels * ring_ll128_max)
            if algorithm == "tree":
                bus = min(bus * 0.92, graph.channels * tree_max)
                if protocol == "ll":
                    bus = min(bus / 3.8, ll_max)
                if protocol == "ll128":
                    bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), graph.channels * tree_ll128_max)
                if graph.tree_pattern:
                    bus *= 0.85
            if collnet and protocol != "simple":
                bus = 0.0
            if algorithm == "collnet_direct" and protocol == "simple":
                if collective in ("allgather", "reduce-scatter"):
                    bus = ppn * bw * _collnet_ppn_correction(ppn)
                else:
                    factor = ppn / graph.channels
                    factor -= (factor - 1) / 2
                    bus /= factor
                    if system.compute_capability >= 90:
                        bus *= 0.85
            if not (algorithm == "collnet_direct" and collective in ("allgather", "reduce-scatter")):
                ratio = ranks / nsteps if algorithm == "ring" else 5 / 6 if algorithm in ("nvls", "nvls_tree") else 0.5
                bus *= ratio
            latency = _latency(system, graph, collective, algorithm, p, intra_hw, nsteps, inter_steps)
            table.cells[(algorithm, protocol)] = Tuning(latency, bus)
            if algorithm == "ring":
                table.ring_backup[protocol] = bus
    _enable(table, algo_env, proto_env)
    return table


def _collnet_ppn_correction(ppn: float) -> float:
    """CollNet direct allgather/reduce-scatter: the source interpolates 0.95 (1 GPU/node) to 0.85 (8)."""
    w = (ppn - 1) / (8 - 1)
    return w * 0.85 + (1 - w) * 0.95


def _latency(system: NcclSystem, graph: Graph, collective: str, algorithm: str, p: int, intra_hw: str,
             nsteps: int, inter_steps: int) -> float:
    nodes, ranks = system.tuned_nodes, system.ranks
    latency = BASE_LAT_US[algorithm][p]
    intra = HW_LAT_US[intra_hw][algorithm][p]
    inter = HW_LAT_US["net"][algorithm][p] + graph.latency_inter_us
    if PROTOCOLS[p] == "simple":
        inter += graph.latency_inter_us  # the flush's extra latency
    if algorithm == "ring":
        hw = intra_hw if nodes == 1 else "net"
        lat = HW_LAT_US[hw]["ring"][p]
        if collective in ("reduce", "broadcast"):
            # sameChannels is the search's; without it the source adds nsteps chunk latencies (tree's for Simple)
            if PROTOCOLS[p] == "simple":
                lat = HW_LAT_US[hw]["tree"][p]
            return latency + nsteps * lat
        overhead = 0.0
        if nodes > 1:
            overhead = system.net_overhead_us if system.net_overhead_us is not None else NET_OVERHEAD_US.get(
                system.cpu_vendor, 1.0)
            if PROTOCOLS[p] == "simple":
                overhead *= 3
        intra = max(intra, overhead)
        return latency + (nsteps - inter_steps) * intra + inter_steps * inter
    per_node = ranks // nodes
    if algorithm == "tree":
        return latency + 2 * ((per_node - 1) * intra + _log2i(nodes) * inter)
    if algorithm == "collnet_direct":
        return latency + 2 * (min(1, per_node - 1) * intra + (per_node - 1) * 0.4) + inter
    if algorithm == "collnet_chain":
        return latency + 2 * (per_node - 1) * intra + inter
    if algorithm == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    return latency + intra + 2 * _log2i(nodes) * inter  # nvls_tree


def parse_list(text: str | None, names: tuple[str, ...], field_name: str) -> set[str]:
    """NCCL_ALGO / NCCL_PROTO: a comma list of names (case-insensitive), or ``^list`` for all but those."""
    if text is None:
        return set(names)
    body = text.strip()
    negate = body.startswith("^")
    picked: set[str] = set()
    by_nccl = {NCCL_NAMES[n].lower(): n for n in names}
    for token in filter(None, (t.strip().lower() for t in body.lstrip("^").split(","))):
        if token not in by_nccl:
            raise InputError(field_name, token, "names among " + ", ".join(NCCL_NAMES[n] for n in names)
                             + " (a comma list, ^ to exclude)")
        picked.add(by_nccl[token])
    return set(names) - picked if negate else picked


def _enable(table: TuningTable, algo_env: str | None, proto_env: str | None) -> None:
    system = table.system
    algos = parse_list(algo_env, ALGORITHMS, "NCCL_ALGO")
    protos = parse_list(proto_env, PROTOCOLS, "NCCL_PROTO")
    default_ll128 = proto_env is None
    if system.nodes == 1 or system.mnnvl:
        algos.discard("nvls_tree")
    if not system.collnet:
        algos -= {"collnet_direct", "collnet_chain"}
        if system.nodes > 1 or system.mnnvl:
            algos.discard("nvls")
        if not algos & {"ring", "tree", "nvls", "nvls_tree"}:
            algos |= {"ring", "tree"}  # NCCL_ALGO=CollNet without CollNet: ignored
    elif not system.nvswitch:
        algos.discard("collnet_direct")
    for (algorithm, protocol), cell in list(table.cells.items()):
        on = protocol in protos and algorithm in algos
        if protocol == "ll128" and default_ll128:
            graph = system.graphs[algorithm]
            on = on and graph.ll128_path and system.compute_capability in (70, 80, 90)
            if system.compute_capability == 90 and system.cuda_runtime == 11080:
                on = on and not (table.collective == "allreduce" and algorithm == "ring" and system.ranks == 2)
        if not on:
            table.cells[(algorithm, protocol)] = Tuning(cell.latency_us, 0.0)
    if not any(c.bandwidth_GBps > 0 for c in table.cells.values()):  # at least ring stays available
        for protocol, bw in table.ring_backup.items():
            cell = table.cells[("ring", protocol)]
            table.cells[("ring", protocol)] = Tuning(cell.latency_us, bw)


def algo_time_us(table: TuningTable, algorithm: str, protocol: str, nbytes: float) -> float | None:
    """``ncclTopoGetAlgoTime`` for one call of ``nbytes`` (one pipelined op); None where the cell is off."""
    parts = algo_time_parts_us(table, algorithm, protocol, nbytes)
    return None if parts is None else parts[0] + parts[1]


def algo_time_parts_us(table: TuningTable, algorithm: str, protocol: str, nbytes: float) -> tuple[float, float] | None:
    """The two terms of :func:`algo_time_us`: latency (plateau factor applied) and bytes / bandwidth."""
    cell = table.cells.get((algorithm, protocol))
    if cell is None or cell.bandwidth_GBps == 0:
        return None
    system = table.system
    bw, lat = cell.bandwidth_GBps, cell.latency_us
    log_size = _log2i(int(nbytes) >> 6)
    if algorithm == "tree" and log_size < 23:
        bw *= TREE_CORRECTION[protocol][log_size]
    ring = system.graphs["ring"]
    if (algorithm == "ring" and protocol == "simple" and not system.mnnvl and system.nodes > 1
            and table.collective == "allreduce" and nbytes / (ring.channels * system.ranks) >= 64):
        lat *= 1.9 if system.compute_capability < 80 else 1.4  # "plateau effect of ring"
    return lat, nbytes / (1000 * bw)


@dataclass(frozen=True)
class Choice:
    """What NCCL runs for one call and the time it predicts (seconds)."""

    algorithm: str
    protocol: str
    seconds: float

    @property
    def label(self) -> str:
        return f"{NCCL_NAMES[self.algorithm]}/{NCCL_NAMES[self.protocol]}"


def choose(table: TuningTable, nbytes: float) -> Choice:
    """NCCL's pick for ``nbytes``: the fastest enabled (algorithm, protocol), in the source's scan order."""
    best: Choice | None = None
    for algorithm in ALGORITHMS:
        for protocol in PROTOCOLS:
            t = algo_time_us(table, algorithm, protocol, nbytes)
            if t is not None and (best is None or t * 1e-6 < best.seconds):
                best = Choice(algorithm, protocol, t * 1e-6)
    if best is None:
        raise InputError("NCCL_ALGO", None, f"an algorithm and protocol enabled for {table.collective}")
    return best
