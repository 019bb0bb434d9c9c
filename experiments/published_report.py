"""What ``flexcomm validate --published`` prints and writes, from a :class:`experiments.published.PublishedValidation`.

Why apart from the engine: the Python API (``flexcomm.validate_published``) wants the predictions without a
folder of files, and the command wants the same predictions as ``errors.csv``, ``errors.md`` and one figure per
run; both read the one result.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.experiments.published import (
    MIN_ROWS,
    REGIME_GOALS,
    REGIMES,
    SMALL_BAND,
    TARGET_MEDIAN,
    TARGET_SHARE,
    TARGET_WORST,
    PublishedValidation,
    RunResult,
    most_common,
)
from flexcomm.experiments.published_plots import plot_run
from flexcomm.experiments.published_summary import summaries_section

__all__ = ["errors_markdown", "summary_lines", "write_files"]


def summary_lines(result: PublishedValidation) -> list[str]:
    """The command's two lines: runs predicted and targets met, then the NCCL model against the naive baseline."""
    met, judged, short = result.targets()
    closer, compared = result.baseline()
    return [f"{len(result.runs)} runs, {len(result.predicted)} predicted; targets (rows >= 1 MiB: median <= "
            f"{TARGET_MEDIAN:.0%}, worst <= {TARGET_WORST:.0%}) met by {met} of {judged} described runs with >= "
            f"{MIN_ROWS} such rows ({short} runs too short to judge)",
            f"naive baseline (alpha-beta at the datasheet rates): the NCCL model is closer on {closer} of {compared} "
            "runs (median |error|, rows >= 1 MiB)"]


def write_files(result: PublishedValidation, out: Path, *, figures: bool = True) -> dict[str, Path]:
    """``errors.csv``, one ``figures/<run>.png`` per run with rows (unless ``figures`` is False) and
    ``errors.md`` under ``out``; returns the figures by run id."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(result.table(), out / "errors.csv")
    drawn = {r.run_id: plot_run(r, out / "figures" / f"{r.run_id}.png") for r in result.drawn} if figures else {}
    write_text_atomic(out / "errors.md", errors_markdown(result))
    return drawn


def _pct(values: list[float], how: str) -> str:
    if not values:
        return "-"
    return f"{(statistics.median(values) if how == 'median' else max(values)):.1%}"


def _large_algorithms(r: RunResult) -> str:
    seen: list[str] = []
    for row in r.large:
        label = row["algorithm"] if row["protocol"] in (None, "p2p") else f"{row['algorithm']}/{row['protocol']}"
        if label not in seen:
            seen.append(label)
    return ", ".join(seen) or "-"


def _baseline_cell(r: RunResult) -> str:
    model, baseline = r.errors(), r.errors("baseline_rel_error")
    if not model or not baseline:
        return "-"
    text = _pct(baseline, "median")
    return f"**{text}**" if statistics.median(baseline) <= statistics.median(model) else text


def _regime_cell(r: RunResult, low: float, high: float) -> str:
    median, mechanism = r.regime_summary(low, high)
    return "-" if median is None else f"{median:.1%} ({mechanism})"


def errors_markdown(result: PublishedValidation) -> str:
    """The report: one line per run with its three regimes, then per class, then what was not predicted."""
    results, folder, predicted = list(result.runs), result.folder, result.predicted
    try:
        shown = folder.resolve().relative_to(Path.cwd())
    except ValueError:
        shown = folder
    met, judged, short = result.targets()
    closer, compared = result.baseline()
    lines = [
        "# Published nccl-tests runs predicted from their hardware description",
        "",
        f"Runs: {len(results)} in `{shown}`; predicted: {len(predicted)}. Per-run targets (rows >= 1 MiB): median "
        f"|error| <= {TARGET_MEDIAN:.0%} and worst <= {TARGET_WORST:.0%}, judged on runs with at least {MIN_ROWS} "
        f"such rows whose hardware is described: **met by {met} of {judged}** (goal {TARGET_SHARE:.0%}); "
        f"{short} runs have fewer than {MIN_ROWS} rows >= 1 MiB and are shown, not judged. Each regime cell is "
        "the median |error| of its rows and, in brackets, the mechanism that dominates most of their predicted "
        "times. \"loro\" scales by the median measured/predicted ratio of the other runs of the same hardware "
        "class, collective and regime (a calibration kept apart from the run it predicts).",
        "",
        f"Naive baseline: the plain alpha-beta formula at the cluster's datasheet rates (each GPU's NVLink inside a "
        f"domain, its share of the node's NICs across domains, nccl-tests' bus bytes, a ring's steps at the link's "
        f"latency). **The NCCL model is closer than it on {closer} of {compared} runs** (median |error| over rows "
        f">= 1 MiB); where it is not, the row's `alpha-beta` cell is in bold.",
        "",
        "| run | class | collective | ranks | library | NCCL would run (>= 1 MiB) | rows >= 1 MiB | median | worst "
        "| alpha-beta median | target | < 1 MiB | 1-256 MiB | >= 256 MiB | loro median |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in predicted:
        met_text = {True: "met", False: "missed", None: f"too few rows ({len(r.large)})"}[r.meets_targets]
        if r.undescribed and r.meets_targets is not None:
            met_text += " (undescribed)"
        library = r.rows[0].get("library") or "-"
        version = r.rows[0].get("version")
        stated = r.rows[0].get("stated_version")
        if stated and version and stated != version:
            version = f"{version} (its log states {stated})"
        lines.append(
            f"| {r.run_id} | {r.hardware_class} | {r.collective} | {r.ranks} | "
            f"{library}{f' {version}' if version else ''} | {_large_algorithms(r)} | {len(r.large)} | "
            f"{_pct(r.errors(), 'median')} | {_pct(r.errors(), 'worst')} | {_baseline_cell(r)} | {met_text} | "
            + " | ".join(_regime_cell(r, low, high) for _, low, high in REGIMES)
            + f" | {_pct(r.errors('loro_rel_error'), 'median')} |")
    undescribed_runs = [r for r in predicted if r.undescribed]
    if undescribed_runs:
        lines += ["", "Runs whose header leaves out what decides the result (predicted, not judged): "
                  + "; ".join(f"{r.run_id}: {r.undescribed}" for r in undescribed_runs) + "."]
    lines += ["", "## Per hardware class, collective and regime", "",
              f"Goals: 1-256 MiB median <= {REGIME_GOALS['1-256 MiB']:.0%} for every class; {SMALL_BAND[0]} median "
              f"<= {SMALL_BAND[3]:.0%}. Medians are over all rows of the class's runs in that size range.", "",
              "| class | collective | placement | runs | targets met | < 1 MiB | 64 KiB-1 MiB | 1-256 MiB | "
              ">= 256 MiB | loro median of run medians |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    classes: dict[tuple[str, str, str], list[RunResult]] = {}
    for r in predicted:
        classes.setdefault(r.calibration_group, []).append(r)
    for (name, collective, regime), runs in sorted(classes.items()):
        cells = []
        for _, low, high in (*REGIMES[:1], SMALL_BAND[:3], *REGIMES[1:]):
            rows = [row for run in runs for row in run.in_regime(low, high)]
            if not rows:
                cells.append("-")
                continue
            cells.append(f"{statistics.median(abs(row['rel_error']) for row in rows):.1%} "
                         f"({most_common([row.get('mechanism') for row in rows])})")
        loro = [statistics.median(e) for r in runs if (e := r.errors("loro_rel_error"))]
        judged_runs = [r for r in runs if r.meets_targets is not None]
        met_here = sum(1 for r in judged_runs if r.meets_targets)
        lines.append(f"| {name} | {collective} | {regime} | {len(runs)} | {met_here}/{len(judged_runs)} | "
                     + " | ".join(cells) + f" | {f'{statistics.median(loro):.1%}' if loro else '-'} |")
    others = [r for r in results if r not in predicted]
    if others:
        lines += ["", "## Not predicted", "", "| run | why |", "|---|---|"]
        lines += [f"| {r.run_id} | {r.reason or 'no rows'} |" for r in others]

    lines += summaries_section(folder)
    return "\n".join(lines) + "\n"
