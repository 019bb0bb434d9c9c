"""Independent flows: flexcomm's vectorised flow sharing against SimGrid on the same platform, in one run.

Why: all-to-all traffic, MoE dispatch and pipeline sends are independent flows, each at its own fair rate.
Before, each such flow was a coflow of its own in the rate engine, and a 992-flow all-to-all cost about
3 s of wall time where SimGrid needs 0.6 s. :meth:`sim.network.Network.send` fills the rates over a
sparse flow x link matrix instead.

What is timed (wall seconds, median over ``--repeats``, each run building its own network):

* ``send``: the 992 flows of an all-to-all among 32 GPUs (4 nodes x 8 GPUs, two leaves of 2 nodes under
  one spine, 2:1 oversubscribed uplinks, 200 Gbit/s NICs), 4 MiB each, all started at once, as one
  :meth:`Network.send`;
* ``coflow per flow`` (the old path): the same flows as 992 one-flow coflows;
* SimGrid 3 (Debian's python3-simgrid) on the same platform and routes (:mod:`sim.referee`), in its
  default ``Lazy`` mode and in ``Full`` mode (exact), timed inside the child process from platform
  building to the end of the run (interpreter and SimGrid start-up excluded), when it is installed.

Every flow's completion time is compared across the engines. The ratio printed is SimGrid's time over
flexcomm's (goal >= 1: flexcomm at least as fast). Run: ``.venv/bin/python benchmarks/bench_sim_flows.py
[--repeats 5] [--flows-only]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from _common import pin_one_cpu, require_flexcomm  # noqa: E402

require_flexcomm()
import simpy  # noqa: E402

from flexcomm.costmodel.cluster import Cluster  # noqa: E402
from flexcomm.sim.network import Network  # noqa: E402
from flexcomm.sim.referee import Flow, SimgridMissing, load_simgrid, run_simgrid_isolated  # noqa: E402

CLUSTER = {"name": "4x8-two-level", "nodes": 4, "devices_per_node": 8,
           "device": {"name": "A100-80GB", "peak_flops": "312TFLOP/s", "memory": "80GiB"},
           "intra_link": {"latency": "2us", "bandwidth": "300GB/s"},
           "inter_link": {"latency": "5us", "bandwidth": "200Gbit/s"},
           "topology": {"kind": "two-level", "nodes_per_switch": 2, "oversubscription": 2}}
BYTES = 4 * 2**20


def flexcomm_send(cluster: Cluster, pairs: np.ndarray) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    env = simpy.Environment()
    net = Network(env, cluster)
    event = net.send(pairs, BYTES)
    env.run()
    return time.perf_counter() - started, np.array([r.end for r in event.value])


def flexcomm_coflows(cluster: Cluster, pairs: np.ndarray) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    env = simpy.Environment()
    net = Network(env, cluster)
    events = [net.transfer([tuple(p)], BYTES) for p in pairs.tolist()]
    env.run()
    return time.perf_counter() - started, np.array([e.value.end for e in events])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--flows-only", action="store_true", help="skip SimGrid")
    args = parser.parse_args()
    cpu = pin_one_cpu()
    cluster = Cluster.from_dict(CLUSTER)
    pairs = np.array([(s, d) for s in range(32) for d in range(32) if s != d], dtype=np.int64)
    rows = {}
    results = {}
    engines = (("flexcomm send (vectorised)", flexcomm_send), ("flexcomm, one coflow per flow", flexcomm_coflows))
    for name, fn in engines:
        times = []
        for _ in range(args.repeats):
            seconds, ends = fn(cluster, pairs)
            times.append(seconds)
        rows[name] = statistics.median(times)
        results[name] = ends
    simgrid_ok = not args.flows_only
    if simgrid_ok:
        try:
            load_simgrid()
        except SimgridMissing as exc:
            print(f"SimGrid not measured: {exc}")
            simgrid_ok = False
    if simgrid_ok:
        flows = [Flow(int(s), int(d), BYTES) for s, d in pairs.tolist()]
        for optim in ("Lazy", "Full"):
            times, ends = [], None
            for _ in range(args.repeats):
                ends, seconds = run_simgrid_isolated(cluster, flows, optim=optim)
                times.append(seconds)
            rows[f"SimGrid CM02 ({optim})"] = statistics.median(times)
            results[f"SimGrid CM02 ({optim})"] = ends
    base = rows["flexcomm send (vectorised)"]
    print(f"992-flow all-to-all, 4 MiB per flow, 4 x 8 GPUs on a 2:1 two-level fabric; median of {args.repeats}; "
          f"{'pinned to CPU ' + str(cpu) if cpu is not None else 'not pinned'}; python {sys.version.split()[0]}")
    print(f"{'engine':34s} {'wall s':>9s} {'x flexcomm send':>16s} {'last flow ends (s)':>19s} "
          f"{'max |diff| vs send':>19s}")
    for name, seconds in rows.items():
        ends = results[name]
        diff = float(np.max(np.abs(ends / results['flexcomm send (vectorised)'] - 1)))
        print(f"{name:34s} {seconds:9.4f} {seconds / base:16.2f} {float(np.max(ends)):19.9g} {diff:19.2e}")
    if simgrid_ok:
        ratio = rows["SimGrid CM02 (Lazy)"] / base
        print(f"ratio SimGrid (default Lazy) / flexcomm send = {ratio:.2f} (goal >= 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
