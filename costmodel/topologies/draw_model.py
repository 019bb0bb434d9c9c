"""What a topology drawing shows, before any matplotlib: glyphs (a vertex, or a group of vertices) and cables
(one per physical cable, or one per pair of groups standing for all the cables between them).

Why a model of its own: a 16,384-GPU fabric has 17,000 vertices and 33,000 cables; drawing each is minutes of
rendering and a solid block of ink. Above :data:`AGGREGATE_ABOVE` vertices the drawing groups them (one glyph
per rail's NICs, per rail's leaves, per pod, per torus plane) and draws one line per pair of groups, so the
picture stays readable and its cost stays bounded whatever the fabric's size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

#: Above this many vertices a drawing aggregates (a glyph per rail, leaf group, pod or plane).
AGGREGATE_ABOVE = 300


@dataclass
class Glyph:
    """One marker in the drawing: a vertex, or ``count`` vertices of one group."""

    key: str
    kind: str  # host | nic | switch
    tier: int
    label: str
    short: str = ""  # what fits inside the marker (a node's index), empty when nothing does
    count: int = 1
    order: tuple = ()  # sort key within its row
    domain: int | None = None
    coord: tuple[int, ...] | None = None  # a torus vertex's coordinate


@dataclass
class Cable:
    """One cable (``count`` = 1) or ``count`` cables of one class between two groups."""

    u: str
    v: str
    kind: str
    bandwidth_Bps: float
    duplex: str = "full"
    count: int = 1


@dataclass
class Picture:
    glyphs: dict[str, Glyph]
    cables: list[Cable]
    vertices: int  # of the fabric, whether aggregated or not
    aggregated: bool = False
    hidden_cables: int = 0  # cables inside one group (aggregated drawings do not draw them)
    notes: list[str] = field(default_factory=list)


def tiers(graph: nx.DiGraph) -> dict[str, int]:
    """Hosts and NICs tier 0; a switch's tier: its own ``tier`` attribute, else its hop distance to a host."""
    ends = [v for v, d in graph.nodes(data=True) if d.get("kind") in ("host", "nic")]
    distance = nx.multi_source_dijkstra_path_length(graph, ends, weight=None) if ends else {}
    return {v: 0 if d.get("kind") in ("host", "nic") else int(d.get("tier", distance.get(v, 1)))
            for v, d in graph.nodes(data=True)}


def cables(graph: nx.DiGraph) -> list[tuple[str, str, dict]]:
    """One (u, v, data) per cable: every fabric stores a cable as its two directions; this keeps one."""
    return [(u, v, d) for u, v, d in graph.edges(data=True) if not (v < u and graph.has_edge(v, u))]


def _index(name: str) -> int:
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits else 0


def detailed(fabric: Any) -> Picture:
    """Every vertex a glyph, every cable a line."""
    graph = fabric.graph
    tier_of = tiers(graph)
    glyphs = {}
    for position, (v, d) in enumerate(graph.nodes(data=True)):
        kind = d.get("kind", "switch")
        node = d.get("node", d.get("index"))
        short = str(node) if kind in ("host", "nic") and node is not None else ""
        glyphs[v] = Glyph(v, kind, tier_of[v], v, short, 1, (d.get("domain", 0), d.get("rail", 0),
                          node if node is not None else position), d.get("domain"), d.get("coord"))
    lines = [Cable(u, v, d.get("kind", "link"), float(d["bandwidth_Bps"]), d.get("duplex", "full"))
             for u, v, d in cables(graph)]
    return Picture(glyphs, lines, len(graph))


def _group_of_switch(name: str, data: dict) -> tuple[str, str, tuple]:
    """(key, label, order) of a switch's group: its rail's leaves, else its name less the last index
    (``leaf3.5`` -> pod 3's leaves ``leaf3.*``; ``spine12`` -> ``spine*``)."""
    if "rail" in data:
        return f"rail{data['rail']}.leaves", f"rail {data['rail']}", (data["rail"],)
    stem = name.rsplit(".", 1)[0] + ".*" if "." in name else re.sub(r"\d+$", "", name) + "*"
    return stem, stem, (_index(stem) if "." in name else 0, stem)


def _groups(fabric: Any, tier_of: dict[str, int]) -> dict[str, tuple[str, str, tuple]]:
    """Every vertex's group (key, label, order): rails for NICs and rail leaves, name stems for switches,
    hosts by the group of the switch they hang off, torus hosts by plane of the first dimension."""
    graph = fabric.graph
    group: dict[str, tuple[str, str, tuple]] = {}
    for v, d in graph.nodes(data=True):
        if d.get("kind", "switch") == "switch":
            group[v] = _group_of_switch(v, d)
    for v, d in graph.nodes(data=True):
        kind = d.get("kind")
        if kind == "nic" and "rail" in d:
            domain = f"domain {d['domain']} " if "domain" in d else ""
            group[v] = (f"{domain}rail{d['rail']}.nics", f"{domain}rail {d['rail']}",
                        (d.get("domain", 0), d["rail"]))
        elif kind in ("host", "nic"):
            if d.get("coord") is not None:
                plane = d["coord"][0]
                group[v] = (f"plane{plane}", f"plane x={plane}", (plane,))
                continue
            up = sorted(group[s][0] for s in graph.successors(v) if s in group)
            key = up[0] if up else "hosts"
            group[v] = (f"hosts@{key}", f"hosts under {key}", (key,))
    return group


def aggregated(fabric: Any) -> Picture:
    """A glyph per group of vertices (see :func:`_groups`), a line per (group pair, cable class, bandwidth)."""
    graph = fabric.graph
    tier_of = tiers(graph)
    group = _groups(fabric, tier_of)
    if len(set(group.values())) > AGGREGATE_ABOVE:  # still too many: one glyph per kind and tier
        group = {v: (f"{d.get('kind')}.{tier_of[v]}", f"tier {tier_of[v]} {d.get('kind')}s", (tier_of[v],))
                 for v, d in graph.nodes(data=True)}
    glyphs: dict[str, Glyph] = {}
    for v, d in graph.nodes(data=True):
        key, label, order = group[v]
        glyph = glyphs.get(key)
        if glyph is None:
            glyphs[key] = Glyph(key, d.get("kind", "switch"), tier_of[v], label, "", 0, order, d.get("domain"))
        glyphs[key].count += 1
    for glyph in glyphs.values():  # two short lines, so a row of groups can carry every name
        noun = {"nic": "NICs", "host": "hosts", "switch": "switches"}[glyph.kind] if glyph.count != 1 else glyph.kind
        noun = "leaves" if glyph.key.endswith(".leaves") and glyph.count != 1 else noun
        glyph.label = f"{glyph.label}\n{glyph.count:,} {noun}"
    bundles: dict[tuple, int] = {}
    hidden = 0
    for u, v, d in cables(graph):
        a, b = sorted((group[u][0], group[v][0]))
        if a == b:
            hidden += 1
            continue
        key = (a, b, d.get("kind", "link"), float(d["bandwidth_Bps"]), d.get("duplex", "full"))
        bundles[key] = bundles.get(key, 0) + 1
    lines = [Cable(a, b, kind, bw, duplex, count) for (a, b, kind, bw, duplex), count in bundles.items()]
    return Picture(glyphs, lines, len(graph), aggregated=True, hidden_cables=hidden)


def picture(fabric: Any) -> Picture:
    """The drawing of ``fabric``: every vertex up to :data:`AGGREGATE_ABOVE`, groups above."""
    return detailed(fabric) if len(fabric.graph) <= AGGREGATE_ABOVE else aggregated(fabric)
