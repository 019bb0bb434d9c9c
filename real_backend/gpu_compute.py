"""One GPU checks the compute model: GEMMs, a transformer layer, compression kernels and workload steps, timed
on the device against what the planner, the cost model and the simulator predict for it.

Why: NCCL needs a GPU per rank, so a one-GPU loan measures nothing of the network; it can measure everything
the engines assume about compute. Four sections, each with its own time budget (``--budget-s``):

* ``gemm``: the GEMMs of the transformer layers the planner prices (``Transformer.layer_gemms`` and the logit
  GEMM of GPT 1.7B, 7.5B and 18.4B from Megatron-LM's table, micro-batch 1, t = 1, 2, 4, 8), bf16, against
  :meth:`planner.llm.timing.Hardware.gemm_s` for the catalog's device;
* ``layer``: one transformer layer's forward and backward (torch.nn, unfused attention as the planner prices
  it, dropout 0.1) against the planner's layer time (``LLMPricer.layer_passes_s``, t = 1, no recomputation);
* ``compression``: Top-k, threshold selection, PowerSGD (rank 4, error feedback) and the fp16 round trip on a
  ResNet-50-sized gradient against :func:`costmodel.compression_compute.device_compression_seconds`;
* ``step``: each emulation workload's forward and backward at its batch (what ``--compute-time`` would take)
  against the simulator's price of ``Workload.spec()`` on the device.

Timing: CUDA events around each call, warm-up first, the median of ``--repeats`` (on the CPU, for the
rehearsal: wall clock between the same calls). Predictions need the device in the catalog
(``torch.cuda.get_device_name`` or ``--device-name``); on the CPU they are left empty (the rehearsal proves the
code and the files, not the numbers). Rows are written as they are measured (``gpu_compute.csv``: section,
case, shape, measured and predicted seconds, device, software) and the corpus form of the same file is what
``validation/gpu-compute/`` keeps and ``flexcomm validate --gpu-compute`` reports on.

Run: ``python -m flexcomm.experiments.commands.gpu_compute --out gpu_compute.csv`` (that module parses the flags,
prints each row and writes the file as it grows; :func:`run_sections` here yields the rows).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.compression_compute import device_compression_seconds
from flexcomm.costmodel.device_compute import model_layer_seconds
from flexcomm.costmodel.devices import lookup
from flexcomm.costmodel.errors import InputError
from flexcomm.planner.llm.gpt import Transformer
from flexcomm.planner.llm.pricing import LLMPricer
from flexcomm.planner.llm.timing import Hardware
from flexcomm.workloads import get_workload
from flexcomm.workloads.names import WORKLOADS

#: Megatron-LM Table 1's shapes (layers, hidden, heads), sequence 2048, vocabulary 51,200.
GEMM_MODELS = {"gpt-1.7b": (24, 2304, 24), "gpt-7.5b": (36, 4096, 32), "gpt-18.4b": (40, 6144, 48)}
TENSOR_PARALLEL = (1, 2, 4, 8)
#: The rehearsal's shapes: small enough for two CPU cores.
QUICK_MODELS = {"gpt-tiny": (2, 256, 4)}
SEQ_LEN, VOCAB, QUICK_SEQ_LEN, QUICK_VOCAB = 2048, 51200, 128, 1024
COMPRESSION_NUMEL, QUICK_COMPRESSION_NUMEL = 25_557_032, 262_144  # ResNet-50's gradient
COLUMNS = ("section", "case", "m", "n", "k", "count", "dtype", "measured_s", "predicted_s", "rel_error",
           "device", "catalog_device", "torch", "cuda")


class Timer:
    """Median seconds of a callable on a device: CUDA events on a GPU, the wall clock on the CPU."""

    def __init__(self, device: torch.device, repeats: int, warmup: int = 3) -> None:
        self.device, self.repeats, self.warmup = device, repeats, warmup

    def __call__(self, fn: Callable[[], object]) -> float:
        for _ in range(self.warmup):
            fn()
        if self.device.type != "cuda":
            times = []
            for _ in range(self.repeats):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            return statistics.median(times)
        torch.cuda.synchronize(self.device)
        pairs = []
        for _ in range(self.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(self.device)
        return statistics.median(s.elapsed_time(e) / 1e3 for s, e in pairs)


class Context:
    """The device, what the catalog knows of it and the software, shared by every section."""

    def __init__(self, device: torch.device, device_name: str | None, quick: bool, repeats: int) -> None:
        self.device, self.quick = device, quick
        self.timer = Timer(device, repeats)
        self.name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        entry = lookup(device_name or self.name)
        self.catalog = entry.name if entry is not None else ""
        self.dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        self.software = {"torch": torch.__version__, "cuda": torch.version.cuda or ""}

    def cluster(self):  # -> Cluster: one node holding this device, for the engines' pricing
        return Cluster.from_dict({"name": "gpu-check", "nodes": 1, "devices_per_node": 1,
                                  "device": {"name": self.catalog},
                                  "intra_link": {"latency": "1us", "bandwidth": "100GB/s"},
                                  "inter_link": {"latency": "1us", "bandwidth": "100Gbit/s"}})

    def row(self, section: str, case: str, measured: float, predicted: float | None, shape=(None,) * 4,
            dtype: str = "") -> dict[str, Any]:
        rel = predicted / measured - 1 if predicted and measured > 0 else None
        m, n, k, count = shape
        return {"section": section, "case": case, "m": m, "n": n, "k": k, "count": count,
                "dtype": dtype or str(self.dtype).removeprefix("torch."), "measured_s": measured,
                "predicted_s": predicted, "rel_error": rel, "device": self.name, "catalog_device": self.catalog,
                **self.software}


def _transformer(shape: tuple[int, int, int], quick: bool):  # -> planner.llm.gpt.Transformer
    layers, hidden, heads = shape
    return Transformer(layers, hidden, heads, QUICK_SEQ_LEN if quick else SEQ_LEN, QUICK_VOCAB if quick else VOCAB)


def gemm_section(ctx: Context) -> list[dict[str, Any]]:
    """Every GEMM of the planner's layer (and the logits) per model and t, timed against its prediction."""
    hardware = Hardware.of(ctx.cluster()) if ctx.catalog else None
    rows = []
    for name, shape in (QUICK_MODELS if ctx.quick else GEMM_MODELS).items():
        model = _transformer(shape, ctx.quick)
        for t in (1, 2) if ctx.quick else TENSOR_PARALLEL:
            if model.heads % t:
                continue
            for g in [*model.layer_gemms(1, t), model.logit_gemm(1, t)]:
                a = torch.randn(g.count, g.m, g.k, device=ctx.device, dtype=ctx.dtype)
                b = torch.randn(g.count, g.k, g.n, device=ctx.device, dtype=ctx.dtype)
                measured = ctx.timer(lambda a=a, b=b: torch.bmm(a, b))
                predicted = hardware.gemm_s(g, a.element_size()) if hardware else None
                rows.append(ctx.row("gemm", f"{name} t{t} {g.name}", measured, predicted, (g.m, g.n, g.k, g.count)))
                del a, b
    return rows


class Block(torch.nn.Module):
    """A GPT layer as the planner prices it: pre-norm, unfused attention (scores, softmax, dropout, context),
    GeLU MLP of 4h, dropout after the projection and the MLP; input (sequence, batch, hidden)."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.qkv, self.proj = torch.nn.Linear(hidden, 3 * hidden), torch.nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)
        self.dropout = torch.nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(self.ln1(x)).view(s, b * self.heads, 3 * d).transpose(0, 1).split(d, dim=-1)
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(d)
        context = torch.bmm(self.dropout(torch.softmax(scores, dim=-1)), v)
        x = x + self.dropout(self.proj(context.transpose(0, 1).reshape(s, b, h)))
        return x + self.dropout(self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x)))))


def layer_section(ctx: Context) -> list[dict[str, Any]]:
    """One layer's forward + backward per model against the planner's layer passes (t = 1, no recompute)."""
    rows = []
    for name, shape in (QUICK_MODELS if ctx.quick else GEMM_MODELS).items():
        model = _transformer(shape, ctx.quick)
        block = Block(model.hidden, model.heads).to(ctx.device, ctx.dtype)
        x = torch.randn(model.seq_len, 1, model.hidden, device=ctx.device, dtype=ctx.dtype, requires_grad=True)

        def step(block: Block = block, x: torch.Tensor = x) -> None:
            block(x).sum().backward()

        measured = ctx.timer(step)
        predicted = None
        if ctx.catalog:
            cluster = ctx.cluster()
            pricer = LLMPricer(model, Hardware.of(cluster), 1, 1, cluster.device.memory_bytes, attention="unfused")
            forward, backward, _ = pricer.layer_passes_s(1, 1, False, "none")
            predicted = forward + backward
        rows.append(ctx.row("layer", f"{name} forward+backward", measured, predicted,
                            (model.seq_len, model.hidden, model.hidden, 1)))
        del block, x
    return rows


def _powersgd(matrix: torch.Tensor, error: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """PyTorch's powerSGD_hook on one matrix, on one rank: error feedback, P = M Q, orthogonalise, Q = M^T P,
    M' = P Q^T, the new error."""
    matrix = matrix + error
    p = torch.linalg.qr(matrix @ q).Q
    q_new = matrix.T @ p
    approx = p @ q_new.T
    error.copy_(matrix - approx)
    return approx


def compression_section(ctx: Context) -> list[dict[str, Any]]:
    """Top-k, threshold, PowerSGD and fp16 on one gradient against the cost model's per-device price."""
    n = QUICK_COMPRESSION_NUMEL if ctx.quick else COMPRESSION_NUMEL
    grad = torch.randn(n, device=ctx.device)  # gradients are fp32 (AMP keeps fp32 master parameters)
    k = max(1, n // 100)
    threshold = float(grad.abs().kthvalue(n - k + 1).values)
    side = math.isqrt(n)
    matrix = grad[: side * side].view(side, side)
    error, q = torch.zeros_like(matrix), torch.randn(side, 4, device=ctx.device)
    kernels = {
        "topk-ag": lambda: torch.topk(grad.abs(), k, sorted=False),
        "threshold": lambda: (grad.abs() >= threshold).nonzero(),
        "powersgd": lambda: _powersgd(matrix, error, q),
        "fp16": lambda: grad.half().float(),
    }
    device = ctx.cluster().device if ctx.catalog else None
    rows = []
    for scheme, fn in kernels.items():
        measured = ctx.timer(fn)
        numel = side * side if scheme == "powersgd" else n
        predicted = device_compression_seconds(scheme, numel, device) if device is not None else None
        rows.append(ctx.row("compression", f"{scheme} of {numel:,} fp32 elements", measured, predicted,
                            (numel, None, None, 1), dtype="float32"))
    return rows


def step_section(ctx: Context) -> list[dict[str, Any]]:
    """Each emulation workload's forward + backward at its batch size against the simulator's price."""
    device = ctx.cluster().device if ctx.catalog else None
    rows = []
    for name in WORKLOADS:
        workload = get_workload(name)
        model = workload.build_model(0).to(ctx.device)
        batch = workload.example_input(workload.batch_size).to(ctx.device)
        target = torch.randint(0, workload.num_classes, (workload.batch_size,), device=ctx.device)

        def step(model: torch.nn.Module = model, batch: torch.Tensor = batch, target: torch.Tensor = target,
                 loss_fn=workload.loss_fn) -> None:
            model.zero_grad(set_to_none=True)
            loss_fn(model(batch), target).backward()

        measured = ctx.timer(step)
        predicted = None
        if device is not None:
            fwd, bwd = model_layer_seconds(workload.spec(model=model.cpu()), workload.batch_size, device)
            predicted = float(fwd.sum() + bwd.sum())
        rows.append(ctx.row("step", f"{name} batch {workload.batch_size}", measured, predicted, dtype="float32"))
        del model, batch
    return rows


SECTIONS: dict[str, Callable[[Context], list[dict[str, Any]]]] = {
    "gemm": gemm_section, "layer": layer_section, "compression": compression_section, "step": step_section}


def section_names(sections: str | Sequence[str], repeats: int) -> list[str]:
    """The sections asked for (a comma list or names), refusing an unknown one and ``repeats`` below 1."""
    names = [x.strip() for x in (sections.split(",") if isinstance(sections, str) else sections) if x.strip()]
    unknown = [x for x in names if x not in SECTIONS]
    if unknown:
        raise InputError("sections", ",".join(unknown), f"some of {', '.join(SECTIONS)}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InputError("repeats", repeats, "an integer >= 1")
    return names


@dataclass(frozen=True)
class SectionResult:
    """One section's rows (:data:`COLUMNS`) and the seconds it took."""

    section: str
    rows: list[dict[str, Any]]
    seconds: float


def run_sections(ctx: Context, sections: Sequence[str]) -> Iterator[SectionResult]:
    """Each section in turn, yielded as it ends (so a caller can keep its file and its log up to date when a
    time limit strikes mid-run); CUDA's cache emptied between sections."""
    for section in section_names(sections, ctx.timer.repeats):
        started = time.perf_counter()
        rows = SECTIONS[section](ctx)
        yield SectionResult(section, rows, time.perf_counter() - started)
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
