"""The network between nodes and the host that launches calls: what NCCL's constants leave to the hardware.

NCCL's per-step network latencies (``hwLat[NET]``: 2.7 / 4.0 / 14 us a ring step for LL / LL128 / Simple,
``src/graph/tuning.cc``) were measured by NVIDIA on InfiniBand; a transport whose one-way latency is
higher pays the difference on every network step. Two different latencies matter and are kept apart:

* **the fabric's one-way latency** (``inter_link.latency`` of the cluster file): what a small message
  takes NIC to NIC. The runtime adds ``max(0, latency - INFINIBAND_US)`` to every network step on the
  critical path. Typical values per transport are in :data:`TRANSPORTS` with their sources.
* **the latency the net plugin reports to NCCL** (``props->latency``): NCCL's tuner adds it to every
  network step (twice for Simple) when it *chooses* (``search.cc``: ``graph->latencyInter =
  net->net.latency``). NCCL's own InfiniBand and socket transports report 0 (``net_ib.cc`` L863,
  ``net_socket.cc`` L112 @ v2.27.7-1); AWS's aws-ofi-nccl reports 75 us on p4d/p4de/p5/p5e and 35 us on
  p5en/p6 (``src/platform-aws.cpp`` @ v1.21.1 L83-211, "found empirically to make NCCL's tuner choose
  well"). It steers the choice (EFA pairs run trees where InfiniBand pairs run rings); it is not a time.

The host: a thread that drives G GPUs (nccl-tests ``-g G``) enqueues and launches G kernels per call, so
back-to-back calls go no faster than ``G x HOST_LAUNCH_US``. HolisticTraceAnalysis' documentation of CUDA
kernel launches: "Usually, the launch time on the CPU side is between 5-20 microseconds"
(facebookresearch/HolisticTraceAnalysis ``docs/source/features/cuda_kernel_launch_stats.rst`` @ 0c2146a8
L37); the lower end is taken (NCCL's launch is one kernel a GPU, its arguments prepared ahead). AMD
publishes no figure for HIP; the same is used. Under ``-G`` (CUDA graphs) nccl-tests times graph replays
and this cost leaves the measurement (``src/common.cu`` @ v2.19.6 L708-773).
"""

from __future__ import annotations

from dataclasses import dataclass

from flexcomm.costmodel.collective_libraries.versions import DEFAULT, RCCL_DEFAULT
from flexcomm.costmodel.errors import InputError

#: The host's cost of enqueuing and launching one NCCL call on one GPU (us); see the module docstring.
HOST_LAUNCH_US = 5.0
#: One-way small-message latency of the InfiniBand NCCL's network constants were measured on (us):
#: a ConnectX adapter, "sub 0.6 us" (NVIDIA ConnectX-6 VPI product brief), and a few Quantum switch hops,
#: "sub-130ns" each (QM8790 product brief), rounded up to 1 us.
INFINIBAND_US = 1.0


@dataclass(frozen=True)
class Transport:
    """A network transport as NCCL meets it."""

    name: str
    typical_latency_us: float  # one-way small message, NIC to NIC (a cluster file's default to write)
    plugin_latency_us: float  # what its NCCL net plugin reports (the tuner adds it; not a time)
    source: str


TRANSPORTS: dict[str, Transport] = {
    "infiniband": Transport("infiniband", 1.0, 0.0, "ConnectX-6 'sub 0.6 us' + Quantum 'sub-130ns' a hop "
                            "(NVIDIA product briefs); NCCL's IB transport reports latency 0"),
    "roce": Transport("roce", 1.5, 0.0, "ConnectX adapter + Spectrum switch ~300 ns a hop (NVIDIA Spectrum "
                      "brief); NCCL's IB verbs transport reports latency 0"),
    "efa": Transport("efa", 20.0, 75.0, "aws-ofi-nccl v1.21.1: its own cost model's EFA step latency 20 us on "
                     "p5/p5e (src/tuner/nccl_ofi_model.cpp L14-27); reported to NCCL: 75 us on p4d/p4de/p5/p5e "
                     "(src/platform-aws.cpp L83-139)"),
    "slingshot": Transport("slingshot", 2.0, 0.0, "Rosetta switch ~350 ns a hop (De Sensi et al., SC20) and "
                           "a Cassini NIC; the libfabric plugin reports 0 off AWS (aws-ofi-nccl "
                           "nccl_ofi_param.h L218-221)"),
    "tcp": Transport("tcp", 12.5, 0.0, "kernel TCP in a data centre: 'the best round-trip latency of TCP in the "
                     "data center is almost 25us' (Shalev et al., IEEE Micro 40(6), 2020); NCCL's socket "
                     "transport reports 0"),
}


def transport(fabric: object) -> Transport:
    """The transport a cluster's ``gpu_fabric`` names (InfiniBand when it names none)."""
    name = getattr(fabric, "network", None) or "infiniband"
    if name not in TRANSPORTS:
        raise InputError("cluster.gpu_fabric.network", name, "one of " + ", ".join(TRANSPORTS))
    return TRANSPORTS[name]


def plugin_latency_us(fabric: object) -> float:
    """What the net plugin reports to NCCL's tuner: the file's ``net_plugin_latency``, else the transport's."""
    stated = getattr(fabric, "net_plugin_latency_s", None)
    return float(stated) * 1e6 if stated is not None else transport(fabric).plugin_latency_us


def extra_latency_us(cluster: object) -> float:
    """Latency every network step pays beyond InfiniBand's: the fabric's one-way latency
    (``inter_link.latency``) less :data:`INFINIBAND_US`, never below 0."""
    latency_s = cluster.inter_link.latency_s  # type: ignore[attr-defined]
    return max(0.0, latency_s * 1e6 - INFINIBAND_US)


def host_launch_us_per_gpu() -> float:
    return HOST_LAUNCH_US


def library_defaults(cluster: object) -> dict[str, object]:
    """What the collective-library model will use for ``cluster`` and where each value comes from
    (``flexcomm clusters NAME`` shows it): release, transport, latencies, host launch."""
    fabric = cluster.gpu_fabric  # type: ignore[attr-defined]
    chosen = transport(fabric)
    newest = RCCL_DEFAULT if fabric.library == "rccl" else DEFAULT
    stated_plugin = getattr(fabric, "net_plugin_latency_s", None)
    return {
        "library": fabric.library,
        "version": fabric.nccl_version or f"{newest} (default: the newest modelled; set gpu_fabric.nccl_version)",
        "network": f"{chosen.name}" + ("" if getattr(fabric, "network", None) else " (default)"),
        "fabric_latency_us": cluster.inter_link.latency_s * 1e6,  # type: ignore[attr-defined]
        "extra_latency_per_network_step_us": extra_latency_us(cluster),
        "typical_latency_of_this_network_us": chosen.typical_latency_us,
        "plugin_latency_us": plugin_latency_us(fabric),
        "plugin_latency_from": "gpu_fabric.net_plugin_latency" if stated_plugin is not None else
        f"the {chosen.name} default",
        "network_source": chosen.source,
        "host_launch_us_per_gpu": HOST_LAUNCH_US,
        "pcie_p2p": getattr(fabric, "pcie_p2p", True),
        "calibration": calibration_in_use(cluster),
    }


def calibration_in_use(cluster: object) -> dict[str, object] | str:
    """The fabric parameters a cluster prices with and where each comes from (``clusters NAME`` shows it)."""
    calibration = getattr(cluster, "calibration", None)
    if calibration is None:
        return ("none: the description alone (one nccl-tests run of this cluster calibrates it: flexcomm "
                "calibrate --cluster FILE LOG)")
    values = calibration.values_for(extra_latency_us(cluster))
    return {"fitted_on": calibration.logs,
            **{name: {"value": value, "from": "fitted" if entry.fitted else "described",
                      **({"uncertainty": entry.uncertainty} if entry.uncertainty is not None else {})}
               for (name, entry), value in zip(calibration.parameters.items(), values, strict=True)}}
