"""Gradient compression written once, run by both the in-process emulation and torch.distributed.

A :class:`~compression.base.Compressor` issues its collectives on a
:class:`~compression.comm.Communicator`: :class:`~compression.comm.LocalCommunicator` holds all N
workers in one process (emulation, tests), :class:`~compression.comm.TorchDistCommunicator` is one
rank of a real process group (DDP comm hooks). See :mod:`compression.compressors` for the schemes
and their exact payloads.

Emulation::

    comm = LocalCommunicator(4)
    comp = make_compressor("topk-ar", 0.01, owner="star")
    aggregates, stats, _ = comp.exchange(per_worker_flat_grads, comm)

A DDP hook on a real rank (``exchange`` never writes into the bucket; state is kept per bucket index)::

    def hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        comp, comm = state  # comm = TorchDistCommunicator()
        result = comp.exchange([bucket.buffer()], comm, key=bucket.index())
        fut = torch.futures.Future()
        fut.set_result(result.aggregates[0])
        return fut
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexcomm._lazy import lazy_getattr

#: public name -> module that defines it. Lazy so that ``flexcomm.compression.moo`` (the ratio optimiser,
#: needed to validate a command's options) does not import torch on the way.
_LAZY: dict[str, str] = {
    "Compressor": "flexcomm.compression.base",
    "ExchangeResult": "flexcomm.compression.base",
    "StepStats": "flexcomm.compression.base",
    "CollectiveRecord": "flexcomm.compression.comm",
    "Communicator": "flexcomm.compression.comm",
    "LocalCommunicator": "flexcomm.compression.comm",
    "TorchDistCommunicator": "flexcomm.compression.comm",
    "COMPRESSORS": "flexcomm.compression.compressors",
    "make_compressor": "flexcomm.compression.compressors",
}

__all__ = [
    "COMPRESSORS",
    "CollectiveRecord",
    "Communicator",
    "Compressor",
    "ExchangeResult",
    "LocalCommunicator",
    "StepStats",
    "TorchDistCommunicator",
    "make_compressor",
]


__getattr__ = lazy_getattr("flexcomm.compression", _LAZY, globals())

if TYPE_CHECKING:
    from flexcomm.compression.base import Compressor, ExchangeResult, StepStats
    from flexcomm.compression.comm import CollectiveRecord, Communicator, LocalCommunicator, TorchDistCommunicator
    from flexcomm.compression.compressors import COMPRESSORS, make_compressor
