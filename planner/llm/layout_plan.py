"""One current transformer (a preset or a HuggingFace config.json) planned on a cluster: the layout search, its
checks and the layouts a reader asked to see (``--tp``/``--pp``), as data.

Why apart from :mod:`planner.llm.layout_search`: the search prices layouts of an :class:`Architecture` it is
given; this is the question a user asks (a model by name, a cluster by name, sizes that may be typos), checked
once here so ``flexcomm plan --model <preset>`` and ``flexcomm.plan(<preset>, ...)`` refuse the same inputs with
the same line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.planner.llm.architecture import Architecture
from flexcomm.planner.llm.hf_config import model_architecture
from flexcomm.planner.llm.layout import check_capacity_factor
from flexcomm.planner.llm.layout_search import LayoutCost, LayoutSearch, plan_layouts
from flexcomm.planner.plan_options import at_least

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LayoutPlan", "plan_layout_model"]


@dataclass(frozen=True)
class LayoutPlan:
    """The search of one model's layouts on one cluster, and the fitting layouts with the asked TP/PP sizes."""

    arch: Architecture
    cluster_name: str
    search: LayoutSearch
    ranked: list[LayoutCost]  # the search's fitting layouts with the asked --tp/--pp, fastest first

    @property
    def best(self) -> LayoutCost:
        return self.ranked[0]

    def table(self) -> pd.DataFrame:
        """Every priced layout (``layouts.csv``): the fitting ones first, fastest first."""
        import pandas as pd

        rows = [{"layout": c.layout.label, **dict(vars(c.layout)), "step_s": c.step_s,
                 "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu, "memory_GiB": c.memory.total / 2**30,
                 "fits": c.fits, **{f"{name}_s": value for name, value in c.parts().items()}}
                for c in self.search.costs]
        return pd.DataFrame.from_records(rows).sort_values(["fits", "step_s"], ascending=[False, True])

    def model_tflops_per_gpu(self) -> float:
        return self.best.tokens_per_s_per_gpu * self.arch.counted_flops_per_token(self.search.seq_len) / 1e12

    def summary(self) -> dict[str, Any]:
        """The best layout and the job it was searched for (``best_layout.json``)."""
        arch, found, best = self.arch, self.search, self.best
        return {"model": arch.name, "source": arch.source, "parameters": arch.parameters,
                "active_parameters": arch.active_parameters, "cluster": self.cluster_name, "gpus": found.gpus,
                "batch_size": found.global_batch, "seq_len": found.seq_len, "precision": found.precision,
                "layout": vars(best.layout), "label": best.layout.label, "step_s": best.step_s,
                "tokens_per_s_per_gpu": best.tokens_per_s_per_gpu, "model_tflops_per_gpu": self.model_tflops_per_gpu(),
                "memory_bytes": best.memory.total, "parts_s": best.parts()}


def plan_layout_model(model: str | Architecture, cluster: str | Path | Cluster, *, gpus: int | None = None,
                      batch_size: int | None = None, seq_len: int | None = None, precision: str | None = None,
                      capacity_factor: float | None = None, tp: int | None = None,
                      pp: int | None = None) -> LayoutPlan:
    """Every layout of ``model`` on ``gpus`` GPUs of ``cluster`` priced and ranked, keeping the fitting ones of
    TP size ``tp`` and PP size ``pp`` when given (a size no fitting layout uses is refused, naming the sizes
    that fit). Sizes given as 0 are typos, not "the default": refused."""
    arch = model_architecture(model) if isinstance(model, str) else model
    for name, value in (("gpus", gpus), ("batch-size", batch_size), ("seq-len", seq_len)):
        at_least(name, value, 1)
    check_capacity_factor(capacity_factor, arch, field="capacity-factor")
    base = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)
    found = plan_layouts(arch, base, gpus=gpus, batch_size=batch_size, seq_len=seq_len,
                         precision=precision or "bf16", capacity_factor=capacity_factor)
    ranked = [c for c in found.ranked if (tp is None or c.layout.tp == tp) and (pp is None or c.layout.pp == pp)]
    if not ranked:
        raise InputError("tp" if tp is not None else "pp", tp or pp,
                         "a size some fitting layout uses (" + ", ".join(sorted(
                             {f"t{c.layout.tp}-p{c.layout.pp}" for c in found.ranked[:20]})) + ")")
    return LayoutPlan(arch, base.name, found, ranked)
