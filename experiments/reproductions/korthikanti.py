"""9. A second paper on the same A100s: Korthikanti et al.'s iteration times, predicted with nothing fitted.

Eight published iteration times (four GPT models, 22B-1T, each with full recomputation and with sequence
parallelism + selective recomputation) priced by the transformer planner from the device catalog and the NCCL
model alone; beside them, what the ceiling fitted on Megatron-LM's 2021 table predicts for the same runs, so
the cost of fitting one paper shows where it is measured.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from flexcomm.costmodel.plotting import use_file_backend
from flexcomm.experiments.reproductions.base import Outcome, Reproduction, Settings, finish_figure
from flexcomm.planner.llm.korthikanti import SETTINGS, TABLE, naive_seconds, price, price_range, row_cluster
from flexcomm.planner.llm.megatron import TABLE_1, fit_ceiling
from flexcomm.planner.llm.timing import Hardware

#: The goals of issue 30: mean and worst |error| of iteration times predicted without refitting.
MEAN_GOAL, WORST_GOAL = 0.05, 0.10


def _table(settings: Settings) -> pd.DataFrame:
    megatron_ceiling = fit_ceiling(list(TABLE_1))
    rows = []
    runs = [(row, setting) for row in TABLE for setting in SETTINGS]
    for row, (label, recompute, sp) in settings.iterate(runs, "korthikanti runs"):
        spread = price_range(row, recompute, sp)
        catalog = spread.median
        fitted = price(row, recompute, sp, megatron_ceiling)
        published = row.published_s(recompute)
        naive = naive_seconds(row, recompute)
        rows.append({
            "model": row.label, "setting": label, "gpus": row.gpus, "batch": row.batch, "tp": row.tp, "pp": row.pp,
            "published_s": published, "predicted_s": catalog.step_s, "rel_error": catalog.step_s / published - 1,
            "fastest_s": spread.fastest.step_s, "slowest_s": spread.slowest.step_s, "plausible_plans": spread.count,
            "published_place": spread.place(published),
            "naive_s": naive, "naive_rel_error": naive / published - 1,
            "plan": catalog.plan.label, "fits": catalog.fits,
            "gemm_ceiling": Hardware.of(row_cluster(row)).gemm_ceiling,
            "megatron_fitted_ceiling": megatron_ceiling, "megatron_fitted_s": fitted.step_s,
            "megatron_fitted_rel_error": fitted.step_s / published - 1,
            "published_mfu": row.model_flops() / (published * row.gpus * 312e12),
            "compute_s": catalog.compute_s, "recompute_s": catalog.recompute_s,
            "memory_bound_s": catalog.memory_bound_s, "tp_comm_s": catalog.tp_comm_s, "p2p_s": catalog.p2p_s,
            "bubble_s": catalog.bubble_s, "optimizer_s": catalog.optimizer_s,
        })
    return pd.DataFrame(rows)


def _plot(table: pd.DataFrame, path: Path) -> Path:
    use_file_backend()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.4))
    x = np.arange(len(table))
    w = 0.18
    ax.bar(x - 2 * w, table["published_s"], w, label="published (Table 5)", color="#444444")
    ax.bar(x - w, table["predicted_s"], w, color="#2ca02c",
           label="predicted from the catalog (nothing fitted; median of the unstated micro-batch)")
    ax.vlines(x, table["fastest_s"], table["slowest_s"], color="#1b5e20", lw=3,
              label="the unstated micro-batch's spread (fastest to slowest)")
    ax.bar(x + w, table["megatron_fitted_s"], w, label="predicted with the ceiling fitted on Megatron-LM 2021",
           color="#1f77b4")
    ax.bar(x + 2 * w, table["naive_s"], w, color="#bdbdbd", hatch="//", edgecolor="#7f7f7f",
           label="naive: the paper's FLOPs at the measured matmul rate")
    for i, err in enumerate(table["rel_error"]):
        ax.annotate(f"{err:+.1%}", (i - w, table["predicted_s"].iloc[i]), ha="center", va="bottom", fontsize=6,
                    color="#2ca02c", xytext=(0, 2), textcoords="offset points", rotation=90)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{r.model}\n{r.setting.replace(' ', chr(10))}" for r in table.itertuples()], fontsize=7)
    ax.set_ylabel("iteration time (s, log scale)")
    ax.set_title("Korthikanti et al. (2022) on DGX A100: iteration time, published vs predicted", fontsize=9)
    top = float(table[["published_s", "predicted_s", "megatron_fitted_s"]].max().max())
    ax.set_ylim(0.5 * float(table[["published_s", "naive_s", "fastest_s"]].min().min()), top * 3)
    # below the axes: inside it covered the error labels of the tallest bars
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.tight_layout()
    return finish_figure(fig, path)


def run(settings: Settings, out: Path) -> Outcome:
    table = _table(settings)
    figure = _plot(table, out / "korthikanti.png")
    errors = table["rel_error"].abs()
    fitted = table["megatron_fitted_rel_error"].abs()
    worst = table.loc[errors.idxmax()]
    met = errors.mean() <= MEAN_GOAL and errors.max() <= WORST_GOAL
    lines = [
        f"Iteration times predicted from the device catalog and the NCCL model, nothing fitted (A100 achievable "
        f"fraction {table['gemm_ceiling'].iloc[0]:.3f} of peak from its measured MAMF), at the median of the "
        f"micro-batch sizes the paper leaves unstated: mean |error| {errors.mean():.1%}, worst {errors.max():.1%} "
        f"({worst.model}, {worst.setting}); goals {MEAN_GOAL:.0%} / {WORST_GOAL:.0%}: {'met' if met else 'not met'}.",
        "The unstated micro-batch size's spread per run (fastest-slowest plausible, published): " + "; ".join(
            f"{r.model} {r.setting} {r.fastest_s:.2f}-{r.slowest_s:.2f} s, {r.published_s:g} s ({r.published_place})"
            for r in table.itertuples()) + f"; the published time lies inside the spread in "
        f"{int((table['published_place'] == 'inside').sum())} of {len(table)} runs.",
        f"Naive baseline (the paper's model FLOPs, a full recomputation's extra forward included, at the measured "
        f"matmul rate and nothing else): mean |error| {table['naive_rel_error'].abs().mean():.1%}, worst "
        f"{table['naive_rel_error'].abs().max():.1%}; the planner is "
        f"{'closer' if errors.mean() < table['naive_rel_error'].abs().mean() else 'not closer'}.",
        "Per run (published -> predicted): " + "; ".join(
            f"{r.model} {r.setting} {r.published_s:g} s -> {r.predicted_s:.2f} s ({r.rel_error:+.1%})"
            for r in table.itertuples()) + ".",
        f"With the GEMM ceiling fitted on Megatron-LM's 2021 table ({table['megatron_fitted_ceiling'].iloc[0]:.3f}) "
        f"the same runs are missed by {fitted.mean():.1%} on average (worst {fitted.max():.1%}): a constant fitted "
        "to one paper's software does not carry to another's on the same hardware.",
        f"{int((table['rel_error'] < 0).sum())} of {len(table)} predictions are faster than published; what the "
        "model leaves out (kernels outside the transformer layer's GEMMs and Korthikanti's activation count, host "
        "overheads, the 2022 software's matmul rate) is not measured here, so which of them costs the time is not "
        "known.",
    ]
    return Outcome(table, [figure], lines)


REPRODUCTION = Reproduction(
    id="korthikanti", number=9,
    title="Korthikanti et al.'s iteration times (GPT 22B-1T on DGX A100) predicted with nothing fitted",
    literature="Korthikanti et al. (MLSys 2023), Tables 3 and 5: 22B (t8, 8 GPUs), 175B (t8 p8, 64), 530B (t8 p35, "
    "280) and 1T (t8 p64, 512) take 1.42, 18.13, 49.05 and 94.42 s per iteration with full recomputation and "
    "1.10, 13.75, 37.83 and 71.49 s with sequence parallelism and selective recomputation (MFU 41.5-56.3 %).",
    run=run, engine="transformer planner (device catalog, NCCL model; nothing fitted)",
)
