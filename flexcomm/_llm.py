"""Current LLMs in the Python API: architectures, the layout planner and the published-throughput validation.

Thin calls of the engines themselves (no argv, no files): the same functions ``flexcomm plan --model <preset>``
and ``flexcomm validate --published-llm`` call, returning their data.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.experiments.published_llm import predict, read_corpus
from flexcomm.planner.llm.hf_config import model_architecture
from flexcomm.planner.llm.layout_search import plan_layouts as search

if TYPE_CHECKING:
    import pandas as pd

    from flexcomm.costmodel.cluster import Cluster
    from flexcomm.planner.llm.architecture import Architecture
    from flexcomm.planner.llm.layout_search import LayoutSearch


def architecture(model: str) -> Architecture:
    """A preset (``llama3-70b``, ``deepseek-v3``, ...) or a HuggingFace ``config.json`` path as an Architecture
    (parameter counts, FLOPs per token)."""
    return model_architecture(model)


def plan_layouts(model: str | Architecture, cluster: str | Cluster, *, gpus: int | None = None,
                 batch_size: int | None = None, seq_len: int | None = None, precision: str = "bf16",
                 capacity_factor: float | None = None) -> LayoutSearch:
    """Every layout of ``model`` on ``gpus`` GPUs of ``cluster`` (default: its own), priced and ranked:
    ``.best.layout``, ``.best.tokens_per_s_per_gpu``, ``.best.parts()``, ``.ranked``. ``batch_size`` counts
    sequences (default 4 per GPU), ``seq_len`` tokens (default 4,096); ``precision``: bf16, fp8, fp8-ds, mxfp8
    or nvfp4; ``capacity_factor``: None (dropless) or each expert's multiple of its balanced share. The engine
    ``flexcomm plan --model`` calls."""
    arch = architecture(model) if isinstance(model, str) else model
    return search(arch, load_cluster(cluster), gpus=gpus, batch_size=batch_size, seq_len=seq_len,
                  precision=precision, capacity_factor=capacity_factor)


def validate_published_llm(file: str | Path | None = None, *, rank: bool = True) -> pd.DataFrame:
    """Every row of NVIDIA's published LLM pre-training tables (or ``file`` in their layout) predicted at its own
    layout beside the naive baseline: one row each, as ``llm.csv`` of ``flexcomm validate --published-llm``."""
    return predict(read_corpus(file), rank=rank)
