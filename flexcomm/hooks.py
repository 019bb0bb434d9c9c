"""DDP communication hooks for every flexcomm compressor: ``flexcomm.hooks.register(ddp, "flexible", 0.01)``.

The hooks themselves live in :mod:`flexcomm.real_backend.hooks` (one generic hook running any compressor on
this rank's bucket, torch's own PowerSGD hook, the flexible and MOO strategies with rank-agreed decisions);
this module is the public door: it also builds the cost model from a cluster or a link given as unit strings,
so the log's predicted times and the adaptive strategies' prior come for free::

    state = flexcomm.hooks.register(ddp, "topk-ar", 0.01, cluster="8x1-10gbe", log_path="exchanges.csv")
    ...; loss.backward(); optimizer.step(); state.take_steps()[-1]   # bytes, predicted/measured comm, scheme

Registered without any of ``cost_model``, ``cluster``, ``latency``/``bandwidth`` or ``profile``, a hook warns
that its predictions will be ``nan``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm._pricing import cost_model as build
from flexcomm.real_backend.hooks import RATIO_STRATEGIES, STRATEGIES, HookState
from flexcomm.real_backend.hooks import register as _register

if TYPE_CHECKING:
    import torch

    from flexcomm.costmodel.cluster import Cluster
    from flexcomm.costmodel.cost_model import CostModel

__all__ = ["RATIO_STRATEGIES", "STRATEGIES", "HookState", "register"]


def register(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    strategy: str,
    ratio: float | None = None,
    *,
    cost_model: CostModel | None = None,
    cluster: str | Path | Cluster | None = None,
    latency: float | str | None = None,
    bandwidth: float | str | None = None,
    profile: str | Path | None = None,
    log_path: str | Path | None = None,
    **options: Any,
) -> HookState:
    """Register ``strategy``'s hook on ``ddp_model`` (see :data:`STRATEGIES`) and return its state.

    The cost model is ``cost_model``, or the one ``cluster`` / ``latency`` + ``bandwidth`` / ``profile``
    describe (as ``flexcomm cost`` reads them). ``options`` go to
    :func:`flexcomm.real_backend.hooks.register` (``group``, ``powersgd_rank``, ``moo_config``, and the
    compressor's own such as ``index_dtype`` or ``hysteresis``).
    """
    if cost_model is None and any(v is not None for v in (cluster, latency, bandwidth, profile)):

        cost_model = build(cluster=cluster, profile=profile, latency=latency, bandwidth=bandwidth)
    return _register(ddp_model, strategy, ratio, cost_model=cost_model, log_path=log_path, **options)
