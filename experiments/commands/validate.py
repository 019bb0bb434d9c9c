"""``flexcomm validate``: benchmark, calibrate and train for real, then predict every point and tabulate errors."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.collective_libraries.log_check import check_nccl_tests, report_lines
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_time
from flexcomm.experiments import published_llm, published_training_report
from flexcomm.experiments.commands.common import add_cluster_arguments, output_folder, print_json, print_written
from flexcomm.experiments.published import corpus_folder, validate_published
from flexcomm.experiments.published_llm_plots import plot_published_llm
from flexcomm.experiments.published_report import summary_lines, write_files
from flexcomm.experiments.published_training_validation import validate_published_training
from flexcomm.experiments.published_transfer import headline, system_summary, system_table, validate_transfer
from flexcomm.real_backend import from_trace_validate, gpu_compute_corpus, trace_validate
from flexcomm.real_backend import validate as real_validate
from flexcomm.real_backend.launch import sigterm_as_exit
from flexcomm.real_backend.options import VALIDATE_SIZES as DEFAULT_SIZES
from flexcomm.real_backend.options import VALIDATE_STRATEGIES
from flexcomm.real_backend.options import VALIDATE_STRATEGIES as DEFAULT_STRATEGIES
from flexcomm.sim import gpu_trace_validate


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "validate",
        help="sim-vs-real validation: measured collectives and DDP steps against the cost model and the simulator",
        description="On loopback and (with --testbed, root) on a shaped testbed at each of --bandwidths: run the "
        "collective benchmark, calibrate on it, and train briefly with each strategy under DDP; then predict every "
        "measured point with the calibrated cost model (fitted leaving the predicted size out), with the link's "
        "own parameters (0.956 x the rate, calibrated latency) and with the simulator, and write errors.csv, "
        "errors.md, predicted_vs_measured.png and summary.json to --out. Testbeds are always removed.",
    )
    parser.add_argument("--testbed", action="store_true", help="also measure on a shaped testbed (needs root)")
    parser.add_argument("--bandwidths", default="100Mbit/s,1Gbit/s", help="testbed rates (default 100Mbit/s,1Gbit/s)")
    parser.add_argument("--ranks", type=int, help="ranks (default 2; 3 with --network-trace)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"benchmark sizes MIN:MAX[:FACTOR] or a list "
                        f"(default {DEFAULT_SIZES})")
    parser.add_argument("--collectives", default="allreduce,allgather,broadcast,reduce-scatter",
                        help="collectives to benchmark (default all four)")
    parser.add_argument("--iters", type=int, default=5, help="timed repetitions per size (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repetitions per size (default 1)")
    parser.add_argument("--strategies", help=f"DDP strategies (default {DEFAULT_STRATEGIES}; "
                        "topk-ag,topk-ar,flexible,moo with --network-trace); empty with --no-ddp")
    parser.add_argument("--ratio", type=float, default=0.01, help="Top-k ratio of the DDP runs (default 0.01)")
    parser.add_argument("--steps", type=int, default=12, help="DDP steps per strategy (default 12)")
    parser.add_argument("--workload", default="mlp-digits", help="DDP workload (default mlp-digits)")
    parser.add_argument("--hidden", default="1024,1024", help="MLP hidden widths (default 1024,1024: 1.1M params)")
    parser.add_argument("--no-loopback", action="store_true", help="skip the loopback condition")
    parser.add_argument("--no-ddp", action="store_true", help="benchmark collectives only")
    parser.add_argument("--timeout", default="30min", help="limit of each benchmark or training run (default 30min)")
    parser.add_argument("--out", default="results/validate", help="output folder (default results/validate)")
    _add_corpus_flags(parser)
    _add_testbed_flags(parser)
    parser.set_defaults(handler=run)


def _add_corpus_flags(parser: argparse.ArgumentParser) -> None:
    """Logs and published corpora checked without running anything."""
    logs = parser.add_argument_group("an nccl-tests log instead of running anything")
    logs.add_argument("--nccl-tests", metavar="LOG", help="predict every row of this pasted nccl-tests output with "
                      "--cluster's cost model (--profile: calibrated) and print the errors")
    add_cluster_arguments(logs)
    logs.add_argument("--collective", help="the log's collective when the log does not name its test")
    logs.add_argument("--algorithm", help="algorithm to price: nccl (NCCL's own choice; the default on a cluster "
                      "with gpu_fabric), nccl:ring/ll128 to force one, or a formula's (default ring)")
    logs.add_argument("--json", action="store_true", help="print one JSON object: rows and summary")
    corpus = parser.add_argument_group("the published corpus instead of running anything")
    corpus.add_argument("--published", nargs="?", const="", metavar="DIR",
                        help="predict every run of DIR (default: the project's validation/nccl-tests) from its "
                        "clusters/<run>.yaml alone; write errors.md, errors.csv and figures/ to --out "
                        "(default results/published)")
    corpus.add_argument("--transfer", action="store_true",
                        help="with --published: for every system with several runs (# system: in their cluster "
                        "files), calibrate on each run alone and predict the system's other runs (collectives, node "
                        "counts, releases) beside the baseline of the calibration run's bus bandwidth; write "
                        "transfer.csv, transfer.md, transfer.png and calibrations/ to --out (default "
                        "results/published-transfer)")
    corpus.add_argument("--published-training", nargs="?", const="", metavar="FILE",
                        help="predict every multi-GPU row of published DDP training throughput (default: the "
                        "project's validation/training-throughput/training-throughput.md, NVIDIA "
                        "DeepLearningExamples) from its 1-GPU row with the simulator and NCCL on the node's "
                        "fabric; write training.csv, training.md and training.png to --out (default "
                        "results/published-training)")
    corpus.add_argument("--published-llm", nargs="?", const="", metavar="FILE",
                        help="predict every row of NVIDIA's published LLM pre-training throughput at its own layout "
                        "(default: the shipped Megatron-Bridge 25.11/26.02 and NeMo 24.07 tables; FILE: a markdown "
                        "table in their layout) beside the naive baseline (model FLOPs at the measured BF16 matmul "
                        "rate); write llm.csv, llm.md and llm.png to --out (default results/published-llm)")
    corpus.add_argument("--gpu-compute", nargs="?", const="", metavar="DIR",
                        help="report the one-GPU compute measurements of DIR (default: the project's "
                        "validation/gpu-compute, written by real_backend/gpu_check.sh on a lent GPU) against the "
                        "engines' predictions, per section; write gpu_compute.md to --out (default "
                        "results/gpu-compute)")
    corpus.add_argument("--gpu-traces", nargs="?", const="", metavar="DIR",
                        help="reproduce the GPU step of every public torch.profiler trace of DIR (default: the "
                        "project's validation/gpu-traces, with settings.csv naming where each is taken to have run) "
                        "through the NCCL model, beside the naive baseline; write gpu_traces.csv and gpu_traces.md to "
                        "--out (default results/gpu-traces)")
    corpus.add_argument("--no-progress", action="store_true", help="no progress bar (--published)")


def _add_testbed_flags(parser: argparse.ArgumentParser) -> None:
    """Real ranks under a changing network, and one traced setting predicting the others."""
    traced = parser.add_argument_group("real ranks under a changing network (root; results/validate-trace)")
    traced.add_argument("--network-trace", metavar="c1|c2|FILE",
                        help="train every strategy on a testbed whose rates and delay follow this trace (the "
                        "paper's C1/C2 scaled, or a CSV: time_s, link, bandwidth, latency), replay the runs in "
                        "simulation from a two-rate calibration, and report per-step errors, decision agreement "
                        "and trace_validation.png")
    traced.add_argument("--trace-duration", default="120s", help="length c1/c2 are scaled to (default 120s)")
    traced.add_argument("--trace-max-bandwidth", default=None,
                        help="rate of c1/c2's fastest phase (default 10Mbit/s: 3 ranks on 2 cores are network-bound "
                        "there, 4x slower than unshaped; much faster, the CPU bounds the step)")
    traced.add_argument("--cpu-bound-ok", action="store_true",
                        help="run even where the network check finds the step CPU-bound (shaped < 3x unshaped), "
                        "e.g. the old setting: --ranks 4 --trace-max-bandwidth 200Mbit/s")
    traced.add_argument("--replay-only", action="store_true",
                        help="only replay and report an existing --out folder of a finished traced run")
    from_trace = parser.add_argument_group(
        "one profiled step predicting other settings (root; results/validate-from-trace; docs/simulator.md)")
    from_trace.add_argument("--from-trace", action="store_true",
                            help="train with the profiler at --traced-setting, replay that trace at the other rates "
                            "and rank counts with builtin/topk-ag/topk-ar, measure them all, report per-setting error "
                            "and the ranking")
    from_trace.add_argument("--traced-setting", default="3@200Mbit/s", metavar="RANKS@RATE",
                            help="where the trace is recorded (default 3@200Mbit/s)")
    from_trace.add_argument("--rank-counts", default="2,4", help="other rank counts at the traced rate (default 2,4)")
    from_trace.add_argument("--predict-only", action="store_true",
                            help="only predict and report an existing --out folder of a finished --from-trace run")


def run_from_trace(args: argparse.Namespace, started: float) -> int:
    """``validate --from-trace``: trace one setting on the testbed, predict and measure the others."""
    ranks_text, _, rate = args.traced_setting.partition("@")
    try:
        traced_ranks = int(ranks_text)
    except ValueError:
        raise InputError("traced-setting", args.traced_setting, "RANKS@RATE such as 3@200Mbit/s") from None
    if not rate:
        raise InputError("traced-setting", args.traced_setting, "RANKS@RATE such as 3@200Mbit/s")
    out = "results/validate-from-trace" if args.out == "results/validate" else args.out
    bandwidths = "50Mbit/s,100Mbit/s" if args.bandwidths == "100Mbit/s,1Gbit/s" else args.bandwidths
    timeout = parse_time(args.timeout, "timeout")
    with sigterm_as_exit():
        folder, summary, failures = from_trace_validate.run_from_trace_validation(
            out, traced_ranks=traced_ranks, traced_bandwidth=rate, bandwidths=bandwidths, rank_counts=args.rank_counts,
            steps=10 if args.steps == 12 else args.steps, ratio=args.ratio, workload=args.workload,
            hidden="512,512" if args.hidden == "1024,1024" else (args.hidden or None), timeout_s=timeout,
            measure_runs=not args.predict_only)
    return _report(from_trace_validate.summary_lines(summary), folder, failures, started)


def run_network_trace(args: argparse.Namespace, started: float) -> int:
    """``validate --network-trace``: measure under the trace (or only replay a finished folder), report."""
    out = "results/validate-trace" if args.out == "results/validate" else args.out
    if args.replay_only:
        result = trace_validate.analyze_trace(out)
    else:
        timeout = parse_time(args.timeout, "timeout")
        if timeout <= 0:
            raise InputError("timeout", args.timeout, "a positive time such as 30min")
        with sigterm_as_exit():
            result = trace_validate.run_trace_validation(
                args.network_trace, out, ranks=trace_validate.DEFAULT_RANKS if args.ranks is None else args.ranks,
                strategies=args.strategies or trace_validate.DEFAULT_STRATEGIES, ratio=args.ratio,
                workload=args.workload, hidden=args.hidden or None, duration=args.trace_duration,
                max_bandwidth=args.trace_max_bandwidth or trace_validate.DEFAULT_MAX_BANDWIDTH,
                timeout_s=timeout, cpu_bound_ok=args.cpu_bound_ok)
    return _report(trace_validate.summary_lines(result.summary), result.folder, result.failures, started)


def run_log(args: argparse.Namespace) -> int:
    """``validate --nccl-tests LOG --cluster FILE``: the cost model against a pasted run, row by row."""
    check = check_nccl_tests(args.nccl_tests, args.cluster, profile=args.profile, collective=args.collective,
                             algorithm=args.algorithm)
    if args.json:
        print_json(check.to_dict())
        return 0
    for line in report_lines(check):
        print(line)
    return 0


def run_transfer(args: argparse.Namespace) -> int:
    """``validate --published [DIR] --transfer``: calibrate on one run of a system, predict its other runs."""
    out = Path("results/published-transfer" if args.out == "results/validate" else args.out)
    frame = validate_transfer(corpus_folder(args.published), out, progress=not args.no_progress)
    print(headline(frame))
    print("per system, medians over the pairs where the node count or the collective changes (median |error|, "
          "rows >= 1 MiB):")
    for line in system_table(system_summary(frame)):
        print(line)
    print(f"wrote {out}/: transfer.md, transfer.csv, transfer.png, calibrations/ ({len(frame)} pairs)")
    return 0


def run_published(args: argparse.Namespace) -> int:
    """``validate --published [DIR]``: every published run predicted from its hardware description."""
    out = Path("results/published" if args.out == "results/validate" else args.out)
    result = validate_published(args.published, progress=not args.no_progress, before_work=lambda: output_folder(out))
    figures = write_files(result, out)
    for line in summary_lines(result):
        print(line)
    print(f"wrote {out}/: errors.md, errors.csv, figures/ ({len(figures)} runs)")
    return 0


def run_published_training(args: argparse.Namespace) -> int:
    """``validate --published-training [FILE]``: published DDP throughput predicted from each run's reference row
    (or its description), beside the naive baseline of linear scaling."""
    result = validate_published_training(args.published_training or None)
    out = Path("results/published-training" if args.out == "results/validate" else args.out)
    written = published_training_report.write_files(result, out)
    print("\n".join(published_training_report.console_lines(result)))
    print(f"wrote {out}/: {', '.join(written)}")
    return 0


def run_gpu_compute(args: argparse.Namespace) -> int:
    """``validate --gpu-compute [DIR]``: the one-GPU measurements against the predictions made beside them."""
    folder = Path(args.gpu_compute) if args.gpu_compute else gpu_compute_corpus.corpus_folder()
    frame = gpu_compute_corpus.read_corpus(folder)
    if frame.empty:
        print(f"{folder}: no measurements yet (no GPU has been lent to this project's check): on a GPU, run "
              "real_backend/gpu_check.sh and copy its gpu_compute.csv here as <device>-<date>.csv")
        return 0
    out = Path("results/gpu-compute" if args.out == "results/validate" else args.out)
    lines = []
    for file, group in frame.groupby("file", sort=True):
        torch_version = group["torch"].iloc[0] if "torch" in group.columns else "?"
        lines += [f"{file}: {group['device'].iloc[0]}, torch {torch_version}", "",
                  *gpu_compute_corpus.summary_lines(group), ""]
    write_text_atomic(out / "gpu_compute.md", "\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {out}/gpu_compute.md")
    return 0


def run_gpu_traces(args: argparse.Namespace) -> int:
    """``validate --gpu-traces [DIR]``: public GPU traces reproduced where they ran, beside the naive baseline."""
    frame = gpu_trace_validate.validate_gpu_traces(args.gpu_traces or None)
    out = Path("results/gpu-traces" if args.out == "results/validate" else args.out)
    lines = gpu_trace_validate.report_lines(frame)
    write_csv_atomic(frame, out / "gpu_traces.csv")
    write_text_atomic(out / "gpu_traces.md", "\n".join(lines) + "\n")
    gpu_trace_validate.plot_gpu_traces(frame, out / "gpu_traces.png")
    print("\n".join(lines))
    print(f"wrote {out}/gpu_traces.csv, {out}/gpu_traces.md, {out}/gpu_traces.png")
    return 0


def run_published_llm(args: argparse.Namespace) -> int:
    """``validate --published-llm [FILE]``: every published row at its layout, beside the naive baseline."""
    frame = published_llm.predict(published_llm.read_corpus(args.published_llm or None))
    out = Path("results/published-llm" if args.out == "results/validate" else args.out)
    lines = published_llm.report_lines(frame)
    write_csv_atomic(frame, out / "llm.csv")
    write_text_atomic(out / "llm.md", "\n".join([*lines, "", *published_llm.target_lines(frame)]) + "\n")
    plot_published_llm(frame, out / "llm.png")
    print("\n".join(lines))
    model, naive = published_llm.overall(frame)
    print(f"\nall {len(frame)} rows: model median |error| {model:.1%}, naive baseline {naive:.1%}")
    print("\n".join(published_llm.target_lines(frame)))
    print(f"wrote {out}/llm.csv, {out}/llm.md, {out}/llm.png")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.published_llm is not None:
        return run_published_llm(args)
    if args.gpu_traces is not None:
        return run_gpu_traces(args)
    if args.gpu_compute is not None:
        return run_gpu_compute(args)
    if args.published_training is not None:
        return run_published_training(args)
    if args.transfer and args.published is None:
        raise InputError("transfer", True, "--published [DIR] --transfer (the corpus whose systems it transfers "
                         "between)")
    if args.published is not None:
        return run_transfer(args) if args.transfer else run_published(args)
    if args.nccl_tests:
        return run_log(args)
    started = time.time()  # files written from here on are this command's
    if args.network_trace or args.replay_only:
        return run_network_trace(args, started)
    if args.from_trace or args.predict_only:
        return run_from_trace(args, started)

    timeout = parse_time(args.timeout, "timeout")
    if timeout <= 0:
        raise InputError("timeout", args.timeout, "a positive time such as 30min")
    if args.iters < 1 or args.warmup < 0:
        raise InputError("iters", f"{args.iters}/{args.warmup}", "--iters >= 1 and --warmup >= 0")
    real_validate.parse_bandwidths(args.bandwidths)  # checked even without --testbed: a typo should not pass silently
    with sigterm_as_exit():
        result = real_validate.run_validation(args.out, testbed=args.testbed, bandwidths=args.bandwidths,
                                ranks=2 if args.ranks is None else args.ranks,
                                sizes=args.sizes, collectives=args.collectives, warmup=args.warmup, iters=args.iters,
                                strategies=VALIDATE_STRATEGIES if args.strategies is None else args.strategies,
                                ratio=args.ratio, steps=args.steps,
                                workload=args.workload, hidden=args.hidden or None, loopback=not args.no_loopback,
                                ddp=not args.no_ddp, timeout_s=timeout)
    return _report(real_validate.summary_lines(result.summary), result.out, result.failures, started)


def _report(lines: list[str], folder: str | Path, failures: list[str], started: float) -> int:
    """A validation's summary lines, the files it wrote and its failed runs; exit 1 when any run failed."""
    for line in lines:
        print(line)
    print_written(folder, started)
    for failure in failures:
        print(f"failed: {failure}")
    return 1 if failures else 0
