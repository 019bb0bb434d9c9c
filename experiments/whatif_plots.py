"""Maps of the what-if study: which exchange wins where, and by how much over dense allreduce."""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.plotting import use_file_backend  # noqa: E402

use_file_backend()  # files only, unless a notebook's pyplot is already in use
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import BoundaryNorm, ListedColormap  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from flexcomm.costmodel.atomic import save_figure_atomic  # noqa: E402
from flexcomm.costmodel.compressed import PRICED_SCHEMES as SCHEMES  # noqa: E402
from flexcomm.costmodel.plotting import (  # noqa: E402  (SCHEME_COLOURS: one meaning per colour across tools)
    SCHEME_COLOURS,
    coinciding_line,
    name_coinciding,
    readable_log_axis,
)
from flexcomm.costmodel.units import format_count, format_time  # noqa: E402

#: Speedup contours drawn where the data spans them: dense enough that a panel shows more than one.
CONTOUR_LEVELS = (1.25, 1.5, 2, 3, 5, 10, 20, 50, 100, 300, 1000)
SCHEME_LABELS = {"dense": "dense allreduce", "topk-ag": "Top-k over Allgather",
                 "topk-ar": "Allreduce-compatible Top-k", "powersgd": "PowerSGD", "fp16": "fp16 allreduce",
                 "bf16": "bf16 allreduce"}


def _nearest(values: np.ndarray, wanted: float) -> float:
    values = np.unique(values)
    return float(values[np.argmin(np.abs(np.log(values) - np.log(wanted)))])


def _log_edges(values: np.ndarray) -> np.ndarray:
    """Cell edges halfway between log-spaced centres (matplotlib's "nearest" halves them linearly, which on a
    log axis makes the first cell reach far beyond the first value priced)."""
    logs = np.log(np.asarray(values, dtype=float))
    if len(logs) == 1:
        return np.exp(np.array([logs[0] - 0.5, logs[0] + 0.5]))
    mids = (logs[1:] + logs[:-1]) / 2
    return np.exp(np.concatenate([[2 * logs[0] - mids[0]], mids, [2 * logs[-1] - mids[-1]]]))


def _winner_panel(ax: plt.Axes, best: pd.DataFrame, x: str, y: str, xlabel: str, ylabel: str) -> None:
    """Colour = fastest scheme; contours = its speedup over dense allreduce."""
    xs = np.sort(best[x].unique())
    ys = np.sort(best[y].unique())
    codes = best.pivot_table(index=y, columns=x, values="code", aggfunc="first").reindex(index=ys, columns=xs)
    speed = best.pivot_table(index=y, columns=x, values="speedup_vs_dense", aggfunc="first").reindex(
        index=ys, columns=xs)
    cmap = ListedColormap([SCHEME_COLOURS[s] for s in SCHEMES])
    norm = BoundaryNorm(np.arange(len(SCHEMES) + 1) - 0.5, cmap.N)
    ax.pcolormesh(_log_edges(xs), _log_edges(ys), codes.to_numpy(), cmap=cmap, norm=norm, shading="flat")
    values = speed.to_numpy()
    levels = [lv for lv in CONTOUR_LEVELS if np.nanmin(values) < lv < np.nanmax(values)]
    ax.set_xscale("log")
    ax.set_yscale("log")
    if levels and len(xs) > 1 and len(ys) > 1:
        contour = ax.contour(xs, ys, speed.to_numpy(), levels=levels, colors="k", linewidths=1.2)
        spaced_contour_labels(ax, contour)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.tick_params(labelbottom=True, labelleft=True)  # every panel readable on its own, shared axes too


#: Points of type between two contour labels' centres: a label ("1.25x" at 7 pt) is about 20 pt wide.
LABEL_GAP_PT = 26.0


def spaced_contour_labels(ax: plt.Axes, contour, fontsize: float = 7.0) -> None:
    """One label per contour level, each placed where it is farthest from the labels already placed, and left
    out where it could not stand clear of them (matplotlib's own placement put "1.25x" over "1.5x" where two
    contours run close). The line stays drawn either way."""
    ax.figure.canvas.draw_idle()
    gap = LABEL_GAP_PT * ax.figure.dpi / 72.0
    box = ax.get_window_extent()
    placed: list[np.ndarray] = []
    for level, segments in zip(contour.levels, contour.allsegs, strict=True):
        points = np.concatenate([seg for seg in segments if len(seg)]) if any(len(seg) for seg in segments) else None
        if points is None:
            continue
        shown = ax.transData.transform(points)
        inside = ((shown[:, 0] > box.x0 + gap / 2) & (shown[:, 0] < box.x1 - gap / 2)
                  & (shown[:, 1] > box.y0 + gap / 3) & (shown[:, 1] < box.y1 - gap / 3))
        if not inside.any():
            continue
        candidates, positions = points[inside], shown[inside]
        if placed:
            clearance = np.min(np.linalg.norm(positions[:, None, :] - np.array(placed)[None], axis=2), axis=1)
            best = int(np.argmax(clearance))
            if clearance[best] < gap:
                continue
        else:
            best = len(candidates) // 2
        placed.append(positions[best])
        ax.clabel(contour, levels=[level], manual=[tuple(candidates[best])], fmt=lambda v: f"{v:g}x",
                  fontsize=fontsize, inline=True)


def _legend(fig: plt.Figure, best: pd.DataFrame) -> None:
    """Only the schemes that win somewhere in the figure (an entry for a colour never drawn misleads)."""
    present = [s for s in SCHEMES if (best["scheme"] == s).any()]
    handles = [Patch(color=SCHEME_COLOURS[s], label=SCHEME_LABELS[s]) for s in present]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, bbox_to_anchor=(0.5, -0.02))


def _best_rows(table: pd.DataFrame) -> pd.DataFrame:
    best = table[table["is_best"]].copy()
    best["code"] = best["scheme"].map({s: i for i, s in enumerate(SCHEMES)})
    return best


def plot_link_sweep(table: pd.DataFrame, out_dir: Path, ranks_shown=(8, 64, 1024),
                    latencies_shown=(1e-5, 1e-3)) -> list[Path]:
    """Per model: panels over (bandwidth x ratio) for a few rank counts and latencies."""
    paths = []
    best_all = _best_rows(table)
    for model_name, best in best_all.groupby("model", sort=False):
        rank_values = [_nearest(best["ranks"].to_numpy(), r) for r in ranks_shown]
        lat_values = [_nearest(best["latency_s"].to_numpy(), lat) for lat in latencies_shown]
        fig, axes = plt.subplots(len(lat_values), len(rank_values), figsize=(4 * len(rank_values),
                                 3.4 * len(lat_values)), squeeze=False, sharex=True, sharey=True)
        for i, lat in enumerate(lat_values):
            for j, p in enumerate(rank_values):
                sub = best[(best["latency_s"] == lat) & (best["ranks"] == p)]
                _winner_panel(axes[i, j], sub, "bandwidth_gbit_s", "ratio", "bandwidth (Gbit/s)",
                              "compression ratio (fraction kept)")
                axes[i, j].set_title(f"{int(p)} ranks, latency {format_time(lat)}", fontsize=9)
        params = best["params"].iloc[0]
        fig.suptitle(f"{model_name} ({format_count(params)} parameters): fastest gradient exchange, "
                     "contours = speedup over dense ring allreduce", fontsize=10)
        _legend(fig, best)
        fig.tight_layout(rect=(0, 0.04, 1, 0.96))
        paths.append(save_figure_atomic(fig, out_dir / f"whatif_{model_name}.png"))
    return paths


def plot_ranks_sweep(table: pd.DataFrame, out_dir: Path, title: str) -> Path:
    """One panel per model over (ranks x ratio): used for a given cluster, whose links are fixed."""
    best_all = _best_rows(table)
    best_all = best_all[best_all["ranks"] >= 2]  # one rank exchanges nothing: no winner to draw
    models = list(best_all["model"].unique())
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False, sharey=True)
    for ax, model_name in zip(axes[0], models, strict=True):
        _winner_panel(ax, best_all[best_all["model"] == model_name], "ranks", "ratio", "ranks",
                      "compression ratio (fraction kept)")
        ax.set_xscale("log", base=2)
        ranks = np.sort(best_all["ranks"].unique())
        ax.set_xticks(ranks, [f"{int(r)}" for r in ranks])  # the rank counts priced, not powers from 2^0
        ax.minorticks_off()
        ax.set_title(model_name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    _legend(fig, best_all)
    fig.tight_layout(rect=(0, 0.06, 1, 0.94))
    return save_figure_atomic(fig, out_dir / "whatif_cluster.png")


def plot_nic_sweep(table: pd.DataFrame, out_dir: Path, cluster_name: str, own_gbit_s: float) -> Path:
    """One panel per model over (NIC speed x ratio) at the cluster's largest rank count: where each
    exchange wins as the network gets faster, the cluster's own NIC marked."""
    best_all = _best_rows(table)
    top = int(best_all["ranks"].max())
    best_all = best_all[best_all["ranks"] == top]
    models = list(best_all["model"].unique())
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False, sharey=True)
    for ax, model_name in zip(axes[0], models, strict=True):
        _winner_panel(ax, best_all[best_all["model"] == model_name], "bandwidth_gbit_s", "ratio",
                      "NIC bandwidth (Gbit/s)", "compression ratio (fraction kept)")
        ax.axvline(own_gbit_s, color="k", ls="--", lw=1)
        ax.set_title(f"{model_name}; dashed: {cluster_name}'s {own_gbit_s:g} Gbit/s", fontsize=9)
    fig.suptitle(f"{cluster_name}, {top} ranks, every exchange as NCCL runs it: fastest exchange by NIC speed; "
                 "contours = speedup over dense", fontsize=10)
    _legend(fig, best_all)
    fig.tight_layout(rect=(0, 0.06, 1, 0.94))
    return save_figure_atomic(fig, out_dir / "whatif_nic_sweep.png")


def plot_crossover(table: pd.DataFrame, out_dir: Path) -> Path:
    """Allgather vs Allreduce-compatible Top-k: time ratio against ranks at 1% density, per model."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ratio = _nearest(table["ratio"].to_numpy(), 0.01)
    sub = table[np.isclose(table["ratio"], ratio)]
    bw = _nearest(sub["bandwidth_Bps"].to_numpy(), 1.25e9)
    lat = _nearest(sub["latency_s"].to_numpy(), 1e-5)
    sub = sub[(sub["bandwidth_Bps"] == bw) & (sub["latency_s"] == lat)]
    for model_name, rows in sub.groupby("model", sort=False):
        wide = rows.pivot_table(index="ranks", columns="scheme", values="seconds")
        ax.plot(wide.index, wide["topk-ag"] / wide["topk-ar"], marker="o", label=model_name)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks")
    ax.set_ylabel("t(Top-k Allgather) / t(AR-compatible Top-k)")
    ax.set_title(f"ratio {ratio:g}, {bw * 8 / 1e9:g} Gbit/s, latency {format_time(lat)}: above 1, AR wins",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure_atomic(fig, out_dir / "whatif_crossover.png")


#: Markers of the schemes in the step figures (the colours are :data:`SCHEME_COLOURS`).
STEP_MARKERS = {"dense": "s", "topk-ag": "o", "topk-ar": "^", "powersgd": "D", "fp16": "v", "bf16": "P"}
STEP_LABELS = {"dense": "dense", "topk-ag": "Top-k AG", "topk-ar": "Top-k AR", "powersgd": "PowerSGD",
               "fp16": "fp16", "bf16": "bf16"}


def plot_step_lines(table: pd.DataFrame, out_dir: Path, x: str, xlabel: str, title: str, filename: str,
                    own_x: float | None = None) -> Path:
    """One panel per model: the training step of every scheme over ``x`` (rank count or NIC speed), Top-k at
    its fastest ratio. A line, not a map: on a GPU cluster the schemes that matter (PowerSGD, fp16) have no
    ratio, so a ratio axis drew stripes; the step is what the user waits for."""
    models = list(table["model"].unique())
    fig, axes = plt.subplots(1, len(models), figsize=(4.4 * len(models), 3.8), squeeze=False)
    handles: dict[str, Line2D] = {}
    for ax, model_name in zip(axes[0], models, strict=True):
        rows = table[(table["model"] == model_name) & table["fits_memory"]]
        drawn: list = []
        for scheme in [s for s in SCHEMES if (rows["scheme"] == s).any()]:
            fastest = rows[rows["scheme"] == scheme].groupby(x)["step_seconds"].min().sort_index()
            xs, ys = fastest.index.to_numpy(dtype=float), fastest.to_numpy()
            same = coinciding_line(xs, ys, drawn)
            if same is not None:  # drawn once, named for both
                name_coinciding(same, STEP_LABELS[scheme], SCHEME_COLOURS[scheme])
                continue
            (line,) = ax.plot(xs, ys, color=SCHEME_COLOURS[scheme], marker=STEP_MARKERS[scheme], lw=1.6, ms=5,
                              label=STEP_LABELS[scheme])
            drawn.append((line, xs, ys))
        if own_x is not None:
            ax.axvline(own_x, color="k", ls="--", lw=0.9)
        ax.set_xscale("log", base=2 if x == "ranks" else 10)
        values = np.sort(rows[x].unique())
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.minorticks_off()
        ax.set_yscale("log")
        readable_log_axis(ax, "y")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("training step (s)")
        batch = rows["batch_per_gpu"].iloc[0] if len(rows) else float("nan")
        ax.set_title(f"{model_name}, batch {batch:g} per GPU", fontsize=9)
        for line, *_ in drawn:
            handles.setdefault(line.get_label(), line)
    if own_x is not None:
        handles["the cluster's own NIC"] = Line2D([], [], color="k", ls="--", lw=0.9)
    # below the panels, never over a line (a step reaches any height); Top-k drawn at its fastest ratio
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(len(handles), 6), fontsize=8,
               frameon=False)
    fig.suptitle(title + " (Top-k at its fastest ratio)", fontsize=10)
    fig.tight_layout(rect=(0, 0.09, 1, 0.93))
    return save_figure_atomic(fig, out_dir / filename)
