"""The devices a plan runs on, one per rank: a cluster plus optional per-node device types.

:class:`costmodel.cluster.Cluster` has one device type for every node. Planning for a mixed
cluster (A100 nodes next to V100 nodes) needs each rank's own peak FLOP/s and memory, so a
cluster file may add a ``node_devices`` list that this module strips before the cluster is
validated::

    node_devices:
      - nodes: [2, 3]
        device: {name: V100-32GB, peak_flops: 125TFLOP/s, memory: 32GiB}

Everything else (links, topology, overrides) stays the cluster's, so the cost model and the
simulator see the same network. :data:`MIXED_CLUSTERS` ships one such cluster by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from costmodel.cluster import Cluster, Device, embedded_clusters, load_cluster
from costmodel.errors import InputError

#: Mixed-device clusters known by name (besides the cost model's embedded clusters).
MIXED_CLUSTERS: dict[str, dict[str, Any]] = {
    "4x4-a100-v100": {
        "name": "4x4-a100-v100",
        "description": "2 nodes of 4 A100-80GB and 2 nodes of 4 V100-32GB, NVLink inside, 100 Gbit/s InfiniBand",
        "nodes": 4,
        "devices_per_node": 4,
        "device": {"name": "A100-80GB", "peak_flops": "312TFLOP/s", "memory": "80GiB"},
        "intra_link": {"latency": "3us", "bandwidth": "150GB/s"},
        "inter_link": {"latency": "5us", "bandwidth": "100Gbit/s"},
        "topology": "flat",
        "node_devices": [
            {"nodes": [2, 3], "device": {"name": "V100-32GB", "peak_flops": "125TFLOP/s", "memory": "32GiB"}},
        ],
    },
}


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


def _node_devices(entries: Any, cluster: Cluster) -> tuple[Device, ...]:
    per_node = [cluster.device] * cluster.nodes
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise InputError("cluster.node_devices", entries, "a list of {nodes: [...], device: {...}} entries")
    for i, entry in enumerate(entries):
        field = f"cluster.node_devices.{i}"
        if not isinstance(entry, dict) or set(entry) != {"nodes", "device"}:
            raise InputError(field, entry, "a mapping with exactly the keys nodes and device")
        nodes = entry["nodes"]
        if not isinstance(nodes, list) or not nodes:
            raise InputError(f"{field}.nodes", nodes, f"a non-empty list of node indices 0..{cluster.nodes - 1}")
        for node in nodes:
            if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < cluster.nodes:
                raise InputError(f"{field}.nodes", node, f"a node index 0..{cluster.nodes - 1}")
        try:
            device = Device.model_validate(entry["device"])
        except Exception as exc:  # pydantic's ValidationError or the unit parsers' InputError
            raise InputError(f"{field}.device", entry["device"],
                             "a mapping with name, peak_flops and memory, e.g. "
                             "{name: V100, peak_flops: 125TFLOP/s, memory: 32GiB}") from exc
        for node in nodes:
            per_node[node] = device
    return tuple(d for d in per_node for _ in range(cluster.devices_per_node))


def plan_cluster_from_dict(data: Any) -> PlanCluster:
    """A mapping as in a cluster file, with an optional ``node_devices`` list."""
    if not isinstance(data, dict):
        raise InputError("cluster", data, "a mapping (a cluster description)")
    data = dict(data)
    entries = data.pop("node_devices", None)
    cluster = Cluster.from_dict(data)
    return PlanCluster(cluster, _node_devices(entries, cluster))


def load_plan_cluster(spec: str | Path | Cluster | PlanCluster) -> PlanCluster:
    """An embedded cluster's name, a name in :data:`MIXED_CLUSTERS`, or a YAML/JSON file (may mix devices)."""
    if isinstance(spec, PlanCluster):
        return spec
    if isinstance(spec, Cluster):
        return PlanCluster(spec, (spec.device,) * spec.world_size)
    if isinstance(spec, str) and spec in MIXED_CLUSTERS:
        return plan_cluster_from_dict(MIXED_CLUSTERS[spec])
    path = Path(spec)
    if path.is_file() and path.suffix.lower() in (".yaml", ".yml", ".json"):
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
        except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
            raise InputError("cluster", str(path), f"a readable YAML/JSON cluster file ({exc})") from None
        if isinstance(data, dict) and "node_devices" in data:
            return plan_cluster_from_dict(data)
    try:
        return load_plan_cluster(load_cluster(spec))
    except InputError as exc:
        if exc.field != "cluster":
            raise
        names = ", ".join([*embedded_clusters(), *MIXED_CLUSTERS])
        raise InputError("cluster", spec, f"one of {names} or a path to a YAML/JSON cluster file") from None
