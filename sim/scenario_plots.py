"""The figure of a multi-job scenario: who ran when, above which links were busy when, and whose they were.

Why one figure: a job's slowdown is explained by the links it shared; the heat map of link utilization
(rows: the busiest links, busiest first; columns: time) lined up under the jobs' iterations shows where and
when two jobs met, which a table of slowdowns cannot. Beside each row, one cell per job says which jobs' GPUs
have a route over that link, and the links between switches (the oversubscribed uplinks two jobs meet on)
are named in red. A link whose two directions carried the same load is one row (``a<->b``): halving the rows
is what lets their names be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flexcomm.costmodel.atomic import save_figure_atomic
from flexcomm.costmodel.plotting import use_file_backend
from flexcomm.sim.network import Network

#: At most this many rows (the busiest by mean utilization).
MAX_LINKS = 32
#: Links whose utilization never reached this are left out (named in the title by count): a row of black says
#: nothing, and its name costs the busy rows their room.
MIN_PEAK = 0.05
#: Two directions of a link fold into one row when their utilization differs by at most this anywhere.
FOLD_TOLERANCE = 0.02
#: Colour of the names of links between switches (the uplinks jobs contend on).
UPLINK_COLOUR = "#c0392b"


def link_rows(result: Any) -> list[tuple[str, list[int]]]:
    """(row label, link indices) of the used links, a link and its reverse folded into one ``a<->b`` row when
    they carried the same load, the busiest (mean utilization over the run) first."""
    util = result.utilization
    names = list(result.link_names)
    index = {name: i for i, name in enumerate(names)}
    busy = [i for i in np.flatnonzero(util.max(axis=1) > 0)]
    rows: list[tuple[str, list[int]]] = []
    taken: set[int] = set()
    for i in busy:
        if i in taken:
            continue
        a, sep, b = names[i].partition("->")
        twin = index.get(f"{b}->{a}") if sep else None
        if twin is not None and twin not in taken and np.allclose(util[i], util[twin], atol=FOLD_TOLERANCE, rtol=0):
            rows.append((f"{a}<->{b}", [i, twin]))
            taken.update((i, twin))
        else:
            rows.append((names[i], [i]))
            taken.add(i)
    rows.sort(key=lambda row: (-round(float(util[row[1]].max(axis=0).mean()), 9), _natural(row[0])))
    return rows


def _natural(name: str) -> list[Any]:
    """Sort key that puts node2 before node10."""
    import re

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def job_links(result: Any) -> dict[str, set[str]]:
    """Per job, the links on a route between two of its GPUs (what its collectives can load)."""
    import simpy


    scenario = result.scenario
    net = Network(simpy.Environment(), scenario.cluster, sharing=scenario.sharing, coupling=scenario.coupling)
    found: dict[str, set[str]] = {}
    for job in scenario.jobs:
        ranks = list(job.ranks)
        pairs = np.array([(a, b) for a in ranks for b in ranks if a != b], dtype=np.int64)
        found[job.name] = set(net.pattern(pairs).links()) if len(pairs) else set()
    return found


def switch_links(cluster: Any) -> set[str]:
    """Names of the links between two switches (neither end a host or NIC): the uplinks of a fat tree."""
    fabric = cluster.fabric
    hosts = set(fabric.endpoints)
    return {data.get("name", f"{u}->{v}") for u, v, data in fabric.graph.edges(data=True)
            if u not in hosts and v not in hosts}


def plot_utilization(result: Any, path: str | Path) -> Path:
    use_file_backend()
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap


    util = result.utilization
    every = link_rows(result)
    rows = [row for row in every if util[row[1]].max() >= MIN_PEAK][:MAX_LINKS]
    jobs = result.scenario.jobs
    colours = plt.get_cmap("tab10")
    on_route = job_links(result)
    uplinks = switch_links(result.scenario.cluster)
    n = max(len(rows), 8)
    fig = plt.figure(figsize=(12, 2.6 + 0.26 * n + 0.35 * len(jobs)), layout="constrained")
    grid = fig.add_gridspec(2, 3, height_ratios=[0.6 + 0.35 * len(jobs), 0.26 * n],
                            width_ratios=[1.0, 0.035 * len(jobs) + 0.02, 0.02])
    ax_jobs = fig.add_subplot(grid[0, 0])
    ax_heat = fig.add_subplot(grid[1, 0], sharex=ax_jobs)
    ax_who = fig.add_subplot(grid[1, 1])  # its own y ticks (mean utilization): sharing would replace the names
    ax_bar = fig.add_subplot(grid[1, 2])
    scale = 1e3  # ms
    for k, job in enumerate(jobs):
        part = result.iterations[result.iterations["job"] == job.name]
        bars = [(s * scale, (e - s) * scale) for s, e in zip(part["start_s"], part["end_s"], strict=True)]
        ax_jobs.broken_barh(bars, (k - 0.35, 0.7), facecolors=[colours(k % 10)] * len(bars), edgecolors="white",
                            linewidth=0.6)
    ax_jobs.set_yticks(range(len(jobs)), [f"{j.name} ({len(j.ranks)} GPUs)" for j in jobs], fontsize=9)
    ax_jobs.set_ylim(len(jobs) - 0.5, -0.5)
    ax_jobs.set_title("iterations of each job (one bar each)", fontsize=9, loc="left")
    ax_jobs.tick_params(labelbottom=True)  # shared time axis: readable on both panels
    ax_jobs.grid(True, axis="x", alpha=0.3)
    edges = result.bin_edges * scale
    rates = np.array([util[links].max(axis=0) for _, links in rows]) if rows else np.zeros((0, len(edges) - 1))
    image = ax_heat.pcolormesh(edges, np.arange(len(rows) + 1), rates, cmap="magma", vmin=0, vmax=1, shading="flat")
    ax_heat.set_yticks(np.arange(len(rows)) + 0.5, [label for label, _ in rows], fontsize=8)
    for tick, (_, links) in zip(ax_heat.get_yticklabels(), rows, strict=True):
        if any(result.link_names[i] in uplinks for i in links):
            tick.set_color(UPLINK_COLOUR)
            tick.set_fontweight("bold")
    ax_heat.set_ylim(len(rows), 0)
    ax_heat.set_xlabel("simulated time (ms)")
    left_out = len(every) - len(rows)
    ax_heat.set_title("link utilization (fraction of capacity), busiest first"
                      + (f"; {left_out} of {len(every)} used links below {MIN_PEAK:.0%} left out" if left_out else "")
                      + "\nred names: links between switches (the uplinks jobs share); a<->b: both directions alike",
                      fontsize=9, loc="left")
    # which jobs route over each row's links: a cell in the job's colour, white where it does not
    member = np.full((len(rows), len(jobs)), np.nan)
    for r, (_, links) in enumerate(rows):
        for k, job in enumerate(jobs):
            if any(result.link_names[i] in on_route[job.name] for i in links):
                member[r, k] = k
    palette = ListedColormap([colours(k % 10) for k in range(len(jobs))])
    ax_who.pcolormesh(np.arange(len(jobs) + 1), np.arange(len(rows) + 1), np.ma.masked_invalid(member),
                      cmap=palette, vmin=-0.5, vmax=len(jobs) - 0.5, edgecolors="white", linewidth=0.8)
    ax_who.set_ylim(len(rows), 0)
    ax_who.set_xticks(np.arange(len(jobs)) + 0.5, [j.name for j in jobs], rotation=90, fontsize=8)
    ax_who.set_title("jobs\nrouted", fontsize=8)
    ax_who.tick_params(labelleft=False, labelright=True, left=False, right=True)
    ax_who.set_yticks(np.arange(len(rows)) + 0.5,
                      [f"{100 * float(util[links].max(axis=0).mean()):.0f} %" for _, links in rows], fontsize=7)
    ax_who.set_ylabel("mean utilization", fontsize=8)
    ax_who.yaxis.set_label_position("right")
    fig.colorbar(image, cax=ax_bar, label="utilization")
    fig.suptitle(f"{result.scenario.name} on {result.scenario.cluster.name} ({result.scenario.sharing} sharing, "
                 f"{result.scenario.coupling} coupling)", fontsize=10)
    return save_figure_atomic(fig, path)
