"""``flexcomm reproduce``: the research results flexible communication rests on, each as CSV + PNG + a note.

Each module holds one :class:`~experiments.reproductions.base.Reproduction`; :func:`run_reproductions`
runs the chosen ones in order under one progress bar and writes each one's files as soon as it finishes,
plus an ``index.md`` that links them (rewritten after every study, so an interrupted run keeps its index).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.reproductions import (
    accuracy_time,
    adaptation,
    crossover,
    korthikanti,
    megatron,
    pareto_fronts,
    scaling,
    speedup,
    table4,
)
from flexcomm.experiments.reproductions.base import Outcome, Reproduction, Settings, write_outcome

REPRODUCTIONS: dict[str, Reproduction] = {
    r.id: r for r in (crossover.REPRODUCTION, speedup.REPRODUCTION, pareto_fronts.REPRODUCTION,
                      adaptation.REPRODUCTION, accuracy_time.REPRODUCTION, scaling.REPRODUCTION,
                      table4.REPRODUCTION, megatron.REPRODUCTION, korthikanti.REPRODUCTION)
}


def resolve(ids: Sequence[str]) -> list[Reproduction]:
    """IDs or numbers (``1``, ``crossover``...) or ``all``, in the order given, without repeats."""
    by_number = {str(r.number): r for r in REPRODUCTIONS.values()}
    chosen: list[Reproduction] = []
    for raw in ids:
        key = str(raw).strip().lower()
        if key == "all":
            picked = list(REPRODUCTIONS.values())
        elif key in REPRODUCTIONS:
            picked = [REPRODUCTIONS[key]]
        elif key in by_number:
            picked = [by_number[key]]
        else:
            raise InputError("ID", raw, "all, a number 1-9 or one of " + ", ".join(REPRODUCTIONS))
        chosen += [r for r in picked if r not in chosen]
    if not chosen:
        raise InputError("ID", "(none)", "all, a number 1-9 or one of " + ", ".join(REPRODUCTIONS))
    return chosen


def run_reproductions(ids: Sequence[str], out: str | Path, settings: Settings | None = None) -> dict[str, Outcome]:
    """Run the chosen reproductions; files go to ``out`` as each finishes."""
    settings = settings or Settings()
    chosen = resolve(ids)
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Outcome] = {}
    index = _index_rows(outdir / INDEX)  # studies an earlier run wrote here stay listed
    bar = None
    if settings.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(chosen), desc="reproduce", unit="study", disable=None)
    try:
        for repro in chosen:
            if bar is not None:
                bar.set_postfix_str(repro.id)
            started, counts = time.perf_counter(), list(settings.run_counts)
            outcome = repro.run(settings, outdir)
            seconds = time.perf_counter() - started
            reused = (settings.run_counts[0] - counts[0], settings.run_counts[1] - counts[1])
            note = write_outcome(repro, outcome, outdir, settings, seconds, reused)
            results[repro.id] = outcome
            figures = ", ".join(f"[{p.name}]({p.name})" for p in outcome.figures)
            index[repro.number] = (f"| {repro.number} | [{repro.title}]({note.name}) | {repro.engine} | "
                                   f"{settings.seed}, {'full' if settings.full else 'small'} | {figures} | "
                                   f"{seconds:.1f} s |")
            write_text_atomic(outdir / INDEX, "\n".join(
                ["# flexcomm reproductions", "", *INDEX_HEADER, *(index[n] for n in sorted(index)), ""]))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return results


INDEX = "index.md"
INDEX_HEADER = ["| # | study (note) | engine | seed, settings | figures | took |", "|---|---|---|---|---|---|"]


def _index_rows(path: Path) -> dict[int, str]:
    """The study rows of an existing index, by study number (rows of the current format only)."""
    if not path.exists():
        return {}
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(INDEX_HEADER[0].strip("|").split("|")) and cells[0].isdigit():
            rows[int(cells[0])] = line
    return rows
