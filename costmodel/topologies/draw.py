"""A picture of a cluster's fabric: hosts (or NICs) at the bottom, switches by tier above, tori as grids.

Why: a topology written as numbers (k, tiers, rails, oversubscription) is easy to get wrong; seeing which
host hangs off which leaf, which rail a NIC is on and where the thin links are catches it at once. Links
are drawn once per cable, their width growing with bandwidth and their colour naming their class, so an
oversubscribed tier or a degraded cable stands out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from flexcomm.costmodel.plotting import use_file_backend
from flexcomm.costmodel.units import format_bandwidth

#: Above this many vertices the labels go (the shape still shows).
LABEL_LIMIT = 80


def _tiers(graph: nx.Graph) -> dict[str, int]:
    """Hosts and NICs tier 0; a switch's tier: its own ``tier`` attribute, else its hop distance to a host."""
    ends = [v for v, d in graph.nodes(data=True) if d.get("kind") in ("host", "nic")]
    distance = nx.multi_source_dijkstra_path_length(graph, ends, weight=None) if ends else {}
    return {v: int(d.get("tier", distance.get(v, 1))) if d.get("kind") not in ("host", "nic") else 0
            for v, d in graph.nodes(data=True)}


def _layout(fabric: Any, graph: nx.Graph) -> dict[str, tuple[float, float]]:
    kind = fabric.kind
    if kind == "torus":
        dims = list(fabric.dims) + [1] * (3 - len(fabric.dims))
        pos = {}
        for v, data in graph.nodes(data=True):
            x, y, *rest = data["coord"]
            z = rest[0] if rest else 0
            pos[v] = (x + z * (dims[0] + 1.2), y + 0.25 * z)  # planes of the last dimension side by side
        return pos
    if kind == "graph" or kind == "ring":
        return nx.kamada_kawai_layout(graph) if len(graph) <= 200 else nx.spring_layout(graph, seed=0)
    tiers = _tiers(graph)
    rows: dict[int, list[str]] = {}
    for v in fabric.graph:  # the fabric's insertion order: hosts, NICs and switches each in index order
        rows.setdefault(tiers[v], []).append(v)
    for members in rows.values():  # NICs grouped under their rail's leaf: far fewer crossings
        members.sort(key=lambda v: (graph.nodes[v].get("rail", 0), graph.nodes[v].get("node", 0)))
    pos = {}
    for tier, members in rows.items():  # every tier spans the full width, so cables fan out, not in
        for i, v in enumerate(members):
            pos[v] = ((i + 0.5) / len(members), float(tier))
    return pos


def draw_fabric(cluster: Any, path: str | Path, dpi: int | None = None) -> Path:
    """Draw ``cluster.fabric`` into ``path`` (PNG/SVG/PDF by suffix); returns the path."""
    use_file_backend()
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from flexcomm.costmodel.atomic import save_figure_atomic

    fabric = cluster.fabric
    graph = fabric.graph.to_undirected()
    pos = _layout(fabric, graph)
    n = len(graph)
    width = min(22.0, max(8.0, 0.09 * n + 6))
    fig, ax = plt.subplots(figsize=(width, 6.5 if fabric.kind != "torus" else 5.5), layout="constrained")
    kinds = sorted({d.get("kind", "link") for _, _, d in graph.edges(data=True)})
    palette = dict(zip(kinds, ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"], strict=False))
    bandwidths = np.array([d["bandwidth_Bps"] for _, _, d in graph.edges(data=True)], dtype=float)
    lo, hi = float(bandwidths.min()), float(bandwidths.max())
    wrap = []
    for u, v, d in graph.edges(data=True):
        scale = 0.5 + 2.5 * (np.log(d["bandwidth_Bps"] / lo) / np.log(hi / lo) if hi > lo else 1.0)
        style = "--" if d.get("duplex") == "half" else "-"
        if fabric.kind == "torus" and abs(pos[u][0] - pos[v][0]) + abs(pos[u][1] - pos[v][1]) > 1.5:
            wrap.append((u, v))  # a wrap-around cable: drawn as a faint arc so the grid stays readable
            nx.draw_networkx_edges(graph, pos, edgelist=[(u, v)], ax=ax, width=0.6, alpha=0.35,
                                   edge_color=palette[d.get("kind", "link")], style=style,
                                   connectionstyle="arc3,rad=0.25", arrows=True, arrowstyle="-")
            continue
        nx.draw_networkx_edges(graph, pos, edgelist=[(u, v)], ax=ax, width=scale,
                               edge_color=palette[d.get("kind", "link")], style=style, alpha=0.75)
    shapes = {"host": ("s", "#4d4d4d"), "nic": ("s", "#7f7f7f"), "switch": ("o", "#9ecae1")}
    size = 220 if n <= LABEL_LIMIT else max(12, 4000 // n)
    domains = sorted({d["domain"] for _, d in graph.nodes(data=True) if "domain" in d})
    domain_colours = dict(zip(domains, ["#6a3d9a", "#b15928", "#33a02c", "#e31a1c", "#1f78b4", "#ff7f00"] * 64,
                              strict=False))
    for kind, (marker, colour) in shapes.items():
        nodes = [v for v, d in graph.nodes(data=True) if d.get("kind", "switch") == kind]
        if nodes:
            colours = [domain_colours.get(graph.nodes[v].get("domain"), colour) for v in nodes]
            nx.draw_networkx_nodes(graph, pos, nodelist=nodes, ax=ax, node_shape=marker, node_color=colours,
                                   node_size=size, edgecolors="k", linewidths=0.4)
    if n <= LABEL_LIMIT:
        for v, (x, y) in pos.items():  # bottom-row names stand upright so neighbours never overlap
            bottom = graph.nodes[v].get("kind") in ("host", "nic") and fabric.kind not in ("torus", "graph", "ring")
            ax.text(x, y - (0.08 if bottom else 0.0), v, fontsize=6, ha="center", va="top" if bottom else "center",
                    rotation=90 if bottom else 0)
    handles = []
    for kind in kinds:
        bws = sorted({d["bandwidth_Bps"] for _, _, d in graph.edges(data=True) if d.get("kind", "link") == kind})
        text = ", ".join(format_bandwidth(b) for b in bws[:3]) + (" ..." if len(bws) > 3 else "")
        handles.append(Line2D([], [], color=palette[kind], lw=2.5, label=f"{kind} links: {text}"))
    for kind, (marker, colour) in shapes.items():
        count = sum(1 for _, d in graph.nodes(data=True) if d.get("kind", "switch") == kind)
        if count:
            plural = {"switch": "switches"}.get(kind, f"{kind}s") if count != 1 else kind
            handles.append(Line2D([], [], marker=marker, color=colour, ls="", markeredgecolor="k",
                                  label=f"{count} {plural}"))
    for domain, colour in domain_colours.items():
        handles.append(Line2D([], [], marker="s", color=colour, ls="", markeredgecolor="k",
                              label=f"NVLink domain {domain} ({fabric.domain_size} GPUs)"))
    if wrap:
        handles.append(Line2D([], [], color="0.5", lw=0.8, alpha=0.5, label=f"{len(wrap)} wrap-around cables"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    gpus = f"{cluster.devices_per_node} GPU{'s' if cluster.devices_per_node != 1 else ''}"
    domains_text = f", {fabric.islands} NVLink domains of {fabric.domain_size} GPUs" if domains else ""
    ax.set_title(f"{cluster.name}: {fabric.kind}, {cluster.nodes} nodes x {gpus}{domains_text}; routing "
                 f"{fabric.routing}; line width grows with bandwidth", fontsize=10)
    ax.set_axis_off()
    return save_figure_atomic(fig, path, dpi=dpi)
