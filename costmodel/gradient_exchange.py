"""A data-parallel group's gradient exchange in any scheme, as the planners price it.

Why one function: ``whatif`` and ``simulate`` price a scheme's exchange through :class:`CostModel` (NCCL's
calls where the cluster describes its GPU fabric, the formulas on a link otherwise), its device work through
:mod:`costmodel.compression_compute` and its memory through :func:`costmodel.compressed.scheme_memory_bytes`.
The planners' data-parallel groups take ``--scheme`` too, and price it here the same way, so a plan with
PowerSGD costs what the what-if says PowerSGD costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexcomm.costmodel.compressed import (
    PRICED_SCHEMES,
    SchemeAlgorithms,
    SparsePayload,
    scheme_memory_bytes,
)
from flexcomm.costmodel.compression_compute import device_compression_seconds
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError

#: The fraction of elements Top-k keeps unless told (what ``simulate`` and ``cost`` default to).
DEFAULT_TOPK_RATIO = 0.01


@dataclass(frozen=True)
class GradientScheme:
    """How a data-parallel group exchanges its gradients: a scheme of :data:`PRICED_SCHEMES` and Top-k's
    ratio."""

    scheme: str = "dense"
    ratio: float = DEFAULT_TOPK_RATIO

    def __post_init__(self) -> None:
        if self.scheme not in PRICED_SCHEMES:
            raise InputError("scheme", self.scheme, "one of " + ", ".join(PRICED_SCHEMES))
        if isinstance(self.ratio, bool) or not 0 < self.ratio <= 1:
            raise InputError("ratio", self.ratio, "a fraction of elements kept in (0, 1]")

    @property
    def dense(self) -> bool:
        return self.scheme == "dense"

    def exchange_seconds(self, numel: float, ranks: int, model: CostModel, nccl: bool,
                         payload: SparsePayload | None = None) -> float:
        """One exchange of ``numel`` fp32 gradient elements over ``ranks`` ranks: every call as NCCL runs it
        (``nccl``, a group ``model``'s cluster packs onto its nodes) or by the formulas on ``model``'s link."""
        if ranks <= 1 or numel <= 0:
            return 0.0
        payload = payload or SparsePayload()
        if nccl:
            calls = model.scheme_choices(self.scheme, numel, ranks, self.ratio, payload,
                                         SchemeAlgorithms(library="nccl"))
            return float(sum(choice.seconds for _, choice in calls))
        return float(model.scheme(self.scheme, numel, ranks, self.ratio, payload, SchemeAlgorithms()).total)

    def device_seconds(self, numel: float, device, matrices: list[float] | None = None) -> float:
        """The device work of compressing ``numel`` elements on ``device`` (zero for dense)."""
        return 0.0 if self.dense else device_compression_seconds(self.scheme, numel, device, matrices=matrices)

    def memory_bytes(self, numel: float, payload: SparsePayload | None = None) -> float:
        """Error-feedback memory the scheme keeps for ``numel`` elements (zero for dense and casts)."""
        return scheme_memory_bytes(self.scheme, numel, payload)
