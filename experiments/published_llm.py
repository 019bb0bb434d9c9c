"""``flexcomm validate --published-llm [FILE]``: NVIDIA's published LLM pre-training throughput, predicted.

The files are NVIDIA's performance summaries as transcribed in ``validation/references/llm-training/`` (markdown
tables copied verbatim, provenance in their INDEX). A table is read from its header: ``Model`` or ``System``
columns, else the ``##### Model: X`` / ``##### System: X`` heading above it, else the file's title line
(NeMo 24.07: "system DGX-H100, precision FP8"). A cell ``X (Y)`` is the same row under the other FP8 recipe
(25.11), so it becomes two rows. Every row is predicted from its own layout (not the planner's choice) by
:class:`planner.llm.layout_step.LayoutPricer`, beside the naive baseline: the row's model FLOPs at the device's
measured BF16 matmul rate (catalog MAMF; the median measured fraction of peak where none is measured), nothing
else. Nothing is fitted to these rows. A FILE may add columns the shipped tables lack: ``CP comm`` (p2p,
all_gather, a2a), ``Dispatcher`` (alltoall, allgather) and ``Capacity factor`` (a number, or dropless); a model
name saying ``tokendrop`` without the last takes capacity 1.0.

The FLOP count is checked first: the row's published TFLOP/s over tokens/s is its FLOPs per token, which
:meth:`Architecture.counted_flops_per_token` must match within 2 % under the release's convention
(Megatron-Bridge: causal attention counted half; NeMo 2024: whole).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from flexcomm.costmodel.bounded_stream import read_text_bounded
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gemm_efficiency import measured_ceiling
from flexcomm.planner.llm.layout import Layout, check_capacity_factor, gemm_precision
from flexcomm.planner.llm.layout_search import search_layouts
from flexcomm.planner.llm.layout_step import LayoutPricer, cluster_of
from flexcomm.planner.llm.presets import resolve_table_name

#: The tables' system names -> embedded clusters.
SYSTEM_CLUSTERS = {"DGX-H100": "dgx-h100", "DGX-B200": "dgx-b200", "DGX-B300": "dgx-b300",
                   "DGX-GB200": "gb200-nvl72", "DGX-GB300": "gb300-nvl72"}
#: Targets of the issue: FLOPs per token within 2 %; per release median |error| <= 5 %, >= 80 % within 10 %.
FLOP_TARGET = 0.02
MEDIAN_TARGET = 0.05
ROW_TARGET = 0.10
SHARE_TARGET = 0.80
_COLUMNS = {"system": "system", "model": "model", "#-gpus": "gpus", "precision": "precision", "gbs": "gbs",
            "mbs": "mbs", "sequence length": "seq_len", "fsdp": "fsdp", "tp": "tp", "pp": "pp", "cp": "cp",
            "vp": "vp", "ep": "ep", "ga": "ga", "tokens / sec / gpu": "tokens_per_s",
            "model tflop / sec / gpu": "tflops", "cp comm": "cp_comm", "dispatcher": "dispatcher",
            "capacity factor": "capacity_factor"}
#: Capacity factor of a row whose model name says tokendrop and whose table gives none: the least capacity that
#: drops nothing under the tables' forced-balanced routing, so it prices as dropless does.
TOKENDROP_CAPACITY = 1.0
_REQUIRED = ("model", "system", "gpus", "precision", "gbs", "mbs", "seq_len", "tp", "pp", "tokens_per_s", "tflops")


def shipped_folder() -> Path:
    """The tables shipped with the package."""
    return Path(__file__).resolve().parent.parent / "validation" / "references" / "llm-training"


@dataclass(frozen=True)
class PublishedRow:
    """One published measurement with its full layout."""

    source: str
    release: str
    convention: str
    system: str
    model: str
    gpus: int
    precision: str
    gbs: int
    mbs: int
    seq_len: int
    tp: int
    pp: int
    cp: int
    vp: int
    ep: int
    fsdp: bool
    tokens_per_s: float
    tflops: float
    #: optional columns of a FILE (the shipped tables state none: Megatron-Core's defaults, dropless routing)
    cp_comm: str = "p2p"
    dispatcher: str = "alltoall"
    capacity_factor: float | None = None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _int(value: str, field: str, where: str) -> int:
    text = value.strip().lower()
    if text in ("n/a", "", "-"):
        return 1
    if not re.fullmatch(r"\d+", text):
        raise InputError(field, f"{where}: {value}", "a whole number or n/a")
    return int(text)


def _number(value: str, field: str, where: str) -> float:
    text = re.sub(r"\(.*", "", value).replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        raise InputError(field, f"{where}: {value}", "a number") from None


def _release(title: str) -> tuple[str, str]:
    """(release label, FLOP convention) from a file's title line."""
    match = re.search(r"(?:container|NeMo)\s+(\d\d\.\d\d)", title)
    if match is None:
        raise InputError("published-llm", title[:80], "a title naming its release, e.g. '... NeMo container 26.02'")
    bridge = "megatron-bridge" in title.lower()
    return (f"{'Megatron-Bridge' if bridge else 'NeMo'} {match.group(1)}", "megatron-bridge" if bridge else "nemo-2024")


def read_tables(path: Path) -> list[PublishedRow]:
    """Every row of one markdown file (see the module docstring)."""
    text = read_text_bounded(path, "published-llm", "markdown table")
    lines = text.splitlines()
    title = next((line for line in lines if line.startswith("# ")), "")
    release, convention = _release(title)
    intro = " ".join(lines[:8])
    defaults: dict[str, str] = {}
    if m := re.search(r"system (DGX-[A-Z0-9]+)", intro):
        defaults["system"] = m.group(1)
    if m := re.search(r"precision (\w+)\.", intro):
        defaults["precision"] = m.group(1)
    rows: list[PublishedRow] = []
    header: list[str] | None = None
    for number, line in enumerate(lines, 1):
        if m := re.match(r"#+\s*(Model|System):\s*(.+)", line):
            defaults[m.group(1).lower()] = m.group(2).strip()
            header = None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = [_COLUMNS.get(c.lower(), c.lower()) for c in cells]
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue
        rows += _rows_of(dict(zip(header, cells, strict=False)), defaults, f"{path.name}:{number}", release,
                         convention)
    return rows


def _rows_of(cells: dict[str, str], defaults: dict[str, str], where: str, release: str,
             convention: str) -> list[PublishedRow]:
    values = {**defaults, **cells}
    missing = [name for name in _REQUIRED if name not in values]
    if missing:
        raise InputError("published-llm", where, "a table with columns or headings for " + ", ".join(missing))
    precisions = [p.strip() for p in re.split(r"[()]", values["precision"]) if p.strip()]
    tokens = [t for t in re.split(r"[()]", values["tokens_per_s"]) if t.strip()]
    tflops = [t for t in re.split(r"[()]", values["tflops"]) if t.strip()]
    out = []
    for i, precision in enumerate(precisions):
        pick = min(i, len(tokens) - 1)
        out.append(PublishedRow(
            source=where, release=release, convention=convention, system=values["system"].strip(),
            model=values["model"].strip(), gpus=_int(values["gpus"], "gpus", where), precision=precision,
            gbs=_int(values["gbs"], "gbs", where), mbs=_int(values["mbs"], "mbs", where),
            seq_len=_int(values["seq_len"], "seq_len", where), tp=_int(values["tp"], "tp", where),
            pp=_int(values["pp"], "pp", where), cp=_int(values.get("cp", "1"), "cp", where),
            vp=_int(values.get("vp", "1"), "vp", where), ep=_int(values.get("ep", "1"), "ep", where),
            fsdp=_int(values.get("fsdp", "0").replace("n/a", "0"), "fsdp", where) > 1,
            tokens_per_s=_number(tokens[pick], "tokens_per_s", where),
            tflops=_number(tflops[min(i, len(tflops) - 1)], "tflops", where), **_routing(values, where)))
    return out


#: How a FILE may spell each routing column's values -> Layout's names.
_ROUTING_NAMES = {
    "cp_comm": {"p2p": "p2p", "ring": "p2p", "all_gather": "all_gather", "allgather": "all_gather", "a2a": "a2a",
                "alltoall": "a2a", "all_to_all": "a2a", "ulysses": "a2a"},
    "dispatcher": {"alltoall": "alltoall", "all_to_all": "alltoall", "a2a": "alltoall", "allgather": "allgather",
                   "all_gather": "allgather"},
}


def _routing(values: dict[str, str], where: str) -> dict[str, object]:
    """The optional CP exchange, EP dispatcher and capacity factor columns of a row, as Layout names them."""
    out: dict[str, object] = {}
    for field, names in _ROUTING_NAMES.items():
        text = values.get(field, "").strip().lower().replace("-", "_")
        if text in ("", "n/a"):
            continue
        if text not in names:
            raise InputError(field, f"{where}: {values[field]}", "one of " + ", ".join(sorted(set(names))))
        out[field] = names[text]
    factor = values.get("capacity_factor", "").strip().lower()
    if factor not in ("", "n/a", "none", "dropless"):
        out["capacity_factor"] = _number(factor, "capacity_factor", where)
        check_capacity_factor(out["capacity_factor"], where=where)
    elif "tokendrop" in values["model"].lower() and factor == "":
        out["capacity_factor"] = TOKENDROP_CAPACITY
    return out


def read_corpus(path: str | Path | None = None) -> list[PublishedRow]:
    """The rows of FILE, or of every ``*.md`` table in the shipped folder but its INDEX."""
    if path:
        return read_tables(Path(path))
    files = sorted(p for p in shipped_folder().glob("*.md") if p.name != "INDEX.md")
    return [row for file in files for row in read_tables(file)]


def naive_tokens_per_s(flops_per_token: float, device_name: str, bf16_peak: float) -> float:
    """The naive baseline: model FLOPs per token at the device's measured BF16 matmul rate, nothing else. The rate
    is the one the model caps its BF16 GEMMs at (:func:`measured_ceiling`: the catalog MAMF, or the median measured
    fraction of peak for a device nobody measured), so the two differ in everything but the rate."""
    return bf16_peak * measured_ceiling(device_name) / flops_per_token


def least_recomputation(pricer, layout):  # (LayoutPricer, Layout) -> LayoutCost
    """The layout with the least recomputation that fits in memory (none, then the experts', then full): the
    tables do not state it, and a run that did not fit would not have been measured. None fitting: none's."""
    from dataclasses import replace

    choices = ("none", "moe", "full") if pricer.arch.moe is not None else ("none", "full")
    first = None
    for recompute in choices:
        cost = pricer.price(replace(layout, recompute=recompute))
        if cost.fits:
            return cost
        first = first or cost
    return first


def predict(rows: list[PublishedRow], rank: bool = True, progress=None) -> pd.DataFrame:  # noqa: ANN001
    """One line per row: FLOPs check, the model's and the naive baseline's tokens/s/GPU and errors, the step's
    parts (seconds); with ``rank``, where the published layout places among every layout the planner prices
    for the row (its GPUs, batch, sequence and precision) and how far it is from the planner's best.
    ``progress``: called with each row done."""
    clusters: dict[str, object] = {}
    records = []
    for row in rows:
        if row.system not in SYSTEM_CLUSTERS:
            raise InputError("system", f"{row.source}: {row.system}", "one of " + ", ".join(SYSTEM_CLUSTERS))
        arch = resolve_table_name(row.model)
        cluster = clusters.setdefault(row.system, load_cluster(SYSTEM_CLUSTERS[row.system]))
        layout = Layout(gpus=row.gpus, global_batch=row.gbs, micro_batch=row.mbs, seq_len=row.seq_len, tp=row.tp,
                        pp=row.pp, cp=row.cp, vp=row.vp, ep=row.ep, fsdp=row.fsdp,
                        precision=gemm_precision(row.precision), cp_comm=row.cp_comm, dispatcher=row.dispatcher,
                        capacity_factor=row.capacity_factor)
        sized = cluster_of(cluster, row.gpus)
        pricer = LayoutPricer(arch, sized)
        cost = least_recomputation(pricer, layout)
        placed = _placement(pricer, row, cost) if rank else {}
        ideal = LayoutPricer(arch, sized, split="ideal").price(cost.layout)
        counted = arch.counted_flops_per_token(row.seq_len, row.convention, row.tp)
        published_fpt = row.tflops * 1e12 / row.tokens_per_s
        device = min(cluster.rank_devices, key=lambda d: d.peak_flops)
        naive = naive_tokens_per_s(counted, device.name, device.peak_flops)
        records.append({
            "release": row.release, "system": row.system, "precision": layout.precision, "model": row.model,
            "class": "MoE" if arch.moe is not None else "dense", "gpus": row.gpus, "layout": layout.label,
            "published_tokens_per_s": row.tokens_per_s, "predicted_tokens_per_s": cost.tokens_per_s_per_gpu,
            "naive_tokens_per_s": naive, "ideal_split_tokens_per_s": ideal.tokens_per_s_per_gpu,
            "rel_error": cost.tokens_per_s_per_gpu / row.tokens_per_s - 1,
            "naive_rel_error": naive / row.tokens_per_s - 1,
            "published_tflops": row.tflops, "predicted_tflops": cost.tokens_per_s_per_gpu * counted / 1e12,
            "flops_per_token": counted, "published_flops_per_token": published_fpt,
            "flops_rel_error": counted / published_fpt - 1, "step_s": cost.step_s,
            "recompute": cost.layout.recompute, "memory_GiB": cost.memory.total / 2**30, "fits": cost.fits,
            **{f"{name}_s": value for name, value in cost.parts().items()}, **placed, "source": row.source})
        if progress is not None:
            progress(row)
    return pd.DataFrame.from_records(records)


def _placement(pricer, row: PublishedRow, cost) -> dict[str, object]:  # noqa: ANN001 - LayoutPricer, LayoutCost
    """Where the published layout's predicted step places among the planner's fitting layouts for the row."""
    found = search_layouts(pricer, row.gpus, row.gbs, row.seq_len, cost.layout.precision,
                           cost.layout.capacity_factor)
    faster = sum(1 for c in found.ranked if c.step_s < cost.step_s * (1 - 1e-9))
    return {"planner_layouts": len(found.ranked), "published_rank": faster + 1,
            "planner_best": found.best.layout.label,
            "published_over_best": cost.step_s / found.best.step_s - 1}


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per release, system x precision and model class: median |error| of the model and of the baseline."""
    groups = []
    for keys, group in frame.groupby(["release", "system", "precision", "class"], sort=True):
        model, naive = group["rel_error"].abs().median(), group["naive_rel_error"].abs().median()
        groups.append({"release": keys[0], "system": keys[1], "precision": keys[2], "model_class": keys[3],
                       "rows": len(group), "model_median": model, "naive_median": naive, "model_closer": model < naive})
    return pd.DataFrame.from_records(groups)


def report_lines(frame: pd.DataFrame) -> list[str]:
    """Markdown: the FLOP check, per-release targets and the per-class table."""
    flops_ok = int((frame["flops_rel_error"].abs() <= FLOP_TARGET).sum())
    lines = [f"FLOPs per token within {FLOP_TARGET:.0%} of the published ratio: {flops_ok} of {len(frame)} rows "
             f"(worst {frame['flops_rel_error'].abs().max():.2%})", "",
             "| release | rows | model median |error| | within 10 % | naive median | naive within 10 % |",
             "|---|---|---|---|---|---|"]
    for release, group in frame.groupby("release", sort=True):
        err, naive = group["rel_error"].abs(), group["naive_rel_error"].abs()
        lines.append(f"| {release} | {len(group)} | {err.median():.1%} | {int((err <= ROW_TARGET).sum())} of "
                     f"{len(group)} | {naive.median():.1%} | {int((naive <= ROW_TARGET).sum())} of {len(group)} |")
    ideal = (frame["ideal_split_tokens_per_s"] / frame["published_tokens_per_s"] - 1).abs().median()
    lines += ["", f"with the pipeline split as evenly as whole layers allow (a recipe's own layout) instead of "
              f"Megatron-Core's default: model median |error| {ideal:.1%}"]
    if "published_over_best" in frame.columns:
        near = int((frame["published_over_best"] <= ROW_TARGET).sum())
        lines += ["", f"published layout within {ROW_TARGET:.0%} of the planner's best predicted layout: {near} of "
                  f"{len(frame)} rows (median rank {frame['published_rank'].median():g} of "
                  f"{frame['planner_layouts'].median():,.0f} fitting layouts)"]
    lines += ["", "| release | system | precision | class | rows | model | naive | closer |",
              "|---|---|---|---|---|---|---|---|"]
    for r in summary(frame).itertuples():
        lines.append(f"| {r.release} | {r.system} | {r.precision} | {r.model_class} | {r.rows} | "
                     f"{r.model_median:.1%} | {r.naive_median:.1%} | {'model' if r.model_closer else 'naive'} |")
    return lines


def target_lines(frame: pd.DataFrame) -> list[str]:
    """The issue's targets, each met or missed, from the frame."""
    groups = summary(frame)
    releases = [(release, group["rel_error"].abs()) for release, group in frame.groupby("release", sort=True)]
    met = [r for r, err in releases if err.median() <= MEDIAN_TARGET and (err <= ROW_TARGET).mean() >= SHARE_TARGET]
    lines = [f"targets: FLOPs per token within {FLOP_TARGET:.0%} on every row: "
             + ("met" if (frame["flops_rel_error"].abs() <= FLOP_TARGET).all() else "MISSED"),
             f"  median |error| <= {MEDIAN_TARGET:.0%} and >= {SHARE_TARGET:.0%} of rows within {ROW_TARGET:.0%}, "
             f"per release: met by {len(met)} of {len(releases)}",
             f"  model closer than the naive baseline in every system x precision x class group: "
             f"{int(groups['model_closer'].sum())} of {len(groups)}"]
    if "published_over_best" in frame.columns:
        share = (frame["published_over_best"] <= ROW_TARGET).mean()
        lines.append(f"  published layout within {ROW_TARGET:.0%} of the planner's best on >= {SHARE_TARGET:.0%} of "
                     f"rows: {share:.0%}")
    return lines


def overall(frame: pd.DataFrame) -> tuple[float, float]:
    """(model, naive) median |error| over every row."""
    return (statistics.median(frame["rel_error"].abs()), statistics.median(frame["naive_rel_error"].abs()))
