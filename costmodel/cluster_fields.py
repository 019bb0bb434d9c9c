"""How a cluster document's mistakes read: one line naming the dotted field and the form it expects.

Why its own module: pydantic reports errors in its own words and locations; every model of the cluster schema
(:mod:`costmodel.cluster_parts`, :mod:`costmodel.cluster`) derives from :class:`SchemaModel` here, which translates them
into :class:`~costmodel.errors.InputError` so that ``cluster.inter_link.bandwidth`` is named, not a pydantic path.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_bandwidth, parse_flops, parse_time

if typing.TYPE_CHECKING:
    pass


# --- error translation ------------------------------------------------------------------------


class _Nothing:
    """Stands for a missing value in messages: ``got nothing``."""

    def __repr__(self) -> str:
        return "nothing"


NOTHING = _Nothing()


class SubfieldError(InputError):
    """Raised by model validators: ``field`` is relative to the model being validated."""


def _expected_of(parser: Callable[[str], float]) -> str:
    """The unit parser's own wording of the expected form, so messages never drift apart."""
    try:
        parser("?")
    except InputError as exc:
        return exc.expected
    raise AssertionError("parser accepted '?'")  # pragma: no cover


PCIE_FORM = "a PCIe link such as gen4x16 (generation 1-6, width 1-32 lanes)"
MEMORY_FORM = "a positive size such as 80GiB or 32GB"
_INT_FORM = "an integer >= 1"
_LINK_FORM = "a mapping with latency and bandwidth, e.g. {latency: 10us, bandwidth: 10Gbit/s}"

#: Expected form per file key, used for pydantic's own errors (missing, wrong type, ...).
#: The topology kinds as an error message lists them.
KINDS_TEXT = "one of 'flat', 'two-level', 'ring', 'fat-tree', 'rail-optimized', 'nvlink-domain', 'torus', 'graph'"

_FORMS: dict[str, str] = {
    "name": "a non-empty string",
    "description": "a one-line string",
    "nodes": _INT_FORM,
    "devices_per_node": _INT_FORM,
    "device": "a mapping with name, peak_flops and memory, e.g. {name: A100, peak_flops: 312TFLOP/s, memory: 80GiB}",
    "peak_flops": _expected_of(parse_flops),
    "memory": MEMORY_FORM,
    "intra_link": _LINK_FORM,
    "inter_link": _LINK_FORM,
    "latency": _expected_of(parse_time),
    "bandwidth": _expected_of(parse_bandwidth),
    "duplex": "one of 'full', 'half'",
    "topology": "a topology kind (flat, two-level, ring, fat-tree, rail-optimized, nvlink-domain, torus, graph) "
    "or a mapping such as {kind: two-level, nodes_per_switch: 4, oversubscription: 2}",
    "kind": KINDS_TEXT,
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
    "pcie": PCIE_FORM,
    "nic_pcie": PCIE_FORM,
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


def known_keys(model: type[BaseModel] | None) -> str:
    if model is None:
        return "no further keys"
    return ", ".join(_input_keys(name, info)[0] for name, info in model.model_fields.items())


def translate_validation_error(exc: ValidationError, root: str, model: type[BaseModel]) -> InputError:
    """The first pydantic error as an InputError with a dotted field and the expected form."""
    err = exc.errors()[0]
    loc = [str(part) for part in err["loc"]]
    inner = (err.get("ctx") or {}).get("error")
    if isinstance(inner, SubfieldError):
        return InputError(".".join([root, *loc, inner.field]), inner.got, inner.expected)
    if isinstance(inner, InputError):
        return InputError(".".join([root, *loc]), inner.got, inner.expected)
    owner, key, key_owner = _locate(model, err["loc"])
    field = ".".join([root, *loc])
    kind = err["type"]
    if kind == "extra_forbidden":
        return InputError(field, err.get("input"), f"no such key; known keys here: {known_keys(owner)}")
    if not loc:
        return InputError(field, err.get("input"), f"a mapping with keys {known_keys(model)}")
    expected = _OWNED_FORMS.get((key_owner.__name__ if key_owner else "", key or ""),
                                _FORMS.get(key or "", err["msg"]))
    return InputError(field, NOTHING if kind == "missing" else err.get("input"), expected)


def no_bool(value: Any) -> Any:
    """YAML's ``yes``/``true`` is never a count or a ratio; pydantic would quietly read it as 1."""
    if isinstance(value, bool):
        raise PydanticCustomError("bool_not_number", "a number, not a boolean")
    return value


class SchemaModel(BaseModel):
    """Frozen (shared safely, caches stay valid) and strict about unknown keys (typos are errors).

    Built directly from Python a model raises pydantic's ValidationError (a ValueError); the
    file/dict entry points translate it to InputError. (Translating in ``__init__`` would make
    pydantic call it for nested models too and lose the error's location.)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")


