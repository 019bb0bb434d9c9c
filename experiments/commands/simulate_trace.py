"""``flexcomm simulate --from-trace TRACE.json``: replay a profiled step, first where it ran, then where asked."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_bandwidth, format_size, format_time, parse_bandwidth, parse_time
from flexcomm.experiments.commands.common import cluster_from_args, emit_report
from flexcomm.experiments.commands.simulate_gpu_trace import run_gpu_trace
from flexcomm.real_backend.codec_rate import measure_topk_elements_per_s
from flexcomm.sim.profile_replay import LINK_SCHEMES, host_compute_scale, link_target, predicted_step_s, replay
from flexcomm.sim.traced_step import step_profile
from flexcomm.sim.training_config import parse_stragglers
from flexcomm.workloads.profiler_trace import read_profiler_trace, step_numbers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "your own job from a PyTorch profiler trace (--from-trace; docs/simulator.md, 'Replaying a profiled step')")
    group.add_argument("--from-trace", metavar="TRACE.json|DIR", nargs="+", help="a torch.profiler Chrome trace "
                       "(.json or .json.gz) of training steps recorded with a schedule; on GPUs, one per rank or "
                       "a directory of them (HolisticTraceAnalysis's layout) for the whole job")
    group.add_argument("--traced-device", metavar="DEVICE", help="GPU traces: the catalog device the trace ran on "
                       "where its deviceProperties name none the catalog knows")
    group.add_argument("--execution-trace", metavar="ET.json", help="the same run's ExecutionTraceObserver file: "
                       "collective sizes where the trace has no shapes")
    group.add_argument("--traced-on", metavar="RATE[,LATENCY]|CLUSTER", help="where the trace was recorded, e.g. "
                       "200Mbit/s,0.1ms or a cluster: the replay first reproduces the traced step there")
    group.add_argument("--bandwidth", help="target: hosts on links of this rate (one rank each), e.g. 100Mbit/s")
    group.add_argument("--latency", default="0s", help="target link latency with --bandwidth (default 0s)")
    group.add_argument("--host-cores", type=int, help="ranks share this many cores on one host (the testbed): "
                       "compute scales with how many ranks share them")
    group.add_argument("--compress-throughput", type=float, help="Top-k elements/s of the traced host (default on "
                       "a link target: measured on this host; on a cluster: its device's)")


@dataclass(frozen=True)
class Target:
    """Where a replay runs: a cluster and how many of its ranks, with a label people read."""

    label: str
    cluster: Any
    ranks: int
    hosts: bool  # a link target: ranks are hosts sharing nothing but the network


def _link_spec(text: str, field: str) -> tuple[float, float] | None:
    """``RATE[,LATENCY]`` -> (bytes/s, seconds); None when ``text`` is not a rate (then it names a cluster)."""
    rate_text, _, latency_text = str(text).partition(",")
    try:
        rate = parse_bandwidth(rate_text.strip(), field)
    except InputError:
        return None
    if rate <= 0:
        raise InputError(field, text, "a positive rate such as 200Mbit/s[,0.1ms] or a cluster")
    latency = parse_time(latency_text.strip(), field) if latency_text.strip() else 0.0
    return rate, latency


def _link_label(rate: float, latency: float, ranks: int) -> str:
    return f"{ranks} ranks on {format_bandwidth(rate)}" + (f", {format_time(latency)}" if latency else "") + " links"


def traced_setting(spec: str, world: int) -> Target:
    """``--traced-on``: a link (the trace's own rank count) or a cluster (its first ``world`` ranks)."""
    link = _link_spec(spec, "traced-on")
    if link is not None:
        return Target(_link_label(*link, world), link_target(world, *link), world, True)
    cluster = load_cluster(spec)
    if world > cluster.world_size:
        raise InputError("traced-on", spec, f"a cluster of at least the trace's {world} ranks")
    return Target(f"{world} ranks of {cluster.name}", cluster, world, False)


def target_setting(args: argparse.Namespace, traced: Target | None, world: int) -> Target | None:
    """The what-if: ``--cluster``, or ``--bandwidth`` links, or the traced setting at ``--ranks``."""
    if args.cluster and args.bandwidth:
        raise InputError("bandwidth", args.bandwidth, "either --cluster or --bandwidth, not both")
    if args.cluster:
        cluster = cluster_from_args(args)
        ranks = args.ranks or cluster.world_size
        return Target(f"{ranks} ranks of {cluster.name}", cluster, ranks, False)
    ranks = args.ranks or world
    if args.bandwidth:
        rate = parse_bandwidth(args.bandwidth, "bandwidth")
        if rate <= 0:
            raise InputError("bandwidth", args.bandwidth, "a positive rate such as 100Mbit/s")
        latency = parse_time(args.latency, "latency")
        return Target(_link_label(rate, latency, ranks), link_target(ranks, rate, latency), ranks, True)
    if args.ranks and traced is not None and traced.hosts:
        link = traced.cluster.inter_link
        return Target(_link_label(link.bandwidth_Bps, link.latency_s, ranks),
                      link_target(ranks, link.bandwidth_Bps, link.latency_s), ranks, True)
    if args.ranks and traced is not None:
        return Target(f"{ranks} ranks of {traced.cluster.name}", traced.cluster, ranks, False)
    return None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if math.isfinite(seconds) else "n/a"


def _pct(predicted: float, measured: float) -> str:
    return f"{(predicted - measured) / measured * 100:+.1f} %"


def run_from_trace(args: argparse.Namespace) -> int:
    if args.workload or args.scenario or args.llm_plan:
        raise InputError("from-trace", " ".join(args.from_trace), "a trace alone as the workload (drop --workload, "
                         "--scenario, --llm-plan)")
    if args.iterations < 1:
        raise InputError("iterations", args.iterations, "an integer >= 1")
    done = run_gpu_trace(args)
    if done is not None:
        return done
    if len(args.from_trace) > 1 or Path(args.from_trace[0]).is_dir():
        raise InputError("from-trace", " ".join(args.from_trace), "one host-only trace (the CPU path replays one "
                         "rank; several ranks or a directory are read for GPU jobs)")
    if args.traced_device:
        raise InputError("traced-device", args.traced_device, "a GPU trace (this one has no GPU activity)")
    trace = read_profiler_trace(args.from_trace[0], args.execution_trace)
    profile = step_profile(trace)
    world = profile.world_size
    traced = traced_setting(args.traced_on, world) if args.traced_on else None
    target = target_setting(args, traced, world)
    if target is not None and target.hosts and args.scheme not in LINK_SCHEMES:
        raise InputError("scheme", args.scheme, "on --bandwidth links one of " + ", ".join(LINK_SCHEMES)
                         + " (casts and PowerSGD are priced from a device: give --cluster)")
    stragglers = parse_stragglers(args.straggler, None)
    rate = args.compress_throughput
    if rate is not None and not rate > 0:
        raise InputError("compress-throughput", rate, "a positive number of elements per second")
    measured_rate = False
    if target is not None and target.hosts and args.scheme.startswith("topk") and rate is None:

        # measured by one rank alone; the replay takes the rate under the traced host's load (and rescales it)
        alone = measure_topk_elements_per_s(profile.largest_bucket_elements, args.ratio, target.ranks,
                                            seed=args.seed)
        rate = alone / host_compute_scale(1, world, args.host_cores)
        measured_rate = True

    report: dict[str, Any] = {"trace": profile.trace, "profile": _profile_dict(profile)}
    if traced is not None:
        result = replay(profile, traced.cluster, ranks=traced.ranks, algorithm=args.algorithm,
                        iterations=args.iterations, seed=args.seed)
        step = predicted_step_s(result)
        report["traced"] = {"setting": traced.label, "predicted_step_s": step,
                            "measured_step_s": profile.measured_step_s,
                            "error": (step - profile.measured_step_s) / profile.measured_step_s}
    if target is not None:
        scale = host_compute_scale(world, target.ranks, args.host_cores)
        result = replay(profile, target.cluster, ranks=target.ranks, scheme=args.scheme, ratio=args.ratio,
                        algorithm=args.algorithm, compute_scale=scale, compress_elements_per_s=rate,
                        iterations=args.iterations, seed=args.seed, stragglers=stragglers,
                        compute_jitter=args.compute_jitter)
        summary = result.summary()
        report["target"] = {"setting": target.label, "scheme": args.scheme,
                            "ratio": args.ratio if args.scheme.startswith("topk") else None,
                            "compute_scale": scale, "compress_elements_per_s": rate,
                            "compress_rate_measured_here": measured_rate,
                            "predicted_step_s": predicted_step_s(result),
                            "compute_s": summary["median_compute_s"],
                            "compression_s": summary["median_compression_s"],
                            "exposed_comm_s": summary["median_exposed_comm_s"], "comm_s": summary["median_comm_s"],
                            "sim_events": summary["sim_events"]}
    return emit_report(args, report, report_lines)


def _profile_dict(profile: Any) -> dict[str, Any]:
    return {"backend": profile.backend, "device": profile.device, "ranks": profile.world_size,
            "steps": list(profile.steps), "left_out": list(profile.left_out), "forward_s": profile.forward_s,
            "backward_s": profile.backward_s, "after_exchange_s": profile.after_s,
            "buckets": len(profile.bucket_bytes), "gradient_bytes": profile.gradient_bytes,
            "measured_step_s": profile.measured_step_s, "measured_exposed_s": profile.measured_exposed_s}


def report_lines(report: dict[str, Any]) -> list[str]:
    """What ``simulate --from-trace`` prints: the measured step, its reproduction, the what-if."""
    p = report["profile"]
    left = f" (step {step_numbers(p['left_out'])} left out: other buckets or no backward)" if p["left_out"] else ""
    lines = [
        f"{report['trace']}: {p['backend']} on {p['device']}, {p['ranks']} ranks; steps {step_numbers(p['steps'])}"
        f"{left}",
        f"  measured step {_ms(p['measured_step_s'])}: before the backward {_ms(p['forward_s'])}, backward "
        f"{_ms(p['backward_s'])}, exchange not hidden {_ms(p['measured_exposed_s'])}, after it "
        f"{_ms(p['after_exchange_s'])}; {p['buckets']} buckets, {format_size(p['gradient_bytes'])} of gradients",
    ]
    traced = report.get("traced")
    if traced is not None:
        lines.append(f"reproduced on the traced setting ({traced['setting']}): {_ms(traced['predicted_step_s'])} "
                     f"({_pct(traced['predicted_step_s'], traced['measured_step_s'])} against the measured step)")
    else:
        lines.append("not reproduced: give --traced-on RATE[,LATENCY]|CLUSTER (where the trace ran) to check the "
                     "replay against the measured step first")
    target = report.get("target")
    if target is not None:
        scheme = target["scheme"] + (f" ratio {target['ratio']:g}" if target["ratio"] else "")
        extra = []
        if target["compute_scale"] != 1.0:
            extra.append(f"compute x{target['compute_scale']:.2f} for ranks sharing the host's cores")
        if target["compress_rate_measured_here"]:
            extra.append(f"Top-k measured here at {target['compress_elements_per_s'] / 1e6:,.0f} M elements/s")
        lines.append(f"predicted on {target['setting']}, {scheme}: {_ms(target['predicted_step_s'])} (compute "
                     f"{_ms(target['compute_s'])}, compression {_ms(target['compression_s'])}, exchange not hidden "
                     f"{_ms(target['exposed_comm_s'])} of {_ms(target['comm_s'])})"
                     + (f"; {'; '.join(extra)}" if extra else ""))
    else:
        lines.append("no what-if asked: give --cluster, --bandwidth or --ranks to predict the step elsewhere")
    for path in report.get("files", []):
        lines.append(f"wrote {path}")
    return lines
