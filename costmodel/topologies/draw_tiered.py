"""Switched fabrics (and free-form graphs): hosts or NICs in the bottom row, switches by tier above, each row
ordered by where its neighbours below sit, so cables fan out instead of crossing.

A node with several GPUs is a box of small GPU squares joined by its intra-node link (drawn at that link's
width on the same width scale as the cables); an NVLink domain spanning several nodes is a shaded band under
its NICs. Free-form graphs and rings take a force-directed layout instead of rows.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from flexcomm.costmodel.topologies import draw_parts as parts
from flexcomm.costmodel.topologies.draw_model import Glyph, Picture

#: A row of up to this many hosts draws each as a box of its GPUs.
GPU_BOX_LIMIT = 32
LEGEND_WIDTH_IN = 3.6


def rows(pic: Picture) -> dict[int, list[Glyph]]:
    """Rows bottom-up; the bottom by (domain, rail, node), every row above by the mean position of its
    neighbours below (ties keep the fabric's order), so a leaf sits over its hosts and a rail over its NICs."""
    tiers = sorted({g.tier for g in pic.glyphs.values()})
    rows = {i: [g for g in pic.glyphs.values() if g.tier == t] for i, t in enumerate(tiers)}
    rows[0].sort(key=lambda g: g.order)
    neighbours: dict[str, list[str]] = {}
    for c in pic.cables:
        neighbours.setdefault(c.u, []).append(c.v)
        neighbours.setdefault(c.v, []).append(c.u)
    placed = {g.key: (i + 0.5) / len(rows[0]) for i, g in enumerate(rows[0])}
    for level in range(1, len(rows)):
        def centre(g: Glyph) -> float:
            below = [placed[n] for n in neighbours.get(g.key, []) if n in placed]
            return float(np.mean(below)) if below else 0.5

        rows[level] = sorted(rows[level], key=lambda g: round(centre(g), 9))  # stable: ties keep fabric order
        placed.update({g.key: (i + 0.5) / len(rows[level]) for i, g in enumerate(rows[level])})
    return rows


def _graph_positions(pic: Picture) -> dict[str, tuple[float, float]]:
    graph = nx.Graph()
    graph.add_nodes_from(pic.glyphs)
    graph.add_edges_from((c.u, c.v) for c in pic.cables)
    layout = nx.kamada_kawai_layout(graph) if len(graph) > 2 else nx.circular_layout(graph)
    return {k: (float(x), float(y)) for k, (x, y) in layout.items()}


def _boxed(cluster: Any, pic: Picture) -> bool:
    """Whether hosts are drawn as boxes of their GPUs (few enough hosts, more than one GPU each)."""
    hosts = [g for g in pic.glyphs.values() if g.kind == "host"]
    return (not pic.aggregated and cluster.devices_per_node > 1 and 0 < len(hosts) <= GPU_BOX_LIMIT
            and all(g.tier == 0 for g in hosts))


#: Width of a character of the drawing's font, in ems (DejaVu Sans averages about 0.6), and the gap between two
#: neighbours' names, in points.
CHAR_WIDTH_EM = 0.6
LABEL_GAP_PT = 6.0


def figure_size(cluster: Any, pic: Picture, rows: dict[int, list[Glyph]] | None) -> tuple[float, float]:
    if rows is None:
        return 12.0, 8.0
    widest = max(len(r) for r in rows.values())
    per_glyph = 1.1 if pic.aggregated else 0.3  # a group's two-line name needs room
    if _boxed(cluster, pic):  # a box holds its GPUs 6 pt apart
        per_glyph = max(per_glyph, (6.0 * cluster.devices_per_node + 14.0) / 72)
    need = per_glyph * widest
    if not pic.aggregated:  # every named row's names side by side with a gap ("agg1.3agg2.0" ran together)
        for row in rows.values():
            named = [g for g in row if g.kind != "host"]
            longest = max((len(g.label) for g in named), default=0)
            need = max(need, len(named) * (longest * parts.FONT * CHAR_WIDTH_EM + LABEL_GAP_PT) / 72)
    return min(22.0, max(10.0, need + 5.0)), 3.2 + 1.3 * len(rows)


def draw(ax: Any, fig_width_in: float, cluster: Any, pic: Picture, rows: dict[int, list[Glyph]] | None) -> list:
    """Draw ``pic`` into ``ax``; returns the legend handles."""
    graph_like = rows is None
    if graph_like:
        pos = _graph_positions(pic)
        spacing_pt = (fig_width_in - LEGEND_WIDTH_IN) * 72 / 6
        side = 14.0
    else:
        pos = {g.key: ((i + 0.5) / len(row), float(level)) for level, row in rows.items() for i, g in enumerate(row)}
        widest = max(len(r) for r in rows.values())
        spacing_pt = (fig_width_in - LEGEND_WIDTH_IN) * 72 / widest  # of the densest row: sets the marker size
        side = float(np.clip(0.6 * spacing_pt, 4.0, 15.0))
    hosts = [g for g in pic.glyphs.values() if g.kind == "host"]
    boxed = not graph_like and _boxed(cluster, pic)
    widths = parts.WidthScale([c.bandwidth_Bps for c in pic.cables]
                              + ([cluster.intra_link.bandwidth_Bps] if boxed else []))
    keys = parts.cable_keys(pic.cables, widths, pic.aggregated)
    segments: dict[parts.LineKey, list] = {k: [] for k in keys.values()}
    for c in pic.cables:
        segments[keys[(c.kind, c.bandwidth_Bps, c.duplex)]].append([pos[c.u], pos[c.v]])
    parts.draw_lines(ax, segments)
    handles = parts.line_handles(keys.values())
    if boxed:
        handles += _gpu_boxes(ax, cluster, hosts, pos, len(rows[0]), spacing_pt, widths)
        handles += parts.draw_markers(ax, [g for g in pic.glyphs.values() if g.kind != "host"], pos, side)
    else:
        bottom = rows[0] if rows else []
        numbered = (not parts.fits_beside(bottom, spacing_pt) and parts.fits_inside(bottom, side))
        nouns = {kind: f"{noun} (number inside: the node{'; NIC i serves GPU i' if kind == 'nic' else ''})"
                 for kind, noun in (("nic", "NICs"), ("host", "hosts"))} if numbered else None
        handles += parts.draw_markers(ax, list(pic.glyphs.values()), pos, side, nouns)
    if not graph_like:
        handles += _domains(ax, cluster, rows[0], pos, spacing_pt)
        _label_rows(ax, rows, pos, side, (fig_width_in - LEGEND_WIDTH_IN) * 72, boxed)
        top = len(rows) - 1
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.7 if any(g.domain is not None for g in rows[0]) else -0.3, top + 0.3)
    else:
        _label_free_side(ax, pic, pos, side)
        ax.margins(0.08)
    return handles


def _label_free_side(ax: Any, pic: Picture, pos: dict, side: float) -> None:
    """Each name on the side of its marker that no cable leaves from (the middle of the widest gap between
    its cables' directions), so names sit on neither markers nor lines."""
    angles: dict[str, list[float]] = {k: [] for k in pic.glyphs}
    for c in pic.cables:
        (x0, y0), (x1, y1) = pos[c.u], pos[c.v]
        angles[c.u].append(float(np.arctan2(y1 - y0, x1 - x0)))
        angles[c.v].append(float(np.arctan2(y0 - y1, x0 - x1)))
    for key, glyph in pic.glyphs.items():
        out = sorted(angles[key])
        if out:
            gaps = [(b - a, a) for a, b in zip(out, out[1:] + [out[0] + 2 * np.pi], strict=True)]
            width, start = max(gaps)
            direction = start + width / 2
        else:
            direction = np.pi / 2
        dx, dy = np.cos(direction), np.sin(direction)
        reach = side / 2 + 3
        ax.annotate(glyph.label, pos[key], xytext=(dx * reach, dy * reach), textcoords="offset points",
                    ha="left" if dx > 0.5 else "right" if dx < -0.5 else "center",
                    va="bottom" if dy > 0.5 else "top" if dy < -0.5 else "center", fontsize=parts.FONT, zorder=4)


def _label_rows(ax: Any, rows: dict[int, list[Glyph]], pos: dict, side: float, width_pt: float,
                boxed: bool) -> None:
    """Switch names above their markers; the bottom row's names below, or its node numbers inside the
    markers with the rail under each run of NICs; nothing where the names would collide."""
    for level, row in rows.items():
        if level > 0:
            parts.label_beside(ax, row, pos, side, width_pt / len(row), above=True)
    bottom = rows[0]
    spacing = width_pt / len(bottom)
    if boxed:
        return  # the boxes carry their own names
    if parts.label_beside(ax, bottom, pos, side, spacing, above=False):
        return
    parts.label_inside(ax, bottom, pos, side)
    runs: list[tuple[str, list[Glyph]]] = []
    for g in bottom:  # consecutive NICs of one rail: one caption under the run
        rail = g.order[1] if g.kind == "nic" and len(g.order) > 1 else None
        if rail is None:
            return
        if runs and runs[-1][0] == f"rail {rail}" and runs[-1][1][-1].domain == g.domain:
            runs[-1][1].append(g)
        else:
            runs.append((f"rail {rail}", [g]))
    if all(parts.text_width_pt(name) < 0.95 * spacing * len(members) for name, members in runs):
        for name, members in runs:
            x = float(np.mean([pos[m.key][0] for m in members]))
            ax.annotate(name, (x, 0.0), xytext=(0, -(side / 2 + 3)), textcoords="offset points", ha="center",
                        va="top", fontsize=parts.FONT)


def _gpu_boxes(ax: Any, cluster: Any, hosts: list[Glyph], pos: dict, count: int, spacing_pt: float,
               widths: parts.WidthScale) -> list:
    """Each host a box of its GPUs (small squares) on a bar of its intra-node link; its name below."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    d = cluster.devices_per_node
    box_w, box_h = 0.8 / count, 0.22
    gpu_side = float(np.clip(0.5 * 0.8 * spacing_pt / d, 2.5, 8.0))  # half the pitch: the link shows between
    bars, gpus = [], []
    named = parts.fits_beside(hosts, spacing_pt)  # else the node's number under its box
    for g in hosts:
        x, y = pos[g.key]
        ax.add_patch(Rectangle((x - box_w / 2, y - box_h / 2), box_w, box_h, fc="#e6e6e6", ec="#4d4d4d",
                               lw=0.8, zorder=2))
        xs = x - box_w / 2 + (np.arange(d) + 0.5) * box_w / d
        gpus += [(gx, y) for gx in xs]
        bars.append([(xs[0], y), (xs[-1], y)])
        ax.annotate(g.label if named else g.short, (x, y - box_h / 2), xytext=(0, -2), textcoords="offset points",
                    ha="center", va="top", fontsize=parts.FONT)
    intra = parts.LineKey(f"inside each node: {parts.intra_text(cluster)}", parts.INTRA_COLOUR,
                          widths(cluster.intra_link.bandwidth_Bps))
    parts.draw_lines(ax, {intra: bars}, zorder=2.5)
    xy = np.array(gpus)
    label = f"{len(gpus):,} GPUs ({d} in each node box)"
    ax.scatter(xy[:, 0], xy[:, 1], s=gpu_side**2, marker="s", c=parts.GPU_COLOUR, edgecolors="k", linewidths=0.4,
               zorder=3, label=label)
    box = Line2D([], [], marker="s", color="#e6e6e6", markeredgecolor="#4d4d4d", ls="", markersize=9,
                 label=f"{len(hosts)} nodes (boxes{'' if named else ', number below: the node'})")
    return [*parts.line_handles([intra]),
            Line2D([], [], marker="s", color=parts.GPU_COLOUR, markeredgecolor="k", ls="", label=label), box]


def _domains(ax: Any, cluster: Any, bottom: list[Glyph], pos: dict, spacing_pt: float) -> list:
    """A shaded band under the NICs of each NVLink domain, captioned with its GPUs and NVLink bandwidth."""
    from matplotlib.patches import Patch, Rectangle

    domains = sorted({g.domain for g in bottom if g.domain is not None})
    handles = []
    size = cluster.world_size // max(1, len(domains)) if domains else 0
    half = 0.5 / len(bottom)
    for i, domain in enumerate(domains):
        xs = [pos[g.key][0] for g in bottom if g.domain == domain]
        colour = parts.DOMAIN_COLOURS[i % len(parts.DOMAIN_COLOURS)]
        ax.add_patch(Rectangle((min(xs) - half * 0.9, -0.62), max(xs) - min(xs) + 1.8 * half, 0.9, fc=colour,
                               ec="none", zorder=0))
        nodes = sorted({int(g.short) for g in bottom if g.domain == domain and g.short.isdigit()})
        span = f", nodes {nodes[0]}-{nodes[-1]}" if nodes else ""
        text = (f"NVLink domain {domain}: {size} GPUs{span}, "
                f"{cluster.intra_link.bandwidth_Bps / 1e9:g} GB/s per GPU")
        if parts.text_width_pt(text) < spacing_pt * len(xs):
            ax.text(float(np.mean(xs)), -0.58, text, ha="center", va="bottom", fontsize=8, zorder=4)
        handles.append(Patch(facecolor=colour, label=f"NVLink domain {domain} ({size} GPUs)"))
    return handles
