"""The parts a cluster is written from: devices, links, topologies, overrides and the GPU node as NCCL sees it.

Each part validates its own values (units parsed to SI, forms named in errors); :class:`costmodel.cluster.Cluster`
puts them together and checks what needs the whole (node counts, NVLink domains, calibrations).
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from flexcomm.costmodel.cluster_fields import MEMORY_FORM, NOTHING, PCIE_FORM, SchemaModel, SubfieldError, no_bool
from flexcomm.costmodel.collective_libraries.versions import parse_version
from flexcomm.costmodel.devices import fill
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_bandwidth, parse_flops, parse_size, parse_time

Duplex = Literal["full", "half"]
TopologyKind = Literal["flat", "two-level", "ring", "fat-tree", "rail-optimized", "nvlink-domain", "torus", "graph"]
#: The kinds that build an explicit fabric (:mod:`costmodel.topologies`); the first three are the original ones.
FABRIC_KINDS = ("fat-tree", "rail-optimized", "nvlink-domain", "torus", "graph")


# --- the models -------------------------------------------------------------------------------


class Device(SchemaModel):
    """One accelerator: its peak rate (for compute time) and memory (for what fits).

    Optional, for the transformer planner's roofline (:mod:`planner.llm.timing`): ``memory_bandwidth``
    (HBM bytes/s: memory-bound kernels) and ``sms`` (streaming multiprocessors: wave quantization of GEMMs).
    """

    name: str
    peak_flops: float
    memory_bytes: float = Field(validation_alias=AliasChoices("memory", "memory_bytes"))
    memory_bandwidth_Bps: float | None = Field(default=None, validation_alias=AliasChoices(
        "memory_bandwidth", "memory_bandwidth_Bps"))
    sms: int | None = Field(default=None, ge=1)
    #: the precision whose catalog rate ``peak_flops`` is when the file leaves it out (fp32, tf32, bf16, fp16, fp8)
    precision: str = "bf16"
    #: where each value came from: ``file``, ``catalog <device>: <datasheet>`` or ``conservative`` (see
    #: :mod:`costmodel.devices`); filled when the device is read (provenance, not part of the device's identity:
    #: two devices with the same values are equal wherever their values came from)
    sources: dict[str, str] = Field(default_factory=dict, repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Device):
            return NotImplemented
        return self.model_dump(exclude={"sources"}) == other.model_dump(exclude={"sources"})

    def __hash__(self) -> int:
        return hash((self.name, self.peak_flops, self.memory_bytes, self.memory_bandwidth_Bps, self.sms,
                     self.precision))

    _check_sms = field_validator("sms", mode="before")(no_bool)

    @model_validator(mode="before")
    @classmethod
    def _from_catalog(cls, data: Any) -> Any:
        """What the file leaves out, from the device catalog (:mod:`costmodel.devices`)."""

        names = {name: tuple(field.validation_alias.choices) if isinstance(field.validation_alias, AliasChoices)
                 else (name,) for name, field in cls.model_fields.items()}
        return fill(data, names)

    @field_validator("memory_bandwidth_Bps")
    @classmethod
    def _positive_bandwidth(cls, value: float | None) -> float | None:
        if value is not None and not value > 0:
            raise InputError("memory_bandwidth", value, "a positive bandwidth such as 2TB/s")
        return value

    @field_validator("memory_bandwidth_Bps", mode="before")
    @classmethod
    def _parse_memory_bandwidth(cls, value: Any) -> float | None:
        return None if value is None else parse_bandwidth(value, "memory_bandwidth")

    @field_validator("peak_flops", mode="before")
    @classmethod
    def _parse_flops(cls, value: Any) -> float:
        return parse_flops(value, "peak_flops")

    @field_validator("memory_bytes", mode="before")
    @classmethod
    def _parse_memory(cls, value: Any) -> float:
        try:
            nbytes = parse_size(value, "memory")
        except InputError:
            nbytes = 0.0
        if nbytes <= 0:  # a device without memory is a typo, not a device
            raise InputError("memory", value, MEMORY_FORM)
        return nbytes


class Link(SchemaModel):
    """A link of the alpha-beta model: ``alpha`` seconds per message, ``beta`` seconds per byte."""

    latency_s: float = Field(validation_alias=AliasChoices("latency", "latency_s"))
    bandwidth_Bps: float = Field(validation_alias=AliasChoices("bandwidth", "bandwidth_Bps"))
    duplex: Duplex = "full"

    @field_validator("latency_s", mode="before")
    @classmethod
    def _parse_latency(cls, value: Any) -> float:
        return parse_time(value, "latency")

    @field_validator("bandwidth_Bps", mode="before")
    @classmethod
    def _parse_bandwidth(cls, value: Any) -> float:
        return parse_bandwidth(value, "bandwidth")

    @property
    def alpha(self) -> float:
        """Seconds per message (the latency)."""
        return self.latency_s

    @property
    def beta(self) -> float:
        """Seconds per byte (1 / bandwidth)."""
        return 1.0 / self.bandwidth_Bps


class _OptionalLinkValues(SchemaModel):
    """A bandwidth and a latency that may each be left out (the rest of the file says what fills them)."""

    bandwidth_Bps: float | None = Field(default=None, validation_alias=AliasChoices("bandwidth", "bandwidth_Bps"))
    latency_s: float | None = Field(default=None, validation_alias=AliasChoices("latency", "latency_s"))

    @field_validator("latency_s", mode="before")
    @classmethod
    def _parse_latency(cls, value: Any) -> float | None:
        return None if value is None else parse_time(value, "latency")

    @field_validator("bandwidth_Bps", mode="before")
    @classmethod
    def _parse_bandwidth(cls, value: Any) -> float | None:
        return None if value is None else parse_bandwidth(value, "bandwidth")


class LinkSpec(_OptionalLinkValues):
    """One class of a topology's links, every value optional (the topology's documented default fills it)."""

    duplex: Duplex | None = None


class GraphLink(SchemaModel):
    """One cable of a ``graph`` topology between two named vertices."""

    between: tuple[str, str]
    bandwidth_Bps: float = Field(validation_alias=AliasChoices("bandwidth", "bandwidth_Bps"))
    latency_s: float = Field(validation_alias=AliasChoices("latency", "latency_s"))
    duplex: Duplex = "full"

    @field_validator("latency_s", mode="before")
    @classmethod
    def _parse_latency(cls, value: Any) -> float:
        seconds = parse_time(value, "latency")
        if seconds <= 0:
            raise InputError("latency", value, "a positive latency such as 1us")
        return seconds

    @field_validator("bandwidth_Bps", mode="before")
    @classmethod
    def _parse_bandwidth(cls, value: Any) -> float:
        return parse_bandwidth(value, "bandwidth")


class GraphRoute(SchemaModel):
    """An explicit route of a ``graph`` topology (overrides shortest-path routing for that pair)."""

    model_config = ConfigDict(populate_by_name=True)
    source: str = Field(validation_alias=AliasChoices("from", "source"))
    target: str = Field(validation_alias=AliasChoices("to", "target"))
    via: list[str] = Field(default_factory=list)


class GraphTopology(SchemaModel):
    """Any wiring from a file: hosts (one per node, in node order), switches, cables, optional routes."""

    hosts: list[str] = Field(min_length=1)
    switches: list[str] = Field(default_factory=list)
    links: list[GraphLink] = Field(min_length=1)
    routes: list[GraphRoute] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names_are_known(self) -> GraphTopology:
        names = [*self.hosts, *self.switches]
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise SubfieldError("hosts", name, "vertex names used once across hosts and switches")
            seen.add(name)
        for i, link in enumerate(self.links):
            for end in link.between:
                if end not in seen:
                    raise SubfieldError(f"links.{i}.between", end, "a vertex listed in hosts or switches")
            if link.between[0] == link.between[1]:
                raise SubfieldError(f"links.{i}.between", list(link.between), "two different vertices")
        for i, route in enumerate(self.routes):
            hops = [route.source, *route.via, route.target]
            for hop in hops:
                if hop not in seen:
                    raise SubfieldError(f"routes.{i}.via", hop, "vertices listed in hosts or switches")
            if len(set(hops)) != len(hops):
                raise SubfieldError(f"routes.{i}.via", hops, "a route without a loop (each vertex at most once)")
        return self


class Topology(SchemaModel):
    """How nodes are wired. The original kinds: one switch (``flat``), leaf switches under a spine
    (``two-level``), a ring of cables (``ring``); the explicit fabrics of :mod:`costmodel.topologies`:
    ``fat-tree``, ``rail-optimized``, ``nvlink-domain``, ``torus`` and ``graph``.

    Fields a kind does not use are kept but ignored, so switching ``kind`` in a file is a one-word edit.
    """

    kind: TopologyKind = "flat"
    nodes_per_switch: int | None = Field(default=None, ge=1)
    oversubscription: float | list[float] = 1.0
    k: int | None = Field(default=None, ge=2)
    tiers: int | None = Field(default=None, ge=2, le=3)
    pods: int | None = Field(default=None, ge=1)
    leaves_per_pod: int | None = Field(default=None, ge=1)
    hosts_per_leaf: int | None = Field(default=None, ge=1)
    aggregations_per_pod: int | None = Field(default=None, ge=1)
    spines: int | None = Field(default=None, ge=1)
    domain_size: int | None = Field(default=None, ge=1)
    scale_out: Topology | None = None
    dims: list[int] | None = None
    graph: GraphTopology | None = None
    routing: Literal["ecmp-hash", "ecmp-split"] = "ecmp-hash"
    ecmp_seed: int = Field(default=0, ge=0)
    links: dict[str, LinkSpec] = Field(default_factory=dict)

    _check_numbers = field_validator("nodes_per_switch", "k", "tiers", "pods", "leaves_per_pod", "hosts_per_leaf",
                                     "aggregations_per_pod", "spines", "domain_size", "ecmp_seed",
                                     mode="before")(no_bool)

    @field_validator("scale_out", mode="before")
    @classmethod
    def _scale_out_shorthand(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value

    @field_validator("oversubscription", mode="after")
    @classmethod
    def _at_least_one(cls, value: float | list[float]) -> float | list[float]:
        for ratio in value if isinstance(value, list) else [value]:
            if not (math.isfinite(ratio) and ratio >= 1):
                raise InputError("oversubscription", value, "a number >= 1, e.g. 2 for 2:1 (fat-tree: one per tier)")
        return value

    def oversubscription_of(self, tier: int) -> float:
        """The ratio of switch tier ``tier`` (0: the leaves' uplinks); one number applies to every tier."""
        value = self.oversubscription
        if isinstance(value, list):
            return value[tier] if tier < len(value) else 1.0
        return value if tier == 0 else 1.0

    @model_validator(mode="after")
    def _kind_needs(self) -> Topology:
        kind = self.kind
        if kind == "two-level" and self.nodes_per_switch is None:
            raise SubfieldError("nodes_per_switch", NOTHING, "an integer >= 1 (required for two-level)")
        if kind == "fat-tree":
            if self.k is not None and self.k % 2:
                raise SubfieldError("k", self.k, "an even integer >= 2 (k-ary fat-trees have k/2 ports up and down)")
            if self.k is None and self.hosts_per_leaf is None:
                raise SubfieldError("k", NOTHING, "an even radix k, or explicit counts (hosts_per_leaf, "
                                     "leaves_per_pod, spines or aggregations_per_pod)")
        if kind == "torus":
            if self.dims is None or len(self.dims) not in (2, 3) or any(
                    isinstance(d, bool) or not isinstance(d, int) or d < 2 for d in self.dims):
                raise SubfieldError("dims", self.dims if self.dims is not None else NOTHING,
                                     "2 or 3 integers >= 2 such as [4, 4, 4] (a dimension of 1 is no torus)")
        if kind == "nvlink-domain":
            if self.domain_size is None:
                raise SubfieldError("domain_size", NOTHING, "GPUs in one NVLink domain, e.g. 72")
            if self.scale_out is not None and self.scale_out.kind not in ("flat", "two-level", "fat-tree",
                                                                          "rail-optimized"):
                raise SubfieldError("scale_out.kind", self.scale_out.kind,
                                     "one of 'flat', 'two-level', 'fat-tree', 'rail-optimized'")
        if kind == "graph" and self.graph is None:
            raise SubfieldError("graph", NOTHING, "hosts, switches and links of the topology")
        return self


class LinkOverride(_OptionalLinkValues):
    """Different values for one node's NIC (``node``) or for one pair of nodes (``between``)."""

    node: int | None = Field(default=None, ge=0)
    between: tuple[int, int] | None = None

    _check_node = field_validator("node", mode="before")(no_bool)

    @field_validator("between", mode="before")
    @classmethod
    def _pair_of_ints(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            for item in value:
                no_bool(item)
        return value

    @model_validator(mode="after")
    def _one_target_something_to_change(self) -> LinkOverride:
        if (self.node is None) == (self.between is None):
            got = {"node": self.node, "between": self.between}
            raise SubfieldError("node", got, "exactly one of node: N or between: [a, b]")
        if self.between is not None:
            a, b = self.between
            if a < 0 or b < 0 or a == b:
                raise SubfieldError("between", list(self.between), "two different node indices >= 0")
        if self.bandwidth_Bps is None and self.latency_s is None:
            raise SubfieldError("bandwidth", NOTHING, "a bandwidth and/or a latency to override")
        return self



PCI_GEN_FACTOR = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}


def pcie_GBps(spec: str) -> float:
    """NCCL's bandwidth of a PCIe link written ``gen4x16`` (topo.cc: ``width*speed/80.0``)."""
    match = re.fullmatch(r"\s*gen\s*([1-6])\s*x\s*(\d{1,2})\s*", str(spec).lower())
    if not match or not 1 <= int(match.group(2)) <= 32:
        raise PydanticCustomError("pcie_form", PCIE_FORM)
    return int(match.group(2)) * PCI_GEN_FACTOR[int(match.group(1))] / 80.0


#: Vendors as people write them (the device catalog's ``vendor``).
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "google": "Google"}
#: The vendor whose GPUs each collective library drives (``gpu_fabric.library``).
LIBRARY_VENDOR = {"nccl": "nvidia", "rccl": "amd"}
#: The largest NVLink domain one can build: NVIDIA's NVLink Switch System connects up to 576 GPUs in one
#: NVLink domain (NVIDIA GB200 NVL72 product brief and "NVLink and NVLink Switch" page: "up to 576 GPUs").
MAX_NVLINK_DOMAIN = 576


class GpuFabric(SchemaModel):
    """What NCCL's topology detection would find inside a node: GPU generation, NVLink, PCIe, CPU.

    Only the NCCL-grade model (:mod:`costmodel.collective_libraries.topology`) reads it; the alpha-beta formulas keep
    using ``intra_link``. NIC count and speed come from ``nics_per_node`` and ``inter_link``.
    """

    #: the NVIDIA GPU's compute capability (80 A100, 90 H100, 100 B200); an AMD GPU names ``gcn_arch`` instead
    compute_capability: int | None = Field(default=None, ge=70, le=120)
    #: the AMD GPU's architecture as RCCL reads it: gfx90a (MI200), gfx942 (MI300X/MI325X), gfx950 (MI350X)
    gcn_arch: Literal["gfx90a", "gfx942", "gfx950"] | None = None
    #: nvswitch (every GPU's links into NVSwitches: DGX/HGX), nvlink-mesh (point-to-point links: DGX-1's
    #: hybrid cube mesh, NVLink bridges), pcie (no NVLink: GPUs talk through PCIe / host memory), xgmi (AMD
    #: Infinity Fabric: every GPU linked to every other, MI300X platforms).
    intra: Literal["nvswitch", "nvlink-mesh", "pcie", "xgmi"]
    #: xGMI links per GPU (intra: xgmi; 7 on an 8-GPU MI300X platform)
    xgmi_links_per_gpu: int = Field(default=0, ge=0, le=16)
    nvlinks_per_gpu: int = Field(default=0, ge=0, le=18)
    #: the GPU's own PCIe link and the NIC's (``gen4x16``), as NCCL reads them from sysfs
    pcie: str = "gen4x16"
    nic_pcie: str | None = None
    cpu: Literal["intel", "amd", "arm"] = "intel"
    sockets: int = Field(default=2, ge=1, le=8)
    nvls: bool = False  # NVLink SHARP (NVSwitch multicast, Hopper and later)
    collnet: bool = False  # SHARP in the InfiniBand switches, with NCCL's CollNet plugin
    #: GPUs in one NVLink domain (multi-node NVLink, GB200 NVL72: 72); None: the node's GPUs
    nvlink_domain: int | None = Field(default=None, ge=1, le=MAX_NVLINK_DOMAIN)
    library: Literal["nccl", "rccl"] = "nccl"
    #: the library's release (``2.20.3``, ``2.28``): its tuner constants, algorithms and channel limits
    #: (:mod:`costmodel.collective_libraries.versions`); None: the newest modelled
    nccl_version: str | None = None
    #: how the nodes' NICs talk (:mod:`costmodel.collective_libraries.transports`): InfiniBand, RoCE,
    #: AWS EFA (through aws-ofi-nccl), HPE Slingshot (through libfabric), or TCP sockets
    network: Literal["infiniband", "roce", "efa", "slingshot", "tcp"] = "infiniband"
    #: what the NCCL net plugin reports as its latency (NCCL's tuner adds it per network step when choosing);
    #: None: the transport's (0 for InfiniBand, RoCE, sockets; aws-ofi-nccl's 75 us for EFA)
    net_plugin_latency_s: float | None = Field(default=None, validation_alias=AliasChoices(
        "net_plugin_latency", "net_plugin_latency_s"))
    #: GPU peer-to-peer over PCIe (off on GeForce cards' stock drivers: NCCL then goes through host memory)
    pcie_p2p: bool = True

    _check_ints = field_validator("compute_capability", "nvlinks_per_gpu", "xgmi_links_per_gpu", "sockets",
                                  "nvlink_domain",
                                  mode="before")(no_bool)

    @field_validator("pcie", "nic_pcie", mode="after")
    @classmethod
    def _pcie_form(cls, value: str | None) -> str | None:
        if value is not None:
            pcie_GBps(value)
        return value

    @field_validator("net_plugin_latency_s", mode="before")
    @classmethod
    def _plugin_latency(cls, value: Any) -> Any:
        return None if value is None else parse_time(value, "net_plugin_latency")

    @field_validator("nccl_version", mode="before")
    @classmethod
    def _known_version(cls, value: Any) -> Any:
        if value is None:
            return None

        if isinstance(value, float):  # YAML reads 2.20 as a number
            value = f"{value:.2f}"
        parse_version(value, "nccl_version")
        return str(value)

    @model_validator(mode="after")
    def _nvlink_needs_links(self) -> GpuFabric:
        if self.library == "nccl" and self.compute_capability is None:
            raise SubfieldError("compute_capability", None, "the NVIDIA GPU's compute capability (e.g. 90) for "
                                 "library: nccl")
        if self.library == "rccl" and self.gcn_arch is None:
            raise SubfieldError("gcn_arch", None, "the AMD GPU's architecture (gfx90a, gfx942, gfx950) for "
                                 "library: rccl")
        if self.intra == "xgmi":
            if self.library != "rccl":
                raise SubfieldError("intra", "xgmi", "nvswitch, nvlink-mesh or pcie for library: nccl (xgmi is "
                                     "AMD's Infinity Fabric, with library: rccl)")
            if self.xgmi_links_per_gpu == 0:
                raise SubfieldError("xgmi_links_per_gpu", 0, "the xGMI links per GPU (>= 1) for intra: xgmi")
            return self
        if self.intra != "pcie" and self.nvlinks_per_gpu == 0:
            raise SubfieldError("nvlinks_per_gpu", 0, f"the NVLinks per GPU (>= 1) for intra: {self.intra}")
        if self.nvls and (self.intra != "nvswitch" or (self.compute_capability or 0) < 90):
            raise SubfieldError("nvls", True, "false unless intra is nvswitch on compute capability 90 or later")
        return self

    @property
    def gpu_pcie_GBps(self) -> float:
        return pcie_GBps(self.pcie)

    @property
    def nic_pcie_GBps(self) -> float:
        return pcie_GBps(self.nic_pcie or self.pcie)



class NodeDevices(SchemaModel):
    """Nodes whose device differs from the cluster's ``device`` (a mixed pool: A100 nodes beside V100 nodes)."""

    nodes: list[int] = Field(min_length=1)
    device: Device

    @field_validator("nodes", mode="before")
    @classmethod
    def _node_indices(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            for item in value:
                no_bool(item)
        return value
