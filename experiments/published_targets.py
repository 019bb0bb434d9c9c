"""What a published nccl-tests run is judged against: shared by the report and the figures drawn from it.

Why a module of its own: the per-run figure states the verdict the report computes, and the report draws
the figures; the numbers live here so neither imports the other.
"""

from __future__ import annotations

#: rows of at least this many bytes count for the targets (below, launch latency dominates)
SUMMARY_MIN_BYTES = 1 << 20
#: median and worst |error| of a run's rows >= 1 MiB
TARGET_MEDIAN = 0.05
TARGET_WORST = 0.15
#: a run counts for the per-run targets with at least this many rows >= 1 MiB
MIN_ROWS = 5
