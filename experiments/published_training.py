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

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.compute import ModelSpec, get_model, transformer_spec
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_RANKS, read_text_bounded
from flexcomm.experiments.published_compute import catalog_micro_batch_seconds
from flexcomm.sim.training import TrainingSimulator
from flexcomm.sim.training_config import TrainingConfig
from flexcomm.sim.workload import TrainingWorkload

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
    scaling: float | None  # as published (x over 1 GPU, or over the table's first row)
    nodes: int | None = None  # as a multi-node table counts them (None: a GPUs column)
    note: str = ""  # where the printed columns contradict each other, which value was read

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

#: Rows one corpus may hold (each is simulated twice, ~0.1 s apiece).
MAX_TRAINING_ROWS = 2_000
#: Frameworks whose published script's exchange is modelled (:data:`EXCHANGES`); tables of others are skipped.
FRAMEWORKS = ("pytorch",)
#: Words of precisions in table headers, as the class a cell pair is ordered by.
_PRECISION_WORDS = (("mixed", "mixed"), ("fp16", "mixed"), ("amp", "mixed"), ("bf16", "mixed"), ("tf32", "tf32"),
                    ("fp32", "fp32"))


@dataclass
class TrainingCorpus:
    """What a set of markdown files holds: the rows flexcomm prices, and the tables it leaves out, with why."""

    rows: list[TrainingRow]
    skipped: list[tuple[str, str]]  # (file: table heading, why)


def _cells(line: str) -> list[str]:
    return [c.replace("**", "").replace("`", "").strip() for c in line.strip().strip("|").split("|")]


def _model_of(heading: str, inherited: str | None) -> tuple[str | None, str]:
    """The model a heading names (``resnet50``, ``bert-pretraining``, ``bert-squad``), else None with the name."""
    text = heading.lower()
    for other in ("biobert", "bart", "transformer-xl", "efficientnet", "gnmt", "electra"):
        if other in text:
            return None, other
    if "resnet" in text:
        return "resnet50", ""
    if "squad" in text and "pre-train" not in text:
        return "bert-squad", ""
    if "bert" in text:
        return "bert-pretraining", ""
    if "pre-train" in text and inherited in ("bert-pretraining", "bert-squad"):
        return "bert-pretraining", ""
    return None, ""


def _framework_of(heading: str) -> str | None:
    text = heading.lower()
    for name, key in (("pytorch", "pytorch"), ("tensorflow", "tensorflow"), ("paddle", "paddlepaddle"),
                      ("mxnet", "mxnet")):
        if name in text:
            return key
    return None


def _hardware_of(text: str) -> str | None:
    low = text.lower()
    if "dgx-2" in low or "dgx2" in low:
        return "DGX-2"  # no embedded cluster describes it: its tables are skipped, said so
    if "a100" in low:
        return "DGX A100"
    if "dgx-1" in low or "dgx1" in low or "v100" in low:
        return "DGX-1"
    return None


def _number(text: str, field: str, where: str) -> float:
    match = re.search(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?", text)  # 1e308 is not 1
    if match is None:
        raise InputError(f"{where}: {field}", text, "a number")
    value = float(match.group(0).replace(",", ""))
    if not math.isfinite(value) or abs(value) > 1e15:
        raise InputError(f"{where}: {field}", text, "a number a table could print (at most 1e15)")
    return value


def _pair_order(header: str) -> list[str]:
    """The precision classes an ``X and Y`` / ``X, Y`` cell's parts are in, as its header names them
    (``(TF32 and FP16)``, ``: mixed precision, FP32``); [] when the header names none."""
    inside = re.search(r"\(([^)]*\band\b[^)]*)\)", header) or re.search(r":\s*(.+)$", header)
    if inside is None:
        return []
    order = []
    for part in re.split(r"\band\b|,", inside.group(1)):
        found = next((cls for word, cls in _PRECISION_WORDS if word in part), None)
        if found:
            order.append(found)
    return order


def _part(text: str, header: str, precision_class: str) -> str:
    """``128 and 256`` / ``60 , 32`` -> the part of ``precision_class`` in the header's order; one value serves
    every precision."""
    text = re.sub(r"\([^)]*\)", "", text)  # "112 (config, assumed)": a remark, not a second value
    parts = [p.strip() for p in re.split(r"\band\b|,(?!\d{3}\b)", text) if p.strip()]
    order = _pair_order(header)
    index = order.index(precision_class) if precision_class in order else (
        1 if precision_class == "mixed" and len(parts) > 1 and not order else 0)
    return parts[index] if len(parts) > index else parts[0]


def read_corpus(paths: str | Path | list[str | Path]) -> TrainingCorpus:
    """Every measurement in markdown files of published training throughput (see the module doc); tables of a
    model, hardware or framework flexcomm does not price are listed in ``skipped`` with why."""
    rows: list[TrainingRow] = []
    skipped: list[tuple[str, str]] = []
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        path = Path(path)
        lines = read_text_bounded(path, "published-training", "markdown file").splitlines()
        rows_here, skipped_here = _read_lines(lines, path.name)
        rows += rows_here
        skipped += skipped_here
        if len(rows) > MAX_TRAINING_ROWS:
            raise InputError("published-training", str(path), f"at most {MAX_TRAINING_ROWS:,} table rows in all")
    if not rows:
        why = "; ".join(f"{where}: {reason}" for where, reason in skipped[:3])
        raise InputError("published-training", ", ".join(str(Path(p).name) for p in (
            [paths] if isinstance(paths, (str, Path)) else paths)), "markdown tables with GPUs (or Nodes) and "
            "throughput columns of a model flexcomm prices" + (f" ({why[:200]})" if why else ""))
    return TrainingCorpus(rows, skipped)


def read_tables(path: str | Path) -> list[TrainingRow]:
    """The rows of one markdown file (:func:`read_corpus`)."""
    return read_corpus(path).rows


def _read_lines(lines: list[str], name: str) -> tuple[list[TrainingRow], list[tuple[str, str]]]:
    rows: list[TrainingRow] = []
    skipped: list[tuple[str, str]] = []
    model, hardware, framework, heading, other = None, None, None, "", ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            sub = line.startswith("###")
            found, named = _model_of(heading, model)
            model, other = (found, named) if found or named or not sub else (model, other)
            hardware = _hardware_of(heading) or (hardware if sub else None)
            framework = _framework_of(heading) or (framework if sub else None)
            i += 1
            continue
        if line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1].replace("|", "").strip()) <= set("-: "):
            header = [h.lower() for h in _cells(line)]
            i += 2
            body = []
            while i < len(lines) and lines[i].startswith("|"):
                body.append((i + 1, _cells(lines[i])))
                i += 1
            if not _is_throughput_table(header):
                continue
            titled_column = "hardware (as titled)" in header
            why = ("the model " + (other or "it names") + " is not one flexcomm prices (ResNet-50, BERT-Large "
                   "pre-training, SQuAD)") if model is None else (
                "its hardware is not an embedded cluster (DGX A100, DGX-1)" if hardware not in ("DGX A100", "DGX-1")
                and not titled_column else
                f"the {framework} script's exchange is not modelled (PyTorch DDP's and the PyTorch BERT "
                "script's are)" if framework not in (None, *FRAMEWORKS) else "")
            if why:
                skipped.append((f"{name}: {heading}", why))
                continue
            for number, cells in body:
                rows += _table_row(header, cells, model, hardware, heading, f"{name}:{number}")
            continue
        i += 1
    return rows, skipped


def _is_throughput_table(header: list[str]) -> bool:
    scale = any(h.startswith("gpus") or "nodes" in h for h in header)
    return scale and any("throughput" in h and "speedup" not in h and "scaling" not in h for h in header)


def _precision_of(key: str, col: dict[str, str]) -> str:
    """``Throughput - TF32 (sequences/sec)`` -> TF32; ``Mixed Precision Throughput`` -> mixed precision; a plain
    ``Throughput`` column -> the row's precision column."""
    text = re.sub(r"\([^)]*\)", "", key).replace("throughput", "").strip(" -:")
    return text or col.get("precision", "")


def _precision_class(precision: str) -> str:
    low = precision.lower()
    return "mixed" if any(word in low for word in MIXED) else low.split()[0]


def _gpus(col: dict[str, str], header: list[str], where: str) -> tuple[int, int | None]:
    """(GPUs in all, nodes or None): ``GPUs``; ``Nodes`` x ``GPUs / node`` (NVIDIA's multi-node layout); ``Nodes``
    alone at the hardware's 8 GPUs a node."""
    per_node_key = next((h for h in header if h.startswith("gpus") and ("node" in h)), None)
    total_key = next((h for h in header if h.startswith("gpus") and h != per_node_key), None)
    nodes_key = next((h for h in header if "nodes" in h), None)
    nodes = None
    if nodes_key is not None:
        nodes = _number(col[nodes_key], "nodes", where)
        if nodes < 1 or nodes != int(nodes):
            raise InputError(f"{where}: nodes", col[nodes_key], "a whole number of nodes >= 1")
    if total_key is not None:
        gpus = _number(col[total_key], "GPUs", where)
    elif nodes is not None:
        per_node = _number(col[per_node_key], "GPUs / node", where) if per_node_key else GPUS_PER_NODE
        gpus = nodes * per_node
    else:
        gpus = _number(col[per_node_key], "GPUs / node", where)
    if gpus < 1 or gpus != int(gpus):
        raise InputError(f"{where}: GPUs", gpus, "a whole number of GPUs >= 1")
    MAX_RANKS.check(f"{where}: GPUs", gpus)
    return int(gpus), None if nodes is None else int(nodes)


def _batch_and_accumulation(col: dict[str, str], header: list[str], precision_class: str,
                            where: str) -> tuple[int, int, str]:
    """Micro-batch per GPU and accumulation steps, and a note where the printed values contradict each other
    (micro-batch x steps against an ``Accumulated Batch size`` column): the value that makes the three agree by
    changing one printed number is read, and the note says which."""
    batch_key = next((h for h in header if h.startswith("batch size") or h.startswith("bs/gpu")), None)
    if batch_key is None:
        raise InputError(f"{where}: batch size", "", "a batch-size column")
    acc_key = next((h for h in header if h.startswith("accumulation steps") or h.startswith("gradient accumulation")),
                   None)
    accumulated_key = next((h for h in header if h.startswith("accumulated batch")), None)
    accumulation = int(_number(_part(col[acc_key], acc_key, precision_class), "accumulation steps", where)) \
        if acc_key else 1
    if accumulation < 1:
        raise InputError(f"{where}: accumulation steps", accumulation, "an integer >= 1 (micro-batches per "
                         "optimizer step)")
    printed = int(_number(_part(col[batch_key], batch_key, precision_class), "batch size", where))
    batch, note = printed, ""
    if "accumulated batch" in batch_key:  # DGX-1 pre-training prints the accumulated batch (see the file)
        if printed % accumulation:
            raise InputError(f"{where}: batch size", printed, f"an accumulated batch divisible by the "
                             f"{accumulation} accumulation steps")
        batch = printed // accumulation
    elif accumulated_key is not None:
        total = int(_number(_part(col[accumulated_key], accumulated_key, precision_class), "accumulated batch",
                            where))
        if batch * accumulation != total:
            if total % accumulation == 0:
                batch, note = total // accumulation, (f"batch {printed} as printed contradicts {total} accumulated "
                                                      f"over {accumulation} steps: read as {total // accumulation}")
            elif total % batch == 0:
                accumulation, note = total // batch, (f"{accumulation} accumulation steps read from {total} / "
                                                      f"{batch} (the printed steps contradict the accumulated batch)")
            else:
                raise InputError(f"{where}: accumulated batch", total, f"batch {printed} x {accumulation} steps, as "
                                 "the row's own columns give it")
    if batch < 1:
        raise InputError(f"{where}: batch size", printed, "a batch of at least one sample per GPU")
    return batch, accumulation, note


def _table_row(header: list[str], cells: list[str], model: str, hardware: str | None, heading: str,
               where: str) -> list[TrainingRow]:
    if len(cells) != len(header):
        raise InputError(where, "|".join(cells), f"{len(header)} cells as in the table's header")
    col = dict(zip(header, cells, strict=True))
    throughput_keys = [h for h in header if "throughput" in h and "speedup" not in h and "scaling" not in h]
    titled = col.get("hardware (as titled)", "") or heading
    hardware = _hardware_of(titled) or hardware
    if hardware not in ("DGX A100", "DGX-1"):
        raise InputError(f"{where}: hardware", titled, "a DGX A100 or DGX-1 (the embedded clusters that price it)")
    gpus, nodes = _gpus(col, header, where)
    seq_key = next((h for h in header if h.startswith("sequence length") or h.startswith("seq")), None)
    scaling_keys = [h for h in header if "scaling" in h]
    out = []
    for key in throughput_keys:
        precision = _precision_of(key, col)
        if not precision:
            raise InputError(f"{where}: precision", "", "a precision column or one throughput column per precision")
        if not col[key].strip() or col[key].strip().lower() in ("-", "n/a", "na"):
            continue  # a precision the run did not measure (out of memory)
        batch, accumulation, note = _batch_and_accumulation(col, header, _precision_class(precision), where)
        words = precision.lower().split()
        scaling_key = next((h for h in scaling_keys if words and words[0] in h), None)
        if scaling_key is None and len(scaling_keys) == 1:
            scaling_key = scaling_keys[0]
        throughput = _number(col[key], "throughput", where)
        if throughput <= 0:
            raise InputError(f"{where}: throughput", col[key], "a positive throughput (samples per second)")
        out.append(TrainingRow(heading, hardware, titled, model, precision, gpus, batch, accumulation,
                               int(_number(col[seq_key], "sequence length", where)) if seq_key else None,
                               throughput, _number(col[scaling_key], "scaling", where) if scaling_key else None,
                               nodes, note))
    return out


# --- predicting ------------------------------------------------------------------------------------


def _model_spec(model: str, seq_len: int | None):  # -> ModelSpec
    if model == "resnet50":
        return get_model("resnet50")
    # BERT-Large's shape: 24 layers, hidden 1024, vocab 30522 (Devlin et al. 2019): ~335M parameters
    return transformer_spec("bert-large", 24, 1024, seq_len or 384, vocab=30522,
                            attention="unfused")  # NVIDIA's published BERT runs: unfused softmax


def _cluster_for(hardware: str, gpus: int):  # -> Cluster
    name = HARDWARE_CLUSTERS[[k for k in HARDWARE_CLUSTERS if k in hardware.lower()][0]]
    cluster = load_cluster(name)
    nodes = math.ceil(gpus / cluster.devices_per_node)
    return cluster if nodes == cluster.nodes else cluster.model_copy(update={"nodes": nodes})


def _simulated_step(row: TrainingRow, micro_s: float) -> float:
    """Seconds of one optimizer step of ``row`` on its hardware when a micro-batch computes in ``micro_s``."""
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


def predict_row(row: TrainingRow, reference: TrainingRow | None) -> dict[str, object]:
    """One row predicted from its reference (the same run on fewer GPUs; see the module doc), or from the
    description alone where the tables hold none (the device catalog's compute of a micro-batch); beside it, the
    naive baseline (linear scaling of the reference, or of the catalog's compute) and the description's
    prediction."""
    described_micro = catalog_micro_batch_seconds(row)
    described_step = _simulated_step(row, described_micro)
    described = row.gpus * row.batch * row.accumulation / described_step
    if reference is not None:
        micro_s = micro_batch_seconds(reference)
        step_s = _simulated_step(row, micro_s)
        predicted = row.gpus * row.batch * row.accumulation / step_s
        baseline = reference.throughput * row.gpus / reference.gpus
        source = (f"its {reference.gpus}-GPU row" + ("" if reference.gpus == 1 else ", less the exchange priced "
                                                     "for it"))
    else:
        micro_s, step_s, predicted = described_micro, described_step, described
        baseline = row.gpus * row.batch / described_micro  # the catalog's compute, scaled linearly
        source = "the description (no row of this run on fewer GPUs)"
    # scaling over the reference row actually used (a printed column may be over another row: a multi-node
    # table's first row predicted from the single-node table's 1-GPU row prints 1.00)
    published_scaling = row.throughput / reference.throughput if reference is not None else None
    widening = row.gpus / reference.gpus if reference is not None else None
    predicted_scaling = predicted / reference.throughput if reference is not None else None
    scheme, overlap = _exchange(row)
    return {
        "table": row.table, "hardware": row.hardware, "titled": row.titled, "model": row.model,
        "precision": row.precision, "seq_len": row.seq_len, "gpus": row.gpus, "nodes": row.nodes,
        "scale": "multi-node" if row.gpus > GPUS_PER_NODE else "one node",
        "batch": row.batch, "accumulation": row.accumulation,
        "exchange": f"{scheme} via NCCL, " + ("25 MiB buckets overlapping backward" if overlap else
                                              "one allreduce after backward"),
        "predicted_from": source,
        "reference_gpus": reference.gpus if reference is not None else None,
        "reference_throughput": reference.throughput if reference is not None else None,
        "compute_step_s": micro_s * row.accumulation, "exposed_comm_s": step_s - micro_s * row.accumulation,
        "published_throughput": row.throughput, "predicted_throughput": predicted,
        "rel_error": predicted / row.throughput - 1.0,
        "baseline_throughput": baseline, "baseline_rel_error": baseline / row.throughput - 1.0,
        "description_throughput": described, "description_rel_error": described / row.throughput - 1.0,
        "published_scaling": published_scaling, "predicted_scaling": predicted_scaling,
        "scaling_gap_points": (100.0 * (predicted_scaling - published_scaling) / widening
                               if predicted_scaling is not None and published_scaling is not None else None),
        "note": row.note,
    }


def find_reference(row: TrainingRow, rows: list[TrainingRow]) -> TrainingRow | None:
    """The same run on the fewest GPUs: from the row's own table (its hardware as titled) first, else from any
    table of the same hardware class; model, precision, sequence length and micro-batch must match."""
    for same in (lambda r: r.table == row.table and r.titled == row.titled, lambda r: r.titled == row.titled,
                 lambda r: r.hardware == row.hardware):
        candidates = [r for r in rows if same(r) and r.key == row.key and r.gpus < row.gpus]
        if candidates:
            return min(candidates, key=lambda r: (r.gpus, rows.index(r)))
    return None


def validate_training(paths: str | Path | list[str | Path]) -> pd.DataFrame:
    """Every multi-GPU row of ``paths`` predicted: from its reference on fewer GPUs where the tables hold one
    (the smallest run of each group is the reference and not predicted itself), else from the description."""
    return validate_corpus(read_corpus(paths))


def validate_corpus(corpus: TrainingCorpus) -> pd.DataFrame:
    rows = corpus.rows
    out = []
    for row in rows:
        reference = find_reference(row, rows)
        if reference is None and (row.gpus == 1 or any(r.key == row.key and r.hardware == row.hardware
                                                       and r.gpus > row.gpus for r in rows)):
            continue  # a reference itself (a 1-GPU row, or a multi-node table's first row)
        out.append(predict_row(row, reference))
    frame = pd.DataFrame(out)
    if frame.empty:
        raise InputError("published-training", "only single-GPU rows", "rows of several GPUs to predict")
    within = frame["rel_error"].abs() <= TARGET_THROUGHPUT
    gap = frame["scaling_gap_points"].astype(float)
    frame["meets_target"] = within & (gap.isna() | (gap.abs() <= TARGET_SCALING_POINTS))
    return frame


def class_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per class of rows (hardware, model, precision, one node or several): the model's and the linear
    baseline's median |error| and which is closer."""
    out = []
    precision = frame["precision"].map(_precision_class)
    for (scale, hardware, model, klass), part in frame.groupby([frame["scale"], frame["hardware"], frame["model"],
                                                                precision], sort=True):
        model_median = float(part["rel_error"].abs().median())
        base_median = float(part["baseline_rel_error"].abs().median())
        out.append({"scale": scale, "hardware": hardware, "model": model, "precision": klass, "rows": len(part),
                    "model_median_abs_error": model_median, "baseline_median_abs_error": base_median,
                    "model_closer": model_median < base_median})
    return pd.DataFrame(out)
