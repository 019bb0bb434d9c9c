"""6. Weak-scaling efficiency against rank count (8 to 1024) for each gradient-exchange strategy.

The flow-level simulator runs DDP iterations (per-layer backward, 25 MiB buckets overlapping it, each
bucket's exchange as its real message schedule with max-min link sharing) on A100 clusters of 1 to 128
eight-GPU nodes, over two networks: the InfiniBand HDR of ``4x8-a100-ib`` and a 10 Gbit/s Ethernet
variant. Efficiency = compute time / iteration time at a fixed batch per GPU (1.0 = perfect weak
scaling). ``flexible`` uses the cost model to choose between the two Top-k exchanges at each size and
the simulator to time the choice.
"""

from __future__ import annotations

from pathlib import Path

from flexcomm.costmodel.plotting import use_file_backend  # noqa: E402

use_file_backend()  # files only, unless a notebook's pyplot is already in use
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from flexcomm.costmodel.cluster import Cluster, load_cluster  # noqa: E402
from flexcomm.costmodel.cost_model import CostModel  # noqa: E402
from flexcomm.costmodel.plotting import strategy_style  # noqa: E402
from flexcomm.experiments.reproductions.base import Outcome, Reproduction, Settings, finish_figure  # noqa: E402
from flexcomm.sim.training import TrainingSimulator  # noqa: E402
from flexcomm.sim.training_config import TrainingConfig  # noqa: E402
from flexcomm.sim.workload import get_training_workload  # noqa: E402

RATIO = 0.01
#: (label, scheme, allreduce algorithm)
STRATEGIES = [("dense ring", "dense", "ring"), ("dense hierarchical", "dense", "hierarchical"),
              ("topk-ag c=0.01", "topk-ag", "ring"), ("topk-ar c=0.01", "topk-ar", "ring"),
              ("flexible c=0.01", "flexible", "ring")]
COLOURS = {"dense ring": "#7f7f7f", "dense hierarchical": "#17becf", "topk-ag c=0.01": "#1f77b4",
           "topk-ar c=0.01": "#ff7f0e", "flexible c=0.01": "#2ca02c"}


def cluster_of(ranks: int, network: str) -> Cluster:
    """``4x8-a100-ib`` resized to ``ranks`` GPUs; ``10gbe`` swaps its InfiniBand for 10 Gbit/s, 25 us Ethernet."""
    data = load_cluster("4x8-a100-ib").to_dict()
    data.update(nodes=ranks // data["devices_per_node"], name=f"{ranks // 8}x8-a100-{network}")
    if network == "10gbe":
        data["inter_link"] = {"latency": "25us", "bandwidth": "10Gbit/s"}
    return Cluster.from_dict(data)


def flexible_choice(cluster: Cluster, numel: float, ranks: int) -> str:
    """The Top-k exchange the cost model predicts faster for the whole gradient at this size."""
    model = CostModel.from_cluster(cluster)
    times = {s: float(model.scheme(s, numel, ranks, RATIO).total) for s in ("topk-ag", "topk-ar")}
    return min(times, key=times.__getitem__)


def run(settings: Settings, out: Path) -> Outcome:
    ranks_list = [8, 16, 32, 64, 128, 256, 512, 1024]
    models = ["resnet50"] + (["bert-large"] if settings.full else [])
    rows = []
    cases = [(m, net, n, s) for m in models for net in ("ib-hdr", "10gbe") for n in ranks_list for s in STRATEGIES]
    for model, network, ranks, (label, scheme, algorithm) in settings.iterate(cases, "scaling", total=len(cases)):
        cluster = cluster_of(ranks, network)
        chosen = scheme
        if scheme == "flexible":

            chosen = flexible_choice(cluster, get_training_workload(model).model.params, ranks)
        config = TrainingConfig(workload=model, iterations=settings.steps(2, 5), scheme=chosen, ratio=RATIO,
                                algorithm=algorithm, seed=settings.seed, record_flows=False)
        summary = TrainingSimulator(cluster, config).run().summary()
        rows.append({"model": model, "network": network, "ranks": ranks, "strategy": label, "scheme": chosen,
                     "iteration_s": summary["median_time_s"], "compute_s": summary["median_compute_s"],
                     "exposed_comm_s": summary["median_exposed_comm_s"],
                     "compression_s": summary["median_compression_s"],
                     "efficiency": summary["median_compute_s"] / summary["median_time_s"],
                     "samples_per_s": summary["samples_per_s"], "sim_events": summary["sim_events"]})
    table = pd.DataFrame(rows)
    figure = plot(table, out / "scaling.png")
    return Outcome(table, [figure], findings(table))


def findings(table: pd.DataFrame) -> list[str]:
    lines = []
    for (model, network), part in table.groupby(["model", "network"], sort=False):
        at = part.pivot(index="ranks", columns="strategy", values="efficiency")
        first, last = at.index.min(), at.index.max()
        best = at.loc[last].idxmax()
        lines.append(f"{model} on {network}: efficiency at {first} -> {last} ranks: " + "; ".join(
            f"{s} {at.loc[first, s]:.0%} -> {at.loc[last, s]:.0%}" for s in at.columns)
            + f". Best at {last} ranks: {best}.")
        flex = part[part["strategy"] == "flexible c=0.01"]
        switch = flex[flex["scheme"] != flex["scheme"].shift()]
        if len(switch) > 1:
            lines.append(f"{model} on {network}: flexible switches " + " -> ".join(
                f"{r.scheme} from {r.ranks}" for r in switch.itertuples()) + " ranks (cost-model choice).")
    ag = table[(table["strategy"] == "topk-ag c=0.01") & (table["ranks"] >= 128)]
    for network, part in ag.groupby("network", sort=False):
        growth = np.polyfit(np.log(part["ranks"]), np.log(part["exposed_comm_s"]), 1)[0]
        lines.append(f"{network}: from 128 ranks up, Allgather Top-k's exposed communication grows as "
                     f"ranks^{growth:.2f} (its (N-1) k volume per rank alone gives exponent 1; above 1 is the part "
                     "that stops hiding behind backward); dense ring's bandwidth term stays flat, so Allgather's "
                     "advantage ends at large N.")
    select_ms = 1e3 * float(table.loc[table["scheme"] != "dense", "compression_s"].max())
    lines.append(f"Top-k selection is priced at the paper's V100 rate (0.75e9 elements/s, {select_ms:.0f} ms here), "
                 "longer than the A100's compute, which caps both sparse strategies at about half efficiency even "
                 "on one node; a faster selection (see `benchmarks/bench_topk.py`) lifts that cap.")
    return lines


def plot(table: pd.DataFrame, path: Path) -> Path:
    groups = list(table.groupby(["model", "network"], sort=False))
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.3), squeeze=False, layout="constrained")
    for ax, ((model, network), part) in zip(axes[0], groups, strict=True):
        for label, rows in part.groupby("strategy", sort=False):
            # flexible coincides with topk-ar from 16 ranks up: drawn dashed over it (costmodel.plotting)
            style = strategy_style(str(label).split()[0], markers=True)
            style["color"] = COLOURS[str(label)]
            if str(label) == "dense ring":
                style["ls"] = ":"
            ax.plot(rows["ranks"], rows["efficiency"], label=label, **style)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("ranks (GPUs)")
        ax.set_ylabel("weak-scaling efficiency (compute / iteration)")
        ax.set_title(f"{model}, A100 x 8 per node, {network}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return finish_figure(
        fig, path, "Scaling efficiency from 8 to 1024 ranks (flow-level simulator, DDP buckets overlapping backward)")


REPRODUCTION = Reproduction(
    id="scaling", number=6,
    title="Scaling efficiency against rank count (8 to 1024) for each strategy",
    literature="Ao et al. (PaddlePaddle, arXiv 2112.02752) report 91.7% weak scalability for a 260B model; "
    "Tyagi & Swany price Top-k over Allgather with an (N-1) M c beta term that grows with N while ring "
    "allreduce's bandwidth term stays 2(N-1)/N M beta, and AR-compatible Top-k's broadcast grows as lg N: "
    "Allgather should lose at large N, AR-Top-k and dense should scale.",
    run=run, engine="flow-level simulator (simpy), cost model for the flexible choice",
)
