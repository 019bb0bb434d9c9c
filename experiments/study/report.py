"""A finished study's journal as a tidy table (CSV + Parquet), two figures and ``summary.md``.

The table is rebuilt from ``results.csv`` alone (never from in-memory rows), so a study run in one go
and one interrupted and resumed produce the same bytes. Rows follow the sweep order; ``ratio`` is
empty for strategies that take none (dense, moo), which run once per setting; for comparisons
(speedup, winners, plots) such a row stands for every ratio of its setting.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.costmodel.atomic import save_figure_atomic, write_atomic, write_csv_atomic, write_text_atomic
from flexcomm.costmodel.plotting import SCHEME_COLOURS, coinciding_line, name_coinciding, use_file_backend
from flexcomm.costmodel.units import format_time
from flexcomm.experiments.study.journal import JOURNAL
from flexcomm.experiments.study.spec import AXES, METRICS, RATIO_FREE, StudySpec
from flexcomm.sim.recovery_plots import POLICY_COLOURS
from flexcomm.workloads.names import workload_label

#: The schemes' and the recovery policies' colours as every other figure draws them (what-if maps, goodput)
COLOURS = {**SCHEME_COLOURS, **POLICY_COLOURS}
AXIS_LABELS = {"bandwidth_Bps": "bandwidth (Gbit/s)", "latency_s": "latency (s)", "ranks": "ranks",
               "ratio": "ratio (fraction kept)", "batch": "batch per rank", "steps": "steps", "workload": "workload",
               "repeat": "repeat", "nodes": "job nodes", "mtbf_s": "node MTBF (h)",
               "checkpoint_interval": "checkpoint interval", "horizon_s": "horizon (d)",
               "storage_Bps": "storage bandwidth (GB/s)", "repair_s": "repair time (h)",
               "planning_time": "planning charge"}
#: Plotted in these units (the tables keep SI): column -> divisor.
AXIS_SCALE = {"bandwidth_Bps": 1e9 / 8, "mtbf_s": 3600.0, "horizon_s": 86400.0, "storage_Bps": 1e9,
              "repair_s": 3600.0}


def _name(column: str) -> str:
    """An axis's name without its unit: ``latency``, for titles that print the value with its own unit."""
    return AXIS_LABELS[column].split(" (")[0]


def _setting(spec: StudySpec, table: pd.DataFrame) -> list[str]:
    return [c for c in spec.setting_columns if c in table.columns]


def _levels(spec: StudySpec, column: str, values: pd.Series) -> list:
    """An axis's values in plotting order: numbers ascending, labels (30min, young-daly) in the file's order."""
    present = list(dict.fromkeys(values))
    if pd.api.types.is_numeric_dtype(values):
        return sorted(present)
    axis = next((a for a, ax in AXES.items() if ax.column == column), None)
    order = [str(v) for v in spec.axes.get(axis, [])] if axis else []
    return sorted(present, key=lambda v: (order.index(str(v)) if str(v) in order else len(order), str(v)))


def load_table(spec: StudySpec, out: Path) -> pd.DataFrame:
    """The journal in sweep order with the derived metrics filled in."""
    table = pd.read_csv(out / JOURNAL, dtype={"point_id": str, "strategy": str, "workload": str})
    order = {p.id: p.index for p in spec.points}
    table = table[table["point_id"].isin(order)].drop_duplicates("point_id")
    table = table.assign(_order=table["point_id"].map(order)).sort_values("_order").drop(columns="_order")
    if "dense" in spec.strategies:
        keys = _setting(spec, table)
        dense = table.loc[table["strategy"] == "dense", [*keys, "step_time_s"]].rename(
            columns={"step_time_s": "_dense"})
        merged = table[keys].merge(dense, on=keys, how="left")
        table["speedup_vs_dense"] = merged["_dense"].to_numpy() / table["step_time_s"].to_numpy()
    return table.reset_index(drop=True)[spec.journal_columns]


def expand_ratio_free(table: pd.DataFrame) -> pd.DataFrame:
    """Ratio-free rows (dense, moo) repeated at every ratio of the study, for per-ratio comparisons."""
    if "ratio" not in table.columns:  # a recovery study: no compression ratio
        return table.copy()
    ratios = sorted(table["ratio"].dropna().unique())
    free = table["strategy"].isin(RATIO_FREE)
    if not ratios or not free.any():
        return table.copy()
    copies = [table[~free]] + [table[free].assign(ratio=r) for r in ratios]
    return pd.concat(copies, ignore_index=True)


def winners(spec: StudySpec, table: pd.DataFrame) -> pd.DataFrame:
    """Per configuration (setting and ratio) the best strategy by ``spec.winner_metric`` (NaN ranks last)."""
    metric = spec.winner_metric
    sign = 1.0 if METRICS[metric].goal == "min" else -1.0
    wide = expand_ratio_free(table)
    keys = [*_setting(spec, wide), *(["ratio"] if "ratio" in wide.columns else [])]
    wide = wide.assign(_score=(sign * wide[metric]).fillna(np.inf))
    best = wide.sort_values([*keys, "_score"], na_position="last").groupby(keys, dropna=False, sort=False).head(1)
    best = best.assign(winner=np.where(np.isfinite(best["_score"]), best["strategy"], "none"))
    return best[[*keys, "winner", metric]].reset_index(drop=True)


# --- figures -------------------------------------------------------------------------------------


def _axes_to_plot(spec: StudySpec, table: pd.DataFrame) -> list[str]:
    return [c for c in spec.swept if c != "repeat" and c in table.columns]


def _x(column: str, values: pd.Series) -> pd.Series:
    return values / AXIS_SCALE[column] if column in AXIS_SCALE else values


def _fmt(column: str, value: object) -> str:
    if column in AXIS_SCALE:
        unit = AXIS_LABELS[column].split("(")[-1].rstrip(")")
        return f"{float(value) / AXIS_SCALE[column]:g} {unit}"
    if column == "latency_s":

        return format_time(float(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


#: Series of one panel within this relative distance everywhere are drawn as one line named for both.
COINCIDENT_RTOL = 0.02


def plot_metrics(spec: StudySpec, table: pd.DataFrame, path: Path) -> Path:
    """Each metric against the first swept axis, one panel per value of the second, a line per strategy.

    Axes beyond those (and the ratio, when it is neither) are summarised by the median and named in the
    panel title; with the ratio swept but not plotted, each sparse strategy gets a line per ratio. Series that
    coincide in a panel (within 2 % at every point) are drawn once and labelled ``A = B``: one would hide the
    other whatever the styles.
    """
    use_file_backend()
    import matplotlib.pyplot as plt

    axes = _axes_to_plot(spec, table)
    wide = expand_ratio_free(table)
    metrics = spec.metrics
    x = axes[0] if axes else None
    facet = axes[1] if len(axes) > 1 else None
    facets = list(dict.fromkeys(wide[facet])) if facet else [None]
    rest = [c for c in axes[2:] if c != "ratio"]
    by_ratio = "ratio" in axes and "ratio" not in (x, facet)
    fig, grid = plt.subplots(len(metrics), len(facets), figsize=(4.2 * len(facets), 3.0 * len(metrics)),
                             squeeze=False, sharex=True)
    for i, metric in enumerate(metrics):
        # one scale per metric row, decided on all its panels' values, so a row reads across; long
        # durations in hours, not 10^5 s
        row_values = wide[metric].dropna()
        row_log = metric != "speedup_vs_dense" and len(row_values) and (row_values > 0).all() \
            and _spread(row_values) >= 10
        scale, y_label = _duration_unit(metric, row_values)
        for j, value in enumerate(facets):
            ax = grid[i][j]
            part = wide if facet is None else wide[wide[facet] == value]
            _draw_strategies(ax, spec, wide, part, metric, x, by_ratio, scale)
            _scale_panel(ax, spec, wide, metric, x, row_log)
            ax.tick_params(labelbottom=True)  # shared x, but every panel readable on its own
            title = f"{_name(facet)} = {_fmt(facet, value)}" if facet else spec.name  # value has its unit
            medians = [_name(c) for c in rest] + (["repeats"] if spec.repeats > 1 else [])
            if medians:
                title += f"\n(median over {', '.join(medians)})"
            if i == 0:
                ax.set_title(title, fontsize=9)
            if j == 0:
                ax.set_ylabel(y_label, fontsize=9)
            if i == len(metrics) - 1 and x is not None:
                ax.set_xlabel(AXIS_LABELS[x])
    _legend_and_save(fig, grid, spec, path)
    return path


def _draw_strategies(ax: Any, spec: StudySpec, wide: pd.DataFrame, part: pd.DataFrame, metric: str, x: str | None,
                     by_ratio: bool, scale: float) -> None:
    """One panel's series: a line per strategy (and per ratio where the ratio is not plotted), a bar per strategy
    when nothing is swept; a series coinciding with one already drawn renames that line instead."""
    drawn: list[tuple[Any, np.ndarray, np.ndarray]] = []  # (line, x, y) in this panel
    for strategy in spec.strategies:
        rows = part[part["strategy"] == strategy]
        groups = [(None, rows)] if not by_ratio or strategy in RATIO_FREE else list(rows.groupby("ratio"))
        for k, (ratio, sub) in enumerate(groups):
            label = strategy if ratio is None else f"{strategy} c={ratio:g}"
            style = ["-", "--", ":", "-."][k % 4]
            colour = COLOURS.get(strategy)
            if x is None:
                ax.bar(label, sub[metric].median() * scale, color=colour)
                continue
            line = sub.groupby(x)[metric].median()
            line = line.reindex([v for v in _levels(spec, x, wide[x]) if v in line.index])
            xs = _x(x, line.index.to_series()).to_numpy(dtype=float)
            values = line.to_numpy(dtype=float) * scale
            twin = coinciding_line(xs, values, drawn, COINCIDENT_RTOL)
            if twin is not None:  # one line would hide the other: draw it once, named for both
                name_coinciding(twin, label, colour)
                twin.set_markersize(5)
                continue
            (artist,) = ax.plot(xs, values, style, marker="o", ms=3, color=colour, label=label)
            drawn.append((artist, xs, values))


def _scale_panel(ax: Any, spec: StudySpec, wide: pd.DataFrame, metric: str, x: str | None, row_log: Any) -> None:
    """Log axes where the swept values (x) or the row's values (y) span a decade or more, ticks at the swept
    values; the speedup's break-even line at 1."""
    if x is not None and pd.api.types.is_numeric_dtype(wide[x]):
        span = wide[x].astype(float)
        if span.min() > 0 and span.max() / span.min() >= 10:
            ax.set_xscale("log")
            ticks = _x(x, pd.Series(_levels(spec, x, wide[x]), dtype=float))
            ax.set_xticks(ticks.to_numpy(), [f"{t:g}" for t in ticks])  # the swept values, not 2x10^1
            ax.minorticks_off()
        if row_log:
            ax.set_yscale("log")
    if metric == "speedup_vs_dense":
        ax.axhline(1.0, color="grey", lw=0.8)


def _legend_and_save(fig: Any, grid: np.ndarray, spec: StudySpec, path: Path) -> None:
    """One legend for the figure, an entry per label over all panels (a panel may have drawn two coinciding
    series as one), the title above it, and the file written atomically."""
    entries: dict[str, Any] = {}
    for ax in grid.flat:  # every panel's lines: one may have drawn two coinciding series as one
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    handles, labels = list(entries.values()), list(entries)
    if handles:
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 6), fontsize=8,
                   bbox_to_anchor=(0.5, 1.0 + 0.02 * math.ceil(len(labels) / 6)))
    fig.suptitle(f"{spec.name}: {spec.engine} engine", y=1.04 + 0.02 * math.ceil(len(labels) / 6), fontsize=10)
    fig.tight_layout()
    save_figure_atomic(fig, path)


def _duration_unit(metric: str, values: pd.Series) -> tuple[float, str]:
    """(factor, axis label) for a metric: seconds stay seconds unless the largest is over two hours."""
    label = METRICS[metric].label
    if label.endswith("(s)") and len(values) and float(values.max()) > 2 * 3600:
        return 1 / 3600, label[:-3] + "(h)"
    return 1.0, label


def _spread(values: pd.Series) -> float:
    values = values.dropna()
    return float(values.max() / values.min()) if len(values) and values.min() > 0 else 1.0


def winners_note(strategies: list[str], winners: pd.Series, shown: set[str]) -> str:
    """The title's words for the strategies a winners map does not colour: "never best" only for those that
    win no configuration; one that wins some but is no cell's most frequent winner is named with its share
    (the title called replan "never best" where the summary gave it 16.7 % of the wins)."""
    won_somewhere = set(winners)
    never = [n for n in strategies if n not in won_somewhere]
    outvoted = [n for n in strategies if n in won_somewhere and n not in shown]
    note = f"\nnever best: {', '.join(never)}" if never else ""
    if outvoted:
        shares = winners.value_counts(normalize=True)
        note += "\nbest in some configurations, no cell's most often: " + ", ".join(
            f"{n} ({shares[n]:.1%})" for n in outvoted)
    return note


def plot_winners(spec: StudySpec, best: pd.DataFrame, path: Path) -> Path:
    """The winning strategy (colour) over the first two swept axes; each cell says how often it won
    over the remaining axes (the most frequent winner is shown)."""
    use_file_backend()
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    axes = _axes_to_plot(spec, best)
    a = axes[0] if axes else None
    b = axes[1] if len(axes) > 1 else None
    rows_v = _levels(spec, b, best[b]) if b else [None]
    cols_v = _levels(spec, a, best[a]) if a else [None]
    names = [*spec.strategies, "none"]
    grid = np.full((len(rows_v), len(cols_v)), np.nan)
    text = [["" for _ in cols_v] for _ in rows_v]
    for r, rv in enumerate(rows_v):
        for c, cv in enumerate(cols_v):
            cell = best
            if a:
                cell = cell[cell[a] == cv]
            if b:
                cell = cell[cell[b] == rv]
            if not len(cell):
                continue
            counts = cell["winner"].value_counts()
            top = counts.index[0]
            grid[r, c] = names.index(top)
            text[r][c] = f"{top}\n{counts.iloc[0] / len(cell):.0%}" if len(cell) > 1 else top
    fig, ax = plt.subplots(figsize=(1.3 + 1.25 * len(cols_v), 1.0 + 0.8 * len(rows_v)))
    cmap = ListedColormap([COLOURS.get(n, "#bbbbbb") for n in names])
    ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(names) - 0.5, aspect="auto", origin="lower")
    for r in range(len(rows_v)):
        for c in range(len(cols_v)):
            ax.text(c, r, text[r][c], ha="center", va="center", fontsize=7, color="white")
    # a sweep of fewer than two axes still labels both: the missing axis is the study's one setting (its
    # workload; a factory by its name and a trace by its file name, not their paths)

    setting = workload_label(spec.workloads[0])
    ax.set_xticks(range(len(cols_v)), [_fmt(a, v) if a else setting for v in cols_v], fontsize=8)
    ax.set_yticks(range(len(rows_v)), [_fmt(b, v) if b else setting for v in rows_v], fontsize=8)
    if a:
        ax.set_xlabel(_name(a))  # the ticks carry the unit
    if b:
        ax.set_ylabel(_name(b))
    others = [_name(c) for c in axes[2:]]
    sub = (f"\neach cell: the strategy best most often over {' x '.join(others)}, and how often" if others else "")
    won = {names[int(v)] for v in grid[np.isfinite(grid)]}
    sub += winners_note(spec.strategies, best["winner"], won)
    ax.set_title(f"{spec.name}: best by {spec.winner_metric}{sub}", fontsize=9)
    from matplotlib.patches import Patch

    # the colour key names what the map shows; the strategies that never win are in the title, not the key
    key = [Patch(color=COLOURS.get(n, "#bbbbbb"), label=n) for n in spec.strategies if n in won]
    ax.legend(handles=key, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    return path


# --- summary -------------------------------------------------------------------------------------


def _cell(value: float) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{value:.4g}"


def summary_markdown(spec: StudySpec, table: pd.DataFrame, best: pd.DataFrame) -> str:
    swept = ", ".join(f"{name} ({len(values)})" for name, values in spec.axes.items()) or "none"
    lines = [f"# Study `{spec.name}`", ""]
    if spec.description:
        lines += [spec.description, ""]
    lines += [
        f"- engine `{spec.engine}`, cluster `{spec.cluster['name']}`, workload {', '.join(spec.workloads)}",
        f"- strategies: {', '.join(spec.strategies)}; swept: {swept}; seed {spec.seed}, repeats {spec.repeats}",
        f"- {len(table)} points, {table['wall_s'].sum():.3g} s of worker time",
        "", f"## Best strategy by `{spec.winner_metric}` ({METRICS[spec.winner_metric].goal}) per configuration", "",
        "| strategy | wins | share |", "|---|---:|---:|",
    ]
    counts = best["winner"].value_counts()
    for name, count in counts.items():
        lines.append(f"| {name} | {count} | {count / len(best):.1%} |")
    lines += ["", "## Metrics by strategy: median [min, max] over the sweep", "",
              "| strategy | " + " | ".join(spec.metrics) + " |", "|---|" + "---:|" * len(spec.metrics)]
    for strategy in spec.strategies:
        rows = table[table["strategy"] == strategy]
        cells = [f"{_cell(rows[m].median())} [{_cell(rows[m].min())}, {_cell(rows[m].max())}]" for m in spec.metrics]
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    lines += ["", "Files: `results.csv` / `results.parquet` (one row per point), `winners.csv`, `metrics.png`, "
              "`winners.png`, `study.json` (the resolved spec and its hash).", ""]
    return "\n".join(lines)


def finish(spec: StudySpec, out: Path, figures: bool = True) -> tuple[pd.DataFrame, list[Path]]:
    """Rewrite the journal as the tidy table (atomically) and write Parquet, winners, summary and figures."""
    table = load_table(spec, out)
    files = [write_csv_atomic(table, out / JOURNAL),
             write_atomic(out / "results.parquet", lambda handle: table.to_parquet(handle, index=False), "wb")]
    best = winners(spec, table)
    files.append(write_csv_atomic(best, out / "winners.csv"))
    files.append(write_text_atomic(out / "summary.md", summary_markdown(spec, table, best)))
    if not figures:
        return table, files
    files.append(plot_metrics(spec, table, out / "metrics.png"))
    files.append(plot_winners(spec, best, out / "winners.png"))
    return table, files
