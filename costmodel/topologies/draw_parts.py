"""Pieces every topology drawing shares: link widths by bandwidth, a legend whose lines are drawn exactly as
the cables they name, markers with their labels beside (never over) them, and the per-tier up/down capacity
notes that say whether a tier is oversubscribed.

Why here and not per layout: the legend and the drawing must use one width function and one style per
cable class, or a reader maps widths to the wrong bandwidths (a thick legend line for a thin cable).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexcomm.costmodel.topologies.draw_model import Cable, Glyph
from flexcomm.costmodel.units import format_bandwidth

LINK_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#8c564b", "#17becf"]
#: marker and face colour of each vertex kind (dark faces carry white text)
VERTEX_STYLE = {"host": ("s", "#4d4d4d"), "nic": ("s", "#7f7f7f"), "switch": ("o", "#9ecae1")}
GPU_COLOUR = "#76b900"
INTRA_COLOUR = "#6a3d9a"
DOMAIN_COLOURS = ["#fde0c5", "#d9ecd0", "#dcd6ec", "#fbd3dd", "#d6e6f4", "#f3e9c2"]
FONT = 7.0  # labels; the legend uses 8
INTRA_NAMES = {"nvswitch": "NVLink via NVSwitch", "nvlink-mesh": "NVLink mesh", "pcie": "PCIe", "xgmi": "xGMI"}


class WidthScale:
    """Line width (points) of a cable: 0.6 pt for the slowest drawn, 3.2 pt for the fastest, log in between."""

    def __init__(self, bandwidths: Iterable[float]) -> None:
        values = [float(b) for b in bandwidths]
        self.lo, self.hi = min(values), max(values)

    def __call__(self, bandwidth_Bps: float) -> float:
        if self.hi <= self.lo:
            return 1.2
        return round(0.6 + 2.6 * math.log(bandwidth_Bps / self.lo) / math.log(self.hi / self.lo), 2)


@dataclass(frozen=True)
class LineKey:
    """One legend entry of lines: every cable drawn with it has this colour, width and style."""

    label: str
    colour: str
    width: float
    style: str = "-"


def link_palette(pictured: Sequence[Cable]) -> dict[str, str]:
    kinds = sorted({c.kind for c in pictured})
    return dict(zip(kinds, LINK_COLOURS * 4, strict=False))


def cable_keys(pictured: Sequence[Cable], widths: WidthScale, aggregated: bool) -> dict[tuple, LineKey]:
    """A legend entry per (class, bandwidth, duplex): one width per bandwidth, so the key reads width -> value."""
    palette = link_palette(pictured)
    counts: dict[tuple, int] = {}
    for c in pictured:
        counts[(c.kind, c.bandwidth_Bps, c.duplex)] = counts.get((c.kind, c.bandwidth_Bps, c.duplex), 0) + c.count
    keys = {}
    for (kind, bw, duplex), count in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        cables = f"{count:,} cable{'s' if count != 1 else ''}"
        half = ", half duplex" if duplex == "half" else ""
        grouped = ", one line per group pair" if aggregated else ""
        label = f"{kind}: {format_bandwidth(bw)} per cable{half} ({cables}{grouped})"
        keys[(kind, bw, duplex)] = LineKey(label, palette[kind], widths(bw), "--" if duplex == "half" else "-")
    return keys


def draw_lines(ax: Any, segments: dict[LineKey, list], zorder: float = 1.0) -> None:
    """One LineCollection per legend entry, labelled as its entry (so a check can pair them)."""
    from matplotlib.collections import LineCollection

    for key, segs in segments.items():
        if segs:
            ax.add_collection(LineCollection(segs, colors=key.colour, linewidths=key.width, linestyles=key.style,
                                             label=key.label, zorder=zorder, capstyle="butt"))


def line_handles(keys: Iterable[LineKey]) -> list:
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=k.colour, lw=k.width, ls=k.style, label=k.label) for k in keys]


def draw_markers(ax: Any, glyphs: Sequence[Glyph], pos: dict[str, tuple[float, float]], side_pt: float,
                 nouns: dict[str, str] | None = None) -> list:
    """A scatter per vertex kind (square hosts and NICs, round switches); returns legend handles."""
    from matplotlib.lines import Line2D

    handles = []
    for kind, (marker, colour) in VERTEX_STYLE.items():
        members = [g for g in glyphs if g.kind == kind]
        if not members:
            continue
        xy = np.array([pos[g.key] for g in members])
        count = sum(g.count for g in members)
        noun = (nouns or {}).get(kind) or {"switch": "switches", "nic": "NICs", "host": "hosts"}[kind]
        label = f"{count:,} {noun}" if count != 1 else f"1 {kind}"
        ax.scatter(xy[:, 0], xy[:, 1], s=side_pt**2, marker=marker, c=colour, edgecolors="k", linewidths=0.5,
                   zorder=3, label=label)
        handles.append(Line2D([], [], marker=marker, color=colour, ls="", markeredgecolor="k", label=label))
    return handles


def text_width_pt(text: str, size: float = FONT) -> float:
    """A generous estimate of a label's width (DejaVu Sans averages ~0.6 em a character)."""
    return 0.62 * size * max((len(line) for line in text.split("\n")), default=0)


def inside_font(texts: Sequence[str], side_pt: float) -> float | None:
    """The font size at which every ``text`` fits inside a marker of ``side_pt`` (None: none legible does)."""
    longest = max((len(t) for t in texts), default=0)
    if not longest:
        return None
    size = min(FONT, 0.7 * side_pt / (0.62 * longest), 0.7 * side_pt)
    return size if size >= 4.5 else None


def fits_inside(glyphs: Sequence[Glyph], side_pt: float) -> bool:
    return all(g.short for g in glyphs) and inside_font([g.short for g in glyphs], side_pt) is not None


def label_inside(ax: Any, glyphs: Sequence[Glyph], pos: dict, side_pt: float) -> bool:
    """White short labels (a node's index) centred inside their dark markers, when they fit."""
    if not fits_inside(glyphs, side_pt):
        return False
    size = inside_font([g.short for g in glyphs], side_pt)
    for g in glyphs:
        ax.text(*pos[g.key], g.short, color="white", fontsize=size, ha="center", va="center", zorder=4)
    return True


def fits_beside(glyphs: Sequence[Glyph], spacing_pt: float) -> bool:
    return bool(glyphs) and max(text_width_pt(g.label) for g in glyphs) <= 0.95 * spacing_pt


def label_beside(ax: Any, glyphs: Sequence[Glyph], pos: dict, side_pt: float, spacing_pt: float,
                 above: bool) -> bool:
    """Full names above (switches) or below (hosts) their markers, when neighbours' names do not collide."""
    if not fits_beside(glyphs, spacing_pt):
        return False
    offset = side_pt / 2 + 2
    for g in glyphs:
        ax.annotate(g.label, pos[g.key], xytext=(0, offset if above else -offset), textcoords="offset points",
                    ha="center", va="bottom" if above else "top", fontsize=FONT, zorder=4,
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85})
    return True


def _sum_text(bandwidths: list[float]) -> str:
    if not bandwidths:
        return "none"
    if len(set(bandwidths)) == 1:
        return f"{len(bandwidths)} x {format_bandwidth(bandwidths[0])} = {format_bandwidth(sum(bandwidths))}"
    return " + ".join(format_bandwidth(b) for b in bandwidths) + f" = {format_bandwidth(sum(bandwidths))}"


def _ratio_text(up: float, down: float) -> str:
    ratio = up / down
    if math.isclose(ratio, 1.0, rel_tol=1e-6):
        return "up:down 1:1 (non-blocking)"
    if ratio < 1:
        return f"oversubscribed {1 / ratio:.3g}:1 (down:up)"
    return f"up:down {ratio:.3g}:1 (under-subscribed: more capacity up than down)"


def capacity_notes(fabric: Any, tier_of: dict[str, int]) -> list[str]:
    """Per switch tier: each switch's capacity down (towards hosts) and up, and their ratio, grouped by
    switches wired alike. This is what a reader needs to judge an uplink's label (is 1.6 Tbit/s a lot?)."""
    graph = fabric.graph
    sized_for = getattr(getattr(fabric, "scale_out", fabric), "hosts_per_leaf", None)
    notes = []
    for tier in sorted({t for t in tier_of.values() if t >= 1}):
        alike: dict[tuple, list[str]] = {}
        for s, t in tier_of.items():
            if t != tier or graph.nodes[s].get("kind", "switch") != "switch":
                continue
            down = sorted(d["bandwidth_Bps"] for _, w, d in graph.out_edges(s, data=True) if tier_of[w] < tier)
            up = sorted(d["bandwidth_Bps"] for _, w, d in graph.out_edges(s, data=True) if tier_of[w] > tier)
            if up and down:
                alike.setdefault((tuple(down), tuple(up)), []).append(s)
        for (down, up), names in list(alike.items())[:3]:
            who = names[0] if len(names) == 1 else f"each of {len(names)} like {names[0]}"
            note = (f"tier-{tier} switch ({who}): down {_sum_text(list(down))}, up {_sum_text(list(up))}: "
                    f"{_ratio_text(sum(up), sum(down))}")
            if tier == 1 and sized_for and len(down) < sized_for and sum(up) > sum(down):
                note += f"; uplinks sized for a full leaf of hosts_per_leaf = {sized_for} hosts, {len(down)} attached"
            notes.append(note)
        if len(alike) > 3:
            notes.append(f"tier {tier}: {len(alike) - 3} more wirings not listed")
    return notes


def intra_text(cluster: Any) -> str:
    """How a node's GPUs talk, from the cluster's own data: ``8 GPUs, NVLink via NVSwitch 450 GB/s per GPU``."""
    fabric = getattr(cluster, "gpu_fabric", None)
    name = INTRA_NAMES.get(getattr(fabric, "intra", ""), "intra-node link")
    gpus = f"{cluster.devices_per_node} GPU{'s' if cluster.devices_per_node != 1 else ''}"
    return f"{gpus}, {name} {cluster.intra_link.bandwidth_Bps / 1e9:g} GB/s per GPU per direction"
