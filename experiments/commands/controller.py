"""``flexcomm controller train|evaluate``: a learned compression controller (PPO, gSDE vs Gaussian)."""

from __future__ import annotations

import argparse
import math
import time

from flexcomm.controller.config import VARIANTS, EnvConfig, TrainConfig, check_baselines, load_settings
from flexcomm.controller.traces import parse_traces
from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError, renamed_fields
from flexcomm.costmodel.units import parse_count
from flexcomm.experiments.commands.common import output_folder, print_written


def _add_env_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="mlp-digits", help="workload name (default mlp-digits)")
    parser.add_argument("--workers", type=int, default=4, help="data-parallel workers N (default 4)")
    parser.add_argument("--cluster", default="8x1-v100-40g", help="cluster name or YAML file (compute model and "
                        "the network estimator's prior; default 8x1-v100-40g)")
    parser.add_argument("--price-params", default="11.69M", help="price the exchange as a gradient of this many "
                        "elements (default 11.69M, ResNet-18); 'none' for the workload's own size")
    parser.add_argument("--interval", type=int, default=10, help="training iterations an action is held "
                        "(the reconfiguration interval; one env step; default 10)")
    parser.add_argument("--episode-iters", type=int, default=300, help="training iterations per episode "
                        "(default 300)")
    parser.add_argument("--time-weight", type=float, default=0.5, help="reward lost per simulated second "
                        "(default 0.5; the loss term is 1 per nat of training-loss decrease)")
    parser.add_argument("--jitter", type=float, default=0.0, help="relative s.d. of log-normal noise on every "
                        "collective's time (default 0)")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "controller",
        help="learned compression controller: train PPO with gSDE / Gaussian exploration, evaluate on held-out "
        "networks against MOO, static ratios and dense",
        description="Emulated data-parallel training on a changing network is a gymnasium environment: every "
        "step holds a compression ratio and collective for one reconfiguration interval. `train` fits PPO with "
        "gSDE (use_sde=True) and with plain Gaussian exploration; `evaluate` compares them with the "
        "multi-objective optimizer, static ratios and dense on held-out traces.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    train = actions.add_parser("train", help="train the gSDE and Gaussian PPO controllers",
                               description="Writes gsde.zip, gaussian.zip, training_curves.csv/.png, "
                               "train_config.json and train_summary.json under --out.")
    train.add_argument("--timesteps", type=int, default=3000, help="env steps per variant (default 3000)")
    train.add_argument("--out", default="results/controller", help="output directory (default results/controller)")
    train.add_argument("--seed", type=int, default=0, help="seed of traces, episodes and PPO (default 0)")
    train.add_argument("--variants", default="gsde,gaussian", help="gsde and/or gaussian (default both)")
    train.add_argument("--train-traces", type=int, default=16, help="random traces of the train family "
                       "(default 16)")
    train.add_argument("--sde-sample-freq", type=int, default=4, help="gSDE: re-draw the noise matrix every K "
                       "env steps = K reconfiguration intervals (default 4; -1: once per rollout)")
    train.add_argument("--n-steps", type=int, default=240, help="PPO rollout length (default 240 = 8 episodes)")
    train.add_argument("--eval-every", type=int, default=600, help="evaluate the deterministic policy on the "
                       "fixed episodes every T timesteps (default 600)")
    train.add_argument("--eval-episodes", type=int, default=3, help="fixed (trace, model seed) episodes of "
                       "those evaluations (default 3)")
    _add_env_arguments(train)
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--no-plot", action="store_true", help="CSV and JSON only")
    train.set_defaults(handler=run_train)

    evaluate = actions.add_parser("evaluate", help="compare the trained controllers on held-out traces",
                                  description="Writes runs.csv, comparison.csv, comparison.md and comparison.png "
                                  "under --out.")
    evaluate.add_argument("--model", default="results/controller", help="directory written by `controller "
                          "train` (default results/controller)")
    evaluate.add_argument("--out", default="results/controller/eval", help="output directory "
                          "(default results/controller/eval)")
    evaluate.add_argument("--traces", default="c1,c2,heldout:2", help="held-out traces: c1, c2, "
                          "static:LATENCY:BANDWIDTH, heldout:K, train:K or CSV files (start,latency,bandwidth); "
                          "default c1,c2,heldout:2")
    evaluate.add_argument("--baselines", default="dense,topk-ag@0.1,topk-ag@0.01,topk-ag@0.001,topk-ar@0.1,"
                          "topk-ar@0.01,topk-ar@0.001,moo", help="comparison strategies (default: dense, both "
                          "Top-k at 0.1/0.01/0.001, moo)")
    evaluate.add_argument("--target", type=float, help="target test accuracy (default: 95%% of the best final "
                          "accuracy on each trace)")
    evaluate.add_argument("--seed", type=int, help="model seed of the runs and of heldout:K traces "
                          "(default: the training seed)")
    evaluate.add_argument("--seeds", type=int, default=3, help="model seeds per run (SEED, SEED+1, ...); numbers "
                          "are mean +- 95 %% interval, the figure draws the band (default 3)")
    evaluate.add_argument("--eval-every", type=int, default=10, help="test accuracy every E iterations "
                          "(default 10)")
    evaluate.add_argument("--no-progress", action="store_true", help="no progress bar")
    evaluate.add_argument("--no-plot", action="store_true", help="CSV and markdown only")
    evaluate.set_defaults(handler=run_evaluate)

    curves = actions.add_parser("curves", help="training curves of several `controller train` runs in one plot",
                                description="Reads training_curves.csv and train_config.json (for the seed) of "
                                "every DIR; writes the combined CSV, a PNG and a per-seed table of mean returns.")
    curves.add_argument("dirs", nargs="+", help="directories written by `controller train`")
    curves.add_argument("--out", default="results/controller/curves", help="output directory "
                        "(default results/controller/curves)")
    curves.add_argument("--window", type=int, default=10, help="running mean over W episodes (default 10)")
    curves.set_defaults(handler=run_curves)


def _env_config(args: argparse.Namespace):  # -> EnvConfig (torch-free: controller.config)
    text = str(args.price_params).strip().lower()
    price = None if text in ("none", "0", "") else parse_count(args.price_params, "price-params")
    load_cluster(args.cluster)  # a typo or a bad file now, not when the first episode starts
    return EnvConfig(workload=args.workload, workers=args.workers, cluster=args.cluster, price_params=price,
                     interval=args.interval, episode_iters=args.episode_iters, time_weight=args.time_weight,
                     jitter=args.jitter, seed=args.seed)


def run_train(args: argparse.Namespace) -> int:
    started = time.time()  # files written from here on are this command's

    # every option before torch (controller.train imports it): a refusal costs the CLI's start-up only
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    config = TrainConfig(timesteps=args.timesteps, seed=args.seed, variants=variants,
                         train_traces=args.train_traces, sde_sample_freq=args.sde_sample_freq,
                         n_steps=args.n_steps, batch_size=min(60, args.n_steps), eval_every=args.eval_every,
                         eval_episodes=args.eval_episodes, env=_env_config(args))
    config.validate()
    output_folder(args.out)
    from flexcomm.controller.train import train

    summaries = train(config, args.out, progress=not args.no_progress, plot=not args.no_plot)
    refs = summaries["references"]
    print("fixed evaluation episodes: " + ", ".join(f"{k} {v:.3f}" for k, v in refs.items()))
    print(f"{'variant':9s} {'episodes':>8s} {'first 20% return':>16s} {'last 20% return':>15s} "
          f"{'eval start':>10s} {'eval end':>9s} {'wall':>7s}")
    for name in variants:
        s = summaries[name]
        print(f"{name:9s} {s['episodes']:8d} {s['first_fifth_mean_return']:16.3f} "
              f"{s['last_fifth_mean_return']:15.3f} {s['fixed_eval_first']:10.3f} {s['fixed_eval_final']:9.3f} "
              f"{s['wall_s']:6.0f}s")
    print_written(args.out, started)
    return 0


def _check_evaluate(args: argparse.Namespace) -> tuple[list, list[str]]:
    """Every option of ``controller evaluate``, without torch: the traces and the baselines to run."""
    from pathlib import Path


    if args.seed is not None and args.seed < 0:
        raise InputError("seed", args.seed, "an integer >= 0")
    if args.eval_every < 1:
        raise InputError("eval-every", args.eval_every, "an integer >= 1")
    if args.seeds < 1:
        raise InputError("seeds", args.seeds, "a number of seeds >= 1")
    if args.target is not None and not (math.isfinite(args.target) and 0 < args.target <= 1):
        raise InputError("target", args.target, "an accuracy in (0, 1]")
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    check_baselines(baselines)
    train_config, _ = load_settings(args.model)
    if not any((Path(args.model) / f"{variant}.zip").is_file() for variant in VARIANTS):
        raise InputError("model", args.model, "a directory holding gsde.zip and/or gaussian.zip "
                         "(`flexcomm controller train --out DIR`)")
    traces = parse_traces(args.traces, train_config.seed if args.seed is None else args.seed)
    return traces, baselines


def run_evaluate(args: argparse.Namespace) -> int:
    started = time.time()  # files written from here on are this command's

    traces, baselines = _check_evaluate(args)
    output_folder(args.out)
    from flexcomm.controller.evaluate import evaluate, plus_minus

    table = evaluate(args.model, traces, args.out, baselines=baselines, target=args.target, seed=args.seed,
                     seeds=args.seeds, eval_every=args.eval_every, progress=not args.no_progress, plot=not args.no_plot)
    print(f"mean +- 95 % interval over {args.seeds} seed{'s' if args.seeds != 1 else ''}")
    print(f"{'trace':11s} {'strategy':14s} {'time to target':>18s} {'reached':>7s} {'final acc':>15s} {'sim time':>9s}")
    for _, r in table.iterrows():
        ttt = "never" if math.isnan(r["time_to_target_s"]) else plus_minus(
            r["time_to_target_s"], r["time_to_target_ci95"], "{:.3g}") + "s"
        print(f"{r['trace']:11s} {r['strategy']:14s} {ttt:>18s} {int(r['reached']):3d}/{int(r['seeds']):<3d} "
              f"{plus_minus(r['final_test_acc'], r['final_test_acc_ci95'], '{:.3f}'):>15s} {r['sim_time_s']:8.3g}s")
    print_written(args.out, started)
    return 0


def run_curves(args: argparse.Namespace) -> int:
    started = time.time()  # files written from here on are this command's
    from pathlib import Path

    import pandas as pd


    if args.window < 1:
        raise InputError("window", args.window, "an integer >= 1")
    frames, evals = [], []
    for directory in args.dirs:
        with renamed_fields({"model": "dirs"}):  # the folders are the positional DIRS here, not --model
            config, _ = load_settings(directory)
        path = Path(directory) / "training_curves.csv"
        try:
            frame = pd.read_csv(path)
        except (OSError, ValueError) as exc:
            raise InputError("dirs", str(path), f"a training_curves.csv written by `controller train` ({exc})"
                             ) from None
        frames.append(frame.assign(seed=config.seed))
        eval_path = Path(directory) / "eval_curves.csv"
        if eval_path.is_file():
            evals.append(pd.read_csv(eval_path).assign(seed=config.seed))
    curves = pd.concat(frames, ignore_index=True)
    from flexcomm.controller.plots import plot_training_curves

    out = output_folder(args.out)
    write_csv_atomic(curves, out / "training_curves.csv")
    evaluations = pd.concat(evals, ignore_index=True) if evals else None
    if evaluations is not None:
        write_csv_atomic(evaluations, out / "eval_curves.csv")
    plot_training_curves(curves, out / "training_curves.png", window=args.window, evals=evaluations)
    lines = ["| variant | seed | episodes | first 20% mean return | last 20% mean return |",
             "|---|---:|---:|---:|---:|"]
    for (variant, seed), part in curves.groupby(["variant", "seed"], sort=False):
        tail = max(1, len(part) // 5)
        first, last = part["return"].iloc[:tail].mean(), part["return"].iloc[-tail:].mean()
        lines.append(f"| {variant} | {seed} | {len(part)} | {first:.3f} | {last:.3f} |")
    table = "\n".join(lines) + "\n"
    write_text_atomic(out / "training_curves.md", table)
    print(table, end="")
    print_written(out, started)
    return 0
