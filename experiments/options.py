"""Option names the CLI lists in ``--help`` whose owners import torch, and the checks of their commands.

Why: every ``flexcomm`` command registers its parser at start-up; importing torch-backed modules for
their option lists cost every command (even ``flexcomm clusters``) seconds, and a refused option must not
cost torch's import either (docs/errors-and-limits.md). A test keeps each mirror equal to its owner.
(Torch-free owners keep their own lists: :mod:`emulation.options`, :mod:`real_backend.options`.)
"""

from __future__ import annotations

from typing import Any

from flexcomm.compression.moo_config import MOOConfig
from flexcomm.costmodel.errors import InputError
from flexcomm.emulation.config import EmulationConfig

#: Rules that pick the operating point on a Pareto front (:data:`compression.moo.RULES`).
MOO_RULES = ("asf", "knee", "utopia")
#: The reproductions in their numbered order (:data:`experiments.reproductions.REPRODUCTIONS`: 1 is crossover).
REPRODUCTION_IDS = ("crossover", "speedup", "pareto", "adaptation", "accuracy-time", "scaling", "table4", "megatron",
                    "korthikanti")


def check_reproduction_ids(ids: list[str]) -> None:
    """What :func:`experiments.reproductions.resolve` refuses, refused without importing the studies."""
    numbers = {str(n) for n in range(1, len(REPRODUCTION_IDS) + 1)}
    expected = f"all, a number 1-{len(REPRODUCTION_IDS)} or one of " + ", ".join(REPRODUCTION_IDS)
    keys = [str(raw).strip().lower() for raw in ids]
    for raw, key in zip(ids, keys, strict=True):
        if key != "all" and key not in REPRODUCTION_IDS and key not in numbers:
            raise InputError("ID", raw, expected)
    if not keys:
        raise InputError("ID", "(none)", expected)


def pareto_configs(workload: str, cluster: Any, *, workers: int, warmup_steps: int, probe_steps: int,
                   grid_points: int, rule: str, price_params: int | None, compute_time_s: float | None,
                   seed: int) -> tuple[Any, Any]:
    """The (MOOConfig, validated EmulationConfig) of :func:`experiments.pareto.pareto_study`, built and checked
    without torch: ``flexcomm pareto`` refuses a bad option before the study imports it."""
    if rule not in MOO_RULES:
        raise InputError("rule", rule, "one of " + ", ".join(MOO_RULES))
    for name, value, low in (("warmup-steps", warmup_steps, 1), ("probe-steps", probe_steps, 1),
                             ("grid-points", grid_points, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(name, value, f"an integer >= {low}")
    moo = MOOConfig(probe_steps=probe_steps, rule=rule, seed=seed + 1)
    config = EmulationConfig(workload=workload, workers=workers, cluster=cluster, strategy="moo",
                             steps=warmup_steps, seed=seed, eval_every=warmup_steps, price_params=price_params,
                             compute_time_s=compute_time_s, moo=moo)
    config.validate()
    return moo, config
