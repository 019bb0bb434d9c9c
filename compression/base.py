"""What every compressor shares: input checks, error feedback, timing, gain and the per-step record.

A compressor turns the local workers' flat gradients into the aggregate every worker applies, by
issuing collectives on a :class:`~compression.comm.Communicator`. The base class owns the parts that
must be identical across schemes so that their numbers compare:

* **error feedback** (EF-SGD): a lossy scheme compresses ``acc = gradient + residual`` and keeps
  ``acc - sent`` as the next residual, where ``sent`` is what this worker contributed to the
  aggregate, in gradient units. For the sparse schemes ``sent + residual == acc`` holds bitwise.
* **timing**: selection/packing (``compress``) and unpacking (``decompress``) are timed per worker
  with ``perf_counter`` (after a CUDA synchronize on CUDA tensors). Workers run in lock step between
  collectives, so a step's time is the sum over phases of the slowest local worker in each phase.
* **compression gain**: ``||mean_i sent_i||^2 / ||mean_i acc_i||^2`` (the brief's E||g_c||^2 / E||g_e||^2)
  and its unsquared form, which the paper's code uses. The dense aggregate of ``acc`` costs a dense
  allreduce on a real cluster, so it is measured every ``gain_every`` steps (default: every step on an
  emulated communicator, never on a real one) and recorded with purpose ``measure``. ``local_gain``
  (``||sent_i||^2 / ||acc_i||^2`` averaged over local workers, what the paper's code computes) needs
  no communication and is always recorded.

Device-agnostic: every buffer is made on the gradient's device and nothing is copied to the host in
the selection itself. A step still synchronises with the host where the algorithm needs a number on
the host: once to read the step's scalars (norms for the gains), VAR's owner (argmax), threshold's
``nonzero`` and a ragged allgather's lengths.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from torch import Tensor

from flexcomm.compression.comm import CollectiveRecord, Communicator
from flexcomm.costmodel.collectives import Coefficients, formula
from flexcomm.costmodel.compressed import topk_count
from flexcomm.costmodel.errors import InputError


@dataclass(frozen=True)
class StepStats:
    """One exchange: what was sent (by collective), how long compression took, and the gain.

    ``collectives`` are the payload only; ``overhead`` holds control traffic (length exchanges) and
    gain measurement. ``k`` is the target number of elements each worker contributes; ``sent`` the
    actual count per local worker (threshold selection drifts from k).
    """

    scheme: str
    step: int
    key: int
    numel: int
    world_size: int
    ratio: float | None
    k: int
    sent: tuple[int, ...]
    collectives: tuple[CollectiveRecord, ...]
    overhead: tuple[CollectiveRecord, ...]
    compress_time_s: float
    decompress_time_s: float
    comm_time_s: float
    gain: float | None
    gain_norm: float | None
    local_gain: float | None
    local_gain_norm: float | None
    owner: int | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def payload_bytes(self) -> int:
        """Bytes per rank over all payload collectives (the cost model's per-collective convention)."""
        return sum(r.nbytes for r in self.collectives)

    def bytes_by_collective(self) -> dict[str, int]:
        """Payload bytes per rank summed per collective name."""
        out: dict[str, int] = {}
        for r in self.collectives:
            out[r.collective] = out.get(r.collective, 0) + r.nbytes
        return out

    def parts(self, include_overhead: bool = False) -> list[tuple[str, str, Coefficients]]:
        """The step as ``(collective, algorithm, coefficients)``, like ``costmodel.compressed.scheme_parts``."""
        records = self.collectives + (self.overhead if include_overhead else ())
        p = np.asarray(float(self.world_size))
        return [(r.collective, r.algorithm, formula(r.collective, r.algorithm)(float(r.nbytes), p)) for r in records]


class ExchangeResult(NamedTuple):
    """The aggregated gradient per local worker, the step's record, and (debug) what each worker sent."""

    aggregates: list[Tensor]
    stats: StepStats
    sent: list[Tensor | None] | None = None


def _sq_norm(t: Tensor) -> Tensor:
    """||t||^2 in fp32 in one pass, without a temporary the size of ``t``."""
    return torch.linalg.vector_norm(t, dtype=torch.float32).square()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepContext:
    """Per-exchange bookkeeping a compressor fills in: timings per phase, sent counts, residuals."""

    def __init__(self, comm: Communicator, device: torch.device, n_local: int) -> None:
        self.comm = comm
        self.device = device
        self.n_local = n_local
        self.totals = {"compress": 0.0, "decompress": 0.0, "comm": 0.0}
        self._phase: dict[str, list[float]] = {"compress": [0.0] * n_local, "decompress": [0.0] * n_local}
        self.sent_counts: list[int] = [0] * n_local
        self.sent: list[Tensor | None] = [None] * n_local
        self.sent_sq: list[Tensor | None] = [None] * n_local
        self.owner: int | None = None
        self.k: int = 0
        self.extra: dict[str, float] = {}

    @contextmanager
    def timed(self, kind: str, worker: int) -> Iterator[None]:
        """Time ``kind`` ("compress" or "decompress") work of local worker ``worker``."""
        _sync(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            _sync(self.device)
            self._phase[kind][worker] += time.perf_counter() - start

    def end_phase(self) -> None:
        """Close a lock-step phase: the slowest worker's time counts."""
        for kind, per_worker in self._phase.items():
            self.totals[kind] += max(per_worker)
            self._phase[kind] = [0.0] * self.n_local

    # collectives close the phase before them, so compute on both sides is not summed across workers
    def allreduce(self, tensors: Sequence[Tensor], *, inplace: bool = True) -> list[Tensor]:
        self.end_phase()
        start = time.perf_counter()
        out = self.comm.allreduce(tensors, inplace=inplace)
        self.totals["comm"] += time.perf_counter() - start
        return out

    def allgather(self, tensors: Sequence[Tensor], *, same_size: bool = True) -> list[list[Tensor]]:
        self.end_phase()
        start = time.perf_counter()
        out = self.comm.allgather(tensors, same_size=same_size)
        self.totals["comm"] += time.perf_counter() - start
        return out

    def broadcast(self, tensors: Sequence[Tensor], src: int) -> list[Tensor]:
        self.end_phase()
        start = time.perf_counter()
        out = self.comm.broadcast(tensors, src)
        self.totals["comm"] += time.perf_counter() - start
        return out

    def record_sparse(self, worker: int, acc: Tensor, idx: Tensor, values: Tensor, keep_sent: bool) -> None:
        """Note a sparse contribution (before ``acc`` becomes the residual)."""
        self.sent_counts[worker] = int(idx.numel())
        self.sent_sq[worker] = _sq_norm(values)
        if keep_sent:
            self.sent[worker] = torch.zeros_like(acc).index_put_((idx.long(),), values)


def index_dtype_for(numel: int, requested: str | None) -> torch.dtype:
    """int32 indices whenever they fit (numel < 2^31): half the bytes of the int64 the paper's code sent."""
    if requested is None:
        return torch.int32 if numel < 2**31 else torch.int64
    if requested in ("int32", "int64"):
        if requested == "int32" and numel >= 2**31:
            raise InputError("index_dtype", requested, f"int64 for {numel} >= 2^31 elements")
        return torch.int32 if requested == "int32" else torch.int64
    raise InputError("index_dtype", requested, "int32, int64 or None (int32 when it fits)")


def check_ratio(ratio: object, needs_ratio: bool, name: str) -> float | None:
    """Validate ``ratio``: a fraction in (0, 1] for sparse schemes, absent for the others."""
    if not needs_ratio:
        if ratio is not None:
            raise InputError("ratio", ratio, f"no ratio for {name} (it sets its size by other options)")
        return None
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio):
        raise InputError("ratio", ratio, f"a fraction in (0, 1] for {name}")
    if not 0 < ratio <= 1:
        raise InputError("ratio", ratio, f"a fraction in (0, 1] for {name}")
    return float(ratio)


class Compressor(ABC):
    """A gradient-exchange scheme with per-worker state, runnable on any :class:`Communicator`.

    ``exchange(grads, comm, key=bucket)`` takes one flat 1-D gradient per local worker and returns the
    averaged aggregate each of them applies, exactly as the cluster computes it. State (residuals,
    step counters) is kept per ``(key, rank)``, so one compressor serves several DDP buckets.
    """

    name: ClassVar[str] = ""
    lossy: ClassVar[bool] = True
    needs_ratio: ClassVar[bool] = False

    def __init__(
        self,
        ratio: float | None = None,
        *,
        error_feedback: bool = True,
        gain_every: int | None = None,
        keep_sent: bool = False,
    ) -> None:
        self.ratio = check_ratio(ratio, self.needs_ratio, self.name)
        if not isinstance(error_feedback, bool):
            raise InputError("error_feedback", error_feedback, "True or False")
        if gain_every is not None and (isinstance(gain_every, bool) or not isinstance(gain_every, int)
                                       or gain_every < 0):
            raise InputError("gain_every", gain_every, "None, 0 (never) or a step interval >= 1")
        self.error_feedback = error_feedback and self.lossy
        self.gain_every = gain_every
        self.keep_sent = keep_sent
        self.residuals: dict[tuple[int, int], Tensor] = {}
        self.steps: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ratio={self.ratio}, error_feedback={self.error_feedback})"

    # --- public ---------------------------------------------------------------------------------
    def exchange(self, grads: Sequence[Tensor], comm: Communicator, *, key: int = 0) -> ExchangeResult:
        """Aggregate one flat gradient per local worker; see the class docstring."""
        grads = self._check(grads, comm)
        step = self.steps.get(key, 0)
        self.steps[key] = step + 1
        device = grads[0].device
        ctx = StepContext(comm, device, len(grads))
        with comm.recording() as records:
            accs = self._accumulate(grads, comm, key, ctx)
            acc_sq = [_sq_norm(a) for a in accs] if self.lossy else None
            dense_mean = self._measure(accs, comm, step) if self.lossy else None
            aggregates = self._exchange(accs, comm, key, step, ctx)
            ctx.end_phase()
        stats = self._stats(grads, comm, key, step, ctx, records, aggregates, acc_sq, dense_mean)
        return ExchangeResult(aggregates, stats, list(ctx.sent) if self.keep_sent else None)

    def residual(self, rank: int, key: int = 0) -> Tensor | None:
        """The error-feedback memory of ``rank`` for bucket ``key`` (None before the first step or without EF).

        This is the live buffer: the next exchange adds the gradient into it in place. Clone it to keep it.
        """
        return self.residuals.get((key, rank))

    def state_dict(self, rank: int) -> dict[str, Any]:
        """What a checkpoint keeps of ``rank``: its error-feedback memory per bucket and the step counters.

        Without it a resumed job silently drops every gradient mass that was still waiting in a residual.
        Tensors are cloned: the live residuals are updated in place by the next exchange.
        """
        return {"compressor": self.name, "ratio": self.ratio, "rank": rank,
                "residuals": {key: r.detach().clone() for (key, owner), r in self.residuals.items() if owner == rank},
                "steps": dict(self.steps)}

    def load_state_dict(self, state: Mapping[str, Any], rank: int) -> None:
        """Restore :meth:`state_dict` as ``rank``'s memory, one call per local rank (the dicts are refilled in
        place: a flexible compressor's inner schemes share them). A checkpoint of another scheme is refused."""
        if state.get("compressor") != self.name:
            raise InputError("resume", state.get("compressor"), f"a checkpoint of compressor {self.name!r}")
        for held in [k for k in self.residuals if k[1] == rank]:  # other local ranks keep theirs
            del self.residuals[held]
        self.steps.clear()
        for key, residual in state["residuals"].items():
            self.residuals[(int(key), rank)] = residual.clone()
        self.steps.update({int(k): int(v) for k, v in state["steps"].items()})

    def reset(self) -> None:
        """Forget residuals and step counters (e.g. after restoring a checkpoint)."""
        self.residuals.clear()
        self.steps.clear()

    # --- for subclasses -------------------------------------------------------------------------
    @abstractmethod
    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        """Issue the collectives; return one aggregate per local worker; call :meth:`_keep` per worker."""

    def _accumulate(self, grads: list[Tensor], comm: Communicator, key: int, ctx: StepContext) -> list[Tensor]:
        """``acc = grad + residual`` in a buffer the compressor owns (the residual's, when there is one)."""
        if not self.lossy:
            return grads
        accs = []
        for i, (rank, g) in enumerate(zip(comm.local_workers, grads, strict=True)):
            with ctx.timed("compress", i):
                r = self.residuals.pop((key, rank), None)
                if r is not None and r.shape != g.shape:
                    r = None  # the bucket changed layout (DDP rebuilds buckets after iteration 1): start over
                    ctx.extra["residual_reset"] = 1.0
                accs.append(r.add_(g) if r is not None else g.clone())
        return accs

    def _keep(self, key: int, rank: int, residual: Tensor) -> None:
        """Store the new residual (dropped when error feedback is off)."""
        if self.error_feedback:
            self.residuals[(key, rank)] = residual

    def _k(self, numel: int) -> int:
        assert self.ratio is not None
        return int(topk_count(numel, self.ratio))

    # --- internals ------------------------------------------------------------------------------
    def _check(self, grads: Sequence[Tensor], comm: Communicator) -> list[Tensor]:
        grads = list(grads)
        if len(grads) != len(comm.local_workers) or not grads:
            raise InputError("grads", len(grads), f"one gradient per local worker ({len(comm.local_workers)})")
        first = grads[0]
        for g in grads:
            if not isinstance(g, Tensor) or g.dim() != 1 or not g.is_floating_point():
                raise InputError("grads", getattr(g, "shape", type(g)), "flat 1-D floating-point tensors")
            if g.shape != first.shape or g.dtype != first.dtype or g.device != first.device:
                raise InputError("grads", [(tuple(x.shape), str(x.dtype), str(x.device)) for x in grads],
                                 "one length, dtype and device for every local worker")
        if first.numel() < 1:
            raise InputError("grads", 0, "at least one element")
        return grads

    def _measure(self, accs: list[Tensor], comm: Communicator, step: int) -> Tensor | None:
        every = self.gain_every if self.gain_every is not None else (1 if comm.emulated else 0)
        if every == 0 or step % every:
            return None
        total = comm.allreduce(accs, inplace=False, purpose="measure")[0]
        return total.div_(comm.world_size)

    def _stats(
        self,
        grads: list[Tensor],
        comm: Communicator,
        key: int,
        step: int,
        ctx: StepContext,
        records: list[CollectiveRecord],
        aggregates: list[Tensor],
        acc_sq: list[Tensor] | None,
        dense_mean: Tensor | None,
    ) -> StepStats:
        numel = grads[0].numel()
        scalars: list[Tensor] = []
        if dense_mean is not None:
            scalars += [_sq_norm(aggregates[0]), _sq_norm(dense_mean)]
        have_local = acc_sq is not None and all(s is not None for s in ctx.sent_sq)
        if have_local:
            assert acc_sq is not None
            scalars += [torch.stack([s for s in ctx.sent_sq if s is not None]), torch.stack(acc_sq)]
        values = [t.reshape(-1).tolist() for t in scalars]  # one host sync for every scalar of the step
        gain = gain_norm = local_gain = local_gain_norm = None
        if dense_mean is not None:
            (c_sq,), (e_sq,) = values[0], values[1]
            gain = c_sq / e_sq if e_sq > 0 else 1.0
            gain_norm = math.sqrt(gain)
            values = values[2:]
        elif not self.lossy:
            gain = gain_norm = 1.0
        if have_local:
            sent_sq, accs_sq = values
            ratios = [s / a if a > 0 else 1.0 for s, a in zip(sent_sq, accs_sq, strict=True)]
            local_gain = sum(ratios) / len(ratios)
            local_gain_norm = sum(math.sqrt(r) for r in ratios) / len(ratios)
        elif not self.lossy:
            local_gain = local_gain_norm = 1.0
        return StepStats(
            scheme=self.name,
            step=step,
            key=key,
            numel=numel,
            world_size=comm.world_size,
            ratio=self.ratio,
            k=ctx.k,
            sent=tuple(ctx.sent_counts),
            collectives=tuple(r for r in records if r.purpose == "payload"),
            overhead=tuple(r for r in records if r.purpose != "payload"),
            compress_time_s=ctx.totals["compress"],
            decompress_time_s=ctx.totals["decompress"],
            comm_time_s=ctx.totals["comm"],
            gain=gain,
            gain_norm=gain_norm,
            local_gain=local_gain,
            local_gain_norm=local_gain_norm,
            owner=ctx.owner,
            extra=dict(ctx.extra),
        )
