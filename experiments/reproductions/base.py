"""What every reproduction returns and how its files are written.

Why one shape: ``flexcomm reproduce all`` runs six studies of very different cost (closed forms, the
simulator, emulated training); each hands back a tidy table, its figures and a short note that sets
our number beside what the literature reports, and this module writes them the same way, atomically,
as soon as each study finishes (an interrupted ``all`` keeps every study already done).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic, write_csv_atomic, write_text_atomic
from flexcomm.emulation.batch import config_key, run_configs
from flexcomm.emulation.config import EmulationConfig
from flexcomm.experiments.tyagi_table4 import MODELS

T = TypeVar("T")


#: Under the output folder: one CSV per finished emulated run, so a long reproduction resumes (emulation.batch).
RUNS_DIR = "runs"


@dataclass(frozen=True)
class Settings:
    """``full`` = the larger published-scale settings; the default is small enough for a laptop.

    ``jobs``: processes for the independent emulated runs of a study; ``runs_dir``: where each finished
    run is kept (None: nothing kept); ``reuse_runs=False`` recomputes the kept ones.
    """

    seed: int = 0
    full: bool = False
    progress: bool = True
    jobs: int = 1
    runs_dir: Path | None = None
    reuse_runs: bool = True
    #: [runs read back from ``runs_dir``, runs asked for] so far: a note's time excludes the reused runs' time
    run_counts: list[int] = field(default_factory=lambda: [0, 0], compare=False)

    def steps(self, small: int, full: int) -> int:
        return full if self.full else small

    def iterate(self, items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
        """A nested progress bar (stderr) over one study's units of work."""
        if not self.progress:
            yield from items
            return
        from tqdm import tqdm

        yield from tqdm(items, desc=desc, total=total, leave=False, unit="run", disable=None)

    def emulate(self, configs: Sequence[EmulationConfig], desc: str) -> list[pd.DataFrame]:
        """The per-step frames of independent emulated runs, on ``jobs`` processes, each kept in
        ``runs_dir`` as it finishes (an interrupted study resumes from them)."""
        if self.reuse_runs and self.runs_dir is not None:
            self.run_counts[0] += sum((self.runs_dir / f"{config_key(c)}.csv").exists() for c in configs)
        self.run_counts[1] += len(configs)
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(configs), desc=desc, leave=False, unit="run", disable=None)
        try:
            return run_configs(configs, jobs=self.jobs, cache_dir=self.runs_dir, reuse=self.reuse_runs,
                               on_done=None if bar is None else (lambda _i: bar.update(1)))
        finally:
            if bar is not None:
                bar.close()


@dataclass
class Outcome:
    """One reproduction's results: the tidy table, figure paths, findings (markdown bullets)."""

    table: pd.DataFrame
    figures: list[Path]
    findings: list[str]
    extra_tables: dict[str, pd.DataFrame] = field(default_factory=dict)


@dataclass(frozen=True)
class Reproduction:
    """A named study: ``run(settings, out_dir) -> Outcome``; ``literature`` is what the sources report."""

    id: str
    number: int
    title: str
    literature: str
    run: Callable[[Settings, Path], Outcome]
    engine: str  #: "cost model", "simulator", "emulated training" (what produced the numbers)


def write_outcome(repro: Reproduction, outcome: Outcome, out: Path, settings: Settings, seconds: float,
                  reused: tuple[int, int] = (0, 0)) -> Path:
    """``<id>.csv`` (+ extra tables), and ``<id>.md``: the note with our findings beside the literature.

    ``reused``: (runs read back from an earlier invocation, emulated runs in all); their time is not in
    ``seconds``, and the note says so."""
    took = f"took {seconds:.1f} s"
    if reused[0]:
        took += f" ({reused[0]} of its {reused[1]} emulated runs read back from `runs/`, their time not included)"
    write_csv_atomic(outcome.table, out / f"{repro.id}.csv")
    for name, table in outcome.extra_tables.items():
        write_csv_atomic(table, out / f"{repro.id}_{name}.csv")
    lines = [
        f"# {repro.number}. {repro.title}",
        "",
        f"Engine: {repro.engine}. Settings: {'full' if settings.full else 'small (default)'}, seed {settings.seed}; "
        f"{took}.",
        f"Rerun: `flexcomm reproduce {repro.id}{' --full' if settings.full else ''} --seed {settings.seed}`.",
        "",
        "## What the literature reports",
        "",
        repro.literature,
        "",
        "## What we measure",
        "",
        *[f"- {line}" for line in outcome.findings],
        "",
        "Files: " + ", ".join(f"`{p.name}`" for p in [out / f"{repro.id}.csv", *outcome.figures]),
        "",
    ]
    return write_text_atomic(out / f"{repro.id}.md", "\n".join(lines))


def paper_model(name: str) -> tuple[int, float]:
    """(parameters, measured compute seconds per step) of one of Tyagi & Swany's models
    (:data:`experiments.tyagi_table4.MODELS`): what a small emulated workload is priced as."""
    model = MODELS[name]
    return int(model.params), model.compute_ms * 1e-3


#: ECA-ResNet-50's parameters (Wang et al., 24.37M); its step is priced with ResNet-50's measured compute.
ECA_RESNET50_PARAMS = 24_370_000


def finish_figure(fig: Any, path: Path, title: str = "") -> Path:
    """Title, atomic save, close: how every reproduction figure ends (closing keeps long runs' memory flat)."""
    if title:
        fig.suptitle(title)
    return save_figure_atomic(fig, path)
