"""Seconds of the pieces of a transformer step on one GPU: GEMMs by roofline, memory-bound kernels by
HBM traffic, tensor-parallel and data-parallel collectives and pipeline sends on the cluster's links.

**GEMMs** (NVIDIA, "Matrix Multiplication Background User's Guide", DU-09799-001, 2023): a GEMM is math-
or memory-limited, time = max(FLOPs / (peak x efficiency), bytes / memory bandwidth); cuBLAS computes it
in output tiles (the largest typical A100 tile is 256 x 128, section 2.3) spread over the SMs in waves, so
the achieved fraction of peak falls with *tile quantization* (a partial tile costs a full one, 3.1) and
*wave quantization* (a partial last wave costs a full one, 3.2). Efficiency = ``gemm_ceiling`` x tile
fill x wave fill: the shape-dependent part is the guide's; ``gemm_ceiling`` (the fraction of peak a
perfectly quantized GEMM reaches, with every overhead a closed form leaves out) is the one constant that
is not from a datasheet; :data:`DEFAULT_GEMM_CEILING` is fitted on Megatron-LM's Table 1 and the
reproduction predicts each row with a ceiling fitted on the *other* rows only.

**Memory-bound kernels** (layer norms, softmax, dropout, GeLU, bias adds, cross entropy): each stored
activation byte (Korthikanti et al.'s count, :mod:`planner.llm.memory`) is written once and read once in
the forward pass, and the backward pass moves twice that: forward time = 2 x bytes / HBM bandwidth.

**Collectives** are rings (alpha-beta, as :func:`costmodel.collectives.formula` prices them): inside a
node on ``intra_link``; across nodes every GPU of a node sends at once, so a GPU gets
``nics_per_node x inter_link bandwidth / devices_per_node``, and a data-parallel group with g members
per node moves its ring's 2(d-1)/d share through the node's NICs together with the node's other groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flexcomm.costmodel.cluster import Cluster
from flexcomm.planner.llm.model import Gemm

#: The largest typical cuBLAS tile on A100 (NVIDIA matmul guide, section 2.3).
TILE = (256, 128)
#: Fraction of peak a fully quantized GEMM reaches: fitted on all six rows of Megatron-LM Table 1 (0.648; see
#: the module docstring and ``flexcomm reproduce megatron``, which predicts each row with a ceiling fitted on the
#: other rows only: 0.635-0.656).
DEFAULT_GEMM_CEILING = 0.65
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
    gemm_ceiling: float = DEFAULT_GEMM_CEILING

    @classmethod
    def of(cls, cluster: Cluster, gemm_ceiling: float = DEFAULT_GEMM_CEILING) -> Hardware:
        d = min(cluster.rank_devices, key=lambda dev: dev.peak_flops)  # a mixed pool runs at its slowest
        return cls(peak_flops=d.peak_flops, memory_bandwidth_Bps=d.memory_bandwidth_Bps, sms=d.sms,
                   devices_per_node=cluster.devices_per_node, nics_per_node=cluster.nics_per_node or 1,
                   intra_alpha=cluster.intra_link.latency_s, intra_Bps=cluster.intra_link.bandwidth_Bps,
                   inter_alpha=cluster.inter_link.latency_s, inter_Bps=cluster.inter_link.bandwidth_Bps,
                   gemm_ceiling=gemm_ceiling)

    @property
    def inter_Bps_per_gpu(self) -> float:
        """A GPU's share of its node's NICs when every GPU of the node sends at once."""
        return self.inter_Bps * self.nics_per_node / self.devices_per_node

    # --- kernels ---------------------------------------------------------------------------------

    def gemm_efficiency(self, g: Gemm) -> float:
        """Fraction of peak: the ceiling times tile and wave quantization (best tile orientation)."""
        best = 0.0
        for tm, tn in (TILE, TILE[::-1]):
            tiles = math.ceil(g.m / tm) * math.ceil(g.n / tn) * g.count
            fill = g.m * g.n * g.count / (tiles * tm * tn)
            if self.sms:
                fill *= tiles / (math.ceil(tiles / self.sms) * self.sms)
            best = max(best, fill)
        return self.gemm_ceiling * best

    def gemm_s(self, g: Gemm, element_bytes: float) -> float:
        math_s = g.flops / (self.peak_flops * self.gemm_efficiency(g))
        if not self.memory_bandwidth_Bps:
            return math_s
        moved = (g.m * g.k + g.k * g.n + g.m * g.n) * g.count * element_bytes
        return max(math_s, moved / self.memory_bandwidth_Bps)

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

    def allreduce_s(self, nbytes: float, group: int, per_node: int) -> float:
        if group <= 1 or nbytes <= 0:
            return 0.0
        alpha, bw = self._ring_link(group, per_node)
        return 2 * (group - 1) * alpha + 2 * (group - 1) / group * nbytes / bw

    def gather_or_scatter_s(self, nbytes: float, group: int, per_node: int) -> float:
        """One reduce-scatter or allgather of ``nbytes`` in all (sequence parallelism's halves of an allreduce)."""
        if group <= 1 or nbytes <= 0:
            return 0.0
        alpha, bw = self._ring_link(group, per_node)
        return (group - 1) * alpha + (group - 1) / group * nbytes / bw

    def send_s(self, nbytes: float, across_nodes: bool) -> float:
        if nbytes <= 0:
            return 0.0
        if across_nodes:
            return self.inter_alpha + nbytes / self.inter_Bps_per_gpu
        return self.intra_alpha + nbytes / self.intra_Bps
