"""SimGrid as referee: the same platform and the same flows run in SimGrid's flow-level model (CM02).

Why: a simulator that only agrees with its own cost model proves little. SimGrid (Casanova et al.) is the
field's reference flow-level simulator, with a network model validated for two decades. Here a flexcomm
:class:`~sim.network.Network` is rebuilt in SimGrid link for link: one SimGrid host per rank, one SimGrid
link per link resource (each direction of a full-duplex cable its own link, a half-duplex cable one shared
link, each device port a link) with the same bandwidth and latency, and for every flow the very route
flexcomm gives it (its first path; ECMP-split routes have no SimGrid equivalent). SimGrid runs with
``network/model:CM02`` (max-min sharing weighted by route latency, latency paid before the bytes move),
cross-traffic off and the TCP window bound (``network/TCP-gamma``) off, so the one model difference left
is the one flexcomm can match with ``sharing="rtt"`` and ``coupling="flow"``.

SimGrid's Python bindings come from Debian's ``python3-simgrid`` (``apt-get install python3-simgrid``);
:func:`load_simgrid` finds them in the system's dist-packages and says what is missing otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.processes import die_with_parent
from flexcomm.sim.network import Network

#: Where Debian's python3-simgrid installs the module (outside a virtual environment's path).
DEBIAN_DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
INSTALL_HINT = "SimGrid's Python bindings are not installed: as root run apt-get install python3-simgrid"


class SimgridMissing(RuntimeError):
    """SimGrid's Python module cannot be imported (the message says how to install it)."""


def load_simgrid() -> ModuleType:
    """The ``simgrid`` module, from the environment or from Debian's dist-packages."""
    try:
        import simgrid  # type: ignore[import-not-found]

        return simgrid
    except ImportError:
        pass
    candidate = DEBIAN_DIST_PACKAGES / f"simgrid.cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-" \
                                       "linux-gnu.so"
    if not candidate.exists():
        raise SimgridMissing(INSTALL_HINT)
    if str(DEBIAN_DIST_PACKAGES) not in sys.path:
        sys.path.append(str(DEBIAN_DIST_PACKAGES))
    try:
        import simgrid  # type: ignore[import-not-found]
    except ImportError as exc:  # built for another Python
        raise SimgridMissing(f"{INSTALL_HINT} ({exc})") from None
    return simgrid


@dataclass(frozen=True)
class Flow:
    """One flow for the referee: ranks, bytes, start time (s) and step. Flows of step k + 1 of the same
    ``job`` start when every flow of its step k has ended (a collective's synchronous steps); ``start`` is
    when the job's step 0 begins."""

    src: int
    dst: int
    nbytes: float
    start: float = 0.0
    step: int = 0
    job: str = ""


def _steps(flows: Sequence[Flow]) -> dict[str, list[list[int]]]:
    """Flow indices per job, grouped by step in order."""
    jobs: dict[str, dict[int, list[int]]] = {}
    for i, f in enumerate(flows):
        jobs.setdefault(f.job, {}).setdefault(f.step, []).append(i)
    return {job: [steps[k] for k in sorted(steps)] for job, steps in jobs.items()}


def run_flexcomm(cluster: object, flows: Sequence[Flow], sharing: str = "rtt", coupling: str = "flow") -> np.ndarray:
    """Completion time of every flow in flexcomm's simulator, with the referee's start and step semantics."""
    import simpy


    env = simpy.Environment()
    net = Network(env, cluster, sharing=sharing, coupling=coupling)
    ends = np.full(len(flows), np.nan)

    def job(steps: list[list[int]]) -> object:
        first = flows[steps[0][0]].start
        if first > env.now:
            yield env.timeout(first - env.now)
        for members in steps:
            pairs = np.array([(flows[i].src, flows[i].dst) for i in members], dtype=np.int64)
            records = yield net.send(pairs, np.array([flows[i].nbytes for i in members]))
            for i, record in zip(members, records, strict=True):
                ends[i] = record.end

    for steps in _steps(flows).values():
        env.process(job(steps))
    env.run()
    return ends


def run_simgrid(network: object, flows: Sequence[Flow], optim: str = "Full") -> np.ndarray:
    """Completion time (s) of every flow when SimGrid runs them on ``network``'s platform and routes.

    ``network`` is a :class:`~sim.network.Network` (its links, capacities and routes are read, nothing runs
    on it). ``optim="Full"`` recomputes every rate at every event (SimGrid's exact mode); its default
    ``Lazy`` mode is faster but was seen to hand out more than a link's capacity when flows of different
    route latencies share links (three flows on a 4x4 torus: two of them ended 16-20 % early, one 33 %
    late; Full agrees with flexcomm to 1e-8). Each SimGrid run is a fresh engine in this process: SimGrid
    allows one engine per process, so call this from a child process when a test runs several
    (:func:`run_simgrid_isolated`).
    """
    sg = load_simgrid()
    net = network
    if net.fabric.routing == "ecmp-split" and any(len(net.fabric.paths(*p)) > 1 for p in _endpoint_pairs(net, flows)):
        raise InputError("routing", "ecmp-split", "single-path routes (SimGrid cannot split a flow over paths)")
    engine = sg.Engine(["flexcomm-referee", "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                        "--cfg=network/TCP-gamma:0", f"--cfg=network/optim:{optim}", "--log=root.thres:critical"])
    zone = sg.NetZone.create_full_zone("flexcomm")
    hosts = [zone.create_host(f"rank{r}", 1e9) for r in range(net.world_size)]
    links: dict[int, object] = {}
    latency_of_res = np.zeros(net.n_resources)
    for e, res in enumerate(net.routes.edge_res[:-1].tolist()):
        latency_of_res[res] = net.routes.edge_lat[e]

    def link(res: int) -> object:
        if res not in links:
            links[res] = zone.create_link(f"l{res}", float(net.rates.cap[res])).set_latency(float(latency_of_res[res]))
        return links[res]

    routes: dict[tuple[int, int], list[int]] = {}
    for f in flows:
        key = (f.src, f.dst)
        if key in routes:
            continue
        pattern = net.pattern([key])
        edges = pattern.first_path_edges(0)
        routes[key] = [int(net.routes.edge_res[e]) for e in edges]
        zone.add_route(hosts[f.src].netpoint, hosts[f.dst].netpoint, None, None,
                       [sg.LinkInRoute(link(r)) for r in routes[key]], False)
    zone.seal()
    ends = np.full(len(flows), np.nan)

    def job(steps: list[list[int]]) -> None:
        first = flows[steps[0][0]].start
        if first > sg.Engine.clock:
            sg.this_actor.sleep_until(first)
        for members in steps:
            comms = [sg.Comm.sendto_async(hosts[flows[i].src], hosts[flows[i].dst], int(round(flows[i].nbytes)))
                     for i in members]
            owner = list(members)
            while comms:
                k = sg.Comm.wait_any(comms)
                ends[owner[k]] = sg.Engine.clock
                del comms[k], owner[k]

    for name, steps in _steps(flows).items():
        sg.Actor.create(f"job-{name}", hosts[0], job, steps)
    engine.run()
    return ends


def _endpoint_pairs(net: object, flows: Sequence[Flow]) -> set[tuple[int, int]]:
    pairs = set()
    for f in flows:
        if net.routes.island_of_rank[f.src] != net.routes.island_of_rank[f.dst]:
            pairs.add((int(net.routes.endpoint_of[f.src]), int(net.routes.endpoint_of[f.dst])))
    return pairs


def run_simgrid_isolated(cluster: object, flows: Sequence[Flow], optim: str = "Full",
                         timeout_s: float = 120.0) -> tuple[np.ndarray, float]:
    """:func:`run_simgrid` on ``cluster`` in a child process (SimGrid keeps one engine per process); returns
    the completion times and the wall seconds SimGrid itself took (platform building and run, no start-up)."""
    import multiprocessing
    import os


    context = multiprocessing.get_context("spawn")
    with context.Pool(1, initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
        return pool.apply_async(_child, (cluster, list(flows), optim)).get(timeout_s)


def _child(cluster: object, flows: list[Flow], optim: str) -> tuple[np.ndarray, float]:
    import time

    import simpy


    network = Network(simpy.Environment(), cluster)
    load_simgrid()
    started = time.perf_counter()
    ends = run_simgrid(network, flows, optim)
    return ends, time.perf_counter() - started
