"""Seconds of the pieces of a transformer step on one GPU: GEMMs by roofline, memory-bound kernels by
HBM traffic, tensor-parallel and data-parallel collectives and pipeline sends on the cluster's links.

**GEMMs** (:mod:`costmodel.gemm_efficiency`, shared with the simulator): time = max(FLOPs / (peak x achievable
x shape fill), bytes / HBM bandwidth, one launch). ``achievable`` is the device's *measured* maximum matmul
rate (the catalog's MAMF, with the shape losses at its best shape divided out); the shape fill is tile and
wave quantization (NVIDIA's matmul guide) times the K-loop's pipeline fill (CUTLASS's default SM80 tile).
Nothing here is fitted to a training paper; ``gemm_ceiling`` overrides ``achievable`` for what-ifs and for
the leave-one-out fit ``flexcomm reproduce megatron`` reports beside the unfitted prediction.

**Memory-bound kernels** (layer norms, softmax, dropout, GeLU, bias adds, cross entropy): each stored
activation byte (Korthikanti et al.'s count, :mod:`planner.llm.memory`) is written once and read once in
the forward pass, and the backward pass moves twice that: forward time = 2 x bytes / HBM bandwidth.

**Collectives**: inside a node or over whole nodes on a cluster with a ``gpu_fabric``, as NCCL runs them
(:meth:`costmodel.cost_model.CostModel.nccl_choice`: the algorithm, protocol and channels NCCL picks, validated
against nccl-tests); otherwise (a group with fewer members on each node than it has GPUs), rings (alpha-beta):
across nodes every GPU of a node sends at once, so a GPU gets ``nics_per_node x inter_link bandwidth /
devices_per_node``, and a data-parallel group with g members per node moves its ring's 2(d-1)/d share through
the node's NICs together with the node's other groups.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.cluster_parts import Device
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.gemm_efficiency import GemmShape, achievable_fraction, gemm_seconds, shape_fill
from flexcomm.planner.llm.gpt import Gemm

#: Memory-bound traffic per stored activation byte in the forward pass (written once, read once).
FORWARD_TRAFFIC_PER_STORED_BYTE = 2.0
#: Adam's traffic per parameter: reads 16-bit gradient + fp32 master, m, v; writes those three + 16-bit weight.
ADAM_BYTES_PER_PARAMETER = 2 + 12 + 12 + 2


#: Device families without bf16 tensor cores (bf16 arrived with Ampere: NVIDIA A100 whitepaper).
NO_BF16 = ("V100", "T4", "P100", "P40", "K80", "RTX 20", "TITAN V")


def device_precisions(device_name: str) -> tuple[str, ...]:
    """The training precisions a device runs natively, by its name (every CUDA GPU runs fp16 and fp32)."""
    upper = device_name.upper()
    return ("fp16", "fp32") if any(family in upper for family in NO_BF16) else ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Hardware:
    """What the step's timing needs of a cluster: device rates and the two links, with NIC sharing."""

    peak_flops: float
    memory_bandwidth_Bps: float | None
    sms: int | None
    devices_per_node: int
    nics_per_node: int
    intra_alpha: float
    intra_Bps: float
    inter_alpha: float
    inter_Bps: float
    #: fraction of peak a perfectly shaped GEMM reaches (the device's measured MAMF; see the module doc)
    gemm_ceiling: float
    #: the cluster, where it has a ``gpu_fabric``: intra-node collectives are priced as NCCL runs them
    nccl_cluster: Cluster | None = field(default=None, compare=False, repr=False)
    #: the slowest device (a compressor's device work is priced on it)
    device: Device | None = field(default=None, compare=False, repr=False)
    _collective_cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, cluster: Cluster, gemm_ceiling: float | None = None) -> Hardware:
        """The cluster's slowest device and links; ``gemm_ceiling`` None: the device's achievable fraction."""
        d = min(cluster.rank_devices, key=lambda dev: dev.peak_flops)  # a mixed pool runs at its slowest
        ceiling = achievable_fraction(d.name) if gemm_ceiling is None else gemm_ceiling
        return cls(peak_flops=d.peak_flops, memory_bandwidth_Bps=d.memory_bandwidth_Bps, sms=d.sms,
                   devices_per_node=cluster.devices_per_node, nics_per_node=cluster.nics_per_node or 1,
                   intra_alpha=cluster.intra_link.latency_s, intra_Bps=cluster.intra_link.bandwidth_Bps,
                   inter_alpha=cluster.inter_link.latency_s, inter_Bps=cluster.inter_link.bandwidth_Bps,
                   gemm_ceiling=ceiling, nccl_cluster=cluster if cluster.gpu_fabric is not None else None, device=d)

    @property
    def inter_Bps_per_gpu(self) -> float:
        """A GPU's share of its node's NICs when every GPU of the node sends at once."""
        return self.inter_Bps * self.nics_per_node / self.devices_per_node

    # --- kernels ---------------------------------------------------------------------------------

    def gemm_efficiency(self, g: Gemm) -> float:
        """Fraction of peak: the achievable fraction times the shape's tile, wave and K-loop fill."""
        return self.gemm_ceiling * shape_fill(GemmShape(g.m, g.n, g.k, g.count), self.sms)

    def gemm_s(self, g: Gemm, element_bytes: float) -> float:
        return gemm_seconds(GemmShape(g.m, g.n, g.k, g.count), self.peak_flops, self.gemm_ceiling, self.sms,
                            self.memory_bandwidth_Bps, element_bytes)

    def memory_bound_s(self, stored_bytes: float) -> float:
        """Forward seconds of the memory-bound kernels around ``stored_bytes`` of kept activations."""
        if not self.memory_bandwidth_Bps:
            return 0.0
        return FORWARD_TRAFFIC_PER_STORED_BYTE * stored_bytes / self.memory_bandwidth_Bps

    def optimizer_s(self, parameters: float) -> float:
        return ADAM_BYTES_PER_PARAMETER * parameters / self.memory_bandwidth_Bps if self.memory_bandwidth_Bps else 0.0

    # --- communication ---------------------------------------------------------------------------

    def _ring_link(self, group: int, per_node: int) -> tuple[float, float]:
        """(alpha, bytes/s) a ring of ``group`` ranks with ``per_node`` of them on each node sees."""
        if group <= per_node:
            return self.intra_alpha, self.intra_Bps
        # the node's NICs carry every group's boundary traffic: devices_per_node / per_node groups at once
        share = self.inter_Bps * self.nics_per_node * per_node / self.devices_per_node
        bandwidth = min(share, self.intra_Bps) if per_node > 1 else min(share, self.inter_Bps * self.nics_per_node)
        return self.inter_alpha, bandwidth

    def _nccl_describes(self, group: int, per_node: int) -> bool:
        """NCCL's model prices groups inside one node or of whole nodes (ranks packed onto nodes)."""
        if self.nccl_cluster is None:
            return False
        inside = group <= per_node and group <= self.devices_per_node
        whole_nodes = (per_node == self.devices_per_node and group % self.devices_per_node == 0
                       and group <= self.nccl_cluster.world_size)
        return inside or whole_nodes

    def group_model(self, group: int, per_node: int):  # -> tuple[CostModel, bool]
        """The cost model a group's exchange is priced on and whether as NCCL runs it: the cluster's NCCL
        model where it describes the group, else a link with the group's ring bandwidth (NIC sharing)."""
        if self._nccl_describes(group, per_node):
            return self._nccl_model, True

        alpha, bandwidth = self._ring_link(group, per_node)
        return CostModel.from_link(alpha, bandwidth), False

    def nccl_s(self, collective: str, nbytes: float, group: int, per_node: int) -> float | None:
        """NCCL's time for a group inside one node or of whole nodes (``nbytes`` in flexcomm's sizes): what
        ``flexcomm cost --algorithm nccl`` prices for it; None to use rings (a group spread thinly over nodes,
        which NCCL's model, pricing ranks packed onto nodes, does not describe)."""
        if not self._nccl_describes(group, per_node):
            return None
        key = (collective, float(nbytes), group)
        if key not in self._collective_cache:
            self._collective_cache[key] = self._nccl_model.nccl_choice(collective, "nccl", nbytes, group).seconds
        return self._collective_cache[key]

    @functools.cached_property
    def _nccl_model(self):  # -> CostModel: built once per hardware, on the first intra-node collective priced
        return CostModel.from_cluster(self.nccl_cluster)

    def allreduce_s(self, nbytes: float, group: int, per_node: int) -> float:
        if group <= 1 or nbytes <= 0:
            return 0.0
        nccl = self.nccl_s("allreduce", nbytes, group, per_node)
        if nccl is not None:
            return nccl
        alpha, bw = self._ring_link(group, per_node)
        return 2 * (group - 1) * alpha + 2 * (group - 1) / group * nbytes / bw

    def gather_or_scatter_s(self, nbytes: float, group: int, per_node: int) -> float:
        """One reduce-scatter or allgather of ``nbytes`` in all (sequence parallelism's halves of an allreduce)."""
        if group <= 1 or nbytes <= 0:
            return 0.0
        nccl = self.nccl_s("allgather", nbytes / group, group, per_node)  # flexcomm counts one rank's part
        if nccl is not None:
            return nccl
        alpha, bw = self._ring_link(group, per_node)
        return (group - 1) * alpha + (group - 1) / group * nbytes / bw

    def send_s(self, nbytes: float, across_nodes: bool) -> float:
        if nbytes <= 0:
            return 0.0
        if across_nodes:
            return self.inter_alpha + nbytes / self.inter_Bps_per_gpu
        return self.intra_alpha + nbytes / self.intra_Bps
