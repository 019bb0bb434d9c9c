"""Multi-objective choice of the compression ratio c (Tyagi & Swany 2023, Section IV), made reusable.

Why two objectives: a smaller c sends less (parallel efficiency goes up) but keeps less of each gradient
(statistical efficiency, the *compression gain*, goes down). Neither alone picks c; the Pareto front of
the two and a documented rule on it do.

* **time / parallel efficiency**: predicted step time ``compute + comm(c) + compression`` where comm(c)
  is the cost model's time of the *fastest* sparse scheme at c under the current (alpha, beta) estimate
  (a callable you pass; :class:`compression.flexible.SchemePredictor` gives one). ``time_objective="time"``
  minimises it (the paper: the compute and compression terms are constant in c, so after the front's
  min-max normalisation this is exactly the paper's communication-time objective);
  ``"efficiency"`` maximises ``compute / step time`` instead (a non-linear transform: different picks).
* **gain**: measured on the real gradients at a few candidate ratios (probed from the same state), then
  :class:`GainModel` makes it a smooth monotone function of c (PCHIP in log c over isotonic means) so the
  optimiser works on continuous c. ``gain_objective="inverse"`` minimises 1/gain (the paper's code),
  ``"negative"`` minimises -gain.
* **front**: pymoo NSGA-II with the paper's settings (population 40, 10 offspring, SBX p=0.9 eta=15,
  PM eta=20, 40 generations, c in [min, max] of the candidates = [0.001, 0.1]), seeded.
* **pick** (:func:`choose_point`, on the front normalised to [0, 1] per objective):
  ``"asf"``: pymoo's ASF with weights (0.6 time, 0.4 gain), passed as ``1/weights`` exactly as the
  authors' code does, i.e. argmin max(0.6 n_time, 0.4 n_gain): the paper's choice;
  ``"knee"``: the point farthest from the line through the two extremes, on the utopia side;
  ``"utopia"``: the point nearest the utopia point (0, 0).

:class:`RatioController` runs it online: optimise at the start, every ``reeval_every`` steps and whenever
the network estimate moved by >= ``estimate_change``; re-probe the gains (then optimise) at the start and
when the EWMA of the measured gain at the chosen c drifts >= ``gain_change`` from the model's prediction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.interpolate import PchipInterpolator

from flexcomm.compression.moo_config import PAPER_CANDIDATES, RULES, MOOConfig
from flexcomm.costmodel.errors import InputError

__all__ = ["PAPER_CANDIDATES", "RULES", "GainModel", "MOOConfig", "ParetoFront", "RatioController", "choose_point",
           "normalise", "objectives", "pareto_front"]

TimeFn = Callable[[np.ndarray], np.ndarray]
GainFn = Callable[[np.ndarray], np.ndarray]


# --- picking a point on a front ---------------------------------------------------------------------


def normalise(F: np.ndarray) -> np.ndarray:
    """Min-max normalise each objective column to [0, 1] (a constant column becomes 0)."""
    F = np.asarray(F, dtype=float)
    lo, hi = F.min(axis=0), F.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (F - lo) / span


def choose_point(F: np.ndarray, rule: str = "asf", weights: Sequence[float] = (0.6, 0.4)) -> int:
    """Row of ``F`` (n x 2, both minimised) the rule picks, on the normalised front; ties -> first row."""
    F = np.atleast_2d(np.asarray(F, dtype=float))
    if F.shape[0] == 0 or F.shape[1] != 2:
        raise InputError("front", F.shape, "an n x 2 array of objective values (n >= 1)")
    if rule not in RULES:
        raise InputError("rule", rule, "one of " + ", ".join(RULES))
    nF = normalise(F)
    if rule == "asf":
        from pymoo.decomposition.asf import ASF

        w = np.asarray(weights, dtype=float)
        if w.shape != (2,) or np.any(w <= 0):
            raise InputError("weights", list(weights), "two positive weights (time, gain), e.g. 0.6, 0.4")
        return int(np.argmin(ASF().do(nF, 1.0 / w)))
    if rule == "utopia":
        return int(np.argmin(np.hypot(nF[:, 0], nF[:, 1])))
    # knee: signed distance to the line through the two extremes, positive on the utopia side
    a = int(np.lexsort((nF[:, 1], nF[:, 0]))[0])  # best first objective
    b = int(np.lexsort((nF[:, 0], nF[:, 1]))[0])  # best second objective
    d = nF[b] - nF[a]
    length = math.hypot(*d)
    if length == 0:
        return a
    signed = (d[0] * (nF[:, 1] - nF[a, 1]) - d[1] * (nF[:, 0] - nF[a, 0])) / length
    # orient so that the utopia point (0, 0) has positive distance
    if d[0] * (0 - nF[a, 1]) - d[1] * (0 - nF[a, 0]) < 0:
        signed = -signed
    return int(np.argmax(signed))


# --- the gain model ---------------------------------------------------------------------------------


def _isotonic(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pool-adjacent-violators: the weighted least-squares non-decreasing fit of ``y``."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(y, w, strict=True):
        blocks.append([float(value), float(weight), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return np.concatenate([np.full(int(n), m) for m, _, n in blocks])


class GainModel:
    """Smooth, non-decreasing gain(c) through probed (c, gain) points.

    Why monotone: keeping more elements cannot, in expectation, keep less of the gradient; probe noise
    can make a few steps say otherwise, and a wiggly model would create fake Pareto points. Points are
    averaged per ratio, made non-decreasing in c (isotonic), then joined by PCHIP in log c (shape
    preserving, no overshoot). Outside the probed range the end values hold.
    """

    def __init__(self, ratios: Sequence[float], gains: Sequence[float], floor: float = 1e-6) -> None:
        c = np.asarray(ratios, dtype=float)
        g = np.asarray(gains, dtype=float)
        ok = np.isfinite(c) & np.isfinite(g) & (c > 0)
        if c.shape != g.shape or not ok.any():
            raise InputError("gains", list(gains), "finite gains measured at one or more ratios in (0, 1]")
        c, g = c[ok], g[ok]
        unique = np.unique(c)
        means = np.array([g[c == u].mean() for u in unique])
        counts = np.array([(c == u).sum() for u in unique], dtype=float)
        self.ratios = unique
        self.raw = means
        self.fitted = np.maximum(_isotonic(means, counts), floor)
        self.floor = floor
        self._interp = PchipInterpolator(np.log(unique), self.fitted) if len(unique) > 1 else None

    def __call__(self, c: float | np.ndarray) -> np.ndarray:
        x = np.log(np.clip(np.asarray(c, dtype=float), self.ratios[0], self.ratios[-1]))
        if self._interp is None:
            return np.full_like(x, self.fitted[0])
        return np.maximum(self._interp(x), self.floor)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({"c": self.ratios, "gain_measured": self.raw, "gain_fitted": self.fitted})


# --- configuration and the front ---------------------------------------------------------------------


@dataclass
class ParetoFront:
    """The front NSGA-II found and the point the rule picked.

    ``frame`` columns: ``c``, ``comm_s`` (communication + compression), ``step_s`` (+ compute),
    ``efficiency`` (compute / step; 0 without a compute time), ``gain``, the minimised objectives
    ``f_time``, ``f_gain`` and their normalised values ``n_time``, ``n_gain``; sorted by c.
    """

    frame: pd.DataFrame
    chosen: int
    rule: str
    weights: tuple[float, float]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """The chosen compression ratio."""
        return float(self.frame["c"].iloc[self.chosen])

    @property
    def point(self) -> dict[str, Any]:
        """The chosen row as a dict."""
        return {k: (v.item() if hasattr(v, "item") else v) for k, v in self.frame.iloc[self.chosen].items()}


def objectives(
    c: np.ndarray, time_fn: TimeFn, gain_fn: GainFn, config: MOOConfig, compute_s: float = 0.0
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The two minimised objectives at ratios ``c`` and the columns they come from."""
    c = np.asarray(c, dtype=float)
    comm = np.broadcast_to(np.asarray(time_fn(c), dtype=float), c.shape)
    step = compute_s + comm
    eff = np.where(step > 0, compute_s / np.where(step > 0, step, 1.0), 0.0)
    gain = np.broadcast_to(np.asarray(gain_fn(c), dtype=float), c.shape)
    f_time = step if config.time_objective == "time" else -eff
    f_gain = 1.0 / np.maximum(gain, 1e-12) if config.gain_objective == "inverse" else -gain
    cols = {"c": c, "comm_s": comm, "step_s": step, "efficiency": eff, "gain": gain}
    return np.column_stack([f_time, f_gain]), cols


def pareto_front(
    time_fn: TimeFn,
    gain_fn: GainFn,
    config: MOOConfig = MOOConfig(),
    *,
    compute_s: float = 0.0,
    extra_columns: Callable[[np.ndarray], dict[str, Any]] | None = None,
) -> ParetoFront:
    """NSGA-II front over c in ``config.bounds`` and the point ``config.rule`` picks (deterministic per seed).

    ``time_fn(c)`` gives communication + compression seconds at each ratio (vectorised), ``gain_fn(c)``
    the compression gain; ``extra_columns(c)`` may add columns (e.g. the scheme used at each c).
    """
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.problem import Problem
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.sampling.rnd import FloatRandomSampling
    from pymoo.optimize import minimize

    lo, hi = config.bounds  # type: ignore[misc]
    to_c = (lambda x: 10.0 ** x) if config.log_search else (lambda x: x)
    xl, xu = (math.log10(lo), math.log10(hi)) if config.log_search else (lo, hi)

    class _RatioProblem(Problem):
        def __init__(self) -> None:
            super().__init__(n_var=1, n_obj=2, xl=np.array([xl]), xu=np.array([xu]))

        def _evaluate(self, x: np.ndarray, out: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            out["F"] = objectives(to_c(x[:, 0]), time_fn, gain_fn, config, compute_s)[0]

    if lo == hi:
        c = np.array([lo])
    else:
        algorithm = NSGA2(pop_size=config.pop_size, n_offsprings=config.n_offsprings,
                          sampling=FloatRandomSampling(), crossover=SBX(prob=config.sbx_prob, eta=config.sbx_eta),
                          mutation=PM(eta=config.pm_eta), eliminate_duplicates=True)
        res = minimize(_RatioProblem(), algorithm, ("n_gen", config.n_gen), seed=config.seed, verbose=False)
        c = np.unique(to_c(np.atleast_2d(res.X).reshape(-1)))
    F, cols = objectives(c, time_fn, gain_fn, config, compute_s)
    nF = normalise(F)
    frame = pd.DataFrame({**cols, "f_time": F[:, 0], "f_gain": F[:, 1], "n_time": nF[:, 0], "n_gain": nF[:, 1]})
    if extra_columns is not None:
        for name, values in extra_columns(c).items():
            frame[name] = values
    chosen = choose_point(F, config.rule, config.weights)
    return ParetoFront(frame, chosen, config.rule, tuple(config.weights))  # type: ignore[arg-type]


# --- the online controller ----------------------------------------------------------------------------

#: Ratios the controller's screen (:meth:`RatioController.screen`) evaluates between the bounds.
SCREEN_POINTS = 33


def _non_dominated(F: np.ndarray) -> np.ndarray:
    """Mask of the rows of ``F`` (both objectives minimised) no other row dominates."""
    F = np.asarray(F, dtype=float)
    dominated = np.zeros(len(F), dtype=bool)
    for i, row in enumerate(F):
        dominated[i] = bool(np.any(np.all(F <= row, axis=1) & np.any(F < row, axis=1)))
    return ~dominated


class RatioController:
    """When to probe gains and re-optimise c, and the history of what it chose (see the module docstring).

    The caller owns the training state, so it does the probing: ``reason = due(step, estimator)``;
    if ``needs_probe(reason)`` run ``config.probe_steps`` steps at each of ``config.candidates`` from
    one saved state and call :meth:`fit_gains`; then :meth:`optimize`; feed every training step's
    measured gain to :meth:`observe_gain`.
    """

    def __init__(self, config: MOOConfig = MOOConfig()) -> None:
        self.config = config
        self.gain_model: GainModel | None = None
        self.front: ParetoFront | None = None
        self.ratio: float | None = None
        self.fronts: list[tuple[int, ParetoFront]] = []
        self.events: list[dict[str, Any]] = []
        self.probes: list[pd.DataFrame] = []
        self._last_opt: int | None = None
        self._last_probe: int | None = None
        self._ewma: float | None = None
        self._samples = 0

    def due(self, step: int, estimator: Any | None = None,
            coefficients: Sequence[tuple[float, float]] | None = None) -> str | None:
        """Why the ratio should be re-decided at ``step`` (None: keep it).

        ``coefficients`` (the (a, b) of the exchanges in play) make the network trigger fire on a move of
        their predicted time rather than of alpha or beta themselves (see ``NetworkEstimator.moved``).
        """
        cfg = self.config
        if self.gain_model is None or self._last_probe is None or self._last_opt is None:
            return "initial"
        since_probe, since_opt = step - self._last_probe, step - self._last_opt
        if cfg.reprobe_every and since_probe >= cfg.reprobe_every:
            return "reprobe"
        if self.gain_drift() >= cfg.gain_change and since_probe >= cfg.min_probe_interval:
            return "gain"
        if estimator is not None and since_opt >= cfg.min_reopt_interval and estimator.moved(
                cfg.estimate_change, coefficients):
            return "network"
        if cfg.reeval_every and since_opt >= cfg.reeval_every:
            return "period"
        return None

    @staticmethod
    def needs_probe(reason: str | None) -> bool:
        """Reasons that need fresh gain measurements (the others reuse the gain model)."""
        return reason in ("initial", "reprobe", "gain")

    def screen(self, time_fn: TimeFn, compute_s: float = 0.0, points: int = SCREEN_POINTS) -> float:
        """The ratio the rule picks among ``points`` log-spaced ratios of the bounds (a few ms, where the
        NSGA-II front costs a few hundred): what a re-optimisation would roughly choose."""
        if self.gain_model is None:
            raise InputError("gain_model", None, "fit_gains() before screen()")
        lo, hi = self.config.bounds  # type: ignore[misc]
        grid = np.geomspace(lo, hi, points) if hi > lo else np.array([lo])
        F, _ = objectives(grid, time_fn, self.gain_model, self.config, compute_s)
        keep = _non_dominated(F)
        return float(grid[keep][choose_point(F[keep], self.config.rule, self.config.weights)])

    def worth(self, reason: str, time_fn: TimeFn, probe_cost_s: float = 0.0, compute_s: float = 0.0) -> bool:
        """Whether re-deciding for ``reason`` can gain more than it costs: the optimiser prices itself.

        * ``initial``: always (there is no ratio yet).
        * a gain probe (``reprobe``, ``gain``) costs ``probe_cost_s`` (the last probe's measured seconds,
          agreed over ranks). What it can buy is a better ratio until the next probe may come: at most one
          candidate step either way, i.e. the predicted step-time difference to the neighbouring candidates
          for ``min_probe_interval`` steps. A probe costing more is not taken.
        * a re-optimisation (``network``, ``period``): taken only when the rule's pick on a grid of ratios
          (:meth:`screen`) moved off the current ratio by more than a tenth of a candidate step: else
          NSGA-II would pick the same ratio and its CPU time would be lost.
        """
        if reason == "initial" or self.ratio is None or self.gain_model is None:
            return True
        cands = np.array(sorted(self.config.candidates))
        if self.needs_probe(reason):
            if probe_cost_s <= 0:
                return True
            here = float(np.asarray(time_fn(np.array([self.ratio])))[0])
            position = int(np.argmin(np.abs(np.log(cands) - math.log(self.ratio))))
            neighbours = cands[max(0, position - 1):position + 2]
            times = np.asarray(time_fn(neighbours), dtype=float)
            value = float(np.max(np.abs(times - here))) * self.config.min_probe_interval
            return value > probe_cost_s
        step = float(np.median(np.diff(np.log(cands)))) if len(cands) > 1 else 1.0
        return abs(math.log(self.screen(time_fn, compute_s)) - math.log(self.ratio)) > 0.1 * step

    def skip(self, step: int, reason: str, estimator: Any | None = None) -> None:
        """Log a re-decision :meth:`worth` declined (its timers restart, and the network estimate it was
        priced under becomes the reference, as if it had run)."""
        if self.needs_probe(reason):
            self._last_probe = step
        else:
            self._last_opt = step
            if estimator is not None:
                estimator.mark()
        self.events.append({"step": step, "reason": f"{reason} (not worth it)", "ratio": self.ratio})

    def fit_gains(self, step: int, ratios: Sequence[float], gains: Sequence[float]) -> GainModel:
        """Fit the gain model to probed (ratio, gain) pairs."""
        self.gain_model = GainModel(ratios, gains)
        self._last_probe = step
        frame = self.gain_model.frame()
        frame.insert(0, "step", step)
        self.probes.append(frame)
        return self.gain_model

    def optimize(
        self,
        step: int,
        reason: str,
        time_fn: TimeFn,
        *,
        compute_s: float = 0.0,
        estimator: Any | None = None,
        extra_columns: Callable[[np.ndarray], dict[str, Any]] | None = None,
    ) -> ParetoFront:
        """Build the front under the current time model, pick c, and remember why."""
        if self.gain_model is None:
            raise InputError("gain_model", None, "fit_gains() before optimize()")
        front = pareto_front(time_fn, self.gain_model, self.config, compute_s=compute_s, extra_columns=extra_columns)
        estimate = estimator.mark() if estimator is not None else (math.nan, math.nan)
        if front.ratio != self.ratio:
            self._ewma, self._samples = None, 0
        self.ratio = front.ratio
        self.front = front
        self._last_opt = step
        front.info.update(step=step, reason=reason, alpha_s=estimate[0], beta_s_per_byte=estimate[1])
        self.fronts.append((step, front))
        point = front.point
        self.events.append({"step": step, "reason": reason, "ratio": front.ratio, "rule": front.rule,
                            "alpha_s": estimate[0], "beta_s_per_byte": estimate[1],
                            "pred_step_s": point["step_s"], "pred_gain": point["gain"],
                            "front_size": len(front.frame)})
        return front

    def observe_gain(self, gain: float | None) -> None:
        """One training step's measured gain at the current ratio (None/NaN are ignored)."""
        if gain is None or not math.isfinite(gain):
            return
        a = self.config.gain_ewma
        self._ewma = gain if self._ewma is None else (1 - a) * self._ewma + a * gain
        self._samples += 1

    def gain_drift(self) -> float:
        """|EWMA of the measured gain - the model's gain at c| / model gain (0 until enough samples)."""
        if self.gain_model is None or self.ratio is None or self._ewma is None:
            return 0.0
        if self._samples < self.config.gain_min_samples:
            return 0.0
        expected = float(self.gain_model(self.ratio))
        return abs(self._ewma - expected) / expected if expected > 0 else 0.0

    def events_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.events)

    def fronts_frame(self) -> pd.DataFrame:
        """Every front built, stacked, with the step and whether the row was the chosen point."""
        parts = []
        for step, front in self.fronts:
            frame = front.frame.copy()
            frame.insert(0, "step", step)
            frame["chosen"] = np.arange(len(frame)) == front.chosen
            frame["reason"] = front.info.get("reason")
            parts.append(frame)
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
