"""The GPU check's report: one markdown page a person can paste into the README, from what the check wrote.

Why its own module: ``gpu_check.sh`` must run unchanged the first time a GPU is lent, so everything after
the measurements is plain Python over the files it leaves (``environment.txt``, ``status.txt``,
``nccl_collectives.csv``, ``nccl-tests/*.validation.json``, ``ddp/*/summary.json``, ``topk.json``,
``gpu_compute.csv``); a missing file is reported as missing, never guessed. Tested on the CPU with the same files.

Run: ``python -m flexcomm.real_backend.gpu_report OUT_DIR`` (writes ``OUT_DIR/report.md`` and prints it).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.bounded_stream import read_csv_bounded, read_json_bounded
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import read_text_bounded
from flexcomm.costmodel.units import format_percent
from flexcomm.real_backend.gpu_compute_corpus import summary_lines


def _ms(seconds: Any) -> str:
    return f"{1e3 * float(seconds):.2f} ms" if isinstance(seconds, (int, float)) and math.isfinite(seconds) else "-"


def collectives_section(folder: Path) -> list[str]:
    path = folder / "nccl_collectives.csv"
    if not path.exists():
        return ["NCCL collectives: not measured (no nccl_collectives.csv)."]
    frame = read_csv_bounded(path, "folder", "nccl_collectives.csv")
    lines = ["| collective | ranks | largest size | median time | bus bandwidth |", "|---|---|---|---|---|"]
    for (collective, ranks), group in frame.groupby(["collective", "ranks"]):
        largest = group[group["bytes"] == group["bytes"].max()]
        busbw = float(largest["busbw_Bps"].median()) if "busbw_Bps" in largest else math.nan
        lines.append(f"| {collective} | {ranks} | {int(largest['bytes'].iloc[0]) >> 20} MiB | "
                     f"{_ms(float(largest['seconds'].median()))} | {busbw / 1e9:.1f} GB/s |")
    return lines


def validation_section(folder: Path) -> list[str]:
    reports = sorted((folder / "nccl-tests").glob("*.validation.json"))
    if not reports:
        return ["NCCL-grade model vs this machine: no validation (one GPU, or no nccl-tests logs)."]
    lines = ["| nccl-tests log | rows >= 1 MiB | median abs error | worst |", "|---|---|---|---|"]
    for report in reports:
        try:
            summary = read_json_bounded(report, "folder", "validation JSON")["summary"]  # type: ignore[index]
        except (InputError, KeyError, TypeError):
            lines.append(f"| {report.stem} | unreadable | - | - |")
            continue
        median, worst = (format_percent(summary.get(k)) for k in ("median_abs_error", "worst_abs_error"))
        lines.append(f"| {report.name.removesuffix('.validation.json')} | {summary.get('rows_at_least_1MiB', '-')} | "
                     f"{median} | {worst} |")
    return lines


def hooks_section(folder: Path) -> list[str]:
    summaries = {p.parent.name: read_json_bounded(p, "folder", "DDP summary")
                 for p in sorted((folder / "ddp").glob("*/summary.json"))}
    if not summaries:
        return ["DDP hooks on NCCL: not measured (no ddp/*/summary.json)."]
    builtin = summaries.get("builtin", {}).get("median_step_s", math.nan)
    lines = ["| strategy | median step | vs builtin | median comm (hook) | solo step |", "|---|---|---|---|---|"]
    for label, s in summaries.items():
        step = s.get("median_step_s", math.nan)
        ratio = step / builtin if builtin and math.isfinite(builtin) and math.isfinite(step) else math.nan
        lines.append(f"| {label} | {_ms(step)} | {ratio:.3f}x | {_ms(s.get('median_comm_s'))} | "
                     f"{_ms(s.get('solo_step_s'))} |")
    return lines


def topk_section(folder: Path) -> list[str]:
    path = folder / "topk.json"
    if not path.exists():
        return ["Top-k on the GPU: not measured (no topk.json)."]
    result = read_json_bounded(path, "folder", "topk.json")
    lines = [f"Top-k on {result.get('device', '?')}:", "", "| elements | ratio | topk | kthvalue | sampled threshold |",
             "|---|---|---|---|---|"]
    for row in result.get("selection", []):
        lines.append(f"| {row['numel']:,} | {row['ratio']} | {_ms(row.get('topk_s'))} | {_ms(row.get('kthvalue_s'))} | "
                     f"{_ms(row.get('sampled_s'))} |")
    return lines


def compute_section(folder: Path) -> list[str]:
    """The one-GPU compute checks: per section, rows and median / worst |error| against the engines."""
    path = folder / "gpu_compute.csv"
    if not path.exists():
        return ["Compute model: not measured (no gpu_compute.csv)."]


    frame = read_csv_bounded(path, "folder", "gpu_compute.csv")
    device = frame["device"].iloc[0] if len(frame) else "?"
    catalog = frame["catalog_device"].fillna("").iloc[0] if len(frame) else ""
    return [f"On {device} (catalog: {catalog or 'none: no predictions'}):", "", *summary_lines(frame)]


def report(folder: str | Path) -> str:
    folder = Path(folder)
    environment, status = ((read_text_bounded(folder / name, "folder", name, errors="replace").strip()
                            if (folder / name).exists() else "") for name in ("environment.txt", "status.txt"))
    parts = ["# GPU check", "", "```", environment or "(no environment.txt)", "```", "",
             "Steps (name, exit status, seconds):", "", "```", status or "(no status.txt)", "```", "",
             "## NCCL collectives", "", *collectives_section(folder), "", *validation_section(folder), "",
             "## DDP hooks on NCCL (overlapping backward)", "", *hooks_section(folder), "",
             "## Top-k", "", *topk_section(folder), "",
             "## Compute model on one GPU", "", *compute_section(folder), ""]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("gpu_report: usage: python -m flexcomm.real_backend.gpu_report OUT_DIR (the GPU check's folder)",
              file=sys.stderr)
        return 2
    text = report(args[0])

    write_text_atomic(Path(args[0]) / "report.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
