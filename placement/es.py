"""Evolution strategies over placements: asynchronous (AES-RL style) and synchronous, same wall clock.

A candidate is a real matrix ``x`` of logits, one row per unit (a contracted chain of ops, see
``coarsen``) and one column per device; its placement puts each unit on ``argmax`` of its row.
Evaluating a candidate means simulating it and then, to stand for measuring it on the machines,
sleeping ``measure_steps`` x its simulated step time x a log-normal factor (``eval_jitter``): as
with real measurements, evaluations take very different times.

* **Async ES** (AES-RL, Lee et al. 2020): workers never wait for each other. The moment one
  evaluation finishes, the mean moves towards it, ``mean <- (1 - p) mean + p x``, with ``p`` from a
  rule on its step time against the last ``window`` step times, whose ``elite`` quantile is the
  reference ``r`` (``linear``: p_max x how far into the elite share of the window it ranks;
  ``sigmoid``: p_max x sigmoid(2 (r - t) / std); ``absolute``: p_max if t < r else 0;
  ``relative``: p_max x (r - t) / (r - best of window), clipped to [0, 1]) -- our reading of
  AES-RL's four rules. The per-dimension variance is an online variance over an exponential
  window of ~1/p accepted steps, ``var <- (1 - p) var + p (x - mean)^2``; then that worker gets a
  fresh sample at once.
* **Sync ES**: generations of ``population`` candidates spread over the same workers; the
  generation waits for its slowest evaluation; the mean becomes the log-rank-weighted mean of the
  ``elite`` share, and the variance their spread around the old mean (EMNA-style), clipped to the
  same bounds.
* **Hybrid** (``rl_share`` > 0, async only): instead of drawing an ES sample, the master does a PPO
  iteration of a grouper-placer policy (its batch priced in the master) and submits the best of
  that batch and the policy's greedy placement as the candidate, with probability ``q`` steered
  towards the target share ``rl_share`` of evaluations coming from RL.

Both start from a placement (by default the best baseline's), evaluated first; the initial sigma
is set so that a first sample moves ``flips`` units on average.

Both track the best placement evaluated and a curve of best step time against wall time, so they
can be compared under the same budget. With processes the async order depends on the OS, so async
runs are reproducible only in distribution; sync ES with threads or one worker is deterministic.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.processes import tied_pool
from flexcomm.placement.coarsen import chain_units, expand, unit_devices_of
from flexcomm.placement.simulator import PlacementProblem

RULES = ("linear", "sigmoid", "absolute", "relative")

_WORKER_PROBLEM: PlacementProblem | None = None


def _init_worker(problem: PlacementProblem) -> None:
    global _WORKER_PROBLEM
    _WORKER_PROBLEM = problem
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _evaluate(placement: list[int], measure_steps: float, factor: float,
              problem: PlacementProblem | None = None) -> tuple[float, float, bool]:
    """(penalised step time, seconds the evaluation took, feasible): simulate, then 'measure'."""
    start = time.perf_counter()
    prob = problem if problem is not None else _WORKER_PROBLEM
    assert prob is not None, "worker not initialised"
    sim = prob.simulate(placement, validate=False)
    if measure_steps > 0:
        time.sleep(measure_steps * sim.makespan_s * factor)
    return sim.step_time_s, time.perf_counter() - start, sim.feasible


@dataclass
class ESConfig:
    """Knobs shared by async and sync ES (same defaults, so the comparison is like for like)."""

    workers: int = 4
    budget_s: float = 10.0
    max_evaluations: int | None = None
    sigma0: float | None = None  # None: set so that a first sample moves ``flips`` units on average
    flips: float = 1.0
    sigma_min: float = 0.05
    sigma_max: float = 1.0
    p_max: float = 0.3  # async: largest step of the mean towards one candidate; variance window ~ 1/p_max
    rule: str = "linear"
    window: int = 20  # async: recent step times a candidate is ranked against
    elite: float = 0.2  # async: reference quantile of the window; sync: share of a generation recombined
    population: int = 10  # sync: candidates per generation
    measure_steps: float = 0.0
    eval_jitter: float = 0.5
    executor: str = "process"  # process | thread
    seed: int = 0
    max_unit_ops: int | None = None
    rl_share: float = 0.0  # async only: target share of evaluations from the PPO policy

    def validate(self) -> None:
        if self.workers < 1:
            raise InputError("workers", self.workers, "an integer >= 1")
        if not self.budget_s > 0:
            raise InputError("budget_s", self.budget_s, "a number of seconds > 0")
        if self.rule not in RULES:
            raise InputError("rule", self.rule, "one of " + ", ".join(RULES))
        if not 0 < self.p_max <= 1:
            raise InputError("p_max", self.p_max, "a number in (0, 1]")
        if not 0 < self.elite <= 1:
            raise InputError("elite", self.elite, "a fraction in (0, 1]")
        if self.window < 2:
            raise InputError("window", self.window, "an integer >= 2")
        if self.population < 2:
            raise InputError("population", self.population, "an integer >= 2")
        if self.executor not in ("process", "thread"):
            raise InputError("executor", self.executor, "process or thread")
        if not 0 <= self.rl_share < 1:
            raise InputError("rl_share", self.rl_share, "a fraction in [0, 1)")
        if self.measure_steps < 0 or self.eval_jitter < 0:
            raise InputError("measure_steps", (self.measure_steps, self.eval_jitter), "numbers >= 0")


@dataclass
class SearchResult:
    """Best placement found, and the search curve: (wall s, evaluations, best step time s) rows."""

    method: str
    placement: list[int]
    step_time_s: float
    feasible: bool
    evaluations: int
    wall_s: float
    curve: list[tuple[float, int, float]] = field(default_factory=list)
    busy_worker_s: float = 0.0  # summed evaluation seconds (worker utilisation = busy / workers / wall)
    rl_evaluations: int = 0


class _Tracker:
    """Best-so-far and the curve, shared by both searches."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.best = math.inf
        self.best_placement: list[int] | None = None
        self.best_feasible = False
        self.evaluations = 0
        self.busy = 0.0
        self.curve: list[tuple[float, int, float]] = []

    def add(self, placement: list[int], step: float, spent: float, feasible: bool) -> None:
        self.evaluations += 1
        self.busy += spent
        if step < self.best:
            self.best, self.best_placement, self.best_feasible = step, placement, feasible
            self.curve.append((time.perf_counter() - self.start, self.evaluations, step))


class _Space:
    """Logit matrices over units x devices, and the placement each stands for."""

    def __init__(self, problem: PlacementProblem, init: list[int], max_unit_ops: int | None) -> None:
        self.problem = problem
        self.units = chain_units(problem, max_unit_ops, respect=init)
        self.D = problem.devices.count
        self.mean = np.zeros((len(self.units), self.D))
        self.mean[np.arange(len(self.units)), unit_devices_of(self.units, init)] = 1.0
        self.init = self.placement(self.mean)

    def sigma0(self, flips: float) -> float:
        """The sigma at which a sample of the one-hot mean moves ``flips`` units on average.

        A unit moves when one of the other D - 1 logits, each N(0, s^2) off the winner's 1 + N(0, s^2),
        overtakes it: P ~ (D - 1) P(N(0, 2 s^2) > 1).
        """
        if self.D < 2:
            return 1.0
        q = min(0.5, flips / len(self.units)) / (self.D - 1)
        from scipy.stats import norm

        return float(1.0 / (math.sqrt(2.0) * norm.isf(q)))

    def placement(self, x: np.ndarray) -> list[int]:
        return expand(self.units, np.argmax(x, axis=1).tolist(), len(self.problem.nodes))


@contextmanager
def _executor(cfg: ESConfig, problem: PlacementProblem) -> Iterator[Executor]:
    """A worker pool that, on leaving, abandons what is still running (the budget is over)."""
    if cfg.executor == "thread":
        pool: Executor = ThreadPoolExecutor(cfg.workers, initializer=_init_worker, initargs=(problem,))
    else:
        pool = tied_pool(cfg.workers, initializer=_init_worker, initargs=(problem,), context="fork",
                         ignore_sigint=False)
    try:
        yield pool
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _warm(pool: Executor, cfg: ESConfig, placement: list[int], problem: PlacementProblem) -> tuple[float, bool]:
    """Start every worker before the clock starts (process start-up is not search time).

    Each prices the start placement, so the search's first point is where it starts from.
    """
    prob = problem if cfg.executor == "thread" else None
    results = [f.result() for f in [pool.submit(_evaluate, placement, 0.0, 1.0, prob) for _ in range(cfg.workers)]]
    return results[0][0], results[0][2]


def _submit(pool: Executor, cfg: ESConfig, problem: PlacementProblem, placement: list[int],
            rng: np.random.Generator) -> Future:
    factor = float(np.exp(rng.normal(0.0, cfg.eval_jitter))) if cfg.eval_jitter > 0 else 1.0
    prob = problem if cfg.executor == "thread" else None
    return pool.submit(_evaluate, placement, cfg.measure_steps, factor, prob)


def _clip_sigma(var: np.ndarray, cfg: ESConfig) -> np.ndarray:
    return np.clip(np.sqrt(var), cfg.sigma_min, cfg.sigma_max)


def _step_size(rule: str, p_max: float, t: float, window: deque, elite: float = 0.5) -> float:
    """How far the mean moves towards a candidate of step time ``t`` (lower is better).

    The reference ``med`` is the ``elite`` quantile of the window (0.5: its median).
    """
    if not window:
        return p_max
    w = np.fromiter(window, float)
    med = float(np.quantile(w, elite))
    if rule == "linear":
        return p_max * max(0.0, float(np.mean(t < w)) - (1.0 - elite)) / elite
    if rule == "absolute":
        return p_max if t < med else 0.0
    if rule == "relative":
        best = float(w.min())
        if med <= best:
            return p_max if t <= best else 0.0
        return p_max * float(np.clip((med - t) / (med - best), 0.0, 1.0))
    scale = float(w.std()) or abs(med) * 1e-3 or 1e-12
    return p_max / (1.0 + math.exp(-2.0 * (med - t) / scale))


def async_es(problem: PlacementProblem, init: list[int], cfg: ESConfig,
             progress: Callable[[float, float], None] | None = None,
             rl_policy: object | None = None) -> SearchResult:
    """AES-RL-style search; ``progress(fraction of budget, best)`` is called as evaluations finish."""
    cfg.validate()
    rng = np.random.default_rng(cfg.seed)
    space = _Space(problem, init, cfg.max_unit_ops)
    mean = space.mean.copy()
    var = np.full_like(mean, (cfg.sigma0 or space.sigma0(cfg.flips)) ** 2)
    times: deque = deque(maxlen=cfg.window)
    q = cfg.rl_share  # probability of an RL step instead of an ES sample
    rl_done = 0
    with _executor(cfg, problem) as pool:
        init_time, init_feasible = _warm(pool, cfg, space.init, problem)
        start = time.perf_counter()
        tracker = _Tracker(start)
        tracker.add(space.init, init_time, 0.0, init_feasible)
        pending: dict[Future, tuple[np.ndarray, list[int], bool]] = {}

        def sample() -> None:
            nonlocal q, rl_done
            from_rl = False
            if rl_policy is not None and cfg.rl_share > 0 and rng.random() < q:
                placement = rl_policy.step_and_propose()  # type: ignore[attr-defined]
                x = np.full_like(mean, 0.0)
                x[np.arange(len(space.units)), unit_devices_of(space.units, placement)] = 1.0
                placement = space.placement(x)
                from_rl = True
            else:
                x = mean + _clip_sigma(var, cfg) * rng.standard_normal(mean.shape)
                placement = space.placement(x)
            pending[_submit(pool, cfg, problem, placement, rng)] = (x, placement, from_rl)

        sample_count = 0
        for _ in range(cfg.workers):
            sample()
            sample_count += 1
        while pending:  # evaluations still running when the budget ends are abandoned, not waited for
            left = cfg.budget_s - (time.perf_counter() - start)
            done, _ = wait(list(pending), timeout=max(left, 0.0), return_when=FIRST_COMPLETED)
            if not done:
                break
            for fut in sorted(done, key=lambda f: pending[f][1]):
                x, placement, from_rl = pending.pop(fut)
                step, spent, feasible = fut.result()
                tracker.add(placement, step, spent, feasible)
                if from_rl:
                    rl_done += 1
                if cfg.rl_share > 0:  # steer q towards the target share of RL evaluations
                    share = rl_done / tracker.evaluations
                    q = float(np.clip(q + 0.05 * (cfg.rl_share - share), 0.0, 1.0))
                p = _step_size(cfg.rule, cfg.p_max, step, times, cfg.elite)
                times.append(step)
                if p > 0:  # variance: exponential window of ~1/p accepted steps, around the mean they came from
                    var = (1.0 - p) * var + p * (x - mean) ** 2
                    mean = (1.0 - p) * mean + p * x
                elapsed = time.perf_counter() - start
                if progress is not None:
                    progress(min(1.0, elapsed / cfg.budget_s), tracker.best)
                out_of_evals = cfg.max_evaluations is not None and sample_count >= cfg.max_evaluations
                if elapsed < cfg.budget_s and not out_of_evals:
                    sample()
                    sample_count += 1
        wall = time.perf_counter() - start
    assert tracker.best_placement is not None
    return SearchResult("async-es", tracker.best_placement, tracker.best, tracker.best_feasible,
                        tracker.evaluations, wall, tracker.curve, tracker.busy, rl_done)


def sync_es(problem: PlacementProblem, init: list[int], cfg: ESConfig,
            progress: Callable[[float, float], None] | None = None) -> SearchResult:
    """Generational ES: each generation waits for all its evaluations, then updates once."""
    cfg.validate()
    rng = np.random.default_rng(cfg.seed)
    space = _Space(problem, init, cfg.max_unit_ops)
    mean = space.mean.copy()
    var = np.full_like(mean, (cfg.sigma0 or space.sigma0(cfg.flips)) ** 2)
    lam = cfg.population
    mu = max(1, int(round(cfg.elite * lam)))
    weights = np.log(mu + 0.5) - np.log(np.arange(1, mu + 1))
    weights /= weights.sum()
    with _executor(cfg, problem) as pool:
        init_time, init_feasible = _warm(pool, cfg, space.init, problem)
        start = time.perf_counter()
        tracker = _Tracker(start)
        tracker.add(space.init, init_time, 0.0, init_feasible)
        sampled = 0
        while time.perf_counter() - start < cfg.budget_s:
            if cfg.max_evaluations is not None and sampled >= cfg.max_evaluations:
                break
            xs = [mean + _clip_sigma(var, cfg) * rng.standard_normal(mean.shape) for _ in range(lam)]
            placements = [space.placement(x) for x in xs]
            futures = [_submit(pool, cfg, problem, pl, rng) for pl in placements]
            sampled += lam
            # the barrier: the slowest evaluation sets the pace (cut off where the budget ends)
            finished, _ = wait(futures, timeout=max(cfg.budget_s - (time.perf_counter() - start), 0.0))
            for pl, fut in zip(placements, futures, strict=True):
                if fut in finished:
                    tracker.add(pl, *fut.result())
            if len(finished) < len(futures):
                break
            results = [f.result() for f in futures]
            order = np.argsort([r[0] for r in results], kind="stable")[:mu]
            chosen = np.stack([xs[k] for k in order])
            new_mean = np.tensordot(weights, chosen, axes=1)
            var = np.tensordot(weights, (chosen - mean) ** 2, axes=1)
            mean = new_mean
            if progress is not None:
                progress(min(1.0, (time.perf_counter() - start) / cfg.budget_s), tracker.best)
        wall = time.perf_counter() - start
    assert tracker.best_placement is not None
    return SearchResult("sync-es", tracker.best_placement, tracker.best, tracker.best_feasible,
                        tracker.evaluations, wall, tracker.curve, tracker.busy)
