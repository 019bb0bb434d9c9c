"""How NCCL runs one call after its tuner chose: channels and threads launched, chunks, pipeline, launch.

The tuner (:mod:`.tuner`) prices a call as ``latency + bytes / bandwidth`` at the communicator's full
channel count, to *choose*. What the call then costs depends on what the runtime (``src/enqueue.cc``,
``src/device/*``) does with it, and this module adds those mechanisms, each from the source:

* **channels and threads launched at this size** (enqueue.cc ``getChannnelThreadInfo`` @ v2.20.3-1
  L1530-1583, ``topoGetAlgoInfo`` @ v2.27.7-1 L1831-1873): starting from the communicator's channels
  (twice the ring graph's, connect.cc @ v2.20.3-1 L442; raised to the NVLS channel count from 2.27), a
  channel is dropped while ``bytes < channels x threads x threshold`` (thresholds 8 B a thread for LL
  and LL128, 64 B for Simple, x nRanks for ring LL; tuning.cc @ v2.20.3-1 L379-386), then threads are
  halved. NVLS always runs its ``nvlsChannels``. Bandwidth scales with the channels launched, as NCCL's
  own 2.20 tuner scaled it when a plugin set the channel count (tuning.cc @ v2.20.3-1 L421-448:
  ``bw = bw / comm->nChannels * info->nChannels``); caps on the whole call (``llMaxBw``) stay caps. The
  threads halved below that are reported, not priced (the tuner's latency covers calls that small).
* **the chunk pipeline's fill** for the algorithms that pass chunks down a chain of stages (tree, NVLS,
  NVLS-tree, CollNet chain): ``(stages - 1)`` chunk times on top of ``bytes / bandwidth``, with chunk
  sizes as ``computeCollChunkInfo`` / ``calcCollChunking`` shrink them for small calls (enqueue.cc @
  v2.20.3-1 L1683-1736, @ v2.27.7-1 L1941-2175) and stages from the tree's depth (connect.cc @
  v2.20.3-1 L138: ``nRanks/nNodes - 1 + log2i(nNodes)``). A ring keeps every link busy from its first step
  (each rank sends its own data first), so it has no fill beyond its per-step latency, which the tuner
  already charges.
* **the host's launch**: a process that drives G GPUs (nccl-tests ``-g G``, one thread) enqueues and
  launches G kernels a call; back-to-back calls then go no faster than the host launches them
  (:mod:`.transports` holds the per-GPU host cost and its source). One GPU a process (MPI, torchrun)
  is GPU-bound for every size.
* **the fabric**: per network step, the extra one-way latency of a transport slower than the InfiniBand
  NCCL's network constants were measured on (:mod:`.transports`). The latency a net plugin *reports* only
  steers the tuner's choice: the times here come from a table without it.

Not modelled: the per-slice handshake inside a ring step (folded into the tuner's per-step latency),
contention with other traffic, GPU clock and power limits, registered (zero-copy) buffers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from flexcomm.costmodel.collective_libraries import versions as V
from flexcomm.costmodel.collective_libraries.tuner import (
    NcclSystem,
    TuningTable,
    _log2i,
    algo_time_parts_us,
    label,
    steps,
)
from flexcomm.costmodel.units import format_size, format_time

#: Threads a block runs at most, per algorithm and protocol (``maxThreads``, tuning.cc @ v2.20.3-1
#: L120-133; ring Simple falls to 256 where the ring's bandwidth is at most PCI_BW, 12 GB/s).
MAX_THREADS = {"ll": 512, "ll128": 640, "simple": 512}
NVLS_THREADS = 640
#: Bytes a thread should move before another channel is worth launching (comm.h @ v2.20.3-1 L35-37).
THREAD_THRESHOLD = {"ll": 8, "ll128": 8, "simple": 64}
COLLNET_THRESHOLD = 512
#: Per-protocol FIFO buffers (init.cc @ v2.20.3-1 L541-543) and steps (device.h L22).
BUFFER_BYTES = {"ll": 524288, "ll128": 4915200, "simple": 4194304}
NCCL_STEPS = 8


@dataclass(frozen=True)
class Execution:
    """One call as NCCL runs it, and where its predicted time goes (seconds)."""

    library: str
    version: str
    collective: str
    nbytes: float
    ranks: int
    nodes: int
    algorithm: str
    protocol: str
    channels: int  # channels (thread blocks) launched for this call
    comm_channels: int  # the communicator's channels for this algorithm
    threads: int  # threads a block
    chunk_bytes: int  # bytes a channel moves per pipeline step
    steps: int  # sequential steps of the algorithm per chunk (ring: nsteps; tree: hops up and down)
    launch_s: float  # the host launching slower than the GPUs finish (0 when GPU-bound)
    latency_s: float  # per-step latencies (the tuner's) and the fabric's extra latency
    fill_s: float  # the chunk pipeline filling and draining
    bandwidth_s: float  # bytes at the bandwidth of the channels and threads launched
    host_s: float  # the host's launch work per call (GPUs per process x per-GPU cost)
    note: str = ""  # what runs this call but is not modelled (RCCL's MSCCL kernels), said where it applies
    network_steps: float = 0.0  # network steps on the critical path (each pays the fabric's per-step latency)
    intra_s: float = 0.0  # bytes at the links inside an NVLink domain (NVLink, xGMI, PCIe)
    network_s: float = 0.0  # bytes at the NICs; bandwidth_s is the slower of the two (a collective has one)

    @property
    def gpu_s(self) -> float:
        return self.latency_s + self.fill_s + self.bandwidth_s

    @property
    def seconds(self) -> float:
        return self.launch_s + self.gpu_s

    @property
    def label(self) -> str:
        return label(self.algorithm, self.protocol)

    @classmethod
    def alone(cls, library: str, version: object, collective: str, nbytes: float, ranks: int) -> Execution:
        """A communicator of fewer than two ranks: nothing moves, nothing is launched."""
        return cls(library, str(version), collective, float(nbytes), int(ranks), 1, "ring", "simple", 0, 0, 0, 0, 0,
                   0.0, 0.0, 0.0, 0.0, 0.0)

    @property
    def dominant(self) -> str:
        """The term that costs most: what a miss on this call points at (or what is not modelled)."""
        if self.note:
            return self.note.split(":")[0]
        parts = {"launch": self.launch_s, "latency": self.latency_s, "pipeline fill": self.fill_s,
                 "bandwidth": self.bandwidth_s}
        return max(parts, key=lambda k: parts[k])

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data.update(seconds=self.seconds, gpu_s=self.gpu_s, label=self.label, dominant=self.dominant)
        return data


def split_bandwidth(bandwidth_s: float, across_nodes: bool) -> dict[str, float]:
    """A collective's bandwidth term as the links that bound it: the NICs across NCCL nodes, else the links
    inside the NVLink domain (a calibration scales each by the rate it measured)."""
    return {"intra_s": 0.0, "network_s": bandwidth_s} if across_nodes else {"intra_s": bandwidth_s, "network_s": 0.0}


def describe(run: Execution) -> list[str]:
    """``--explain``: what the library runs and where the predicted time goes, one fact a line."""
    total = run.seconds or 1.0
    parts = (("launch (host-bound)", run.launch_s), ("latency", run.latency_s), ("pipeline fill", run.fill_s),
             ("bandwidth", run.bandwidth_s))
    lines = [
        f"{run.library.upper()} {run.version} runs {run.label}: {run.collective} of {format_size(run.nbytes)} on "
        f"{run.ranks} ranks ({run.nodes} node{'s' if run.nodes != 1 else ''})",
        f"  channels {run.channels} of {run.comm_channels}, {run.threads} threads a block, chunk "
        f"{format_size(run.chunk_bytes)}, {run.steps} steps",
        f"  host launch {format_time(run.host_s)} a call (GPUs a process x per-GPU launch)",
    ]
    lines += [f"  {name:<20s} {format_time(seconds):>10s}  {seconds / total:6.1%}" for name, seconds in parts]
    lines.append(f"  {'total':<20s} {format_time(run.seconds):>10s}  (dominated by {run.dominant})")
    if run.note:
        lines.append(f"  note: {run.note}")
    return lines


def comm_channels(system: NcclSystem, algorithm: str) -> int:
    """The channels a call of ``algorithm`` starts from: NVLS's ``nvlsChannels``; otherwise twice the ring
    graph's (connect.cc @ v2.20.3-1 L442), doubled on Hopper+ across nodes when the ring is fast and narrow
    (L456-457), raised to ``nvlsChannels`` from 2.27 (the channels are copied; enqueue starts from
    ``comm->nChannels``)."""
    version = system.version
    if algorithm in ("nvls", "nvls_tree"):
        return V.nvls_channels(version, system.compute_capability, system.tuned_nodes == 1)
    ring = system.graphs["ring"]
    nc = min(V.max_channels(version), 2 * ring.channels)
    if system.compute_capability >= 90 and system.tuned_nodes > 1 and ring.bw_intra_GBps > 45.0 and nc < 16:
        nc = min(V.max_channels(version), 2 * nc)
    if version >= (2, 27) and "nvls" in system.graphs:
        nc = max(nc, V.nvls_channels(version, system.compute_capability, system.tuned_nodes == 1))
    return nc


def full_channels(system: NcclSystem, algorithm: str) -> int:
    """Channels that carry the tuner's bandwidth: the graph's, duplicated once (copies beyond that share the
    same links and add none)."""
    if algorithm in ("nvls", "nvls_tree"):
        return comm_channels(system, algorithm)
    graph = system.graphs.get("tree" if algorithm == "pat" else algorithm, system.graphs["ring"])
    return min(V.max_channels(system.version), 2 * graph.channels)


def launched(system: NcclSystem, algorithm: str, protocol: str, nbytes: float) -> tuple[int, int]:
    """Channels and threads the call launches (the enqueue's reduction below the thread threshold)."""
    nc = comm_channels(system, algorithm)
    if algorithm in ("nvls", "nvls_tree"):
        return nc, NVLS_THREADS
    ring_graph = system.graphs["ring"]
    nt = MAX_THREADS[protocol]
    if protocol == "simple" and algorithm == "ring" and ring_graph.bw_intra_GBps * ring_graph.channels <= 12.0:
        nt = 256
    if algorithm in ("collnet_direct", "pat") and protocol == "simple":
        nt = NVLS_THREADS
    threshold = COLLNET_THRESHOLD if algorithm.startswith("collnet") else THREAD_THRESHOLD[protocol]
    if algorithm == "ring" and protocol == "ll":
        threshold *= system.ranks
    while nbytes < nc * nt * threshold and nc >= 2:
        nc -= 1
    if not algorithm.startswith("collnet"):
        while nbytes < nc * nt * threshold and nt % 128 == 0 and nt > 64:
            nt //= 2
    return nc, nt


def chunk_bytes(system: NcclSystem, collective: str, algorithm: str, protocol: str, nbytes: float,
                channels: int) -> int:
    """Data bytes a channel moves per pipeline step (``chunkSize`` after the small-call reductions)."""
    version = system.version
    step = BUFFER_BYTES[protocol] // NCCL_STEPS
    chunk_steps = 4 if (protocol == "simple" and algorithm == "ring"
                        and collective in ("allreduce", "allgather", "reduce-scatter")) else 1
    cs = step * chunk_steps
    if protocol == "ll":
        cs //= 2
    elif protocol == "ll128":
        cs = cs // 16 * 15
    nodes = system.tuned_nodes
    if algorithm == "nvls":
        heads = system.graphs["nvls"].channels
        cs = min(cs, V.nvls_chunk_bytes(version))
        ops = channels * heads
        for factor, floor in ((64, 65536), (8, 32768), (2, 16384)):
            if nbytes < factor * ops * cs and cs > floor:
                cs = floor
    elif algorithm == "nvls_tree":
        heads = system.graphs["nvls"].channels
        cs = V.nvls_chunk_bytes(version) if version >= (2, 27) else cs
        cs = min(cs, 65536 if nodes >= 4 else cs)
        ops = channels * heads
        for factor, floor in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
            if nbytes < factor * ops * cs and cs > floor:
                cs = floor
    elif algorithm == "tree" and protocol == "ll128":
        ppn = system.ranks // nodes
        depth_steps = 1 + _log2i(nodes) + 0.1 * ppn
        while nbytes // (channels * cs) < depth_steps * 64 / ppn and cs > 131072:
            cs //= 2
        while nbytes // (channels * cs) < depth_steps * 16 / ppn and cs > 32768:
            cs //= 2
    per_channel = nbytes / max(channels, 1)
    return int(max(1, min(cs, math.ceil(per_channel))))


def pipeline_stages(system: NcclSystem, collective: str, algorithm: str) -> tuple[int, int]:
    """Stages a chunk passes one after another, as (inside a node, across nodes): a tree's hops up and down
    (its depth twice: ``ppn - 1`` inside, ``log2i(nNodes)`` across), NVLS's scatter, reduce and gather,
    NVLS-tree's NVLS stages then the inter-node tree, a CollNet chain's GPUs; (1, 0) for a ring (no fill)
    and for what has no chain."""
    nodes, ppn = system.tuned_nodes, system.ranks // system.tuned_nodes
    if algorithm == "tree" and collective == "allreduce":
        return 2 * (ppn - 1), 2 * _log2i(nodes)
    if algorithm == "nvls":
        return 3, 0
    if algorithm == "nvls_tree":
        return 3, 2 * _log2i(nodes)
    if algorithm == "collnet_chain":
        return 2 * ppn, 0
    return 1, 0


def inter_hops(system: NcclSystem, collective: str, algorithm: str) -> float:
    """Network steps on the critical path, as the tuner counts them where it adds ``interLat``."""
    nodes = system.tuned_nodes
    if nodes == 1:
        return 0.0
    if algorithm == "ring":
        return float(steps(collective, system.ranks, nodes, system.version)[1])
    if algorithm in ("tree", "nvls_tree"):
        return 2.0 * _log2i(nodes)
    if algorithm == "pat":
        return _log2i(nodes) / 3.5
    return 1.0


def execute(table: TuningTable, algorithm: str, protocol: str, nbytes: float, gpus_per_process: int = 1,
            extra_net_latency_us: float = 0.0, host_us_per_gpu: float = 0.0) -> Execution:
    """The call of ``nbytes`` (nccl-tests' size) as NCCL runs it with the tuner's chosen cell."""
    system = table.system
    parts = algo_time_parts_us(table, algorithm, protocol, nbytes)
    if parts is None:
        raise ValueError(f"{algorithm}/{protocol} is not enabled for {table.collective}")
    latency_us, full_bw_us = parts
    channels, threads = launched(system, algorithm, protocol, nbytes)
    full = full_channels(system, algorithm)
    share = min(1.0, channels / full)
    cell = table.cells[(algorithm, protocol)]
    scaled_GBps = max(cell.uncapped_GBps, cell.bandwidth_GBps) * share  # the channels' own rate
    bandwidth_us = max(full_bw_us, full_bw_us * cell.bandwidth_GBps / scaled_GBps)
    chunk = chunk_bytes(system, table.collective, algorithm, protocol, nbytes, channels)
    # LL and LL128 forward each line as it arrives (prims_ll*.h): no chunk fill; Simple forwards whole slices
    intra_stages, net_stages = pipeline_stages(system, table.collective, algorithm) if protocol == "simple" \
        else (1, 0)
    stages = intra_stages + net_stages
    per_channel_us = bandwidth_us / max(1.0, nbytes / channels / chunk)  # one chunk's time at the bottleneck
    fill_us = 0.0
    if stages > 1:
        # each stage moves a chunk at its own link's speed (a graph channel's speed, shared by its two copies);
        # the slowest stage's chunk time is already the bandwidth term's
        graph = system.graphs.get(algorithm, system.graphs["ring"])
        intra_us = chunk / (graph.bw_intra_GBps * 1e3 / 2) if graph.bw_intra_GBps else per_channel_us
        inter_us = chunk / (graph.bw_inter_GBps * 1e3 / 2) if graph.bw_inter_GBps else per_channel_us
        staged = intra_stages * min(intra_us, per_channel_us) + net_stages * min(inter_us, per_channel_us)
        fill_us = max(0.0, staged - per_channel_us)
    hops = inter_hops(system, table.collective, algorithm)
    latency_us += hops * extra_net_latency_us
    host_us = gpus_per_process * host_us_per_gpu
    gpu_us = latency_us + fill_us + bandwidth_us
    nsteps = steps(table.collective, system.ranks, system.tuned_nodes, system.version)[0]
    return Execution(
        library="nccl", version=str(system.version), collective=table.collective, nbytes=float(nbytes),
        ranks=system.ranks, nodes=system.nodes, algorithm=algorithm, protocol=protocol, channels=channels,
        comm_channels=comm_channels(system, algorithm), threads=threads, chunk_bytes=chunk,
        steps=stages if stages > 1 else nsteps, launch_s=max(0.0, host_us - gpu_us) * 1e-6,
        latency_s=latency_us * 1e-6, fill_s=fill_us * 1e-6, bandwidth_s=bandwidth_us * 1e-6, host_s=host_us * 1e-6,
        network_steps=hops, **split_bandwidth(bandwidth_us * 1e-6, system.tuned_nodes > 1))
