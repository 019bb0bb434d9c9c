"""``flexcomm validate --published-training [FILE]``: published data-parallel training throughput, predicted.

The file is NVIDIA DeepLearningExamples' published DDP throughput as transcribed in
``validation/training-throughput/training-throughput.md`` (markdown tables, copied verbatim); another file
of the same form (a multi-node table of the same runs) is read the same way. Every table row becomes one
:class:`TrainingRow`: hardware (the table's column, else its heading), model (the section heading: ResNet-50,
BERT-Large pre-training or SQuAD fine-tuning), precision, GPUs, micro-batch per GPU, accumulation steps,
sequence length and published throughput; a table with one throughput column per precision gives a row per
precision.

Each multi-GPU row is predicted from its *reference*: the same run (model, precision, sequence length,
micro-batch) on the fewest GPUs, in its own table first, else in any table of the same hardware (a 1-GPU row;
for a multi-node table without one, its 1-node row less the exchange the simulator prices for it). The
reference's step is the *measured compute* of a micro-batch, spread over the model's layers in proportion to
their FLOPs (forward one third, backward two). A table may count ``GPUs`` or ``Nodes`` (8 GPUs each), name
throughput columns either way round (``Throughput - TF32``, ``Mixed Precision Throughput``), and give
``X and Y`` cells in the order its header states (``(TF32 and FP16)``). The simulator
then runs one step on the hardware's cluster (:data:`HARDWARE_CLUSTERS`; enough nodes for the GPUs), its
gradient exchange as NCCL runs it on that fabric, and the remaining accumulation micro-batches are added as
compute. How each model's script exchanges gradients (:data:`EXCHANGES`):

* ResNet-50 (``multiproc.py`` + torch DDP): 25 MiB buckets overlapping backward, fp32 gradients (AMP keeps
  fp32 master parameters, so the reduced gradients are fp32);
* BERT pre-training (``run_pretraining.py``, ``allreduce_post_accumulation`` with
  ``allreduce_post_accumulation_fp16`` in the published scripts): one flat allreduce after the last
  micro-batch's backward, in fp16 under mixed precision, no overlap;
* SQuAD (``run_squad.py``, DDP): 25 MiB buckets overlapping backward, fp32 gradients.

Nothing is fitted: the only measured input of a prediction is its own 1-GPU row. Reported per row:
predicted and published throughput, their relative error, predicted and published scaling (x over 1 GPU)
and the gap in points of scaling efficiency; the targets are 3 % and 3 points.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from flexcomm.costmodel.errors import InputError

#: Published table hardware -> the embedded cluster that describes one node of it.
HARDWARE_CLUSTERS = {"dgx a100": "dgx-a100-80g", "dgx-1": "dgx1-v100"}
#: How each model's published script exchanges gradients: (scheme for mixed precision, overlap with backward).
EXCHANGES = {"resnet50": ("dense", True), "bert-pretraining": ("fp16", False), "bert-squad": ("dense", True)}
TARGET_THROUGHPUT = 0.03
TARGET_SCALING_POINTS = 3.0
MIXED = ("amp", "mixed", "fp16")
#: GPUs a node of the published hardware holds (DGX A100 and DGX-1: 8), for tables that count nodes.
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class TrainingRow:
    """One published measurement (a line of a table, one precision)."""

    table: str
    hardware: str  # the class: DGX A100 | DGX-1 (which embedded cluster prices it)
    titled: str  # the hardware as the table titles it (DGX-1 16GB and 32GB are separate references)
    model: str  # resnet50 | bert-pretraining | bert-squad
    precision: str  # as printed: TF32, FP32, mixed precision (AMP), FP16...
    gpus: int
    batch: int  # micro-batch per GPU
    accumulation: int
    seq_len: int | None
    throughput: float  # samples (images or sequences) per second, all GPUs
    scaling: float | None  # as published (x over 1 GPU)

    @property
    def mixed(self) -> bool:
        return any(word in self.precision.lower() for word in MIXED)

    @property
    def precision_class(self) -> str:
        """``mixed`` (AMP, FP16) or the full-precision format as printed (``tf32``, ``fp32``)."""
        return "mixed" if self.mixed else self.precision.lower().split()[0]

    @property
    def key(self) -> tuple[str, str, int | None, int]:
        """What a reference must share with the rows it serves (besides its hardware)."""
        return self.model, self.precision_class, self.seq_len, self.batch


# --- reading the markdown ------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _model_of(heading: str) -> str | None:
    text = heading.lower()
    if "resnet" in text:
        return "resnet50"
    if "squad" in text:
        return "bert-squad"
    if "bert" in text or "pre-training" in text:
        return "bert-pretraining"
    return None


def _hardware_of(text: str) -> str | None:
    low = text.lower()
    if "a100" in low:
        return "DGX A100"
    if "dgx-1" in low or "dgx1" in low or "v100" in low:
        return "DGX-1"
    return None


def _number(text: str, field: str, where: str) -> float:
    match = re.search(r"[-+]?\d[\d,]*(?:\.\d+)?", text)
    if match is None:
        raise InputError(f"{where}: {field}", text, "a number")
    return float(match.group(0).replace(",", ""))


def _split_and(text: str, index: int) -> str:
    """``128 and 256`` (TF32 and FP16) -> the index-th part; a single value serves both."""
    parts = [p.strip() for p in re.split(r"\band\b", text)]
    return parts[index] if len(parts) > index else parts[0]


def read_tables(path: str | Path) -> list[TrainingRow]:
    """Every measurement in a markdown file of published training throughput (see the module doc)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("published-training", str(path), f"a readable markdown file ({exc.__class__.__name__})") \
            from None
    rows: list[TrainingRow] = []
    model, hardware, heading = None, None, ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            model = _model_of(heading) or (model if line.startswith("###") else None)
            hardware = _hardware_of(heading) or (hardware if line.startswith("###") else None)
            i += 1
            continue
        if line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1].replace("|", "").strip()) <= set("-: "):
            header = [h.lower() for h in _cells(line)]
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows += _table_row(header, _cells(lines[i]), model, hardware, heading, f"{path.name}:{i + 1}")
                i += 1
            continue
        i += 1
    if not rows:
        raise InputError("published-training", str(path), "markdown tables with GPUs and throughput columns")
    return rows


def _pair_index(header: str, precision: str) -> int:
    """Which half of an ``X and Y`` cell a precision reads: the header names the order, e.g. ``(TF32 and FP16)``;
    the second is the half-precision one."""
    mixed = any(word in precision.lower() for word in MIXED)
    return 1 if mixed and " and " in header else 0


def _precision_of(key: str, col: dict[str, str]) -> str:
    """``Throughput - TF32 (sequences/sec)`` -> TF32; ``Mixed Precision Throughput`` -> mixed precision; a plain
    ``Throughput`` column -> the row's precision column."""
    text = re.sub(r"\([^)]*\)", "", key).replace("throughput", "").strip(" -:")
    return text or col.get("precision", "")


def _table_row(header: list[str], cells: list[str], model: str | None, hardware: str | None, heading: str,
               where: str) -> list[TrainingRow]:
    if len(cells) != len(header):
        raise InputError(where, "|".join(cells), f"{len(header)} cells as in the table's header")
    col = dict(zip(header, cells, strict=True))
    gpus_key = next((h for h in header if h.startswith("gpus")), None)
    nodes_key = next((h for h in header if "nodes" in h), None)
    throughput_keys = [h for h in header if "throughput" in h and "speedup" not in h]
    if (gpus_key is None and nodes_key is None) or not throughput_keys:
        return []  # not a throughput table
    titled = col.get("hardware (as titled)", "") or heading
    hardware = _hardware_of(titled) or hardware
    if model is None or hardware is None:
        raise InputError(where, heading, "a section heading naming the model (ResNet-50, BERT, SQuAD) and "
                         "a hardware (DGX A100, DGX-1)")
    if gpus_key is not None:
        gpus = _number(col[gpus_key], "GPUs", where)
    else:
        gpus = _number(col[nodes_key], "nodes", where) * GPUS_PER_NODE
    if gpus < 1 or gpus != int(gpus):
        raise InputError(f"{where}: GPUs", col[gpus_key or nodes_key], "a whole number of GPUs >= 1")
    batch_key = next((h for h in header if h.startswith("batch size") or h.startswith("bs/gpu")), None)
    acc_key = next((h for h in header if h.startswith("accumulation steps")), None)
    seq_key = next((h for h in header if h.startswith("sequence length") or h.startswith("seq")), None)
    if batch_key is None:
        raise InputError(f"{where}: batch size", "", "a batch-size column")
    scaling_keys = [h for h in header if "scaling" in h]
    out = []
    for key in throughput_keys:
        precision = _precision_of(key, col)
        if not precision:
            raise InputError(f"{where}: precision", "", "a precision column or one throughput column per precision")
        accumulation = int(_number(_split_and(col[acc_key], _pair_index(acc_key, precision)), "accumulation steps",
                                   where)) if acc_key else 1
        if accumulation < 1:
            raise InputError(f"{where}: accumulation steps", accumulation, "an integer >= 1 (micro-batches per "
                             "optimizer step)")
        printed = int(_number(_split_and(col[batch_key], _pair_index(batch_key, precision)), "batch size", where))
        batch = printed
        if "accumulated batch" in batch_key:  # DGX-1 pre-training prints the accumulated batch (see the file)
            if printed % accumulation:
                raise InputError(f"{where}: batch size", printed, f"an accumulated batch divisible by the "
                                 f"{accumulation} accumulation steps")
            batch = printed // accumulation
        if batch < 1:
            raise InputError(f"{where}: batch size", printed, "a batch of at least one sample per GPU")
        words = precision.lower().split()
        scaling_key = next((h for h in scaling_keys if words and words[0] in h), None)
        if scaling_key is None and len(scaling_keys) == 1:
            scaling_key = scaling_keys[0]
        throughput = _number(col[key], "throughput", where)
        if throughput <= 0:
            raise InputError(f"{where}: throughput", col[key], "a positive throughput (samples per second)")
        out.append(TrainingRow(heading, hardware, titled, model, precision, int(gpus), batch, accumulation,
                               int(_number(col[seq_key], "sequence length", where)) if seq_key else None,
                               throughput, _number(col[scaling_key], "scaling", where) if scaling_key else None))
    return out


# --- predicting ------------------------------------------------------------------------------------


def _model_spec(model: str, seq_len: int | None):  # -> ModelSpec
    from flexcomm.costmodel.compute import get_model, transformer_spec

    if model == "resnet50":
        return get_model("resnet50")
    # BERT-Large's shape: 24 layers, hidden 1024, vocab 30522 (Devlin et al. 2019): ~335M parameters
    return transformer_spec("bert-large", 24, 1024, seq_len or 384, vocab=30522)


def _cluster_for(hardware: str, gpus: int):  # -> Cluster
    from flexcomm.costmodel.cluster import load_cluster

    name = HARDWARE_CLUSTERS[[k for k in HARDWARE_CLUSTERS if k in hardware.lower()][0]]
    cluster = load_cluster(name)
    nodes = math.ceil(gpus / cluster.devices_per_node)
    return cluster if nodes == cluster.nodes else cluster.model_copy(update={"nodes": nodes})


def _simulated_step(row: TrainingRow, micro_s: float) -> float:
    """Seconds of one optimizer step of ``row`` on its hardware when a micro-batch computes in ``micro_s``."""
    from flexcomm.costmodel.compute import ModelSpec
    from flexcomm.sim.training import TrainingConfig, TrainingSimulator
    from flexcomm.sim.workload import TrainingWorkload

    spec = _model_spec(row.model, row.seq_len)
    flops = [layer.forward_flops for layer in spec.layers]
    total = sum(flops)
    measured = {layer.name: (micro_s / 3 * f / total, 2 * micro_s / 3 * f / total)
                for layer, f in zip(spec.layers, flops, strict=True)}
    profiled = ModelSpec.from_profile(spec.name, measured, batch_per_rank=row.batch,
                                      params={layer.name: layer.params for layer in spec.layers})
    scheme, overlap = _exchange(row)
    workload = TrainingWorkload(spec.name, profiled, float(row.batch), spec.description)
    config = TrainingConfig(workload=workload, iterations=1, ranks=row.gpus, scheme=scheme, algorithm="nccl",
                            bucket_count=None if overlap else 1, record_flows=False)
    result = TrainingSimulator(_cluster_for(row.hardware, row.gpus), config).run()
    return float(result.iterations["time_s"].iloc[0]) + (row.accumulation - 1) * micro_s


def _exchange(row: TrainingRow) -> tuple[str, bool]:
    scheme, overlap = EXCHANGES[row.model]
    return (scheme if row.mixed else "dense"), overlap


def micro_batch_seconds(reference: TrainingRow) -> float:
    """The measured compute of one micro-batch: the reference's step, less the exchange the simulator prices
    for it when the reference itself ran on several GPUs (a 1-node row of a multi-node table)."""
    step = reference.gpus * reference.batch * reference.accumulation / reference.throughput
    micro = step / reference.accumulation
    if reference.gpus == 1:
        return micro
    for _ in range(3):  # the exposed exchange hardly depends on the compute it hides behind: converges at once
        exposed = _simulated_step(reference, micro) - micro * reference.accumulation
        micro = (step - exposed) / reference.accumulation
    return micro


def predict_row(row: TrainingRow, reference: TrainingRow) -> dict[str, object]:
    """One row predicted from its reference (the same run on fewer GPUs; see the module doc)."""
    micro_s = micro_batch_seconds(reference)
    step_s = _simulated_step(row, micro_s)
    predicted = row.gpus * row.batch * row.accumulation / step_s
    published_scaling = row.scaling if row.scaling is not None else row.throughput / reference.throughput
    predicted_scaling = predicted / reference.throughput
    widening = row.gpus / reference.gpus
    scheme, overlap = _exchange(row)
    return {
        "table": row.table, "hardware": row.hardware, "titled": row.titled, "model": row.model,
        "precision": row.precision,
        "seq_len": row.seq_len, "gpus": row.gpus, "batch": row.batch, "accumulation": row.accumulation,
        "exchange": f"{scheme} via NCCL, " + ("25 MiB buckets overlapping backward" if overlap else
                                              "one allreduce after backward"),
        "reference_gpus": reference.gpus, "reference_throughput": reference.throughput,
        "compute_step_s": micro_s * row.accumulation, "exposed_comm_s": step_s - micro_s * row.accumulation,
        "published_throughput": row.throughput, "predicted_throughput": predicted,
        "rel_err": predicted / row.throughput - 1.0,
        "published_scaling": published_scaling, "predicted_scaling": predicted_scaling,
        "scaling_gap_points": 100.0 * (predicted_scaling - published_scaling) / widening,
    }


def find_reference(row: TrainingRow, rows: list[TrainingRow]) -> TrainingRow | None:
    """The same run on the fewest GPUs: from the row's own table (its hardware as titled) first, else from any
    table of the same hardware class; model, precision, sequence length and micro-batch must match."""
    for same in (lambda r: r.titled == row.titled, lambda r: r.hardware == row.hardware):
        candidates = [r for r in rows if same(r) and r.key == row.key and r.gpus < row.gpus]
        if candidates:
            return min(candidates, key=lambda r: (r.gpus, rows.index(r)))
    return None


def validate_training(path: str | Path) -> pd.DataFrame:
    """Every row of ``path`` with a reference on fewer GPUs, predicted from it. The smallest run of each group is
    the reference; a multi-GPU row that is neither predicted nor a reference for another is an error (there is
    no measured compute to stand on)."""
    rows = read_tables(path)
    out = []
    for row in rows:
        reference = find_reference(row, rows)
        if reference is None:
            serves = any(r.key == row.key and r.hardware == row.hardware and r.gpus > row.gpus for r in rows)
            if row.gpus == 1 or serves:  # a reference itself (a 1-GPU row, or a multi-node table's first row)
                continue
            raise InputError("reference", f"{row.titled}: {row.model} {row.precision} x{row.gpus} "
                             f"(batch {row.batch}, seq {row.seq_len})", "a row of the same hardware, model, "
                             "precision, sequence length and batch on fewer GPUs (1 GPU: its measured compute)")
        out.append(predict_row(row, reference))
    frame = pd.DataFrame(out)
    frame["meets_target"] = (frame["rel_err"].abs() <= TARGET_THROUGHPUT) & (
        frame["scaling_gap_points"].abs() <= TARGET_SCALING_POINTS)
    return frame
