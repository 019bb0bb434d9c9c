"""flexcomm's shared cost model: units, the cluster object, collective formulas, calibration.

The names most code needs::

    from flexcomm.costmodel import CostModel, load_cluster, predict
    CostModel.from_cluster(load_cluster("4x8-a100-ib")).collective("allreduce", "ring", 64 * 2**20, 32)
    predict("allreduce", "ring", sizes, ranks, latency_s, bandwidth_Bps)  # numpy arrays, vectorised

Submodules import lazily so a sweep does not pay for pydantic or scipy it does not use.
"""

from __future__ import annotations

from typing import Any

from flexcomm.costmodel.collectives import FORMULAS, Coefficients, CostBreakdown, algorithms, formula, predict
from flexcomm.costmodel.cost_model import CostModel, LinkParams
from flexcomm.costmodel.errors import InputError

__all__ = [
    "FORMULAS", "Coefficients", "CostBreakdown", "CostModel", "InputError", "LinkParams", "algorithms",
    "formula", "predict", "load_cluster", "Cluster", "CalibrationProfile", "fit",
]

_LAZY = {
    "load_cluster": "flexcomm.costmodel.cluster", "Cluster": "flexcomm.costmodel.cluster",
    "CalibrationProfile": "flexcomm.costmodel.calibration", "fit": "flexcomm.costmodel.calibration",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'costmodel' has no attribute {name!r}")
