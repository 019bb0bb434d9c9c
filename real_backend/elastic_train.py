"""One rank of an elastic DDP job: checkpoints every N steps, resumes from the last one, logs every step.

Run under ``flexcomm launch --elastic MIN:MAX`` (or torchrun ``--nnodes MIN:MAX``): after a lost rank the
launcher starts a new round with fewer ranks, each rank loads ``DIR/checkpoint.pt`` (model, optimizer,
step, the loss so far) and carries on, each with its shard of the data for the new world size (the per-rank
batch stays, so the global batch shrinks with the job, as elastic data parallelism does). Rank 0 writes
the checkpoint atomically (a temporary file, then a rename: a kill during the write leaves the previous
one) and appends every step to ``DIR/steps.csv`` (attempt, world size, step, mean loss over ranks, step
seconds, seconds since the job began), so the loss curve runs on across rounds.

With a compression strategy (``"strategy": "topk-ar", "ratio": 0.01``; the hooks of
:mod:`real_backend.hooks`), every rank also writes ``DIR/compressor-rank{r}-step{N}.pt``: its error-feedback
memory and step counters (:meth:`compression.base.Compressor.state_dict`), and ``random-rank{r}-step{N}.pt``
(its generators), before rank 0 writes the model; the model checkpoint, renamed last, is the manifest that
commits step N's files (older steps' files are removed only after it), so a kill at any moment leaves a model
checkpoint with the residuals of its own step beside it. A resumed rank r
loads rank r's file when it is of that step and scheme; the memory of a rank that was lost (or of a
file from another step) is gone, and a ``residuals 3/3`` row after ``resumed`` says how many ranks got
theirs back. ``flexible`` restarts its network estimate (the world size may have
changed); ``moo`` and ``powersgd`` are not checkpointed (their controller / PowerSGD state is not saved).

``"fail": "rank2@30"`` makes rank 2 kill itself (SIGKILL) when it reaches step 30 in the first round: a
reproducible lost rank for experiments and tests.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import AppendingCsv
from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend.checkpoints import load_state, random_state, restore_random_state
from flexcomm.real_backend.dist import Watchdog, init_from_env, shutdown
from flexcomm.real_backend.worker_config import config_from_argv

CHECKPOINT = "checkpoint.pt"
#: The hook strategies whose whole state is the compressor's residuals and step counters.
UNCHECKPOINTED = ("moo", "powersgd")
STEPS = "steps.csv"
COLUMNS = ["attempt", "world_size", "step", "loss", "step_s", "since_start_s", "event"]


def parse_fail(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    match = re.fullmatch(r"rank(\d+)@(\d+)", text.strip())
    if not match:
        raise InputError("fail", text, "rank<R>@<step>, e.g. rank2@30")
    return int(match[1]), int(match[2])


@dataclass(frozen=True, kw_only=True)
class ElasticWorkerConfig:
    """What every rank of an elastic job runs, as one JSON argument (:mod:`real_backend.worker_config`):
    ``python -m flexcomm.real_backend.elastic_train '{"out": "DIR", "steps": 60, "resume": true}'``. The
    cheap checks run where it is built; the strategy's (which loads torch) in each rank."""

    out: str  #: the run folder: checkpoint, rank state files and steps.csv
    workload: str = "mlp-digits"
    strategy: str = "dense"  #: dense (DDP's builtin allreduce) or a hook strategy
    ratio: float | None = None  #: fraction of elements kept by a sparse strategy
    steps: int = 60
    checkpoint_every_steps: int = 10
    resume: bool = False  #: continue from DIR/checkpoint.pt when it exists
    batch_size: int | None = None  #: samples per rank; None: the workload's
    lr: float | None = None
    seed: int = 0
    fail: str | None = None  #: ``rank<R>@<step>``: that rank kills itself at that step of the first round
    step_sleep_s: float = 0.0  #: extra seconds per step (a slower model)

    def __post_init__(self) -> None:
        for name, value in (("steps", self.steps), ("checkpoint-every", self.checkpoint_every_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name, value, "an integer >= 1")
        parse_fail(self.fail)


def _save(path: Path, state: dict) -> None:
    import torch

    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(state, tmp)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def compressor_path(out: Path, rank: int, step: int) -> Path:
    """Rank ``rank``'s residuals of checkpoint ``step``: a file per step, so a kill between the ranks' writes
    and the model checkpoint's rename leaves the residuals of the step the checkpoint still names."""
    return out / f"compressor-rank{rank}-step{step}.pt"


def random_state_path(out: Path, rank: int, step: int) -> Path:
    return out / f"random-rank{rank}-step{step}.pt"


def _rank_state_files(out: Path) -> list[tuple[int, Path]]:
    """(step, path) of every rank's per-step residuals and generator files in ``out``."""
    named = ((re.fullmatch(r"(?:compressor|random)-rank\d+-step(\d+)\.pt", path.name), path) for path in out.iterdir())
    return [(int(match.group(1)), path) for match, path in named if match]


def forget_other_steps(out: Path, step: int) -> None:
    """Once checkpoint ``step`` is committed (its rename done), the other steps' rank files are of no use: the
    checkpoint is the manifest that says which step's files belong to it."""
    for other, path in _rank_state_files(out):
        if other != step:
            path.unlink(missing_ok=True)


def _restore_random_state(out: Path, rank: int, step: int) -> bool:
    """This rank's generators as they were at checkpoint ``step``; False when that rank saved none for it."""
    path = random_state_path(out, rank, step)
    if not path.exists():
        return False
    state = load_state(path, what="random-state file")
    if state.get("step") != step:
        return False
    restore_random_state(state)
    return True


def read_checkpoint(path: Path, workload: str, numel: int, steps: int) -> dict:
    """The model checkpoint a run resumes from, checked before any rank starts: loaded with nothing executed
    (:func:`load_state`), of this workload and model size, and before the run's last step (a checkpoint at or
    past it would resume into a run with nothing left to train)."""
    state = load_state(path)
    for key in ("model", "optimizer", "step", "workload", "numel"):
        if key not in state:
            raise InputError("resume", str(path), f"a flexcomm training checkpoint (it has no {key!r})")
    if state["workload"] != workload or state["numel"] != numel:
        raise InputError("resume", str(path), f"a checkpoint of {workload} with {numel} parameters (it holds "
                         f"{state['workload']!r} with {state['numel']} parameters)")
    step = state["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InputError("resume", str(path), f"a checkpoint whose step is an integer >= 0 (it holds {step!r})")
    if step >= steps:
        raise InputError("resume", str(path), f"a checkpoint before --steps {steps} (it is at step {step}: the "
                         "run is complete; raise --steps to train on)")
    return state


def check_strategy(strategy: str, ratio: float | None) -> None:
    """Refuse what cannot be checkpointed, and bad names or ratios, before any rank starts."""
    from flexcomm.real_backend.hooks import make_strategy

    if strategy in UNCHECKPOINTED:
        raise InputError("strategy", strategy, "dense or a hook strategy other than " + " and ".join(UNCHECKPOINTED)
                         + " with checkpoints (their controller / PowerSGD state is not saved)")
    if strategy not in ("dense", "builtin"):
        make_strategy(strategy, ratio)


def _restore_compressor(hook, out: Path, rank: int, step: int) -> bool:  # noqa: ANN001 (a HookState)
    """Load rank ``rank``'s residuals of checkpoint step ``step`` and the bucket layouts they were written in;
    False when there are none to load."""
    path = compressor_path(out, rank, step)
    if not path.exists():
        return False
    state = load_state(path, what="residuals file")
    if state.get("step") != step or state.get("compressor") != hook.compressor.name:
        return False  # another step's memory (its rank was lost before writing this one) or another scheme
    hook.compressor.load_state_dict(state, rank)
    hook.layouts.load_state_dict(state.get("layouts", {}))
    return True


@dataclass
class _RankRun:
    """One rank's round of the job as its steps and checkpoints use it: the options, where it runs, what it
    trains, and rank 0's step log (None on the other ranks)."""

    config: ElasticWorkerConfig
    attempt: int
    t0: float
    out: Path
    rank: int
    world: int
    workload: Any  # a flexcomm.workloads Workload
    model: Any  # torch.nn.Module
    optimizer: Any  # torch.optim.Optimizer
    ddp: Any  # DistributedDataParallel
    hook: Any  # a real_backend.hooks HookState, or None for DDP's own allreduce
    log: AppendingCsv | None


def worker_main(config: ElasticWorkerConfig) -> int:
    """One rank of one round: 0 when the run is done, 1 when a peer died mid-collective (the launcher re-forms
    the job and this rank's successor resumes from the last checkpoint)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from flexcomm.workloads import batch_stream, get_workload, shard

    fail = parse_fail(config.fail)
    check_strategy(config.strategy, config.ratio)
    attempt = int(os.environ.get("FLEXCOMM_ELASTIC_ATTEMPT", "0"))
    t0 = float(os.environ.get("FLEXCOMM_ELASTIC_T0", repr(time.time())))
    out = Path(config.out)
    workload = get_workload(config.workload, seed=config.seed)
    model = workload.build_model(config.seed)
    optimizer = workload.make_optimizer(model, lr=config.lr)
    start, resumed = 0, False
    checkpoint = out / CHECKPOINT
    if config.resume and checkpoint.exists():
        state = read_checkpoint(checkpoint, workload.name, sum(p.numel() for p in model.parameters()), config.steps)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, resumed = int(state["step"]), True
    info = init_from_env()  # after the checkpoint check: a wrong checkpoint is one line, not a hung rendezvous
    rank, world = info.rank, info.world_size
    out.mkdir(parents=True, exist_ok=True)
    ddp = DDP(model)
    hook = None
    if config.strategy not in ("dense", "builtin"):
        from flexcomm.real_backend.hooks import default_cost_model, register

        hook = register(ddp, config.strategy, config.ratio, cost_model=default_cost_model())
    restored = torch.zeros(1)
    if hook is not None and resumed:
        restored[0] = float(_restore_compressor(hook, out, rank, start))
        dist.all_reduce(restored)
    if resumed:
        _restore_random_state(out, rank, start)
    data = shard(workload.train_set, rank, world, seed=config.seed)
    # the batches the uninterrupted run would see from `start` on (same world size: the same shard)
    stream = batch_stream(data, config.batch_size or workload.batch_size, seed=config.seed, rank=rank, skip=start)
    log = AppendingCsv(out / STEPS, COLUMNS) if rank == 0 else None
    run = _RankRun(config, attempt, t0, out, rank, world, workload, model, optimizer, ddp, hook, log)
    try:
        _log_round_start(run, start, resumed, int(restored[0]))
        _train(run, stream, start, fail)
    except InputError:
        raise
    except Exception as exc:  # a peer died mid-collective: the launcher re-forms the job
        print(f"flexcomm elastic: rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if log is not None:
            log.close()
    _leave(rank)
    return 0


def _log_round_start(run: _RankRun, start: int, resumed: bool, restored: int) -> None:
    """Rank 0 logs the round's start (``started`` or ``resumed``) and how many ranks got their residuals back."""
    log = run.log
    if log is None:
        return
    log.write({"attempt": run.attempt, "world_size": run.world, "step": start, "loss": float("nan"), "step_s": 0.0,
               "since_start_s": time.time() - run.t0, "event": "resumed" if resumed else "started"})
    if run.hook is not None and resumed:
        log.write({"attempt": run.attempt, "world_size": run.world, "step": start, "loss": float("nan"),
                   "step_s": 0.0, "since_start_s": time.time() - run.t0,
                   "event": f"residuals {restored}/{run.world}"})


def _train(run: _RankRun, stream: Iterator[tuple[Any, Any, Any]], start: int, fail: tuple[int, int] | None) -> None:
    """Steps ``start`` to ``steps``: each logged by rank 0 with the loss averaged over ranks, a checkpoint every
    ``checkpoint_every_steps``; ``fail`` kills its rank at its step of the first round."""
    import torch
    import torch.distributed as dist

    config, log, world, t0 = run.config, run.log, run.world, run.t0
    loss_sum = torch.zeros(1)
    for step in range(start, config.steps):
        if fail is not None and run.attempt == 0 and run.rank == fail[0] and step == fail[1]:
            os.kill(os.getpid(), signal.SIGKILL)
        _, inputs, targets = next(stream)
        began = time.perf_counter()
        run.optimizer.zero_grad(set_to_none=True)
        loss = run.workload.loss_fn(run.ddp(inputs), targets)
        loss.backward()
        run.optimizer.step()
        if config.step_sleep_s:
            time.sleep(config.step_sleep_s)
        loss_sum[0] = float(loss.item())
        dist.all_reduce(loss_sum)
        seconds = time.perf_counter() - began
        if log is not None:
            log.write({"attempt": run.attempt, "world_size": world, "step": step + 1,
                       "loss": float(loss_sum[0]) / world, "step_s": seconds, "since_start_s": time.time() - t0,
                       "event": ""})
        if (step + 1) % config.checkpoint_every_steps == 0:
            _checkpoint(run, step + 1)


def _checkpoint(run: _RankRun, step: int) -> None:
    """Every rank's own state of ``step`` first, in files of this step; then the model checkpoint, renamed last,
    commits them all: a kill anywhere before leaves the previous checkpoint and its step's files untouched (they
    are removed only after the rename)."""
    import torch.distributed as dist

    out, rank, hook = run.out, run.rank, run.hook
    _save(random_state_path(out, rank, step), random_state(step))
    if hook is not None:
        residuals = {**hook.compressor.state_dict(rank), "step": step, "layouts": hook.layouts.state_dict()}
        _save(compressor_path(out, rank, step), residuals)
    dist.barrier()
    if rank == 0:
        _save(out / CHECKPOINT, {"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
                                 "step": step, "workload": run.workload.name,
                                 "numel": sum(p.numel() for p in run.model.parameters())})
        run.log.write({"attempt": run.attempt, "world_size": run.world, "step": step, "loss": float("nan"),
                       "step_s": 0.0, "since_start_s": time.time() - run.t0, "event": "checkpoint"})
        forget_other_steps(out, step)
    dist.barrier()


def _leave(rank: int) -> None:
    """Leave the process group. Leaving can hang in gloo when peers tear down at different moments (seen once in
    ~10 runs); every step is logged and checkpointed by now, so a stuck exit ends with success after a bounded
    wait."""
    import torch.distributed as dist

    dist.barrier()
    watchdog = Watchdog(10.0, label=f"flexcomm elastic: rank {rank}: shutdown", exit_code=0)
    with watchdog.guard("shutdown"):
        shutdown()
    watchdog.close()


if __name__ == "__main__":
    status = worker_main(config_from_argv(ElasticWorkerConfig, "flexcomm elastic"))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # skip interpreter teardown: torch's gloo threads can hold a finished rank at exit
