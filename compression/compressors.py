"""The gradient-exchange schemes and the registry :func:`make_compressor`.

Payload per rank per step, for a flat gradient of ``n`` elements of ``v`` bytes (4 for fp32),
``k = max(1, floor(n * ratio))``, int32 indices (``i = 4``; int64, ``i = 8``, only when n >= 2^31 or
asked for with ``index_dtype="int64"``: the paper's code sent int64) and N ranks. Byte counts use the
cost model's convention (allreduce/broadcast: the vector; allgather: each rank's contribution).

=================  ==========================================================  ============================
name               collectives (payload)                                        bytes per rank
=================  ==========================================================  ============================
dense              allreduce of the gradient                                    n*v
fp16 / bf16        allreduce of the 2-byte cast of grad/N                       2n
topk-ag            allgather of k values + k indices (one packed uint8 buffer)  k*(v+i)
topk-ar (star)     broadcast of the owner's k indices; allreduce of k values    k*i + k*v
topk-ar (var)      + allgather of one fp32 norm per rank, before the above      4 + k*i + k*v
topk-ar-sketch     allreduce of ceil(n/B) fp32 block scores; allreduce of the   4*ceil(n/B) + k'*v
                   k' <= ceil(k/B)*B values of the ceil(k/B) winning blocks
randomk            allreduce of k values (indices from a shared seeded RNG)     k*v
threshold          control: allgather of an int32 count; payload: allgather    4 (control) +
                   of max_r(count_r) values + indices, zero-padded              max_r(count_r)*(v+i)
powersgd           allreduce of uncompressed (1-D, too small) tensors; of P;    v*(u + sum n_j*r + sum m_j*r)
                   of Q (torch's powerSGD_hook; dense allreduce before
                   ``start_iter``)
=================  ==========================================================  ============================

``topk-ag``, ``topk-ar`` and ``dense`` payloads equal :func:`costmodel.compressed.scheme_parts`'s
sizes (``StepStats.parts()`` prices them with the same formulas), so the cost model can predict a
step from its record. Every lossy scheme uses error feedback unless ``error_feedback=False``.

Notes on fidelity: ``threshold`` is DGC's *selection* (sampled threshold, optional exact second pass),
not its momentum correction or warm-up. ``randomk`` does not rescale by n/k (error feedback corrects
the bias instead). ``topk-ag``'s and ``threshold``'s aggregates mix different index sets, so their gain
can exceed 1 when workers' large entries cancel; the index-agreeing schemes (topk-ar*, randomk,
powersgd) are projections of the dense mean, so their gain is in [0, 1].
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from flexcomm.compression.base import Compressor, StepContext, index_dtype_for
from flexcomm.compression.comm import Communicator
from flexcomm.compression.powersgd import PowerSGD
from flexcomm.costmodel.errors import InputError

# --- packing: values and indices travel as one uint8 buffer, so topk-ag is one allgather -------------


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def pack(values: Tensor, indices: Tensor) -> Tensor:
    """Values then indices as raw bytes (one message, no dtype conversions)."""
    return torch.cat([values.contiguous().view(torch.uint8), indices.contiguous().view(torch.uint8)])


def _view(buf: Tensor, dtype: torch.dtype) -> Tensor:
    if buf.storage_offset() % _element_size(dtype):
        buf = buf.clone()  # a misaligned slice of a gathered buffer cannot be reinterpreted in place
    return buf.view(dtype)


def unpack(buf: Tensor, value_dtype: torch.dtype, index_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`pack`; the count follows from the buffer's length."""
    vb, ib = _element_size(value_dtype), _element_size(index_dtype)
    count = buf.numel() // (vb + ib)
    return _view(buf[: count * vb], value_dtype), _view(buf[count * vb: count * (vb + ib)], index_dtype)


def _seed(*parts: int) -> int:
    """Deterministic 63-bit seed from integers (same on every worker: no Python hash randomisation)."""
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h = (h ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h & 0x7FFFFFFFFFFFFFFF


def _scatter_mean(like: Tensor, pairs: list[tuple[Tensor, Tensor]], world_size: int) -> Tensor:
    """Dense mean of sparse contributions, added in rank order (deterministic on CPU and CUDA).

    Dividing the dense sum (not each payload) keeps ratio 1.0 bitwise equal to a dense allreduce.
    """
    out = torch.zeros_like(like)
    for values, indices in pairs:
        out.index_add_(0, indices, values)
    return out.div_(world_size)


def _scatter_sum(like: Tensor, summed: Tensor, indices: Tensor, world_size: int) -> Tensor:
    """Dense tensor holding the allreduced values / N at agreed indices: only k elements are divided."""
    return torch.zeros_like(like).index_put_((indices.long(),), summed.div_(world_size))


def _allreduce_at(ctx: StepContext, accs: list[Tensor], indices: list[Tensor], values: list[Tensor],
                  world_size: int) -> list[Tensor]:
    """The shared tail of every Allreduce-compatible scheme: sum the values at the agreed indices over all
    workers, then scatter the mean back into a dense gradient per local worker."""
    summed = ctx.allreduce(values, inplace=True)
    aggs = []
    for i, (idx, s) in enumerate(zip(indices, summed, strict=True)):
        with ctx.timed("decompress", i):
            aggs.append(_scatter_sum(accs[i], s, idx, world_size))
    return aggs


# --- dense and casts ------------------------------------------------------------------------------------


class Dense(Compressor):
    """Plain allreduce, divided by N: the reference every other scheme is measured against."""

    name = "dense"
    lossy = False

    def __init__(self, ratio: float | None = None, *, gain_every: int | None = None, keep_sent: bool = False) -> None:
        super().__init__(ratio, error_feedback=False, gain_every=gain_every, keep_sent=keep_sent)

    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        ctx.k = accs[0].numel()
        ctx.sent_counts = [ctx.k] * len(accs)
        if self.keep_sent:
            ctx.sent = list(accs)
        out = ctx.allreduce(accs, inplace=False)
        for i, o in enumerate(out):
            with ctx.timed("decompress", i):
                o.div_(comm.world_size)
        return out


class Cast(Compressor):
    """Allreduce of a 16-bit cast of grad/N (dividing first avoids fp16 overflow of the sum).

    torch's fp16/bf16 hooks cast first and divide in 16 bits; dividing in fp32 first loses less to
    underflow. With error feedback the cast error ``acc - N*cast(acc/N)`` is carried to the next step.
    """

    wire: ClassVar[torch.dtype] = torch.float16

    def __init__(self, ratio: float | None = None, *, error_feedback: bool = True, gain_every: int | None = None,
                 keep_sent: bool = False) -> None:
        super().__init__(ratio, error_feedback=error_feedback, gain_every=gain_every, keep_sent=keep_sent)

    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        n = comm.world_size
        ctx.k = accs[0].numel()
        wires = []
        for i, (rank, acc) in enumerate(zip(comm.local_workers, accs, strict=True)):
            with ctx.timed("compress", i):
                wire = (acc / n).to(self.wire)
                sent = wire.to(acc.dtype).mul_(n)
                ctx.sent_counts[i] = ctx.k
                ctx.sent_sq[i] = torch.linalg.vector_norm(sent, dtype=torch.float32).square()
                if self.keep_sent:
                    ctx.sent[i] = sent
                self._keep(key, rank, acc.sub_(sent))
                wires.append(wire)
        out = ctx.allreduce(wires, inplace=True)
        aggs = []
        for i, (o, acc) in enumerate(zip(out, accs, strict=True)):
            with ctx.timed("decompress", i):
                aggs.append(o.to(acc.dtype))
        return aggs


class FP16(Cast):
    name = "fp16"
    wire = torch.float16


class BF16(Cast):
    name = "bf16"
    wire = torch.bfloat16


# --- sparse schemes ---------------------------------------------------------------------------------------


class _Sparse(Compressor):
    """Shared options of the schemes that send a subset of elements."""

    needs_ratio = True

    def __init__(self, ratio: float | None = None, *, index_dtype: str | None = None, error_feedback: bool = True,
                 gain_every: int | None = None, keep_sent: bool = False) -> None:
        super().__init__(ratio, error_feedback=error_feedback, gain_every=gain_every, keep_sent=keep_sent)
        index_dtype_for(1, index_dtype)  # validate early
        self.index_dtype = index_dtype

    def _take(self, ctx: StepContext, i: int, key: int, rank: int, acc: Tensor, idx: Tensor) -> Tensor:
        """Values of ``acc`` at ``idx``; the rest of ``acc`` becomes this worker's residual."""
        values = acc[idx]
        ctx.record_sparse(i, acc, idx, values, self.keep_sent)
        self._keep(key, rank, acc.index_fill_(0, idx.long(), 0))
        return values

    def _allgather_selected(self, accs: list[Tensor], comm: Communicator, key: int, ctx: StepContext,
                            select: Callable[[int, Tensor, int], Tensor], same_size: bool = True) -> list[Tensor]:
        """The shared body of the Allgather schemes: every worker packs its own selected (values, indices),
        all payloads are gathered, and each worker scatter-adds the N of them into a dense mean.
        ``select(rank, acc, k)`` picks the indices; ``same_size=False`` when counts differ per worker."""
        numel = accs[0].numel()
        k = ctx.k = self._k(numel)
        itype = index_dtype_for(numel, self.index_dtype)
        payloads = []
        for i, (rank, acc) in enumerate(zip(comm.local_workers, accs, strict=True)):
            with ctx.timed("compress", i):
                idx = select(rank, acc, k)
                values = self._take(ctx, i, key, rank, acc, idx)
                payloads.append(pack(values, idx.to(itype)))
        gathered = ctx.allgather(payloads, same_size=same_size)
        aggs = []
        for i, row in enumerate(gathered):
            with ctx.timed("decompress", i):
                aggs.append(_scatter_mean(accs[i], [unpack(b, accs[i].dtype, itype) for b in row], comm.world_size))
        return aggs


def topk_indices(acc: Tensor, k: int) -> Tensor:
    """Indices of the k largest |acc| (unsorted; ties broken by torch.topk)."""
    return torch.topk(acc.abs(), k, sorted=False).indices


class TopkAllgather(_Sparse):
    """Top-k over Allgather: each worker sends its own k (value, index) pairs; all scatter-add N payloads."""

    name = "topk-ag"

    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        return self._allgather_selected(accs, comm, key, ctx, lambda rank, acc, k: topk_indices(acc, k))


class TopkAllreduce(_Sparse):
    """Allreduce-compatible Top-k (Tyagi & Swany 2023, Algorithm 1): one owner's indices for everyone.

    ``owner="star"``: rank ``step mod N`` (no extra message). ``owner="var"``: the rank with the largest
    error-fed gradient norm (an allgather of one fp32 per rank; ties go to the lowest rank).
    """

    name = "topk-ar"

    def __init__(self, ratio: float | None = None, *, owner: str = "star", index_dtype: str | None = None,
                 error_feedback: bool = True, gain_every: int | None = None, keep_sent: bool = False) -> None:
        super().__init__(ratio, index_dtype=index_dtype, error_feedback=error_feedback, gain_every=gain_every,
                         keep_sent=keep_sent)
        if owner not in ("star", "var"):
            raise InputError("owner", owner, "star or var")
        self.owner = owner

    def _choose_owner(self, accs: list[Tensor], comm: Communicator, step: int, ctx: StepContext) -> int:
        if self.owner == "star":
            return step % comm.world_size
        norms = []
        for i, acc in enumerate(accs):
            with ctx.timed("compress", i):
                norms.append(torch.linalg.vector_norm(acc, dtype=torch.float32).reshape(1))
        row = ctx.allgather(norms)[0]
        return int(torch.cat(row).argmax())  # argmax returns the first maximum: the lowest rank wins ties

    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        numel = accs[0].numel()
        k = ctx.k = self._k(numel)
        itype = index_dtype_for(numel, self.index_dtype)
        owner = ctx.owner = self._choose_owner(accs, comm, step, ctx)
        bufs = []
        for i, (rank, acc) in enumerate(zip(comm.local_workers, accs, strict=True)):
            with ctx.timed("compress", i):
                if rank == owner:
                    bufs.append(topk_indices(acc, k).to(itype))
                else:
                    bufs.append(torch.empty(k, dtype=itype, device=acc.device))
        indices = ctx.broadcast(bufs, owner)
        values = []
        for i, (rank, acc) in enumerate(zip(comm.local_workers, accs, strict=True)):
            with ctx.timed("compress", i):
                values.append(self._take(ctx, i, key, rank, acc, indices[i]))
        return _allreduce_at(ctx, accs, indices, values, comm.world_size)


class TopkAllreduceSketch(_Sparse):
    """Allreduce-compatible Top-k whose index set is *voted* by every worker (no owner, no broadcast).

    Each worker takes its own top-k and adds |value| of each into a score per block of ``block``
    consecutive elements (a bucketed sketch of ceil(n/B) fp32); the scores are allreduced and every
    worker picks the same ceil(k/B) best blocks (identical input, so identical choice), then allreduces
    its values there. The agreement is exact; the price is block granularity. ``block=1`` is the exact
    element-wise magnitude vote, whose score allreduce is as large as a dense one (4n bytes).
    """

    name = "topk-ar-sketch"

    def __init__(self, ratio: float | None = None, *, block: int = 64, error_feedback: bool = True,
                 gain_every: int | None = None, keep_sent: bool = False) -> None:
        super().__init__(ratio, error_feedback=error_feedback, gain_every=gain_every, keep_sent=keep_sent)
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise InputError("block", block, "an integer >= 1 (elements per sketch bucket)")
        self.block = block

    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        numel = accs[0].numel()
        k = ctx.k = self._k(numel)
        b = self.block
        n_blocks = -(-numel // b)
        pick = min(n_blocks, -(-k // b))
        scores = []
        for i, acc in enumerate(accs):
            with ctx.timed("compress", i):
                idx = topk_indices(acc, k)
                score = torch.zeros(n_blocks, dtype=torch.float32, device=acc.device)
                scores.append(score.index_add_(0, idx // b, acc[idx].abs().float()))
        summed = ctx.allreduce(scores, inplace=True)
        values, chosen = [], []
        for i, (rank, acc, score) in enumerate(zip(comm.local_workers, accs, summed, strict=True)):
            with ctx.timed("compress", i):
                blocks = torch.topk(score, pick, sorted=False).indices
                sel = (blocks.unsqueeze(1) * b + torch.arange(b, device=acc.device)).reshape(-1)
                sel = sel[sel < numel]
                chosen.append(sel)
                values.append(self._take(ctx, i, key, rank, acc, sel))
        return _allreduce_at(ctx, accs, chosen, values, comm.world_size)


def random_subset(numel: int, k: int, generator: torch.Generator, device: torch.device) -> Tensor:
    """k distinct uniformly random indices in [0, numel), without an O(numel) permutation when k << numel.

    Draw with replacement, deduplicate, keep a random k of the distinct draws: by symmetry every
    k-subset is equally likely. A full permutation (1 s for 11.7M on one CPU core) only when k >= n/4.
    """
    if k >= numel:
        return torch.arange(numel, device=device)
    if 4 * k >= numel:
        return torch.randperm(numel, generator=generator, device=device)[:k]
    draws = k + k // 4 + 16
    while True:
        distinct = torch.unique(torch.randint(numel, (draws,), generator=generator, device=device))
        if distinct.numel() >= k:
            keep = torch.randperm(distinct.numel(), generator=generator, device=device)[:k]
            return distinct[keep]
        draws *= 2


class RandomK(_Sparse):
    """Random-k with a shared seed: every worker draws the same indices from (seed, key, step), so the
    values can be allreduced with no index traffic. Needs one device type on every rank (CPU and CUDA
    generators produce different streams)."""

    name = "randomk"

    def __init__(self, ratio: float | None = None, *, seed: int = 0, error_feedback: bool = True,
                 gain_every: int | None = None, keep_sent: bool = False) -> None:
        super().__init__(ratio, error_feedback=error_feedback, gain_every=gain_every, keep_sent=keep_sent)
        self.seed = int(seed)

    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        numel = accs[0].numel()
        k = ctx.k = self._k(numel)
        chosen, values = [], []
        for i, (rank, acc) in enumerate(zip(comm.local_workers, accs, strict=True)):
            with ctx.timed("compress", i):
                gen = torch.Generator(device=acc.device).manual_seed(_seed(self.seed, key, step))
                idx = random_subset(numel, k, gen, acc.device)
                chosen.append(idx)
                values.append(self._take(ctx, i, key, rank, acc, idx))
        return _allreduce_at(ctx, accs, chosen, values, comm.world_size)


class Threshold(_Sparse):
    """DGC-style selection: a threshold from a random sample, then |acc| >= threshold.

    The threshold is the top-(ratio) value of ``sample_ratio * n`` (at least ``min_sample``) sampled
    |acc|; with ``second_pass`` an exact top-k among the selected trims the count to at most k. Counts
    differ per worker, so values + indices go over an allgather of lengths, padded to the longest.
    Fewer than ~100 sampled elements above the threshold make the count drift (0.9-1.6x k measured).
    """

    name = "threshold"

    def __init__(self, ratio: float | None = None, *, sample_ratio: float = 0.01, min_sample: int = 1000,
                 second_pass: bool = True, seed: int = 0, index_dtype: str | None = None, error_feedback: bool = True,
                 gain_every: int | None = None, keep_sent: bool = False) -> None:
        super().__init__(ratio, index_dtype=index_dtype, error_feedback=error_feedback, gain_every=gain_every,
                         keep_sent=keep_sent)
        if not (isinstance(sample_ratio, (int, float)) and 0 < sample_ratio <= 1):
            raise InputError("sample_ratio", sample_ratio, "a fraction in (0, 1]")
        if isinstance(min_sample, bool) or not isinstance(min_sample, int) or min_sample < 1:
            raise InputError("min_sample", min_sample, "an integer >= 1")
        self.sample_ratio = float(sample_ratio)
        self.min_sample = min_sample
        self.second_pass = bool(second_pass)
        self.seed = int(seed)

    def select(self, acc: Tensor, k: int, generator: torch.Generator) -> Tensor:
        """Indices of the elements at or above the sampled threshold (int64, increasing)."""
        numel = acc.numel()
        magnitude = acc.abs()
        size = min(numel, max(self.min_sample, math.ceil(numel * self.sample_ratio)))
        if size >= numel:
            sample = magnitude
        else:
            sample = magnitude[torch.randint(numel, (size,), generator=generator, device=acc.device)]
        top = max(1, math.ceil(size * k / numel))
        threshold = torch.topk(sample, top, sorted=False).values.min()
        idx = torch.nonzero(magnitude >= threshold).squeeze(1)
        if self.second_pass and idx.numel() > k:
            idx = idx[torch.topk(magnitude[idx], k, sorted=False).indices]
        return idx

    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        def select(rank: int, acc: Tensor, k: int) -> Tensor:
            gen = torch.Generator(device=acc.device).manual_seed(_seed(self.seed, rank, key, step))
            return self.select(acc, k, gen)

        return self._allgather_selected(accs, comm, key, ctx, select, same_size=False)


# --- registry -------------------------------------------------------------------------------------------

COMPRESSORS: dict[str, type[Compressor]] = {
    cls.name: cls
    for cls in (Dense, FP16, BF16, TopkAllgather, TopkAllreduce, TopkAllreduceSketch, RandomK, Threshold, PowerSGD)
}


def options_of(name: str) -> list[str]:
    """Keyword options ``make_compressor`` accepts for scheme ``name``."""
    params = inspect.signature(COMPRESSORS[name].__init__).parameters
    return [p for p, spec in params.items() if spec.kind is inspect.Parameter.KEYWORD_ONLY]


def make_compressor(name: str, ratio: float | None = None, **options: Any) -> Compressor:
    """Build a scheme by name (see the module docstring for each one's payload).

    ``ratio`` is the fraction of elements kept (k = max(1, floor(n * ratio))) for topk-ag, topk-ar,
    topk-ar-sketch, randomk and threshold, and must be omitted for dense, fp16, bf16 and powersgd.
    Bad names, ratios and options raise :class:`~costmodel.errors.InputError` naming the field.
    """
    if name not in COMPRESSORS:
        raise InputError("strategy", name, "one of " + ", ".join(COMPRESSORS))
    allowed = options_of(name)
    for option, value in options.items():
        if option not in allowed:
            raise InputError("options", f"{option}={value!r}", f"options of {name}: " + ", ".join(allowed))
    return COMPRESSORS[name](ratio, **options)
