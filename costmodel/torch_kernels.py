"""The kernels a torch forward pass runs, read the way the device pricing reads them: GEMMs by their shapes, every
other kernel by the elements it reads and writes.

Why: ``plan`` (an operator graph traced with torch.fx) and ``simulate`` (the layers of a model) must price one
model's step the same way, and a count of FLOPs alone prices a CNN at a third of its real step (batch norm, ReLU
and residual adds stream activations through HBM; FLOPs do not see them). Both engines record a forward pass
here, at the aten level (``TorchDispatchMode``: after ``nn.Linear``, ``F.conv2d`` or ``torch.matmul`` have been
lowered, so a user's model needs no rules of its own), and price what was recorded with
:class:`costmodel.device_compute.DeviceCompute`, the same as the hand-built zoo specs of
:mod:`costmodel.compute`. The element counts follow those specs' rules:

* a GEMM (``mm``, ``addmm``, ``bmm``, ``baddbmm``, a convolution as its implicit GEMM, fused attention's two
  batched products) is a :class:`costmodel.gemm_efficiency.GemmShape`; a bias is an add over its output
  (2 accesses an element);
* a normalisation (batch, layer, group, RMS norm) reads its input twice (a statistics pass, then the
  normalisation) and writes its output: 3 an element;
* a gather (``embedding``, ``index_select``) reads the rows it returns, not the whole table;
* a view (``is_view``), an allocation without a write (``empty``) or a metadata op moves nothing;
* any other kernel reads every tensor it is given and writes every tensor it returns (ReLU 2 an element, an add
  3, a pooling its input and output).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from flexcomm.costmodel.gemm_efficiency import GemmShape

#: Element accesses a bias add costs for each output element (read the product, write the sum).
BIAS_ACCESSES = 2
#: Reads of a normalisation's input: a statistics pass and the normalisation pass.
NORM_INPUT_READS = 2

#: aten GEMMs: (index of the first operand, the dimension a batch grows, whether a bias is added)
_GEMM_OPS = {"mm": (0, "rows", False), "addmm": (1, "rows", True), "bmm": (0, "count", False),
             "baddbmm": (1, "count", True)}
_NORM_OPS = ("batch_norm", "layer_norm", "group_norm", "rms_norm")
_GATHER_OPS = ("embedding", "index_select")
_NO_DATA_OPS = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
                "lift_fresh", "lift_fresh_copy", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset")


@dataclass(frozen=True)
class RecordedGemm:
    """A GEMM as recorded at one batch: its shape and which of its dimensions grows with the batch (``rows``: m,
    as in a linear layer or a convolution; ``count``: the batch of products, as in attention's)."""

    shape: GemmShape
    batch_dim: str


@dataclass
class KernelTally:
    """What one region of a forward pass ran: its GEMMs and the element accesses of each other kernel (each its
    own launch: a kernel shorter than a launch takes a launch, :mod:`costmodel.device_compute`)."""

    gemms: list[RecordedGemm] = field(default_factory=list)
    memory_kernels: list[float] = field(default_factory=list)

    @property
    def memory_accesses(self) -> float:
        return float(sum(self.memory_kernels))

    def add_memory(self, accesses: float) -> None:
        if accesses > 0:
            self.memory_kernels.append(float(accesses))

    def add(self, other: KernelTally) -> None:
        self.gemms.extend(other.gemms)
        self.memory_kernels.extend(other.memory_kernels)

    @property
    def gemm_flops(self) -> float:
        return sum(g.shape.flops for g in self.gemms)

    @property
    def shapes(self) -> tuple[GemmShape, ...]:
        return tuple(g.shape for g in self.gemms)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def _numel(value: Any) -> float:
    return float(sum(t.numel() for t in _tensors(value)))


def _matmul(a: torch.Tensor, b: torch.Tensor) -> GemmShape:
    return GemmShape(int(a.shape[-2]), int(b.shape[-1]), int(a.shape[-1]), int(math.prod(a.shape[:-2])) or 1)


def _convolution(args: tuple, out: torch.Tensor) -> GemmShape | None:
    """A convolution's implicit GEMM: output pixels x output channels (per group), reduced over input channels x
    filter taps; None for a transposed convolution (priced by its FLOPs)."""
    inp, weight = args[0], args[1]
    transposed = bool(args[6]) if len(args) > 6 else False
    groups = int(args[8]) if len(args) > 8 else 1
    if transposed or out.dim() < 3:
        return None
    pixels = int(out.shape[0]) * int(math.prod(out.shape[2:]))
    per_group_out = int(out.shape[1]) // groups
    reduce = int(weight.shape[1]) * int(math.prod(weight.shape[2:]))
    return GemmShape(pixels, per_group_out, reduce, groups, float(inp.numel()))


def _attention(args: tuple) -> list[RecordedGemm]:
    """Fused attention's scores (q k^T) and context (p v) products, batched over batch x heads."""
    q, k, v = args[0], args[1], args[2]
    count = int(math.prod(q.shape[:-2])) or 1
    length, source, dim, value_dim = int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1]), int(v.shape[-1])
    return [RecordedGemm(GemmShape(length, source, dim, count), "count"),
            RecordedGemm(GemmShape(length, value_dim, source, count), "count")]


def record_kernel(func: Any, args: tuple, kwargs: dict, out: Any, tally: KernelTally) -> None:
    """Add one aten call's GEMMs and element accesses to ``tally`` (the rules of the module doc)."""
    name = func.overloadpacket.__name__.strip("_")
    if getattr(func, "is_view", False) or name in _NO_DATA_OPS:
        return
    if name in _GEMM_OPS:
        first, batch_dim, bias = _GEMM_OPS[name]
        tally.gemms.append(RecordedGemm(_matmul(args[first], args[first + 1]), batch_dim))
        if bias:
            tally.add_memory(BIAS_ACCESSES * _numel(out))
        return
    if name.startswith("convolution") or name.endswith("convolution"):
        shape = _convolution(args, out) if isinstance(out, torch.Tensor) else None
        if shape is not None:
            tally.gemms.append(RecordedGemm(shape, "rows"))
            if len(args) > 2 and isinstance(args[2], torch.Tensor):
                tally.add_memory(BIAS_ACCESSES * _numel(out))
            return
    if "scaled_dot_product" in name and not name.endswith("backward"):
        tally.gemms.extend(_attention(args))
        tally.add_memory(_numel(args[:3]) + _numel(_tensors(out)[:1]))
        return
    if name in _GATHER_OPS:
        tally.add_memory(2 * _numel(out) + _numel([a for a in args[1:] if isinstance(a, torch.Tensor)]))
        return
    reads = _numel((args, kwargs))
    if any(norm in name for norm in _NORM_OPS):
        reads += (NORM_INPUT_READS - 1) * _numel(args[:1])
    tally.add_memory(reads + _numel(out))


class KernelCounter(TorchDispatchMode):
    """Records the kernels run inside it, in the order they ran, as ``calls`` of (key, what the call ran); set
    ``key`` to attribute what follows to another region (an fx node, a module)."""

    def __init__(self) -> None:
        super().__init__()
        self.key: str = ""
        self.calls: list[tuple[str, KernelTally]] = []

    def by_key(self) -> dict[str, KernelTally]:
        """Each key's kernels together."""
        totals: dict[str, KernelTally] = {}
        for key, call in self.calls:
            totals.setdefault(key, KernelTally()).add(call)
        return totals

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's protocol
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        call = KernelTally()
        record_kernel(func, args, kwargs, out, call)
        if call.gemms or call.memory_kernels:
            self.calls.append((self.key, call))
        return out


@contextmanager
def by_module(module: torch.nn.Module, counter: KernelCounter) -> Iterator[None]:
    """Attribute each kernel ``counter`` records to the innermost module running it (its dotted path; the root
    is ``""``), through forward hooks removed on the way out."""
    stack: list[str] = []
    handles = []

    def enter(path: str):  # noqa: ANN202 - hook factory
        def hook(*_: Any) -> None:
            stack.append(counter.key)
            counter.key = path
        return hook

    def leave(*_: Any) -> None:
        counter.key = stack.pop() if stack else ""

    try:
        for path, sub in module.named_modules():
            handles.append(sub.register_forward_pre_hook(enter(path)))
            handles.append(sub.register_forward_hook(leave))
        yield
    finally:
        for handle in handles:
            handle.remove()
