"""Emulated data-parallel training: real gradients, a simulated clock.

Why: accuracy depends on what the compressors really do to real gradients, time on the cluster the
run pretends to use. Here N logical workers live in one process. In data-parallel training every
replica holds identical parameters, so *one* model with N backward passes on the N shards gives exactly
the N workers' gradients; each is flattened to one fused gradient, exchanged by a compressor over a
:class:`~compression.comm.LocalCommunicator` (error feedback, agreed indices, the same code a cluster
runs), and the aggregate is applied with the workload's optimizer (SGD with momentum). Batch norm
running statistics are kept as rank 0's replica would keep them (its own batches only).

The simulated clock advances each step by

* **compute**: the workload's forward and backward passes (``Workload.spec()``) priced on the cluster's device
  (:mod:`costmodel.device_compute`: GEMM shapes, memory-bound traffic), or FLOPs at ``efficiency`` of peak
  when one is given, or a given ``compute_time_s`` (e.g. a measured profile);
* **communication**: every collective the step really issued (``StepStats`` payload + control records,
  the same coefficients as ``StepStats.parts()``) priced by ``CostModel.from_cluster(cluster)``, or by the
  phase of a time-varying network (``network="c1"|"c2"``: the paper's dynamic scenarios stretched over
  the run), optionally with seeded log-normal ``jitter``. The gain-measurement allreduce is not charged
  (a real run would use the local gain instead);
* **compression**: ``compress_time="model"`` (default: Top-k at 0.75e9 elements/s, the paper's V100
  measurement, constant in c, deterministic), ``"measured"`` (this CPU's perf_counter: not the cluster's
  GPU, and not reproducible; the adaptive strategies' own deciding and refitting, ``mechanism_s``, is
  then charged too) or ``"none"``. The latency probes the adaptive strategies send are priced as collectives.

No overlap of communication with the backward pass is modelled (one fused bucket after backward, as
the paper's implementation does). ``price_params`` prices the exchange as if the gradient had that many
elements (same ratio; compute and compression scale too when modelled) so a small workload can stand in
for, e.g., ResNet-18's 11.7M parameters on the clock while its accuracy stays its own.

Strategies: ``dense``, ``topk-ag``, ``topk-ar`` (fixed ratio), ``flexible`` (per-step scheme choice with
an online network estimate) and ``moo`` (flexible + the multi-objective ratio controller, probing
candidate ratios from a saved model/optimizer/residual state and charging the probes to the clock).
Same seed, same numbers (with the modelled compression time).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from flexcomm.compression.base import Compressor, StepStats
from flexcomm.compression.comm import LocalCommunicator
from flexcomm.compression.compressors import make_compressor
from flexcomm.compression.flexible import FlexibleCompressor, TopkTimeModel
from flexcomm.compression.moo import RatioController
from flexcomm.compression.network_estimate import NetworkEstimator, timed_records
from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.compressed import scheme_coefficients
from flexcomm.costmodel.compression_compute import topk_elements_per_s
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.device_compute import model_layer_seconds
from flexcomm.costmodel.errors import InputError
from flexcomm.emulation.config import EmulationConfig, strategy_names
from flexcomm.emulation.network import NetworkClock
from flexcomm.workloads import TensorData, Workload, evaluate, get_workload, shard, steps_per_epoch

CSV_COLUMNS = [
    "step", "strategy", "scheme", "ratio", "sim_time_s", "step_time_s", "compute_s", "comm_s", "compress_s",
    "mechanism_s",
    "probe_s", "loss", "train_acc", "test_loss", "test_acc", "gain", "gain_norm", "payload_bytes",
    "alpha_est_s", "beta_est_s_per_byte", "net_latency_s", "net_bandwidth_Bps", "event",
]


# --- data ----------------------------------------------------------------------------------------


class ShardedBatches:
    """Worker r's batch at step s, as a pure function of (seed, r, s): probes can replay steps exactly.

    Shards follow :func:`workloads.shard`; within a shard, epoch e is a permutation keyed by
    (seed, rank, e) and step s reads batch ``s mod steps_per_epoch`` of epoch ``s // steps_per_epoch``,
    where steps_per_epoch is what the smallest shard holds (workers stay in lock step).
    """

    def __init__(self, dataset: TensorData, workers: int, batch_size: int, seed: int) -> None:
        self.shards = [shard(dataset, r, workers, seed) for r in range(workers)]
        self.batch_size = batch_size
        self.seed = seed
        self.steps_per_epoch = steps_per_epoch(len(dataset), workers, batch_size)
        if self.steps_per_epoch < 1:
            raise InputError("batch-size", batch_size,
                             f"at most {len(dataset) // workers} samples per worker ({len(dataset)} over {workers})")
        self._orders: dict[tuple[int, int], np.ndarray] = {}

    def indices(self, rank: int, step: int) -> np.ndarray:
        epoch, position = divmod(step, self.steps_per_epoch)
        key = (rank, epoch)
        if key not in self._orders:
            if len(self._orders) > 4 * len(self.shards):
                self._orders.clear()
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, rank, epoch]))
            self._orders[key] = rng.permutation(len(self.shards[rank]))
        return self._orders[key][position * self.batch_size:(position + 1) * self.batch_size]

    def batch(self, rank: int, step: int) -> tuple[Tensor, Tensor]:
        part = self.shards[rank]
        idx = torch.from_numpy(self.indices(rank, step))
        return part.inputs[idx], part.targets[idx]


# --- one run -------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """What one strategy produced: per-step metrics and, for adaptive strategies, their decision logs."""

    strategy: str
    frame: pd.DataFrame
    decisions: pd.DataFrame | None = None
    moo_events: pd.DataFrame | None = None
    fronts: pd.DataFrame | None = None
    probes: pd.DataFrame | None = None
    summary: dict[str, Any] = field(default_factory=dict)


class EmulatedRun:
    """One strategy's emulated training; :meth:`run` returns a :class:`RunResult`."""

    def __init__(self, config: EmulationConfig, workload: Workload | None = None,
                 csv_path: str | Path | None = None) -> None:
        config.validate()
        self.config = config
        self.cluster = load_cluster(config.cluster)
        if config.workers > self.cluster.world_size:
            raise InputError("workers", config.workers,
                             f"at most {self.cluster.world_size}, the ranks of cluster {self.cluster.name}")
        self.workload = workload if workload is not None else get_workload(config.workload, seed=config.seed)
        self.model: nn.Module = self.workload.build_model(config.seed)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.numel = sum(p.numel() for p in self.params)
        self.optimizer = self.workload.make_optimizer(self.model, lr=config.lr)
        self.base_lr = float(self.optimizer.param_groups[0]["lr"])
        self.lr_schedule = config.lr_schedule or self.workload.lr_schedule
        batch = config.batch_size or self.workload.batch_size
        self.data = ShardedBatches(self.workload.train_set, config.workers, batch, config.seed)
        self.comm = LocalCommunicator(config.workers)
        self.price_scale = (config.price_params / self.numel) if config.price_params else 1.0
        self.clock = NetworkClock.for_run(self.cluster, config.network, config.workers, config.steps,
                                          price_scale=self.price_scale, jitter=config.jitter, seed=config.seed)
        if config.compute_time_s is not None:
            self.compute_s = float(config.compute_time_s)
        else:
            spec = self.workload.spec(model=copy.deepcopy(self.model))
            fwd, bwd = model_layer_seconds(spec, batch, self.cluster.device, config.efficiency)
            self.compute_s = float(fwd.sum() + bwd.sum())
            self.compute_s *= self.price_scale  # a stand-in for a larger model computes like one
        rate = config.compress_throughput
        self.compress_model = TopkTimeModel(
            topk_elements_per_s(self.cluster.device.memory_bandwidth_Bps) if rate is None else rate)
        self.csv_path = Path(csv_path) if csv_path is not None else None
        self.compressor = self._build_compressor()
        self.controller = RatioController(config.moo) if config.strategy == "moo" else None
        self.sim_time = 0.0
        self.rows: list[dict[str, Any]] = []

    # --- construction -----------------------------------------------------------------------------
    def _build_compressor(self) -> Compressor:
        cfg = self.config
        if cfg.strategy == "dense":
            return make_compressor("dense")
        if cfg.strategy in ("topk-ag", "topk-ar"):
            options = {"owner": cfg.owner} if cfg.strategy == "topk-ar" else {}
            return make_compressor(cfg.strategy, float(cfg.ratio), **options)
        estimator = NetworkEstimator.from_cost_model(CostModel.from_cluster(self.cluster), cfg.workers)
        ratio = float(cfg.ratio) if cfg.strategy == "flexible" else max(cfg.moo.candidates)
        return FlexibleCompressor(
            ratio, estimator=estimator, candidates=cfg.flexible_candidates, hysteresis=cfg.hysteresis,
            patience=cfg.patience, switch_cost_s=cfg.switch_cost_s, owner=cfg.owner, price_scale=self.price_scale,
            compress_time=self.compress_model if cfg.compress_time == "model" else None)

    # --- one step's pieces ------------------------------------------------------------------------
    def gradients(self, step: int) -> tuple[list[Tensor], float, float]:
        """Every worker's flat gradient at ``step`` on the shared replica; mean loss and batch accuracy."""
        buffers = list(self.model.buffers())
        start = [b.clone() for b in buffers]
        rank0: list[Tensor] = []
        grads, losses, accs = [], [], []
        self.model.train()
        for rank in range(self.config.workers):
            if buffers and rank:
                for b, s in zip(buffers, start, strict=True):
                    b.copy_(s)
            inputs, targets = self.data.batch(rank, step)
            self.model.zero_grad(set_to_none=True)
            logits = self.model(inputs)
            loss = self.workload.loss_fn(logits, targets)
            loss.backward()
            if buffers and rank == 0:
                rank0 = [b.clone() for b in buffers]
            grads.append(torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                                    for p in self.params]))
            losses.append(float(loss.detach()))
            accs.append(float((logits.detach().argmax(dim=1) == targets).float().mean()))
        for b, s in zip(buffers, rank0, strict=True):
            b.copy_(s)  # rank 0's replica keeps only its own running statistics
        return grads, float(np.mean(losses)), float(np.mean(accs))

    def learning_rate(self, step: int) -> float:
        """The rate of step ``step`` (0-based): constant, or cosine from the base rate to 0 over the run.

        A function of the step alone (no scheduler state), so MOO's probes, which replay steps from a
        snapshot, use exactly the rate the real step uses."""
        if self.lr_schedule == "cosine":
            return self.base_lr * 0.5 * (1.0 + math.cos(math.pi * step / self.config.steps))
        return self.base_lr

    def apply(self, aggregate: Tensor, step: int | None = None) -> None:
        """Write the aggregate into ``.grad`` and take one optimizer step (at step ``step``'s rate)."""
        if step is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate(step)
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = aggregate[offset:offset + n].view_as(p).clone()
            offset += n
        self.optimizer.step()

    def timing(self, stats: StepStats) -> tuple[list[float], float, float]:
        """(seconds per timed record, communication seconds, compression seconds) on the simulated cluster."""
        secs = [self.clock.seconds(r, self.config.workers) for r in timed_records(stats)]
        mode = self.config.compress_time
        if mode == "model":
            compress = self.compress_model(stats.scheme, self.numel * self.price_scale)
        elif mode == "measured":
            compress = stats.compress_time_s + stats.decompress_time_s
        else:
            compress = 0.0
        return secs, float(sum(secs)), float(compress)

    # --- the MOO controller's probes -----------------------------------------------------------------
    def _snapshot(self) -> dict[str, Any]:
        comp = self.compressor
        return {"model": copy.deepcopy(self.model.state_dict()), "opt": copy.deepcopy(self.optimizer.state_dict()),
                "residuals": {k: v.clone() for k, v in comp.residuals.items()}, "steps": dict(comp.steps),
                "rng": torch.get_rng_state()}

    def _restore(self, snap: dict[str, Any]) -> None:
        self.model.load_state_dict(snap["model"])
        self.optimizer.load_state_dict(snap["opt"])
        torch.set_rng_state(snap["rng"])

    def probe(self, step: int) -> tuple[list[float], list[float], float]:
        """Run ``probe_steps`` steps at every candidate ratio from the current state, then restore it.

        Each candidate uses the scheme the cost model predicts fastest at that ratio, starts from the
        same parameters, optimizer state and error-feedback residuals and replays the same batches the
        training will use next. Returns (ratios, gains, seconds the probes cost on the simulated cluster).
        """
        flex = self.compressor
        assert isinstance(flex, FlexibleCompressor)
        cfg = self.config
        snap = self._snapshot()
        sparse = [s for s in flex.candidates if s != "dense"] or ["topk-ar"]
        predictor = flex.predictor(self.comm)
        ratios, gains, cost = [], [], 0.0
        for c in cfg.moo.candidates:
            self._restore(snap)
            times = [float(predictor.seconds(s, self.numel, c, cfg.workers)) for s in sparse]
            scheme = sparse[int(np.argmin(times))]
            options = {"owner": cfg.owner} if scheme == "topk-ar" else {}
            comp = make_compressor(scheme, c, gain_every=1, **options)
            comp.residuals = {k: v.clone() for k, v in snap["residuals"].items()}
            comp.steps = dict(snap["steps"])
            for j in range(cfg.moo.probe_steps):
                grads, _, _ = self.gradients(step + j)
                result = comp.exchange(grads, self.comm)
                self.apply(result.aggregates[0], step + j)
                secs, comm_s, compress_s = self.timing(result.stats)
                flex.observe(result.stats, secs, log=False)  # probes are real traffic: they inform the estimate
                cost += self.compute_s + comm_s + compress_s
                if result.stats.gain is not None:
                    ratios.append(c)
                    gains.append(result.stats.gain)
        self._restore(snap)
        return ratios, gains, cost if cfg.charge_probes else 0.0

    def _moo_step(self, step: int) -> tuple[float, str]:
        """Re-decide the ratio if due; returns (probe seconds, event label)."""
        ctl, flex = self.controller, self.compressor
        assert ctl is not None and isinstance(flex, FlexibleCompressor)
        estimator = flex.estimator
        predictor = flex.predictor(self.comm)
        sparse = [s for s in flex.candidates if s != "dense"] or ["topk-ar"]
        coefficients = []
        for scheme in sparse:
            coef = scheme_coefficients(scheme, self.numel, self.config.workers, flex.ratio or 1.0,
                                       predictor.payload, predictor.algorithms)
            coefficients.append((float(coef.alpha), float(coef.beta) * self.price_scale))
        reason = ctl.due(step, estimator, coefficients)
        if reason is None:
            return 0.0, ""
        probe_s = 0.0
        if ctl.needs_probe(reason):
            ratios, gains, probe_s = self.probe(step)
            ctl.fit_gains(step, ratios, gains)

        def time_fn(c: np.ndarray) -> np.ndarray:
            return predictor.best_sparse_seconds(self.numel, c, self.config.workers, sparse)[0]

        def schemes(c: np.ndarray) -> dict[str, Any]:
            index = predictor.best_sparse_seconds(self.numel, c, self.config.workers, sparse)[1]
            return {"scheme": [sparse[i] for i in index]}

        front = ctl.optimize(step, reason, time_fn, compute_s=self.compute_s, estimator=estimator,
                             extra_columns=schemes)
        flex.set_ratio(front.ratio)
        return probe_s, f"{reason}: c={front.ratio:.4g}"

    # --- the loop ---------------------------------------------------------------------------------------
    def run(self, progress: bool = False) -> RunResult:
        """Train ``steps`` steps; writes the CSV every ``flush_every`` steps (atomically) when a path was given."""
        cfg = self.config
        torch.manual_seed(cfg.seed)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=cfg.steps, desc=cfg.strategy, unit="step", leave=True, disable=None)
        try:
            for step in range(cfg.steps):
                self.clock.at(step)
                probe_s, event = self._moo_step(step) if self.controller is not None else (0.0, "")
                grads, loss, train_acc = self.gradients(step)
                result = self.compressor.exchange(grads, self.comm)
                self.apply(result.aggregates[0], step)
                stats = result.stats
                secs, comm_s, compress_s = self.timing(stats)
                row_extra: dict[str, Any] = {"alpha_est_s": math.nan, "beta_est_s_per_byte": math.nan}
                mechanism_s = 0.0 if cfg.compress_time == "measured" else math.nan
                if isinstance(self.compressor, FlexibleCompressor):
                    with self.compressor.mechanism.part("estimate"):
                        self.compressor.observe(stats, secs)
                    assert self.compressor.estimator is not None
                    alpha, beta = self.compressor.estimator.estimate()
                    row_extra = {"alpha_est_s": alpha, "beta_est_s_per_byte": beta}
                    # the machinery's own CPU seconds (deciding, refitting) on this host: charged, and logged,
                    # with the other host-measured costs (compress_time="measured"); NaN otherwise, so the
                    # seeded CSV stays the same from run to run
                    measured = sum(self.compressor.mechanism.take().values())
                    mechanism_s = measured if cfg.compress_time == "measured" else math.nan
                if self.controller is not None:
                    self.controller.observe_gain(stats.gain)
                step_s = self.compute_s + comm_s + compress_s + (mechanism_s if math.isfinite(mechanism_s) else 0.0)
                self.sim_time += step_s + probe_s
                done = step + 1
                test_loss = test_acc = math.nan
                if done % cfg.eval_every == 0 or done == cfg.steps:
                    test_loss, test_acc = evaluate(self.model, self.workload.test_set, self.workload.loss_fn)
                latency, bandwidth = self.clock.link
                self.rows.append({
                    "step": done, "strategy": cfg.strategy, "scheme": stats.scheme,
                    "ratio": stats.ratio if stats.ratio is not None else 1.0, "sim_time_s": self.sim_time,
                    "step_time_s": step_s, "compute_s": self.compute_s, "comm_s": comm_s, "compress_s": compress_s,
                    "probe_s": probe_s, "mechanism_s": mechanism_s, "loss": loss, "train_acc": train_acc,
                    "test_loss": test_loss, "test_acc": test_acc, "gain": stats.gain, "gain_norm": stats.gain_norm,
                    "payload_bytes": stats.payload_bytes, **row_extra, "net_latency_s": latency,
                    "net_bandwidth_Bps": bandwidth, "event": event,
                })
                if self.csv_path is not None and (done % cfg.flush_every == 0 or done == cfg.steps):
                    write_csv_atomic(self.frame(), self.csv_path)
                if bar is not None:
                    bar.update(1)
                    if not math.isnan(test_acc):
                        bar.set_postfix(acc=f"{test_acc:.3f}", sim=f"{self.sim_time:.3g}s")
        finally:
            if bar is not None:
                bar.close()
        return self.result()

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=CSV_COLUMNS)

    def result(self) -> RunResult:
        frame = self.frame()
        res = RunResult(self.config.strategy, frame)
        if isinstance(self.compressor, FlexibleCompressor):
            res.decisions = self.compressor.decisions_frame()
        if self.controller is not None:
            res.moo_events = self.controller.events_frame()
            res.fronts = self.controller.fronts_frame()
            res.probes = pd.concat(self.controller.probes, ignore_index=True) if self.controller.probes else None
        res.summary = summarise(frame, res)
        return res


def summarise(frame: pd.DataFrame, res: RunResult) -> dict[str, Any]:
    """Final accuracy, simulated time and what the adaptive parts decided."""
    evals = frame.dropna(subset=["test_acc"])
    last = frame.iloc[-1]
    out: dict[str, Any] = {
        "strategy": res.strategy,
        "steps": int(last["step"]),
        "final_test_acc": float(evals["test_acc"].iloc[-1]) if len(evals) else math.nan,
        "best_test_acc": float(evals["test_acc"].max()) if len(evals) else math.nan,
        "sim_time_s": float(last["sim_time_s"]),
        "mean_step_s": float(frame["step_time_s"].mean()),
        "mean_comm_s": float(frame["comm_s"].mean()),
        "mean_compress_s": float(frame["compress_s"].mean()),
        "compute_s": float(frame["compute_s"].iloc[0]),
        "probe_s": float(frame["probe_s"].sum()),
        "mean_gain": float(frame["gain"].mean()),
        "schemes": {k: int(v) for k, v in frame["scheme"].value_counts().items()},
        "ratios": sorted({round(float(r), 6) for r in frame["ratio"].unique()}),
    }
    if res.decisions is not None and len(res.decisions):
        out["switches"] = int(res.decisions["switched"].sum() - 1)
        out["latency_probes"] = int(res.decisions["latency_probe"].sum())
    if res.moo_events is not None and len(res.moo_events):
        out["moo_decisions"] = res.moo_events[["step", "reason", "ratio"]].to_dict("records")
    return out


# --- several strategies ------------------------------------------------------------------------------------


def time_to_accuracy(frame: pd.DataFrame, target: float) -> float:
    """Simulated seconds at the first evaluation reaching ``target`` test accuracy (NaN if never)."""
    hit = frame[frame["test_acc"] >= target]
    return float(hit["sim_time_s"].iloc[0]) if len(hit) else math.nan


def run_emulation(
    config: EmulationConfig,
    strategies: Sequence[str] | None = None,
    out: str | Path | None = None,
    *,
    progress: bool = False,
    plot: bool = True,
) -> dict[str, RunResult]:
    """Run each strategy on the same setting (same seed, same initial model and data) and write the results.

    Files under ``out``: ``steps_<strategy>.csv`` (per step, flushed during the run), ``emulated.csv``
    (all strategies), ``decisions_<strategy>.csv`` (flexible/moo scheme decisions),
    ``moo_events.csv`` / ``moo_fronts.csv`` / ``moo_probes.csv``, ``summary.json``, ``emulated.png`` and, for
    ``moo``, ``pareto_fronts.png``.
    """
    import json

    names = strategy_names(config, strategies)
    workload = get_workload(config.workload, seed=config.seed)
    outdir = Path(out) if out is not None else None
    results: dict[str, RunResult] = {}
    for name in names:
        cfg = replace(config, strategy=name)
        csv = outdir / f"steps_{name}.csv" if outdir is not None else None
        results[name] = EmulatedRun(cfg, workload=workload, csv_path=csv).run(progress=progress)
    if outdir is None:
        return results
    write_csv_atomic(pd.concat([r.frame for r in results.values()], ignore_index=True), outdir / "emulated.csv")
    for name, res in results.items():
        if res.decisions is not None:
            write_csv_atomic(res.decisions, outdir / f"decisions_{name}.csv")
        if res.moo_events is not None:
            write_csv_atomic(res.moo_events, outdir / "moo_events.csv")
        if res.fronts is not None and len(res.fronts):
            write_csv_atomic(res.fronts, outdir / "moo_fronts.csv")
        if res.probes is not None:
            write_csv_atomic(res.probes, outdir / "moo_probes.csv")
    finals = [r.summary["final_test_acc"] for r in results.values() if not math.isnan(r.summary["final_test_acc"])]
    target = 0.95 * max(finals) if finals else math.nan
    summary = {
        "workload": config.workload, "workers": config.workers,
        "cluster": config.cluster if isinstance(config.cluster, str) else config.cluster.name,
        "network": config.network, "steps": config.steps, "seed": config.seed, "ratio": config.ratio,
        "price_params": config.price_params, "compress_time": config.compress_time,
        "target_test_acc": target,
        "strategies": {name: {**res.summary, "time_to_target_s": time_to_accuracy(res.frame, target)}
                       for name, res in results.items()},
    }
    write_text_atomic(outdir / "summary.json", json.dumps(summary, indent=2, default=float) + "\n")
    if plot:
        from flexcomm.emulation.plots import plot_emulation

        plot_emulation({n: r.frame for n, r in results.items()}, outdir / "emulated.png",
                       title=f"{config.workload}, {config.workers} workers, "
                             f"{summary['cluster']} ({config.network} network)")
        fronts = [r.fronts for r in results.values() if r.fronts is not None and len(r.fronts)]
        if fronts:
            from flexcomm.emulation.plots import plot_pareto_fronts

            plot_pareto_fronts(fronts[0], outdir / "pareto_fronts.png")
    return results
