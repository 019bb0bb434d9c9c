"""Discrete-event simulator (simpy): flow-level network, collective schedules, dynamics, records.

* :mod:`sim.network`: :class:`~sim.network.Network` of a cluster's links; transfers are coflows
  sharing bandwidth max-min fairly. It composes :mod:`sim.routes` (the links, and flows routed once as a
  :class:`~sim.routes.Pattern`) and :mod:`sim.rate_allocation` (the max-min filling).
* :mod:`sim.collectives`: every algorithm of :mod:`costmodel.collectives` (plus the hierarchical
  allreduce and the compressed schemes) as its real message schedule; ``simulate_collective``.
* :mod:`sim.dynamics`: traces, jitter, Markov congestion and cross traffic, all seeded.
* :mod:`sim.records`: the per-coflow record that explains a simulated time.
"""

from flexcomm.sim.collectives import (
    SimResult,
    run_collective,
    run_scheme,
    simulate_collective,
    simulate_scheme,
)
from flexcomm.sim.dynamics import CrossTraffic, JitterDynamics, MarkovCongestion, TraceDynamics, TraceEvent
from flexcomm.sim.network import CountingEnvironment, Network
from flexcomm.sim.records import CoflowRecord, Recorder, explain
from flexcomm.sim.routes import Pattern

__all__ = [
    "CoflowRecord",
    "CountingEnvironment",
    "CrossTraffic",
    "JitterDynamics",
    "MarkovCongestion",
    "Network",
    "Pattern",
    "Recorder",
    "SimResult",
    "TraceDynamics",
    "TraceEvent",
    "explain",
    "run_collective",
    "run_scheme",
    "simulate_collective",
    "simulate_scheme",
]
