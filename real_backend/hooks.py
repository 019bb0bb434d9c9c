"""DDP communication hooks for every compressor in :mod:`compression`, on a real process group.

One generic hook, :func:`compression_hook`, runs **any** :class:`compression.Compressor` on this rank's
bucket through a :class:`compression.TorchDistCommunicator` (one local worker = this rank, state keyed by
``bucket.index()``): the very classes the emulation runs, so error feedback, payloads and records are
the same code on both paths. :func:`register` builds the state for a strategy name and registers it:

===================  ===========================================================================
strategy             what runs in the hook
===================  ===========================================================================
builtin              no hook: DDP's own bucketed allreduce (overlapped with backward), the reference
dense                ``Dense``: allreduce, divide by N
fp16 / bf16          ``Cast``: allreduce of the 16-bit cast of grad/N, with error feedback
topk-ag              ``TopkAllgather``: allgather of packed values + int32 indices, scatter-add
topk-ar              ``TopkAllreduce(owner="star")``: broadcast of the owner's indices, allreduce values
topk-ar-var          ``TopkAllreduce(owner="var")``: + allgather of one norm per rank to elect the owner
topk-ar-sketch       ``TopkAllreduceSketch``: allreduce of block scores, then of the agreed blocks' values
randomk / threshold  ``RandomK`` / ``Threshold`` (sampled threshold, ragged allgather)
powersgd             **torch's own** ``powerSGD_hook`` (``PowerSGDState``, start_powerSGD_iter >= 2), timed
flexible             ``FlexibleCompressor``: per exchange, topk-ag or topk-ar by predicted time under an
                     online (alpha, beta) estimate fed with the measured (perf_counter, blocking) time of
                     every collective of every bucket exchange, averaged over ranks
moo                  ``flexible`` + ``compression.moo.RatioController``: the ratio re-chosen online
                     (NSGA-II front of predicted step time vs measured compression gain)
===================  ===========================================================================

Facts this module is built on (measured with torch 2.13, gloo, CPU): a hook's return annotation must be
exactly ``torch.futures.Future[torch.Tensor]`` (so this module does not use postponed annotations); at
ratio 1.0 the Top-k hooks reproduce plain DDP's losses bitwise with 2 ranks (tested).

**Overlap.** A hook returns its future at once: the exchange runs on the state's ordered communication
thread (:mod:`real_backend.comm_thread`), bucket after bucket in DDP's order, with ``async_op=True``
collectives waited for there, so backward keeps computing while earlier buckets communicate, as with DDP's
builtin allreduce. ``overlap=False`` runs each exchange inside the hook instead (blocking, the old way).
``dense`` skips the thread: one collective needs no ordering of its own, so :func:`chained_dense_hook`
allreduces the bucket in place with ``async_op=True`` and divides by N in the future's callback, as torch's
``allreduce_hook`` does (``Dense``'s arithmetic: sum, then / N; bitwise the same result, no copy, no
thread hand-off: on 2 cores each cost about a millisecond per bucket). Drop the DDP model before
``destroy_process_group`` (``del ddp``; :func:`real_backend.dist.shutdown` collects garbage first): futures
chained on gloo's work keep Python-owned tensors, and freeing them at interpreter exit aborts the process
(about 1 run in 5 here; pytorch/pytorch#179291).

**Rank agreement.** Adaptive strategies decide from measured times; each rank's clock differs, and two
ranks choosing different schemes or ratios would issue mismatched collectives and hang. The
``FlexibleCompressor`` averages its measured seconds over ranks (one small allreduce per iteration,
started after the last bucket and folded after the next iteration: :data:`AGREEMENTS_IN_FLIGHT`); MOO's
gains are averaged the same way and a new ratio is broadcast from rank 0: every rank then holds bitwise
the same estimate and takes the same decision.

**Off the critical path.** What the adaptive machinery does beyond the exchange it chose is logged per
exchange (``decide_s``, ``agree_s``, ``probe_s``, ``estimate_s``, ``moo_s``; their sum ``mechanism_s``) and
kept small: after an iteration's last result is handed back, the communication thread runs its
housekeeping (:func:`_housekeeping`: fold the previous agreement, refit the estimate, MOO's folding,
pricing and optimising; ``housekeeping_s``) while the trainer steps the optimizer and runs the next
forward. Only collectives (issued in order, never waited for there) and the per-bucket decision stay on
the path. Latency probes and MOO's gain probes and re-optimisations are taken only when they are worth
their price (:meth:`FlexibleCompressor.should_probe`, :meth:`RatioController.worth`).

**Log.** Every exchange appends one row to a CSV on rank 0 (:data:`EXCHANGE_COLUMNS`: step, bucket,
scheme chosen, ratio, bytes, the collectives as ``collective/algorithm/bytes`` for the cost model and the
simulator, predicted vs measured seconds, the estimate and per-scheme predictions of the adaptive
strategies), flushed at once, so a crash loses nothing already logged.
"""

import math
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import (
    PowerSGDState,
    _should_compress,
    powerSGD_hook,
)

from flexcomm.compression import Compressor, TorchDistCommunicator, make_compressor
from flexcomm.compression.comm import CollectiveRecord, PendingAllreduce, dtype_name
from flexcomm.compression.flexible import FlexibleCompressor
from flexcomm.compression.moo import MOOConfig, RatioController
from flexcomm.compression.network_estimate import timed_records
from flexcomm.costmodel.atomic import AppendingCsv
from flexcomm.costmodel.collectives import predict
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend.bucket_layout import BucketLayouts
from flexcomm.real_backend.comm_thread import CommThread
from flexcomm.real_backend.options import HOOK_RATIO_STRATEGIES as RATIO_STRATEGIES
from flexcomm.real_backend.options import HOOK_STRATEGIES as STRATEGIES

#: Prior link of the online estimate when no cost model is given (it is refined from the first steps).
DEFAULT_PRIOR_LATENCY_S = 100e-6
DEFAULT_PRIOR_BANDWIDTH_BPS = 125e6  # 1 Gbit/s

#: Timing agreements left in flight when the hooks fold the others (once per iteration, off the critical
#: path): the one just started runs behind the next iteration; measured on a 2-rank testbed with a 50 ms
#: one-way delay, a blocking agreement after every bucket added one round trip to each.
AGREEMENTS_IN_FLIGHT = 1

EXCHANGE_COLUMNS = (
    "step", "bucket", "numel", "strategy", "scheme", "ratio", "k", "payload_bytes", "control_bytes",
    "collectives", "predicted_comm_s", "measured_comm_s", "hook_s", "compress_s", "decompress_s", "local_gain",
    "est_alpha_s", "est_beta_s_per_byte", "pred_dense_s", "pred_topk-ag_s", "pred_topk-ar_s", "flex_pred_comm_s",
    "switched", "ratio_event", "decide_s", "agree_s", "probe_s", "estimate_s", "moo_s", "mechanism_s",
    "housekeeping_s",
)
#: The adaptive machinery's parts logged per exchange (``<part>_s``; their sum is ``mechanism_s``).
MECHANISM_COLUMNS = ("decide", "agree", "probe", "estimate", "moo")


# --- an append-and-flush CSV ---------------------------------------------------------------------------


CsvLog = AppendingCsv  # per-exchange and per-step logs: appended and flushed as they are taken


# --- records: what was sent, as the cost model and the simulator read it ------------------------------


def format_records(records: Sequence[CollectiveRecord]) -> str:
    """``collective/algorithm/bytes`` joined by ``;`` (empty for none)."""
    return ";".join(f"{r.collective}/{r.algorithm}/{int(r.nbytes)}" for r in records)


def parse_records(text: str) -> list[tuple[str, str, int]]:
    """Inverse of :func:`format_records`."""
    out = []
    for part in str(text or "").split(";"):
        if part.strip():
            collective, algorithm, nbytes = part.strip().split("/")
            out.append((collective, algorithm, int(float(nbytes))))
    return out


def price(model: CostModel, collective: str, algorithm: str, nbytes: float, world_size: int) -> float:
    """Seconds of one call by the shared cost model (calibrated where its profile covers the call)."""
    return float(model.collective(collective, algorithm, float(nbytes), world_size).total)


def predict_records(model: CostModel | None, records: Sequence[tuple[str, str, int]], world_size: int) -> float:
    """Seconds the cost model gives a sequence of (collective, algorithm, bytes) calls (NaN without one)."""
    if model is None:
        return math.nan
    return float(sum(price(model, c, a, n, world_size) for c, a, n in records))


def nominal_records_seconds(records: Sequence[tuple[str, str, int]], world_size: int, rate_Bps: float) -> float:
    """The naive baseline's seconds for a sequence of (collective, algorithm, bytes) calls: each call's bytes at
    ``rate_Bps`` by its formula, no latency (what one works out by hand from a link's nominal rate)."""
    return float(sum(predict(c, a, n, world_size, 0.0, rate_Bps).total for c, a, n in records))


def powersgd_records(bucket: dist.GradBucket, state: PowerSGDState, iteration: int,
                     algorithm: str = "ring") -> list[CollectiveRecord]:
    """The allreduces torch's ``powerSGD_hook`` issues for ``bucket`` at ``iteration`` (sizes only).

    Before ``start_powerSGD_iter``: one allreduce of the bucket. After: the uncompressed tensors (1-D ones
    and matrices torch's ``_should_compress`` refuses; sent even when empty), then P, then Q.
    """
    buffer = bucket.buffer()
    size = buffer.element_size()
    if iteration < state.start_powerSGD_iter:
        return [CollectiveRecord("allreduce", algorithm, buffer.numel() * size, str(buffer.dtype))]
    uncompressed = total_p = total_q = 0
    for grad in bucket.gradients():
        if grad.dim() <= 1:
            uncompressed += grad.numel()
            continue
        n, m = grad.shape[0], grad.numel() // grad.shape[0]
        rank = min(n, m, state.matrix_approximation_rank)
        worth, _, _ = _should_compress(n, m, rank, state.min_compression_rate)
        if worth:
            total_p += n * rank
            total_q += m * rank
        else:
            uncompressed += grad.numel()
    dtype = str(buffer.dtype)
    return [CollectiveRecord("allreduce", algorithm, uncompressed * size, dtype),
            CollectiveRecord("allreduce", algorithm, total_p * size, dtype),
            CollectiveRecord("allreduce", algorithm, total_q * size, dtype)]


# --- the state ---------------------------------------------------------------------------------------


@dataclass
class StepSummary:
    """What the hook did during one DDP iteration (summed over its buckets)."""

    step: int
    buckets: int = 0
    payload_bytes: int = 0
    control_bytes: int = 0
    predicted_comm_s: float = 0.0
    measured_comm_s: float = 0.0
    hook_s: float = 0.0
    codec_s: float = 0.0
    mechanism_s: float = 0.0  #: the adaptive machinery's own seconds on the critical path (:data:`MECHANISM_COLUMNS`)
    housekeeping_s: float = 0.0  #: its seconds off the path (folding, refitting, optimising) before this step
    schemes: list[str] = field(default_factory=list)
    ratio: float | None = None
    records: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def scheme(self) -> str:
        """The scheme(s) used, ``+``-joined when buckets differed."""
        return "+".join(dict.fromkeys(self.schemes))


@dataclass
class MOOState:
    """The ratio controller and the probe in progress (gains measured on the live gradients)."""

    controller: RatioController
    probing: bool = True
    reason: str | None = "initial"
    topk_sq: np.ndarray | None = None
    total_sq: float = 0.0
    bucket_numels: dict[int, int] = field(default_factory=dict)
    gain_sum: float = 0.0
    gain_weight: float = 0.0
    last_event: str = ""
    step_gain: float = math.nan  #: the gain the drift test saw this iteration (the previous one's, agreed)
    probe_cost_s: float = 0.0  #: the last gain probe's seconds (mean over ranks): what a new one would cost
    #: gain agreements in flight (started after each iteration, folded after the next one)
    gain_pending: list[PendingAllreduce] = field(default_factory=list)
    #: a probe's gains (and its cost) being agreed, folded by the next housekeeping
    probe_pending: PendingAllreduce | None = None
    #: the ratio the last housekeeping chose (every rank alike), broadcast from rank 0 after the next iteration
    proposed: tuple[float, str] | None = None
    #: the broadcast in flight and the event it completes, applied by the housekeeping after it
    ratio_pending: tuple[PendingAllreduce, str] | None = None
    #: this rank's seconds of gain probing in the iteration in progress (agreed with the gains)
    probe_seconds: float = 0.0


@dataclass
class HookState:
    """Everything a hook needs: the compressor, this rank's communicator, the cost model and the log."""

    strategy: str
    compressor: Compressor | None
    comm: TorchDistCommunicator | None
    cost_model: CostModel | None = None
    log: CsvLog | None = None
    rank: int = 0
    world_size: int = 1
    group: Any = None
    powersgd: PowerSGDState | None = None
    moo: MOOState | None = None
    iteration: int = 0
    current: StepSummary = field(default_factory=lambda: StepSummary(0))
    finished: list[StepSummary] = field(default_factory=list)
    engine: CommThread | None = None  #: the ordered communication thread (None: exchanges block the hook)
    chained: "ChainedIteration | None" = None  #: dense's in-flight buckets (chained_dense_hook)
    housekeeping_s: float = 0.0  #: off-path seconds since the last logged exchange (taken by the next one)
    #: each bucket's parameter order, so the residuals follow their parameters when DDP rebuilds its buckets
    layouts: BucketLayouts = field(default_factory=BucketLayouts)

    def take_steps(self) -> list[StepSummary]:
        """Summaries of the iterations finished since the last call (the trainer calls it after a step)."""
        out, self.finished = self.finished, []
        return out

    @property
    def ratio(self) -> float | None:
        return getattr(self.compressor, "ratio", None) if self.compressor is not None else None

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        if isinstance(self.compressor, FlexibleCompressor):
            self.compressor.finish()  # agreements still in flight, before the group can go away
        if self.moo is not None:
            for pending in [*self.moo.gain_pending, self.moo.probe_pending,
                            self.moo.ratio_pending[0] if self.moo.ratio_pending else None]:
                if pending is not None:
                    pending.wait()
            self.moo.gain_pending, self.moo.probe_pending, self.moo.ratio_pending = [], None, None
        if self.log is not None:
            self.log.close()

    # --- bookkeeping after each exchange ---------------------------------------------------------
    def record(self, key: int, numel: int, scheme: str, ratio: float | None, k: int | None,
               records: Sequence[CollectiveRecord], hook_s: float, measured_comm_s: float, codec: tuple[float, float],
               local_gain: float | None, extra: Mapping[str, Any] | None = None,
               mechanism: Mapping[str, float] | None = None) -> None:
        payload = sum(r.nbytes for r in records if r.purpose == "payload")
        control = sum(r.nbytes for r in records if r.purpose != "payload")
        triples = [(r.collective, r.algorithm, int(r.nbytes)) for r in records]
        predicted = predict_records(self.cost_model, triples, self.world_size)
        step = self.current
        step.buckets += 1
        step.payload_bytes += payload
        step.control_bytes += control
        step.predicted_comm_s += predicted
        step.measured_comm_s += measured_comm_s
        step.hook_s += hook_s
        step.codec_s += codec[0] + codec[1]
        mechanism_row = {}
        if mechanism is not None:
            mechanism_row = {f"{part}_s": mechanism.get(part, 0.0) for part in MECHANISM_COLUMNS}
            mechanism_row["mechanism_s"] = sum(mechanism_row.values())
            mechanism_row["housekeeping_s"] = self.housekeeping_s
            step.mechanism_s += mechanism_row["mechanism_s"]
            step.housekeeping_s += self.housekeeping_s
            self.housekeeping_s = 0.0
        step.schemes.append(scheme)
        step.ratio = ratio
        step.records.extend(triples)
        if self.log is not None:
            row = {
                "step": self.iteration, "bucket": key, "numel": numel, "strategy": self.strategy, "scheme": scheme,
                "ratio": ratio, "k": k, "payload_bytes": payload, "control_bytes": control,
                "collectives": format_records(records), "predicted_comm_s": predicted,
                "measured_comm_s": measured_comm_s, "hook_s": hook_s, "compress_s": codec[0],
                "decompress_s": codec[1], "local_gain": local_gain, **(extra or {}), **mechanism_row,
            }
            self.log.write(row)

    def end_iteration(self) -> None:
        self.finished.append(self.current)
        self.iteration += 1
        self.current = StepSummary(self.iteration)


# --- hooks -------------------------------------------------------------------------------------------


def _future(tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    fut: torch.futures.Future[torch.Tensor] = (
        torch.futures.Future(devices=[tensor.device]) if tensor.is_cuda else torch.futures.Future()
    )
    fut.set_result(tensor)
    return fut


def _sync(tensor: torch.Tensor) -> None:
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)


def _decision_extra(comp: Compressor) -> dict[str, Any]:
    if not isinstance(comp, FlexibleCompressor) or not comp.decisions:
        return {}
    d = comp.decisions[-1]
    return {"est_alpha_s": d.get("alpha_s"), "est_beta_s_per_byte": d.get("beta_s_per_byte"),
            "pred_dense_s": d.get("pred_dense_s"), "pred_topk-ag_s": d.get("pred_topk-ag_s"),
            "pred_topk-ar_s": d.get("pred_topk-ar_s"), "flex_pred_comm_s": d.get("pred_comm_s"),
            "switched": d.get("switched")}


def compression_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Exchange this bucket with ``state.compressor`` on ``state.comm`` (key = bucket index); see the module.

    The exchange (and MOO's gain probe) runs on the state's communication thread, so this returns before
    any byte is sent; after the last bucket, the adaptive strategies' housekeeping follows it there."""
    assert state.compressor is not None and state.comm is not None
    buffer = bucket.buffer()
    key = bucket.index()
    last = bucket.is_last()
    layout = state.layouts.layout_of(bucket.parameters())
    after = (lambda: _housekeeping(state)) if last and isinstance(state.compressor, FlexibleCompressor) else None

    def exchange() -> torch.Tensor:
        # a lossy compressor sees the bucket in parameter order (what it keeps must not depend on DDP's layout);
        # a lossless one (dense) is order-blind, so its bucket is not copied
        ordered, perm = state.layouts.canonical(layout) if state.compressor.lossy else (layout, None)
        state.layouts.align(state.compressor.residuals, key, ordered)
        if perm is None:
            return _exchange_bucket(state, buffer, key, last)
        index = perm.to(buffer.device)
        aggregate = _exchange_bucket(state, buffer[index], key, last)
        result = torch.empty_like(buffer)
        result[index] = aggregate
        return result

    if state.engine is not None:
        return state.engine.submit(exchange, buffer.device, after=after)
    result = exchange()
    if after is not None:
        after()
    return _future(result)


def _exchange_bucket(state: HookState, buffer: torch.Tensor, key: int, last: bool) -> torch.Tensor:
    """One bucket's exchange, its log row, and the iteration's end after the last bucket.

    The MOO gain probe runs here, on the communication thread, rather than in the hook: whether this
    iteration probes is decided by the housekeeping after the previous one, which runs on this thread
    too, so every bucket of an iteration (and every rank) sees the same decision."""
    assert state.compressor is not None and state.comm is not None
    moo_s = 0.0
    if state.moo is not None and state.moo.probing:
        started = time.perf_counter()
        _moo_probe_bucket(state, buffer, key)
        moo_s = time.perf_counter() - started
        state.moo.probe_seconds += moo_s
    start = time.perf_counter()
    result = state.compressor.exchange([buffer], state.comm, key=key)
    aggregate = result.aggregates[0]
    _sync(aggregate)
    hook_s = time.perf_counter() - start
    stats = result.stats
    records = timed_records(stats)
    extra = _decision_extra(state.compressor)
    if state.moo is not None:
        extra["ratio_event"] = state.moo.last_event
        state.moo.last_event = ""
        state.moo.bucket_numels[key] = stats.numel
        if stats.local_gain is not None and math.isfinite(stats.local_gain):
            state.moo.gain_sum += stats.local_gain * stats.numel
            state.moo.gain_weight += stats.numel
    flexible = isinstance(state.compressor, FlexibleCompressor)
    if last:
        if flexible and state.compressor.agree_every == 0:
            state.compressor.agree(state.comm, buffer.device)  # one agreement per iteration, in flight
        if state.moo is not None:
            started = time.perf_counter()
            _moo_end_iteration(state)
            moo_s += time.perf_counter() - started
    mechanism = {**state.compressor.mechanism.take(), "moo": moo_s} if flexible else None
    state.record(key, stats.numel, stats.scheme, stats.ratio, stats.k, records, hook_s,
                 sum(r.seconds for r in records), (stats.compress_time_s, stats.decompress_time_s),
                 stats.local_gain, extra, mechanism)
    if last:
        state.end_iteration()
    return aggregate if aggregate.dtype == buffer.dtype else aggregate.to(buffer.dtype)


@dataclass
class ChainedIteration:
    """Buckets of the iteration in flight on :func:`chained_dense_hook`: gloo may finish them out of order on
    its worker threads, so the iteration ends when the last bucket is issued and none is still pending."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: int = 0
    last_issued: bool = False


def chained_dense_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """``dense``, overlapping: the bucket allreduced in place, divided by N and logged in the callback."""
    assert state.comm is not None and state.chained is not None
    buffer, key, chained = bucket.buffer(), bucket.index(), state.chained
    with chained.lock:
        chained.pending += 1
        chained.last_issued = bucket.is_last()
    start = time.perf_counter()
    future = dist.all_reduce(buffer, group=state.group, async_op=True).get_future()

    def done(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        total = fut.value()[0].div_(state.world_size)
        _sync(total)
        seconds = time.perf_counter() - start
        record = CollectiveRecord("allreduce", state.comm.algorithms["allreduce"],
                                  buffer.numel() * buffer.element_size(), dtype_name(buffer.dtype), "payload", seconds)
        with chained.lock:
            state.record(key, buffer.numel(), "dense", None, buffer.numel(), [record], seconds, seconds, (0.0, 0.0),
                         1.0, {})
            chained.pending -= 1
            if chained.last_issued and chained.pending == 0:
                chained.last_issued = False
                state.end_iteration()
        return total

    return future.then(done)


def timed_powersgd_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's ``powerSGD_hook`` itself (on the communication thread), timed, its allreduces logged by size."""
    assert state.powersgd is not None

    def run() -> torch.Tensor:
        assert state.powersgd is not None
        iteration = state.powersgd.iter
        records = powersgd_records(bucket, state.powersgd, iteration)
        start = time.perf_counter()
        tensor = powerSGD_hook(state.powersgd, bucket).wait()
        _sync(tensor)
        hook_s = time.perf_counter() - start
        scheme = "powersgd" if iteration >= state.powersgd.start_powerSGD_iter else "powersgd-warmup-allreduce"
        # torch's hook does not expose per-collective times: the whole hook counts as communication
        state.record(bucket.index(), bucket.buffer().numel(), scheme, None, None, records, hook_s, hook_s,
                     (0.0, 0.0), None, {})
        if bucket.is_last():
            state.end_iteration()
        return tensor

    if state.engine is not None:
        return state.engine.submit(run, bucket.buffer().device)
    return _future(run())


# --- MOO: the ratio controller online ----------------------------------------------------------------


def _moo_probe_bucket(state: HookState, buffer: torch.Tensor, key: int) -> None:
    """Energy kept by Top-k at each candidate ratio of this rank's error-fed gradient (before the exchange).

    The compression gain the paper's code computes (``local_gain``: ||top-k(acc)||^2 / ||acc||^2) needs no
    communication; one sorted top-k at the largest candidate gives every candidate at once.
    """
    moo = state.moo
    assert moo is not None and state.compressor is not None
    residual = state.compressor.residual(state.rank, key)
    acc = buffer if residual is None or residual.shape != buffer.shape else buffer + residual
    candidates = moo.controller.config.candidates
    n = acc.numel()
    ks = [max(1, int(math.floor(n * c))) for c in candidates]
    top = torch.topk(acc.detach().abs().float(), max(ks), sorted=True).values
    cumulative = top.square().cumsum(0)
    kept = np.array([float(cumulative[k - 1]) for k in ks])
    moo.topk_sq = kept if moo.topk_sq is None else moo.topk_sq + kept
    moo.total_sq += float(acc.detach().float().square().sum())


def moo_time_fn(comp: FlexibleCompressor, comm: Any, numels: Sequence[int],
                world_size: int) -> Callable[[np.ndarray], np.ndarray]:
    """Predicted communication seconds of one iteration at ratio c: every bucket by its fastest sparse scheme
    under the compressor's current estimate (what MOO trades against the compression gain)."""
    predictor = comp.predictor(comm)
    schemes = tuple(s for s in comp.candidates if s != "dense") or ("topk-ag",)

    def time_fn(c: np.ndarray) -> np.ndarray:
        c = np.asarray(c, dtype=float)
        return sum((predictor.best_sparse_seconds(n, c, world_size, schemes)[0] for n in numels),
                   np.zeros_like(c))

    return time_fn


def _moo_time_fn(state: HookState) -> Callable[[np.ndarray], np.ndarray]:
    comp = state.compressor
    assert isinstance(comp, FlexibleCompressor) and state.comm is not None and state.moo is not None
    return moo_time_fn(comp, state.comm, list(state.moo.bucket_numels.values()), state.world_size)


def _moo_end_iteration(state: HookState) -> None:
    """After the last bucket, in the collectives' order (every rank alike): start what must be agreed.

    Nothing here waits: the new ratio chosen by the last housekeeping is broadcast from rank 0, a finished
    probe's gains (with its cost) or the step's measured gain are averaged over ranks, all in flight;
    :func:`_moo_housekeeping` folds them after the iteration, off the critical path."""
    moo = state.moo
    assert moo is not None
    if moo.proposed is not None:
        ratio, event = moo.proposed
        moo.proposed = None
        tensor = torch.tensor([ratio], dtype=torch.float64, device=_device_of(state))
        work = dist.broadcast(tensor, src=dist.get_global_rank(state.group, 0) if state.group is not None else 0,
                              group=state.group, async_op=True)
        moo.ratio_pending = (PendingAllreduce(lambda: (work.wait(), tensor)[1]), event)
    if moo.probing and moo.topk_sq is not None:
        moo.probe_pending = comm_allreduce_async(state, [*moo.topk_sq.tolist(), moo.total_sq, moo.probe_seconds])
        moo.topk_sq, moo.total_sq, moo.probe_seconds, moo.probing = None, 0.0, 0.0, False
        return
    # the step's measured gain (numel-weighted over buckets), agreed over ranks, feeds the drift test: one
    # allreduce every iteration (so every rank issues the same collectives whatever its own numbers are)
    moo.gain_pending.append(comm_allreduce_async(state, [moo.gain_sum, moo.gain_weight]))
    moo.gain_sum = moo.gain_weight = 0.0


def _moo_housekeeping(state: HookState) -> None:
    """After the iteration's result is handed back: apply a broadcast ratio, fold agreed gains, and decide
    (probe, re-optimise, or neither: :meth:`RatioController.worth` prices each) from agreed inputs only."""
    moo = state.moo
    comp = state.compressor
    assert moo is not None and isinstance(comp, FlexibleCompressor)
    step = state.iteration - 1  # the iteration just finished
    if moo.ratio_pending is not None:
        pending, event = moo.ratio_pending
        moo.ratio_pending = None
        comp.set_ratio(float(pending.wait().item()))
        moo.last_event = event
    time_fn = _moo_time_fn(state)
    if moo.probe_pending is not None:
        totals = moo.probe_pending.wait().tolist()
        moo.probe_pending = None
        moo.probe_cost_s = totals[-1]
        total = totals[-2]
        gains = [t / total if total > 0 else 1.0 for t in totals[:-2]]
        moo.controller.fit_gains(step, moo.controller.config.candidates, gains)
        moo.controller.probes[-1]["probe_cost_s"] = moo.probe_cost_s  # moo_probes.csv: what the replay prices
        _moo_propose(state, step, moo.reason or "initial", time_fn)
        return
    moo.step_gain = math.nan
    while len(moo.gain_pending) > 1:  # the newest stays in flight behind the next iteration
        gain_sum, weight = moo.gain_pending.pop(0).wait().tolist()
        moo.step_gain = gain_sum / weight if weight > 0 else math.nan
        if weight > 0:
            moo.controller.observe_gain(moo.step_gain)
    reason = moo.controller.due(step, comp.estimator)
    if reason is None:
        return
    if not moo.controller.worth(reason, time_fn, moo.probe_cost_s):
        moo.controller.skip(step, reason, comp.estimator)
        moo.last_event = f"{reason} not worth it"
        return
    if moo.controller.needs_probe(reason):
        moo.probing, moo.reason = True, reason
    else:
        _moo_propose(state, step, reason, time_fn)


def _moo_propose(state: HookState, step: int, reason: str, time_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Optimise; the ratio is broadcast from rank 0 after the next iteration and used from the one after."""
    moo = state.moo
    comp = state.compressor
    assert moo is not None and isinstance(comp, FlexibleCompressor)
    front = moo.controller.optimize(step, reason, time_fn, estimator=comp.estimator)
    moo.proposed = (front.ratio, f"{reason}->{front.ratio:.4g}")


def _housekeeping(state: HookState) -> None:
    """The adaptive strategies' work after an iteration's last result is handed back (off the critical
    path: the trainer runs the optimizer and the next forward meanwhile): fold the previous timing
    agreement and refit the estimate, then MOO's folding and deciding. It runs on the communication
    thread before the next iteration's first exchange, so that exchange sees its outcome on every rank."""
    comp = state.compressor
    assert isinstance(comp, FlexibleCompressor)
    started = time.perf_counter()
    if comp.agree_every == 0:
        comp.settle(keep=AGREEMENTS_IN_FLIGHT)
    if state.moo is not None:
        _moo_housekeeping(state)
    comp.mechanism.take()  # counted here as off-path seconds, not as the next exchange's
    state.housekeeping_s += time.perf_counter() - started


def comm_allreduce_async(state: HookState, values: Sequence[float]) -> PendingAllreduce:
    """Start the mean over ranks of a few floats (``.wait()`` gives it, identical on every rank)."""
    assert state.comm is not None
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_device_of(state))
    pending = state.comm.allreduce_async(tensor, purpose="control")
    return PendingAllreduce(lambda: pending.wait() / state.world_size)


def _device_of(state: HookState) -> torch.device:
    backend = str(dist.get_backend(state.group)).lower()
    return torch.device("cuda", torch.cuda.current_device()) if "nccl" in backend else torch.device("cpu")


# --- building and registering ------------------------------------------------------------------------


def default_cost_model() -> CostModel:
    """The prior link the adaptive strategies start from without a cost model (100 us, 1 Gbit/s)."""
    return CostModel.from_link(DEFAULT_PRIOR_LATENCY_S, DEFAULT_PRIOR_BANDWIDTH_BPS)


def make_strategy(strategy: str, ratio: float | None = None, *, cost_model: CostModel | None = None,
                  **options: Any) -> Compressor | None:
    """The compressor a strategy runs in :func:`compression_hook` (None for ``builtin`` and ``powersgd``)."""
    if strategy not in STRATEGIES:
        raise InputError("strategy", strategy, "one of " + ", ".join(STRATEGIES))
    if strategy in RATIO_STRATEGIES and strategy != "moo" and ratio is None:
        raise InputError("ratio", None, f"a fraction in (0, 1] for {strategy} (e.g. --ratio 0.01)")
    if strategy not in RATIO_STRATEGIES and ratio is not None:
        ratio = None  # a run-wide --ratio does not apply to dense, casts or PowerSGD
    if strategy in ("builtin", "powersgd"):
        return None
    if strategy == "topk-ar-var":
        return make_compressor("topk-ar", ratio, owner="var", **options)
    if strategy in ("flexible", "moo"):
        opts = {"agree_every": 0, **options}
        opts.pop("moo_config", None)
        return FlexibleCompressor(ratio, cost_model=cost_model or default_cost_model(), **opts)
    return make_compressor(strategy, ratio, **options)


def register(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    strategy: str,
    ratio: float | None = None,
    *,
    cost_model: CostModel | None = None,
    log_path: str | Path | None = None,
    group: Any = None,
    powersgd_rank: int = 1,
    powersgd_start_iter: int = 2,
    moo_config: MOOConfig | None = None,
    overlap: bool = True,
    **options: Any,
) -> HookState:
    """Build the state of ``strategy`` and register its hook on ``ddp_model``; returns the state.

    ``cost_model`` prices every logged exchange (``predicted_comm_s``) and is the adaptive strategies'
    prior; ``log_path`` is the exchange CSV (written by rank 0 only). ``options`` go to the compressor
    (e.g. ``index_dtype``, ``owner``, ``block``, ``hysteresis``, ``candidates`` of ``flexible``).
    ``builtin`` registers nothing (DDP's own allreduce) but still returns a state. ``overlap`` (default)
    runs the exchanges on an ordered communication thread so they overlap backward; ``False`` blocks in
    the hook. Call ``state.close()`` when done (it stops the thread and closes the log).
    """
    if not dist.is_available() or not dist.is_initialized():
        raise InputError("group", group, "an initialised torch.distributed process group")
    if cost_model is None and strategy != "builtin":
        warnings.warn(f"hook {strategy!r} registered without a cost model: its predicted times "
                      "(predicted_comm_s, and the adaptive strategies' prior) will be nan; pass cost_model= "
                      "(or cluster= / latency= and bandwidth= to flexcomm.hooks.register)", UserWarning, stacklevel=2)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    moo_cfg = moo_config or MOOConfig()
    if strategy == "moo" and ratio is None:
        ratio = max(moo_cfg.candidates)
    compressor = make_strategy(strategy, ratio, cost_model=cost_model, **options)
    comm = TorchDistCommunicator(group) if compressor is not None else None
    log = CsvLog(log_path, EXCHANGE_COLUMNS) if log_path is not None and rank == 0 else None
    state = HookState(strategy, compressor, comm, cost_model, log, rank, world, group,
                      layouts=BucketLayouts(getattr(ddp_model, "module", ddp_model).parameters()))
    if strategy == "builtin":
        return state
    if overlap and strategy == "dense":  # one collective per bucket: chained on gloo's future, no thread
        state.chained = ChainedIteration()
        ddp_model.register_comm_hook(state, chained_dense_hook)
        return state
    if strategy == "powersgd" and powersgd_start_iter <= 1:
        raise InputError("powersgd_start_iter", powersgd_start_iter, "> 1 (torch's rule with error feedback)")
    if overlap:
        state.engine = CommThread(f"flexcomm-{strategy}-rank{rank}")
    if strategy == "powersgd":
        state.powersgd = PowerSGDState(process_group=group, matrix_approximation_rank=powersgd_rank,
                                       start_powerSGD_iter=powersgd_start_iter, use_error_feedback=True,
                                       warm_start=True, random_seed=0)
        ddp_model.register_comm_hook(state, timed_powersgd_hook)
        return state
    if strategy == "moo":
        state.moo = MOOState(RatioController(moo_cfg))
    ddp_model.register_comm_hook(state, compression_hook)
    return state

