"""The simulated network an emulated run is priced on: a static cluster or the paper's dynamic C1/C2.

Why a module of its own: the emulated clock, the learned controller's traces and the speedup study all
read the same phase tables; keeping them beside the clock that uses them stops three copies drifting.
Each collective a step really issued is priced by the current phase's :class:`~costmodel.cost_model.CostModel`
(optionally with seeded, mean-one log-normal jitter); on a cluster with a ``gpu_fabric`` it is priced as
NCCL runs it (``library="nccl"``), whatever algorithm the emulated communicator names.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from flexcomm.costmodel.cluster import Cluster
from flexcomm.costmodel.collective_libraries.topology import packs_evenly
from flexcomm.costmodel.cost_model import CostModel

if TYPE_CHECKING:
    from flexcomm.compression.comm import CollectiveRecord

#: Tyagi & Swany's dynamic networks, (start epoch, latency s, bandwidth Gbit/s) and total epochs.
#: C1: latency 1 ms for epochs 0-24, 50 ms after; bandwidth 25 Gbit/s for 0-12, 1 for 13-36, 25 after.
#: C2: every 4 epochs (1 ms, 25G) -> (2, 20) -> (4, 15) -> (8, 10) -> (16, 5) -> (32, 1) for 20-27, then back.
DYNAMIC_NETWORKS: dict[str, tuple[list[tuple[float, float, float]], float]] = {
    "c1": ([(0, 1e-3, 25), (13, 1e-3, 1), (25, 50e-3, 1), (37, 50e-3, 25)], 50),
    "c2": ([(0, 1e-3, 25), (4, 2e-3, 20), (8, 4e-3, 15), (12, 8e-3, 10), (16, 16e-3, 5), (20, 32e-3, 1),
            (28, 16e-3, 5), (32, 8e-3, 10), (36, 4e-3, 15), (40, 2e-3, 20), (44, 1e-3, 25)], 48),
}


#: One phase of a clock: (first step, its cost model, latency s, bandwidth B/s).
Phase = tuple[int, CostModel, float, float]


class NetworkClock:
    """Seconds each collective takes on the simulated cluster at the current step (see module docstring)."""

    def __init__(self, phases: list[Phase], price_scale: float = 1.0, jitter: float = 0.0, seed: int = 0,
                 library: str | None = None) -> None:
        self.phases = phases
        self.library = library
        self.price_scale = price_scale
        self.jitter = jitter
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 0xC10C]))
        self._current = self.phases[0]

    @classmethod
    def for_run(cls, cluster: Cluster, network: str, workers: int, steps: int, *, price_scale: float = 1.0,
                jitter: float = 0.0, seed: int = 0) -> NetworkClock:
        """The clock of one emulated run: the cluster's own link (``static``) or C1/C2 stretched over ``steps``."""
        if network == "static":
            model = CostModel.from_cluster(cluster)
            _, link = model.group_link(workers)
            nccl = cluster.gpu_fabric is not None and packs_evenly(cluster, workers)
            library = "nccl" if nccl else None  # a group NCCL's model cannot describe keeps the link's formulas
            return cls([(0, model, link.alpha, 1.0 / link.beta)], price_scale, jitter, seed, library)
        schedule, epochs = DYNAMIC_NETWORKS[network]
        phases = [(int(round(start / epochs * steps)), CostModel.from_link(latency, gbits * 1.25e8), latency,
                   gbits * 1.25e8) for start, latency, gbits in schedule]
        return cls(phases, price_scale, jitter, seed)

    def at(self, step: int) -> None:
        """Move to the network phase of ``step``."""
        for phase in self.phases:
            if phase[0] <= step:
                self._current = phase

    @property
    def link(self) -> tuple[float, float]:
        """(latency s, bandwidth B/s) of the current phase."""
        return self._current[2], self._current[3]

    def seconds(self, record: CollectiveRecord, world_size: int) -> float:
        nbytes = record.nbytes * (self.price_scale if record.purpose == "payload" else 1.0)
        algorithm = self.library or record.algorithm
        t = float(self._current[1].collective(record.collective, algorithm, nbytes, world_size).total)
        if self.jitter > 0:
            t *= math.exp(self.rng.normal(0.0, self.jitter) - self.jitter**2 / 2)  # mean-one noise
        return t
