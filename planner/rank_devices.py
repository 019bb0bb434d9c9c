"""The devices a plan runs on, one per rank: a cluster and each rank's own device.

Planning for a mixed pool (A100 nodes next to V100 nodes) needs each rank's peak FLOP/s and memory; a
cluster file gives them with its ``node_devices`` list (:class:`costmodel.cluster_parts.NodeDevices`), e.g. the
embedded ``4x4-a100-v100``::

    node_devices:
      - {nodes: [2, 3], device: {name: V100-32GB, peak_flops: 125TFLOP/s, memory: 32GiB}}

Links, topology and overrides stay the cluster's, so the cost model and the simulator see the same
network, and every command finds the same clusters by name (:func:`costmodel.cluster.load_cluster`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.cluster_parts import Device
from flexcomm.costmodel.errors import InputError


@dataclass(frozen=True)
class PlanCluster:
    """A cluster and the device of every rank (ranks packed onto nodes, as the cluster numbers them)."""

    cluster: Cluster
    devices: tuple[Device, ...]

    @property
    def name(self) -> str:
        return self.cluster.name

    @property
    def world_size(self) -> int:
        return self.cluster.world_size

    @property
    def devices_per_node(self) -> int:
        return self.cluster.devices_per_node

    @property
    def peak_flops(self) -> np.ndarray:
        return np.array([d.peak_flops for d in self.devices])

    @property
    def memory_bytes(self) -> np.ndarray:
        return np.array([d.memory_bytes for d in self.devices])

    @property
    def heterogeneous(self) -> bool:
        return len({(d.peak_flops, d.memory_bytes) for d in self.devices}) > 1

    def with_cluster(self, cluster: Cluster) -> PlanCluster:
        """The same devices on another (e.g. calibrated) cluster of the same shape."""
        if cluster.world_size != self.world_size:
            raise InputError("cluster", cluster.name, f"a cluster of {self.world_size} ranks")
        return PlanCluster(cluster, self.devices)


def load_plan_cluster(spec: str | Path | Cluster | PlanCluster) -> PlanCluster:
    """A cluster (object, embedded name or YAML/JSON file) with the device of each of its ranks."""
    if isinstance(spec, PlanCluster):
        return spec
    cluster = load_cluster(spec)
    return PlanCluster(cluster, cluster.rank_devices)
