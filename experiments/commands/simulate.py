"""``flexcomm simulate``: data-parallel training iterations on a simulated cluster, with stragglers and faults."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from flexcomm._running import simulate
from flexcomm.costmodel.atomic import write_csv_atomic, write_text_atomic
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.compressed import PRICED_SCHEMES
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_count, format_size, format_time
from flexcomm.experiments.commands.common import add_cluster_arguments, print_json, print_written
from flexcomm.experiments.commands.job_options import add_job_argument
from flexcomm.experiments.commands.simulate_recovery import run_recovery
from flexcomm.experiments.commands.simulate_trace import add_arguments as add_trace_arguments
from flexcomm.experiments.commands.simulate_trace import run_from_trace
from flexcomm.planner.llm.step_sim import Experts, load_step_plan, simulate_step, write_step
from flexcomm.sim.scenario import simulate_scenario
from flexcomm.sim.scenario_report import json_report, report_lines, write_scenario, written_line
from flexcomm.sim.trace import write_chrome_trace
from flexcomm.sim.training_config import parse_stragglers
from flexcomm.workloads.names import is_factory_reference


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "simulate",
        help="simulate training iterations (compute, bucketed gradient exchange, stragglers, faults)",
        description="Discrete-event simulation of data-parallel training on a cluster: per-layer compute, "
        "DDP-style gradient buckets overlapping the backward pass, network dynamics, stragglers, node/link "
        "failures with checkpoint-restart or elastic shrink. Prints a per-iteration table and the median "
        "breakdown; --json prints a JSON object, --out writes CSVs, --trace a Chrome/Perfetto trace.",
    )
    _add_job_flags(parser)
    _add_dynamics_and_fault_flags(parser)
    _add_llm_and_recovery_flags(parser)
    _add_output_flags(parser)
    parser.set_defaults(handler=run)


def _add_job_flags(parser: argparse.ArgumentParser) -> None:
    """The cluster, the workload and how its gradients are exchanged."""
    add_cluster_arguments(parser)
    add_job_argument(parser)
    parser.add_argument("--workload", help="resnet18, resnet50, vgg16, alexnet, transformer-1.3b (or a "
                        "workloads-package model such as resnet-synthetic), your own model as module.path:factory or "
                        "path/to/file.py:factory, or a profiler trace as path/to/trace.json; required unless "
                        "--scenario")
    parser.add_argument("--scenario", help="a scenario YAML: several jobs (workloads or collective patterns) "
                        "sharing one cluster; writes per-job iteration times, slowdowns against running alone, "
                        "link_utilization.png and a trace with one process per job to --out")
    parser.add_argument("--iterations", type=int, default=10, help="training iterations to complete (default 10)")
    parser.add_argument("--ranks", type=int, help="use ranks 0..P-1 of the cluster (default: all)")
    parser.add_argument("--batch", type=float, help="samples per rank per iteration (default: the workload's)")
    parser.add_argument("--scheme", "--strategy", default="dense", help="gradient exchange (compression): "
                        + ", ".join(PRICED_SCHEMES))
    parser.add_argument("--ratio", type=float, default=0.01, help="Top-k fraction of elements kept (default 0.01)")
    parser.add_argument("--algorithm", default="auto", help="allreduce algorithm: nccl[:ALGO[/PROTO]] (every call "
                        "as NCCL runs it), ring, tree, rabenseifner, recursive-doubling, hierarchical; default auto: "
                        "nccl on a cluster with a gpu_fabric, else ring")
    parser.add_argument("--bucket-size", default="25MiB", help="DDP bucket cap (default 25MiB)")
    parser.add_argument("--buckets", type=int, help="exactly N buckets of about equal size instead of a cap")
    parser.add_argument("--efficiency", type=float, help="fraction of peak FLOP/s the device reaches (default 0.65)")
    parser.add_argument("--optimizer-time", default="0s", help="optimizer step after the last bucket (default 0s)")
    parser.add_argument("--granularity", default="auto", help="auto (steps with network dynamics), aggregate "
                        "or steps")


def _add_dynamics_and_fault_flags(parser: argparse.ArgumentParser) -> None:
    """Network dynamics, stragglers and faults."""
    net = parser.add_argument_group("network dynamics")
    net.add_argument("--network-trace", help="CSV of link changes: time_s, link, bandwidth, latency")
    net.add_argument("--jitter", type=float, help="lognormal bandwidth jitter sigma on inter-node links")
    net.add_argument("--jitter-period", default="1ms", help="how often the jitter is redrawn (default 1ms)")
    net.add_argument("--congestion", nargs="?", const="", help="two-state congestion on inter-node links: "
                     "good=MEAN,bad=MEAN,factor=F (default good=50ms,bad=10ms,factor=0.25)")
    comp = parser.add_argument_group("stragglers")
    comp.add_argument("--straggler", action="append", default=[], metavar="RANK=FACTOR",
                      help="rank computes FACTOR times slower (repeatable), e.g. 3=1.5; node1=1.3 slows every GPU "
                      "of node 1; with --llm-plan a stage runs at its slowest GPU's speed")
    comp.add_argument("--compute-jitter", type=float, default=0.0,
                      help="seeded lognormal per-rank, per-iteration compute slowdown sigma (default 0)")
    faults = parser.add_argument_group("faults")
    faults.add_argument("--fail", action="append", default=[], metavar="SPEC",
                        help="node3@12s, link:node3->switch@5s or random:mtbf=2h (repeatable)")
    faults.add_argument("--checkpoint-every", type=int, default=0, help="checkpoint every C iterations (0: never)")
    faults.add_argument("--checkpoint-cost", help="seconds per checkpoint write (default: 12 B/param at 2GB/s)")
    faults.add_argument("--restart-cost", help="relaunch + rendezvous time (default 30s; --recovery: 2min)")
    faults.add_argument("--timeout", help="collective watchdog timeout (default 30s; --recovery: 10min, "
                        "torch's default NCCL timeout)")
    faults.add_argument("--repair-time", help="time until a failed element is back (default 5min; --recovery: 4h)")
    faults.add_argument("--elastic", action="store_true", help="shrink to the surviving nodes, grow back at the "
                        "first checkpoint after the repair")


def _add_llm_and_recovery_flags(parser: argparse.ArgumentParser) -> None:
    """One step of a transformer plan (--llm-plan), flow sharing, and long-horizon recovery (--recovery)."""
    llm = parser.add_argument_group("one step of a 3-D parallel transformer plan with contention (--llm-plan)")
    llm.add_argument("--llm-plan", help="best_plan.json of `flexcomm plan --model gpt` (or a YAML with the same "
                     "keys): simulate one training step on every GPU of --cluster; prints the step, the planner's "
                     "closed-form price and the busy time per communication")
    llm.add_argument("--experts", help="make it MoE: ep=8,top_k=2,every=2 (expert-parallel replicas, experts per "
                     "token, every n-th layer); adds each MoE layer's all-to-all")
    parser.add_argument("--sharing", help="with --scenario or --llm-plan: how flows share a link, max-min (default) "
                        "or rtt (shares inversely proportional to route latency, SimGrid CM02)")
    parser.add_argument("--coupling", help="with --scenario: coflow (default: a collective step's flows move at one "
                        "rate) or flow (each flow at its own fair rate)")
    recovery = parser.add_argument_group(
        "long-horizon recovery (--recovery): plan-level goodput of a transformer job over days of node failures; "
        "--workload is then gpt-1.7b, gpt-3.6b, gpt-7.5b, gpt-18.4b, gpt-145.6b or gpt-529.6b (Megatron-LM's)")
    recovery.add_argument("--recovery", help="restart, shrink, replan, replan+grow, a comma list, or all")
    recovery.add_argument("--horizon", default="7d", help="simulated wall time (default 7d)")
    recovery.add_argument("--mtbf", help="mean time between failures of one node, e.g. 2d "
                          "(default 264d: Llama 3's fleet, 419 interruptions in 54 days on 2,048 8-GPU nodes)")
    recovery.add_argument("--rack-mtbf", help="also fail whole racks of --rack-nodes nodes with this MTBF")
    recovery.add_argument("--rack-nodes", type=int, default=8, help="nodes per rack (default 8)")
    recovery.add_argument("--checkpoint-interval", default="1h",
                          help="training time between checkpoints, or young-daly (default 1h)")
    recovery.add_argument("--storage-bandwidth", help="checkpoint write/read bandwidth (default: the cluster's "
                          "storage_bandwidth, else 10GB/s)")
    recovery.add_argument("--planning-time", default="measured", help="charge per re-plan: measured (the planner's "
                          "own search time, default) or a fixed duration such as 2s (bit-identical reruns)")
    recovery.add_argument("--nodes", type=int, help="nodes the job runs on (default: the cluster's)")
    recovery.add_argument("--batch-size", type=int, help="global batch in sequences (default: the model's row)")
    recovery.add_argument("--mtbf-study", action="store_true", help="sweep MTBF x job size x checkpoint interval "
                          "and map the best policy per cell (writes recovery_study.csv/.png under --out)")



def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    """Traces in, files and lines out."""
    add_trace_arguments(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--trace", help="write a Chrome trace JSON (chrome://tracing, Perfetto)")
    out.add_argument("--seed", type=int, default=0, help="seed of every random process (default 0)")
    out.add_argument("--json", action="store_true", help="print a JSON object (iterations + summary)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar (shown only on a terminal anyway)")
    out.add_argument("--out", help="directory for iterations.csv, buckets.csv, events.csv, faults.csv, summary.json")


def _plain(value: Any) -> Any:
    """JSON-safe: NaN -> null, numpy scalars -> Python."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _records(frame: Any) -> list[dict[str, Any]]:
    return [_plain(row) for row in frame.to_dict("records")]


#: Below this a simulated duration is float rounding of event times (a stall of 1.4e-17 s printed as 1.39e-08ns).
ROUNDING_S = 1e-12


def _ms(seconds: float) -> str:
    return "-" if not math.isfinite(seconds) else format_time(seconds) if abs(seconds) >= ROUNDING_S else "0"


def _table(iterations: Any) -> list[str]:
    header = (f"{'attempt':>7s} {'step':>5s} {'ranks':>5s} {'status':>6s} {'time':>9s} {'compute':>9s} "
              f"{'compress':>9s} {'exposed':>9s} {'stall':>9s} {'comm':>9s}")
    lines = [header]
    rows = iterations.to_dict("records")
    shown = rows if len(rows) <= 40 else rows[:20] + [None] + rows[-20:]
    for row in shown:
        if row is None:
            lines.append(f"{'...':>7s} ({len(rows) - 40} more)")
            continue
        lines.append(
            f"{row['attempt']:7d} {row['step']:5d} {row['world_size']:5d} {row['status']:>6s} "
            f"{_ms(row['time_s']):>9s} {_ms(row['compute_s']):>9s} {_ms(row['compression_s']):>9s} "
            f"{_ms(row['exposed_comm_s']):>9s} {_ms(row['stall_s']):>9s} {_ms(row['comm_s']):>9s}")
    return lines


def run_llm_step(args: argparse.Namespace) -> int:
    """``--llm-plan FILE --cluster C``: one step of the plan on every GPU, with contention."""
    started = time.time()
    from dataclasses import replace


    if not args.cluster:
        raise InputError("cluster", None, "--cluster NAME|FILE: the GPUs the plan runs on")
    step = load_step_plan(args.llm_plan)
    if args.experts:
        fields = {}
        for part in args.experts.split(","):
            key, _, value = part.partition("=")
            if key.strip() not in ("ep", "top_k", "every") or not value.strip().isdigit():
                raise InputError("experts", args.experts, "ep=N[,top_k=K][,every=E] with whole numbers")
            fields[key.strip()] = int(value)
        if "ep" not in fields:
            raise InputError("experts", args.experts, "ep=N (expert-parallel replicas), e.g. ep=8,top_k=2")
        step = replace(step, experts=Experts(**fields))

    cluster = load_cluster(args.cluster)
    stragglers = parse_stragglers(args.straggler, cluster.devices_per_node, cluster.nodes)
    result = simulate_step(cluster, step, sharing=args.sharing or "max-min", stragglers=stragglers)
    if args.out:
        write_step(result, Path(args.out) / "llm_step.json")
    if args.json:
        print_json(result.as_dict())
        return 0
    plan = step.plan
    slow = f" with {len(stragglers)} slow GPUs (up to {max(stragglers.values()):g}x)" if stragglers else ""
    exchange = step.exchange
    ratio = f" c={exchange.ratio:g}" if exchange.scheme.startswith("topk") else ""
    scheme = "" if exchange.dense or step.plan.dp == 1 else f", {exchange.scheme}{ratio} gradients"
    print(f"{plan.label} on {cluster.name}{' with experts ep=' + str(step.experts.ep) if step.experts else ''}{slow}"
          f"{scheme}: "
          f"step {format_time(result.step_s)} simulated with contention, planner's closed form "
          f"{format_time(result.analytical_s)} (x{result.step_s / result.analytical_s:.3f}"
          f"{', the slow GPUs included' if stragglers else ''}); "
          f"{result.coflows:,} coflow{'' if result.coflows == 1 else 's'}, {result.events:,} events in "
          f"{result.wall_s:.2f} s of wall time")
    print("busy on stage 0's path: " + ", ".join(f"{k} {format_time(v)}" for k, v in result.busy_s.items()))
    if args.out:
        print_written(args.out, started)
    return 0


def run_scenario_file(args: argparse.Namespace) -> int:
    """``--scenario FILE``: every job together, then each alone; files under --out (default results/scenario)."""
    if args.cluster or args.workload:
        raise InputError("scenario", args.scenario, "a scenario alone (its file names the cluster and the jobs; "
                         "drop --cluster / --workload)")
    result = simulate_scenario(args.scenario, sharing=args.sharing, coupling=args.coupling)
    out = args.out or "results/scenario"
    written = write_scenario(result, out)
    if args.json:
        print_json(json_report(result))
        return 0
    for line in report_lines(result):
        print(line)
    print(written_line(out, written))
    return 0


#: What ``--from-trace`` reads besides its own group (:mod:`experiments.commands.simulate_trace`); any other
#: option given with it would be silently ignored, so it is refused.
FROM_TRACE_OPTIONS = {"from_trace", "execution_trace", "traced_on", "bandwidth", "latency", "host_cores",
                      "compress_throughput", "cluster", "algorithm", "compute_jitter", "iterations", "json", "out",
                      "ranks", "ratio", "scheme", "seed", "straggler", "no_progress", "traced_device"}
#: What ``--llm-plan`` reads (one step of a transformer plan); anything else given with it is refused.
LLM_PLAN_OPTIONS = {"llm_plan", "cluster", "experts", "sharing", "straggler", "json", "out", "no_progress", "seed",
                    "job"}
#: ``--from-trace``'s own options: meaningless without it.
TRACE_ONLY_OPTIONS = ("execution_trace", "traced_on", "bandwidth", "latency", "host_cores", "compress_throughput",
                      "traced_device")


def _given(args: argparse.Namespace) -> list[str]:
    """The options this run sets to other than their defaults, as their dests, in the parser's order."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    actions = [a for a in parser._subparsers._group_actions[0].choices["simulate"]._actions if a.dest != "help"]
    return [a.dest for a in actions if getattr(args, a.dest, a.default) != a.default]


def refuse_ignored_options(args: argparse.Namespace) -> None:
    """An option the chosen mode would not read is one line, not silently dropped (``--trace`` with
    ``--from-trace`` wrote nothing; ``--execution-trace`` without it did nothing; ``--straggler`` with
    ``--llm-plan`` left the step as it was)."""
    given = _given(args)
    if args.from_trace:
        # --workload, --scenario and --llm-plan are refused by run_from_trace with their own reason
        _refuse_unread(args, given, FROM_TRACE_OPTIONS | {"workload", "scenario", "llm_plan"}, "--from-trace (the "
                       "replay of a traced step does not read it; docs/simulator.md, 'Replaying a profiled step', "
                       "lists what it does)")
        return
    if args.llm_plan:
        _refuse_unread(args, given, LLM_PLAN_OPTIONS, "--llm-plan (one step of the plan is simulated: it reads "
                       "--cluster, --experts, --sharing, --straggler, --json and --out)")
        return
    stray = [d for d in given if d in TRACE_ONLY_OPTIONS]
    if stray:
        flag = "--" + stray[0].replace("_", "-")
        raise InputError(flag.lstrip("-"), getattr(args, stray[0]), f"{flag} only with --from-trace TRACE.json")


def _refuse_unread(args: argparse.Namespace, given: list[str], read: set[str], mode: str) -> None:
    """The first option given that ``mode`` does not read, as one line."""
    ignored = [d for d in given if d not in read]
    if ignored:
        flag = "--" + ignored[0].replace("_", "-")
        raise InputError(flag.lstrip("-"), getattr(args, ignored[0]), f"no {flag} with {mode}")


def run(args: argparse.Namespace) -> int:
    """``flexcomm simulate``: one of its modes, or the training job on the simulator, written and printed."""
    refuse_ignored_options(args)
    if args.from_trace:

        return run_from_trace(args)
    if args.scenario:
        return run_scenario_file(args)
    if args.llm_plan:
        return run_llm_step(args)
    if args.recovery is not None or args.mtbf_study:

        return run_recovery(args)
    for name in ("cluster", "workload"):
        if not getattr(args, name):
            raise InputError(name, None, f"--{name} (or --scenario FILE)")
    args.timeout = args.timeout or "30s"
    args.restart_cost = args.restart_cost or "30s"
    args.repair_time = args.repair_time or "5min"

    if args.iterations < 1:
        raise InputError("iterations", args.iterations, "an integer >= 1")
    started = time.perf_counter()
    result = _simulate_with_progress(args)
    wall = time.perf_counter() - started
    summary = result.summary()
    summary["wall_s"] = wall
    written = _write_outputs(args, result, summary)
    if args.json:
        print_json({"config": _plain(result.config), "summary": _plain(summary),
                    "iterations": _records(result.iterations), "faults": _records(result.faults),
                    "events": _records(result.events), "files": written})
        return 0
    _print_job(args, result, summary, wall)
    for path in written:
        print(f"wrote {path}")
    return 0


def _simulate_with_progress(args: argparse.Namespace):  # noqa: ANN202 - a TrainingResult
    """The job simulated as the flags describe it, with a progress bar on a terminal."""
    bar = None
    if sys.stderr.isatty() and not args.json and not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=args.iterations, unit="it", file=sys.stderr, leave=False, desc="simulating",
                   disable=None)
    progress = None if bar is None else (lambda done, total: bar.update(done - bar.n))
    try:
        return simulate(
            args.cluster, args.workload, iterations=args.iterations, ranks=args.ranks, batch=args.batch,
            scheme=args.scheme, ratio=args.ratio, algorithm=args.algorithm, bucket_size=args.bucket_size,
            buckets=args.buckets, efficiency=args.efficiency, optimizer_time=args.optimizer_time,
            granularity=args.granularity, network_trace=args.network_trace, jitter=args.jitter,
            jitter_period=args.jitter_period, congestion=args.congestion, stragglers=args.straggler,
            compute_jitter=args.compute_jitter, faults=args.fail, checkpoint_every=args.checkpoint_every,
            checkpoint_cost=args.checkpoint_cost, restart_cost=args.restart_cost, timeout=args.timeout,
            repair_time=args.repair_time, elastic=args.elastic, profile=args.profile, seed=args.seed,
            progress=progress)
    finally:
        if bar is not None:
            bar.close()


def _write_outputs(args: argparse.Namespace, result, summary: dict) -> list[str]:  # noqa: ANN001
    """The Chrome trace (``--trace``) and the tables and summary (``--out``), each written atomically."""
    written: list[str] = []
    if args.trace:

        written.append(str(write_chrome_trace(result, args.trace)))
    if args.out:
        folder = Path(args.out)
        for name, frame in (("iterations", result.iterations), ("buckets", result.buckets),
                            ("events", result.events), ("faults", result.faults)):
            written.append(str(write_csv_atomic(frame, folder / f"{name}.csv")))
        payload = {"config": _plain(result.config), "summary": _plain(summary)}
        written.append(str(write_text_atomic(folder / "summary.json", json.dumps(payload, indent=2) + "\n")))
    return written


def _print_job(args: argparse.Namespace, result, summary: dict, wall: float) -> None:  # noqa: ANN001
    """The job, its iterations, the median iteration's parts, the whole job and its faults."""
    buckets = result.bucket_list
    first = result.config.get("first_bucket_cap")
    plural = "" if len(buckets) == 1 else "s"
    cap = f"{args.buckets} buckets" if args.buckets else (
        f"{len(buckets)} bucket{plural} ({args.bucket_size} cap"
        + (f", {format_size(first)} first, as DDP" if first else "") + ")")
    config = result.config
    exchange = "allreduce/" + config["algorithm"] if config["scheme"] == "dense" else \
        f"{config['scheme']}" + (f" ratio {config['ratio']:g}" if config["scheme"].startswith("topk") else "") + \
        f" via {config['algorithm']}"
    print(f"{config['workload']} ({format_count(config['parameters'])} parameters) on {config['cluster']}: "
          f"{config['ranks']} ranks x batch {config['batch_per_rank']:g}, {exchange}, {cap}, gradient "
          f"{format_size(sum(b.nbytes for b in buckets))}")
    if is_factory_reference(args.workload):  # what was assumed about the user's model: said, not hidden
        print(f"  your model: {config['workload_description']}")
    elif config.get("workload_description"):  # a sample's input (224px images, 2048-token sequences) is said too
        print(f"  model: {config['workload_description']}")
    for line in _table(result.iterations):
        print(line)
    print(f"median iteration {_ms(summary['median_time_s'])}: compute {_ms(summary['median_compute_s'])}, "
          f"compression {_ms(summary['median_compression_s'])}, exposed comm {_ms(summary['median_exposed_comm_s'])} "
          f"(of {_ms(summary['median_comm_s'])} comm), stall {_ms(summary['median_stall_s'])}")
    print(f"job {_ms(result.job_time_s)} for {result.completed} iterations, {summary['samples_per_s']:,.0f} samples/s; "
          f"{result.sim_events:,} simulated events in {wall:.2f}s")
    _print_faults(result)


def _print_faults(result) -> None:  # noqa: ANN001
    """Each fault drawn and what it did, and the time the job lost to failures and checkpoints."""
    for row in result.faults.to_dict("records"):
        when = f"at {_ms(row['time_s'])}"
        if row["effect"] == "after job end":
            print(f"fault {row['spec']}: after the job ended ({_ms(result.job_time_s)}), no effect")
        elif str(row["effect"]).startswith("none drawn"):
            print(f"fault {row['spec']}: {row['effect']} in {_ms(result.job_time_s)}, no effect")
        else:
            print(f"fault {row['spec'] or row['target']} {when}: {row['effect']}")
    lost = result.lost
    if lost.restarts or lost.checkpoint_s:
        print(f"time lost {_ms(lost.total_s)}: lost work {_ms(lost.lost_work_s)}, detection {_ms(lost.detection_s)}, "
              f"repair wait {_ms(lost.repair_wait_s)}, restarts {_ms(lost.restart_s)} ({lost.restarts} after "
              f"failures, {lost.grows} grow-backs), checkpoints {_ms(lost.checkpoint_s)}, reduced throughput "
              f"{_ms(lost.reduced_throughput_s)}")
    if result.aborted:
        print(f"aborted after {lost.restarts} restarts (max_restarts)")
