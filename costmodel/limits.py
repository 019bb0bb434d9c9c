"""Limits on what one input may ask for, so no file or flag can hang flexcomm or eat the machine's memory.

Why: a cluster of a billion nodes, a YAML alias bomb or a jitter redrawn every nanosecond are each one
line of input, and each used to run for minutes or take gigabytes before failing. Every limit here is far
above what a real study needs (the largest published training runs use ~10^5 GPUs), is checked before the
work starts, and fails with one line naming the limit and the environment variable that raises it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from flexcomm.costmodel.errors import InputError


def _physical_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not POSIX: assume a small machine
        return 8 * 2**30


@dataclass(frozen=True)
class Limit:
    """A ceiling with a default and an environment variable that overrides it."""

    env: str
    default: int
    what: str  #: the unit counted, e.g. "nodes"

    @property
    def value(self) -> int:
        raw = os.environ.get(self.env)
        if raw is None or not raw.strip():
            return self.default
        try:
            value = int(float(raw))
        except ValueError:
            raise InputError(self.env, raw, "a whole number (an environment variable raising a limit)") from None
        if value < 1:
            raise InputError(self.env, raw, "a whole number >= 1 (an environment variable raising a limit)")
        return value

    def check(self, field: str, amount: float, got: object = None) -> None:
        """Raise a one-line InputError when ``amount`` exceeds the limit; ``got`` is what the user typed, when
        that differs from the amount it asks for (a period of 1ns is 10^9 events per second)."""
        limit = self.value
        if amount > limit:
            asks = "" if got is None else f", this asks for {amount:,.0f}"
            raise InputError(field, amount if got is None else got,
                             f"at most {limit:,} {self.what}{asks} (set {self.env} to raise the limit)")


#: Nodes of one cluster; and ranks (nodes x devices per node). Frontier and the largest GPU clusters have
#: ~10^4-10^5 accelerators; 2^19 ranks leave room for what-if studies, and pricing a collective on all of
#: them stays under ~3 s and ~300 MB (measured with `flexcomm cost --ranks 524288 --cluster FILE`).
MAX_NODES = Limit("FLEXCOMM_MAX_NODES", 65_536, "nodes")
MAX_RANKS = Limit("FLEXCOMM_MAX_RANKS", 524_288, "ranks")
#: Processes one `flexcomm launch` (or bench-collectives, train-ddp) starts on this machine.
MAX_LOCAL_PROCESSES = Limit("FLEXCOMM_MAX_PROCESSES", 256, "local processes")
#: A YAML/JSON document: bytes read, and nodes after expanding aliases (a "billion laughs" file has a few
#: hundred bytes and expands to 10^9 nodes).
MAX_DOCUMENT_BYTES = Limit("FLEXCOMM_MAX_DOCUMENT_BYTES", 2 * 2**20, "bytes")
MAX_DOCUMENT_NODES = Limit("FLEXCOMM_MAX_DOCUMENT_NODES", 200_000, "YAML nodes after expanding aliases")
#: Nested flow collections ([...] / {...}) in a YAML document: PyYAML's scanner is quadratic in this depth
#: (5,000 levels take 1.3 s before the composer gives up); cluster and study files nest fewer than ten.
MAX_DOCUMENT_FLOW_DEPTH = Limit("FLEXCOMM_MAX_DOCUMENT_FLOW_DEPTH", 100, "levels of nested [ ] or { }")
#: Network-dynamics changes per simulated second (a jitter redrawn every 1 ns would be 10^9 events/s).
MAX_EVENTS_PER_SIM_SECOND = Limit("FLEXCOMM_MAX_EVENTS_PER_SIM_SECOND", 1_000_000, "events per simulated second")
#: Iterations of one simulated job: each keeps a row (and its buckets') in memory, ~1 KB per iteration and rank.
MAX_SIM_ITERATIONS = Limit("FLEXCOMM_MAX_SIM_ITERATIONS", 1_000_000, "iterations")
#: Steps of one emulated or real training run: each keeps a row of metrics in memory (~0.5 KB).
MAX_TRAINING_STEPS = Limit("FLEXCOMM_MAX_TRAINING_STEPS", 1_000_000, "steps")
#: Bytes the ranks of one collective benchmark allocate on this machine: half its physical memory.
MAX_BENCH_BYTES = Limit("FLEXCOMM_MAX_BENCH_BYTES", _physical_memory_bytes() // 2, "bytes of buffers (half this "
                        "machine's memory)")
