"""Elastic launches: when a rank dies, the job re-forms with the survivors and resumes from its checkpoint.

torchrun's elastic agent (``--nnodes MIN:MAX``) answers a membership change by stopping every worker and
starting a new rendezvous round with the members that are left, provided at least MIN remain; the workers
then resume from their own checkpoint. :func:`launch_elastic` does the same on one machine: a rank that
exits non-zero (or is killed) is a lost member; the launcher stops the others (:func:`launch`'s failure
policy), and relaunches the command on the survivors, ``FLEXCOMM_ELASTIC_ATTEMPT`` counting the rounds, as
long as at least ``min_ranks`` remain. Every round, with its start, end, world size and the failed rank, is
written to ``elastic.json`` in ``log_dir`` (atomically, after each round), so a report can measure the
time a failure cost.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend.launch import LaunchResult, launch

ELASTIC_FORM = "MIN:MAX ranks, 1 <= MIN <= MAX, e.g. 3:4"


def parse_elastic(text: str) -> tuple[int, int]:
    """``"3:4"`` -> (3, 4), with a one-line error naming ``elastic`` otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(text))
    if not match:
        raise InputError("elastic", text, ELASTIC_FORM)
    low, high = int(match[1]), int(match[2])
    if low < 1 or low > high:
        raise InputError("elastic", text, ELASTIC_FORM)
    return low, high


@dataclass
class ElasticRound:
    attempt: int
    world_size: int
    started_s: float  # since the elastic launch began
    ended_s: float = 0.0
    returncode: int = 0
    failed_rank: int | None = None


@dataclass
class ElasticResult:
    returncode: int
    rounds: list[ElasticRound] = field(default_factory=list)

    @property
    def final_world_size(self) -> int:
        return self.rounds[-1].world_size if self.rounds else 0


def launch_elastic(command: Sequence[str], min_ranks: int, max_ranks: int, *, log_dir: str | Path,
                   env: Mapping[str, str] | None = None, timeout_s: float | None = None, grace_s: float = 2.0,
                   backend: str | None = None, dist_timeout_s: float | None = None,
                   quiet: bool = False) -> ElasticResult:
    """Run ``command`` on ``max_ranks`` ranks; after each lost rank re-form on the survivors (>= ``min_ranks``)."""
    if not 1 <= min_ranks <= max_ranks:
        raise InputError("elastic", f"{min_ranks}:{max_ranks}", ELASTIC_FORM)
    folder = Path(log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    result = ElasticResult(returncode=0)
    world, attempt = max_ranks, 0
    epoch = repr(time.time())  # the wall-clock origin every round's workers log against
    while True:
        round_ = ElasticRound(attempt, world, time.monotonic() - started)
        result.rounds.append(round_)
        remaining = None if timeout_s is None else max(1.0, timeout_s - (time.monotonic() - started))
        base = dict(env or {}) if env is not None else None
        extra = {"FLEXCOMM_ELASTIC_ATTEMPT": str(attempt), "FLEXCOMM_ELASTIC_MIN": str(min_ranks),
                 "FLEXCOMM_ELASTIC_MAX": str(max_ranks), "FLEXCOMM_ELASTIC_T0": epoch}
        run: LaunchResult = launch(command, world, backend=backend, timeout_s=remaining, env=base,
                                   rank_env=lambda r, extra=extra: extra, dist_timeout_s=dist_timeout_s,
                                   log_dir=folder / f"attempt{attempt}", grace_s=grace_s, quiet=quiet)
        round_.ended_s = time.monotonic() - started
        round_.returncode, round_.failed_rank = run.returncode, run.failed_rank
        _write(folder, result, min_ranks, max_ranks, grace_s)
        if run.returncode == 0 or run.timed_out:
            result.returncode = run.returncode
            return result
        survivors = world - 1  # the failed rank's slot is gone; the ranks the launcher stopped re-join
        if survivors < min_ranks:
            result.returncode = run.returncode
            if not quiet:
                print(f"flexcomm launch: {survivors} ranks left, fewer than the elastic minimum {min_ranks}; "
                      "stopping", flush=True)
            return result
        if not quiet:
            print(f"flexcomm launch: rank {run.failed_rank} lost; re-forming with {survivors} ranks "
                  f"(attempt {attempt + 1})", flush=True)
        world, attempt = survivors, attempt + 1


def _write(folder: Path, result: ElasticResult, low: int, high: int, grace_s: float) -> None:
    doc: dict[str, Any] = {"min_ranks": low, "max_ranks": high, "grace_s": grace_s,
                           "rounds": [asdict(r) for r in result.rounds]}
    write_text_atomic(folder / "elastic.json", json.dumps(doc, indent=2) + "\n")
