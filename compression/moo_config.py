"""The ratio optimiser's settings (:class:`MOOConfig`), checked without numpy, pandas or scipy.

Why apart from :mod:`compression.moo`: a command builds and checks these from its flags before the
optimiser's imports (most of a second on a small machine), so a bad ``--moo-rule`` fails at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flexcomm.costmodel.errors import InputError

RULES = ("asf", "knee", "utopia")  #: also listed in experiments.options for the CLI (tested equal)
#: The paper's candidate ratios (fraction of elements kept).
PAPER_CANDIDATES = (0.1, 0.033, 0.011, 0.004, 0.001)


@dataclass(frozen=True)
class MOOConfig:
    """Settings of the ratio optimiser; the defaults are the paper's (and its authors' code)."""

    candidates: tuple[float, ...] = PAPER_CANDIDATES
    probe_steps: int = 10
    pop_size: int = 40
    n_offsprings: int = 10
    n_gen: int = 40
    sbx_prob: float = 0.9
    sbx_eta: float = 15.0
    pm_eta: float = 20.0
    bounds: tuple[float, float] | None = None  #: default: the candidates' range
    log_search: bool = False  #: search log10(c) instead of c (the paper searches c)
    rule: str = "asf"
    weights: tuple[float, float] = (0.6, 0.4)  #: (time, gain) for the ASF rule
    time_objective: str = "time"  #: "time" (minimise step time) or "efficiency" (maximise compute/step)
    gain_objective: str = "inverse"  #: "inverse" (minimise 1/gain, the paper) or "negative" (minimise -gain)
    seed: int = 1
    reeval_every: int = 100  #: re-optimise every W steps (0: never on a timer)
    reprobe_every: int = 0  #: re-probe gains every R steps (0: only at start and on gain drift)
    estimate_change: float = 0.1  #: re-optimise when alpha or beta moved this much (relative)
    gain_change: float = 0.1  #: re-probe when the gain EWMA drifts this much from the model
    gain_ewma: float = 0.05  #: smoothing factor of the gain EWMA
    gain_min_samples: int = 20  #: steps at a ratio before its EWMA is trusted
    min_probe_interval: int = 100  #: steps between two gain probes (bounds the probes' cost)
    min_reopt_interval: int = 5  #: steps between two network-triggered optimisations

    def __post_init__(self) -> None:
        cands = tuple(float(c) for c in self.candidates)
        if not cands or any(not (0 < c <= 1) or not math.isfinite(c) for c in cands):
            raise InputError("candidates", list(self.candidates), "ratios in (0, 1]")
        object.__setattr__(self, "candidates", cands)
        lo, hi = self.bounds if self.bounds is not None else (min(cands), max(cands))
        if not (0 < lo <= hi <= 1):
            raise InputError("bounds", self.bounds, "0 < low <= high <= 1")
        object.__setattr__(self, "bounds", (float(lo), float(hi)))
        for name in ("probe_steps", "pop_size", "n_offsprings", "n_gen", "gain_min_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name, value, "an integer >= 1")
        for name in ("reeval_every", "reprobe_every", "min_probe_interval", "min_reopt_interval", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(name, value, "an integer >= 0")
        if self.rule not in RULES:
            raise InputError("rule", self.rule, "one of " + ", ".join(RULES))
        if self.time_objective not in ("time", "efficiency"):
            raise InputError("time_objective", self.time_objective, "time or efficiency")
        if self.gain_objective not in ("inverse", "negative"):
            raise InputError("gain_objective", self.gain_objective, "inverse or negative")
        if len(self.weights) != 2 or any(w <= 0 for w in self.weights):
            raise InputError("weights", self.weights, "two positive weights (time, gain)")
        if not 0 < self.gain_ewma <= 1:
            raise InputError("gain_ewma", self.gain_ewma, "a smoothing factor in (0, 1]")
