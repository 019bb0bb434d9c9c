"""Kill a checkpointed ``train-ddp`` run at random moments, resume it, and check it ends bitwise as one never
killed.

Why: "resume that cannot be torn" is a claim about every moment a run can die, not about the moments a test
author thought of. One uninterrupted run is the reference; then, ``kills`` times, the same run is started and
SIGKILLed (launcher and ranks: the ranks die with the launcher, ``PR_SET_PDEATHSIG``) at a random moment of its
training: once its log shows a step drawn uniformly from the run's steps, after a further delay drawn
uniformly from zero to two checkpoint intervals of the reference's median step (so kills land inside steps,
checkpoints, their renames and the log's writes alike); then it is resumed with ``--resume`` to the end. A kill
passes when every step's loss (the last one logged for that step) and the final model's every tensor equal the
reference's to the last bit. The draws come from ``seed``; what the run was doing at each moment depends on the
machine, which is the point: the claim must hold wherever a kill lands.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend.checkpoints import load_state
from flexcomm.real_backend.elastic_train import CHECKPOINT

#: The run each kill interrupts: Top-k over Allreduce with error feedback (residuals and generators to
#: restore), two ranks, a checkpoint every 4 of 60 steps.
DEFAULT_ARGS = ("--strategy", "topk-ar", "--ratio", "0.05", "--nproc", "2", "--steps", "60", "--checkpoint-every",
                "4", "--timeout", "4min")
#: How long one run may take before it is treated as hung (seconds).
RUN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class KillResult:
    """One kill: when it struck, the step the resumed run started from, and whether the end was bitwise."""

    kill: int
    after_step: int
    delay_s: float
    kill_at_s: float  #: from the run's start; NaN when the run ended before the kill (it struck nothing)
    resumed_from_step: int  #: the checkpoint's step the kill left (the run's last: nothing was left to resume)
    steps_compared: int
    losses_equal: bool
    model_equal: bool

    @property
    def bitwise(self) -> bool:
        return self.losses_equal and self.model_equal


def _train(out: Path, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    command = [sys.executable, "-m", "flexcomm.experiments.cli", "train-ddp", *DEFAULT_ARGS, "--out", str(out), *extra]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _finish(proc: subprocess.Popen, what: str) -> None:
    try:
        _, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise RuntimeError(f"{what}: no end within {RUN_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{what}: exit {proc.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}")


def _logged_step(path: Path) -> int:
    """The highest step in a run's log so far (-1 before its first row)."""
    try:
        lines = path.read_bytes().splitlines()[1:]
    except OSError:
        return -1
    steps = [int(cells[2]) for line in lines if len(cells := line.split(b",")) > 2 and cells[2].isdigit()]
    return max(steps, default=-1)


def _kill_after(proc: subprocess.Popen, log: Path, step: int, delay_s: float) -> float | None:
    """SIGKILL the run ``delay_s`` after its log first shows ``step``; the moment (perf_counter), or None when it
    ended first (a kill drawn past its end strikes nothing)."""
    while proc.poll() is None and _logged_step(log) < step:
        time.sleep(0.001)
    if proc.poll() is not None:
        return None
    try:
        proc.wait(timeout=delay_s)
        return None
    except subprocess.TimeoutExpired:
        at = time.perf_counter()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return at


def last_losses(folder: Path) -> dict[int, float]:
    """Each step's loss as last logged (a resumed run logs the steps after its checkpoint again)."""
    steps = pd.read_csv(folder / "steps.csv")
    done = steps[steps["event"].isna()]
    return {int(s): float(v) for s, v in zip(done["step"], done["loss"], strict=True)}


def _checkpoint_step(folder: Path) -> int:
    """The step of ``folder``'s model checkpoint (-1 without one)."""
    path = folder / CHECKPOINT
    return int(load_state(path)["step"]) if path.exists() else -1


def _same_model(a: Path, b: Path) -> bool:
    import torch

    left, right = (load_state(p / CHECKPOINT)["model"] for p in (a, b))
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)


def kill_and_resume(out: str | Path, kills: int = 20, seed: int = 0,
                    on_kill: Callable[[KillResult], None] | None = None) -> list[KillResult]:
    """The reference run in ``out/reference``, then ``kills`` killed-and-resumed runs in ``out/kill-<i>``;
    ``on_kill`` sees each kill's result as it ends (the whole run takes minutes)."""
    if isinstance(kills, bool) or not isinstance(kills, int) or kills < 1:
        raise InputError("kills", kills, "an integer >= 1")
    out = Path(out)
    reference = out / "reference"
    _finish(_train(reference), "the reference run")
    expected = last_losses(reference)
    step_s = float(pd.read_csv(reference / "steps.csv")["step_s"].replace(0.0, np.nan).median())
    total, every = (int(DEFAULT_ARGS[DEFAULT_ARGS.index(flag) + 1]) for flag in ("--steps", "--checkpoint-every"))
    rng = np.random.default_rng(seed)
    results = []
    for i in range(kills):
        folder = out / f"kill-{i}"
        step, delay = int(rng.integers(1, total + 1)), float(rng.uniform(0.0, 2 * every * step_s))
        proc = _train(folder)
        started = time.perf_counter()
        at = _kill_after(proc, folder / "steps.csv", step, delay)
        at = at - started if at is not None else math.nan
        checkpoint = max(0, _checkpoint_step(folder))  # no checkpoint yet: the resume starts at step 0
        if checkpoint < total:  # a kill after the last checkpoint leaves a finished run (--resume refuses it)
            _finish(_train(folder, ("--resume",)), f"the resume after kill {i}")
        got = last_losses(folder)
        equal = got.keys() == expected.keys() and all(
            got[s] == expected[s] or (math.isnan(got[s]) and math.isnan(expected[s])) for s in expected)
        result = KillResult(i, step, delay, at, checkpoint, len(got), equal,
                            _same_model(reference, folder))
        results.append(result)
        if on_kill is not None:
            on_kill(result)
    return results


def results_table(results: list[KillResult]) -> pd.DataFrame:
    """One row per kill, every field and ``bitwise`` (what ``kill_resume.csv`` holds)."""
    return pd.DataFrame([{**asdict(r), "bitwise": r.bitwise} for r in results])
