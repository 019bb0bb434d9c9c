"""Flexible communication: per step, exchange with whichever scheme the cost model says is fastest *now*.

Tyagi & Swany (2023) switch between Top-k over Allgather (latency lg N, bandwidth (N-1) k) and
Allreduce-compatible Top-k (latency 2(N-1) + lg N on a ring, bandwidth ~2k + k lg N) as the network
changes: Allgather wins at high latency and small payloads, the allreduce as bandwidth gets scarce or
N grows. :class:`FlexibleCompressor` makes that choice online:

* **prediction**: ``predicted = coefficients(scheme, numel, ratio, N) . (alpha, beta, gamma) + compression``,
  the coefficients from :func:`costmodel.compressed.scheme_coefficients` with the communicator's own
  algorithm hints (what ``StepStats.parts()`` prices afterwards), (alpha, beta) from a
  :class:`~compression.network_estimate.NetworkEstimator` fed with measured collective times.
* **hysteresis**: the scheme in use changes only when another is predicted faster by more than
  ``hysteresis`` (relative) on ``patience`` consecutive decisions, so noise near the crossover does not
  make it flap (each flip costs a warm-up of caches/buffers on a real cluster and muddles the estimate).
  Far from the crossover waiting is pure loss, so a candidate faster by more than ``urgent`` (default
  50%) is taken at once (``urgent=None`` always waits).
* **switch cost**: a switch is taken only when what it saves over the next ``patience`` exchanges exceeds
  ``switch_cost_s``, the seconds one switch costs beyond its exchange (0 by default: nothing is rebuilt on
  a switch here, the residual carries over; ``validate --network-trace`` reports the first exchange after
  each switch against the next ones, where the network change that triggered it dominates). The
  simulator and the replay decide with the same rule.
* **one residual per worker**: the sparse schemes run as inner compressors that *share* this object's
  ``residuals`` and ``steps`` dicts, so error feedback carries across a switch: the residual is the
  worker's, not the scheme's. Switching to ``dense`` flushes the residual into that dense exchange.
* **log**: every decision (step, key, ratio, estimate used, each candidate's predicted seconds, the
  choice, the measured communication seconds when a clock or real timings exist) is kept in
  :attr:`FlexibleCompressor.decisions`; :meth:`FlexibleCompressor.decisions_frame` returns a DataFrame.

It is a :class:`~compression.base.Compressor`, so it plugs in wherever one does (emulation, DDP hooks).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from flexcomm.compression.base import Compressor, ExchangeResult, StepContext, StepStats, check_ratio
from flexcomm.compression.comm import CollectiveRecord, Communicator, PendingAllreduce
from flexcomm.compression.compressors import make_compressor
from flexcomm.compression.network_estimate import NetworkEstimator, timed_records
from flexcomm.costmodel.compressed import (
    DEFAULT_ALGORITHMS,
    DEFAULT_PAYLOAD,
    SchemeAlgorithms,
    SparsePayload,
    scheme_coefficients,
)
from flexcomm.costmodel.compute import V100_TOPK_ELEMENTS_PER_S
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError

FLEXIBLE_CANDIDATES = ("dense", "topk-ag", "topk-ar")


#: (record, world_size) -> seconds that call took (a simulated network, or None to use measured times).
Clock = Callable[[CollectiveRecord, int], float]


@dataclass(frozen=True)
class TopkTimeModel:
    """Compression seconds of one exchange: Top-k selection at a fixed element rate, constant in the ratio.

    The paper measured compression time nearly constant in c, so only the element count matters;
    ``dense`` costs nothing. ``elements_per_s = 0`` makes compression free.
    """

    elements_per_s: float = V100_TOPK_ELEMENTS_PER_S

    def __call__(self, scheme: str, numel: float) -> float:
        if scheme == "dense" or self.elements_per_s <= 0:
            return 0.0
        return float(numel) / self.elements_per_s


class SchemePredictor:
    """Predicted seconds of each scheme under the estimator's current (alpha, beta): shared by the
    per-step scheme choice and the compression-ratio optimizer so both price the same way."""

    def __init__(
        self,
        estimator: NetworkEstimator,
        *,
        algorithms: SchemeAlgorithms = DEFAULT_ALGORITHMS,
        payload: SparsePayload = DEFAULT_PAYLOAD,
        price_scale: float = 1.0,
        compress_time: Callable[[str, float], float] | None = None,
    ) -> None:
        if not (math.isfinite(price_scale) and price_scale > 0):
            raise InputError("price_scale", price_scale, "a positive factor")
        self.estimator = estimator
        self.algorithms = algorithms
        self.payload = payload
        self.price_scale = float(price_scale)
        self.compress_time = compress_time

    def comm_seconds(self, scheme: str, numel: int, ratio: float | np.ndarray, ranks: int) -> np.ndarray:
        """Communication seconds (vectorised over ``ratio``)."""
        coef = scheme_coefficients(scheme, numel, ranks, ratio, self.payload, self.algorithms)
        s = self.price_scale
        return self.estimator.predict(coef.alpha, coef.beta * s, coef.gamma * s)

    def compress_seconds(self, scheme: str, numel: int) -> float:
        return 0.0 if self.compress_time is None else float(self.compress_time(scheme, numel * self.price_scale))

    def seconds(self, scheme: str, numel: int, ratio: float | np.ndarray, ranks: int) -> np.ndarray:
        """Communication + compression seconds of one exchange."""
        return self.comm_seconds(scheme, numel, ratio, ranks) + self.compress_seconds(scheme, numel)

    def best_sparse_seconds(
        self, numel: int, ratios: np.ndarray, ranks: int, schemes: Sequence[str] = ("topk-ag", "topk-ar")
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per ratio, the fastest sparse scheme's seconds and its index into ``schemes``."""
        table = np.vstack([np.broadcast_to(self.seconds(s, numel, ratios, ranks), np.shape(ratios))
                           for s in schemes])
        return table.min(axis=0), table.argmin(axis=0)


#: The adaptive machinery's own work, by part: what a static hook does not do.
MECHANISM_PARTS = ("decide", "agree", "probe", "estimate")


class MechanismTimer:
    """Wall seconds the adaptive machinery spends beyond the exchange it chose, by part (decide: predicting
    and choosing; agree: issuing and waiting for the ranks' timing agreement; probe: latency probes;
    estimate: refitting the network estimate). Why: adapting pays only if it costs less than it gains, so
    the cost is logged per exchange (the hooks' ``exchanges.csv``) beside what it bought."""

    def __init__(self, parts: Sequence[str] = MECHANISM_PARTS) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(parts, 0.0)

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started

    def take(self) -> dict[str, float]:
        """Seconds per part since the last call (and reset)."""
        out = dict(self.seconds)
        self.seconds = dict.fromkeys(self.seconds, 0.0)
        return out


@dataclass
class _KeyState:
    current: str | None = None
    target: str | None = None
    streak: int = 0


def _check_decision_options(candidates: tuple[str, ...], hysteresis: float, patience: int,
                            estimator: NetworkEstimator | None, cost_model: CostModel | None,
                            urgent: float | None) -> None:
    """:class:`FlexibleCompressor`'s choice rule: candidates, hysteresis, patience, urgency and a network prior."""
    if not candidates or any(c not in FLEXIBLE_CANDIDATES for c in candidates) or len(set(candidates)) != len(
            candidates):
        raise InputError("candidates", list(candidates), "distinct names among " + ", ".join(FLEXIBLE_CANDIDATES))
    if not (isinstance(hysteresis, (int, float)) and hysteresis >= 0):
        raise InputError("hysteresis", hysteresis, "a relative margin >= 0, e.g. 0.1")
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        raise InputError("patience", patience, "an integer >= 1 (consecutive decisions)")
    if estimator is None and cost_model is None:
        raise InputError("estimator", None, "a NetworkEstimator or a CostModel to take the prior from")
    if urgent is not None and not (isinstance(urgent, (int, float)) and urgent >= hysteresis):
        raise InputError("urgent", urgent, f"None or a relative margin >= hysteresis ({hysteresis})")


def _check_agreement_options(agree_every: int, agree_lag: int, probe_budget: float, switch_cost_s: float) -> None:
    """:class:`FlexibleCompressor`'s timing agreements, probe budget and switch cost."""
    if isinstance(agree_every, bool) or not isinstance(agree_every, int) or agree_every < 0:
        raise InputError("agree_every", agree_every, "an integer >= 1 (exchanges between timing agreements), "
                         "or 0: the caller calls agree() (a DDP hook, once per iteration)")
    if isinstance(agree_lag, bool) or not isinstance(agree_lag, int) or agree_lag < 0:
        raise InputError("agree_lag", agree_lag, "an integer >= 0 (exchanges an agreement may stay in flight)")
    if isinstance(probe_budget, bool) or not (isinstance(probe_budget, (int, float)) and 0 <= probe_budget):
        raise InputError("probe_budget", probe_budget, "a fraction >= 0 of the exchanges a probe informs "
                         "(0: no budget, every probe the estimator asks for)")
    if isinstance(switch_cost_s, bool) or not (
            isinstance(switch_cost_s, (int, float)) and math.isfinite(switch_cost_s) and switch_cost_s >= 0):
        raise InputError("switch_cost_s", switch_cost_s, "seconds >= 0 one switch costs beyond its exchange")


class FlexibleCompressor(Compressor):
    """Chooses dense / topk-ag / topk-ar per exchange by predicted time, with hysteresis; see the module.

    ``estimator`` (or ``cost_model``, whose link for the group becomes the prior) supplies (alpha, beta).
    ``clock(record, world_size) -> seconds`` measures each collective (a simulated network); without one,
    a real communicator's recorded wall times are used, averaged over ranks every ``agree_every`` exchanges
    (one small allreduce) so that every rank decides alike, and an emulated one gives no measurement.
    ``latency_probe`` lets the compressor send a 4-byte allgather (purpose ``control``) when the
    estimator cannot separate alpha from beta (see :mod:`compression.network_estimate`).
    ``price_scale`` prices payload bytes as if the gradient were that many times larger (emulation).
    """

    name = "flexible"
    needs_ratio = True

    def __init__(
        self,
        ratio: float | None = None,
        *,
        estimator: NetworkEstimator | None = None,
        cost_model: CostModel | None = None,
        candidates: Sequence[str] = ("topk-ag", "topk-ar"),
        hysteresis: float = 0.1,
        patience: int = 3,
        urgent: float | None = 0.5,
        owner: str = "star",
        index_dtype: str | None = None,
        compress_time: Callable[[str, float], float] | None = None,
        price_scale: float = 1.0,
        clock: Clock | None = None,
        latency_probe: bool = True,
        agree_every: int = 1,
        agree_lag: int = 0,
        probe_budget: float = 0.02,
        switch_cost_s: float = 0.0,
        error_feedback: bool = True,
        gain_every: int | None = None,
        keep_sent: bool = False,
    ) -> None:
        super().__init__(ratio, error_feedback=error_feedback, gain_every=gain_every, keep_sent=keep_sent)
        candidates = tuple(candidates)
        _check_decision_options(candidates, hysteresis, patience, estimator, cost_model, urgent)
        self.candidates = candidates
        self.hysteresis = float(hysteresis)
        self.patience = patience
        self.urgent = urgent
        self.estimator = estimator
        self.cost_model = cost_model
        self.owner = owner
        self.index_dtype = index_dtype
        self.compress_time = compress_time
        self.price_scale = float(price_scale)
        self.clock = clock
        self.latency_probe = latency_probe
        _check_agreement_options(agree_every, agree_lag, probe_budget, switch_cost_s)
        self.agree_every = agree_every
        self.agree_lag = agree_lag
        self.probe_budget = float(probe_budget)
        self.switch_cost_s = float(switch_cost_s)
        self._pending: list[tuple[StepStats, list[float]]] = []
        #: agreements in flight: (exchange count when issued, the allreduce, the stats it covers, their sizes)
        self._inflight: collections.deque[tuple[int, PendingAllreduce, list[tuple[StepStats, int]]]] = (
            collections.deque())
        self._exchanges = 0
        self.inner: dict[str, Compressor] = self._inner_compressors(owner, index_dtype, error_feedback, gain_every,
                                                                    keep_sent)
        self.state: dict[int, _KeyState] = {}
        self.decisions: list[dict[str, Any]] = []
        self._predictor: SchemePredictor | None = None
        self.mechanism = MechanismTimer()

    def _inner_compressors(self, owner: str, index_dtype: str | None, error_feedback: bool, gain_every: int | None,
                           keep_sent: bool) -> dict[str, Compressor]:
        """One compressor per candidate, all sharing this one's ``residuals`` and ``steps``: error feedback is the
        worker's, not the scheme's, so it carries across a switch."""
        inner: dict[str, Compressor] = {}
        for scheme in self.candidates:
            if scheme == "dense":
                compressor = make_compressor("dense", gain_every=gain_every, keep_sent=keep_sent)
            else:
                options: dict[str, Any] = {"index_dtype": index_dtype, "error_feedback": error_feedback,
                                           "gain_every": gain_every, "keep_sent": keep_sent}
                if scheme == "topk-ar":
                    options["owner"] = owner
                compressor = make_compressor(scheme, self.ratio, **options)
            compressor.residuals = self.residuals  # one residual per worker, whichever scheme runs
            compressor.steps = self.steps
            inner[scheme] = compressor
        return inner

    def __repr__(self) -> str:
        return f"FlexibleCompressor(ratio={self.ratio}, candidates={self.candidates}, hysteresis={self.hysteresis})"

    # --- configuration --------------------------------------------------------------------------
    def set_ratio(self, ratio: float) -> None:
        """Change the fraction of elements kept (the ratio controller calls this)."""
        self.ratio = check_ratio(ratio, True, self.name)

    def _estimator_for(self, world_size: int) -> NetworkEstimator:
        """The online estimator, built from the cost model on first use when none was given."""
        if self.estimator is None:
            assert self.cost_model is not None
            self.estimator = NetworkEstimator.from_cost_model(self.cost_model, world_size)
        return self.estimator

    def predictor(self, comm: Communicator) -> SchemePredictor:
        """The shared predictor, built on first use from the communicator's algorithm hints."""
        if self._predictor is None:
            self._estimator_for(comm.world_size)
            algorithms = SchemeAlgorithms(allreduce=comm.algorithms["allreduce"],
                                          allgather=comm.algorithms["allgather"],
                                          broadcast=comm.algorithms["broadcast"], index_owner=self.owner)
            payload = SparsePayload(index_dtype=self.index_dtype or "int32")
            self._predictor = SchemePredictor(self.estimator, algorithms=algorithms, payload=payload,
                                              price_scale=self.price_scale, compress_time=self.compress_time)
        return self._predictor

    # --- the decision ---------------------------------------------------------------------------
    def predict(self, numel: int, comm: Communicator) -> dict[str, float]:
        """Predicted seconds (communication + compression) of every candidate at the current ratio."""
        pred = self.predictor(comm)
        return {s: float(pred.seconds(s, numel, self.ratio or 1.0, comm.world_size)) for s in self.candidates}

    def decide(self, predicted: dict[str, float], key: int = 0) -> tuple[str, bool, str]:
        """Apply the hysteresis rule; returns (chosen, switched, best)."""
        state = self.state.setdefault(key, _KeyState())
        best = min(predicted, key=lambda s: (predicted[s], self.candidates.index(s)))
        if state.current is None:
            state.current, state.target, state.streak = best, None, 0
            return best, True, best
        current = state.current
        saving = predicted[current] - predicted[best]
        if (best != current and predicted[current] > predicted[best] * (1.0 + self.hysteresis)
                and saving * self.patience > self.switch_cost_s):
            state.streak = state.streak + 1 if state.target == best else 1
            state.target = best
            urgent = self.urgent is not None and predicted[current] > predicted[best] * (1.0 + self.urgent)
            if state.streak >= self.patience or urgent:
                state.current, state.target, state.streak = best, None, 0
                return best, True, best
        else:
            state.target, state.streak = None, 0
        return current, False, best

    def choose(self, numel: int, comm: Communicator, key: int = 0) -> tuple[str, dict[str, Any]]:
        """The decision half of :meth:`exchange`: predict every candidate, apply the hysteresis rule.

        Returns the scheme and its log entry (without the step); a replay of a logged run calls this with
        the run's bucket sizes to take the same decisions from simulated times."""
        predicted = self.predict(numel, comm)
        assert self.estimator is not None
        alpha, beta = self.estimator.estimate()
        chosen, switched, best = self.decide(predicted, key)
        entry: dict[str, Any] = {
            "key": key, "ratio": self.ratio, "alpha_s": alpha, "beta_s_per_byte": beta,
            "identified": self.estimator.identified,
            **{f"pred_{s}_s": predicted[s] for s in self.candidates},
            "best": best, "chosen": chosen, "switched": switched, "streak": self.state[key].streak,
            "pred_comm_s": float(self.predictor(comm).comm_seconds(chosen, numel, self.ratio or 1.0,
                                                                   comm.world_size)),
            "measured_comm_s": math.nan,
        }
        return chosen, entry

    def should_probe(self, numel: int, comm: Communicator, chosen: str) -> bool:
        """Whether to send a latency probe after this exchange: the estimator wants one, and it is worth its
        price. A probe informs the next ``probe_interval`` exchanges; it is taken only when its predicted
        seconds are at most ``probe_budget`` of theirs (on a high-latency link a 4-byte allgather costs
        several round trips, more than a wrong guess of alpha can lose). A ``probe_budget`` of 0 sets no
        budget (every probe the estimator asks for). Decided from the agreed estimate only, so every rank
        probes alike."""
        estimator = self.estimator
        if not self.latency_probe or estimator is None or not estimator.wants_probe():
            return False
        if self.probe_budget <= 0:
            return True
        predictor = self.predictor(comm)
        probe = scheme_coefficients("topk-ag", 1, comm.world_size, 1.0, DEFAULT_PAYLOAD, predictor.algorithms)
        probe_s = float(estimator.predict(probe.alpha, 0.0, 0.0))  # 4 bytes: latency only
        informed_s = max(1, estimator.probe_interval) * float(predictor.seconds(chosen, numel, self.ratio or 1.0,
                                                                                 comm.world_size))
        return probe_s <= self.probe_budget * informed_s

    def current(self, key: int = 0) -> str | None:
        """The scheme in use for bucket ``key`` (None before its first exchange)."""
        state = self.state.get(key)
        return state.current if state else None

    # --- the exchange ---------------------------------------------------------------------------
    def exchange(self, grads: Sequence[Tensor], comm: Communicator, *, key: int = 0) -> ExchangeResult:
        """Decide, delegate to the chosen scheme (sharing residuals), probe if useful, measure, log."""
        grads = self._check(grads, comm)
        numel = grads[0].numel()
        if self.agree_every:  # caller-driven agreements (agree_every=0) are folded by settle(), off the path
            self._settle(self._exchanges - self.agree_lag)
        self._exchanges += 1
        with self.mechanism.part("decide"):
            chosen, entry = self.choose(numel, comm, key)
        inner = self.inner[chosen]
        if chosen == "dense":
            grads = self._flush_residuals(grads, comm, key)
        else:
            inner.ratio = self.ratio
        result = inner.exchange(grads, comm, key=key)
        stats = result.stats
        probed = False
        if self.should_probe(numel, comm, chosen):
            with self.mechanism.part("probe"):
                stats = self._probe(comm, stats, grads[0].device)
            self.estimator.probe_sent()
            probed = True
        self.decisions.append({"step": stats.step, **entry, "latency_probe": probed})
        if self.clock is not None:
            with self.mechanism.part("estimate"):
                self.observe(stats, [self.clock(r, comm.world_size) for r in timed_records(stats)])
        elif not comm.emulated:
            self._pending.append((stats, [r.seconds for r in timed_records(stats)]))
            if self.agree_every and len(self._pending) >= self.agree_every:
                self._agree(comm, grads[0].device)
        return ExchangeResult(result.aggregates, stats, result.sent)

    def observe(self, stats: StepStats, seconds: Sequence[float], log: bool = True) -> None:
        """Feed measured seconds of ``timed_records(stats)`` (payload + control) to the estimator.

        With ``log`` the payload total is written into the latest decision of that step and key.
        """
        records = timed_records(stats)
        if len(records) != len(seconds):
            raise InputError("seconds", len(seconds), f"one time per timed record ({len(records)})")
        self._estimator_for(stats.world_size).observe_records(records, seconds, stats.world_size, self.price_scale)
        if log:
            payload = sum(t for r, t in zip(records, seconds, strict=True) if r.purpose == "payload")
            for entry in reversed(self.decisions):
                if entry["step"] == stats.step and entry["key"] == stats.key:
                    entry["measured_comm_s"] = float(payload)
                    break

    def decisions_frame(self) -> Any:
        """The decision log as a pandas DataFrame (one row per exchange)."""
        import pandas as pd

        return pd.DataFrame(self.decisions)

    def reset(self) -> None:
        """Forget residuals, step counters, the schemes in use and the log (not the network estimate)."""
        super().reset()
        self.state.clear()
        self.decisions.clear()

    # --- internals ------------------------------------------------------------------------------
    def _flush_residuals(self, grads: list[Tensor], comm: Communicator, key: int) -> list[Tensor]:
        """Dense keeps no residual: send what the sparse schemes still owe along with this gradient."""
        out = []
        for rank, g in zip(comm.local_workers, grads, strict=True):
            r = self.residuals.pop((key, rank), None)
            out.append(g + r if r is not None and r.shape == g.shape else g)
        return out

    def agree(self, comm: Communicator, device: torch.device | str = "cpu") -> None:
        """Start the timing agreement of every exchange since the last one (``agree_every=0``: the caller
        decides when, e.g. once per DDP iteration, after its last bucket)."""
        if not comm.emulated and self.clock is None:
            self._agree(comm, torch.device(device))

    def _agree(self, comm: Communicator, device: torch.device) -> None:
        """Average the ranks' measured times (one small allreduce, purpose ``control``) before using them.

        Each rank measures its own wall times; fed raw, the ranks' estimators would drift apart and pick
        different schemes or probes, i.e. mismatched collectives (a hang). Agreed times keep every rank's
        estimator, and so every decision, identical. With ``agree_lag`` > 0 the allreduce is only started
        here and its result used ``agree_lag`` exchanges later (:meth:`_settle`); caller-driven
        (``agree_every=0``) it is folded when the caller calls :meth:`settle`. On a high-latency link the
        round trip then hides behind the next exchanges instead of adding to every one; every rank still
        folds the same agreed times in at the same point, so decisions stay identical.
        """
        flat = [t for _, secs in self._pending for t in secs]
        covered = [(stats, len(secs)) for stats, secs in self._pending]
        self._pending = []
        if not flat:
            return
        with self.mechanism.part("agree"):
            buf = torch.tensor(flat, dtype=torch.float64, device=device)
            if (self.agree_lag > 0 or self.agree_every == 0) and len(comm.local_workers) == 1:
                self._inflight.append((self._exchanges, comm.allreduce_async(buf, purpose="control"), covered))
                return
            total = comm.allreduce([buf.clone() for _ in comm.local_workers], purpose="control")[0]
        self._fold(total / comm.world_size, covered)

    def _settle(self, issued_by: int | None = None) -> None:
        """Fold in the agreements started at or before exchange ``issued_by`` (None: all of them)."""
        while self._inflight and (issued_by is None or self._inflight[0][0] <= issued_by):
            self._fold_oldest()

    def _fold_oldest(self) -> None:
        _, pending, covered = self._inflight.popleft()
        with self.mechanism.part("agree"):
            total = pending.wait()
        self._fold(total / covered[0][0].world_size, covered)

    def _fold(self, agreed: Tensor, covered: list[tuple[StepStats, int]]) -> None:
        values = agreed.tolist()
        offset = 0
        with self.mechanism.part("estimate"), self._estimator_for(covered[0][0].world_size).deferred():
            for stats, count in covered:  # one refit for the whole agreement
                self.observe(stats, values[offset:offset + count])
                offset += count

    def settle(self, keep: int = 0) -> None:
        """Fold in every agreement in flight but the ``keep`` newest (caller-driven mode, ``agree_every=0``).

        A DDP hook calls it once per iteration, after the last bucket's result is handed back, with
        ``keep=1``: the agreement just started stays in flight behind the next iteration, the previous one
        (long finished) is folded and the estimate refitted off the critical path, while the trainer runs
        the optimizer and the next forward. Every rank folds the same agreements at the same iteration."""
        while len(self._inflight) > max(0, keep):
            self._fold_oldest()

    def finish(self) -> None:
        """Wait for the agreements still in flight (call before the process group goes away)."""
        self._settle(None)

    def _probe(self, comm: Communicator, stats: StepStats, device: torch.device) -> StepStats:
        """A 4-byte allgather: almost pure latency, so alpha and beta separate (purpose ``control``)."""
        with comm.recording() as records:
            comm.allgather([torch.zeros(1, dtype=torch.float32, device=device) for _ in comm.local_workers],
                           purpose="control")
        return dataclasses.replace(stats, overhead=stats.overhead + tuple(records))

    def _exchange(self, accs: list[Tensor], comm: Communicator, key: int, step: int, ctx: StepContext) -> list[Tensor]:
        raise AssertionError("FlexibleCompressor.exchange delegates to its inner compressors")  # pragma: no cover
