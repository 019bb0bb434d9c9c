"""Operator graphs of real torch models, traced with torch.fx on the ``meta`` device.

Interface (what :mod:`planner` and :mod:`placement` rely on): ``build_graph(name, *,
batch_size=32, **options) -> networkx.DiGraph`` for any name in :data:`GRAPH_NAMES` (unknown ->
``InputError`` on field ``model``). Each node is one traced op (fx node name) with ``kind``
("conv2d", "linear", "matmul", "add", "cat", "view", ...), ``flops`` (forward FLOPs for the whole
batch, 2 per multiply-accumulate, counted by ``torch.utils.flop_counter``), ``param_bytes`` (the
parameters the op reads, each tied parameter counted once), ``grad_bytes`` (= param_bytes, fp32
gradients), ``activation_bytes`` (bytes of its output for the whole batch), ``order`` (its index
in the traced topological order), ``module`` (the owning module's dotted path), ``gemms`` and
``memory_kernels`` (the GEMM shapes and other kernels' element accesses it runs at the graph's batch,
:mod:`costmodel.torch_kernels`) and, once calibrated, ``measured_s`` (forward seconds at the graph's
batch). Each edge carries ``bytes``, the tensor bytes flowing from producer to consumer. Graph
attributes: ``name``, ``batch_size``, ``parameters`` (total count), ``options``. :func:`op_time_s`
prices one op's forward on a device (FLOPs / (efficiency x peak), or the calibrated median),
:func:`op_step_s` its forward and backward on a device as ``simulate`` prices a layer,
:func:`calibrate_op_times` attaches measured medians, and :func:`measure_op_times` times the real fx
graph op by op on this CPU.

Why fx on meta tensors: tracing keeps the true dataflow (residual adds, Inception's branches,
tied weights) instead of a module list, and meta tensors carry shapes without storage, so a
multi-billion-parameter GPT is traced in seconds with no memory. Parameter reads (``get_attr``)
are folded into the op that consumes them and shape arithmetic (``size``) is dropped, so every
node is a tensor-producing op.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx
import torch
import torch.fx as fx
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.bounded_stream import read_json_bounded
from flexcomm.costmodel.compute import DEFAULT_EFFICIENCY
from flexcomm.costmodel.device_compute import DeviceCompute, unshaped_flops
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_DOCUMENT_BYTES
from flexcomm.costmodel.torch_kernels import KernelCounter, KernelTally
from flexcomm.costmodel.units import parse_flops
from flexcomm.planner import zoo
from flexcomm.workloads.models import ECAResNet
from flexcomm.workloads.names import FACTORY_FORM, is_factory_reference
from flexcomm.workloads.user_model import build_user_model, fenced

#: Ops that return a view of their input (no new storage): they carry no activation memory.
VIEW_KINDS = frozenset({"view", "reshape", "transpose", "permute", "getitem", "flatten", "split", "squeeze",
                        "unsqueeze", "expand", "contiguous", "chunk", "t"})

#: Ops whose work and parameters tensor parallelism splits (Megatron-style column/row sharding).
SHARDABLE_KINDS = frozenset({"linear", "conv2d", "conv1d", "matmul", "bmm", "embedding"})


@dataclass(frozen=True)
class _Spec:
    factory: Callable[..., nn.Module]
    options: dict[str, Any]  # option name -> default
    input_of: Callable[[dict[str, Any], int, torch.device], Any]
    description: str
    #: what a user's model was assumed to take (``workloads.user_model``'s words); empty for the zoo's graphs
    input_text: Callable[[], str] = lambda: ""


def _image(opts: dict[str, Any], batch: int, device: torch.device) -> torch.Tensor:
    return torch.randn(batch, 3, opts["image_size"], opts["image_size"], device=device)


def _tokens(opts: dict[str, Any], batch: int, device: torch.device) -> torch.Tensor:
    return torch.randint(0, opts["vocab"], (batch, opts["seq_len"]), device=device)


_SPECS: dict[str, _Spec] = {
    "resnet18": _Spec(lambda image_size: zoo.ImageNetResNet(18), {"image_size": 224}, _image,
                      "torchvision-layout ResNet-18, 224px"),
    "resnet50": _Spec(lambda image_size: zoo.ImageNetResNet(50), {"image_size": 224}, _image,
                      "torchvision-layout ResNet-50, 224px"),
    "eca-resnet50": _Spec(lambda image_size: zoo.ImageNetResNet(50, eca=True), {"image_size": 224}, _image,
                          "ECA-ResNet-50 (k = 3, 5, 5, 7), 224px"),
    "eca-resnet20": _Spec(lambda image_size: ECAResNet(depth=20, width=16), {"image_size": 32}, _image,
                          "the workloads' CIFAR ECA-ResNet-20 (width 16), 32px"),
    "gpt": _Spec(lambda layers, hidden, heads, seq_len, vocab: zoo.GPT(layers, hidden, heads, seq_len, vocab),
                 {"layers": 12, "hidden": 768, "heads": 12, "seq_len": 1024, "vocab": 50257}, _tokens,
                 "GPT-2-style decoder (default: GPT-2 small, 124M)"),
    "inception": _Spec(lambda image_size: zoo.GoogLeNet(), {"image_size": 224}, _image,
                       "GoogLeNet / Inception v1 (four-branch blocks), 224px"),
}

#: Names :func:`build_graph` accepts.
GRAPH_NAMES: tuple[str, ...] = tuple(_SPECS)


def graph_options(name: str) -> dict[str, Any]:
    """The options (and their defaults) graph ``name`` takes."""
    return dict(_spec(name).options)


def _spec(name: str) -> _Spec:
    if is_factory_reference(name):
        return _user_spec(str(name).strip())
    key = str(name).strip().lower()
    if key not in _SPECS:
        raise InputError("model", name, "one of " + ", ".join(GRAPH_NAMES)
                         + f", or your model as {FACTORY_FORM}")
    return _SPECS[key]


def _resized(example: Any, batch: int, device: torch.device) -> Any:
    """An input like ``example`` with ``batch`` samples on ``device`` (integer inputs are token ids: 0)."""
    if isinstance(example, tuple):
        return tuple(_resized(e, batch, device) for e in example)
    shape = (batch, *example.shape[1:])
    if example.dtype.is_floating_point:
        return torch.randn(shape, dtype=example.dtype, device=device)
    return torch.zeros(shape, dtype=example.dtype, device=device)


def _user_spec(reference: str) -> _Spec:
    """A user's ``module:factory`` as a graph spec: the factory builds the module (on the device ``trace``
    asks for), its example input is resized to the batch."""
    built: dict[str, Any] = {}

    def factory() -> nn.Module:
        built["user"] = build_user_model(reference)
        return built["user"].module

    def input_of(opts: dict[str, Any], batch: int, device: torch.device) -> Any:
        return _resized(built["user"].example, batch, device)

    return _Spec(factory, {}, input_of, reference, lambda: built["user"].input_text if "user" in built else "")


def _resolve(name: str, options: Mapping[str, Any]) -> tuple[_Spec, dict[str, Any]]:
    spec = _spec(name)
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        known = ", ".join(spec.options) or "none"
        raise InputError(unknown[0], options[unknown[0]], f"an option of model {name!r} (known: {known})")
    opts = {**spec.options, **{k: v for k, v in options.items() if v is not None}}
    for key, value in opts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(key, value, "an integer >= 1")
    return spec, opts


def _check_batch(batch_size: Any) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError("batch_size", batch_size, "an integer >= 1")
    return batch_size


def trace(name: str, *, batch_size: int = 32, device: str = "meta",
          **options: Any) -> tuple[fx.GraphModule, Any]:
    """The fx GraphModule of model ``name`` built on ``device`` and an example input batch."""
    spec, opts = _resolve(name, options)
    batch = _check_batch(batch_size)
    dev = torch.device(device)
    with torch.device(dev):
        module = spec.factory(**opts)
    module.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        example = spec.input_of(opts, batch, dev)
    with _running_model(name, "a module torch.fx can trace (measured per-op times stand in for the FLOP model "
                              "with --op-times)"):
        traced = fx.symbolic_trace(module)
    traced.meta["input_text"] = spec.input_text()  # said beside the plan: what the user's model was fed
    return traced, example


def _running_model(name: str, expected: str) -> contextlib.AbstractContextManager[None]:
    """Tracing or running a model's forward: a user's model runs fenced (one line for anything it raises, what
    it prints kept out of stdout: :func:`workloads.user_model.fenced`), and so does any error of tracing."""
    return fenced(str(name), expected)


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _is_tensorish(value: Any) -> bool:
    """A tensor, or a tuple of tensors and Nones with one tensor at least (``nn.MultiheadAttention`` returns
    ``(output, None)`` without weights: read as shape arithmetic, its 263k parameters a block went uncounted)."""
    if isinstance(value, torch.Tensor):
        return True
    return (isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value)
            and all(isinstance(v, torch.Tensor) or v is None for v in value))


def _kind(gm: fx.GraphModule, node: fx.Node) -> str:
    if node.op == "placeholder":
        return "input"
    if node.op == "call_module":
        return type(gm.get_submodule(str(node.target))).__name__.lower()
    if node.op == "call_method":
        return str(node.target)
    name = getattr(node.target, "__name__", str(node.target))
    return name.strip("_").replace("_C._nn.", "")


def _module_path(node: fx.Node) -> str:
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack")
    if stack:
        return str(list(stack.values())[-1][0])
    return ""


class _Recorder(fx.Interpreter):
    """Runs the graph on meta tensors, recording each node's output, FLOPs and kernels (its GEMM shapes and the
    element accesses of the rest, :mod:`costmodel.torch_kernels`)."""

    def __init__(self, gm: fx.GraphModule, counter: FlopCounterMode, kernels: KernelCounter) -> None:
        super().__init__(gm)
        self.counter, self.kernels = counter, kernels
        self.flops: dict[str, float] = {}
        self.outputs: dict[str, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        before = self.counter.get_total_flops()
        self.kernels.key = n.name
        result = super().run_node(n)
        self.flops[n.name] = float(self.counter.get_total_flops() - before)
        self.outputs[n.name] = result
        return result


def _param_reads(gm: fx.GraphModule, node: fx.Node) -> list[torch.Tensor]:
    """Parameters an op reads directly: a leaf module's own, or a get_attr argument's."""
    if node.op == "call_module":
        return list(gm.get_submodule(str(node.target)).parameters())
    params: list[torch.Tensor] = []
    for arg in node.all_input_nodes:
        if arg.op == "get_attr":
            value = _fetch_attr(gm, str(arg.target))
            if isinstance(value, nn.Parameter):
                params.append(value)
    return params


def _fetch_attr(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def build_graph(name: str, *, batch_size: int = 32, **options: Any) -> nx.DiGraph:
    """The operator graph of model ``name`` for a batch of ``batch_size`` (see the module doc)."""
    gm, example = trace(name, batch_size=batch_size, **options)
    counter, kernels = FlopCounterMode(display=False), KernelCounter()
    recorder = _Recorder(gm, counter, kernels)
    with torch.no_grad(), counter, kernels, _running_model(name, "a model whose forward runs on its example input"):
        recorder.run(example)
    _, opts = _resolve(name, options)
    graph = nx.DiGraph(name=str(name).strip().lower(), batch_size=batch_size, options=opts)
    tallies = kernels.by_key()
    seen: set[int] = set()
    parameters = 0
    order = 0
    for node in gm.graph.nodes:
        if node.op in ("output", "get_attr"):
            continue
        out = recorder.outputs[node.name]
        if not _is_tensorish(out):
            continue  # shape arithmetic
        param_bytes = 0
        for p in _param_reads(gm, node):
            if id(p) not in seen:
                seen.add(id(p))
                param_bytes += p.numel() * p.element_size()
                parameters += p.numel()
        tally = tallies.get(node.name, KernelTally())
        graph.add_node(
            node.name, kind=_kind(gm, node), flops=recorder.flops[node.name], param_bytes=param_bytes,
            grad_bytes=param_bytes, activation_bytes=_tensor_bytes(out), order=order, module=_module_path(node),
            gemms=tally.shapes, memory_kernels=tuple(tally.memory_kernels),
        )
        order += 1
        for arg in node.all_input_nodes:
            if arg.name in graph:
                nbytes = _tensor_bytes(recorder.outputs[node.name] if _kind(gm, node) == "getitem"
                                       else recorder.outputs[arg.name])
                graph.add_edge(arg.name, node.name, bytes=nbytes)
    graph.graph["parameters"] = parameters
    graph.graph["input_text"] = gm.meta.get("input_text", "")
    graph.graph["description"] = _spec(name).description if not gm.meta.get("input_text") else ""
    return graph


# --- op times and calibration ------------------------------------------------------------------


def _peak_of(device: Any) -> float:
    peak = getattr(device, "peak_flops", device)
    try:
        value = float(peak)
    except (TypeError, ValueError) as exc:
        raise InputError("device", device, "a device with peak_flops, or a peak FLOP/s number") from exc
    if not math.isfinite(value) or value <= 0:
        raise InputError("device", device, "a positive peak FLOP/s")
    return value


def op_time_s(graph: nx.DiGraph, node: str, device: Any, efficiency: float = DEFAULT_EFFICIENCY) -> float:
    """Forward seconds of ``node`` for the graph's batch on ``device`` (anything with ``peak_flops``).

    A calibrated op takes its measured median, scaled by the ratio of the measuring device's peak
    to this one's when the calibration recorded it; the rest FLOPs / (efficiency x peak).
    """
    if not 0 < efficiency <= 1:
        raise InputError("efficiency", efficiency, "a fraction of peak in (0, 1]")
    peak = _peak_of(device)
    attrs = graph.nodes[node]
    measured = attrs.get("measured_s")
    if measured is not None:
        reference = graph.graph.get("measured_peak_flops")
        return float(measured) * (reference / peak if reference else 1.0)
    return attrs["flops"] / (efficiency * peak)


def op_step_s(graph: nx.DiGraph, node: str, compute: DeviceCompute) -> float:
    """Forward + backward seconds of ``node`` for the graph's batch on ``compute``'s device, priced as ``simulate``
    prices a layer (:meth:`costmodel.device_compute.DeviceCompute.kernels`): its GEMMs by their shapes, its other
    kernels by the elements they move, FLOPs the GEMMs do not account for at the achievable rate."""
    attrs = graph.nodes[node]
    gemms = attrs.get("gemms", ())
    other = unshaped_flops(attrs["flops"], sum(g.flops for g in gemms))
    forward, backward = compute.kernels(gemms, attrs.get("memory_kernels", ()), other)
    return forward + backward


def calibrate_op_times(graph: nx.DiGraph, measured: Mapping[str, float], device: Any = None) -> nx.DiGraph:
    """Attach measured forward medians (seconds at the graph's batch) to ops; returns the graph.

    ``device`` (with ``peak_flops``) records where they were measured so :func:`op_time_s` can
    scale them to another device; without it they are used as they are.
    """
    for node, seconds in measured.items():
        if node not in graph:
            raise InputError("measured", node, f"an op of graph {graph.graph.get('name')!r}")
        value = float(seconds)
        if not math.isfinite(value) or value < 0:
            raise InputError(f"measured.{node}", seconds, "non-negative finite seconds")
        graph.nodes[node]["measured_s"] = value
    if device is not None:
        graph.graph["measured_peak_flops"] = _peak_of(device)
    return graph


class _Timer(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.times: dict[str, list[float]] = {}

    def run_node(self, n: fx.Node) -> Any:
        start = time.perf_counter()
        result = super().run_node(n)
        self.times.setdefault(n.name, []).append(time.perf_counter() - start)
        return result


def measure_op_times(name: str, *, batch_size: int = 8, repeats: int = 8, max_parameters: float = 5e7,
                     **options: Any) -> dict[str, float]:
    """Median forward seconds per op of model ``name``, timed op by op on this machine's CPU.

    Runs the fx graph with real tensors (one warm-up pass, then ``repeats``), so only models up
    to ``max_parameters`` are allowed; node names match :func:`build_graph`'s.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InputError("repeats", repeats, "an integer >= 1")
    gm, example = trace(name, batch_size=batch_size, device="cpu", **options)
    count = sum(p.numel() for p in gm.parameters())
    if count > max_parameters:
        raise InputError("model", name, f"a model of at most {max_parameters:.0e} parameters to time on the CPU")
    timer = _Timer(gm)
    with torch.no_grad(), _running_model(name, "a model whose forward runs on its example input"):
        timer.run(example)
        timer.times.clear()
        for _ in range(repeats):
            timer.run(example)
    graph_nodes = set(build_graph(name, batch_size=batch_size, **options).nodes)
    return {node: statistics.median(ts) for node, ts in timer.times.items() if node in graph_nodes}


def save_op_times(path: str, measured: Mapping[str, float], batch_size: int, peak_flops: Any = None) -> None:
    """Write measured per-op medians as the JSON ``flexcomm plan --op-times`` reads."""
    import json


    payload: dict[str, Any] = {"batch_size": batch_size, "ops": dict(measured)}
    if peak_flops is not None:
        payload["peak_flops"] = peak_flops
    write_text_atomic(path, json.dumps(payload, indent=2) + "\n")


def load_op_times(path: str) -> tuple[int, dict[str, float], float | None]:
    """(batch size, op -> forward seconds, peak FLOP/s of the measuring device or None) from a JSON file.

    The file: ``{"batch_size": 8, "peak_flops": "1TFLOP/s", "ops": {"conv1": 0.0012, ...}}``.
    """
    data = read_json_bounded(path, "op-times", "JSON file", MAX_DOCUMENT_BYTES)
    if not isinstance(data, dict) or not isinstance(data.get("ops"), dict):
        raise InputError("op-times", path, 'a JSON object {"batch_size": N, "peak_flops": ..., "ops": {op: seconds}}')
    batch = _check_batch(data.get("batch_size"))
    peak = data.get("peak_flops")
    return batch, {str(k): v for k, v in data["ops"].items()}, None if peak is None else parse_flops(peak)
