"""A picture of a cluster's fabric: hosts (or NICs) at the bottom, switches by tier above, tori as planes.

Why: a topology written as numbers (k, tiers, rails, oversubscription) is easy to get wrong; seeing which
host hangs off which leaf, which rail a NIC is on and where the thin links are catches it at once. Each cable
is drawn once, its width set by its bandwidth on one scale that the legend repeats entry by entry (a key from
width to value), its colour naming its class; a caption gives every switch tier's capacity down and up, so an
oversubscribed (or generously provisioned) tier is explained, not just drawn thick.

Above :data:`~.draw_model.AGGREGATE_ABOVE` vertices the drawing groups them (a glyph per rail, leaf group,
pod or torus plane; :mod:`.draw_model`), so a 16,384-GPU pod draws in seconds and reads as its structure.
Layouts: :mod:`.draw_tiered` (switched fabrics, graphs) and :mod:`.draw_torus`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.plotting import use_file_backend
from flexcomm.costmodel.topologies import draw_parts, draw_tiered, draw_torus
from flexcomm.costmodel.topologies.draw_model import AGGREGATE_ABOVE, Picture, picture, tiers


def _caption(cluster: Any, pic: Picture, notes: list[str], width_in: float) -> str:
    """The lines above the drawing: what aggregation hid, what a node holds, each tier's capacity ratio."""
    fabric = cluster.fabric
    lines = list(notes)
    if fabric.kind in ("rail-optimized", "nvlink-domain") or (cluster.devices_per_node > 1 and not any(
            g.kind == "host" for g in pic.glyphs.values())):
        lines.append(f"each node: {draw_parts.intra_text(cluster)}")
    nics = cluster.nics_per_node or 1
    if fabric.kind in ("flat", "two-level") and nics > 1:  # the drawing is the flow model's, which is not the file's
        lines.append(f"one cable a node: the flow simulator models each node's NICs as one link at inter_link's "
                     f"bandwidth; the cluster names {nics} NICs a node, which NCCL's model (--algorithm nccl, the "
                     f"default on a gpu_fabric cluster) prices")
    if fabric.kind not in ("torus", "ring"):  # switched fabrics: each tier's capacity down and up
        lines += draw_parts.capacity_notes(fabric, tiers(fabric.graph))
    if pic.aggregated:
        lines.insert(0, f"aggregated: {pic.vertices:,} vertices (over {AGGREGATE_ABOVE}), so one glyph per group "
                        f"(rail, leaf group, pod or plane) and one line per pair of groups and cable class"
                     + (f"; {pic.hidden_cables:,} cables inside a group not drawn" if pic.hidden_cables else ""))
    chars = max(60, int(width_in * 72 / (0.55 * 8)))
    return "\n".join(textwrap.fill(line, chars, subsequent_indent="  ") for line in lines)


#: Characters of a key's line before it wraps: the key's column is a fixed width (a longer line ran off the
#: image's right edge).
KEY_CHARS = 40


def _wrap_labels(ax: Any, handles: list, width: int) -> None:
    """Wrap long key labels, and the labels of the artists they name, alike (the checks pair them by label)."""
    for handle in handles:
        label = handle.get_label()
        if len(label) <= width:
            continue
        wrapped = textwrap.fill(label, width, subsequent_indent="  ")
        for artist in [*ax.collections, *ax.lines, *ax.patches]:
            if artist.get_label() == label:
                artist.set_label(wrapped)
        handle.set_label(wrapped)


def draw_fabric(cluster: Any, path: str | Path, dpi: int | None = None) -> Path:
    """Draw ``cluster.fabric`` into ``path`` (PNG/SVG/PDF by suffix); returns the path."""
    use_file_backend()
    import matplotlib.pyplot as plt


    fabric = cluster.fabric
    pic = picture(fabric)
    torus = fabric.kind == "torus" and not pic.aggregated
    rows = None if fabric.kind in ("graph", "ring", "torus") else draw_tiered.rows(pic)
    size = draw_torus.figure_size(fabric) if torus else draw_tiered.figure_size(cluster, pic, rows)
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    if torus:
        handles, notes = draw_torus.draw(ax, cluster, pic)
    else:
        handles, notes = draw_tiered.draw(ax, size[0], cluster, pic, rows), []
    _wrap_labels(ax, handles, KEY_CHARS)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    gpus = f"{cluster.devices_per_node} GPU{'s' if cluster.devices_per_node != 1 else ''}"
    domains = (f", {fabric.islands} NVLink domains of {fabric.domain_size} GPUs"
               if fabric.kind == "nvlink-domain" else "")
    fig.suptitle(f"{cluster.name}: {fabric.kind}, {cluster.nodes:,} nodes x {gpus}{domains}; routing {fabric.routing}; "
                 "line width = bandwidth (key at right)", fontsize=10)
    caption = _caption(cluster, pic, notes, size[0] - draw_tiered.LEGEND_WIDTH_IN)
    if caption:
        ax.set_title(caption, fontsize=8, loc="left")
    ax.set_axis_off()
    return save_figure_atomic(fig, path, dpi=dpi)
