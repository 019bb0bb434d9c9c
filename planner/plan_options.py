"""The options both parallel-plan engines take, checked once: the operator-graph planner
(:func:`planner.graph_plan.plan_graph`) and the transformer planner
(:func:`planner.llm.transformer_plan.plan_transformer`).

Why one module: ``flexcomm plan`` reaches either engine with the same flags (``--batch-size``, ``--memory-fraction``,
``--scheme``/``--ratio``, ...); two copies of their checks drifted apart before (a batch over
:data:`costmodel.limits.MAX_GLOBAL_BATCH` was refused by one planner only). Errors name the command line's flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.gradient_exchange import DEFAULT_TOPK_RATIO, GradientScheme
from flexcomm.costmodel.limits import MAX_GLOBAL_BATCH


def at_least(name: str, value: int | None, minimum: int) -> None:
    """``value`` (when given) is an integer, not a boolean, of at least ``minimum``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise InputError(name, value, f"an integer >= {minimum}")


def _fraction(name: str, value: float | None, expected: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, Real) or not 0 < float(value) <= 1):
        raise InputError(name, value, expected)


def check_top(top: int) -> None:
    """Plans in the markdown table and figure (a report option of both planners)."""
    at_least("top", top, 1)


def check_plan_options(batch_size: int | None, simulate_top: int, memory_fraction: float, efficiency: float | None,
                       sizes: Mapping[str, int | None]) -> None:
    """The options' own forms, checked before a cluster is read or a model built: ``batch_size`` (also against
    :data:`MAX_GLOBAL_BATCH`), ``simulate_top``, the two fractions, and ``sizes`` (model shape and parallel
    sizes, by parameter name: each at least 1 where given)."""
    at_least("batch-size", batch_size, 1)
    if batch_size is not None:
        MAX_GLOBAL_BATCH.check("batch-size", batch_size)
    at_least("simulate-top", simulate_top, 0)
    _fraction("memory-fraction", memory_fraction, "a fraction in (0, 1]")
    _fraction("efficiency", efficiency, "a fraction of peak in (0, 1]")
    for name, value in sizes.items():
        at_least(name.replace("_", "-"), value, 1)


def gradient_exchange(scheme: str, ratio: float) -> GradientScheme:
    """The data-parallel exchange a plan prices; ``ratio`` belongs to a Top-k scheme only (with ``dense`` a ratio
    other than the default is a mistake, not something to ignore)."""
    exchange = GradientScheme(scheme, ratio)
    if scheme == "dense" and ratio != DEFAULT_TOPK_RATIO:
        raise InputError("ratio", ratio, "--scheme topk-ag or topk-ar (the fraction Top-k keeps)")
    return exchange
