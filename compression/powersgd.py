"""PowerSGD on any :class:`~compression.comm.Communicator`, reusing torch's implementation.

torch's ``powerSGD_hook`` is written against a ``GradBucket`` and calls ``dist.all_reduce`` on a
process group, so N emulated workers in one process cannot call it. What is reused from
``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`` as is:

* ``PowerSGDState``: one per worker, as in DDP (hyper-parameters and their validation, the
  ``rng`` that seeds Q identically on every worker, ``error_dict`` / ``p_memory_dict`` /
  ``q_memory_dict`` keyed by bucket, ``iter``, the numel-before/after counters);
* ``_should_compress`` (which per-parameter matrices are worth compressing) and ``_orthogonalize``
  (Gram-Schmidt for rank <= 2 or 16-bit, QR otherwise).

What is re-written, line for line in the hook's order so that results match it: the orchestration of
Steps I-III (split, allreduce of the uncompressed tensors, P = MQ, allreduce P, orthogonalize, Q = M^T P,
allreduce Q, M ~ P Q^T, error = input - output) with the three ``dist.all_reduce`` calls replaced by
``Communicator.allreduce``. Adapted:

* the per-parameter views come from ``shapes`` (DDP's ``bucket.gradients()``); without ``shapes`` the
  flat gradient is zero-padded to a near-square matrix (the padding is never sent);
* ``state.iter`` advances after the exchange of bucket ``iter_key`` (torch: bucket 0, the last of a
  DDP iteration), instead of through ``bucket.is_last()``;
* the uncompressed allreduce is skipped when there is nothing uncompressed (torch sends an empty
  one); ``batch_tensors_with_same_shape`` is not supported (always False).

Before ``start_iter`` exchanges it is torch's vanilla allreduce (divide by N, then sum), without error
feedback. The DDP path (the colleague's real backend) calls torch's ``powerSGD_hook`` directly.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import (
    PowerSGDState,
    _orthogonalize,
    _should_compress,
)

from flexcomm.compression.base import Compressor, StepContext
from flexcomm.compression.comm import Communicator
from flexcomm.costmodel.errors import InputError


class PowerSGD(Compressor):
    """Rank-r PowerSGD with warm start and torch's error feedback (error = input - decompressed mean)."""

    name = "powersgd"

    def __init__(
        self,
        ratio: float | None = None,
        *,
        rank: int = 1,
        start_iter: int = 2,
        min_compression_rate: float = 2.0,
        warm_start: bool = True,
        epsilon: float = 0.0,
        seed: int = 0,
        shapes: Sequence[Sequence[int]] | None = None,
        iter_key: int = 0,
        error_feedback: bool = True,
        gain_every: int | None = None,
        keep_sent: bool = False,
    ) -> None:
        super().__init__(ratio, error_feedback=error_feedback, gain_every=gain_every, keep_sent=keep_sent)
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise InputError("rank", rank, "an integer >= 1 (matrix approximation rank)")
        if isinstance(start_iter, bool) or not isinstance(start_iter, int) or start_iter < 0:
            raise InputError("start_iter", start_iter, "an integer >= 0")
        if (error_feedback or warm_start) and start_iter <= 1:
            # torch's PowerSGDState refuses this too (DDP rebuilds its buckets after iteration 1)
            raise InputError("start_iter", start_iter, "> 1 when error_feedback or warm_start is on (torch's rule)")
        self.shapes = [tuple(int(d) for d in s) for s in shapes] if shapes is not None else None
        self.options = dict(matrix_approximation_rank=rank, start_powerSGD_iter=start_iter,
                            min_compression_rate=min_compression_rate, use_error_feedback=error_feedback,
                            warm_start=warm_start, orthogonalization_epsilon=epsilon, random_seed=seed)
        self.iter_key = iter_key
        self.states: dict[int, PowerSGDState] = {}

    def state(self, rank: int) -> PowerSGDState:
        """torch's state object of worker ``rank`` (created on first use, with identical seeds everywhere)."""
        if rank not in self.states:
            self.states[rank] = PowerSGDState(process_group=None, **self.options)
        return self.states[rank]

    def residual(self, rank: int, key: int = 0) -> Tensor | None:
        state = self.states.get(rank)
        return None if state is None else state.error_dict.get(key)

    def reset(self) -> None:
        super().reset()
        self.states.clear()

    def _layout(self, numel: int) -> list[tuple[int, ...]]:
        if self.shapes is None:
            rows = math.isqrt(numel - 1) + 1 if numel > 1 else 1
            return [(rows, -(-numel // rows))]
        total = sum(math.prod(s) for s in self.shapes)
        if total != numel:
            raise InputError("shapes", self.shapes, f"per-parameter shapes totalling the gradient's {numel} elements")
        return list(self.shapes)

    def _accumulate(self, grads: list[Tensor], comm: Communicator, key: int, ctx: StepContext) -> list[Tensor]:
        accs = []
        for i, (rank, g) in enumerate(zip(comm.local_workers, grads, strict=True)):
            state = self.state(rank)
            with ctx.timed("compress", i):
                if state.iter < state.start_powerSGD_iter:
                    accs.append(g)  # vanilla allreduce: no error feedback yet (as in the hook)
                elif state.use_error_feedback and key in state.error_dict:
                    accs.append(g + state.error_dict[key])
                else:
                    if state.use_error_feedback:
                        state.error_dict[key] = torch.zeros_like(g)
                    accs.append(g.clone())
        return accs

    def _advance(self, comm: Communicator, key: int) -> None:
        if key == self.iter_key:
            for rank in comm.local_workers:
                self.states[rank].iter += 1

    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        n_workers = comm.world_size
        numel = accs[0].numel()
        states = [self.state(rank) for rank in comm.local_workers]
        if states[0].iter < states[0].start_powerSGD_iter:
            ctx.k = numel
            ctx.sent_counts = [numel] * len(accs)
            ctx.extra["vanilla"] = 1.0
            bufs = []
            for i, acc in enumerate(accs):
                with ctx.timed("compress", i):
                    bufs.append(acc / n_workers)  # torch's _allreduce_fut divides first
            out = ctx.allreduce(bufs, inplace=True)
            self._advance(comm, key)
            return out

        layout = self._layout(numel)
        padded = math.prod(layout[0]) if self.shapes is None else numel
        work: list[dict] = []
        for i, (acc, state) in enumerate(zip(accs, states, strict=True)):
            with ctx.timed("compress", i):
                work.append(self._compress_ps(acc, state, key, layout, padded))
        ctx.k = work[0]["sent"]
        ctx.sent_counts = [w["sent"] for w in work]
        ctx.extra["effective_ratio"] = work[0]["sent"] / numel

        if work[0]["uncompressed"].numel():
            reduced = ctx.allreduce([w["uncompressed"] for w in work], inplace=True)
            for i, (w, mem) in enumerate(zip(work, reduced, strict=True)):
                with ctx.timed("decompress", i):
                    mem.div_(n_workers)
                    offset = 0
                    for tensor in w["uncompressed_tensors"]:
                        tensor.copy_(mem[offset: offset + tensor.numel()].view_as(tensor))
                        offset += tensor.numel()

        # Ps need no division by N: they are orthogonalized next.
        p_sums = ctx.allreduce([state.p_memory_dict[key] for state in states], inplace=True)
        for i, (w, state, p_sum) in enumerate(zip(work, states, p_sums, strict=True)):
            with ctx.timed("compress", i):
                state.p_memory_dict[key].copy_(p_sum)  # keep the views into the memory valid
                for p in w["ps"]:
                    _orthogonalize(p, state.orthogonalization_epsilon)
                for tensor, p, q in zip(w["matrices"], w["ps"], w["qs"], strict=True):
                    torch.bmm(tensor.transpose(1, 2), p, out=q)

        q_sums = ctx.allreduce([state.q_memory_dict[key] for state in states], inplace=True)
        aggs = []
        for i, (w, state, q_sum, acc) in enumerate(zip(work, states, q_sums, accs, strict=True)):
            with ctx.timed("decompress", i):
                state.q_memory_dict[key].copy_(q_sum).div_(n_workers)
                for p, q, tensor in zip(w["ps"], w["qs"], w["matrices"], strict=True):
                    torch.bmm(p, q.transpose(1, 2), out=tensor)
                out = w["buffer"][:numel]
                if state.use_error_feedback:
                    state.error_dict[key] = acc - out
                if not state.warm_start:
                    state.p_memory_dict.clear()
                    state.q_memory_dict.clear()
                aggs.append(out)
        self._advance(comm, key)
        return aggs

    def _compress_ps(
        self, acc: Tensor, state: PowerSGDState, key: int, layout: list[tuple[int, ...]], padded: int
    ) -> dict:
        """Steps I-III of torch's hook up to P = M Q, on this worker's copy of the error-fed gradient."""
        device, dtype = acc.device, acc.dtype
        buffer = torch.zeros(padded, device=device, dtype=dtype)
        buffer[: acc.numel()] = acc
        tensors, offset = [], 0
        for shape in layout:
            size = math.prod(shape)
            tensors.append(buffer[offset: offset + size].view(shape))
            offset += size

        # Step I: which per-parameter matrices are worth compressing (torch's own rule).
        to_compress, uncompressed = [], []
        total_ps = total_qs = 0
        for tensor in tensors:
            matrix = tensor.view(tensor.shape[0], -1)
            n, m = matrix.shape
            rank = min(n, m, state.matrix_approximation_rank)
            worth, before, after = _should_compress(n, m, rank, state.min_compression_rate)
            state.total_numel_before_compression += before
            if worth:
                to_compress.append(matrix)
                total_ps += n * rank
                total_qs += m * rank
                state.total_numel_after_compression += after
            else:
                uncompressed.append(tensor)
                state.total_numel_after_compression += before

        # Step II: the uncompressed tensors travel as one contiguous allreduce.
        memory = (torch.cat([t.reshape(-1) for t in uncompressed]) if uncompressed
                  else torch.tensor([], device=device, dtype=dtype))

        # Step III: P and Q memories, warm-started when possible.
        need_randomize_qs = not state.warm_start or key not in state.p_memory_dict
        if need_randomize_qs:
            state.p_memory_dict[key] = torch.empty(total_ps, device=device, dtype=dtype)
            state.q_memory_dict[key] = torch.empty(total_qs, device=device, dtype=dtype)
        by_shape: dict[torch.Size, list[Tensor]] = defaultdict(list)
        for matrix in to_compress:
            by_shape[matrix.shape].append(matrix)
        matrices, ps, qs = [], [], []
        p_idx = q_idx = 0
        for group in by_shape.values():
            for matrix in group:
                tensor = matrix.unsqueeze(0)
                _, n, m = tensor.shape
                rank = min(n, m, state.matrix_approximation_rank)
                matrices.append(tensor)
                ps.append(state.p_memory_dict[key][p_idx: p_idx + n * rank].view(1, n, rank))
                qs.append(state.q_memory_dict[key][q_idx: q_idx + m * rank].view(1, m, rank))
                p_idx += n * rank
                q_idx += m * rank
        if not need_randomize_qs:
            for q in qs:
                _orthogonalize(q, state.orthogonalization_epsilon)
        else:
            with torch.random.fork_rng(devices=[]):
                # the same seed on every worker, different at every step (torch's comment and code)
                torch.manual_seed(state.rng.randint(1_000_000_000))
                for q in qs:
                    q.copy_(torch.randn(*q.shape, device="cpu", dtype=dtype))
                    _orthogonalize(q, state.orthogonalization_epsilon)
        for tensor, q, p in zip(matrices, qs, ps, strict=True):
            torch.bmm(tensor, q, out=p)
        return {
            "buffer": buffer, "matrices": matrices, "ps": ps, "qs": qs, "uncompressed": memory,
            "uncompressed_tensors": uncompressed, "sent": memory.numel() + total_ps + total_qs,
        }
