"""Many emulated runs at once: in a process pool, each run's frame kept on disk so a long study resumes.

Why: a reproduction in its full setting is dozens of independent emulated runs (strategies x seeds x
workloads), each minutes long on a CPU. They share nothing but the data set, so they parallelise across
processes (``jobs``), and each finished run is written as it ends (``cache``: one CSV per run, named by a
hash of its whole configuration), so an interrupted study loses at most the runs in flight and a rerun of
the same command picks up where it stopped. A run is cached only when it completed; a changed setting
changes the hash, so a stale run is never reused.

Runs go to ``spawn``-ed workers (a fresh interpreter each): forking a process that already holds torch's
thread pools can deadlock, and a worker builds its workload once per (name, seed) and reuses it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from flexcomm.costmodel.atomic import write_csv_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.processes import tied_pool
from flexcomm.emulation.config import EmulationConfig

__all__ = ["run_configs", "config_key"]


def config_key(config: EmulationConfig) -> str:
    """A stable name for one run's whole configuration (what its cached frame is stored under), including
    the workload defaults the run inherits (optimizer, rate, schedule, batch), so changing one of those
    never reuses a run made with the old value."""
    from flexcomm.workloads import get_workload

    workload = get_workload(config.workload)  # cheap: the data set is built on first use, not here
    inherited = {k: getattr(workload, k) for k in ("optimizer", "lr", "lr_schedule", "momentum", "weight_decay",
                                                   "batch_size")}
    text = json.dumps({**asdict(config), "inherited": inherited}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@lru_cache(maxsize=4)  # a Fashion-MNIST workload holds ~190 MB of tensors; runs come grouped by it
def _workload(name: str, seed: int) -> Any:
    from flexcomm.workloads import get_workload

    return get_workload(name, seed=seed)


def _run_one(config: EmulationConfig) -> pd.DataFrame:
    """One run in this process (module level: what a spawned worker is handed)."""
    import torch

    from flexcomm.emulation.engine import EmulatedRun

    torch.set_num_threads(1)  # tiny models: a thread pool per worker would only fight the other workers
    return EmulatedRun(config, workload=_workload(config.workload, config.seed)).run(progress=False).frame


def run_configs(configs: Sequence[EmulationConfig], *, jobs: int = 1, cache_dir: str | Path | None = None,
                reuse: bool = True, on_done: Callable[[int], None] | None = None) -> list[pd.DataFrame]:
    """The per-step frame of every config, in the order given.

    ``jobs`` processes run them (1: this process); ``cache_dir`` holds one ``<hash>.csv`` per finished run
    and is read first (``reuse=False``: recomputed and overwritten); ``on_done(i)`` is called as run ``i``
    finishes (a progress bar's update).
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InputError("jobs", jobs, "a number of processes >= 1")
    for config in configs:
        config.validate()  # every run's settings checked before the first one starts
    folder = Path(cache_dir) if cache_dir is not None else None
    frames: list[pd.DataFrame | None] = [None] * len(configs)
    todo = []
    for i, config in enumerate(configs):
        path = folder / f"{config_key(config)}.csv" if folder is not None else None
        if reuse and path is not None and path.exists():
            frame = pd.read_csv(path)
            event = frame["event"].astype(object)  # an all-empty column reads as float NaN
            frame["event"] = event.where(event.notna(), "").astype(str)  # "", as a fresh run writes it
            frames[i] = frame
            if on_done is not None:
                on_done(i)
        else:
            todo.append(i)

    def finish(i: int, frame: pd.DataFrame) -> None:
        frames[i] = frame
        if folder is not None:
            write_csv_atomic(frame, folder / f"{config_key(configs[i])}.csv")
        if on_done is not None:
            on_done(i)

    if jobs == 1 or len(todo) <= 1:
        for i in todo:
            finish(i, _run_one(configs[i]))
    else:
        with tied_pool(min(jobs, len(todo)), ignore_sigint=False) as pool:
            pending = {pool.submit(_run_one, configs[i]): i for i in todo}
            try:
                for future in as_completed(pending):
                    finish(pending[future], future.result())
            except BaseException:
                for future in pending:
                    future.cancel()
                raise
    return [f for f in frames if f is not None]
