"""2. Speedup over dense training of static Top-k at several ratios vs flexible switching, across networks.

Per-step time = the paper's measured compute + (sparse only) its measured layer-wise Top-k time + the
communication the shared cost model predicts on each network. Dynamic networks (the paper's C1 and C2)
weight each phase by the epochs it lasts. ``flexible`` takes, per phase, the argmin of the paper's three
predicted costs (Allgather Top-k, AR-Top-k on a ring, AR-Top-k on a tree), i.e. its switching rule with
a perfect network estimate (reproduction 4 shows the online estimate in emulated training). Dense is the
faster of ring and tree allreduce on each network, a fair baseline. A simulator cross-check runs every
scheme's real message schedule through the flow-level simulator on each static network.
"""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.plotting import use_file_backend  # noqa: E402

use_file_backend()  # files only, unless a notebook's pyplot is already in use
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from flexcomm.costmodel.cluster import Cluster  # noqa: E402
from flexcomm.costmodel.compressed import SchemeAlgorithms, SparsePayload, scheme_coefficients  # noqa: E402
from flexcomm.emulation.network import DYNAMIC_NETWORKS  # noqa: E402
from flexcomm.experiments.reproductions.base import Outcome, Reproduction, Settings, finish_figure  # noqa: E402
from flexcomm.experiments.tyagi_table4 import MODELS, TABLE_IV, PaperModel, reproduce_table_iv, summary  # noqa: E402
from flexcomm.sim.collectives import simulate_scheme  # noqa: E402

WORKERS = 8
RATIOS = (0.1, 0.01, 0.001)
#: The paper's static networks: (latency s, bandwidth Gbit/s).
STATIC = [(4e-3, 20), (1e-3, 10), (1e-3, 5), (1e-3, 1), (10e-3, 10), (10e-3, 5), (10e-3, 1), (100e-3, 10),
          (100e-3, 5), (100e-3, 1)]
PAYLOAD = SparsePayload(index_dtype="int32")  #: the paper's forms
RING, TREE = SchemeAlgorithms(allreduce="ring"), SchemeAlgorithms(allreduce="tree")
#: Table IV's measured step ms per (model, c) (dense = c 1.0, on a tree allreduce), from :data:`TABLE_IV`.
TABLE_IV_STEPS = {(name, ratio): step_ms for name, _, ratio, step_ms, _ in TABLE_IV}


def networks() -> list[tuple[str, list[tuple[float, float, float]]]]:
    """(label, [(weight, latency s, bandwidth B/s)...]) for the static and the dynamic networks."""
    out = [(f"{lat * 1e3:g}ms/{gb:g}G", [(1.0, lat, gb * 1.25e8)]) for lat, gb in STATIC]
    for name, (phases, epochs) in DYNAMIC_NETWORKS.items():
        starts = [p[0] for p in phases] + [epochs]
        out.append((name.upper(), [(starts[i + 1] - starts[i], lat, gb * 1.25e8)
                                   for i, (_, lat, gb) in enumerate(phases)]))
    return out


def comm_seconds(scheme: str, params: float, ratio: float, lat: float, bw: float,
                 algorithms: SchemeAlgorithms) -> float:
    coef = scheme_coefficients(scheme, params, WORKERS, ratio, PAYLOAD, algorithms)
    return float(coef.time(lat, 1.0 / bw).total)


def step_seconds(model: PaperModel, strategy: str, ratio: float, lat: float, bw: float) -> tuple[float, str]:
    """(step seconds, scheme used) of one strategy on one network phase."""
    compute, compress = model.compute_ms * 1e-3, model.compress_ms * 1e-3
    if strategy == "dense":
        options = {"ring": comm_seconds("dense", model.params, 1.0, lat, bw, RING),
                   "tree": comm_seconds("dense", model.params, 1.0, lat, bw, TREE)}
        best = min(options, key=options.__getitem__)
        return compute + options[best], f"dense/{best}"
    options = {"topk-ag": comm_seconds("topk-ag", model.params, ratio, lat, bw, RING),
               "topk-ar/ring": comm_seconds("topk-ar", model.params, ratio, lat, bw, RING),
               "topk-ar/tree": comm_seconds("topk-ar", model.params, ratio, lat, bw, TREE)}
    if strategy == "flexible":
        best = min(options, key=options.__getitem__)
    else:
        best = "topk-ag" if strategy == "topk-ag" else "topk-ar/ring"
    return compute + compress + options[best], best


def run(settings: Settings, out: Path) -> Outcome:
    rows = []
    nets = networks()
    for model in settings.iterate(MODELS.values(), "speedup", total=len(MODELS)):
        for label, phases in nets:
            weights = np.array([w for w, _, _ in phases], dtype=float)
            dense = np.array([step_seconds(model, "dense", 1.0, lat, bw)[0] for _, lat, bw in phases])
            dense_mean = float(np.average(dense, weights=weights))
            tree = [model.compute_ms * 1e-3 + comm_seconds("dense", model.params, 1.0, lat, bw, TREE)
                    for _, lat, bw in phases]
            tree_mean = float(np.average(tree, weights=weights))
            for strategy in ("topk-ag", "topk-ar", "flexible"):
                for ratio in RATIOS:
                    steps = [step_seconds(model, strategy, ratio, lat, bw) for _, lat, bw in phases]
                    mean = float(np.average([s for s, _ in steps], weights=weights))
                    schemes = sorted({s for _, s in steps})
                    rows.append({"model": model.name, "params": model.params, "network": label,
                                 "dynamic": len(phases) > 1, "strategy": strategy, "ratio": ratio,
                                 "step_s": mean, "dense_step_s": dense_mean, "speedup_vs_dense": dense_mean / mean,
                                 "speedup_vs_dense_tree": tree_mean / mean,
                                 "schemes_used": "+".join(schemes)})
    table = pd.DataFrame(rows)
    check = simulator_check(settings)
    figures = [plot(table, out / "speedup.png")]
    return Outcome(table, figures, findings(table, check), {"simulator_check": check})


def simulator_check(settings: Settings) -> pd.DataFrame:
    """Every scheme on every static network through the flow-level simulator vs the cost model (ResNet-18)."""
    rows = []
    params = MODELS["resnet18"].params
    ratios = RATIOS if settings.full else (0.01,)
    for lat, gb in STATIC:
        cluster = Cluster.from_dict({"name": f"flat-{lat}-{gb}", "nodes": WORKERS, "devices_per_node": 1,
                                     "device": {"name": "V100", "peak_flops": "125TFLOP/s", "memory": "32GiB"},
                                     "intra_link": {"latency": "5us", "bandwidth": "150GB/s"},
                                     "inter_link": {"latency": f"{lat * 1e6:g}us", "bandwidth": f"{gb}Gbit/s"},
                                     "topology": {"kind": "flat"}})
        for ratio in ratios:
            for scheme in ("dense", "topk-ag", "topk-ar"):
                simulated = simulate_scheme(cluster, scheme, params, WORKERS, ratio, payload=PAYLOAD,
                                            algorithms=RING).seconds
                predicted = comm_seconds(scheme, params, ratio, lat, gb * 1.25e8, RING)
                rows.append({"latency_s": lat, "bandwidth_gbit_s": gb, "scheme": scheme, "ratio": ratio,
                             "simulated_s": simulated, "cost_model_s": predicted,
                             "relative_gap": simulated / predicted - 1})
    return pd.DataFrame(rows)


def findings(table: pd.DataFrame, check: pd.DataFrame) -> list[str]:
    lines = [f"The 'ViT' rows are priced with a fitted size ({MODELS['vit'].params / 1e6:.1f}M): "
             f"{MODELS['vit'].params_source}."]
    at = table[table["network"] == "4ms/20G"]
    ours = []
    for (name, ratio), ms in TABLE_IV_STEPS.items():
        if ratio == 1.0:
            continue
        row = at[(at["model"] == name) & (at["strategy"] == "topk-ar") & (at["ratio"] == ratio)]
        paper = TABLE_IV_STEPS[(name, 1.0)] / ms
        ours.append(f"{name} c={ratio:g}: {float(row['speedup_vs_dense_tree'].iloc[0]):.2f}x / "
                    f"{float(row['speedup_vs_dense'].iloc[0]):.2f}x (paper {paper:.2f}x)")
    ring_gain = at["speedup_vs_dense_tree"] / at["speedup_vs_dense"]
    errors = summary(reproduce_table_iv()).set_index(["rows", "variant"])
    star_error = float(errors.loc[("sparse", "paper forms"), "median_abs_error"])
    lines.append("STAR AR-Top-k over dense at 4 ms / 20 Gbit/s, ours against dense on a tree (the paper's baseline) / "
                 "against the better of ring and tree, vs Table IV: " + "; ".join(ours) + ". We are below the paper "
                 "because its forms charge the sparse step 17 latencies of 4 ms that its measured steps do not show "
                 f"(reproduction `table4`: those same forms over-predict its measured STAR steps by a median "
                 f"{star_error:.0%}) and because a ring allreduce makes dense {ring_gain.min():.1f}-"
                 f"{ring_gain.max():.1f}x faster than the tree the paper ran.")
    best_static = table[table["strategy"] != "flexible"].groupby(["model", "network", "ratio"])["step_s"].min()
    flexible = table[table["strategy"] == "flexible"].set_index(["model", "network", "ratio"])["step_s"]
    gain = (best_static / flexible).rename("gain")
    dynamic = gain[gain.index.get_level_values("network").isin(["C1", "C2"])]
    lines.append(f"Flexible switching vs the best single static scheme at the same c: never slower (min "
                 f"{gain.min():.3f}x), median {gain.median():.3f}x, best {gain.max():.2f}x over all networks; on the "
                 f"dynamic C1/C2 networks median {dynamic.median():.3f}x, best {dynamic.max():.2f}x.")
    worst_single = table[table["strategy"] != "flexible"].groupby(["model", "network", "ratio"])["step_s"].max()
    lines.append(f"Picking the wrong static scheme instead costs a median {(worst_single / flexible).median():.2f}x "
                 f"(worst {(worst_single / flexible).max():.2f}x) against flexible switching.")
    best = table.loc[table.groupby(["model"])["speedup_vs_dense"].idxmax()]
    lines.append("Largest speedup over dense per model: " + "; ".join(
        f"{r.model} {r.speedup_vs_dense:.1f}x ({r.strategy} c={r.ratio:g} on {r.network})" for r in best.itertuples())
        + ". Larger models gain most, as in Table IV (AlexNet and 'ViT' 14-16x there).")
    mix = table[(table["strategy"] == "flexible") & table["schemes_used"].str.contains(r"\+", regex=True)]
    lines.append(f"Flexible mixes schemes within one run on {len(mix)} of {int(table['dynamic'].sum() // 3)} dynamic "
                 f"(model, network, c) cases: " + ", ".join(sorted({f'{r.model}/{r.network}/c={r.ratio:g}: '
                                                                    f'{r.schemes_used}' for r in mix.itertuples()})[:4])
                 + ("..." if len(mix) > 4 else "") + ".")
    lines.append(f"Simulator cross-check (flow-level schedules of every scheme on the static networks, ResNet-18): "
                 f"worst |simulated/cost model - 1| = {check['relative_gap'].abs().max():.2e} over {len(check)} runs.")
    return lines


def plot(table: pd.DataFrame, path: Path) -> Path:
    """One heatmap per model: rows strategy x c, columns network, cells speedup over dense (annotated)."""
    models = list(dict.fromkeys(table["model"]))
    nets = list(dict.fromkeys(table["network"]))
    fig, axes = plt.subplots(len(models), 1, figsize=(1.05 * len(nets) + 3, 2.9 * len(models)), squeeze=False,
                             layout="constrained")
    from matplotlib.colors import LogNorm

    mesh = None
    # a log colour scale centred on 1x, labelled in speedups: the cells print speedups, so does the bar
    vmax = float(max(table["speedup_vs_dense"].max(), 1.0 / table["speedup_vs_dense"].min()))
    norm = LogNorm(vmin=1.0 / vmax, vmax=vmax)
    for ax, name in zip(axes[:, 0], models, strict=True):
        part = table[table["model"] == name].copy()
        part["row"] = part["strategy"] + " c=" + part["ratio"].map(lambda r: f"{r:g}")
        grid = part.pivot(index="row", columns="network", values="speedup_vs_dense")
        order = [f"{s} c={r:g}" for s in ("topk-ag", "topk-ar", "flexible") for r in RATIOS]
        grid = grid.loc[order, nets]
        mesh = ax.imshow(grid.to_numpy(), cmap="RdYlGn", norm=norm, aspect="auto")
        for (i, j), value in np.ndenumerate(grid.to_numpy()):
            ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(nets)), nets, fontsize=8)
        ax.set_yticks(range(len(order)), order, fontsize=8)
        ax.set_title(f"{name} ({part['params'].iloc[0] / 1e6:.1f}M params, 8 workers): speedup over dense", fontsize=9)
    if mesh is not None:
        bar = fig.colorbar(mesh, ax=axes[:, 0].tolist(), label="speedup over dense (x, log scale)", shrink=0.6)
        ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if 1.0 / vmax <= t <= vmax]
        bar.set_ticks(ticks, labels=[f"{t:g}x" for t in ticks])
        bar.ax.minorticks_off()
    return finish_figure(fig, path)


REPRODUCTION = Reproduction(
    id="speedup", number=2,
    title="Speedup over dense of static Top-k at several ratios vs flexible switching, across networks",
    literature="Tyagi & Swany (2023) Table IV (8 V100s, 4 ms, 20 Gbit/s): STAR AR-Top-k runs ResNet-18 2.3x (c=0.1) "
    "to 3.0x (c=0.001) faster per step than dense, ResNet-50 2.9-4.6x, AlexNet 14.5x and 'ViT' 15.5x at c=0.001; "
    "they switch between Allgather and AR-Top-k by the argmin of predicted costs but report no speedup of the "
    "switching itself. GraVAC reports 4.32x / 1.95x / 6.67x for adaptive over static compression (ResNet-101, "
    "VGG-16, LSTM).",
    run=run, engine="cost model (paper's measured compute/compression times) + flow-level simulator cross-check",
)
