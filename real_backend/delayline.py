"""A userspace delay line: adds a fixed one-way delay to every packet crossing a testbed.

Why userspace: this kernel has no ``sch_netem``, and ``tbf`` shapes rate only. Instead, the
testbed's middle namespace *routes* (instead of bridging) and policy routing sends every packet
arriving from a rank into one TUN device; this process reads each packet, holds it for the delay
and writes it back into the TUN, from where the kernel routes it out of the destination rank's
veth (through that veth's tbf). One process, one TUN, a FIFO: with a constant delay the FIFO is
already in due order.

The TUN is opened with ``IFF_VNET_HDR`` and TSO/checksum offloads when the kernel allows, so a
64 KiB TCP segment crosses as one read and one write instead of ~45: that keeps a Python loop
fast enough for 100 Mbit/s-class links (at 1 Gbit/s and more, the loop, not the link, may
become the limit; check ``busbw`` against the rate). The device disappears with the process,
taking its routes along, so nothing is left behind.

The process stops by itself when the testbed's state file is removed, when its owner process
(``owner_pid``) is gone, or on SIGTERM/SIGINT; ``Testbed.down`` also kills it.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import math
import os
import select
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend.netns import (
    BRIDGE_PORT_IF,
    TestbedError,
    process_alive,
    run_command,
    state_path,
    stop_process,
)
from flexcomm.real_backend.worker_config import config_from_argv, to_argument

TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x04
TUN_NAME = "fxdly"
ROUTE_TABLE = "213"
READ_BYTES = 65536 + 256
MAX_QUEUED_BYTES = 256 * 2**20


def open_tun(name: str = TUN_NAME, offload: bool = True) -> tuple[int, bool]:
    """Create TUN ``name`` in this process's network namespace; (fd, whether GSO offload is on)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    flags = IFF_TUN | IFF_NO_PI | (IFF_VNET_HDR if offload else 0)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), flags))
    except OSError:
        os.close(fd)
        raise
    if offload:
        try:
            fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
        except OSError:  # no offload: reopen plainly, every packet then crosses on its own
            os.close(fd)
            return open_tun(name, offload=False)
    return fd, offload


def relay(fd: int, delay_s: float, should_stop, check_every_s: float = 0.5, wake_fd: int | None = None,
          new_delay=None) -> None:
    """Read packets from ``fd`` and write each back ``delay_s`` later, until ``should_stop()``.

    ``wake_fd`` (the read end of a signal wake-up pipe) interrupts the wait; ``new_delay()`` then gives the
    delay for packets arriving from now on (None: unchanged). Packets already held keep their due time, and
    the line stays a FIFO, so a shorter delay never reorders packets."""
    queue: collections.deque[tuple[float, bytes]] = collections.deque()
    queued = 0
    next_check = time.monotonic() + check_every_s
    watched = [fd] if wake_fd is None else [fd, wake_fd]
    while True:
        now = time.monotonic()
        if now >= next_check:
            if should_stop():
                return
            next_check = now + check_every_s
        wait = min(next_check - now, queue[0][0] - now if queue else check_every_s)
        readable, _, _ = select.select(watched, [], [], max(0.0, wait))
        if wake_fd is not None and wake_fd in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_fd, 512)
            changed = new_delay() if new_delay is not None else None
            if changed is not None:
                delay_s = changed
            if should_stop():
                return
        if fd in readable:
            arrived = time.monotonic()
            while True:
                try:
                    packet = os.read(fd, READ_BYTES)
                except BlockingIOError:
                    break
                if queued + len(packet) > MAX_QUEUED_BYTES:
                    continue  # a full line drops, as a router's queue would
                queue.append((arrived + delay_s, packet))
                queued += len(packet)
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, packet = queue.popleft()
            queued -= len(packet)
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(fd, packet)


@dataclass(frozen=True, kw_only=True)
class DelayLineConfig:
    """The delay line's options, as one JSON argument (:mod:`real_backend.worker_config`) from
    :func:`start_delay_line`."""

    delay_s: float  #: one-way delay
    name: str = TUN_NAME  #: the TUN device
    state_file: str | None = None  #: stop when this file is removed
    owner_pid: int | None = None  #: stop when this process is gone
    control_file: str | None = None  #: on SIGUSR1, read the new delay (seconds) from this file

    def __post_init__(self) -> None:
        if isinstance(self.delay_s, bool) or not isinstance(self.delay_s, (int, float)) or not (
                math.isfinite(self.delay_s) and self.delay_s >= 0):
            raise InputError("delay", self.delay_s, "seconds >= 0")


def main(config: DelayLineConfig) -> int:
    """Run inside the middle namespace (``ip netns exec NS python -m flexcomm.real_backend.delayline '<JSON>'``)."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    signal.signal(signal.SIGUSR1, lambda *_: None)  # only wakes the loop through the pipe below
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    control = Path(config.control_file) if config.control_file else None

    def new_delay() -> float | None:
        if control is None:
            return None
        try:
            return max(0.0, float(control.read_text().strip()))
        except (OSError, ValueError):
            return None

    fd, offload = open_tun(config.name)
    subprocess.run(["ip", "link", "set", config.name, "up"], check=True)
    print(json.dumps({"ready": True, "pid": os.getpid(), "offload": offload}), flush=True)
    state = Path(config.state_file) if config.state_file else None

    def should_stop() -> bool:
        return bool(stopping) or (state is not None and not state.exists()) or (
            config.owner_pid is not None and not process_alive(config.owner_pid))

    try:
        relay(fd, config.delay_s, should_stop, wake_fd=wake_r, new_delay=new_delay)
    finally:
        os.close(fd)
    return 0


# --- wiring it into a testbed -----------------------------------------------------------------


def _ip(*argv: str) -> None:
    run_command(["ip", *argv])


def _mac(namespace: str, device: str) -> str:
    return json.loads(run_command(["ip", "-n", namespace, "-j", "link", "show", "dev", device]).stdout)[0]["address"]


def set_sysctl(namespace: str, assignments: dict[str, str]) -> None:
    script = "; ".join(f"echo {value} > /proc/sys/{key.replace('.', '/')}" for key, value in assignments.items())
    run_command(["ip", "netns", "exec", namespace, "sh", "-c", script])


def setup_routed_core(testbed) -> None:
    """Make the middle namespace a router whose every forwarded packet goes through the TUN.

    Static neighbours everywhere (each rank reaches every peer through the router's port MAC, the
    router each rank through its MAC), so no ARP is needed across a router that has no addresses.
    """
    core = testbed.bridge_namespace
    ports = [BRIDGE_PORT_IF.format(r) for r in range(testbed.ranks)]
    settings = {"net.ipv4.ip_forward": "1", "net.ipv4.conf.all.rp_filter": "0",
                "net.ipv4.conf.default.rp_filter": "0", "net.ipv4.conf.all.send_redirects": "0"}
    settings.update({f"net.ipv4.conf.{port}.rp_filter": "0" for port in ports})
    set_sysctl(core, settings)
    for r, (namespace, inside, port) in enumerate(zip(testbed.namespaces, testbed.interfaces, ports, strict=True)):
        rank_mac, port_mac = _mac(namespace, inside), _mac(core, port)
        _ip("-n", core, "neigh", "replace", testbed.addresses[r], "lladdr", rank_mac, "dev", port, "nud", "permanent")
        _ip("-n", core, "route", "add", f"{testbed.addresses[r]}/32", "dev", port)
        _ip("-n", core, "rule", "add", "iif", port, "lookup", ROUTE_TABLE)
        for peer, address in enumerate(testbed.addresses):
            if peer != r:
                _ip("-n", namespace, "neigh", "replace", address, "lladdr", port_mac, "dev", inside, "nud", "permanent")


def start_delay_line(testbed, owner_pid: int | None = None, timeout_s: float = 20.0) -> int:
    """Start the delay line in the middle namespace, route through it, and return its pid.

    Its stderr goes to ``<state dir>/testbed-ID.delayline.log`` (removed with the testbed).
    """
    state = state_path(testbed.id)
    log_path = state.with_suffix(".delayline.log")
    config = DelayLineConfig(delay_s=float(testbed.delay_s), state_file=str(state),
                             control_file=str(delay_control_path(testbed.id)), owner_pid=owner_pid)
    cmd = ["ip", "netns", "exec", testbed.bridge_namespace, sys.executable, "-m", "flexcomm.real_backend.delayline",
           to_argument(config)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    proc.stdout.close()  # it prints nothing after the ready line
    if not line.startswith("{"):
        proc.kill()
        proc.wait(timeout=5)
        err = log_path.read_text(errors="replace").strip().splitlines()
        raise TestbedError(f"the delay line did not start: {err[-1] if err else 'no ready line'}")
    _ip("-n", testbed.bridge_namespace, "route", "add", "default", "dev", TUN_NAME, "table", ROUTE_TABLE)
    _STARTED[proc.pid] = proc
    return proc.pid


def delay_control_path(testbed_id: str) -> Path:
    """The file a running delay line reads its new delay from when it gets SIGUSR1."""
    return state_path(testbed_id).with_suffix(".delay")


def set_delay(testbed, delay_s: float) -> None:
    """Change a running testbed's one-way delay (the delay line's) now."""
    if not testbed.delay_pid:
        raise TestbedError(f"testbed {testbed.id} has no delay line (made without a delay): latency cannot change")
    path = delay_control_path(testbed.id)
    path.write_text(repr(float(delay_s)), encoding="utf-8")
    os.kill(testbed.delay_pid, signal.SIGUSR1)


#: Delay lines started by this process, so stopping one also reaps it (no zombie left behind).
_STARTED: dict[int, subprocess.Popen] = {}


def stop_delay_line(pid: int) -> None:
    """SIGKILL the delay line ``pid`` (it holds nothing that needs a graceful stop) and reap it if ours."""
    stop_process(pid, _STARTED)


if __name__ == "__main__":
    sys.exit(main(config_from_argv(DelayLineConfig, "flexcomm delay line")))
