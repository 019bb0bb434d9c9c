"""The devices a placement may use and the alpha-beta link between every pair of them.

Why a separate, flat table: the simulator prices thousands of placements, so it reads plain
arrays (peak FLOP/s, memory, latency and seconds-per-byte per device pair) instead of asking the
cluster's network for a route per transfer. The values come from :class:`costmodel.cluster.Cluster`
(``intra_link`` inside a node, ``path_link`` between nodes), so a slow NIC override shows up here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.cluster_parts import Device
from flexcomm.costmodel.errors import InputError


@dataclass(frozen=True)
class DeviceSet:
    """``n`` devices: names, peak FLOP/s, memory bytes, and per-pair latency (s) and beta (s/byte)."""

    names: tuple[str, ...]
    peak_flops: np.ndarray
    memory_bytes: np.ndarray
    latency_s: np.ndarray  # (n, n), 0 on the diagonal
    beta_s_per_byte: np.ndarray  # (n, n), 0 on the diagonal
    node_of: tuple[int, ...]
    cluster_name: str = ""

    def __post_init__(self) -> None:
        n = len(self.names)
        if n < 1:
            raise InputError("devices", n, "at least one device")
        for field in ("peak_flops", "memory_bytes"):
            if np.shape(getattr(self, field)) != (n,):
                raise InputError(field, np.shape(getattr(self, field)), f"one value per device ({n})")
        for field in ("latency_s", "beta_s_per_byte"):
            if np.shape(getattr(self, field)) != (n, n):
                raise InputError(field, np.shape(getattr(self, field)), f"an ({n}, {n}) matrix")

    @property
    def count(self) -> int:
        return len(self.names)

    def transfer_s(self, src: int, dst: int, nbytes: float) -> float:
        """Alpha-beta time of one message (0 on the same device)."""
        if src == dst:
            return 0.0
        return float(self.latency_s[src, dst] + nbytes * self.beta_s_per_byte[src, dst])

    def bandwidth_rank(self) -> list[int]:
        """Device indices, best first: fastest compute, then best connected (mean bandwidth), then index.

        Why: baselines that use k < n devices should take the fast devices and avoid one behind a
        slow NIC.
        """
        n = self.count
        if n == 1:
            return [0]
        beta = self.beta_s_per_byte
        mean_beta = (beta.sum(axis=1) + beta.sum(axis=0)) / (2 * (n - 1))
        return sorted(range(n), key=lambda d: (-float(self.peak_flops[d]), round(float(mean_beta[d]), 18), d))

    @classmethod
    def from_cluster(cls, cluster: Cluster, devices: int | None = None, ranks: Sequence[int] | None = None,
                     rank_devices: Sequence[Device] | None = None) -> DeviceSet:
        """The first ``devices`` ranks of ``cluster`` (all when None), or exactly ``ranks``.

        ``rank_devices`` overrides the device of every rank; by default each rank has its cluster's own
        (:attr:`Cluster.rank_devices`: ``device``, or a ``node_devices`` entry on a mixed cluster).
        """
        if rank_devices is not None and len(rank_devices) != cluster.world_size:
            raise InputError("rank_devices", len(rank_devices), f"one device per rank ({cluster.world_size})")
        if ranks is None:
            count = cluster.world_size if devices is None else devices
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= cluster.world_size:
                raise InputError("devices", devices, f"an integer 1..{cluster.world_size} (ranks of {cluster.name})")
            ranks = list(range(count))
        ranks = [cluster._check_rank(r) for r in ranks]
        if len(set(ranks)) != len(ranks) or not ranks:
            raise InputError("ranks", ranks, "distinct ranks of the cluster")
        n = len(ranks)
        nodes = [cluster.node_of(r) for r in ranks]
        latency = np.zeros((n, n))
        beta = np.zeros((n, n))
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                if nodes[i] == nodes[j]:
                    link = cluster.intra_link
                else:
                    link = cluster.path_link(nodes[i], nodes[j])
                latency[i, j] = link.latency_s
                beta[i, j] = 1.0 / link.bandwidth_Bps
        devices = cluster.rank_devices if rank_devices is None else rank_devices
        per_rank = [devices[r] for r in ranks]
        return cls(
            names=tuple(f"rank{r}:{d.name}" for r, d in zip(ranks, per_rank, strict=True)),
            peak_flops=np.array([d.peak_flops for d in per_rank], dtype=float),
            memory_bytes=np.array([d.memory_bytes for d in per_rank], dtype=float),
            latency_s=latency,
            beta_s_per_byte=beta,
            node_of=tuple(nodes),
            cluster_name=cluster.name,
        )

    @classmethod
    def uniform(cls, count: int, *, peak_flops: float = 100e12, memory_bytes: float = 32 * 2**30,
                latency_s: float = 10e-6, bandwidth_Bps: float = 10e9) -> DeviceSet:
        """``count`` identical devices, fully connected by identical links (for tests and toy runs)."""
        if count < 1:
            raise InputError("devices", count, "an integer >= 1")
        off = 1.0 - np.eye(count)
        return cls(
            names=tuple(f"dev{i}" for i in range(count)),
            peak_flops=np.full(count, float(peak_flops)),
            memory_bytes=np.full(count, float(memory_bytes)),
            latency_s=off * latency_s,
            beta_s_per_byte=off / bandwidth_Bps,
            node_of=tuple(range(count)),
            cluster_name="uniform",
        )
