"""What the simulator records about every transfer, to explain its times against the cost model.

One row per *coflow* (a set of flows that carry the same bytes and advance at one common rate,
see :mod:`sim.network`): when it was started, when its latency had been paid, when its last byte
arrived, how many flows and bytes it had, and the link that limited it. A coflow can be limited by
different links over its life (a trace changes a link, another transfer starts); ``bottleneck`` is
the one it was limited by for the most bytes, with that link's capacity and the number of flows
(of every coflow) sharing it at the time. So a slower-than-predicted collective reads, row by row,
as "bottleneck node5->switch at 1Gbit/s shared by 1 flow" or "leaf0->spine at 800Gbit/s shared
by 8 flows".
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from flexcomm.costmodel.units import format_bandwidth, format_size, format_time

#: Column order of :meth:`Recorder.frame`.
COLUMNS = (
    "tag", "start", "latency_end", "end", "bytes", "flows", "total_bytes", "latency_s", "duration_s",
    "mean_rate_Bps", "bottleneck", "bottleneck_Bps", "bottleneck_flows",
)


@dataclass(slots=True)
class CoflowRecord:
    """One finished coflow. ``bytes`` is per flow; ``mean_rate_Bps`` is per flow after the latency."""

    tag: str
    start: float
    latency_end: float
    end: float
    bytes: float
    flows: int
    bottleneck: str
    bottleneck_Bps: float
    bottleneck_flows: float

    @property
    def latency_s(self) -> float:
        return self.latency_end - self.start

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    @property
    def mean_rate_Bps(self) -> float:
        moving = self.end - self.latency_end
        return self.bytes / moving if moving > 0 else float("inf") if self.bytes > 0 else 0.0

    def row(self) -> tuple:
        return (
            self.tag, self.start, self.latency_end, self.end, self.bytes, self.flows, self.bytes * self.flows,
            self.latency_s, self.duration_s, self.mean_rate_Bps, self.bottleneck, self.bottleneck_Bps,
            self.bottleneck_flows,
        )


class Recorder:
    """Collects :class:`CoflowRecord` objects; :meth:`frame` turns them into a DataFrame on demand.

    ``keep_tags`` (a prefix or tuple of prefixes) keeps only matching coflows, e.g. to drop the
    many small background flows of :class:`sim.dynamics.CrossTraffic` from a long run.
    """

    def __init__(self, keep_tags: str | tuple[str, ...] | None = None) -> None:
        self.records: list[CoflowRecord] = []
        self.keep_tags = keep_tags

    def add(self, record: CoflowRecord) -> None:
        if self.keep_tags is None or record.tag.startswith(self.keep_tags):
            self.records.append(record)

    def __len__(self) -> int:
        return len(self.records)

    def frame(self) -> pd.DataFrame:
        """One row per recorded coflow, in completion order (columns :data:`COLUMNS`)."""
        return pd.DataFrame([r.row() for r in self.records], columns=list(COLUMNS))


def bottleneck_summary(flows: pd.DataFrame) -> pd.DataFrame:
    """Time spent per bottleneck link: coflow count, seconds moving bytes, seconds of latency, bytes.

    Sorted by moving time, so the first row is the link that made the run as slow as it was.
    """
    if flows.empty:
        return pd.DataFrame(columns=["bottleneck", "coflows", "moving_s", "latency_s", "bytes", "min_Bps"])
    moving = flows["end"] - flows["latency_end"]
    table = (
        flows.assign(moving_s=moving)
        .groupby("bottleneck", sort=False)
        .agg(coflows=("tag", "size"), moving_s=("moving_s", "sum"), latency_s=("latency_s", "sum"),
             bytes=("bytes", "sum"), min_Bps=("bottleneck_Bps", "min"),
             max_sharing=("bottleneck_flows", "max"))
        .sort_values("moving_s", ascending=False)
        .reset_index()
    )
    return table


def explain(flows: pd.DataFrame, seconds: float | None = None, predicted: float | None = None,
            exclude: tuple[str, ...] = ("cross-traffic",)) -> str:
    """A few lines saying where the time went (and how far it is from a prediction, if given).

    Coflows whose tag starts with one of ``exclude`` (background traffic) are left out of the
    summary; their effect shows as the sharing (``shared by up to N flows``) of the links they use.
    """
    lines: list[str] = []
    if exclude and not flows.empty:
        flows = flows[~flows["tag"].str.startswith(exclude)]
    if seconds is not None:
        line = f"simulated {format_time(seconds)}"
        if predicted is not None and predicted > 0:
            line += f", cost model {format_time(predicted)} ({(seconds / predicted - 1) * 100:+.2f}%)"
        lines.append(line)
    if flows.empty:
        lines.append("no transfers")
        return "\n".join(lines)
    lines.append(
        f"{len(flows)} coflows, latency {format_time(float(flows['latency_s'].sum()))} summed over them, "
        f"{format_size(float(flows['total_bytes'].sum()))} on the wire"
    )
    for row in bottleneck_summary(flows).head(5).itertuples(index=False):
        lines.append(
            f"  bottleneck {row.bottleneck} at {format_bandwidth(row.min_Bps)} shared by up to "
            f"{row.max_sharing:g} flows: {row.coflows} coflows, {format_time(row.moving_s)} moving "
            f"{format_size(row.bytes)} per flow"
        )
    return "\n".join(lines)
