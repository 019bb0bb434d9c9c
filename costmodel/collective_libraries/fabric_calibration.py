"""What a cluster's own nccl-tests runs taught the NCCL model: a few physical parameters, fitted, with bounds.

Why: from a description alone the collective-library model (:mod:`.call_cost`) gets the plateau of a sweep right
and the climb to it wrong on most networks, because what a fabric *reaches* (an EFA NIC's share of its port
speed, a RoCE network's per-step latency, a per-call cost) is not on any datasheet. A practitioner's first
act on a new cluster is an nccl-tests run; :mod:`.fabric_fit` fits these parameters on such runs and this
module applies them to every call the model prices afterwards, through ``calibration:`` in the cluster file.

The parameters act on the parts of a call the runtime already separates (:class:`.runtime.Execution`), never
on a size or a row:

* ``intra_bandwidth_efficiency``: the bandwidth the links inside an NVLink domain (NVLink, xGMI, PCIe) reach,
  as a fraction of what NCCL's topology search counts; divides the in-domain bandwidth term and pipeline fill.
* ``network_bandwidth_efficiency``: the same for the NICs: divides the network bandwidth term.
* ``network_step_latency_us``: what each network step on a call's critical path pays beyond NCCL's own
  per-step constants (described: the fabric's one-way latency less InfiniBand's, :mod:`.transports`).
* ``call_overhead_us``: a fixed cost every call pays beyond the host launch the model counts (described: 0).
* ``p2p_call_overhead_us``: a fixed cost of a grouped point-to-point call across nodes (all-to-all, send/recv):
  NCCL's proxy posts a send and a receive per peer, which its tuner does not model (described: 0).

NCCL's *choice* of algorithm and protocol stays its tuner's, made on the nominal numbers NCCL itself reads
from the hardware; a calibration changes what the chosen call then costs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flexcomm.costmodel.atomic import write_text_atomic

FORMAT = "flexcomm-fabric-calibration/1"


@dataclass(frozen=True)
class Parameter:
    """One calibrated quantity: its unit, its physical bounds and what it means."""

    name: str
    unit: str
    low: float
    high: float
    meaning: str


#: The parameters, in the order they are reported. Bounds: an efficiency above 1.5 would mean the model's link
#: speeds are off by more than a link generation (fix the description instead); below 0.05 the link is broken,
#: not slow. Latencies: a network step of 2 ms or a call overhead of 10 ms is a misconfigured fabric (TCP over a
#: management network), beyond which a fit is more likely absorbing something else.
PARAMETERS: dict[str, Parameter] = {p.name: p for p in (
    Parameter("intra_bandwidth_efficiency", "", 0.05, 1.5,
              "bandwidth reached inside an NVLink domain / what NCCL's topology search counts"),
    Parameter("network_bandwidth_efficiency", "", 0.05, 1.5, "bandwidth reached through the NICs / their port speed"),
    Parameter("network_step_latency_us", "us", 0.0, 2000.0,
              "latency of each network step on a call's critical path, beyond NCCL's own constants"),
    Parameter("call_overhead_us", "us", 0.0, 10000.0, "fixed cost of every call beyond the host launch"),
    Parameter("p2p_call_overhead_us", "us", 0.0, 10000.0,
              "fixed cost of a grouped point-to-point call across nodes (all-to-all, send/recv)"),
)}


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CalibratedValue(_Strict):
    """A parameter's value, the description's, and how the fit got it."""

    value: float
    described: float
    #: one standard deviation of the fitted value (None: not fitted, or too few rows to say)
    uncertainty: float | None = None
    fitted: bool = False
    #: why the given runs could not determine it (it keeps the described value), or what it is confounded with
    note: str = ""


class MadeFor(_Strict):
    """The hardware a calibration was fitted on: a cluster file that uses it must describe the same nodes (the
    node count may differ: predicting other scales is what a calibration is for)."""

    cluster: str
    device: str
    devices_per_node: int = Field(ge=1)
    nics_per_node: int = Field(ge=1)
    nic_bandwidth_Bps: float = Field(gt=0)
    library: Literal["nccl", "rccl"]
    network: str


class FabricCalibration(_Strict):
    """A calibration file's content (``calibration: FILE`` in a cluster file)."""

    format: Literal["flexcomm-fabric-calibration/1"] = FORMAT
    made_for: MadeFor
    parameters: dict[str, CalibratedValue]
    #: the logs it was fitted on: "<file>: <collective>, <ranks> ranks, <rows> rows"
    logs: list[str] = Field(default_factory=list)
    rows: int = Field(default=0, ge=0)
    #: median |predicted / measured - 1| over the fitted rows, with the fitted values
    fit_median_abs_error: float | None = None

    @model_validator(mode="after")
    def _known_and_bounded(self) -> FabricCalibration:
        names = set(self.parameters)
        if names != set(PARAMETERS):
            missing, unknown = sorted(set(PARAMETERS) - names), sorted(names - set(PARAMETERS))
            raise ValueError(f"parameters {', '.join(PARAMETERS)} (missing: {', '.join(missing) or 'none'}; "
                             f"unknown: {', '.join(unknown) or 'none'})")
        for name, entry in self.parameters.items():
            spec = PARAMETERS[name]
            for field_name in ("value", "described"):
                value = getattr(entry, field_name)
                if not (math.isfinite(value) and spec.low <= value <= spec.high):
                    raise ValueError(f"{name}.{field_name} within its physical bounds [{spec.low:g}, "
                                     f"{spec.high:g}] {spec.unit} (got {value!r})")
        return self

    def value(self, name: str) -> float:
        return self.parameters[name].value

    def values_for(self, described_step_us: float) -> tuple[float, ...]:
        """The parameters as a cluster applies them (in :data:`PARAMETERS` order): a fitted value as fitted; one
        the runs did not determine at *this* cluster's described value (the per-step latency's comes from the
        cluster's own fabric latency)."""
        step = self.parameters["network_step_latency_us"]
        return tuple(described_step_us if name == "network_step_latency_us" and not step.fitted else self.value(name)
                     for name in PARAMETERS)

    def describe(self) -> list[str]:
        """A table: each parameter's value, its standard deviation where fitted, the described value, and whether
        the runs determined it (and if not, why)."""
        lines = [f"{'parameter':<30s} {'value':>9s} {'+-':>8s} {'described':>10s}  fitted"]
        for name, spec in PARAMETERS.items():
            entry = self.parameters[name]
            spread = f"{entry.uncertainty:.3g}" if entry.fitted and entry.uncertainty is not None else "-"
            status = "yes" if entry.fitted else "no, described value kept"
            if entry.note:
                status += f": {entry.note}"
            label = f"{name} ({spec.unit})" if spec.unit else name
            lines.append(f"{label:<30s} {entry.value:>9.4g} {spread:>8s} {entry.described:>10.4g}  {status}")
        return lines


def is_p2p_across(run: Any) -> bool:
    """A grouped point-to-point call (all-to-all, send/recv) whose peers sit on other nodes."""
    return run.protocol == "p2p" and run.nodes > 1


def apply(calibration: FabricCalibration, run: Any, described_step_us: float) -> Any:
    """``run`` (a :class:`.runtime.Execution`) as the calibrated fabric prices it: each bandwidth term at the rate
    its links reached, each network step at the fitted latency, the per-call cost added; the launch the host
    needs stays (a host-bound call is bound by it)."""
    if run.ranks < 2:
        return run
    intra_eff, network_eff, step_us, call_us, p2p_us = calibration.values_for(described_step_us)
    intra, network = run.intra_s / intra_eff, run.network_s / network_eff
    bandwidth = max(intra, network)
    scale = bandwidth / run.bandwidth_s if run.bandwidth_s > 0 else 1.0
    p2p = p2p_us if is_p2p_across(run) else 0.0
    latency = max(0.0, run.latency_s + run.network_steps * (step_us - described_step_us) * 1e-6
                  + (call_us + p2p) * 1e-6)
    fill = run.fill_s * scale
    gpu = latency + fill + bandwidth
    return dataclasses.replace(run, latency_s=latency, fill_s=fill, bandwidth_s=bandwidth, intra_s=intra,
                               network_s=network, launch_s=max(0.0, run.host_s - gpu))


def calibration_text(calibration: FabricCalibration) -> str:
    """The calibration file: YAML, with a header saying how a cluster file uses it."""
    import yaml

    header = (f"# {FORMAT}: fabric parameters of {calibration.made_for.cluster} fitted on its own nccl-tests runs\n"
              "# (flexcomm calibrate --cluster). A cluster file of the same nodes uses it with one line:\n"
              "#   calibration: <this file>   (a path relative to the cluster file)\n")
    return header + yaml.safe_dump(calibration.model_dump(mode="json"), sort_keys=False, width=110)


def save_calibration(calibration: FabricCalibration, path: Any) -> None:
    write_text_atomic(path, calibration_text(calibration))
