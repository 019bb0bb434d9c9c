"""``flexcomm testbed up|down|status|run|shape|trace``: a shaped-network testbed of network namespaces (root only)."""

from __future__ import annotations

import argparse
import sys

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_time
from flexcomm.experiments.commands.common import print_json
from flexcomm.real_backend.launch import sigterm_as_exit
from flexcomm.real_backend.net_trace import load_trace
from flexcomm.real_backend.netns import TestbedError
from flexcomm.real_backend.testbed import (
    Testbed,
    down_all,
    list_namespaces,
    list_testbeds,
    require_privileges,
    run_in_testbed,
)
from flexcomm.real_backend.trace_control import trace_file


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "testbed",
        help="N network namespaces joined by tc-shaped links, to run ranks on a real network",
        description="Build a testbed of N network namespaces (fxc-ID-r0..), each with a veth into a bridge in its "
        "own namespace (fxc-ID-br), private addresses 10.213.X.0/24 that exist only inside them, and tc tbf on both "
        "ends of every veth. Needs root, ip and tc. Ranks run inside with `testbed run` or "
        "`bench-collectives --testbed ID`.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    up = actions.add_parser("up", help="create a testbed and print its id (it stays until `testbed down`)")
    _add_shape_arguments(up, required=True)
    up.add_argument("--json", action="store_true", help="print the testbed as JSON")
    up.set_defaults(handler=run_up)

    down = actions.add_parser("down", help="remove a testbed (or every fxc- namespace with --all)")
    down.add_argument("id", nargs="?", help="testbed id (from `testbed up` or `testbed status`)")
    down.add_argument("--id", dest="id_option", help="same as the positional id")
    down.add_argument("--all", action="store_true", help="remove every fxc- namespace and state file")
    down.set_defaults(handler=run_down)

    status = actions.add_parser("status", help="list testbeds and any stray fxc- namespaces")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=run_status)

    run = actions.add_parser(
        "run",
        help="run a command as ranks inside a testbed (--id), or in a one-shot testbed removed afterwards",
        description="Rank r runs under `ip netns exec fxc-ID-r<r>` with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR "
        "(rank 0's address), MASTER_PORT and GLOO_SOCKET_IFNAME set. Without --id, --ranks and --bandwidth make a "
        "testbed for this run only, removed however the run ends.",
    )
    run.add_argument("--id", help="an existing testbed")
    _add_shape_arguments(run, required=False)
    run.add_argument("--nproc", type=int, help="ranks to start (default: all of the testbed's)")
    run.add_argument("--backend", choices=["gloo", "nccl"], help="FLEXCOMM_BACKEND for the workers")
    run.add_argument("--timeout", default="1h", help="wall-clock limit of the run (default 1h)")
    run.add_argument("--log-dir", help="write rank r's output to DIR/rank{r}.log")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- then the worker command")
    run.set_defaults(handler=run_run)

    shape = actions.add_parser(
        "shape", help="apply a network trace to a running testbed (from now; replaces a trace in progress)",
        description="Rates change with tc on both ends of the links the trace names, latency through the "
        "delay line (the testbed must have one: made with --delay or with a --trace that has latency). Each "
        "change's time and lag is logged in the testbed's state directory (testbed-ID.trace.jsonl).")
    shape.add_argument("--id", required=True, help="a running testbed")
    _add_trace_arguments(shape, required=True)
    shape.set_defaults(handler=run_shape)

    trace = actions.add_parser("trace", help="print a built-in trace (c1, c2) as the CSV a testbed applies")
    trace.add_argument("name", help="c1 or c2 (the paper's dynamic networks, scaled)")
    trace.add_argument("--ranks", type=int, default=4, help="ranks it is checked for (default 4)")
    _add_trace_scale_arguments(trace)
    trace.set_defaults(handler=run_trace)


def _add_shape_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("--ranks", type=int, required=required, help="number of rank namespaces")
    parser.add_argument("--bandwidth", required=required, help="tc rate of every link, e.g. 100Mbit/s")
    parser.add_argument("--per-link", help="other rates for some ranks' links, e.g. 1=10Mbit/s,3=1Gbit/s")
    parser.add_argument("--delay", default="0", help="one-way delay through the middle namespace, e.g. 5ms "
                        "(a userspace delay line: the kernel has no netem)")
    _add_trace_arguments(parser, required=False)


def _add_trace_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("--trace", required=required, help="c1, c2 or a CSV (time_s, link, bandwidth, latency; "
                        "links *, nodeR, nodeR->switch, switch->nodeR) applied on schedule from now")
    _add_trace_scale_arguments(parser)


def _add_trace_scale_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace-duration", default="120s", help="length c1/c2 are scaled to (default 120s)")
    parser.add_argument("--trace-max-bandwidth", default="200Mbit/s",
                        help="rate of c1/c2's fastest phase; the others scale with it (default 200Mbit/s)")


def _load_trace(args: argparse.Namespace, ranks: int, lifetime_s: float | None = None):
    duration = parse_time(args.trace_duration, "trace-duration")
    if duration <= 0:
        raise InputError("trace-duration", args.trace_duration, "a positive time such as 120s")
    return load_trace(args.trace, ranks, duration, args.trace_max_bandwidth, lifetime_s)


def _fail(error: Exception) -> int:
    print(f"flexcomm: error: testbed: {error}", file=sys.stderr)
    return 1


def run_up(args: argparse.Namespace) -> int:
    trace = _load_trace(args, args.ranks) if args.trace else None
    try:
        testbed = Testbed.up(args.ranks, args.bandwidth, args.per_link, args.delay, keep=True, trace=trace)
    except TestbedError as error:
        return _fail(error)
    if args.json:
        print_json(testbed.to_dict())
    else:
        print(testbed.describe())
        print(f"id {testbed.id}: run ranks with `flexcomm testbed run --id {testbed.id} -- CMD`, "
              f"remove with `flexcomm testbed down {testbed.id}`")
    return 0


def run_down(args: argparse.Namespace) -> int:
    require_privileges()
    testbed_id = args.id or args.id_option
    if bool(testbed_id) == bool(args.all):
        raise InputError("down", testbed_id or "(none)", "a testbed id or --all (one of them)")
    try:
        if args.all:
            removed = down_all()
            print(f"removed {len(removed)} namespaces" + (": " + " ".join(removed) if removed else ""))
        else:
            testbed = Testbed.load(testbed_id)
            testbed.down()
            print(f"removed testbed {testbed.id}")
    except TestbedError as error:
        return _fail(error)
    return 0


def run_status(args: argparse.Namespace) -> int:
    testbeds = list_testbeds()
    namespaces = set(list_namespaces())
    known = {n for t in testbeds for n in [*t.namespaces, t.bridge_namespace]}
    stray = sorted(namespaces - known)
    if args.json:
        print_json({
            "testbeds": [{**t.to_dict(), "alive": all(n in namespaces for n in t.namespaces)} for t in testbeds],
            "stray_namespaces": stray,
        })
        return 0
    if not testbeds and not stray:
        print("no testbeds")
    for testbed in testbeds:
        alive = all(n in namespaces for n in [*testbed.namespaces, testbed.bridge_namespace])
        print(testbed.describe() + ("" if alive else "\n  (incomplete: some namespaces are gone; `testbed down` it)"))
    if stray:
        print("stray fxc- namespaces (no state file; `flexcomm testbed down --all` removes them): " + " ".join(stray))
    return 0


def run_run(args: argparse.Namespace) -> int:
    timeout = parse_time(args.timeout, "timeout")
    if timeout <= 0:
        raise InputError("timeout", args.timeout, "a positive time such as 10min")
    if args.trace and args.id:
        raise InputError("trace", args.trace, "a trace for a one-shot testbed (--ranks/--bandwidth); for --id "
                         "use `flexcomm testbed shape --id ID --trace FILE`")
    trace = _load_trace(args, args.ranks, lifetime_s=timeout) if args.trace and args.ranks else None
    launch_args = {"nproc": args.nproc, "timeout_s": timeout, "backend": args.backend, "log_dir": args.log_dir}
    try:
        with sigterm_as_exit():
            if args.id:
                if args.ranks is not None or args.bandwidth is not None:
                    raise InputError("id", args.id, "either --id or --ranks/--bandwidth, not both")
                result = Testbed.load(args.id).launch(args.command, **launch_args)
            else:
                if args.ranks is None or args.bandwidth is None:
                    raise InputError("testbed", "(none)", "--id ID, or --ranks N --bandwidth BW for a one-shot testbed")
                result = run_in_testbed(args.command, args.ranks, args.bandwidth, args.per_link, args.delay,
                                        trace=trace, **launch_args)
    except TestbedError as error:
        return _fail(error)
    return result.returncode


def run_shape(args: argparse.Namespace) -> int:
    require_privileges()
    testbed = Testbed.load(args.id)
    trace = _load_trace(args, testbed.ranks)
    try:
        testbed.apply_trace(trace)
    except TestbedError as error:
        return _fail(error)
    print(f"testbed {testbed.id}: applying {trace.name} ({len(trace.changes)} changes over {trace.duration_s:g} s, "
          f"supervisor pid {testbed.trace_pid}; log {_log_path(testbed.id)})")
    return 0


def _log_path(testbed_id: str) -> str:
    return str(trace_file(testbed_id, "jsonl"))


def run_trace(args: argparse.Namespace) -> int:
    if args.name.strip().lower() not in ("c1", "c2"):
        raise InputError("name", args.name, "c1 or c2 (a file is already a trace: pass it to --trace)")
    args.trace = args.name
    sys.stdout.write(_load_trace(args, args.ranks).csv_text)
    return 0
