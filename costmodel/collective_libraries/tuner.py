"""NCCL's tuner: latency and bandwidth per (collective, algorithm, protocol) and its choice per size.

NCCL picks an algorithm (ring, tree, CollNet direct/chain, NVLS, NVLS-tree, PAT) and a protocol (LL, LL128,
Simple) for every call by the minimum of ``latency + bytes / bandwidth`` over a table it computes at
start-up (``ncclTopoTuneModel``) and refines per call (``ncclTopoGetAlgoTime``), both in
``src/graph/tuning.cc``. This module is that model, re-derived in Python from the public source
(``NVIDIA/nccl`` tags v2.19.3-1 to v2.30.7-1; :mod:`.versions` holds every constant that changed and the
tag it changed at). Nothing is fitted to measurements.

What it is for: *choosing*. NCCL's own docs and source call this table an estimate used to pick; the time a
call takes is :mod:`.runtime`'s job, which starts from this table's bandwidth and latency and adds what the
tuner leaves out (the channels and threads launched at this size, the pipeline's fill, the host launch).

Its inputs are what NCCL's topology search (``src/graph/search.cc``) hands the tuner, per algorithm: the
number of channels, the per-channel bandwidth inside a node and across nodes (GB/s), whether the intra-node
path is NVLink or PCI, and the network latency the net plugin reports. :class:`Graph` holds them;
producing them from a cluster description is :mod:`.topology`'s job.

Units follow the source: latencies in microseconds, bandwidths in GB/s (1e9 bytes/s), time in us.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from flexcomm.costmodel.collective_libraries import versions as V
from flexcomm.costmodel.collective_libraries.versions import DEFAULT, NcclVersion
from flexcomm.costmodel.errors import InputError

ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
#: NCCL's names, as NCCL_ALGO / NCCL_PROTO and its logs spell them.
NCCL_NAMES = {"tree": "Tree", "ring": "Ring", "collnet_direct": "CollnetDirect", "collnet_chain": "CollnetChain",
              "nvls": "NVLS", "nvls_tree": "NVLSTree", "pat": "PAT", "ll": "LL", "ll128": "LL128",
              "simple": "Simple"}
COLLECTIVES = ("broadcast", "reduce", "allgather", "reduce-scatter", "allreduce")

#: ``treeCorrectionFactor`` per protocol, for log2(bytes / 64) = 0..22 (64 B to 256 MiB); the same in every
#: release modelled (v2.20.3-1 L415-419, v2.30.7-1 L623-627; 2.29.2 adds a 24th entry, 1/1/.9, which only
#: the NVLS-tree correction reads).
TREE_CORRECTION = {
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0,
              1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
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
    latency_inter_us: float = 0.0  # what the net plugin reports (``props->latency``): 0 for NCCL's own IB/sockets
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
    """One communicator as the tuner sees it: ranks, nodes (NVLink domains), GPU generation, the searched
    graphs and the NCCL release."""

    ranks: int
    nodes: int
    compute_capability: int
    graphs: dict[str, Graph]
    cpu_vendor: Literal["intel", "amd", "other"] = "intel"
    mnnvl: bool = False  # one NVLink domain spanning several servers (GB200 NVL72)
    collnet: bool = False  # CollNet (SHARP) plugin present
    nvswitch: bool = False  # NVSwitches in the node (CollNet direct needs them)
    net_overhead_us: float | None = None
    cuda_runtime: int = 12000
    version: NcclVersion = DEFAULT
    x86: bool = True  # CPU architecture (2.30's NVLS-tree size correction applies on x86 Blackwell only)

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
        """``nNodes`` as the tuner reads it: 2.20 prices a multi-node NVLink job as one node; from 2.21 the
        NVLink domains (cliques) are the nodes (v2.20.3-1 L135-136, v2.21.5-1 L135)."""
        return 1 if self.mnnvl and self.version < (2, 21) else self.nodes

    @property
    def ppn(self) -> float:
        return self.ranks / self.tuned_nodes

    @property
    def arch(self) -> int:
        """The source's VOLTA/AMPERE/HOPPER/BLACKWELL_COMPCAP_IDX (0..3)."""
        return V.arch_index(self.version, self.compute_capability)


@dataclass(frozen=True)
class Tuning:
    """One cell of NCCL's table: ``latency_us`` and algorithm bandwidth ``bandwidth_GBps`` (0: not usable);
    ``uncapped_GBps``: the same before the caps on the whole call (``llMaxBw``), which do not shrink with the
    channels a small call launches (the runtime scales this one)."""

    latency_us: float
    bandwidth_GBps: float
    uncapped_GBps: float = 0.0


@dataclass
class TuningTable:
    """``comm->latencies`` / ``comm->bandwidths`` for one collective, and the ring backup bandwidths."""

    system: NcclSystem
    collective: str
    cells: dict[tuple[str, str], Tuning] = field(default_factory=dict)
    ring_backup: dict[str, float] = field(default_factory=dict)


def steps(collective: str, ranks: int, nodes: int, version: NcclVersion = DEFAULT) -> tuple[int, int]:
    """``nsteps`` and ring ``nInterSteps``: inter-node allreduce steps 2 nNodes until 2.22, 2 (nNodes - 1)
    from 2.23 (v2.20.3-1 L159-164, v2.23.4-1 L258)."""
    if collective == "allreduce":
        inter = 0 if nodes == 1 else (2 * (nodes - 1) if version >= (2, 23) else 2 * nodes)
        return 2 * (ranks - 1), inter
    if collective in ("reduce-scatter", "allgather"):
        return ranks - 1, nodes - 1
    return ranks, nodes


def _allowed(collective: str, algorithm: str, version: NcclVersion) -> bool:
    if collective in ("broadcast", "reduce"):
        return algorithm == "ring"
    if collective in ("reduce-scatter", "allgather"):
        return algorithm in ("ring", "nvls", "collnet_direct") or (algorithm == "pat" and V.has_pat(version))
    return algorithm != "pat"


def _log2i(n: int) -> int:
    """NCCL's ``log2i``: floor(log2 n), and 0 for 0 and 1."""
    return max(0, n.bit_length() - 1)


def pat_enabled(system: NcclSystem) -> bool:
    """``ncclPatEnable``: one GPU per node, a host network (v2.23.4-1 L108-115)."""
    return V.has_pat(system.version) and system.nodes == system.ranks and system.nodes > 1


def tune(system: NcclSystem, collective: str, algo_env: str | None = None,
         proto_env: str | None = None) -> TuningTable:
    """The tuner's table for ``collective`` (``ncclTopoTuneModel``), NCCL_ALGO / NCCL_PROTO applied."""
    if collective not in COLLECTIVES:
        raise InputError("collective", collective, "one of " + ", ".join(COLLECTIVES))
    version = system.version
    nodes, ranks, arch = system.tuned_nodes, system.ranks, system.arch
    node_idx = nodes - 1 if nodes <= 2 else 2
    ll_rows = V.ll_max_bw(version)
    ll_max = ll_rows[arch if nodes == 1 else (1 if system.cpu_vendor == "amd" else 0)][node_idx]
    caps = V.per_channel_caps(version)
    tree_max = caps["tree"][arch][node_idx]
    ring_ll128_max = caps["ring_ll128"][arch][node_idx]
    tree_ll128_max = caps["tree_ll128"][arch][node_idx]
    nvls_tree_max = caps["nvls_tree"][arch][node_idx]
    nsteps, inter_steps = steps(collective, ranks, nodes, version)
    table = TuningTable(system, collective)
    for algorithm in ALGORITHMS:
        graph = system.graphs.get("tree" if algorithm == "pat" else algorithm)
        if graph is None or not _allowed(collective, algorithm, version):
            continue
        if algorithm == "pat" and not pat_enabled(system):
            continue
        intra_hw = "nvlink" if graph.intra == "nvlink" else "pci"
        for p, protocol in enumerate(PROTOCOLS):
            if algorithm in ("nvls", "nvls_tree", "pat") and protocol != "simple":
                continue
            both = _bus_bandwidth(system, graph, collective, algorithm, protocol, ll_max, tree_max, ring_ll128_max,
                                  tree_ll128_max, nvls_tree_max)
            if both is None:
                continue
            bus, uncapped = both
            exempt = algorithm != "ring" and collective in ("allgather", "reduce-scatter") and (
                version >= (2, 23) or algorithm == "collnet_direct")
            if not exempt:
                if algorithm == "ring" or (algorithm in ("nvls", "nvls_tree") and version >= (2, 28)):
                    ratio = ranks / nsteps
                else:
                    ratio = 5 / 6 if algorithm in ("nvls", "nvls_tree") else 0.5
                bus *= ratio
                uncapped *= ratio
            latency = _latency(system, graph, collective, algorithm, p, intra_hw, nsteps, inter_steps)
            table.cells[(algorithm, protocol)] = Tuning(latency, bus, uncapped)
            if algorithm == "ring":
                table.ring_backup[protocol] = bus
    _enable(table, algo_env, proto_env)
    return table


def _bus_bandwidth(system: NcclSystem, graph: Graph, collective: str, algorithm: str, protocol: str,
                   ll_max: float, tree_max: float, ring_ll128_max: float, tree_ll128_max: float,
                   nvls_tree_max: float) -> tuple[float, float] | None:
    """Bus bandwidth of one cell before the algorithm-bandwidth ratio, and the same without the caps on the
    whole call (None: the cell does not exist)."""
    version, nodes, ppn = system.version, system.tuned_nodes, system.ppn
    collnet = algorithm in ("collnet_direct", "collnet_chain")
    bw = graph.bw_intra_GBps if nodes <= 2 or collnet else graph.bw_inter_GBps
    if algorithm in ("nvls", "nvls_tree"):
        if version >= (2, 28):  # v2.28.9-1 L285-300
            if graph.channels < 2:
                return None
            intra = graph.bw_intra_GBps * V.NVLS_EFFICIENCY[system.arch] * (graph.channels - 1) / graph.channels
            intra *= 2.0 if collective == "allreduce" else (ppn - 1) / ppn
            inter = graph.bw_inter_GBps * (2 if nodes <= 2 and algorithm == "nvls_tree" else 1)
            bw = min(intra, inter, nvls_tree_max if algorithm == "nvls_tree" else math.inf)
        elif algorithm == "nvls" and collective != "allreduce" and version >= (2, 27):  # v2.27.7-1 L267-275
            bw = min(graph.bw_intra_GBps * (ppn - 1) / ppn, 0.9 * graph.bw_inter_GBps)
        elif algorithm == "nvls":
            bw = min(graph.bw_intra_GBps, graph.bw_inter_GBps)
        else:
            bw = min(graph.bw_intra_GBps, graph.bw_inter_GBps if nodes <= 2 else graph.bw_inter_GBps / 2)
    bus = graph.channels * bw
    uncapped: float | None = None
    if algorithm == "ring" and protocol == "ll":
        if version >= (2, 21):
            uncapped = bus * 0.5
        else:
            shared = nodes > 1 or collective in ("allreduce", "reduce")
            uncapped = bus * (1 / 4 if shared else 1 / 3)
        bus = min(ll_max, uncapped)
    if algorithm == "ring" and protocol == "ll128":
        factor = 0.92 if (ppn >= 2 or version >= (2, 23)) else 0.7
        bus = min(bus * factor, graph.channels * ring_ll128_max)
    if algorithm == "tree":
        if collective == "allreduce" or version < (2, 23):
            bus = min(bus * 0.92, graph.channels * tree_max)
        if protocol == "ll":
            uncapped = bus / 3.8
            bus = min(uncapped, ll_max)
        if protocol == "ll128":
            bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), graph.channels * tree_ll128_max)
        if graph.tree_pattern:
            bus *= 0.85
    if algorithm == "pat":
        bus *= V.pat_bw_factor(version)
    if collnet and protocol != "simple":
        return 0.0, 0.0
    if algorithm == "collnet_direct" and protocol == "simple":
        if collective in ("allgather", "reduce-scatter"):
            if version >= (2, 27):
                bus = ppn * min(graph.bw_intra_GBps, 0.9 * graph.bw_inter_GBps)
            else:
                bus = ppn * bw * _collnet_ppn_correction(ppn)
        else:
            factor = ppn / graph.channels
            factor -= (factor - 1) / 2
            bus /= factor
            if system.compute_capability >= 90:
                bus *= 0.85
    return bus, bus if uncapped is None else uncapped


def _collnet_ppn_correction(ppn: float) -> float:
    """CollNet direct allgather/reduce-scatter (until 2.26): 0.95 (1 GPU/node) to 0.85 (8), interpolated."""
    w = (ppn - 1) / (8 - 1)
    return w * 0.85 + (1 - w) * 0.95


def _latency(system: NcclSystem, graph: Graph, collective: str, algorithm: str, p: int, intra_hw: str,
             nsteps: int, inter_steps: int) -> float:
    version = system.version
    nodes, ranks = system.tuned_nodes, system.ranks
    base, hw = V.base_lat_us(version), V.hw_lat_us(version)
    latency = base[algorithm][p]
    intra = hw[intra_hw][algorithm][p]
    one_per_node = ranks == nodes and version >= (2, 23)  # "with ppn=1 latencies are fully exposed"
    inter = hw["net"]["tree" if one_per_node else algorithm][p] + graph.latency_inter_us
    if PROTOCOLS[p] == "simple":
        inter += graph.latency_inter_us  # the flush's extra latency
    if algorithm == "ring":
        hw_name = intra_hw if nodes == 1 else "net"
        lat = hw[hw_name]["ring"][p]
        if collective in ("reduce", "broadcast"):
            # sameChannels is the search's; without it the source adds nsteps chunk latencies (tree's for Simple)
            if PROTOCOLS[p] == "simple":
                lat = hw[hw_name]["tree"][p]
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
        if collective != "allreduce" and version >= (2, 23):
            return latency
        return latency + 2 * ((per_node - 1) * intra + _log2i(nodes) * inter)
    if algorithm == "collnet_direct":
        return latency + 2 * (min(1, per_node - 1) * intra + (per_node - 1) * 0.4) + inter
    if algorithm == "collnet_chain":
        return latency + 2 * (per_node - 1) * intra + inter
    if algorithm == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algorithm == "pat":  # v2.23.4-1 L276-281: 8 + log2i(nNodes) interLat / 3.5 + 2.8 nRanks
        return (latency if version >= (2, 28) else 8.0) + _log2i(nodes) * inter / 3.5 + ranks * 2.8
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


def _ll128_default(system: NcclSystem, graph: Graph, collective: str, algorithm: str) -> bool:
    """LL128 on by default: NVLink (or a PXB/PXN network path) and, until 2.26, compute capability 70, 80, 90
    (100/120 from 2.25); from 2.27 any compute capability >= 70 (v2.20.3-1 L306-320, v2.27.7-1 L455-471)."""
    cc, version = system.compute_capability, system.version
    if not graph.ll128_path:
        return False
    if version >= (2, 27):
        allowed = cc >= 70
    else:
        allowed = cc in (70, 80, 90) or (version >= (2, 25) and cc in (100, 120))
    if cc == 90 and system.cuda_runtime == 11080:
        allowed = allowed and not (collective == "allreduce" and algorithm == "ring" and system.ranks == 2)
    return allowed


def _enable(table: TuningTable, algo_env: str | None, proto_env: str | None) -> None:
    system = table.system
    algos = parse_list(algo_env, ALGORITHMS, "NCCL_ALGO")
    protos = parse_list(proto_env, PROTOCOLS, "NCCL_PROTO")
    default_ll128 = proto_env is None
    legacy_mnnvl = system.mnnvl and system.version < (2, 21)
    if system.tuned_nodes == 1 or legacy_mnnvl:
        algos.discard("nvls_tree")
    if not system.collnet:
        algos -= {"collnet_direct", "collnet_chain"}
        if system.tuned_nodes > 1 or legacy_mnnvl:
            algos.discard("nvls")
        if not algos & {"ring", "tree", "nvls", "nvls_tree", "pat"}:
            algos |= {"ring", "tree"}  # NCCL_ALGO=CollNet without CollNet: ignored
    elif not system.nvswitch:
        algos.discard("collnet_direct")
    for (algorithm, protocol), cell in list(table.cells.items()):
        on = protocol in protos and algorithm in algos
        if protocol == "ll128" and default_ll128:
            graph = system.graphs[algorithm]
            on = on and _ll128_default(system, graph, table.collective, algorithm)
        if not on:
            table.cells[(algorithm, protocol)] = Tuning(cell.latency_us, 0.0, cell.uncapped_GBps)
    if not any(c.bandwidth_GBps > 0 for c in table.cells.values()):  # at least ring stays available
        for protocol, bw in table.ring_backup.items():
            cell = table.cells[("ring", protocol)]
            table.cells[("ring", protocol)] = Tuning(cell.latency_us, bw, cell.uncapped_GBps)


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
    tree_corrected = table.collective == "allreduce" or system.version < (2, 23)
    if algorithm == "tree" and log_size < 23 and tree_corrected:
        bw *= TREE_CORRECTION[protocol][log_size]
    if (algorithm == "nvls_tree" and table.collective == "allreduce" and log_size < 24
            and system.version >= (2, 29, 2) and system.compute_capability >= 100 and system.x86):
        bw *= TREE_CORRECTION[protocol][log_size]  # v2.29.2-1 L595
    ring = system.graphs["ring"]
    legacy_mnnvl = system.mnnvl and system.version < (2, 21)
    if (algorithm == "ring" and protocol == "simple" and not legacy_mnnvl and system.tuned_nodes > 1
            and table.collective == "allreduce" and nbytes / (ring.channels * system.ranks) >= 64):
        lat *= 1.9 if system.compute_capability < 80 else 1.4  # "plateau effect of ring"
    return lat, nbytes / (1000 * bw)


def label(algorithm: str, protocol: str) -> str:
    """What NCCL's logs call a call's choice (``NVLSTree/Simple``); ``p2p`` for point-to-point operations."""
    if protocol == "p2p":
        return "p2p"
    return f"{NCCL_NAMES.get(algorithm, algorithm)}/{NCCL_NAMES.get(protocol, protocol)}"


@dataclass(frozen=True)
class Choice:
    """What NCCL runs for one call and the time its tuner predicts (seconds)."""

    algorithm: str
    protocol: str
    seconds: float

    @property
    def label(self) -> str:
        return label(self.algorithm, self.protocol)


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
