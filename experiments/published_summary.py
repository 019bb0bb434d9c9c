"""NCCL's choice of algorithm across scale, checked against a published table of peak busbw per forced algorithm.

A sweep shows what NCCL ran at each size; a table that forces every algorithm at every node count shows which
one *should* win, so the tuner's choice can be checked across scale. ``DIR/summaries/<id>.txt`` holds such a
table as its source printed it (markdown: ``| Nodes (GPUs) | Ring | Tree | NVLS / NVLSTree | CollnetChain |
CollnetDirect | Best |``, the first ``all_reduce`` table), ``DIR/summaries/<id>.yaml`` its hardware. For every
node count: each forced algorithm priced at the table's size (32 GiB), the measured best, and NCCL's own
choice with its predicted busbw. Nothing is fitted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.collective_libraries.call_cost import explain
from flexcomm.costmodel.errors import InputError

#: the table's columns -> the forced algorithm (NVLS on one node, NVLS-tree across nodes)
COLUMNS = {"ring": "ring", "tree": "tree", "nvls / nvlstree": "nvls", "collnetchain": "collnet_chain",
           "collnetdirect": "collnet_direct"}
SIZE_BYTES = 32 << 30


@dataclass
class ScaleRow:
    """One node count: measured and predicted busbw (GB/s) per forced algorithm, and the choices."""

    nodes: int
    gpus: int
    measured: dict[str, float]
    predicted: dict[str, float] = field(default_factory=dict)
    nccl_choice: str = ""
    nccl_busbw: float = 0.0

    @property
    def measured_best(self) -> str:
        return max(self.measured, key=lambda k: self.measured[k]) if self.measured else ""


def _number(cell: str) -> float | None:
    match = re.search(r"\d+(?:\.\d+)?", cell.replace("*", ""))
    if match is None or "retry" in cell or "✗" in cell:
        return None
    return float(match[0])


def read_summary(path: Path) -> list[ScaleRow]:
    """The first all_reduce table of a summary file (one line error naming the file for anything else)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if "all_reduce" in line and line.startswith("## ")), None)
    if start is None:
        raise InputError(str(path), "no '## ... all_reduce ...' section", "a summary holding an all_reduce table")
    header = next((i for i in range(start, len(lines)) if lines[i].startswith("| Nodes")), None)
    if header is None:
        raise InputError(str(path), f"line {start + 1}", "a '| Nodes (GPUs) | Ring | ...' table after the section")
    names = [c.strip().strip("*").strip().lower() for c in lines[header].strip("|").split("|")]
    rows = []
    for number, line in enumerate(lines[header + 2:], start=header + 3):
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        scale = re.match(r"(\d+)n \((\d+)\)", cells[0])
        if scale is None:
            raise InputError(f"{path} line {number}", cells[0], "a node count as '4n (32)'")
        measured = {COLUMNS[name]: value for name, cell in zip(names[1:], cells[1:], strict=False)
                    if name in COLUMNS and (value := _number(cell)) is not None}
        rows.append(ScaleRow(int(scale[1]), int(scale[2]), measured))
    return rows


def check_summary(summary: Path, cluster_file: Path) -> list[ScaleRow]:
    """Every row of ``summary`` priced per forced algorithm on ``cluster_file`` at the row's node count."""
    base = Cluster.from_file(cluster_file)
    rows = read_summary(summary)
    for row in rows:
        data = base.to_dict()
        data["nodes"] = row.nodes
        cluster = Cluster.from_dict(data)
        ranks = row.nodes * cluster.devices_per_node
        factor = 2 * (ranks - 1) / ranks
        for name in (*COLUMNS.values(),):
            forced = "nvls_tree" if name == "nvls" and row.nodes > 1 else name
            if forced.startswith("collnet") and row.nodes == 1:
                continue
            try:
                run = explain(cluster, "allreduce", SIZE_BYTES, ranks, f"nccl:{forced}")
            except InputError:
                continue
            if run.algorithm == forced:  # a forced algorithm NCCL cannot run falls back: not this column's
                row.predicted[name] = SIZE_BYTES / run.seconds * factor / 1e9
        chosen = explain(cluster, "allreduce", SIZE_BYTES, ranks, "nccl")
        row.nccl_choice, row.nccl_busbw = chosen.label, SIZE_BYTES / chosen.seconds * factor / 1e9
    return rows


def summary_markdown(name: str, rows: list[ScaleRow]) -> list[str]:
    """The report section: per node count, measured / predicted busbw per algorithm, and who wins."""
    algos = list(COLUMNS.values())
    lines = [f"### {name}", "", "Peak busbw (GB/s) at 32 GiB per forced algorithm, measured / predicted; the "
             "measured best against NCCL's own choice (and the busbw it predicts for it).", "",
             "| nodes | " + " | ".join(algos) + " | measured best | NCCL would run | its predicted busbw |",
             "|---|" + "---|" * (len(algos) + 3)]
    agree = 0
    for row in rows:
        cells = []
        for algo in algos:
            m, p = row.measured.get(algo), row.predicted.get(algo)
            cells.append("-" if m is None and p is None else f"{m if m is not None else '-'} / "
                         f"{f'{p:.0f}' if p is not None else '-'}")
        best = row.measured_best
        chosen = row.nccl_choice.split("/")[0].lower().replace("nvlstree", "nvls").replace("collnet", "collnet_")
        same = chosen == best or (chosen == "nvls" and best == "nvls")
        agree += same
        lines.append(f"| {row.nodes} | " + " | ".join(cells) + f" | {best} | {row.nccl_choice}"
                     f"{' (agrees)' if same else ''} | {row.nccl_busbw:.0f} |")
    lines += ["", f"NCCL's predicted choice is the measured best at {agree} of {len(rows)} node counts."]
    return lines


def summaries_section(folder: Path) -> list[str]:
    """The errors.md section for every ``summaries/<id>.txt`` with its cluster file beside it."""
    lines: list[str] = []
    for path in sorted((folder / "summaries").glob("*.txt")) if (folder / "summaries").is_dir() else []:
        cluster_file = path.with_suffix(".yaml")
        if not cluster_file.is_file():
            lines += [f"### {path.stem}", "", f"no cluster file {cluster_file.name}: not checked", ""]
            continue
        try:
            lines += summary_markdown(path.stem, check_summary(path, cluster_file)) + [""]
        except InputError as exc:
            lines += [f"### {path.stem}", "", f"not checked: {exc}", ""]
    return (["", "## Algorithm choice across scale", "", *lines]) if lines else []
