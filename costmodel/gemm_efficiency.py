"""How fast a GEMM runs on a device, from parts that can each be checked (no constant fitted to a paper).

Why: a single "fraction of peak" mixes the device, the GEMM's shape and the software of whoever measured it;
fitted on one paper it moves with that paper (Megatron-LM's 2021 table gave 0.65 of peak; the same planner then
missed a 2022 paper on the same A100s by 20 %). Here every part has its own source:

1. **Achievable** (:func:`achievable_fraction`): what a perfectly shaped GEMM reaches on the device, from the
   catalog's *measured* Maximum Achievable Matmul FLOPS (``mamf`` in ``costmodel/devices.yaml``, cited there),
   with this module's own shape losses at the measured best shape divided out, so that the measured shape is
   predicted at exactly its measurement. A device nobody has measured takes :func:`unmeasured_fraction` (the
   median of the measured ones) and says so in :func:`achievable_source`.
2. **Tile quantization** (NVIDIA, "Matrix Multiplication Background User's Guide", DU-09799-001, section 3.1): a
   partial output tile costs a full one. Tiles (either orientation) are CUTLASS's defaults,
   ``include/cutlass/gemm/device/default_gemm_configuration.h`` (:func:`kernel_config`): 128 x 256 x 64 with 3
   stages for tensor ops on Ampere and later, 128 x 256 x 32 with 2 on Volta, 128 x 128 x 8 with 2 for fp32 on
   the CUDA cores.
3. **Wave quantization** (same guide, 3.2): tiles run in waves of one per SM; a partial last wave costs a full one.
4. **K-loop fill**: the main loop loads ``stages - 1`` K-slices before its first MMA and drains them after the
   last, so a GEMM spends K + (stages - 1) x slice of time on K of work (Ampere tensor ops: K / (K + 128)).
   Small-K GEMMs (attention scores with 64-128-wide heads, 1x1 convolutions with few input channels) lose most
   here. An output with too few tiles to fill the SMs splits K (split-K, as CUTLASS and cuBLAS do), so a
   convolution's weight gradient (64 x 147 outputs over millions of pixels) is not priced on one SM.
5. **Memory roofline**: a GEMM moves at least its three matrices once; time = max(math, bytes / HBM bandwidth).
6. **Launch floor**: no kernel takes less than a launch (:data:`LAUNCH_FLOOR_S`, HolisticTraceAnalysis' lower
   end, as :data:`costmodel.collective_libraries.transports.HOST_LAUNCH_US`).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

from flexcomm.costmodel.collective_libraries.transports import HOST_LAUNCH_US
from flexcomm.costmodel.devices import catalog, lookup


@dataclass(frozen=True)
class KernelConfig:
    """A GEMM kernel's output tile and the K elements its pipeline fills and drains ((stages - 1) x K-slice),
    from CUTLASS's ``DefaultGemmConfiguration`` (include/cutlass/gemm/device/default_gemm_configuration.h)."""

    name: str
    tile: tuple[int, int]
    k_pipeline: int


#: Tensor-op GEMM on Ampere and later: threadblock 128 x 256 x 64, 3 stages.
SM80_TENSOR_OP = KernelConfig("sm80 tensor op", (256, 128), 2 * 64)
#: Tensor-op GEMM on Volta: threadblock 128 x 256 x 32, 2 stages.
SM70_TENSOR_OP = KernelConfig("sm70 tensor op", (256, 128), 1 * 32)
#: fp32 on the CUDA cores (no tensor cores: V100's fp32, any device's fp32 without TF32): 128 x 128 x 8, 2 stages.
SIMT = KernelConfig("simt", (128, 128), 1 * 8)
#: Device families with Volta's first-generation tensor cores.
VOLTA = ("V100", "TITAN V")


def kernel_config(device_name: str, precision: str) -> KernelConfig:
    """The CUTLASS default configuration a device runs a GEMM of ``precision`` with."""
    if precision == "fp32":
        return SIMT
    return SM70_TENSOR_OP if any(family in device_name.upper() for family in VOLTA) else SM80_TENSOR_OP


#: Seconds a kernel takes at least: one host launch.
LAUNCH_FLOOR_S = HOST_LAUNCH_US * 1e-6


@dataclass(frozen=True)
class GemmShape:
    """``count`` independent (m x k) @ (k x n) products (a batched GEMM when count > 1). ``a_elements``: the A
    operand's real size where it is never materialized (a convolution's input, which its implicit GEMM reads
    once, not once per filter tap); None: m x k."""

    m: int
    n: int
    k: int
    count: int = 1
    a_elements: float | None = None

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count

    def bytes_moved(self, element_bytes: float) -> float:
        a = self.m * self.k * self.count if self.a_elements is None else self.a_elements
        return (a + (self.k * self.n + self.m * self.n) * self.count) * element_bytes


#: Split-K factors tried (CUTLASS's ``split_k_slices``; cuBLAS splits K the same way when the output has too
#: few tiles to fill the SMs, e.g. a convolution's weight gradient: 64 x 147 outputs reduced over millions).
SPLIT_K = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@functools.lru_cache(maxsize=65536)
def shape_fill(shape: GemmShape, sms: int | None, config: KernelConfig = SM80_TENSOR_OP) -> float:
    """Fraction of the achievable rate a GEMM of this shape keeps: tile x wave x K-loop fill, for the best tile
    orientation and split-K factor (no wave term and no split when the SM count is unknown). Split-K's final
    reduction of the partial outputs is left out: it moves (splits x m x n) elements, small where splitting
    pays (few output tiles)."""
    best = 0.0
    pipeline = config.k_pipeline
    for tm, tn in (config.tile, config.tile[::-1]):
        tiles = math.ceil(shape.m / tm) * math.ceil(shape.n / tn) * shape.count
        tile_fill = shape.m * shape.n * shape.count / (tiles * tm * tn)
        for split in SPLIT_K if sms else (1,):
            k = shape.k / split
            if split > 1 and (k < max(pipeline, 64) or tiles >= sms):
                break
            fill = tile_fill * k / (k + pipeline)
            if sms:
                work = tiles * split
                fill *= work / (math.ceil(work / sms) * sms)
            best = max(best, fill)
    return best


@functools.cache
def _measured_fractions() -> dict[str, float]:
    out = {}
    for name, device in catalog().items():
        if device.mamf is None:
            continue
        m, n, k = device.mamf.shape
        fill = shape_fill(GemmShape(m, n, k), device.units)
        out[name] = min(1.0, device.mamf.tflops * 1e12 / device.peak("bf16") / fill)
    return out


def measured_ceiling(device_name: str, precision: str = "bf16") -> float:
    """The device's MAMF over its datasheet peak for ``precision`` (bf16, or fp8 for every 8- and 4-bit format:
    FP4 is unmeasured and takes FP8's, the nearest measured format of the same tensor cores), the shape losses
    *not* divided out: no GEMM is priced above the fastest one measured. A device without a measurement takes
    the median of the measured ones."""
    def ceiling(device) -> float | None:  # noqa: ANN001 - a CatalogDevice
        mamf = device.mamf if precision == "bf16" else device.mamf_fp8
        return None if mamf is None else mamf.tflops * 1e12 / device.peak(precision)

    device = lookup(device_name)
    own = ceiling(device) if device is not None else None
    if own is not None:
        return own
    return statistics.median(c for c in map(ceiling, catalog().values()) if c is not None)


def unmeasured_fraction() -> float:
    """The achievable fraction assumed for a device without a MAMF measurement: the median over the catalog's
    measured devices (a device nobody measured is assumed typical, not best)."""
    return statistics.median(_measured_fractions().values())


#: How the fraction of an unmeasured device is chosen (printed by :func:`achievable_source`).
UNMEASURED_FRACTION_RULE = "median achievable fraction of the catalog's measured devices"


def achievable_fraction(device_name: str) -> float:
    """Fraction of peak a perfectly shaped GEMM reaches on ``device_name`` (its catalog MAMF with the shape
    losses at its best shape divided out); the same fraction is applied to every precision's peak."""
    device = lookup(device_name)
    measured = _measured_fractions()
    if device is not None and device.name in measured:
        return measured[device.name]
    return unmeasured_fraction()


def achievable_source(device_name: str) -> str:
    """Where :func:`achievable_fraction`'s value for a device comes from, in words."""
    device = lookup(device_name)
    if device is not None and device.mamf is not None:
        return (f"MAMF {device.mamf.tflops:g} TFLOP/s bf16 at {'x'.join(map(str, device.mamf.shape))} "
                f"({device.mamf.software}; ml-engineering's MAMF table)")
    return f"not measured: {UNMEASURED_FRACTION_RULE} ({unmeasured_fraction():.3f})"


def gemm_seconds(shape: GemmShape, peak_flops: float, achievable: float, sms: int | None,
                 memory_bandwidth_Bps: float | None, element_bytes: float,
                 config: KernelConfig = SM80_TENSOR_OP) -> float:
    """Seconds of one GEMM: math at peak x achievable x shape fill, or its bytes at HBM speed, whichever is
    longer, and never less than a launch."""
    if shape.flops <= 0:
        return 0.0
    math_s = shape.flops / (peak_flops * achievable * shape_fill(shape, sms, config))
    memory_s = shape.bytes_moved(element_bytes) / memory_bandwidth_Bps if memory_bandwidth_Bps else 0.0
    return max(math_s, memory_s, LAUNCH_FLOOR_S)
