"""A minimal SPMD communicator over *lists of per-worker tensors*, so one compressor runs on two engines.

Every method takes one tensor per *local* worker (``comm.local_workers``, in that order) and returns
one result per local worker. :class:`LocalCommunicator` holds all N workers in one process and does
the math exactly (emulation, tests); :class:`TorchDistCommunicator` holds one worker, this rank, and
calls ``torch.distributed``. A compressor written against :class:`Communicator` therefore computes
the same aggregates in an emulated cluster and on a real one, and neither engine imports the other.

Every collective is logged as a :class:`CollectiveRecord` (collective, algorithm hint, bytes per rank
in :mod:`costmodel.collectives`'s size convention, seconds spent in the call), so the cost model and
the simulator can price exactly what was sent. ``purpose`` separates the scheme's payload from
measurement traffic (e.g. the extra allreduce a real run needs to measure the compression gain) and
from control traffic (size exchanges, shape checks).

Contract shared by both implementations:

* allreduce is SUM; inputs of one call have one shape and dtype on every rank.
* ``inplace=True`` lets the communicator reuse (overwrite) the input buffers for the results; with
  ``inplace=False`` (default) inputs are never modified. :class:`LocalCommunicator` always returns new
  tensors from allreduce, so callers must use the *returned* tensors in both cases.
* allgather/broadcast results may share storage between local workers in :class:`LocalCommunicator`
  (N workers receiving the same payload would otherwise cost N^2 copies): treat them as read-only.
* allgather of different lengths (1-D only) needs ``same_size=False``: the lengths are exchanged first
  (one allgather of an int32 per rank, purpose ``control``) and the payload is padded to the longest,
  which is what is recorded and sent. An all-empty gather sends no payload at all, so nothing hangs.
"""

from __future__ import annotations

import time
import zlib
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from flexcomm.costmodel.compressed import DEFAULT_ALGORITHMS
from flexcomm.costmodel.errors import InputError

COLLECTIVES = ("allreduce", "allgather", "broadcast")
PURPOSES = ("payload", "measure", "control")

#: Algorithm hints matching :data:`costmodel.compressed.DEFAULT_ALGORITHMS` (the paper's choices).
DEFAULT_HINTS: dict[str, str] = {
    "allreduce": DEFAULT_ALGORITHMS.allreduce,
    "allgather": DEFAULT_ALGORITHMS.allgather,
    "broadcast": DEFAULT_ALGORITHMS.broadcast,
}

#: The labels gloo's calls are recorded (and calibrated) under: ring allreduce, ring allgather, binomial broadcast.
#: gloo's broadcast feeds all of a rank's children at once; the uncalibrated link model prices that form
#: (``binomial-async``, :data:`real_backend.validate.IMPLEMENTED_AS`), calibrations fit the label as measured.
GLOO_HINTS: dict[str, str] = {"allreduce": "ring", "allgather": "ring", "broadcast": "binomial"}
#: NCCL's usual large-message choices (it may pick a tree for allreduce: the hint is only a hint).
NCCL_HINTS: dict[str, str] = {"allreduce": "ring", "allgather": "ring", "broadcast": "pipelined-ring"}

#: Cap on :attr:`Communicator.history`, so long runs do not grow without bound.
HISTORY_LENGTH = 100_000


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One collective call: enough to price it with ``costmodel.collectives.formula(collective, algorithm)``.

    ``nbytes`` is per rank in the cost model's convention: the full vector for allreduce and broadcast,
    each rank's contribution for allgather (padded length when lengths differed). ``seconds`` is the
    wall time of the call (a ragged allgather's includes its length exchange; 0 for emulated control).
    """

    collective: str
    algorithm: str
    nbytes: int
    dtype: str
    purpose: str = "payload"
    seconds: float = 0.0


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _sync(tensors: Sequence[Tensor]) -> None:
    """Wait for queued device work so wall-clock timings mean something on CUDA."""
    for t in tensors:
        if t.is_cuda:
            torch.cuda.synchronize(t.device)
            return


class Communicator(ABC):
    """SPMD collectives over the tensors of the workers this process holds."""

    #: True when all workers live in this process and collectives cost only memory traffic.
    emulated: bool = False

    def __init__(self, world_size: int, local_workers: Sequence[int], algorithms: Mapping[str, str] | None = None):
        if world_size < 1:
            raise InputError("world_size", world_size, "an integer >= 1")
        self.world_size = int(world_size)
        self.local_workers: list[int] = list(local_workers)
        hints = dict(DEFAULT_HINTS)
        for collective, algorithm in (algorithms or {}).items():
            if collective not in COLLECTIVES:
                raise InputError("algorithms", collective, "keys among " + ", ".join(COLLECTIVES))
            hints[collective] = algorithm
        self.algorithms = hints
        self.history: deque[CollectiveRecord] = deque(maxlen=HISTORY_LENGTH)
        self._recorders: list[list[CollectiveRecord]] = []

    # --- recording ------------------------------------------------------------------------------
    @contextmanager
    def recording(self) -> Iterator[list[CollectiveRecord]]:
        """Collect the records of every collective issued inside the block (nestable)."""
        sink: list[CollectiveRecord] = []
        self._recorders.append(sink)
        try:
            yield sink
        finally:
            self._recorders.remove(sink)

    def _log(self, collective: str, nbytes: int, dtype: torch.dtype, purpose: str, seconds: float) -> None:
        if purpose not in PURPOSES:
            raise InputError("purpose", purpose, "one of " + ", ".join(PURPOSES))
        record = CollectiveRecord(collective, self.algorithms[collective], int(nbytes), dtype_name(dtype),
                                  purpose, seconds)
        self.history.append(record)
        for sink in self._recorders:
            sink.append(record)

    def _check_count(self, tensors: Sequence[Tensor]) -> None:
        if len(tensors) != len(self.local_workers):
            raise InputError("tensors", len(tensors), f"one tensor per local worker ({len(self.local_workers)})")

    # --- collectives ----------------------------------------------------------------------------
    def allreduce(self, tensors: Sequence[Tensor], *, inplace: bool = False, purpose: str = "payload") -> list[Tensor]:
        """SUM over all ranks; every local worker receives the total."""
        self._check_count(tensors)
        return self._timed("allreduce", tensors, purpose, lambda: self._allreduce(list(tensors), inplace))

    def allgather(
        self, tensors: Sequence[Tensor], *, same_size: bool = True, purpose: str = "payload"
    ) -> list[list[Tensor]]:
        """Every local worker receives every rank's tensor, in rank order.

        ``same_size=False`` allows 1-D tensors of different lengths (a length exchange comes first).
        """
        self._check_count(tensors)
        _sync(tensors)
        start = time.perf_counter()
        if same_size:
            out = self._allgather(list(tensors))
            nbytes = tensors[0].numel() * tensors[0].element_size()
        else:
            if any(t.dim() != 1 for t in tensors):
                raise InputError("tensors", [tuple(t.shape) for t in tensors], "1-D tensors when same_size=False")
            out, longest = self._allgather_varied(list(tensors), purpose)
            nbytes = longest * tensors[0].element_size()
        _sync([t for row in out for t in row[:1]])
        if nbytes > 0 or same_size:
            self._log("allgather", nbytes, tensors[0].dtype, purpose, time.perf_counter() - start)
        return out

    def broadcast(self, tensors: Sequence[Tensor], src: int, *, purpose: str = "payload") -> list[Tensor]:
        """Every local worker receives rank ``src``'s tensor; other workers' tensors are receive buffers
        of the same shape and dtype (their contents are ignored and may be overwritten)."""
        self._check_count(tensors)
        if not 0 <= src < self.world_size:
            raise InputError("src", src, f"a rank in [0, {self.world_size})")
        return self._timed("broadcast", tensors, purpose, lambda: self._broadcast(list(tensors), src))

    def allreduce_async(self, tensor: Tensor, *, purpose: str = "control") -> PendingAllreduce:
        """Start a SUM allreduce of this process's single worker's ``tensor``; ``.wait()`` returns the total.

        The default runs it at once (emulated communicators have nothing to overlap); a real one returns
        while the bytes are still moving, so a small control exchange can hide behind the next step.
        """
        total = self.allreduce([tensor], purpose=purpose)[0]
        return PendingAllreduce(lambda: total)

    def _timed(self, collective: str, tensors: Sequence[Tensor], purpose: str,
               call: Callable[[], list[Tensor]]) -> list[Tensor]:
        """Run one same-size collective between device syncs and record its per-rank bytes and seconds."""
        _sync(tensors)
        start = time.perf_counter()
        out = call()
        _sync(out)
        t0 = tensors[0]
        self._log(collective, t0.numel() * t0.element_size(), t0.dtype, purpose, time.perf_counter() - start)
        return out

    @abstractmethod
    def _allreduce(self, tensors: list[Tensor], inplace: bool) -> list[Tensor]: ...

    @abstractmethod
    def _allgather(self, tensors: list[Tensor]) -> list[list[Tensor]]: ...

    @abstractmethod
    def _allgather_varied(self, tensors: list[Tensor], purpose: str) -> tuple[list[list[Tensor]], int]: ...

    @abstractmethod
    def _broadcast(self, tensors: list[Tensor], src: int) -> list[Tensor]: ...


def _check_alike(tensors: Sequence[Tensor], what: str) -> None:
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape != first.shape or t.dtype != first.dtype:
            raise InputError("tensors", [(tuple(x.shape), dtype_name(x.dtype)) for x in tensors],
                             f"one shape and dtype on every rank for {what}")


class LocalCommunicator(Communicator):
    """All ``world_size`` workers in this process; collectives are exact sums and copies.

    Allreduce sums in rank order (worker 0 + worker 1 + ...), so results are bitwise reproducible;
    a real ring reduces in another order, so compare real and emulated runs with a tolerance unless
    the values add exactly (e.g. small integers).
    """

    emulated = True

    def __init__(self, world_size: int, algorithms: Mapping[str, str] | None = None) -> None:
        super().__init__(world_size, range(int(world_size)), algorithms)

    def _allreduce(self, tensors: list[Tensor], inplace: bool) -> list[Tensor]:
        _check_alike(tensors, "allreduce")
        total = tensors[0].clone()
        for t in tensors[1:]:
            total.add_(t)
        return [total] + [total.clone() for _ in tensors[1:]]

    def _allgather(self, tensors: list[Tensor]) -> list[list[Tensor]]:
        _check_alike(tensors, "allgather (or pass same_size=False)")
        return [list(tensors) for _ in tensors]

    def _allgather_varied(self, tensors: list[Tensor], purpose: str) -> tuple[list[list[Tensor]], int]:
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) != 1:
            raise InputError("tensors", sorted(map(dtype_name, dtypes)), "one dtype on every rank")
        self._log("allgather", 4, torch.int32, "control", 0.0)  # the length exchange a real run needs
        return [list(tensors) for _ in tensors], max(t.numel() for t in tensors)

    def _broadcast(self, tensors: list[Tensor], src: int) -> list[Tensor]:
        _check_alike(tensors, "broadcast")
        return [tensors[src]] * len(tensors)


class PendingAllreduce:
    """An allreduce in flight (:meth:`Communicator.allreduce_async`): ``wait()`` once for its total."""

    def __init__(self, finish: Callable[[], Tensor]) -> None:
        self._finish = finish
        self._result: Tensor | None = None

    def wait(self) -> Tensor:
        if self._result is None:
            self._result = self._finish()
        return self._result


class TorchDistCommunicator(Communicator):
    """This rank of a ``torch.distributed`` process group (one local worker).

    Issues ``all_reduce`` / ``all_gather_single`` (``all_gather_into_tensor`` before torch 2.13; the output
    is the dim-0 concatenation, as gloo requires) / ``broadcast`` with ``async_op=True`` and waits for the
    work on the calling thread: a DDP hook calls this from its communication thread
    (:mod:`real_backend.comm_thread`), so only that thread waits. The future of an async
    ``all_gather_into_tensor`` holds the *input*: the output buffer is read instead.
    Ranks are group ranks. ``validate=True`` first allgathers each call's shape and dtype (purpose
    ``control``) and raises the same :class:`InputError` on every rank instead of hanging or failing
    deep inside the backend on mismatched tensors.
    """

    def __init__(
        self, group: object | None = None, algorithms: Mapping[str, str] | None = None, validate: bool = False
    ) -> None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise InputError("group", group, "an initialised torch.distributed process group")
        self._dist = dist
        self.group = group
        backend = str(dist.get_backend(group)).lower()
        hints = dict(NCCL_HINTS if "nccl" in backend else GLOO_HINTS)
        hints.update(algorithms or {})
        world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        super().__init__(world, [self.rank], hints)
        self.validate = validate

    def _global(self, rank: int) -> int:
        return rank if self.group is None else self._dist.get_global_rank(self.group, rank)

    def _validate(self, t: Tensor, what: str) -> None:
        if not self.validate:
            return
        if t.dim() > 8:
            raise InputError("tensors", tuple(t.shape), "at most 8 dimensions")
        dtype_code = zlib.crc32(str(t.dtype).encode())  # stable across processes, unlike hash()
        code = torch.tensor([t.dim(), *t.shape, *([0] * (8 - t.dim())), dtype_code],
                            dtype=torch.int64, device=t.device)
        out = self._gather(code).view(self.world_size, -1)
        self._log("allgather", code.numel() * 8, code.dtype, "control", 0.0)
        if not bool((out == out[0]).all()):
            raise InputError("tensors", out.tolist(), f"one shape and dtype on every rank for {what}")

    def _allreduce(self, tensors: list[Tensor], inplace: bool) -> list[Tensor]:
        t = tensors[0] if inplace else tensors[0].clone()
        self._validate(t, "allreduce")
        self._dist.all_reduce(t, group=self.group, async_op=True).wait()
        return [t]

    def allreduce_async(self, tensor: Tensor, *, purpose: str = "control") -> PendingAllreduce:
        t = tensor.clone()
        start = time.perf_counter()
        work = self._dist.all_reduce(t, group=self.group, async_op=True)

        def finish() -> Tensor:
            work.wait()
            self._log("allreduce", t.numel() * t.element_size(), t.dtype, purpose, time.perf_counter() - start)
            return t

        return PendingAllreduce(finish)

    def _gather(self, t: Tensor) -> Tensor:
        """Blocking gather into one buffer, concatenated along dim 0 (gloo rejects the stacked form)."""
        t = t.contiguous().reshape(t.shape if t.dim() else (1,))
        out = t.new_empty((self.world_size * t.shape[0], *t.shape[1:]))
        gather = getattr(self._dist, "all_gather_single", None) or self._dist.all_gather_into_tensor
        gather(out, t, group=self.group, async_op=True).wait()
        return out

    def _allgather(self, tensors: list[Tensor]) -> list[list[Tensor]]:
        t = tensors[0]
        self._validate(t, "allgather")
        out = self._gather(t).view(self.world_size, *t.shape)
        return [list(out.unbind(0))]

    def _allgather_varied(self, tensors: list[Tensor], purpose: str) -> tuple[list[list[Tensor]], int]:
        t = tensors[0].contiguous()
        length = torch.tensor([t.numel()], dtype=torch.int32, device=t.device)
        start = time.perf_counter()
        counts = self._gather(length).tolist()  # the host needs the lengths to size the receive buffer
        self._log("allgather", 4, torch.int32, "control", time.perf_counter() - start)
        longest = max(counts)
        if longest == 0:
            return [[t.new_empty(0) for _ in counts]], 0
        padded = t.new_zeros(longest)
        padded[: t.numel()] = t
        out = self._gather(padded).view(self.world_size, longest)
        return [[out[r, :n] for r, n in enumerate(counts)]], longest

    def _broadcast(self, tensors: list[Tensor], src: int) -> list[Tensor]:
        t = tensors[0]
        self._validate(t, "broadcast")
        self._dist.broadcast(t, src=self._global(src), group=self.group, async_op=True).wait()
        return [t]

