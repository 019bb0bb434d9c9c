"""A torus as planes: one grid per coordinate of the first dimension (a 2-D torus is one grid), its
neighbours' cables straight, and every wrap-around cable a short stub at each of its two ends, so nothing
criss-crosses the planes. The cables between neighbouring planes run parallel (one per grid position): each
such bundle is one line labelled with its count.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexcomm.costmodel.topologies import draw_parts as parts
from flexcomm.costmodel.topologies.draw_model import Picture

GAP = 2.6  # grid units from a plane's last column to the next plane's first
STUB = 0.38  # length of a wrap-around stub, grid units
UNIT_IN = 0.5  # inches per grid unit
LEGEND_IN = 4.6


def _grid(fabric: Any) -> tuple[list[int], int, int]:
    """(dims, planes, columns, rows) of the drawing: planes along dimension 0 of a 3-D torus."""
    dims = list(fabric.dims)
    if len(dims) == 3:
        return dims, dims[0], dims[2]
    return dims, 1, dims[1]


def _xy(coord: tuple[int, ...], dims: list[int], cols: int) -> tuple[float, float]:
    if len(dims) == 3:
        plane, row, col = coord
    else:
        plane, (row, col) = 0, coord
    return plane * (cols - 1 + GAP) + col, -float(row)


def _extent(fabric: Any) -> tuple[float, float]:
    """Width and height of the drawing in grid units (planes, stubs, bundle counts, captions)."""
    dims, planes, cols = _grid(fabric)
    rows = dims[1] if len(dims) == 3 else dims[0]
    return planes * (cols - 1) + (planes - 1) * GAP + 2 * STUB + 2.6, rows - 1 + 2 * STUB + 1.9


def figure_size(fabric: Any) -> tuple[float, float]:
    """Sized to the grid, so the equal-aspect drawing fills it (no empty band)."""
    width, height = _extent(fabric)
    return width * UNIT_IN + LEGEND_IN, height * UNIT_IN + 1.4


def _classify(pic: Picture, dims: list[int], pos: dict, keys: dict) -> tuple[dict, list, dict, int]:
    """(straight segments per legend key, stub segments, plane-pair bundle counts, wrap-around cables)."""
    coord = {g.key: tuple(g.coord) for g in pic.glyphs.values()}
    straight: dict[parts.LineKey, list] = {k: [] for k in keys.values()}
    stubs: list = []
    bundles: dict[tuple[int, bool], int] = {}
    wraps = 0
    for c in pic.cables:
        a, b = coord[c.u], coord[c.v]
        dim = next(i for i in range(len(dims)) if a[i] != b[i])
        wrap = dims[dim] > 2 and abs(a[dim] - b[dim]) == dims[dim] - 1
        wraps += wrap
        if len(dims) == 3 and dim == 0:  # between planes: counted per bundle
            lower = max(a[0], b[0]) if wrap else min(a[0], b[0])
            bundles[(lower, wrap)] = bundles.get((lower, wrap), 0) + 1
        elif not wrap:
            straight[keys[(c.kind, c.bandwidth_Bps, c.duplex)]].append([pos[c.u], pos[c.v]])
        else:
            for end, other in ((c.u, c.v), (c.v, c.u)):
                (x, y), (ox, oy) = pos[end], pos[other]
                stubs.append([(x, y), (x + np.sign(x - ox) * STUB, y + np.sign(y - oy) * STUB)])  # off the edge
    return straight, stubs, bundles, wraps


def draw(ax: Any, cluster: Any, pic: Picture) -> tuple[list, list[str]]:
    """Draw the torus of ``pic`` (detailed); returns the legend handles and notes for the caption."""
    from matplotlib.patches import Rectangle

    dims, planes, cols = _grid(cluster.fabric)
    rows = dims[1] if len(dims) == 3 else dims[0]
    pos = {g.key: _xy(tuple(g.coord), dims, cols) for g in pic.glyphs.values()}
    widths = parts.WidthScale([c.bandwidth_Bps for c in pic.cables])
    keys = parts.cable_keys(pic.cables, widths, aggregated=False)
    straight, stubs, bundles, wraps = _classify(pic, dims, pos, keys)
    for p in range(planes):  # each plane on a pale card, captioned
        x0 = p * (cols - 1 + GAP) - 0.5 - STUB
        ax.add_patch(Rectangle((x0, -(rows - 0.5) - STUB), cols + 2 * STUB, rows + 2 * STUB,
                               fc="#f2f2f2", ec="#bdbdbd", lw=0.6, zorder=0))
        if planes > 1:
            ax.text(x0 + (cols + 2 * STUB) / 2, 0.5 + STUB + 0.1, f"plane x = {p}: {rows * cols} chips",
                    ha="center", va="bottom", fontsize=8)
    between, wrap_stubs = _bundles(ax, bundles, cols, rows, planes)
    key = next(iter(keys.values()))
    straight[key] += between
    parts.draw_lines(ax, straight)
    stub_key = parts.LineKey(f"wrap-around cable: a dotted stub at each end ({wraps} cables)", key.colour,
                             key.width, ":")
    parts.draw_lines(ax, {stub_key: stubs + wrap_stubs})
    side = UNIT_IN * 72 * 0.5
    glyphs = list(pic.glyphs.values())
    inside = parts.inside_font([g.short for g in glyphs], side) is not None
    handles = parts.line_handles([*keys.values(), *([stub_key] if wraps else [])])
    handles += parts.draw_markers(ax, glyphs, pos, side, {"host": "chips" + (" (number: the node)" if inside else "")})
    if inside:
        parts.label_inside(ax, glyphs, pos, side)
    notes = []
    if bundles:
        notes.append(f"between neighbouring planes: {rows * cols} parallel cables (one per grid position) "
                     "drawn as one line, its count beside it; the wrap-around bundle as a stub off each outer plane")
    width, height = _extent(cluster.fabric)
    ax.set_xlim(-0.5 - STUB - 1.3, width - 0.5 - STUB - 1.3)
    ax.set_ylim(-(rows - 0.5) - STUB - 0.2, -(rows - 0.5) - STUB - 0.2 + height)
    ax.set_aspect("equal")
    return handles, notes


def _bundles(ax: Any, bundles: dict[tuple[int, bool], int], cols: int, rows: int, planes: int) -> tuple[list, list]:
    """Cables between neighbouring planes, one line per plane pair with its count above it, and the wrap
    bundle (last plane to the first) as a stub off each outer edge: (straight segments, stub segments)."""
    y = -(rows - 1) / 2
    pitch = cols - 1 + GAP
    lines, stubs = [], []
    for (lower, wrap), count in sorted(bundles.items()):
        if wrap:
            left, right = -0.5 - STUB, (planes - 1) * pitch + cols - 1 + 0.5 + STUB
            stubs += [[(left, y), (left - 0.45, y)], [(right, y), (right + 0.45, y)]]
            for x, ha in ((left - 0.5, "right"), (right + 0.5, "left")):
                ax.text(x, y, f"{count}", ha=ha, va="center", fontsize=parts.FONT)
            continue
        start = lower * pitch + cols - 1 + 0.5 + STUB
        span = GAP - 1 - 2 * STUB
        lines.append([(start, y), (start + span, y)])
        ax.text(start + span / 2, y + 0.1, f"{count}", ha="center", va="bottom", fontsize=parts.FONT)
    return lines, stubs
