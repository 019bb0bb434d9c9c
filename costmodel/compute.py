"""Compute-time model: how long one rank's forward and backward passes take.

Communication only matters relative to computation: the simulator overlaps gradient buckets with
the backward pass and compression pays off only when the exchange is the bottleneck. So it needs
per-layer compute times, from two sources in order of trust:

1. measured per-layer medians (:class:`MeasuredProfile`), which override
2. the FLOP model: seconds = FLOPs / (peak FLOP/s * efficiency), backward = 2 x forward.

FLOPs count a multiply-accumulate as *two* operations, as a GPU's peak FLOP/s and
``torch.utils.flop_counter`` do. torchvision's "GFLOPS" column (ResNet-18 1.81, ResNet-50 4.09,
VGG-16 15.47, AlexNet 0.71) counts multiply-accumulates, so the zoo's forward FLOPs are twice
those numbers; only matmuls and convolutions are counted (elementwise, normalisation and pooling
work is not), like both of those counters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gemm_efficiency import GemmShape
from flexcomm.costmodel.units import parse_flops

if TYPE_CHECKING:
    import torch

#: Fraction of peak FLOP/s a kernel reaches: PaddlePaddle's auto-parallel cost model uses 0.65
#: (``utilization_rate`` in ``CompOpCost.calc_time``,
#: python/paddle/distributed/auto_parallel/static/cost/base_cost.py).
DEFAULT_EFFICIENCY = 0.65

#: Top-k selection speed in gradient elements per second on a V100 (Tyagi & Swany 2023: layer-wise Top-k
#: took ~14 ms for ResNet-18's 11.7M and ~36 ms for ResNet-50's 25.6M elements, nearly constant in c).
#: The what-if study, the simulator and the emulated clock all price compression with it.
V100_TOPK_ELEMENTS_PER_S = 0.75e9

#: Backward FLOPs per forward FLOP: one matmul for the input gradient, one for the weight
#: gradient (Kaplan et al. 2020; Narayanan et al., SC'21).
DEFAULT_BACKWARD_FACTOR = 2.0


def _array(value: ArrayLike, name: str, expected: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(name, value, expected) from exc
    if np.any(~np.isfinite(arr)):
        raise InputError(name, value, expected)
    return arr


def _peak(peak_flops: ArrayLike | str) -> np.ndarray:
    expected = "a positive FLOP/s rate such as 15.7TFLOP/s or 1.57e13"
    if isinstance(peak_flops, str):
        return np.asarray(parse_flops(peak_flops))
    peak = _array(peak_flops, "peak_flops", expected)
    if np.any(peak <= 0):
        raise InputError("peak_flops", peak_flops, expected)
    return peak


def _efficiency(efficiency: ArrayLike) -> np.ndarray:
    eff = _array(efficiency, "efficiency", "a fraction of peak in (0, 1]")
    if np.any(eff <= 0) or np.any(eff > 1):
        raise InputError("efficiency", efficiency, "a fraction of peak in (0, 1]")
    return eff


def _backward_factor(backward_factor: ArrayLike) -> np.ndarray:
    factor = _array(backward_factor, "backward_factor", "a non-negative multiple of the forward FLOPs")
    if np.any(factor < 0):
        raise InputError("backward_factor", backward_factor, "a non-negative multiple of the forward FLOPs")
    return factor


def _batch(batch_per_rank: ArrayLike) -> np.ndarray:
    batch = _array(batch_per_rank, "batch_per_rank", "a positive number of samples per rank")
    if np.any(batch <= 0):
        raise InputError("batch_per_rank", batch_per_rank, "a positive number of samples per rank")
    return batch


def compute_seconds(
    flops: ArrayLike, peak_flops: ArrayLike | str, efficiency: ArrayLike = DEFAULT_EFFICIENCY
) -> np.ndarray:
    """Seconds to run ``flops`` on a device of ``peak_flops`` reaching ``efficiency`` of peak.

    Vectorised: any arguments that broadcast together. ``peak_flops`` may be a string such as
    ``"15.7TFLOP/s"``.
    """
    work = _array(flops, "flops", "a non-negative finite FLOP count")
    if np.any(work < 0):
        raise InputError("flops", flops, "a non-negative finite FLOP count")
    return work / (_peak(peak_flops) * _efficiency(efficiency))


# --- specs and profiles -----------------------------------------------------------------------


@dataclass(frozen=True)
class LayerGemm:
    """One GEMM of a layer's forward pass for one sample: ``count`` (m x k) @ (k x n) products. A batch of b
    samples multiplies ``m`` (a linear layer or a convolution run as an implicit GEMM: more output rows) or,
    with ``batched``, ``count`` (attention's per-sample score and context matrices). ``a_elements``: a
    convolution's input tensor per sample (its implicit GEMM's A is never materialized)."""

    m: int
    n: int
    k: int
    count: int = 1
    batched: bool = False
    a_elements: int | None = None

    def at_batch(self, batch: float) -> GemmShape:
        b = max(1, round(float(batch)))
        a = None if self.a_elements is None else self.a_elements * b
        if self.batched:
            return GemmShape(self.m, self.n, self.k, self.count * b, a)
        return GemmShape(self.m * b, self.n, self.k, self.count, a)

    @property
    def flops(self) -> float:
        """Forward FLOPs per sample."""
        return self.at_batch(1).flops


@dataclass(frozen=True)
class LayerSpec:
    """One layer: its parameter count (what it sends) and forward FLOPs per sample (what it costs).

    Optional, for pricing on a device (:mod:`costmodel.device_compute`): ``gemms``, the shapes behind the
    FLOPs (tile, wave and K-loop losses), and ``memory_accesses``, the elements its memory-bound kernels
    (normalisation, activation, element-wise, pooling) read or write per sample in the forward pass;
    ``backward_gemms``, GEMMs only the backward runs (FlashAttention's recomputed scores); ``memory_kernels``,
    the accesses of each memory-bound kernel where they are known one by one (a traced model: each takes at least
    a launch), summing to ``memory_accesses``; empty: the layer's accesses are one kernel.
    """

    name: str
    params: int
    forward_flops: float
    gemms: tuple[LayerGemm, ...] = ()
    memory_accesses: float = 0.0
    backward_gemms: tuple[LayerGemm, ...] = ()
    memory_kernels: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InputError("layer", self.name, "a non-empty layer name")
        if not _is_whole(self.params, minimum=0):
            raise InputError(f"{self.name}.params", self.params, "a non-negative integer")
        try:
            flops = float(self.forward_flops)
        except (TypeError, ValueError) as exc:
            raise InputError(
                f"{self.name}.forward_flops", self.forward_flops, "non-negative finite FLOPs"
            ) from exc
        if not math.isfinite(flops) or flops < 0:
            raise InputError(f"{self.name}.forward_flops", self.forward_flops, "non-negative finite FLOPs")
        accesses = float(self.memory_accesses)
        if not math.isfinite(accesses) or accesses < 0:
            raise InputError(f"{self.name}.memory_accesses", self.memory_accesses, "a non-negative element count")
        object.__setattr__(self, "params", int(self.params))
        object.__setattr__(self, "forward_flops", flops)
        object.__setattr__(self, "gemms", tuple(self.gemms))
        object.__setattr__(self, "backward_gemms", tuple(self.backward_gemms))
        object.__setattr__(self, "memory_kernels", tuple(float(a) for a in self.memory_kernels))
        object.__setattr__(self, "memory_accesses", accesses)


@dataclass(frozen=True)
class MeasuredProfile:
    """Measured per-layer (forward, backward) seconds at ``batch_per_rank``: medians, not means.

    Medians, because the first iterations (allocator, cuDNN autotuning) and stragglers would
    drag a mean. Times at another batch size are scaled linearly from ``batch_per_rank``, a fair
    approximation once the device is saturated; measure at the batch you simulate when it is not.
    """

    batch_per_rank: int
    layers: Mapping[str, tuple[float, float]]
    source: str = ""

    def __post_init__(self) -> None:
        batch = self.batch_per_rank
        if not _is_whole(batch, minimum=1):
            raise InputError("batch_per_rank", batch, "an integer >= 1")
        clean: dict[str, tuple[float, float]] = {}
        for name, pair in self.layers.items():
            try:
                fwd, bwd = (float(x) for x in pair)
            except (TypeError, ValueError) as exc:
                raise InputError(f"profile.{name}", pair, "a (forward, backward) pair of seconds") from exc
            if not (math.isfinite(fwd) and math.isfinite(bwd)) or fwd < 0 or bwd < 0:
                raise InputError(f"profile.{name}", pair, "non-negative finite (forward, backward) seconds")
            clean[str(name)] = (fwd, bwd)
        object.__setattr__(self, "batch_per_rank", int(batch))
        object.__setattr__(self, "layers", clean)

    @classmethod
    def from_samples(
        cls,
        batch_per_rank: int,
        samples: Mapping[str, Iterable[tuple[float, float]]],
        source: str = "",
    ) -> MeasuredProfile:
        """Per-layer medians of repeated (forward, backward) timings."""
        layers: dict[str, tuple[float, float]] = {}
        for name, runs in samples.items():
            arr = np.asarray(list(runs), dtype=float)
            if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] != 2:
                raise InputError(f"profile.{name}", runs, "one or more (forward, backward) pairs")
            layers[name] = (float(np.median(arr[:, 0])), float(np.median(arr[:, 1])))
        return cls(batch_per_rank, layers, source)

    def scaled(self, batch_per_rank: float) -> dict[str, tuple[float, float]]:
        """(forward, backward) seconds per layer at another batch size (linear in the batch)."""
        ratio = float(batch_per_rank) / self.batch_per_rank
        return {name: (fwd * ratio, bwd * ratio) for name, (fwd, bwd) in self.layers.items()}


@dataclass(frozen=True)
class ModelSpec:
    """A model as the cost model sees it: ordered layers (forward order) and optional measurements."""

    name: str
    layers: list[LayerSpec]
    description: str = ""
    profile: MeasuredProfile | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.layers:
            raise InputError("layers", self.layers, f"at least one layer for model {self.name!r}")
        seen: set[str] = set()
        for layer in self.layers:
            if not isinstance(layer, LayerSpec):
                raise InputError("layers", layer, "LayerSpec entries")
            if layer.name in seen:
                raise InputError("layers", layer.name, f"unique layer names in model {self.name!r}")
            seen.add(layer.name)
        object.__setattr__(self, "layers", list(self.layers))
        if self.profile is not None:
            unknown = sorted(set(self.profile.layers) - seen)
            if unknown:
                raise InputError("profile", unknown, f"layer names of model {self.name!r}")

    # --- sizes ---

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def forward_flops(self) -> float:
        """Forward FLOPs per sample."""
        return float(sum(layer.forward_flops for layer in self.layers))

    @property
    def layer_names(self) -> list[str]:
        return [layer.name for layer in self.layers]

    def gradient_bytes(self, dtype_bytes: int = 4) -> int:
        """Bytes of one full gradient (what a dense allreduce moves): params x element size."""
        return self.params * _dtype_bytes(dtype_bytes)

    def layer_gradient_bytes(self, dtype_bytes: int = 4) -> np.ndarray:
        """Per-layer gradient bytes in forward order, for bucketing."""
        size = _dtype_bytes(dtype_bytes)
        return np.array([layer.params * size for layer in self.layers], dtype=np.int64)

    # --- times ---

    def with_profile(self, profile: MeasuredProfile) -> ModelSpec:
        """A copy whose measured layers use ``profile`` instead of the FLOP model."""
        return replace(self, profile=profile)

    @classmethod
    def from_profile(
        cls,
        name: str,
        measured: Mapping[str, tuple[float, float]],
        batch_per_rank: int = 1,
        params: Mapping[str, int] | None = None,
        description: str = "",
    ) -> ModelSpec:
        """A model known only from measurements: layers in ``measured``'s order, no FLOP model.

        ``params`` gives each layer's parameter count (0 when missing) so gradient sizes are right.
        """
        params = dict(params or {})
        unknown = sorted(set(params) - set(measured))
        if unknown:
            raise InputError("params", unknown, "names of measured layers")
        layers = [LayerSpec(layer, params.get(layer, 0), 0.0) for layer in measured]
        profile = MeasuredProfile(batch_per_rank, dict(measured), source="measured")
        return cls(name, layers, description or "from a measured profile", profile)

    def layer_seconds(
        self,
        batch_per_rank: float,
        peak_flops: float | str,
        efficiency: float = DEFAULT_EFFICIENCY,
        backward_factor: float = DEFAULT_BACKWARD_FACTOR,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-layer (forward, backward) seconds in forward order; the backward runs in reverse.

        Measured layers take the profile's medians (scaled to the batch); the rest the FLOP model.
        """
        for arg, value in (
            ("batch_per_rank", batch_per_rank),
            ("efficiency", efficiency),
            ("backward_factor", backward_factor),
        ):
            if np.ndim(value) != 0:
                raise InputError(arg, value, "a scalar (iteration_seconds takes arrays)")
        if not isinstance(peak_flops, str) and np.ndim(peak_flops) != 0:
            raise InputError("peak_flops", peak_flops, "a scalar (iteration_seconds takes arrays)")
        batch = float(_batch(batch_per_rank))
        flops = np.array([layer.forward_flops for layer in self.layers]) * batch
        forward = compute_seconds(flops, peak_flops, efficiency)
        backward = forward * float(_backward_factor(backward_factor))
        return self.measured_over(forward, backward, batch)

    def measured_over(self, forward: np.ndarray, backward: np.ndarray,
                      batch: float) -> tuple[np.ndarray, np.ndarray]:
        """Per-layer (forward, backward) seconds with the profile's measured layers (scaled to ``batch``) in
        place of the modelled ones: a measurement always wins."""
        if self.profile is not None:
            measured = self.profile.scaled(batch)
            for i, layer in enumerate(self.layers):
                if layer.name in measured:
                    forward[i], backward[i] = measured[layer.name]
        return forward, backward

    def iteration_seconds(
        self,
        batch_per_rank: ArrayLike,
        peak_flops: ArrayLike | str,
        efficiency: ArrayLike = DEFAULT_EFFICIENCY,
        backward_factor: ArrayLike = DEFAULT_BACKWARD_FACTOR,
    ) -> np.ndarray:
        """Forward + backward seconds of one iteration; vectorised over every argument."""
        batch = _batch(batch_per_rank)
        factor = _backward_factor(backward_factor)
        measured = self.profile.layers if self.profile is not None else {}
        modelled_flops = sum(layer.forward_flops for layer in self.layers if layer.name not in measured)
        total = compute_seconds(modelled_flops * batch * (1.0 + factor), peak_flops, efficiency)
        if measured:
            per_sample = sum(fwd + bwd for fwd, bwd in measured.values()) / self.profile.batch_per_rank
            total = total + per_sample * batch
        return total


def _is_whole(value: object, minimum: int) -> bool:
    """A whole number >= minimum (ints, integral floats, numpy integers; never bools or strings)."""
    if isinstance(value, (bool, str)):
        return False
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) and number.is_integer() and number >= minimum


def _dtype_bytes(dtype_bytes: int) -> int:
    if not _is_whole(dtype_bytes, minimum=1):
        raise InputError("dtype_bytes", dtype_bytes, "a positive whole number of bytes per element")
    return int(dtype_bytes)


# --- builders for the zoo ---------------------------------------------------------------------


class _Net:
    """Walks a CNN's shapes so each layer's FLOPs, GEMM shape and memory traffic come from its real output size.

    Memory-bound traffic per output element, forward (element reads + writes): batch norm 3 (statistics pass
    reads x, normalisation reads x and writes y), ReLU 2, residual add 3, bias add 2; a pooling layer reads its
    input and writes its output (charged to the layer before it).
    """

    def __init__(self, image_size: int, channels: int = 3) -> None:
        self.size = image_size
        self.channels = channels
        self.layers: list[LayerSpec] = []

    @property
    def elements(self) -> int:
        return self.channels * self.size * self.size

    def conv(self, name: str, out: int, k: int, stride: int = 1, pad: int = 0, bias: bool = False,
             relu: bool = False) -> None:
        size = (self.size + 2 * pad - k) // stride + 1
        weights = self.channels * out * k * k
        # implicit GEMM: output pixels x output channels, reduced over input channels x filter taps
        gemm = LayerGemm(size * size, out, self.channels * k * k, a_elements=self.elements)
        accesses = out * size * size * ((2 if bias else 0) + (2 if relu else 0))
        self.layers.append(LayerSpec(name, weights + (out if bias else 0), gemm.flops, (gemm,), accesses))
        self.size, self.channels = size, out

    def bn(self, name: str, relu: bool = True, residual: bool = False) -> None:
        accesses = self.elements * (3 + (2 if relu else 0) + (3 if residual else 0))
        self.layers.append(LayerSpec(name, 2 * self.channels, 0.0, (), accesses))

    def pool(self, k: int, stride: int, pad: int = 0) -> None:
        before = self.elements
        self.size = (self.size + 2 * pad - k) // stride + 1
        last = self.layers[-1]
        self.layers[-1] = replace(last, memory_accesses=last.memory_accesses + before + self.elements)

    def linear(self, name: str, inputs: int, out: int, relu: bool = False) -> None:
        gemm = LayerGemm(1, out, inputs)
        self.layers.append(LayerSpec(name, inputs * out + out, gemm.flops, (gemm,), out * (4 if relu else 2)))


_RESNET_BLOCKS = {18: ("basic", [2, 2, 2, 2]), 34: ("basic", [3, 4, 6, 3]), 50: ("bottleneck", [3, 4, 6, 3])}


def resnet_spec(depth: int = 50, image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    """torchvision's ResNet (v1.5: stride on the 3x3 conv), one layer per conv / BN / fc module."""
    if depth not in _RESNET_BLOCKS:
        raise InputError("depth", depth, "one of " + ", ".join(map(str, _RESNET_BLOCKS)))
    kind, blocks = _RESNET_BLOCKS[depth]
    expansion = 4 if kind == "bottleneck" else 1
    net = _Net(image_size)
    net.conv("conv1", 64, 7, stride=2, pad=3)
    net.bn("bn1")
    net.pool(3, 2, 1)
    for stage, (width, count) in enumerate(zip([64, 128, 256, 512], blocks, strict=True), start=1):
        for b in range(count):
            prefix = f"layer{stage}.{b}"
            stride = 2 if stage > 1 and b == 0 else 1
            cin, size = net.channels, net.size
            if kind == "basic":
                net.conv(f"{prefix}.conv1", width, 3, stride, 1)
                net.bn(f"{prefix}.bn1")
                net.conv(f"{prefix}.conv2", width, 3, 1, 1)
                net.bn(f"{prefix}.bn2", residual=True)
            else:
                net.conv(f"{prefix}.conv1", width, 1)
                net.bn(f"{prefix}.bn1")
                net.conv(f"{prefix}.conv2", width, 3, stride, 1)
                net.bn(f"{prefix}.bn2")
                net.conv(f"{prefix}.conv3", width * expansion, 1)
                net.bn(f"{prefix}.bn3", residual=True)
            if stride != 1 or cin != width * expansion:
                out_channels, out_size = net.channels, net.size
                net.channels, net.size = cin, size
                net.conv(f"{prefix}.downsample.0", width * expansion, 1, stride)
                net.bn(f"{prefix}.downsample.1", relu=False)
                assert (net.channels, net.size) == (out_channels, out_size)
    net.linear("fc", 512 * expansion, num_classes)
    return ModelSpec(
        f"resnet{depth}", net.layers, f"torchvision ResNet-{depth}, {image_size}px images"
    )


def vgg16_spec(image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    """torchvision's VGG-16 (configuration D, no batch norm), layer names as in its module tree."""
    net = _Net(image_size)
    index = 0
    for item in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]:
        if item == "M":
            net.pool(2, 2)
            index += 1
        else:
            net.conv(f"features.{index}", int(item), 3, 1, 1, bias=True, relu=True)
            index += 2  # conv, ReLU
    flat = 512 * 7 * 7  # adaptive average pooling to 7x7
    net.linear("classifier.0", flat, 4096, relu=True)
    net.linear("classifier.3", 4096, 4096, relu=True)
    net.linear("classifier.6", 4096, num_classes)
    return ModelSpec("vgg16", net.layers, f"torchvision VGG-16, {image_size}px")


def alexnet_spec(image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    """torchvision's AlexNet (the one-GPU variant of Krizhevsky 2014)."""
    net = _Net(image_size)
    net.conv("features.0", 64, 11, 4, 2, bias=True, relu=True)
    net.pool(3, 2)
    net.conv("features.3", 192, 5, 1, 2, bias=True, relu=True)
    net.pool(3, 2)
    net.conv("features.6", 384, 3, 1, 1, bias=True, relu=True)
    net.conv("features.8", 256, 3, 1, 1, bias=True, relu=True)
    net.conv("features.10", 256, 3, 1, 1, bias=True, relu=True)
    flat = 256 * 6 * 6  # adaptive average pooling to 6x6
    net.linear("classifier.1", flat, 4096, relu=True)
    net.linear("classifier.4", 4096, 4096, relu=True)
    net.linear("classifier.6", 4096, num_classes)
    return ModelSpec("alexnet", net.layers, f"torchvision AlexNet, {image_size}px")


#: How a transformer's attention runs: fused (FlashAttention, what current stacks run; the default) or unfused
#: (scores, softmax and dropout as separate kernels, as Megatron-LM and BERT ran in 2019-2022).
ATTENTION_KINDS = ("fused", "unfused")


def _encoder_block(prefix: str, d: int, s: int, heads: int, ffn_mult: int, attention: str) -> list[LayerSpec]:
    """One pre- or post-norm transformer block's four layers (norm, attention, norm, MLP) for one sequence.

    GEMMs as Megatron-LM runs them (QKV, per-head scores and context, projection, two MLP matrices); memory-bound
    traffic from Korthikanti et al.'s activation count (2022, section 4.1: attention 11sh + 5as^2 bytes, MLP 19sh,
    each layer norm 2sh, at 16-bit), every stored byte written once and read once, i.e. that many 16-bit element
    accesses. Fused attention never writes the s x s scores (no 5as^2 term) and its backward recomputes them
    (Dao et al. 2022, algorithm 4: one more scores GEMM), as the transformer planner prices it
    (:class:`planner.llm.pricing.LLMPricer`).
    """
    if attention not in ATTENTION_KINDS:
        raise InputError("attention", attention, " or ".join(ATTENTION_KINDS))
    head_dim = d // heads
    scores = LayerGemm(s, s, head_dim, heads, batched=True)
    attn = (LayerGemm(s, 3 * d, d), scores, LayerGemm(s, head_dim, s, heads, batched=True), LayerGemm(s, d, d))
    mlp = (LayerGemm(s, ffn_mult * d, d), LayerGemm(s, d, ffn_mult * d))
    fused = attention == "fused"
    return [
        LayerSpec(f"{prefix}.ln1", 2 * d, 0.0, (), 2.0 * s * d),
        LayerSpec(f"{prefix}.attn", 4 * d * d + 4 * d, sum(g.flops for g in attn), attn,
                  11.0 * s * d + (0.0 if fused else 5.0 * heads * s * s), (scores,) if fused else ()),
        LayerSpec(f"{prefix}.ln2", 2 * d, 0.0, (), 2.0 * s * d),
        LayerSpec(f"{prefix}.mlp", 2 * ffn_mult * d * d + (ffn_mult + 1) * d, sum(g.flops for g in mlp), mlp,
                  19.0 * s * d),
    ]


def transformer_spec(
    name: str,
    num_layers: int,
    d_model: int,
    seq_len: int,
    vocab: int = 50257,
    ffn_mult: int = 4,
    tied_embeddings: bool = True,
    heads: int | None = None,
    attention: str = "fused",
) -> ModelSpec:
    """GPT-style decoder, one sample = one sequence of ``seq_len`` tokens (``heads`` default: 128-wide heads),
    attention ``fused`` (the default, as the transformer planner's) or ``unfused``.

    Per block: attention 4d^2 + 4d params, MLP 2 ffn_mult d^2 + (ffn_mult + 1) d, two layer norms;
    forward FLOPs 2 x params x tokens for the matmuls plus 4 seq^2 d for QK^T and AV (no causal
    halving), and the LM head's 2 d V per token: the forward third of Narayanan et al., SC'21,
    72 B s l h^2 (1 + s/6h) + 6 B s h V. For GPT-3 XL that is about 15% above the 2 N seq rule of
    thumb, which leaves out the attention scores.
    """
    d, s = d_model, seq_len
    heads = heads or max(1, d // 128)
    if d % heads:
        raise InputError("heads", heads, f"a divisor of d_model={d}")
    layers = [LayerSpec("embed.tokens", vocab * d, 0.0, (), 3.0 * s * d),  # gather + position add
              LayerSpec("embed.positions", s * d, 0.0)]
    for i in range(num_layers):
        layers += _encoder_block(f"blocks.{i}", d, s, heads, ffn_mult, attention)
    head = LayerGemm(s, vocab, d)
    layers.append(LayerSpec("ln_f", 2 * d, 0.0, (), 2.0 * s * d))
    layers.append(LayerSpec("lm_head", 0 if tied_embeddings else vocab * d, head.flops, (head,),
                            3.0 * s * vocab))  # softmax cross-entropy over the logits
    desc = f"GPT-style decoder: {num_layers} layers, d_model {d}, seq {s}, vocab {vocab}, {attention} attention"
    return ModelSpec(name, layers, desc)


def bert_spec(seq_len: int = 384, predictions: int | None = None, num_layers: int = 24, d_model: int = 1024,
              heads: int = 16, vocab: int = 30522) -> ModelSpec:
    """BERT (default BERT-Large: Devlin et al. 2019, 24 layers, hidden 1024, 16 heads, ~335M parameters), one
    sample = one sequence. ``predictions``: masked tokens per sequence for pre-training (the MLM head runs only
    on them, as NVIDIA's and Hugging Face's implementations gather them first); None: fine-tuning with a
    2-logit span head (SQuAD)."""
    d, s = d_model, seq_len
    layers = [LayerSpec("embeddings", (vocab + 512 + 2) * d + 2 * d, 0.0, (), 7.0 * s * d)]  # 3 gathers, LN
    for i in range(num_layers):
        layers += _encoder_block(f"encoder.{i}", d, s, heads, 4, "unfused")  # NVIDIA's 2019-2021 BERT runs
    if predictions is None:
        span = LayerGemm(s, 2, d)
        layers.append(LayerSpec("qa_outputs", 2 * d + 2, span.flops, (span,), 3.0 * s * 2))
        return ModelSpec(f"bert-squad-{s}", layers, f"BERT: {num_layers} layers, d {d}, seq {s}, span head")
    pooler = LayerGemm(1, d, d)
    transform, decoder = LayerGemm(predictions, d, d), LayerGemm(predictions, vocab, d)
    layers += [LayerSpec("pooler", d * d + d, pooler.flops, (pooler,)),
               LayerSpec("cls.transform", d * d + 3 * d, transform.flops, (transform,), 6.0 * predictions * d),
               LayerSpec("cls.decoder", vocab, decoder.flops, (decoder,), 3.0 * predictions * vocab),
               LayerSpec("cls.seq_relationship", 2 * d + 2, 4.0 * d)]
    return ModelSpec(f"bert-pretraining-{s}", layers,
                     f"BERT: {num_layers} layers, d {d}, seq {s}, {predictions} masked tokens per sequence")


#: The zoo's transformers by shape (layers, d_model, seq_len, heads, vocab), so a planner that takes a shape
#: (``plan --model gpt``) plans the same model: GPT-3 XL's (Brown et al. 2020, Table 2.1), GPT-2's vocabulary.
ZOO_TRANSFORMER_SHAPES: dict[str, tuple[int, int, int, int, int]] = {
    "transformer-1.3b": (24, 2048, 2048, 16, 50257),
}


def _build_zoo() -> dict[str, ModelSpec]:
    transformers = {name: transformer_spec(name, layers, d, seq, vocab=vocab, heads=heads)
                    for name, (layers, d, seq, heads, vocab) in ZOO_TRANSFORMER_SHAPES.items()}
    return {
        "resnet18": resnet_spec(18),
        "resnet50": resnet_spec(50),
        "vgg16": vgg16_spec(),
        "alexnet": alexnet_spec(),
        **transformers,
    }


#: Built-in models: per-sample forward FLOPs at 224px (CNNs) or one 2048-token sequence.
MODEL_ZOO: dict[str, ModelSpec] = _build_zoo()


def get_model(name: str) -> ModelSpec:
    """A zoo model by name (case-insensitive), with an error that lists what exists."""
    key = str(name).strip().lower()
    if key not in MODEL_ZOO:
        raise InputError("model", name, "one of " + ", ".join(sorted(MODEL_ZOO)))
    return MODEL_ZOO[key]


# --- from a real torch module -----------------------------------------------------------------


def layers_from_torch(
    module: torch.nn.Module,
    example_input: Any,
    name: str | None = None,
    batch_size: int | None = None,
    description: str = "",
) -> ModelSpec:
    """Count a torch module's per-module parameters and forward FLOPs per sample.

    Runs one forward pass under ``torch.utils.flop_counter.FlopCounterMode`` (matmul, conv and
    attention FLOPs only, 2 per multiply-accumulate) with gradients off and every submodule in
    eval mode (restored afterwards, so batch-norm statistics are untouched). A layer is each leaf
    module with parameters or FLOPs, plus any container holding parameters or running FLOPs of
    its own. Tied parameters count once. ``example_input`` is a tensor or a tuple of positional
    arguments; the batch size defaults to the first tensor's leading dimension.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    args = example_input if isinstance(example_input, (tuple, list)) else (example_input,)
    if batch_size is None:
        first = next((a for a in args if isinstance(a, torch.Tensor) and a.dim() > 0), None)
        if first is None:
            raise InputError(
                "example_input", type(example_input).__name__, "a batched tensor or tuple of them"
            )
        batch_size = int(first.shape[0])
    if batch_size < 1:
        raise InputError("batch_size", batch_size, "an integer >= 1")

    from flexcomm.costmodel.torch_kernels import KernelCounter, by_module

    modes = {m: m.training for m in module.modules()}
    kernels = KernelCounter()
    try:
        module.eval()
        with torch.no_grad(), FlopCounterMode(display=False) as counter, kernels, by_module(module, kernels):
            module(*args)
    finally:
        for m, training in modes.items():
            m.training = training

    counts = counter.get_flop_counts()
    root = type(module).__name__

    def inclusive(path: str) -> float:
        key = root if not path else f"{root}.{path}"
        return float(sum(counts.get(key, {}).values()))

    owned: list[tuple[str, int, float]] = []
    seen_params: set[int] = set()
    for path, sub in module.named_modules():
        own_params = 0
        for p in sub.parameters(recurse=False):
            if id(p) not in seen_params:
                seen_params.add(id(p))
                own_params += p.numel()
        children = [f"{path}.{child}" if path else child for child, _ in sub.named_children()]
        own_flops = max(inclusive(path) - sum(inclusive(c) for c in children), 0.0)
        if own_params or own_flops > 0:
            owned.append((path, own_params, own_flops))
    if not owned:
        raise InputError("module", root, "a module with parameters or FLOPs")
    tallies = _kernels_by_layer(kernels, {path for path, _, _ in owned})
    layers = [_layer_of(path or root, params, flops, tallies.get(path), batch_size)
              for path, params, flops in owned]
    desc = description or (f"counted by torch.utils.flop_counter at batch {batch_size}, its kernels by "
                           "costmodel.torch_kernels")
    return ModelSpec(name or root, layers, desc)


def _kernels_by_layer(kernels, layers: set[str]) -> dict[str, Any]:  # KernelCounter -> {path: KernelTally}
    """Each layer's kernels: its own, and those of the parameterless modules and functional calls that ran after
    it (a ReLU module, a residual add in its block's forward), as the zoo's specs charge an activation to the
    layer before it; kernels before any layer go to the first."""
    from flexcomm.costmodel.torch_kernels import KernelTally

    tallies: dict[str, KernelTally] = {}
    pending: list[KernelTally] = []
    last: str | None = None
    for key, call in kernels.calls:
        if key in layers:
            last = key
        if last is None:
            pending.append(call)
            continue
        tally = tallies.setdefault(last, KernelTally())
        for item in [*pending, call]:
            tally.add(item)
        pending = []
    return tallies


def per_sample(gemm, batch: int) -> LayerGemm | None:  # gemm: costmodel.torch_kernels.RecordedGemm
    """A GEMM recorded at ``batch`` samples as one sample's, or None where its batch dimension does not divide by
    the batch (its FLOPs are then priced with no shape)."""
    s = gemm.shape
    a = None if s.a_elements is None else max(1, round(s.a_elements / batch))
    if gemm.batch_dim == "rows" and s.m % batch == 0:
        return LayerGemm(s.m // batch, s.n, s.k, s.count, False, a)
    if gemm.batch_dim == "count" and s.count % batch == 0:
        return LayerGemm(s.m, s.n, s.k, s.count // batch, True, a)
    return None


def _layer_of(name: str, params: int, flops: float, tally, batch: int) -> LayerSpec:  # tally: KernelTally | None
    """One layer per sample: its FLOPs, the GEMMs whose batch dimension divides by the batch (the rest priced by
    their FLOPs, with no shape) and its element accesses."""
    if tally is None:
        return LayerSpec(name, params, flops / batch)
    gemms = tuple(g for g in (per_sample(gemm, batch) for gemm in tally.gemms) if g is not None)
    return LayerSpec(name, params, flops / batch, gemms, tally.memory_accesses / batch,
                     memory_kernels=tuple(a / batch for a in tally.memory_kernels))
