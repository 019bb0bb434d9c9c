"""A shaped-network testbed on one Linux host: N network namespaces joined by rate-limited links.

Loopback timings on a small machine are noise (run-to-run medians differ by 15-46%); a link
shaped well below what the CPUs can move makes the network the bottleneck again, and timings
then land within a few percent of the cost model. Layout, for testbed ``ID`` (6 hex digits)::

    fxc-ID-r0 [fxr0 10.213.X.1/24] ==veth== [fxp0]-+
    fxc-ID-r1 [fxr1 10.213.X.2/24] ==veth== [fxp1]-+- bridge fxbr in namespace fxc-ID-br
    ...

* Every name starts with :data:`PREFIX`; nothing is created in the host's own namespace, and the
  private addresses exist only inside these namespaces, so no traffic can leave the testbed.
* ``tc tbf`` (rate R, burst max(R/250, 64 KiB), latency 100 ms) on **both** ends of every veth:
  the rank's end shapes what it sends, the bridge's end what it receives (so incast is shaped too).
* Goodput through tbf is ~:data:`GOODPUT_FACTOR` x the rate (TCP/IP headers: 1448 of 1514 bytes
  per frame); :attr:`Testbed.effective_bandwidth_Bps` is that B to price the cost model with.
* One-way delay (``delay_s``): the kernel here has no netem, so it is a userspace delay line
  (:mod:`real_backend.delayline`): the middle namespace then routes instead of bridging, sending
  every packet through a TUN device where one process holds it for the delay.
* The state (every name made) is written to ``STATE_DIR/testbed-ID.json`` *before* anything is
  created, so :meth:`Testbed.down` (and ``flexcomm testbed down``) removes exactly what ``up``
  made, even after a half-finished ``up``; :func:`down_all` removes every ``fxc-`` namespace.
  A testbed made from Python is also removed at interpreter exit unless ``keep=True``.

Ranks run inside with ``ip netns exec`` (:meth:`Testbed.launch`), with ``MASTER_ADDR`` = rank 0's
address and ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` = the rank's veth.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_bandwidth, format_time, parse_bandwidth, parse_time
from flexcomm.real_backend.delayline import set_sysctl, setup_routed_core, start_delay_line, stop_delay_line
from flexcomm.real_backend.launch import launch, resolve_command
from flexcomm.real_backend.netns import (
    BRIDGE_IF,
    BRIDGE_PORT_IF,
    RANK_IF,
    TestbedError,
    run_command,
    state_dir,
    state_path,
)
from flexcomm.real_backend.trace_control import start_supervisor, stop_supervisor

PREFIX = "fxc-"
FORMAT = "flexcomm-testbed/1"
#: TCP goodput over a tbf-shaped veth, as a fraction of the tc rate, from the headers alone (nothing fitted): a
#: full frame of 1514 bytes as tbf counts it (14 Ethernet + 20 IPv4 + 20 TCP + 12 timestamp option, RFC 7323)
#: carries 1448 payload bytes. The testbed's own measurements (0.956-0.97) agree with it; it is not fitted to them.
GOODPUT_FACTOR = 1448 / 1514
#: The smallest tbf bucket of a fast testbed: measured full rate at 100 Mbit/s and 1 Gbit/s (see burst_bytes).
MIN_BURST_BYTES = 64 * 1024
#: Testbeds no faster than this get small tbf buckets (:func:`burst_bytes`): 20 Mbit/s, where 4 ms of
#: traffic is 10 KB, well under the 64 KiB floor fast links need.
SMALL_BURST_MAX_RATE_BPS = 2.5e6
#: The smallest bucket of a slow testbed: four full 1514-byte frames (see burst_bytes).
SMALL_BURST_MIN_BYTES = 4 * 1514
#: tbf's queue, as time at the rate (``latency 100ms``, as the module doc's tc line has it).
TBF_QUEUE_S = 0.1
#: The largest packet tbf sees: veths pass 64 KiB GSO segments whole, and a tbf whose byte limit is
#: smaller drops every one of them (a 4 Mbit/s link with a 100 ms queue stalled TCP for good, measured).
GSO_MAX_BYTES = 65536
MAX_RANKS = 250
_ID_RE = re.compile(r"^[0-9a-f]{6}$")
#: Files beside a testbed's state file, removed with it: the delay line's log and control, the trace's.
_EXTRA_FILES = (".delayline.log", ".delay", ".trace.csv", ".trace.start", ".trace.ack", ".trace.log", ".trace.jsonl")
#: ``ip netns exec NS`` bind-mounts the files in /etc/netns/NS over /etc: a hosts file there names
#: every testbed address, so reverse lookups (torch's c10d does them) are answered locally and
#: no DNS query is even attempted from inside the testbed.
NETNS_ETC = Path("/etc/netns")


def require_privileges() -> None:
    """Raise a one-line :class:`InputError` unless we are root with ``ip`` and ``tc`` available."""
    if os.geteuid() != 0:
        raise InputError("testbed", f"uid {os.geteuid()}",
                         "root: network namespaces and tc need CAP_NET_ADMIN (run it with sudo)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise InputError("testbed", f"{tool} not found", "iproute2's ip and tc on PATH (apt install iproute2)")
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise InputError("testbed", "`ip netns` unavailable", f"network namespace support ({probe.stderr.strip()})")


def trace_max_rate(trace: Any) -> float:
    """The fastest rate a :class:`real_backend.net_trace.TestbedTrace` sets on any link."""
    return max((r for change in trace.changes for _, _, r in change.rates), default=0.0)


def burst_rate_for(top_rate_Bps: float) -> float:
    """The rate a testbed whose fastest link (or trace phase) is ``top_rate_Bps`` sizes its buckets for:
    itself when it is slow (:data:`SMALL_BURST_MAX_RATE_BPS`; small buckets, fixed for the testbed's life),
    else 0 (each rate sizes its own bucket, :func:`burst_bytes`)."""
    return float(top_rate_Bps) if 0 < top_rate_Bps <= SMALL_BURST_MAX_RATE_BPS else 0.0


def burst_bytes(rate_Bps: float, burst_rate_Bps: float = 0.0) -> int:
    """tbf bucket size.

    Fast testbeds (``burst_rate_Bps`` 0): at least rate/250 (4 ms of traffic at full rate) and 64 KiB, which
    measured full rate at 100 Mbit/s and 1 Gbit/s (a smaller bucket throttles TCP below the rate there).
    Never under one GSO segment either way: a trace lowers the rate of a live tbf, and a queued segment
    larger than the new bucket can never be sent (measured: a 40 -> 4 Mbit/s change with an 8 KB bucket
    stalled TCP for good).

    Slow testbeds (``burst_rate_Bps`` their fastest rate, :func:`burst_rate_for`): 4 ms of traffic at that
    rate, at least four 1514-byte frames, the same at every rate the testbed takes. At 10 Mbit/s a 64 KiB
    bucket is 52 ms of free line rate, more than a Top-k exchange there sends, and the link stops being a
    link: measured with 3 ranks at 10 Mbit/s, Top-k's allgather and allreduce took 31 % below what the
    bytes at the rate allow with 64 KiB and 10 % above with 6 KB, the ratio between the two schemes as
    the link model has it (1.19). tbf cuts a GSO segment larger than its bucket into frames on enqueue,
    and a bucket that never shrinks strands none."""
    if burst_rate_Bps > 0:
        return int(max(burst_rate_Bps / 250.0, SMALL_BURST_MIN_BYTES))
    return int(max(rate_Bps / 250.0, MIN_BURST_BYTES))


def tbf_arguments(rate_Bps: float, burst_rate_Bps: float = 0.0) -> list[str]:
    """``tbf rate R burst B limit L``: a queue of :data:`TBF_QUEUE_S` at the rate, but never less than three
    GSO segments (else a slow link drops every full-size segment and TCP stalls)."""
    burst = burst_bytes(rate_Bps, burst_rate_Bps)
    limit = int(max(rate_Bps * TBF_QUEUE_S, 3 * GSO_MAX_BYTES)) + burst
    return ["tbf", "rate", f"{int(round(rate_Bps * 8))}bit", "burst", str(burst), "limit", str(limit)]


def parse_per_link(spec: str | Mapping[int, object] | None, ranks: int) -> dict[int, float]:
    """``"1=10Mbit/s,3=1Gbit/s"`` (or a mapping) -> {rank: bytes/s}, validated against ``ranks``."""
    if not spec:
        return {}
    items = spec.items() if isinstance(spec, Mapping) else (
        tuple(part.split("=", 1)) if "=" in part else (part, None) for part in str(spec).split(",") if part.strip()
    )
    result: dict[int, float] = {}
    for key, value in items:
        try:
            rank = int(str(key).strip())
        except ValueError:
            raise InputError("per-link", spec, "RANK=BANDWIDTH pairs such as 1=10Mbit/s,2=1Gbit/s") from None
        if value is None:
            raise InputError("per-link", spec, "RANK=BANDWIDTH pairs such as 1=10Mbit/s,2=1Gbit/s")
        if not 0 <= rank < ranks:
            raise InputError("per-link", rank, f"a rank 0..{ranks - 1}")
        result[rank] = parse_bandwidth(value if not isinstance(value, str) else value.strip(), f"per-link[{rank}]")
    return result


def _new_id() -> str:
    existing = set(list_namespaces())
    for _ in range(100):
        candidate = secrets.token_hex(3)
        taken = any(name.startswith(f"{PREFIX}{candidate}-") for name in existing)
        if not taken and not state_path(candidate).exists():
            return candidate
    raise TestbedError("could not find an unused testbed id")


def list_namespaces() -> list[str]:
    """Names of the flexcomm (``fxc-``) network namespaces that exist now."""
    if shutil.which("ip") is None:
        return []
    proc = run_command(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(PREFIX))


def _kill_namespace_processes(namespace: str) -> None:
    """SIGKILL everything still running inside ``namespace`` (a namespace lives on while they do)."""
    proc = run_command(["ip", "netns", "pids", namespace], check=False)
    for token in proc.stdout.split():
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.kill(int(token), signal.SIGKILL)


def _remove_empty_dir(path: Path) -> None:
    """rmdir ``path`` if nothing is left in it (up may have created it; others' files stay)."""
    with contextlib.suppress(OSError):
        path.rmdir()


def _delete_namespace(namespace: str) -> str | None:
    """Delete one namespace (killing its processes first); the error text, or None on success."""
    _kill_namespace_processes(namespace)
    proc = run_command(["ip", "netns", "del", namespace], check=False)
    if proc.returncode != 0 and namespace in list_namespaces():
        return proc.stderr.strip() or f"exit {proc.returncode}"
    return None


@dataclass
class Testbed:
    """One shaped testbed: its names, addresses and rates, as recorded in its state file."""

    __test__ = False  # not a pytest test class, despite the name

    id: str
    ranks: int
    bandwidth_Bps: float
    per_link: dict[int, float] = field(default_factory=dict)
    delay_s: float = 0.0
    subnet: str = ""
    bridge_namespace: str = ""
    namespaces: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    created: str = ""
    owner_pid: int = 0
    delay_pid: int | None = None
    delay_line: bool = False  #: routed through the delay line even at zero delay (a trace changes it later)
    trace_pid: int | None = None
    trace_name: str = ""
    #: the rate the tbf buckets are sized for (:func:`burst_rate_for`; 0: each rate its own bucket)
    burst_rate_Bps: float = 0.0

    # --- construction -------------------------------------------------------------------------

    @classmethod
    def plan(cls, ranks: int, bandwidth: str | float, per_link: str | Mapping[int, object] | None = None,
             delay: str | float = 0.0, testbed_id: str | None = None) -> Testbed:
        """Validate the request and name everything, creating nothing yet."""
        if not isinstance(ranks, int) or isinstance(ranks, bool) or not 1 <= ranks <= MAX_RANKS:
            raise InputError("ranks", ranks, f"an integer 1..{MAX_RANKS}")
        rate = parse_bandwidth(bandwidth, "bandwidth")
        links = parse_per_link(per_link, ranks)
        delay_s = parse_time(delay, "delay")
        if delay_s > 1.0:
            raise InputError("delay", delay, "a one-way delay of at most 1s")
        tid = testbed_id or _new_id()
        if not _ID_RE.match(tid):
            raise InputError("id", tid, "6 lowercase hex digits")
        octet = int(tid[:2], 16)
        return cls(
            id=tid,
            ranks=ranks,
            bandwidth_Bps=rate,
            per_link=links,
            delay_s=delay_s,
            subnet=f"10.213.{octet}.0/24",
            bridge_namespace=f"{PREFIX}{tid}-br",
            namespaces=[f"{PREFIX}{tid}-r{r}" for r in range(ranks)],
            addresses=[f"10.213.{octet}.{r + 1}" for r in range(ranks)],
            interfaces=[RANK_IF.format(r) for r in range(ranks)],
        )

    @classmethod
    def up(cls, ranks: int, bandwidth: str | float, per_link: str | Mapping[int, object] | None = None,
           delay: str | float = 0.0, keep: bool = False, trace: Any = None, trace_repeat: bool = False) -> Testbed:
        """Create a testbed; removed at interpreter exit unless ``keep`` (the CLI's ``testbed up``).

        ``trace`` (a :class:`real_backend.net_trace.TestbedTrace`) starts a supervisor applying it from
        now (``trace_repeat``: it waits for :func:`trace_control.request_start` instead, once per run).
        Use it as a context manager to remove it as soon as the block ends, however it ends.
        """
        require_privileges()
        testbed = cls.plan(ranks, bandwidth, per_link, delay)
        top = max(testbed.link_rate_Bps(r) for r in range(ranks))
        if trace is not None:
            testbed.check_trace(trace)
            testbed.delay_line = trace.has_latency
            top = max(top, trace_max_rate(trace))
        testbed.burst_rate_Bps = burst_rate_for(top)
        testbed.created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        testbed.owner_pid = os.getpid()
        testbed.save()  # first, so a failure half-way can still be cleaned up by id
        if not keep:
            atexit.register(testbed._down_at_exit)
        try:
            testbed._create(owner_pid=None if keep else os.getpid())
            testbed.save()
            if trace is not None:
                testbed.apply_trace(trace, repeat=trace_repeat, owner_pid=None if keep else os.getpid())
        except BaseException:
            testbed.down()
            raise
        testbed.save()
        return testbed

    def check_trace(self, trace: Any) -> None:
        """Refuse a trace naming ranks this testbed lacks (one line naming the trace's line)."""
        for change in trace.changes:
            for rank, _, _ in change.rates:
                if rank >= self.ranks:
                    raise InputError(f"link ({trace.name} line {change.line})", f"node{rank}",
                                     f"a link of one of the testbed's ranks 0..{self.ranks - 1}")

    def apply_trace(self, trace: Any, repeat: bool = False, owner_pid: int | None = None) -> None:
        """Start applying ``trace`` now (replacing a trace in progress); see :mod:`real_backend.trace_supervisor`."""
        missing = [n for n in [*self.namespaces, self.bridge_namespace] if n not in set(list_namespaces())]
        if missing:
            raise InputError("testbed", self.id, f"a running testbed (namespaces gone: {', '.join(missing)}; "
                             "`flexcomm testbed status`)")
        self.check_trace(trace)
        if self.burst_rate_Bps > 0 and trace_max_rate(trace) > self.burst_rate_Bps:
            raise InputError(f"bandwidth ({trace.name})", format_bandwidth(trace_max_rate(trace)),
                             f"rates up to {format_bandwidth(self.burst_rate_Bps)}, the fastest this slow testbed's "
                             "tbf buckets are sized for: make a new testbed for faster ones")
        if trace.has_latency and not self.delay_pid:
            raise InputError(f"latency ({trace.name})", "a latency change", "a testbed with a delay line: make it "
                             "with --delay or with this --trace (`testbed up --trace`), or drop the latency column")
        if self.trace_pid:
            stop_supervisor(self.trace_pid)
            self.trace_pid = None
        self.trace_name = trace.name
        self.trace_pid = start_supervisor(self, trace, repeat=repeat, owner_pid=owner_pid, start_now=not repeat)
        self.save()

    def link_rate_Bps(self, rank: int) -> float:
        """tc rate of ``rank``'s link (both directions)."""
        return self.per_link.get(rank, self.bandwidth_Bps)

    @property
    def effective_bandwidth_Bps(self) -> float:
        """TCP goodput B of the slowest link: what to price the cost model's beta with."""
        return GOODPUT_FACTOR * min(self.link_rate_Bps(r) for r in range(self.ranks))

    def _create(self, owner_pid: int | None = None) -> None:
        br = self.bridge_namespace
        hosts = self._hosts_file()
        for namespace in [br, *self.namespaces]:
            run_command(["ip", "netns", "add", namespace])
            run_command(["ip", "-n", namespace, "link", "set", "lo", "up"])
            if namespace != br:  # steps leave links idle between bursts: keep the window (RFC 2861 off)
                set_sysctl(namespace, {"net.ipv4.tcp_slow_start_after_idle": "0"})
            (NETNS_ETC / namespace).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / namespace / "hosts").write_text(hosts, encoding="utf-8")
        routed = self.delay_s > 0 or self.delay_line
        if not routed:
            run_command(["ip", "-n", br, "link", "add", BRIDGE_IF, "type", "bridge"])
            run_command(["ip", "-n", br, "link", "set", BRIDGE_IF, "up"])
        for r, namespace in enumerate(self.namespaces):
            inside, port = self.interfaces[r], BRIDGE_PORT_IF.format(r)
            run_command(["ip", "-n", br, "link", "add", port, "type", "veth", "peer", "name", inside,
                         "netns", namespace])
            run_command(["ip", "-n", namespace, "addr", "add", f"{self.addresses[r]}/24", "dev", inside])
            run_command(["ip", "-n", namespace, "link", "set", inside, "up"])
            if routed:
                run_command(["ip", "-n", br, "link", "set", port, "up"])
            else:
                run_command(["ip", "-n", br, "link", "set", port, "master", BRIDGE_IF, "up"])
            rate = self.link_rate_Bps(r)
            for ns, dev in ((namespace, inside), (br, port)):
                run_command(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root",
                             *tbf_arguments(rate, self.burst_rate_Bps)])
        if routed:
            setup_routed_core(self)
            self.delay_pid = start_delay_line(self, owner_pid)

    def _hosts_file(self) -> str:
        try:
            base = Path("/etc/hosts").read_text(encoding="utf-8")
        except OSError:
            base = "127.0.0.1 localhost\n"
        # The v4-mapped form too: c10d's store listens dual-stack and looks peers up as ::ffff:a.b.c.d.
        pairs = zip(self.addresses, self.namespaces, strict=True)
        lines = [f"{prefix}{address} {namespace}" for address, namespace in pairs for prefix in ("", "::ffff:")]
        return base.rstrip("\n") + "\n# flexcomm testbed " + self.id + "\n" + "\n".join(lines) + "\n"

    # --- persistence --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, object]:
        document = asdict(self)
        document["per_link"] = {str(k): v for k, v in self.per_link.items()}
        return {"format": FORMAT, **document}

    def save(self) -> Path:
        path = state_path(self.id)
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, testbed_id: str) -> Testbed:
        """The testbed ``testbed_id`` from its state file (InputError naming what exists if absent)."""
        tid = str(testbed_id).strip()
        if tid.startswith(PREFIX):  # accept a namespace name too
            tid = tid[len(PREFIX):].split("-")[0]
        path = state_path(tid)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            known = ", ".join(t.id for t in list_testbeds()) or "none"
            raise InputError("testbed", testbed_id, f"the id of a running testbed ({known})") from None
        except json.JSONDecodeError as exc:
            raise InputError("testbed", str(path), f"a valid state file ({exc})") from None
        if not isinstance(document, dict) or document.pop("format", None) != FORMAT:
            raise InputError("testbed", str(path), f"a {FORMAT} state file")
        document["per_link"] = {int(k): float(v) for k, v in document.get("per_link", {}).items()}
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in document.items() if k in names})

    # --- teardown -----------------------------------------------------------------------------

    def down(self) -> None:
        """Remove every namespace (and so every veth, bridge and qdisc) this testbed made, and its state.

        Idempotent; a name already gone is fine. Raises :class:`TestbedError` if one survives.
        """
        if self.trace_pid:

            stop_supervisor(self.trace_pid)
        if self.delay_pid:
            stop_delay_line(self.delay_pid)
        errors = []
        existing = set(list_namespaces())
        for namespace in [*self.namespaces, self.bridge_namespace]:
            if namespace and namespace in existing:
                error = _delete_namespace(namespace)
                if error:
                    errors.append(f"{namespace}: {error}")
            if namespace:
                shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)
        _remove_empty_dir(NETNS_ETC)
        state_path(self.id).unlink(missing_ok=True)
        for suffix in _EXTRA_FILES:
            state_path(self.id).with_suffix(suffix).unlink(missing_ok=True)
        if errors:
            raise TestbedError("could not remove " + "; ".join(errors))

    def _down_at_exit(self) -> None:
        if os.getpid() == self.owner_pid:  # not in a forked child
            with contextlib.suppress(Exception):
                self.down()

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()
        atexit.unregister(self._down_at_exit)

    # --- running inside -----------------------------------------------------------------------

    def exec_prefix(self, rank: int) -> list[str]:
        """``ip netns exec`` prefix running a command as ``rank``."""
        return ["ip", "netns", "exec", self.namespaces[rank]]

    def rank_env(self, rank: int) -> dict[str, str]:
        """Per-rank environment: which interface gloo/NCCL must use, and where the testbed is."""
        return {
            "GLOO_SOCKET_IFNAME": self.interfaces[rank],
            "NCCL_SOCKET_IFNAME": self.interfaces[rank],
            "FLEXCOMM_TESTBED": self.id,
        }

    def launch(self, command: Sequence[str], env: Mapping[str, str] | None = None, nproc: int | None = None,
               timeout_s: float | None = None, backend: str | None = None, log_dir: str | Path | None = None,
               grace_s: float = 0.0, dist_timeout_s: float | None = None):  # -> LaunchResult
        """Run ``command`` as ``nproc`` (default: all) ranks, rank r inside namespace r."""
        count = self.ranks if nproc is None else nproc
        if not isinstance(count, int) or not 1 <= count <= self.ranks:
            raise InputError("nproc", nproc, f"1..{self.ranks} (the testbed's ranks)")
        missing = [n for n in self.namespaces[:count] if n not in set(list_namespaces())]
        if missing:
            raise InputError("testbed", self.id, f"a testbed whose namespaces exist (missing {', '.join(missing)})")
        # The namespaces are private, so any port is free there; a random one keeps two runs
        # on the same testbed from colliding.
        port = random.randint(20000, 40000)
        result = launch(command, count, backend=backend, timeout_s=timeout_s, master_addr=self.addresses[0],
                        master_port=port, env=env, rank_prefix=self.exec_prefix, rank_env=self.rank_env,
                        dist_timeout_s=dist_timeout_s, log_dir=log_dir, grace_s=grace_s)
        result.testbed = self.id
        return result

    def describe(self) -> str:
        """One line per rank: namespace, address, interface, rate."""
        lines = [f"testbed {self.id}: {self.ranks} ranks, {format_bandwidth(self.bandwidth_Bps)}"
                 + (f", one-way delay {format_time(self.delay_s)}" if self.delay_s else "")
                 + (f", trace {self.trace_name} (supervisor pid {self.trace_pid})" if self.trace_pid else "")
                 + f", subnet {self.subnet}, middle namespace {self.bridge_namespace}"]
        for r in range(self.ranks):
            lines.append(f"  rank {r}: {self.namespaces[r]} {self.addresses[r]} dev {self.interfaces[r]} "
                         f"{format_bandwidth(self.link_rate_Bps(r))} "
                         f"(burst {burst_bytes(self.link_rate_Bps(r), self.burst_rate_Bps)} B)")
        return "\n".join(lines)


def list_testbeds() -> list[Testbed]:
    """Every testbed with a state file (running or half-removed)."""
    found = []
    directory = state_dir()
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("testbed-*.json")):
        with contextlib.suppress(InputError, TypeError, ValueError):
            found.append(Testbed.load(path.stem.removeprefix("testbed-")))
    return found


def down_all() -> list[str]:
    """Remove every ``fxc-`` namespace and every state file; the namespaces removed."""
    for testbed in list_testbeds():
        if testbed.trace_pid:

            stop_supervisor(testbed.trace_pid)
        if testbed.delay_pid:
            stop_delay_line(testbed.delay_pid)
    removed, errors = [], []
    for namespace in list_namespaces():
        error = _delete_namespace(namespace)
        (errors.append(f"{namespace}: {error}") if error else removed.append(namespace))
    for leftover in NETNS_ETC.glob(f"{PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    _remove_empty_dir(NETNS_ETC)
    directory = state_dir()
    if directory.is_dir():
        for path in [*directory.glob("testbed-*.json"),
                     *(p for suffix in _EXTRA_FILES for p in directory.glob(f"testbed-*{suffix}"))]:
            path.unlink(missing_ok=True)
    if errors:
        raise TestbedError("could not remove " + "; ".join(errors))
    return removed


def run_in_testbed(command: Sequence[str], ranks: int, bandwidth: str | float,
                   per_link: str | Mapping[int, object] | None = None, delay: str | float = 0.0,
                   trace: Any = None, **launch_args: object):  # -> LaunchResult
    """Create a testbed, run ``command`` in it, and remove it whatever happens (the one-shot form)."""
    resolve_command(command)  # bad commands are refused before anything is built
    with Testbed.up(ranks, bandwidth, per_link, delay, trace=trace) as testbed:
        print(testbed.describe(), file=sys.stderr, flush=True)
        started = time.monotonic()
        result = testbed.launch(command, **launch_args)  # type: ignore[arg-type]
        result.elapsed_s = time.monotonic() - started
        return result
