"""``flexcomm train-ddp``: real DDP training with a communication hook per strategy, logged per step."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from flexcomm.costmodel.calibration import CalibrationProfile
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_LOCAL_PROCESSES, MAX_TRAINING_STEPS
from flexcomm.costmodel.units import parse_bandwidth, parse_time
from flexcomm.experiments.commands.common import output_folder, print_written
from flexcomm.real_backend.ddp_train import check_training_options, parse_hidden, parse_strategies, run_training
from flexcomm.real_backend.elastic import launch_elastic, parse_elastic
from flexcomm.real_backend.elastic_report import measure, summary_line
from flexcomm.real_backend.elastic_train import (
    CHECKPOINT,
    UNCHECKPOINTED,
    ElasticWorkerConfig,
    parse_fail,
    read_checkpoint,
)
from flexcomm.real_backend.launch import launch, sigterm_as_exit
from flexcomm.real_backend.testbed import Testbed
from flexcomm.real_backend.worker_config import to_argument
from flexcomm.workloads.names import WORKLOADS, canonical_workload


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "train-ddp",
        help="train a workload with torch DDP and a compression hook per strategy (real ranks)",
        description="Start N ranks (locally, or inside a shaped testbed with --testbed) that train WORKLOAD with "
        "torch DistributedDataParallel, once per strategy in --strategy (a comma list; NAME@RATIO overrides "
        "--ratio). Strategies: builtin (DDP's own allreduce), dense, fp16, bf16, topk-ag, topk-ar, topk-ar-var, "
        "topk-ar-sketch, randomk, threshold, powersgd (torch's powerSGD_hook), flexible (per-step Allgather/"
        "Allreduce Top-k switch from an online network estimate), moo (flexible + online compression-ratio "
        "controller). Rank 0 appends every step to OUT/<strategy>/steps.csv (loss, step seconds, comm seconds, "
        "bytes, scheme, ratio, predicted comm) and every bucket exchange to OUT/<strategy>/exchanges.csv as they "
        "happen, then OUT/<strategy>/summary.json and OUT/run.json.",
    )
    parser.add_argument("--nproc", type=int, help="ranks (default 2 locally, all ranks of --testbed)")
    parser.add_argument("--workload", default="mlp-digits", help="workload name (default mlp-digits)")
    parser.add_argument("--strategy", required=True, help="comma list, e.g. dense,topk-ag,topk-ar@0.1,powersgd")
    parser.add_argument("--ratio", type=float, help="fraction of elements kept by the ratio strategies without "
                        "@R, e.g. 0.01 (not moo: it picks its own)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per strategy (default 20)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--testbed", metavar="ID", help="run inside this shaped testbed (`flexcomm testbed up`)")
    parser.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl with CUDA, else gloo")
    parser.add_argument("--hidden", help="MLP hidden widths for mlp-digits, e.g. 1024,1024 (a ~1.1M-parameter MLP)")
    parser.add_argument("--batch-size", type=int, help="per-rank batch size (default: the workload's)")
    parser.add_argument("--lr", type=float, help="learning rate (default: the workload's)")
    parser.add_argument("--seed", type=int, default=0, help="model and data seed (default 0)")
    parser.add_argument("--profile", help="calibration profile (from `flexcomm calibrate`) pricing the log")
    parser.add_argument("--latency", help="link latency for the log's cost model and the adaptive prior, e.g. 1ms")
    parser.add_argument("--bandwidth", help="link bandwidth for the same (default on a testbed: its goodput)")
    parser.add_argument("--powersgd-rank", type=int, default=1, help="PowerSGD matrix rank (default 1)")
    parser.add_argument("--compute-steps", type=int, default=6, help="steps timed without DDP (default 6)")
    parser.add_argument("--no-overlap", action="store_true", help="hooks block inside DDP instead of overlapping "
                        "backward on their communication thread (for comparison)")
    parser.add_argument("--torch-profile", action="store_true", help="record the steps after warm-up with "
                        "torch.profiler: OUT/STRATEGY/trace.json, the trace `simulate --from-trace` replays")
    parser.add_argument("--timeout", default="1h", help="wall-clock limit of the run (default 1h)")
    parser.add_argument("--op-timeout", default="120s", help="limit of one collective (default 120s)")
    parser.add_argument("--log-dir", help="write rank r's output to DIR/rank{r}.log")
    elastic = parser.add_argument_group(
        "checkpoints and elastic runs (one strategy: dense is DDP's builtin allreduce, a compression hook's "
        "error-feedback memory is checkpointed per rank; not moo or powersgd; the worker is "
        "real_backend/elastic_train.py)")
    elastic.add_argument("--checkpoint-every", type=int, help="write OUT/checkpoint.pt every N steps (atomically)")
    elastic.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt when it exists")
    elastic.add_argument("--elastic", metavar="MIN:MAX", help="launch MAX ranks; when one is lost re-form with the "
                         "survivors while at least MIN remain, resuming from the checkpoint, then report the time "
                         "lost next to the recovery simulator's prediction (OUT/elastic_report.json, elastic.png)")
    elastic.add_argument("--fail", metavar="rankR@S", help="rank R kills itself at step S of the first round "
                         "(a reproducible lost rank)")
    parser.set_defaults(handler=run)


def _checkpointed(args: argparse.Namespace) -> bool:
    return args.checkpoint_every is not None or args.resume or bool(args.elastic) or args.fail is not None


def _check_checkpointed(args: argparse.Namespace) -> tuple[int | None, int | None, int]:
    """The options of a checkpointed run, all checked without torch: (MIN, MAX) of --elastic and the ranks."""
    if args.testbed:
        raise InputError("testbed", args.testbed, "no --testbed with --checkpoint-every/--resume/--elastic")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise InputError("checkpoint-every", args.checkpoint_every, "an integer >= 1 (steps between checkpoints)")
    low, high = parse_elastic(args.elastic) if args.elastic else (None, None)
    if args.nproc is not None and high is not None and args.nproc != high:
        raise InputError("elastic", args.elastic, f"MIN:MAX with MAX = --nproc ({args.nproc})")
    nproc = high if high is not None else (args.nproc or 2)
    fail = parse_fail(args.fail)
    if fail is not None and not fail[0] < nproc:
        raise InputError("fail", args.fail, f"a rank 0..{nproc - 1} of the first round's {nproc} ranks "
                         "(a rank that does not exist would never fail)")
    if fail is not None and not fail[1] < args.steps:
        raise InputError("fail", args.fail, f"a step 0..{args.steps - 1} of the {args.steps} --steps (a later "
                         "step is never reached)")
    strategy = _strategies(args)[0]
    if strategy.strategy in UNCHECKPOINTED:
        raise InputError("strategy", strategy.strategy, "dense or a hook strategy other than "
                         + " and ".join(UNCHECKPOINTED) + " with checkpoints (their controller / PowerSGD state "
                         "is not saved)")
    return low, high, nproc


def _strategies(args: argparse.Namespace) -> list:  # -> list[StrategySpec]
    """``--strategy`` parsed (names, @ratios); a checkpointed run takes one strategy, said before any ratio."""
    if _checkpointed(args) and len([item for item in args.strategy.split(",") if item.strip()]) > 1:
        raise InputError("strategy", args.strategy, "one strategy with --checkpoint-every/--resume/--elastic/--fail")
    return parse_strategies(args.strategy, args.ratio)


def _check_resume(out: Path, args: argparse.Namespace) -> None:
    """The checkpoint a resumed run starts from, read here (nothing in it executed) so that a crafted, damaged or
    foreign checkpoint is one line and exit 2 from this command, not a rank's exit status and a rank log."""
    from flexcomm.workloads import get_workload

    checkpoint = out / CHECKPOINT
    if not checkpoint.exists():
        return
    workload = get_workload(args.workload, seed=args.seed)
    numel = sum(p.numel() for p in workload.build_model(args.seed).parameters())
    read_checkpoint(checkpoint, workload.name, numel, args.steps)


def _run_checkpointed(args: argparse.Namespace, timeout: float) -> int:
    """train-ddp with --checkpoint-every / --resume / --elastic: the elastic worker under the (elastic) launcher."""
    import sys


    low, high, nproc = _check_checkpointed(args)
    strategy = _strategies(args)[0]
    every = args.checkpoint_every if args.checkpoint_every is not None else 10
    output_folder(args.out)
    if args.resume or args.elastic:
        _check_resume(Path(args.out), args)
    config = ElasticWorkerConfig(
        workload=args.workload, steps=args.steps, checkpoint_every_steps=every, out=str(args.out), seed=args.seed,
        strategy=strategy.strategy, ratio=strategy.ratio, batch_size=args.batch_size, lr=args.lr, fail=args.fail,
        resume=bool(args.resume or args.elastic))
    command = [sys.executable, "-m", "flexcomm.real_backend.elastic_train", to_argument(config)]
    logs = Path(args.log_dir or Path(args.out) / "logs")
    with sigterm_as_exit():
        if high is None:
            return launch(command, nproc, backend=args.backend, timeout_s=timeout, log_dir=logs).returncode
        result = launch_elastic(command, low, high, log_dir=logs, timeout_s=timeout, backend=args.backend)
    if result.returncode == 0 and len(result.rounds) > 1:

        print(summary_line(measure(logs, args.out)))
    if result.returncode == 0:
        print(f"wrote {args.out}/steps.csv, {args.out}/checkpoint.pt"
              + (f", {args.out}/elastic_report.json, {args.out}/elastic.png" if len(result.rounds) > 1 else ""))
    return result.returncode


def run(args: argparse.Namespace) -> int:
    started = time.time()  # files written from here on are this command's

    # every option is checked here, before torch loads (the ranks import it; this process need not)
    specs = _strategies(args)
    if canonical_workload(args.workload) not in WORKLOADS:
        raise InputError("workload", args.workload, "one of " + ", ".join(WORKLOADS))
    parse_hidden(args.hidden)
    check_training_options(args.batch_size, args.lr)
    if args.nproc is not None and args.nproc < 1:
        raise InputError("nproc", args.nproc, "an integer >= 1")
    if args.nproc is not None:
        MAX_LOCAL_PROCESSES.check("nproc", args.nproc)
    if args.steps < 1:
        raise InputError("steps", args.steps, "an integer >= 1")
    MAX_TRAINING_STEPS.check("steps", args.steps)
    if args.powersgd_rank < 1:
        raise InputError("powersgd-rank", args.powersgd_rank, "an integer >= 1")
    if args.compute_steps < 1:
        raise InputError("compute-steps", args.compute_steps, "an integer >= 1")
    timeout = parse_time(args.timeout, "timeout")
    op_timeout = parse_time(args.op_timeout, "op-timeout")
    if timeout <= 0 or op_timeout <= 0:
        raise InputError("timeout", f"{args.timeout}/{args.op_timeout}", "positive times such as 1h and 120s")
    latency = parse_time(args.latency, "latency") if args.latency else None
    bandwidth = parse_bandwidth(args.bandwidth, "bandwidth") if args.bandwidth else None
    if bandwidth is not None and bandwidth <= 0:
        raise InputError("bandwidth", args.bandwidth, "a positive bandwidth such as 100Mbit/s")
    if args.profile:

        CalibrationProfile.load(args.profile)  # a bad profile is a one-line error here, not in every rank
    if _checkpointed(args):
        return _run_checkpointed(args, timeout)
    testbed = None
    if args.testbed:

        testbed = Testbed.load(args.testbed)
    output_folder(args.out)
    with sigterm_as_exit():
        result = run_training(args.nproc, args.workload, specs, args.steps, args.out, ratio=args.ratio, testbed=testbed,
                              timeout_s=timeout, log_dir=args.log_dir, hidden=args.hidden,
                              batch_size=args.batch_size, lr=args.lr, seed=args.seed, compute_steps=args.compute_steps,
                              latency_s=latency, bandwidth_Bps=bandwidth, profile=args.profile, backend=args.backend,
                              op_timeout_s=op_timeout, powersgd_rank=args.powersgd_rank,
                              overlap=not args.no_overlap, torch_profile=args.torch_profile)
    if result.returncode == 0:
        print_written(args.out, started)
    return result.returncode
