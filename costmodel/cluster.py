"""The validated description of a cluster: devices, links and the network between nodes.

A cluster is written once (YAML/JSON, with units such as ``10Gbit/s`` or ``80GiB``) and read by
every engine: the cost model asks :meth:`Cluster.group_link` which link a collective sees, the
discrete-event simulator routes flows over :meth:`Cluster.to_graph`. Both come from the same
edge table here, so a flow's path in the simulator has exactly the latency and bottleneck
bandwidth :meth:`Cluster.path_link` reports. Inside, every value is SI (bytes, bytes/s, seconds,
FLOP/s); malformed input raises :class:`~costmodel.errors.InputError` naming the dotted field,
e.g. ``cluster.inter_link.bandwidth``.

Network model (inter-node; intra-node traffic uses ``intra_link`` and is not in the graph):

* ``flat``: every node's NIC into one non-blocking switch. ``inter_link.latency`` is the whole
  NIC-switch-NIC latency, so each graph edge host<->switch carries half of the node's latency.
* ``two-level``: ``nodes_per_switch`` consecutive nodes under each leaf switch; each leaf has one
  uplink to a single spine of capacity ``nodes_per_switch * inter bandwidth / oversubscription``
  (a partly filled last leaf keeps the full uplink). Every edge carries half the inter latency,
  so nodes under one leaf see one latency and nodes under different leaves two.
* ``ring``: node i is cabled to node (i+1) % nodes (two nodes share one cable); a message to a
  non-neighbour goes hop by hop the shorter way (clockwise, i.e. increasing index, on a tie),
  paying the full latency per hop. A ring edge has the lower bandwidth and higher latency of the
  two NICs it joins.

Overrides: ``node: i`` replaces node i's NIC values (both directions). ``between: [a, b]``
replaces the end-to-end result for that pair: on a ring with a and b adjacent it changes that
cable; otherwise it adds a dedicated direct edge a<->b that carries only a<->b traffic (values
left out are those of the normal route). Overrides apply in order; a later one wins field by
field.
"""

from __future__ import annotations

import math
import operator
import typing
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
from pydantic import (
    AliasChoices,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from flexcomm.costmodel.cluster_documents import cluster_names, resolve_extends
from flexcomm.costmodel.cluster_fields import (
    SchemaModel,
    SubfieldError,
    known_keys,
    no_bool,
    translate_validation_error,
)
from flexcomm.costmodel.cluster_network import LinkNetwork, host_vertex
from flexcomm.costmodel.cluster_parts import (
    FABRIC_KINDS,
    LIBRARY_VENDOR,
    VENDOR_NAMES,
    Device,
    GpuFabric,
    Link,
    LinkOverride,
    NodeDevices,
    Topology,
)
from flexcomm.costmodel.collective_libraries.fabric_calibration import FabricCalibration
from flexcomm.costmodel.devices import lookup, warn_if_assumed, warnings_if_valid
from flexcomm.costmodel.documents import parse_document, read_document
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_NODES, MAX_RANKS
from flexcomm.costmodel.paths import PathPricer
from flexcomm.costmodel.topologies import build_fabric
from flexcomm.costmodel.topologies.size import check_fabric_size
from flexcomm.costmodel.units import parse_bandwidth

if typing.TYPE_CHECKING:
    from flexcomm.costmodel.topologies.fabric import Fabric


# --- the cluster ------------------------------------------------------------------------------


#: PCIe generation -> NCCL's per-lane factor (``kvDictPciGen`` in src/graph/topo.cc: 16 GT/s -> 120);
#: a link's bandwidth in GB/s is width * factor / 80 (Gen4 x16: 24 GB/s, Gen5 x16: 48 GB/s).
class Cluster(SchemaModel):
    """Nodes of devices (one type, or several through ``node_devices``), an intra-node link, an inter-node
    link and their topology."""

    name: str = Field(min_length=1)
    description: str = ""
    nodes: int = Field(ge=1)
    devices_per_node: int = Field(ge=1)
    device: Device
    intra_link: Link
    inter_link: Link
    topology: Topology = Field(default_factory=Topology)
    overrides: list[LinkOverride] = Field(default_factory=list)
    node_devices: list[NodeDevices] = Field(default_factory=list)
    #: NICs per node, each at ``inter_link``'s bandwidth (multi-rail nodes: DGX A100 has 8); None means 1.
    nics_per_node: int | None = Field(default=None, ge=1)
    #: Aggregate checkpoint storage bandwidth (bytes/s) for the recovery engine (:mod:`sim.recovery`); None: unknown.
    storage_bandwidth_Bps: float | None = Field(default=None, validation_alias=AliasChoices(
        "storage_bandwidth", "storage_bandwidth_Bps"))
    #: The node as NCCL's topology detection sees it; None: the NCCL-grade model cannot price this cluster.
    gpu_fabric: GpuFabric | None = None
    #: What this cluster's own nccl-tests runs taught the NCCL model (``calibration: FILE`` from
    #: ``flexcomm calibrate --cluster``; :mod:`costmodel.collective_libraries.fabric_calibration`).
    calibration: FabricCalibration | None = None

    @field_validator("storage_bandwidth_Bps", mode="before")
    @classmethod
    def _parse_storage_bandwidth(cls, value: Any) -> float | None:
        return None if value is None else parse_bandwidth(value, "storage_bandwidth")

    _check_counts = field_validator("nodes", "devices_per_node", "nics_per_node", mode="before")(no_bool)

    @field_validator("nodes", mode="after")
    @classmethod
    def _nodes_within_limit(cls, value: int) -> int:
        MAX_NODES.check("nodes", value)  # before anything sized by it is built
        return value

    @model_validator(mode="after")
    def _ranks_within_limit(self) -> Cluster:
        if self.nodes * self.devices_per_node > MAX_RANKS.value:
            raise SubfieldError("devices_per_node", self.devices_per_node,
                                 f"at most {MAX_RANKS.value:,} ranks in all, here {self.nodes:,} nodes x "
                                 f"{self.devices_per_node:,} (set {MAX_RANKS.env} to raise the limit)")
        last = self.nodes - 1
        placed: dict[int, int] = {}
        for i, entry in enumerate(self.node_devices):
            for node in entry.nodes:
                if not 0 <= node <= last:
                    raise SubfieldError(f"node_devices.{i}.nodes", node, f"a node index 0..{last}")
                if node in placed:
                    raise SubfieldError(f"node_devices.{i}.nodes", node, f"a node not already given a device "
                                         f"(node_devices.{placed[node]} gives node {node} one)")
                placed[node] = i
        return self

    @model_validator(mode="after")
    def _library_drives_the_devices(self) -> Cluster:
        """NCCL drives NVIDIA GPUs and RCCL AMD's: a catalog device of the other vendor under this
        ``gpu_fabric.library`` is a contradiction, refused (an H100 priced with RCCL's tuner was accepted)."""
        if self.gpu_fabric is None:
            return self
        wants = LIBRARY_VENDOR[self.gpu_fabric.library]
        for field, device in (("device.name", self.device),
                              *((f"node_devices.{i}.device.name", e.device) for i, e in enumerate(self.node_devices))):
            known = lookup(device.name)
            if known is not None and known.vendor != wants:
                raise SubfieldError(field, device.name, f"a device {self.gpu_fabric.library.upper()} drives "
                                     f"({VENDOR_NAMES[wants]} GPUs) under gpu_fabric.library: "
                                     f"{self.gpu_fabric.library}; {known.name} is {VENDOR_NAMES[known.vendor]}'s")
        return self

    @model_validator(mode="after")
    def _one_nvlink_domain_size(self) -> Cluster:
        """An NVLink domain holds whole servers, and the flow model and NCCL's model must see the same one
        (refused here, not when the NCCL-grade model first prices the cluster)."""
        domain = self.gpu_fabric.nvlink_domain if self.gpu_fabric is not None else None
        if domain is None:
            return self
        if domain % self.devices_per_node:
            raise SubfieldError("gpu_fabric.nvlink_domain", domain, f"a multiple of devices_per_node "
                                 f"({self.devices_per_node}): an NVLink domain holds whole servers")
        size = self.topology.domain_size
        if self.topology.kind == "nvlink-domain" and size is not None and size != domain:
            raise SubfieldError("topology.domain_size", size, f"gpu_fabric.nvlink_domain ({domain}): one NVLink "
                                 "domain size for the flow model and NCCL's (or leave one of them out)")
        return self

    @model_validator(mode="after")
    def _fabric_within_limit(self) -> Cluster:
        try:
            check_fabric_size(self)  # the switches and cables a topology describes, not only its nodes
        except InputError as exc:
            raise SubfieldError("topology", exc.got, exc.expected) from None
        return self

    @field_validator("topology", mode="before")
    @classmethod
    def _topology_shorthand(cls, value: Any) -> Any:
        """``topology: ring`` is short for ``topology: {kind: ring}``."""
        return {"kind": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _overrides_name_real_nodes(self) -> Cluster:
        if self.overrides and self.topology.kind in FABRIC_KINDS:
            raise SubfieldError("overrides", f"{len(self.overrides)} entries", "no overrides on a "
                                 f"{self.topology.kind} topology (set its link classes in topology.links, or "
                                 "describe each cable in a graph topology)")
        last = self.nodes - 1
        for i, o in enumerate(self.overrides):
            if o.node is not None and o.node > last:
                raise SubfieldError(f"overrides.{i}.node", o.node, f"a node index 0..{last}")
            if o.between is not None and max(o.between) > last:
                raise SubfieldError(f"overrides.{i}.between", list(o.between), f"two different node indices 0..{last}")
        return self

    @model_validator(mode="after")
    def _calibration_made_for_these_nodes(self) -> Cluster:
        """A calibration prices the nodes it was fitted on: the same device, GPUs and NICs a node, NIC speed,
        library and transport (the node count may differ). Another cluster's is refused in one line."""
        if self.calibration is None:
            return self
        if self.gpu_fabric is None:
            raise SubfieldError("calibration", self.calibration.made_for.cluster, "a cluster with a gpu_fabric "
                                 "section (a calibration tunes the NCCL model, which needs one)")
        mismatch = calibration_mismatch(self.calibration.made_for, self)
        if mismatch:
            raise SubfieldError("calibration", self.calibration.made_for.cluster, f"a calibration made for these "
                                 f"nodes ({mismatch}): calibrate on this cluster's own runs")
        return self

    @model_validator(mode="after")
    def _warn_about_unknown_devices(self) -> Cluster:
        """Once the whole file is valid (a file with an error gets the error alone): a device priced with the
        conservative bandwidth says so (:mod:`costmodel.devices`)."""
        for device in [self.device, *(entry.device for entry in self.node_devices)]:
            warn_if_assumed(device.name, device.memory_bandwidth_Bps, dict(device.sources))
        return self

    # --- construction and serialisation -----------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any) -> Cluster:
        """Validate a mapping (units allowed); any problem is an InputError with a dotted field."""
        if not isinstance(data, dict):
            raise InputError("cluster", data, f"a mapping with keys {known_keys(cls)}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise translate_validation_error(exc, "cluster", cls) from None

    @classmethod
    def from_file(cls, path: str | Path) -> Cluster:
        """Load a ``.yaml``/``.yml``/``.json`` cluster file (size- and alias-limited: :mod:`costmodel.documents`)."""
        path = Path(path)
        if path.suffix.lower() not in (".yaml", ".yml", ".json"):
            raise InputError("cluster", str(path), "a cluster file ending in .yaml, .yml or .json")

        with warnings_if_valid():  # a file refused by its topology gets the refusal alone
            return check_topology(cls.from_dict(resolve_extends(read_document(path, "cluster", "cluster file"),
                                                                 path.parent, 0)))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-safe dict in SI units (keys ``bandwidth_Bps``, ``latency_s``, ``memory_bytes``)."""
        # an empty node_devices list is left out, so single-device clusters serialise (and hash) as before
        return self.model_dump(mode="json", exclude_none=True, exclude=None if self.node_devices else {"node_devices"})

    def with_nodes(self, nodes: int) -> Cluster:
        """The same cluster with ``nodes`` nodes, validated again (limits, node_devices indices)."""
        return Cluster.from_dict({**self.to_dict(), "nodes": nodes})

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Cluster:
        """As pydantic's, but without the cached network of the original (its fields may change)."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop("_network", None)
        for cached in ("fabric", "_ring_cache", "_pricer"):
            copy.__dict__.pop(cached, None)
        return copy

    # --- ranks and nodes ---------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    def _check_node(self, node: Any, field: str = "node") -> int:
        try:
            index = operator.index(node)
        except TypeError:
            index = -1
        if isinstance(node, bool) or not 0 <= index < self.nodes:
            raise InputError(field, node, f"a node index 0..{self.nodes - 1} of cluster {self.name}")
        return index

    def _check_rank(self, rank: Any) -> int:
        try:
            index = operator.index(rank)
        except TypeError:
            index = -1
        if isinstance(rank, bool) or not 0 <= index < self.world_size:
            raise InputError("rank", rank, f"a rank 0..{self.world_size - 1} of cluster {self.name}")
        return index

    def node_of(self, rank: int) -> int:
        """Ranks are packed: rank r runs on node r // devices_per_node."""
        return self._check_rank(rank) // self.devices_per_node

    def ranks_on_node(self, node: int) -> list[int]:
        first = self._check_node(node) * self.devices_per_node
        return list(range(first, first + self.devices_per_node))

    # --- devices -----------------------------------------------------------------------------
    def node_device(self, node: int) -> Device:
        """The device of every rank on ``node``: the last ``node_devices`` entry naming it, else ``device``."""
        index = self._check_node(node)
        for entry in reversed(self.node_devices):
            if index in entry.nodes:
                return entry.device
        return self.device

    @property
    def rank_devices(self) -> tuple[Device, ...]:
        """The device of every rank, in rank order (ranks packed onto nodes)."""
        return tuple(self.node_device(node) for node in range(self.nodes) for _ in range(self.devices_per_node))

    @property
    def device_names(self) -> str:
        """``A100-80GB`` or, for a mixed pool, ``A100-80GB+V100-32GB`` (in node order)."""
        names = dict.fromkeys(self.node_device(node).name for node in range(self.nodes))
        return "+".join(names)

    # --- links -------------------------------------------------------------------------------
    @cached_property
    def _network(self) -> LinkNetwork:
        return LinkNetwork(self.topology, self.nodes, self.inter_link, self.uplink_bandwidth_Bps, self.overrides)

    @cached_property
    def fabric(self) -> Fabric:
        """Every link and route of this cluster's network (:mod:`costmodel.topologies`), built once."""
        return build_fabric(self)

    @property
    def uplink_bandwidth_Bps(self) -> float | None:
        """Capacity of one leaf's uplink (two-level only): nodes_per_switch * NIC / oversubscription."""
        if self.topology.kind != "two-level" or self.topology.nodes_per_switch is None:
            return None
        return self.topology.nodes_per_switch * self.inter_link.bandwidth_Bps / self.topology.oversubscription_of(0)

    def leaf_of(self, node: int) -> int:
        """The rack a node is in: its leaf switch (two-level, fat-tree, rail-optimized's rail leaves), its
        NVLink domain, its plane of a torus (first coordinate), its first switch in a graph; 0 otherwise."""
        index = self._check_node(node)
        if self.topology.kind in FABRIC_KINDS:
            return int(self.fabric.rack_of_node[index])
        return self._network.leaf_of(index)

    def node_link(self, node: int) -> Link:
        """Node's NIC link after ``node`` overrides (latency: the whole NIC-switch-NIC figure)."""
        if self.topology.kind in FABRIC_KINDS:
            graph, first = self.fabric.graph, self.fabric.endpoints[int(self.fabric.endpoint_of_rank[
                self._check_node(node) * self.devices_per_node])]
            _, data = next(iter(graph.adj[first].items()))
            return Link(latency_s=2 * data["latency_s"], bandwidth_Bps=data["bandwidth_Bps"], duplex=data["duplex"])
        bw, lat = self._network.nic[self._check_node(node)]
        return Link(latency_s=lat, bandwidth_Bps=bw, duplex=self.inter_link.duplex)

    def path_link(self, node_a: int, node_b: int) -> Link:
        """End-to-end link between two different nodes: min bandwidth and summed latency of the route.

        Without overrides: flat and two-level within a leaf give the inter latency, two-level
        across leaves twice it, a ring hops * it. The uplink's *share* under contention is not
        applied here (see :meth:`group_link`), only its capacity as an edge of the route.
        """
        a, b = self._check_node(node_a, "node_a"), self._check_node(node_b, "node_b")
        if a == b:
            raise InputError("node_b", node_b, "a node other than node_a (same-node traffic uses intra_link)")
        if self.topology.kind in FABRIC_KINDS:
            return self._fabric_link([self.path(a, b)])
        return self._network.path_link(a, b)

    def path(self, node_a: int, node_b: int) -> list[tuple[str, str]]:
        """The edges of :meth:`to_graph` a flow from node_a to node_b crosses, in order ([] if equal)."""
        a, b = self._check_node(node_a, "node_a"), self._check_node(node_b, "node_b")
        if self.topology.kind in FABRIC_KINDS:  # the first equal-cost path between the nodes' first GPUs
            if a == b:
                return []
            fabric = self.fabric
            ra, rb = a * self.devices_per_node, b * self.devices_per_node
            return list(fabric.paths(int(fabric.endpoint_of_rank[ra]), int(fabric.endpoint_of_rank[rb]))[0])
        return self._network.route(a, b)

    def _fabric_link(self, paths: Iterable[Sequence[tuple[str, str]]]) -> Link:
        """The end-to-end link of the slowest of ``paths``: highest summed latency, lowest edge bandwidth."""
        graph = self.fabric.graph
        latency, bandwidth = 0.0, math.inf
        for path in paths:
            latency = max(latency, sum(graph.edges[e]["latency_s"] for e in path))
            bandwidth = min([bandwidth, *(graph.edges[e]["bandwidth_Bps"] for e in path)])
        return Link(latency_s=latency, bandwidth_Bps=bandwidth, duplex=self.inter_link.duplex)

    def group_link(self, ranks: Iterable[int] | None = None) -> tuple[str, Link]:
        """Link class (``intra``/``inter``) and the slowest link a collective over ``ranks`` sees.

        Across nodes: the lowest bandwidth and highest latency of :meth:`path_link` over every
        ordered pair of the group's nodes; on a two-level network spanning several leaves the
        bandwidth is also capped by each leaf's uplink shared by the group's nodes under it
        (every node sending at once). ``None`` means every rank.
        """
        if ranks is None:
            nodes = frozenset(range(self.nodes))
        else:
            ranks = list(ranks)
            if not ranks:
                raise InputError("ranks", ranks, f"a non-empty list of ranks 0..{self.world_size - 1}")
            nodes = frozenset(self.node_of(r) for r in ranks)
        net = self._network
        if nodes not in net.group_cache:
            net.group_cache[nodes] = self._group_link(nodes)
        return net.group_cache[nodes]

    def _group_link(self, nodes: frozenset[int]) -> tuple[str, Link]:
        if len(nodes) == 1:
            return "intra", self.intra_link
        if self.topology.kind in FABRIC_KINDS:
            # every node of the group to and from its first one: the longest and narrowest routes (no sharing:
            # collectives on these fabrics are priced on their real paths by CostModel.on_ranks)
            first, *rest = sorted(nodes)
            return "inter", self._fabric_link(p for n in rest for p in (self.path(first, n), self.path(n, first)))
        net = self._network
        members = np.array(sorted(nodes))
        bandwidth, latency = math.inf, 0.0
        for a in members:
            row_latency, row_bandwidth = net.row(int(a))
            others = members[members != a]
            bandwidth = min(bandwidth, float(row_bandwidth[others].min()))
            latency = max(latency, float(row_latency[others].max()))
        per_leaf = Counter(net.leaf_of(n) for n in nodes)
        if self.topology.kind == "two-level" and len(per_leaf) > 1:
            assert net.uplink_Bps is not None
            bandwidth = min(bandwidth, net.uplink_Bps / max(per_leaf.values()))
        return "inter", Link(latency_s=latency, bandwidth_Bps=bandwidth, duplex=self.inter_link.duplex)

    def ring_link(self, ranks: Iterable[int] | None = None) -> tuple[str, Link]:
        """The link a ring over ``ranks`` (in that order, closing back to the first) actually sees.

        A ring only talks to neighbours, so unlike :meth:`group_link` it is priced on the hops it
        uses: latency = the slowest hop's, bandwidth = min over every edge of capacity / number of
        the ring's flows crossing it (a packed ring puts one flow on each NIC and on each leaf
        uplink per direction; a half-duplex edge carries both directions). This is what the
        simulator's max-min sharing gives a ring, so the two agree on oversubscribed and ring
        topologies too.
        """
        order = list(range(self.world_size)) if ranks is None else [self._check_rank(r) for r in ranks]
        if not order:
            raise InputError("ranks", order, f"a non-empty list of ranks 0..{self.world_size - 1}")
        key = ("ring", tuple(order))
        if self.topology.kind in FABRIC_KINDS:
            return self._fabric_ring_link(key, order)
        net = self._network
        if key in net.group_cache:
            return net.group_cache[key]
        hops = [(self.node_of(a), self.node_of(b)) for a, b in zip(order, order[1:] + order[:1], strict=True)]
        node_hops = [(a, b) for a, b in hops if a != b]
        if not node_hops:
            result = ("intra", self.intra_link)
        else:
            half = self.inter_link.duplex == "half"
            flows: Counter = Counter()
            capacity: dict[object, float] = {}
            for a, b in node_hops:
                for u, v in net.route(a, b):
                    edge_key = frozenset((u, v)) if half else (u, v)
                    flows[edge_key] += 1
                    capacity[edge_key] = net.edges[(u, v)].bandwidth_Bps
            bandwidth = min(capacity[e] / flows[e] for e in flows)
            if len(node_hops) < len(hops):  # some hops stay inside a node
                bandwidth = min(bandwidth, self.intra_link.bandwidth_Bps)
            latency = max(self.path_link(a, b).latency_s for a, b in node_hops)
            result = ("inter", Link(latency_s=latency, bandwidth_Bps=bandwidth, duplex=self.inter_link.duplex))
        net.group_cache[key] = result
        return result

    def _fabric_ring_link(self, key: tuple, order: list[int]) -> tuple[str, Link]:
        """A ring on an explicit fabric: its flows priced together on their routes (:mod:`costmodel.paths`)."""
        cache = self.__dict__.setdefault("_ring_cache", {})
        if key not in cache:

            pricer = self.__dict__.get("_pricer") or self.__dict__.setdefault("_pricer", PathPricer(self))
            islands = {int(self.fabric.island_of_rank[r]) for r in order}
            src = np.array(order, dtype=np.int64)
            if len(src) < 2:
                cache[key] = ("intra", self.intra_link)
            else:
                use = pricer.use(src, np.roll(src, -1))
                cache[key] = ("intra" if len(islands) == 1 else "inter",
                              Link(latency_s=use[2], bandwidth_Bps=pricer.rate(use), duplex=self.inter_link.duplex))
        return cache[key]

    def to_graph(self) -> nx.DiGraph:
        """Hosts ``node{i}`` and switches (``switch``, or ``leaf{j}`` + ``spine``) joined by directed edges.

        Each direction of each link is one edge with ``bandwidth_Bps``, ``latency_s``, ``name``
        (``"node3->switch"``), ``kind`` and ``duplex``. Host-switch edges carry half the NIC
        latency each way, so the latencies along :meth:`path` add up to :meth:`path_link`'s.
        """
        if self.topology.kind in FABRIC_KINDS:
            graph = self.fabric.graph.copy()
            graph.graph.update(devices_per_node=self.devices_per_node,
                               intra_bandwidth_Bps=self.intra_link.bandwidth_Bps,
                               intra_latency_s=self.intra_link.latency_s)
            return graph
        graph = nx.DiGraph(
            name=self.name,
            topology=self.topology.kind,
            devices_per_node=self.devices_per_node,
            intra_bandwidth_Bps=self.intra_link.bandwidth_Bps,
            intra_latency_s=self.intra_link.latency_s,
        )
        for i in range(self.nodes):
            graph.add_node(host_vertex(i), kind="host", index=i, devices=self.devices_per_node)
        for (u, v), edge in self._network.edges.items():
            for vertex in (u, v):
                if vertex not in graph:
                    graph.add_node(vertex, kind="switch")
            graph.add_edge(
                u,
                v,
                bandwidth_Bps=edge.bandwidth_Bps,
                latency_s=edge.latency_s,
                name=f"{u}->{v}",
                kind=edge.kind,
                duplex=self.inter_link.duplex,
            )
        return graph


# --- loading ----------------------------------------------------------------------------------


#: A host whose compute is measured, not priced (a testbed's rank, a traced host): the numbers only make a
#: valid :class:`Device` (nothing reads them, so no catalog lookup and no warning about a missing bandwidth).
MEASURED_HOST_DEVICE: dict[str, Any] = {"name": "measured-host", "peak_flops": 1e11, "memory": 2**34,
                                        "memory_bandwidth": 1e10}


def flat_hosts(ranks: int, latency_s: float, bandwidth_Bps: float, device: dict[str, Any], name: str) -> Cluster:
    """``ranks`` nodes of one ``device`` each on one flat switch, every link (latency, bandwidth): a testbed or a
    traced host's network as the cost model and the simulator see it (every collective crosses that link)."""
    link = {"latency": float(latency_s), "bandwidth": float(bandwidth_Bps)}
    return Cluster.from_dict({"name": name, "nodes": int(ranks), "devices_per_node": 1, "device": dict(device),
                              "intra_link": link, "inter_link": link, "topology": "flat"})


def check_topology(cluster: Cluster) -> Cluster:
    """``cluster`` after the checks a job would make of its topology (torus dims against the nodes, graph
    hosts against the nodes, NVLink domains against the GPUs, a fat-tree's capacity), made now.

    Why: those checks need the node count and ran only when a job first built the fabric, so ``flexcomm
    clusters FILE`` printed a cluster no job could use. The fabric built here is the one a job uses (cached on
    the cluster). Two GPUs no path joins are still refused only by a job whose ranks they are (docs/clusters.md).
    """
    if cluster.topology.kind in FABRIC_KINDS:
        cluster.fabric  # noqa: B018 - building it is the check
    return cluster


@cache
def _load_embedded(name: str) -> Cluster:
    text = resources.files("flexcomm.costmodel").joinpath("clusters", f"{name}.yaml").read_text(encoding="utf-8")
    data = parse_document(text, "yaml", f"embedded cluster {name}", "cluster")
    return Cluster.from_dict(resolve_extends(data, Path("."), 0))



def calibration_mismatch(made: Any, cluster: Cluster) -> str:
    """How the nodes a calibration was fitted on (``made``, a :class:`MadeFor`) differ from ``cluster``'s: device,
    GPUs and NICs a node, NIC speed, library, transport ('' when they are the same; node counts may differ)."""
    fabric = cluster.gpu_fabric
    if fabric is None:
        return "this cluster has no gpu_fabric"
    here = {"device": cluster.device.name, "devices_per_node": cluster.devices_per_node,
            "nics_per_node": cluster.nics_per_node or 1, "nic_bandwidth_Bps": cluster.inter_link.bandwidth_Bps,
            "library": fabric.library, "network": fabric.network}
    for key, value in here.items():
        theirs = getattr(made, key)
        same = (same_device(theirs, value) if key == "device" else
                math.isclose(theirs, value, rel_tol=1e-6) if isinstance(value, float) else theirs == value)
        if not same:
            return f"it was fitted with {key} {theirs!r}; this cluster has {value!r}"
    return ""


def same_device(a: str, b: str) -> bool:
    """Whether two names may be one device: the same catalog entry (its aliases: ``NVIDIA H100 80GB HBM3`` and
    ``H100-SXM``), or a name the catalog does not know (nothing tells them apart). Two different catalog entries
    are two devices."""
    found_a, found_b = lookup(a), lookup(b)
    return found_a is None or found_b is None or found_a is found_b


def load_cluster(spec: str | Path | Cluster) -> Cluster:
    """A Cluster from itself, a path to an existing YAML/JSON file, or an embedded cluster's name."""
    if isinstance(spec, Cluster):
        return spec
    names = cluster_names()
    if isinstance(spec, (str, Path)):
        if Path(spec).is_file():
            return Cluster.from_file(spec)
        if isinstance(spec, str) and spec in names:
            return _load_embedded(spec)
    raise InputError("cluster", spec, f"one of {', '.join(names)} or a path to a YAML/JSON cluster file")
