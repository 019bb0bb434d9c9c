"""Online estimate of the network's latency alpha and per-byte cost beta from measured collective times.

Why: the scheme choice (Allgather vs Allreduce-compatible Top-k) and the compression ratio both depend on
(alpha, beta), and on a shared or shaped network those move. Every collective a step issues is priced by
the cost model as ``a * alpha + b * beta (+ g * gamma)`` with coefficients known from what was sent
(:func:`record_coefficients`); its measured seconds are one linear observation of (alpha, beta).

The fit is an exponentially forgetting, windowed least squares on *relative* residuals (a 30 ms and a
300 us collective count alike) over positive (alpha, beta), anchored by a weak prior at the cost model's
link, in log space so that a network 1000x slower than the prior is not held back by it:

    minimise  sum_i w_i (a_i alpha + b_i beta - t_i)^2 / t_i^2  +  lam [log(alpha/alpha0)^2 + log(beta/beta0)^2]

* With fewer than ``min_points`` observations :meth:`NetworkEstimator.estimate` returns the prior.
* When the window's (a, b) directions are *diverse* (an allreduce next to a broadcast, several ratios,
  or a latency probe) both parameters are identified and the prior's pull is negligible.
* When they are collinear (a run that only ever sends one allgather of one size) only the combination
  ``a alpha + b beta`` is measured; the weak anchor then picks the point of that line nearest the prior
  in (log alpha, log beta). That predicts the observed collective exactly but may mis-attribute a change, so
  :meth:`NetworkEstimator.wants_probe` asks the caller for a tiny latency probe (a 4-byte allgather)
  whenever the window is not identified or the last observation surprised the estimate.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.optimize import least_squares, nnls

from flexcomm.compression.comm import CollectiveRecord
from flexcomm.costmodel.collective_libraries.topology import packs_evenly
from flexcomm.costmodel.collectives import formula
from flexcomm.costmodel.errors import InputError

if TYPE_CHECKING:
    from flexcomm.compression.base import StepStats
    from flexcomm.costmodel.cost_model import CostModel


def record_coefficients(
    record: CollectiveRecord, world_size: int, price_scale: float = 1.0
) -> tuple[float, float, float]:
    """(a, b, g) of one collective call: its time is ``a*alpha + b*beta + g*gamma``.

    ``price_scale`` multiplies the bytes of *payload* records only (an emulation may price a small
    model's exchange as if its gradient were larger; control and measurement messages keep their size).
    """
    nbytes = float(record.nbytes) * (price_scale if record.purpose == "payload" else 1.0)
    coef = formula(record.collective, record.algorithm)(nbytes, float(world_size))
    return float(coef.alpha), float(coef.beta), float(coef.gamma)


def timed_records(stats: StepStats) -> list[CollectiveRecord]:
    """The collectives a step really costs on a cluster: payload and control (not gain measurement)."""
    return list(stats.collectives) + [r for r in stats.overhead if r.purpose == "control"]


@dataclass(frozen=True)
class Observation:
    """One measured collective (or step): coefficients and seconds; ``probe`` marks a latency probe."""

    a: float
    b: float
    seconds: float
    g: float = 0.0
    probe: bool = False


class NetworkEstimator:
    """Sliding-window, exponentially weighted, prior-anchored estimate of (alpha, beta); see the module docstring.

    ``forgetting`` (per observation) and ``window`` bound how much history counts. ``reset_after``
    consecutive observations off the prediction by more than ``surprise`` (relative) are taken as a change
    point: the window is cut back to them, so a step change is tracked within a few observations instead of
    a few dozen. ``gamma`` (reduction cost) is taken as known.
    """

    def __init__(
        self,
        prior_alpha: float,
        prior_beta: float,
        *,
        window: int = 48,
        forgetting: float = 0.95,
        min_points: int = 3,
        prior_weight: float = 1e-3,
        condition_limit: float = 1e4,
        surprise: float = 0.25,
        probe_interval: int = 8,
        reset_after: int = 3,
        gamma: float = 0.0,
    ) -> None:
        for name, value in (("prior_alpha", prior_alpha), ("prior_beta", prior_beta), ("gamma", gamma)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise InputError(name, value, "a finite non-negative number")
        if not (isinstance(window, int) and window >= 2):
            raise InputError("window", window, "an integer >= 2")
        if not 0 < forgetting <= 1:
            raise InputError("forgetting", forgetting, "a factor in (0, 1]")
        if not (isinstance(min_points, int) and min_points >= 1):
            raise InputError("min_points", min_points, "an integer >= 1")
        if not prior_weight > 0:
            raise InputError("prior_weight", prior_weight, "a positive weight")
        self.prior = (float(prior_alpha), float(prior_beta))
        # unknowns are scaled by the prior so both columns are O(1); a zero prior gets a typical scale
        self._scale = (self.prior[0] or 1e-5, self.prior[1] or 1e-9)
        self.window = window
        self.forgetting = float(forgetting)
        self.min_points = min_points
        self.prior_weight = float(prior_weight)
        self.condition_limit = float(condition_limit)
        self.surprise = float(surprise)
        self.probe_interval = int(probe_interval)
        self.reset_after = int(reset_after)
        self.gamma = float(gamma)
        self.observations: deque[Observation] = deque(maxlen=window)
        self._estimate = self.prior
        self._identified = False
        self._surprised = False
        self._surprises = 0
        self._since_probe = probe_interval  # a probe is allowed at once
        self._reference = self.prior
        self.count = 0
        self.changes = 0  #: change points detected (window cut back to the surprising points)
        self._deferred = 0
        self._stale = False

    @classmethod
    def from_cost_model(cls, model: CostModel, ranks: int, **options: float | int) -> NetworkEstimator:
        """Prior = the link the cost model gives a group of ``ranks`` (the cluster's slowest link in it); on a
        cluster with a ``gpu_fabric``, the (alpha, beta) that best reproduce NCCL's allreduce there
        (:func:`nccl_prior`), so the first decisions already compare schemes as NCCL would run them (a group
        that does not fill whole nodes keeps the link's prior)."""
        if (model.cluster is not None and model.cluster.gpu_fabric is not None and int(ranks) > 1
                and packs_evenly(model.cluster, int(ranks))):
            alpha, beta = nccl_prior(model, int(ranks))
            return cls(alpha, beta, gamma=model.gamma, **options)  # type: ignore[arg-type]
        _, link = model.group_link(int(ranks))
        return cls(link.alpha, link.beta, gamma=model.gamma, **options)  # type: ignore[arg-type]

    # --- observations ---------------------------------------------------------------------------
    def observe(self, a: float, b: float, seconds: float, g: float = 0.0, *, probe: bool = False) -> None:
        """Add one measurement ``seconds ~ a*alpha + b*beta + g*gamma`` and refit."""
        if not (math.isfinite(seconds) and seconds > 0) or a < 0 or b < 0 or (a == 0 and b == 0):
            return  # an instantaneous or free call carries no information about the link
        predicted = a * self._estimate[0] + b * self._estimate[1] + g * self.gamma
        self._surprised = abs(predicted - seconds) > self.surprise * seconds
        self._surprises = self._surprises + 1 if self._surprised else 0
        self.observations.append(Observation(float(a), float(b), float(seconds), float(g), probe))
        if self.reset_after and self._surprises >= self.reset_after:
            # a change point: the old regime would only drag the fit, keep the surprising recent points
            recent = list(self.observations)[-self.reset_after:]
            self.observations.clear()
            self.observations.extend(recent)
            self.changes += 1
            self._since_probe = max(self._since_probe, self.probe_interval)  # re-identify at once
        self.count += 1
        self._since_probe = 0 if probe else self._since_probe + 1
        if self._deferred:
            self._stale = True
        else:
            self._refit()

    @contextmanager
    def deferred(self) -> Iterator[NetworkEstimator]:
        """Observations inside the block are fitted once, when it ends (a refit costs ~1 ms of CPU, and a
        DDP hook folds several collectives' times in at once; the estimate is only read afterwards)."""
        self._deferred += 1
        try:
            yield self
        finally:
            self._deferred -= 1
            if not self._deferred and self._stale:
                self._stale = False
                self._refit()

    def observe_records(
        self, records: Iterable[CollectiveRecord], seconds: Sequence[float], world_size: int,
        price_scale: float = 1.0,
    ) -> None:
        """One observation per collective call (more diverse than one per step: a broadcast and an
        allreduce of the same step have different latency/bandwidth mixes), fitted once at the end."""
        with self.deferred():
            for record, t in zip(records, seconds, strict=True):
                a, b, g = record_coefficients(record, world_size, price_scale)
                self.observe(a, b, t, g, probe=record.purpose == "control" and record.nbytes <= 8)

    # --- the fit --------------------------------------------------------------------------------
    def _refit(self) -> None:
        obs = list(self.observations)
        if len(obs) < self.min_points:
            self._estimate, self._identified = self.prior, False
            return
        n = len(obs)
        w = np.sqrt(self.forgetting ** np.arange(n - 1, -1, -1, dtype=float))
        secs = np.array([o.seconds for o in obs])
        target = w * np.array([o.seconds - o.g * self.gamma for o in obs]) / secs
        design = np.array([[o.a * self._scale[0], o.b * self._scale[1]] for o in obs]) / secs[:, None]
        design *= w[:, None]
        self._identified = self._is_identified(design)
        prior = np.log(np.array([self.prior[0] / self._scale[0], self.prior[1] / self._scale[1]]).clip(1e-12))
        lam = math.sqrt(self.prior_weight)

        def residuals(theta: np.ndarray) -> np.ndarray:
            return np.concatenate([design @ np.exp(theta) - target, lam * (theta - prior)])

        # start from the unregularised NNLS optimum when it is interior, else from the last estimate
        x_nnls, _ = nnls(design, target)
        last = np.log(np.array([self._estimate[0] / self._scale[0], self._estimate[1] / self._scale[1]]).clip(1e-12))
        starts = [last] + ([np.log(x_nnls)] if np.all(x_nnls > 0) else [])
        best = min((least_squares(residuals, x0, method="lm", xtol=1e-10) for x0 in starts), key=lambda r: r.cost)
        x = np.exp(best.x)
        self._estimate = (float(x[0] * self._scale[0]), float(x[1] * self._scale[1]))

    def _is_identified(self, design: np.ndarray) -> bool:
        norms = np.linalg.norm(design, axis=0)
        if np.any(norms == 0):
            return False
        s = np.linalg.svd(design / norms, compute_uv=False)
        return bool(s[-1] > 0 and s[0] / s[-1] < self.condition_limit)

    # --- queries --------------------------------------------------------------------------------
    def estimate(self) -> tuple[float, float]:
        """Current (alpha seconds/message, beta seconds/byte)."""
        return self._estimate

    @property
    def identified(self) -> bool:
        """True when the window's observations pin down alpha and beta separately."""
        return self._identified

    def predict(self, a: float | np.ndarray, b: float | np.ndarray, g: float | np.ndarray = 0.0) -> np.ndarray:
        """Seconds of coefficients (a, b, g) under the current estimate (vectorised)."""
        alpha, beta = self._estimate
        return np.asarray(a) * alpha + np.asarray(b) * beta + np.asarray(g) * self.gamma

    def wants_probe(self) -> bool:
        """Whether a latency probe would help: window not identified, or the last point surprised us."""
        if self.probe_interval <= 0 or self._since_probe < self.probe_interval:
            return False
        return not self._identified or self._surprised

    def probe_sent(self) -> None:
        """A probe went out: no other until ``probe_interval`` more observations, even if its own time is
        folded in later (a DDP hook agrees its times over ranks an iteration late)."""
        self._since_probe = 0

    def mark(self) -> tuple[float, float]:
        """Remember the estimate a decision was taken with (what :meth:`moved` compares against)."""
        self._reference = self._estimate
        return self._reference

    def moved(self, threshold: float = 0.1, coefficients: Sequence[tuple[float, float]] | None = None) -> bool:
        """True when alpha or beta changed by more than ``threshold`` (relative) since :meth:`mark`.

        With ``coefficients`` [(a, b), ...] it is the predicted seconds ``a*alpha + b*beta`` of any of them
        that must move: a parameter the decision hardly depends on (beta when latency dominates) is
        poorly identified and noisy, and should not trigger a re-decision by itself.
        """
        if coefficients is not None:
            for a, b in coefficients:
                then = a * self._reference[0] + b * self._reference[1]
                now = a * self._estimate[0] + b * self._estimate[1]
                changed = abs(now - then) > threshold * then if then > 0 else now > 0
                if changed:
                    return True
            return False
        for now, then in zip(self._estimate, self._reference, strict=True):
            if then == 0:
                if now > 0:
                    return True
            elif abs(now - then) > threshold * then:
                return True
        return False

    def reset(self) -> None:
        """Forget every observation (back to the prior)."""
        self.observations.clear()
        self._estimate, self._identified, self._surprised = self.prior, False, False
        self._surprises = 0
        self._since_probe = self.probe_interval
        self._reference = self.prior
        self.count = 0
        self.changes = 0

    def __repr__(self) -> str:
        a, b = self._estimate
        return (f"NetworkEstimator(alpha={a:.3g}s, bandwidth={1 / b if b else math.inf:.3g}B/s, "
                f"n={len(self.observations)}, identified={self._identified})")


#: Sizes NCCL's allreduce is priced at to fit a prior: 4 KiB .. 1 GiB, a point every factor of 4.
PRIOR_SIZES = 4.0 ** np.arange(6, 16)


def nccl_prior(model: CostModel, ranks: int) -> tuple[float, float]:
    """(alpha, beta) of the ring-allreduce form a = 2(p-1), b = 2(p-1)/p n that fit NCCL's predicted
    allreduce of :data:`PRIOR_SIZES` over ``ranks`` in relative error (nonnegative least squares): the
    estimator's measurements on a real NCCL cluster land on this form, so its prior should too."""
    p = float(ranks)
    seconds = np.array([model.nccl_choice("allreduce", "nccl", float(n), ranks).seconds for n in PRIOR_SIZES])
    design = np.column_stack([np.full_like(PRIOR_SIZES, 2 * (p - 1)), 2 * (p - 1) / p * PRIOR_SIZES])
    (alpha, beta), _ = nnls(design / seconds[:, None], np.ones_like(seconds))
    return float(alpha), float(beta)
