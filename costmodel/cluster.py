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
import re
import types
import typing
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

import networkx as nx
import numpy as np
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from flexcomm.costmodel.collective_libraries.fabric_calibration import FabricCalibration
from flexcomm.costmodel.documents import parse_document, read_document
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_NODES, MAX_RANKS
from flexcomm.costmodel.units import parse_bandwidth, parse_flops, parse_size, parse_time

if typing.TYPE_CHECKING:
    from flexcomm.costmodel.topologies.fabric import Fabric

Duplex = Literal["full", "half"]
TopologyKind = Literal["flat", "two-level", "ring", "fat-tree", "rail-optimized", "nvlink-domain", "torus", "graph"]
#: The kinds that build an explicit fabric (:mod:`costmodel.topologies`); the first three are the original ones.
FABRIC_KINDS = ("fat-tree", "rail-optimized", "nvlink-domain", "torus", "graph")
_KINDS_TEXT = "one of 'flat', 'two-level', 'ring', 'fat-tree', 'rail-optimized', 'nvlink-domain', 'torus', 'graph'"


# --- error translation ------------------------------------------------------------------------


class _Nothing:
    """Stands for a missing value in messages: ``got nothing``."""

    def __repr__(self) -> str:
        return "nothing"


_NOTHING = _Nothing()


class _SubfieldError(InputError):
    """Raised by model validators: ``field`` is relative to the model being validated."""


def _expected_of(parser: Callable[[str], float]) -> str:
    """The unit parser's own wording of the expected form, so messages never drift apart."""
    try:
        parser("?")
    except InputError as exc:
        return exc.expected
    raise AssertionError("parser accepted '?'")  # pragma: no cover


_PCIE_FORM = "a PCIe link such as gen4x16 (generation 1-6, width 1-32 lanes)"
_MEMORY_FORM = "a positive size such as 80GiB or 32GB"
_INT_FORM = "an integer >= 1"
_LINK_FORM = "a mapping with latency and bandwidth, e.g. {latency: 10us, bandwidth: 10Gbit/s}"

#: Expected form per file key, used for pydantic's own errors (missing, wrong type, ...).
_FORMS: dict[str, str] = {
    "name": "a non-empty string",
    "description": "a one-line string",
    "nodes": _INT_FORM,
    "devices_per_node": _INT_FORM,
    "device": "a mapping with name, peak_flops and memory, e.g. {name: A100, peak_flops: 312TFLOP/s, memory: 80GiB}",
    "peak_flops": _expected_of(parse_flops),
    "memory": _MEMORY_FORM,
    "intra_link": _LINK_FORM,
    "inter_link": _LINK_FORM,
    "latency": _expected_of(parse_time),
    "bandwidth": _expected_of(parse_bandwidth),
    "duplex": "one of 'full', 'half'",
    "topology": "a topology kind (flat, two-level, ring, fat-tree, rail-optimized, nvlink-domain, torus, graph) "
    "or a mapping such as {kind: two-level, nodes_per_switch: 4, oversubscription: 2}",
    "kind": _KINDS_TEXT,
    "nodes_per_switch": _INT_FORM,
    "oversubscription": "a number >= 1, e.g. 2 for 2:1 (fat-tree: one per switch tier, e.g. [2, 1])",
    "k": "an even integer >= 2 (the switch radix of a k-ary fat-tree; k = 8 gives 128 hosts in 3 tiers)",
    "tiers": "2 or 3 switch tiers",
    "pods": _INT_FORM,
    "leaves_per_pod": _INT_FORM,
    "hosts_per_leaf": _INT_FORM,
    "aggregations_per_pod": _INT_FORM,
    "spines": _INT_FORM,
    "domain_size": "GPUs in one NVLink domain, a multiple of devices_per_node (e.g. 72 for NVL72)",
    "scale_out": "the fabric joining the NVLink domains: a topology mapping of kind flat, two-level, fat-tree "
    "or rail-optimized",
    "dims": "the torus's size per dimension, 2 or 3 integers >= 2 such as [4, 4, 4]",
    "routing": "one of 'ecmp-hash', 'ecmp-split'",
    "ecmp_seed": "an integer >= 0",
    "links": "a mapping from link class (host, uplink, core, rail, spine, torus, scale-out) to "
    "{bandwidth: ..., latency: ..., duplex: ...}",
    "graph": "a mapping with hosts, switches and links: {hosts: [h0, h1], switches: [s0], links: "
    "[{between: [h0, s0], bandwidth: 100Gbit/s, latency: 1us}, ...]}",
    "hosts": "a list of host names, one per node, in node order",
    "switches": "a list of switch names",
    "routes": "a list of {from: HOST, to: HOST, via: [vertices in order]} entries",
    "overrides": "a list of {node: N, bandwidth: ..., latency: ...} or {between: [a, b], ...} entries",
    "node": "a node index (an integer >= 0)",
    "between": "a pair of node indices such as [2, 5]",
    "memory_bandwidth": "a device memory bandwidth such as 2039GB/s (HBM)",
    "sms": "the device's streaming multiprocessors, an integer >= 1 (A100: 108)",
    "nics_per_node": "NICs per node, an integer >= 1 (each at inter_link's bandwidth)",
    "storage_bandwidth": "the checkpoint storage's aggregate bandwidth, e.g. 10GB/s",
    "gpu_fabric": "a mapping such as {compute_capability: 90, intra: nvswitch, nvlinks_per_gpu: 18, "
    "pcie: gen5x16, nvls: true}",
    "compute_capability": "the GPU's compute capability as an integer, e.g. 80 (A100), 90 (H100), 100 (B200)",
    "intra": "one of 'nvswitch', 'nvlink-mesh', 'pcie', 'xgmi'",
    "gcn_arch": "one of 'gfx90a', 'gfx942', 'gfx950' (the AMD GPU RCCL runs on)",
    "xgmi_links_per_gpu": "xGMI links per GPU, an integer 0-16 (MI300X: 7)",
    "nccl_version": "an NCCL release from 2.19 to 2.30, e.g. 2.20.3 or 2.28",
    "network": "one of 'infiniband', 'roce', 'efa', 'slingshot', 'tcp'",
    "net_plugin_latency": "a time such as 75us (what the NCCL net plugin reports to the tuner)",
    "pcie_p2p": "true or false (GPU peer-to-peer over PCIe)",
    "nvlinks_per_gpu": "NVLinks per GPU, an integer 0-18 (A100: 12, H100: 18)",
    "pcie": _PCIE_FORM,
    "nic_pcie": _PCIE_FORM,
    "cpu": "one of 'intel', 'amd', 'arm'",
    "sockets": "CPU sockets per node, an integer 1-8",
    "nvls": "true or false (NVLink SHARP on NVSwitch, compute capability >= 90)",
    "collnet": "true or false (SHARP in the InfiniBand switches with NCCL's CollNet plugin)",
    "nvlink_domain": "GPUs sharing one NVLink domain across nodes, e.g. 72 for GB200 NVL72 (at most 576, the "
                     "NVLink Switch System's largest)",
    "library": "one of 'nccl', 'rccl'",
    "node_devices": "a list of {nodes: [2, 3], device: {name: V100, peak_flops: 125TFLOP/s, memory: 32GiB}} entries",
}


#: Keys whose meaning depends on the mapping they are in (model name, key): the same word names another thing.
_OWNED_FORMS: dict[tuple[str, str], str] = {
    ("GraphTopology", "links"): "a list of cables, at least one, such as [{between: [h0, s0], bandwidth: "
    "100Gbit/s, latency: 1us}, ...]",
    ("GraphLink", "between"): "the two vertex names the cable joins, from hosts or switches, e.g. [h0, s0]",
}


def _input_keys(name: str, info: Any) -> list[str]:
    """The keys a field accepts in a file, preferred first (``bandwidth`` before ``bandwidth_Bps``)."""
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    return [alias] if isinstance(alias, str) else [name]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Pydantic model classes mentioned in an annotation (``list[LinkOverride]`` -> LinkOverride)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) or typing.get_args(annotation):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _locate(model: type[BaseModel], loc: Sequence[int | str]
            ) -> tuple[type[BaseModel] | None, str | None, type[BaseModel] | None]:
    """Walk an error location: the model owning the last key, the last key naming a field, and the model
    that key belongs to (``links`` of a graph is not ``links`` of a topology)."""
    owner: type[BaseModel] | None = model
    key: str | None = None
    key_owner: type[BaseModel] | None = None
    for part in loc:
        if isinstance(part, int) or owner is None:
            continue
        fields = {k: (name, info) for name, info in owner.model_fields.items() for k in _input_keys(name, info)}
        if part not in fields:
            return owner, key, key_owner
        name, info = fields[part]
        key, key_owner = _input_keys(name, info)[0], owner
        inner = _models_in(info.annotation)
        owner = inner[0] if inner else None
    return owner, key, key_owner


def _known_keys(model: type[BaseModel] | None) -> str:
    if model is None:
        return "no further keys"
    return ", ".join(_input_keys(name, info)[0] for name, info in model.model_fields.items())


def _translate(exc: ValidationError, root: str, model: type[BaseModel]) -> InputError:
    """The first pydantic error as an InputError with a dotted field and the expected form."""
    err = exc.errors()[0]
    loc = [str(part) for part in err["loc"]]
    inner = (err.get("ctx") or {}).get("error")
    if isinstance(inner, _SubfieldError):
        return InputError(".".join([root, *loc, inner.field]), inner.got, inner.expected)
    if isinstance(inner, InputError):
        return InputError(".".join([root, *loc]), inner.got, inner.expected)
    owner, key, key_owner = _locate(model, err["loc"])
    field = ".".join([root, *loc])
    kind = err["type"]
    if kind == "extra_forbidden":
        return InputError(field, err.get("input"), f"no such key; known keys here: {_known_keys(owner)}")
    if not loc:
        return InputError(field, err.get("input"), f"a mapping with keys {_known_keys(model)}")
    expected = _OWNED_FORMS.get((key_owner.__name__ if key_owner else "", key or ""),
                                _FORMS.get(key or "", err["msg"]))
    return InputError(field, _NOTHING if kind == "missing" else err.get("input"), expected)


def _no_bool(value: Any) -> Any:
    """YAML's ``yes``/``true`` is never a count or a ratio; pydantic would quietly read it as 1."""
    if isinstance(value, bool):
        raise PydanticCustomError("bool_not_number", "a number, not a boolean")
    return value


class _Model(BaseModel):
    """Frozen (shared safely, caches stay valid) and strict about unknown keys (typos are errors).

    Built directly from Python a model raises pydantic's ValidationError (a ValueError); the
    file/dict entry points translate it to InputError. (Translating in ``__init__`` would make
    pydantic call it for nested models too and lose the error's location.)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")


# --- the models -------------------------------------------------------------------------------


class Device(_Model):
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

    _check_sms = field_validator("sms", mode="before")(_no_bool)

    @model_validator(mode="before")
    @classmethod
    def _from_catalog(cls, data: Any) -> Any:
        """What the file leaves out, from the device catalog (:mod:`costmodel.devices`)."""
        from flexcomm.costmodel.devices import fill

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
            raise InputError("memory", value, _MEMORY_FORM)
        return nbytes


class Link(_Model):
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


class _OptionalLinkValues(_Model):
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


class GraphLink(_Model):
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


class GraphRoute(_Model):
    """An explicit route of a ``graph`` topology (overrides shortest-path routing for that pair)."""

    model_config = ConfigDict(populate_by_name=True)
    source: str = Field(validation_alias=AliasChoices("from", "source"))
    target: str = Field(validation_alias=AliasChoices("to", "target"))
    via: list[str] = Field(default_factory=list)


class GraphTopology(_Model):
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
                raise _SubfieldError("hosts", name, "vertex names used once across hosts and switches")
            seen.add(name)
        for i, link in enumerate(self.links):
            for end in link.between:
                if end not in seen:
                    raise _SubfieldError(f"links.{i}.between", end, "a vertex listed in hosts or switches")
            if link.between[0] == link.between[1]:
                raise _SubfieldError(f"links.{i}.between", list(link.between), "two different vertices")
        for i, route in enumerate(self.routes):
            hops = [route.source, *route.via, route.target]
            for hop in hops:
                if hop not in seen:
                    raise _SubfieldError(f"routes.{i}.via", hop, "vertices listed in hosts or switches")
            if len(set(hops)) != len(hops):
                raise _SubfieldError(f"routes.{i}.via", hops, "a route without a loop (each vertex at most once)")
        return self


class Topology(_Model):
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
                                     mode="before")(_no_bool)

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
            raise _SubfieldError("nodes_per_switch", _NOTHING, "an integer >= 1 (required for two-level)")
        if kind == "fat-tree":
            if self.k is not None and self.k % 2:
                raise _SubfieldError("k", self.k, "an even integer >= 2 (k-ary fat-trees have k/2 ports up and down)")
            if self.k is None and self.hosts_per_leaf is None:
                raise _SubfieldError("k", _NOTHING, "an even radix k, or explicit counts (hosts_per_leaf, "
                                     "leaves_per_pod, spines or aggregations_per_pod)")
        if kind == "torus":
            if self.dims is None or len(self.dims) not in (2, 3) or any(
                    isinstance(d, bool) or not isinstance(d, int) or d < 2 for d in self.dims):
                raise _SubfieldError("dims", self.dims if self.dims is not None else _NOTHING,
                                     "2 or 3 integers >= 2 such as [4, 4, 4] (a dimension of 1 is no torus)")
        if kind == "nvlink-domain":
            if self.domain_size is None:
                raise _SubfieldError("domain_size", _NOTHING, "GPUs in one NVLink domain, e.g. 72")
            if self.scale_out is not None and self.scale_out.kind not in ("flat", "two-level", "fat-tree",
                                                                          "rail-optimized"):
                raise _SubfieldError("scale_out.kind", self.scale_out.kind,
                                     "one of 'flat', 'two-level', 'fat-tree', 'rail-optimized'")
        if kind == "graph" and self.graph is None:
            raise _SubfieldError("graph", _NOTHING, "hosts, switches and links of the topology")
        return self


class LinkOverride(_OptionalLinkValues):
    """Different values for one node's NIC (``node``) or for one pair of nodes (``between``)."""

    node: int | None = Field(default=None, ge=0)
    between: tuple[int, int] | None = None

    _check_node = field_validator("node", mode="before")(_no_bool)

    @field_validator("between", mode="before")
    @classmethod
    def _pair_of_ints(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            for item in value:
                _no_bool(item)
        return value

    @model_validator(mode="after")
    def _one_target_something_to_change(self) -> LinkOverride:
        if (self.node is None) == (self.between is None):
            got = {"node": self.node, "between": self.between}
            raise _SubfieldError("node", got, "exactly one of node: N or between: [a, b]")
        if self.between is not None:
            a, b = self.between
            if a < 0 or b < 0 or a == b:
                raise _SubfieldError("between", list(self.between), "two different node indices >= 0")
        if self.bandwidth_Bps is None and self.latency_s is None:
            raise _SubfieldError("bandwidth", _NOTHING, "a bandwidth and/or a latency to override")
        return self


# --- the network: one edge table for path_link, group_link and to_graph -----------------------


@dataclass(frozen=True)
class _Edge:
    bandwidth_Bps: float
    latency_s: float
    kind: str  # "nic" (host<->switch), "uplink" (leaf<->spine), "ring", "override" (between a pair)


def _host(i: int) -> str:
    return f"node{i}"


_T = TypeVar("_T")


def _pick(override: float | None, default: _T) -> float | _T:
    """An override's value where it gives one, else what was there."""
    return default if override is None else override


class _Network:
    """Edges and routes of one cluster, computed once (the cluster is frozen)."""

    def __init__(self, cluster: Cluster) -> None:
        self.kind = cluster.topology.kind
        self.nodes = cluster.nodes
        self.nodes_per_switch = cluster.topology.nodes_per_switch or cluster.nodes
        self.duplex: Duplex = cluster.inter_link.duplex
        self.uplink_Bps = cluster.uplink_bandwidth_Bps
        inter = cluster.inter_link
        self.inter_latency = inter.latency_s
        nic: dict[int, tuple[float, float]] = {}
        pair: dict[tuple[int, int], tuple[float | None, float | None]] = {}
        for o in cluster.overrides:
            if o.node is not None:
                bw, lat = nic.get(o.node, (inter.bandwidth_Bps, inter.latency_s))
                nic[o.node] = (_pick(o.bandwidth_Bps, bw), _pick(o.latency_s, lat))
            else:
                assert o.between is not None
                key = (min(o.between), max(o.between))
                bw_o, lat_o = pair.get(key, (None, None))
                pair[key] = (_pick(o.bandwidth_Bps, bw_o), _pick(o.latency_s, lat_o))
        self.nic = [nic.get(i, (inter.bandwidth_Bps, inter.latency_s)) for i in range(self.nodes)]
        self.edges: dict[tuple[str, str], _Edge] = {}
        self._build_physical(pair)
        self.virtual: set[tuple[int, int]] = set()
        for (a, b), (bw, lat) in pair.items():
            if self.kind == "ring" and self._adjacent(a, b):
                continue  # already applied to the cable in _build_physical
            route = self.physical_route(a, b)
            edge = _Edge(
                _pick(bw, min(self.edges[e].bandwidth_Bps for e in route)),
                _pick(lat, sum(self.edges[e].latency_s for e in route)),
                "override",
            )
            self.edges[(_host(a), _host(b))] = self.edges[(_host(b), _host(a))] = edge
            self.virtual.update({(a, b), (b, a)})
        self.path_cache: dict[tuple[int, int], Link] = {}
        self.group_cache: dict[object, tuple[str, Link]] = {}  # frozenset of nodes, or ("ring", ranks)
        # Per-node arrays for row(): NIC half-latency and bandwidth, leaf, ring cable a -> a+1.
        self.half_latency = np.array([lat / 2 for _, lat in self.nic])
        self.nic_bandwidth = np.array([bw for bw, _ in self.nic])
        self.leaves = np.array([self.leaf_of(i) for i in range(self.nodes)])
        if self.kind == "ring" and self.nodes > 1:
            cables = [self.edges[(_host(i), _host((i + 1) % self.nodes))] for i in range(self.nodes)]
            self.cable_latency = np.array([c.latency_s for c in cables])
            self.cable_bandwidth = np.array([c.bandwidth_Bps for c in cables])

    def _adjacent(self, a: int, b: int) -> bool:
        return (b - a) % self.nodes in (1, self.nodes - 1)

    def leaf_of(self, node: int) -> int:
        return node // self.nodes_per_switch if self.kind == "two-level" else 0

    def _build_physical(self, pair: dict[tuple[int, int], tuple[float | None, float | None]]) -> None:
        def both(u: str, v: str, edge: _Edge) -> None:
            self.edges[(u, v)] = self.edges[(v, u)] = edge

        if self.kind in ("flat", "two-level"):
            for i, (bw, lat) in enumerate(self.nic):
                switch = "switch" if self.kind == "flat" else f"leaf{self.leaf_of(i)}"
                both(_host(i), switch, _Edge(bw, lat / 2, "nic"))
            if self.kind == "two-level":
                assert self.uplink_Bps is not None
                half = self.inter_latency / 2
                for leaf in range(math.ceil(self.nodes / self.nodes_per_switch)):
                    both(f"leaf{leaf}", "spine", _Edge(self.uplink_Bps, half, "uplink"))
            return
        for i in range(self.nodes if self.nodes > 2 else self.nodes - 1):  # 2 nodes: one cable
            j = (i + 1) % self.nodes
            bw = min(self.nic[i][0], self.nic[j][0])
            lat = max(self.nic[i][1], self.nic[j][1])
            bw_o, lat_o = pair.get((min(i, j), max(i, j)), (None, None))
            both(_host(i), _host(j), _Edge(_pick(bw_o, bw), _pick(lat_o, lat), "ring"))

    def physical_route(self, a: int, b: int) -> list[tuple[str, str]]:
        """Hop-count shortest route over physical links; ring ties go clockwise."""
        if a == b:
            return []
        if self.kind == "flat":
            return [(_host(a), "switch"), ("switch", _host(b))]
        if self.kind == "two-level":
            la, lb = f"leaf{self.leaf_of(a)}", f"leaf{self.leaf_of(b)}"
            if la == lb:
                return [(_host(a), la), (la, _host(b))]
            return [(_host(a), la), (la, "spine"), ("spine", lb), (lb, _host(b))]
        n = self.nodes
        step = 1 if (b - a) % n <= (a - b) % n else -1
        route, here = [], a
        while here != b:
            nxt = (here + step) % n
            route.append((_host(here), _host(nxt)))
            here = nxt
        return route

    def route(self, a: int, b: int) -> list[tuple[str, str]]:
        if (a, b) in self.virtual:
            return [(_host(a), _host(b))]
        return self.physical_route(a, b)

    def row(self, a: int) -> tuple[np.ndarray, np.ndarray]:
        """Latency and bandwidth of path_link(a, b) for every b at once (entry a is meaningless).

        The same sums in the same order as path_link over route(a, b), vectorised so that
        group_link over k nodes costs k numpy passes instead of k^2 Python routes.
        """
        n = self.nodes
        if self.kind == "ring":
            steps = np.arange(1, n)
            cw_lat = np.cumsum(self.cable_latency[(a + steps - 1) % n])  # to a+1, a+2, ...
            cw_bw = np.minimum.accumulate(self.cable_bandwidth[(a + steps - 1) % n])
            ccw_lat = np.cumsum(self.cable_latency[(a - steps) % n])  # to a-1, a-2, ...
            ccw_bw = np.minimum.accumulate(self.cable_bandwidth[(a - steps) % n])
            d = (np.arange(n) - a) % n  # clockwise hops to each node
            clockwise = d <= n - d
            cw_i, ccw_i = np.maximum(d - 1, 0), np.minimum(n - d - 1, n - 2)
            latency = np.where(clockwise, cw_lat[cw_i], ccw_lat[ccw_i])
            bandwidth = np.where(clockwise, cw_bw[cw_i], ccw_bw[ccw_i])
        else:
            latency = self.half_latency[a] + self.half_latency
            bandwidth = np.minimum(self.nic_bandwidth[a], self.nic_bandwidth)
            if self.kind == "two-level":
                assert self.uplink_Bps is not None
                across = self.leaves != self.leaves[a]
                half = self.inter_latency / 2
                latency = np.where(across, self.half_latency[a] + half + half + self.half_latency, latency)
                bandwidth = np.where(
                    across, np.minimum(min(self.nic_bandwidth[a], self.uplink_Bps), self.nic_bandwidth), bandwidth
                )
        for x, b in self.virtual:
            if x == a:
                edge = self.edges[(_host(a), _host(b))]
                latency[b], bandwidth[b] = edge.latency_s, edge.bandwidth_Bps
        return latency, bandwidth

    def path_link(self, a: int, b: int) -> Link:
        key = (a, b)
        if key not in self.path_cache:
            edges = [self.edges[e] for e in self.route(a, b)]
            self.path_cache[key] = Link(
                latency_s=sum(e.latency_s for e in edges),
                bandwidth_Bps=min(e.bandwidth_Bps for e in edges),
                duplex=self.duplex,
            )
        return self.path_cache[key]


# --- the cluster ------------------------------------------------------------------------------


#: PCIe generation -> NCCL's per-lane factor (``kvDictPciGen`` in src/graph/topo.cc: 16 GT/s -> 120);
#: a link's bandwidth in GB/s is width * factor / 80 (Gen4 x16: 24 GB/s, Gen5 x16: 48 GB/s).
PCI_GEN_FACTOR = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}


def pcie_GBps(spec: str) -> float:
    """NCCL's bandwidth of a PCIe link written ``gen4x16`` (topo.cc: ``width*speed/80.0``)."""
    match = re.fullmatch(r"\s*gen\s*([1-6])\s*x\s*(\d{1,2})\s*", str(spec).lower())
    if not match or not 1 <= int(match.group(2)) <= 32:
        raise PydanticCustomError("pcie_form", _PCIE_FORM)
    return int(match.group(2)) * PCI_GEN_FACTOR[int(match.group(1))] / 80.0


#: Vendors as people write them (the device catalog's ``vendor``).
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "google": "Google"}
#: The vendor whose GPUs each collective library drives (``gpu_fabric.library``).
LIBRARY_VENDOR = {"nccl": "nvidia", "rccl": "amd"}
#: The largest NVLink domain one can build: NVIDIA's NVLink Switch System connects up to 576 GPUs in one
#: NVLink domain (NVIDIA GB200 NVL72 product brief and "NVLink and NVLink Switch" page: "up to 576 GPUs").
MAX_NVLINK_DOMAIN = 576


class GpuFabric(_Model):
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
                                  mode="before")(_no_bool)

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
        from flexcomm.costmodel.collective_libraries.versions import parse_version

        if isinstance(value, float):  # YAML reads 2.20 as a number
            value = f"{value:.2f}"
        parse_version(value, "nccl_version")
        return str(value)

    @model_validator(mode="after")
    def _nvlink_needs_links(self) -> GpuFabric:
        if self.library == "nccl" and self.compute_capability is None:
            raise _SubfieldError("compute_capability", None, "the NVIDIA GPU's compute capability (e.g. 90) for "
                                 "library: nccl")
        if self.library == "rccl" and self.gcn_arch is None:
            raise _SubfieldError("gcn_arch", None, "the AMD GPU's architecture (gfx90a, gfx942, gfx950) for "
                                 "library: rccl")
        if self.intra == "xgmi":
            if self.library != "rccl":
                raise _SubfieldError("intra", "xgmi", "nvswitch, nvlink-mesh or pcie for library: nccl (xgmi is "
                                     "AMD's Infinity Fabric, with library: rccl)")
            if self.xgmi_links_per_gpu == 0:
                raise _SubfieldError("xgmi_links_per_gpu", 0, "the xGMI links per GPU (>= 1) for intra: xgmi")
            return self
        if self.intra != "pcie" and self.nvlinks_per_gpu == 0:
            raise _SubfieldError("nvlinks_per_gpu", 0, f"the NVLinks per GPU (>= 1) for intra: {self.intra}")
        if self.nvls and (self.intra != "nvswitch" or (self.compute_capability or 0) < 90):
            raise _SubfieldError("nvls", True, "false unless intra is nvswitch on compute capability 90 or later")
        return self

    @property
    def gpu_pcie_GBps(self) -> float:
        return pcie_GBps(self.pcie)

    @property
    def nic_pcie_GBps(self) -> float:
        return pcie_GBps(self.nic_pcie or self.pcie)



class NodeDevices(_Model):
    """Nodes whose device differs from the cluster's ``device`` (a mixed pool: A100 nodes beside V100 nodes)."""

    nodes: list[int] = Field(min_length=1)
    device: Device

    @field_validator("nodes", mode="before")
    @classmethod
    def _node_indices(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            for item in value:
                _no_bool(item)
        return value


class Cluster(_Model):
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

    _check_counts = field_validator("nodes", "devices_per_node", "nics_per_node", mode="before")(_no_bool)

    @field_validator("nodes", mode="after")
    @classmethod
    def _nodes_within_limit(cls, value: int) -> int:
        MAX_NODES.check("nodes", value)  # before anything sized by it is built
        return value

    @model_validator(mode="after")
    def _ranks_within_limit(self) -> Cluster:
        if self.nodes * self.devices_per_node > MAX_RANKS.value:
            raise _SubfieldError("devices_per_node", self.devices_per_node,
                                 f"at most {MAX_RANKS.value:,} ranks in all, here {self.nodes:,} nodes x "
                                 f"{self.devices_per_node:,} (set {MAX_RANKS.env} to raise the limit)")
        last = self.nodes - 1
        placed: dict[int, int] = {}
        for i, entry in enumerate(self.node_devices):
            for node in entry.nodes:
                if not 0 <= node <= last:
                    raise _SubfieldError(f"node_devices.{i}.nodes", node, f"a node index 0..{last}")
                if node in placed:
                    raise _SubfieldError(f"node_devices.{i}.nodes", node, f"a node not already given a device "
                                         f"(node_devices.{placed[node]} gives node {node} one)")
                placed[node] = i
        return self

    @model_validator(mode="after")
    def _library_drives_the_devices(self) -> Cluster:
        """NCCL drives NVIDIA GPUs and RCCL AMD's: a catalog device of the other vendor under this
        ``gpu_fabric.library`` is a contradiction, refused (an H100 priced with RCCL's tuner was accepted)."""
        from flexcomm.costmodel.devices import lookup

        if self.gpu_fabric is None:
            return self
        wants = LIBRARY_VENDOR[self.gpu_fabric.library]
        for field, device in (("device.name", self.device),
                              *((f"node_devices.{i}.device.name", e.device) for i, e in enumerate(self.node_devices))):
            known = lookup(device.name)
            if known is not None and known.vendor != wants:
                raise _SubfieldError(field, device.name, f"a device {self.gpu_fabric.library.upper()} drives "
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
            raise _SubfieldError("gpu_fabric.nvlink_domain", domain, f"a multiple of devices_per_node "
                                 f"({self.devices_per_node}): an NVLink domain holds whole servers")
        size = self.topology.domain_size
        if self.topology.kind == "nvlink-domain" and size is not None and size != domain:
            raise _SubfieldError("topology.domain_size", size, f"gpu_fabric.nvlink_domain ({domain}): one NVLink "
                                 "domain size for the flow model and NCCL's (or leave one of them out)")
        return self

    @model_validator(mode="after")
    def _fabric_within_limit(self) -> Cluster:
        from flexcomm.costmodel.topologies.size import check_fabric_size

        try:
            check_fabric_size(self)  # the switches and cables a topology describes, not only its nodes
        except InputError as exc:
            raise _SubfieldError("topology", exc.got, exc.expected) from None
        return self

    @field_validator("topology", mode="before")
    @classmethod
    def _topology_shorthand(cls, value: Any) -> Any:
        """``topology: ring`` is short for ``topology: {kind: ring}``."""
        return {"kind": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _overrides_name_real_nodes(self) -> Cluster:
        if self.overrides and self.topology.kind in FABRIC_KINDS:
            raise _SubfieldError("overrides", f"{len(self.overrides)} entries", "no overrides on a "
                                 f"{self.topology.kind} topology (set its link classes in topology.links, or "
                                 "describe each cable in a graph topology)")
        last = self.nodes - 1
        for i, o in enumerate(self.overrides):
            if o.node is not None and o.node > last:
                raise _SubfieldError(f"overrides.{i}.node", o.node, f"a node index 0..{last}")
            if o.between is not None and max(o.between) > last:
                raise _SubfieldError(f"overrides.{i}.between", list(o.between), f"two different node indices 0..{last}")
        return self

    @model_validator(mode="after")
    def _calibration_made_for_these_nodes(self) -> Cluster:
        """A calibration prices the nodes it was fitted on: the same device, GPUs and NICs a node, NIC speed,
        library and transport (the node count may differ). Another cluster's is refused in one line."""
        if self.calibration is None:
            return self
        if self.gpu_fabric is None:
            raise _SubfieldError("calibration", self.calibration.made_for.cluster, "a cluster with a gpu_fabric "
                                 "section (a calibration tunes the NCCL model, which needs one)")
        mismatch = calibration_mismatch(self.calibration.made_for, self)
        if mismatch:
            raise _SubfieldError("calibration", self.calibration.made_for.cluster, f"a calibration made for these "
                                 f"nodes ({mismatch}): calibrate on this cluster's own runs")
        return self

    @model_validator(mode="after")
    def _warn_about_unknown_devices(self) -> Cluster:
        """Once the whole file is valid (a file with an error gets the error alone): a device priced with the
        conservative bandwidth says so (:mod:`costmodel.devices`)."""
        from flexcomm.costmodel.devices import warn_if_assumed

        for device in [self.device, *(entry.device for entry in self.node_devices)]:
            warn_if_assumed(device.name, device.memory_bandwidth_Bps, dict(device.sources))
        return self

    # --- construction and serialisation -----------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any) -> Cluster:
        """Validate a mapping (units allowed); any problem is an InputError with a dotted field."""
        if not isinstance(data, dict):
            raise InputError("cluster", data, f"a mapping with keys {_known_keys(cls)}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _translate(exc, "cluster", cls) from None

    @classmethod
    def from_file(cls, path: str | Path) -> Cluster:
        """Load a ``.yaml``/``.yml``/``.json`` cluster file (size- and alias-limited: :mod:`costmodel.documents`)."""
        path = Path(path)
        if path.suffix.lower() not in (".yaml", ".yml", ".json"):
            raise InputError("cluster", str(path), "a cluster file ending in .yaml, .yml or .json")
        from flexcomm.costmodel.devices import warnings_if_valid

        with warnings_if_valid():  # a file refused by its topology gets the refusal alone
            return check_topology(cls.from_dict(_resolve_extends(read_document(path, "cluster", "cluster file"),
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
    def _network(self) -> _Network:
        return _Network(self)

    @cached_property
    def fabric(self) -> Fabric:
        """Every link and route of this cluster's network (:mod:`costmodel.topologies`), built once."""
        from flexcomm.costmodel.topologies import build_fabric

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
            from flexcomm.costmodel.paths import PathPricer

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
            graph.add_node(_host(i), kind="host", index=i, devices=self.devices_per_node)
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


def cluster_names() -> list[str]:
    """Names of the clusters shipped in ``costmodel/clusters/*.yaml``."""
    folder = resources.files("flexcomm.costmodel").joinpath("clusters")
    return sorted(entry.name[: -len(".yaml")] for entry in folder.iterdir() if entry.name.endswith(".yaml"))


@cache
def _load_embedded(name: str) -> Cluster:
    text = resources.files("flexcomm.costmodel").joinpath("clusters", f"{name}.yaml").read_text(encoding="utf-8")
    data = parse_document(text, "yaml", f"embedded cluster {name}", "cluster")
    return Cluster.from_dict(_resolve_extends(data, Path("."), 0))


_MAX_EXTENDS = 8


def _another_device(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """The base's ``device`` as an ``extends`` child may build on: nothing of it when the child names another
    device (an H100's 989 TFLOP/s must not become a V100's), and not its ``peak_flops`` when the child changes
    only the precision (bf16's rate is not fp8's); the catalog fills what the child leaves out, as it does for
    a file written out whole."""
    mine, theirs = child.get("device"), base.get("device")
    if not (isinstance(mine, dict) and isinstance(theirs, dict)):
        return base
    if "name" in mine and str(mine["name"]) != str(theirs.get("name")):
        return {**base, "device": {}}
    if "precision" in mine and "peak_flops" not in mine and mine["precision"] != theirs.get("precision", "bf16"):
        return {**base, "device": {k: v for k, v in theirs.items() if k != "peak_flops"}}
    return base


def _deep_merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in child.items():
        merged[key] = (_deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict)
                       else value)
    return merged


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
    from flexcomm.costmodel.devices import lookup

    found_a, found_b = lookup(a), lookup(b)
    return found_a is None or found_b is None or found_a is found_b


def _load_calibration(data: Any, folder: Path) -> Any:
    """``calibration: FILE`` read from the folder of the document that names it (as ``extends`` paths are)."""
    if not isinstance(data, dict) or not isinstance(data.get("calibration"), str):
        return data
    path = folder / data["calibration"]
    document = read_document(path, "cluster.calibration", "calibration file")
    return {**data, "calibration": document}


def _resolve_extends(data: Any, folder: Path, depth: int) -> Any:
    """``extends: NAME-or-PATH``: the named cluster's document with this one's keys merged over it.

    Why: a validation run or a site's cluster differs from a shipped one in two or three values (node
    count, NICs); writing only those keeps the cited hardware numbers in one file. Mappings merge key by
    key, everything else replaces; a relative path is read from the extending file's folder.
    """
    data = _load_calibration(data, folder)
    if not isinstance(data, dict) or "extends" not in data:
        return data
    if depth >= _MAX_EXTENDS:
        raise InputError("cluster.extends", data["extends"], f"a chain of at most {_MAX_EXTENDS} extends (a cycle?)")
    spec = data["extends"]
    child = {k: v for k, v in data.items() if k != "extends"}
    if not isinstance(spec, str) or not spec:
        raise InputError("cluster.extends", spec, "an embedded cluster's name or a path to a cluster file")
    path = folder / spec
    if path.is_file():
        base = _resolve_extends(read_document(path, "cluster", "cluster file"), path.parent, depth + 1)
    elif spec in cluster_names():
        text = resources.files("flexcomm.costmodel").joinpath("clusters", f"{spec}.yaml").read_text(encoding="utf-8")
        base = _resolve_extends(parse_document(text, "yaml", f"embedded cluster {spec}", "cluster"), folder, depth + 1)
    else:
        raise InputError("cluster.extends", spec, f"one of {', '.join(cluster_names())} or a cluster file's path "
                         f"relative to {folder}")
    if not isinstance(base, dict):
        raise InputError("cluster.extends", spec, "a cluster file holding a mapping")
    return _deep_merge(_another_device(base, child), child)


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
