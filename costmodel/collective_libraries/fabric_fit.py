"""Fit a cluster's fabric parameters (:mod:`.fabric_calibration`) on its own nccl-tests runs.

Every row of every log is priced once from the description (:func:`.model.explain_described`: NCCL's choice,
channels, steps, and the time split into in-domain bandwidth, network bandwidth, pipeline fill, per-step
latency, host launch); the parameters then act on those parts in closed form (:func:`seconds`, the same
arithmetic as :func:`.fabric_calibration.apply`), so a fit is a few hundred evaluations of numpy arithmetic: a
31-row log calibrates in milliseconds after its one pricing pass. The fit minimises the robust (soft-L1) sum
of squared log ratios predicted / measured: a row 10 % slow counts as one 10 % fast, at 8 B as at 8 GiB.

What a set of runs can determine, and what it cannot, is decided before and after the fit, and said:

* a bandwidth efficiency needs rows that its links bound (two or more rows whose bandwidth term is at least
  half their predicted time); an in-node run says nothing of the NICs, a multi-node run nothing of NVLink;
* the network's per-step latency needs rows of collectives (ring, tree, NVLS) that cross nodes, the
  point-to-point overhead rows of all-to-all or send/recv that do;
* the per-call cost and a network constant both add a constant to a run's rows: runs whose every row takes the
  same count of network steps (or is a point-to-point call across nodes) cannot tell them apart (their columns
  of the fit's Jacobian are parallel). The constant is then the network's: it was measured only on calls that
  cross nodes, and a per-call cost would carry it into calls inside a node, which the runs never measured. Runs
  inside one node fit the per-call cost alone; runs of both kinds, or of several step counts, fit both. Said in
  the file;
* a parameter whose fitted standard deviation exceeds :data:`DETERMINED` is not determined by the runs: it
  keeps the described value and the others are fitted again without it.

Parameters the runs cannot determine keep the described value (an efficiency of 1, the fabric's one-way
latency less InfiniBand's, no per-call cost), which is what every prediction used before calibrating.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flexcomm.costmodel.calibration import load_measurements
from flexcomm.costmodel.cluster import same_device
from flexcomm.costmodel.collective_libraries import transports
from flexcomm.costmodel.collective_libraries.algorithms import P2P, TUNED, is_nccl_algorithm
from flexcomm.costmodel.collective_libraries.call_cost import explain_described
from flexcomm.costmodel.collective_libraries.fabric_calibration import (
    PARAMETERS,
    CalibratedValue,
    FabricCalibration,
    MadeFor,
    is_p2p_across,
)
from flexcomm.costmodel.collective_libraries.logs import (
    NcclTestsLog,
    NcclTestsRow,
    flexcomm_bytes,
    read_nccl_tests,
    size_column,
)
from flexcomm.costmodel.collective_libraries.topology import packs_evenly
from flexcomm.costmodel.collective_libraries.validation import stated_version
from flexcomm.costmodel.errors import InputError

#: A parameter is determined when its fitted standard deviation is below this (efficiencies: absolute, a fifth
#: of the description's own value, which still narrows the physical range 0.05-1.5 threefold; latencies: 5 us
#: or half the value, whichever is larger: a latency known to a factor of two still orders the schemes).
DETERMINED = {"intra_bandwidth_efficiency": 0.2, "network_bandwidth_efficiency": 0.2,
              "network_step_latency_us": 5.0, "call_overhead_us": 5.0, "p2p_call_overhead_us": 5.0}
#: Share of a row's predicted time a term must hold for the row to speak for it.
BOUND_SHARE = 0.5
#: |correlation| of two parameters' Jacobian columns above which the rows cannot tell them apart.
CONFOUNDED = 0.98
NAMES = tuple(PARAMETERS)
#: Scale of each parameter inside the optimiser (efficiencies near 1; latencies in tens of microseconds).
_SCALE = np.array([1.0, 1.0, 100.0, 100.0, 100.0])


@dataclass(frozen=True)
class PricedRows:
    """The described parts of every row, as arrays (seconds), and where each row came from."""

    log: np.ndarray
    collective: np.ndarray
    ranks: np.ndarray
    size: np.ndarray  # nccl-tests' size column (bytes)
    measured_s: np.ndarray
    intra_s: np.ndarray
    network_s: np.ndarray
    bandwidth_s: np.ndarray
    fill_s: np.ndarray
    latency_s: np.ndarray
    network_steps: np.ndarray
    p2p_across: np.ndarray  # grouped point-to-point calls whose peers are on other nodes
    host_s: np.ndarray
    algorithm: np.ndarray
    described_step_us: float

    def __len__(self) -> int:
        return len(self.measured_s)


def seconds(rows: PricedRows, values: Sequence[float]) -> np.ndarray:
    """Every row's time with ``values`` (in :data:`NAMES` order): :func:`.fabric_calibration.apply`, vectorised."""
    intra_eff, network_eff, step_us, call_us, p2p_us = values
    intra, network = rows.intra_s / intra_eff, rows.network_s / network_eff
    bandwidth = np.maximum(intra, network)
    scale = np.divide(bandwidth, rows.bandwidth_s, out=np.ones_like(bandwidth), where=rows.bandwidth_s > 0)
    latency = np.maximum(0.0, rows.latency_s + rows.network_steps * (step_us - rows.described_step_us) * 1e-6
                         + (call_us + np.where(rows.p2p_across, p2p_us, 0.0)) * 1e-6)
    gpu = latency + rows.fill_s * scale + bandwidth
    alone = rows.ranks < 2
    return np.where(alone, 0.0, np.maximum(gpu, rows.host_s))


def described_values(cluster: Any) -> np.ndarray:
    return np.array([1.0, 1.0, transports.extra_latency_us(cluster), 0.0, 0.0])


def _check_log(log: NcclTestsLog, cluster: Any) -> int:
    """The ranks a log ran on, refused in one line when it cannot be a run of ``cluster``."""
    where = log.source
    for name in log.devices:
        if not same_device(name, cluster.device.name):
            raise InputError(where, name, f"a log of {cluster.name}'s GPUs ({cluster.device.name}): it ran on "
                             f"{name}; calibrate it with that hardware's cluster file")
    if log.collective not in TUNED + P2P:
        raise InputError(where, log.collective, "a collective the NCCL model prices: " + ", ".join(TUNED + P2P))
    ranks = log.ranks if log.ranks is not None else cluster.world_size
    if not packs_evenly(cluster, ranks):
        raise InputError(where, f"{ranks} ranks", f"a log of {cluster.name} ({cluster.nodes} nodes x "
                         f"{cluster.devices_per_node} GPUs): at most {cluster.world_size} ranks in whole NVLink "
                         "domains (its rank count says it ran elsewhere; pass that cluster's file)")
    return ranks


def price_logs(cluster: Any, logs: Sequence[NcclTestsLog]) -> PricedRows:
    """Each row of each log priced from ``cluster``'s description (any calibration it carries left aside)."""
    if cluster.gpu_fabric is None:
        raise InputError("cluster", cluster.name, "a cluster with a gpu_fabric section (the NCCL model it tunes)")
    columns: dict[str, list[Any]] = {name: [] for name in (
        "log", "collective", "ranks", "size", "measured_s", "intra_s", "network_s", "bandwidth_s", "fill_s",
        "latency_s", "network_steps", "p2p_across", "host_s", "algorithm")}
    for log in logs:
        ranks = _check_log(log, cluster)
        gpus_per_process = 0 if log.cuda_graph else (log.gpus_per_thread or 1)
        version = stated_version(log, cluster)
        # what the log says NCCL was forced to (a bench log of gloo names gloo's ring: NCCL's own choice then)
        algorithm = log.algorithm if log.algorithm and is_nccl_algorithm(log.algorithm) else "nccl"
        for row in log.rows:
            size = float(flexcomm_bytes(log.collective, row.bytes, ranks))
            run = explain_described(cluster, log.collective, size_column(log.collective, size, ranks), ranks,
                                    algorithm, log.env, gpus_per_process, version)
            for name, value in (("log", Path(log.source).name), ("collective", log.collective), ("ranks", ranks),
                                ("size", row.bytes), ("measured_s", row.time_s), ("intra_s", run.intra_s),
                                ("network_s", run.network_s), ("bandwidth_s", run.bandwidth_s),
                                ("fill_s", run.fill_s), ("latency_s", run.latency_s),
                                ("network_steps", run.network_steps), ("p2p_across", is_p2p_across(run)),
                                ("host_s", run.host_s),
                                ("algorithm", run.label)):
                columns[name].append(value)
    arrays = {name: np.asarray(values) for name, values in columns.items()}
    return PricedRows(**arrays, described_step_us=transports.extra_latency_us(cluster))


# --- what the rows can speak for ------------------------------------------------------------------------


def _candidates(rows: PricedRows) -> dict[str, str]:
    """Parameter -> '' when the rows can speak for it, else why not."""
    gpu = rows.latency_s + rows.fill_s + rows.bandwidth_s
    intra_bound = int(np.sum(rows.intra_s >= BOUND_SHARE * gpu))
    network_bound = int(np.sum(rows.network_s >= BOUND_SHARE * gpu))
    crossing = int(np.sum(rows.network_steps > 0))
    p2p = int(np.sum(rows.p2p_across))
    return {
        "intra_bandwidth_efficiency": "" if intra_bound >= 2 else
        f"{intra_bound} row(s) bound by the links inside an NVLink domain (2 needed; runs inside one node speak "
        "for them)",
        "network_bandwidth_efficiency": "" if network_bound >= 2 else
        f"{network_bound} row(s) bound by the NICs (2 needed; runs across nodes speak for them)",
        "network_step_latency_us": "" if crossing >= 2 else
        f"{crossing} row(s) of collectives across nodes (2 needed; ring and tree runs across nodes speak for it)",
        "call_overhead_us": "",
        "p2p_call_overhead_us": "" if p2p >= 2 else
        f"{p2p} row(s) of all-to-all or send/recv across nodes (2 needed)",
    }


def _residuals(rows: PricedRows, free: list[int], fixed: np.ndarray, measured_log: np.ndarray) -> Any:
    def residual(scaled: np.ndarray) -> np.ndarray:
        values = fixed.copy()
        values[free] = scaled * _SCALE[free]
        return np.log(np.maximum(seconds(rows, values), 1e-12)) - measured_log
    return residual


def _fit(rows: PricedRows, free: list[int], start: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Least squares over ``free`` from ``start``: (values, covariance of the free values or None, Jacobian)."""
    from scipy.optimize import least_squares

    measured_log = np.log(rows.measured_s)
    if not free:
        return start.copy(), None, np.zeros((len(rows), 0))
    low = np.array([PARAMETERS[n].low for n in NAMES]) / _SCALE
    high = np.array([PARAMETERS[n].high for n in NAMES]) / _SCALE
    x0 = np.clip(start[free] / _SCALE[free], low[free] + 1e-9, high[free] - 1e-9)
    result = least_squares(_residuals(rows, free, start, measured_log), x0, bounds=(low[free], high[free]),
                           loss="soft_l1", f_scale=0.05, x_scale="jac", max_nfev=2000)
    values = start.copy()
    values[free] = result.x * _SCALE[free]
    jac = result.jac / _SCALE[free]  # d residual / d value, in the parameters' own units
    dof = len(rows) - len(free)
    covariance = None
    if dof > 0:
        plain = np.log(np.maximum(seconds(rows, values), 1e-12)) - measured_log
        variance = float(np.sum(plain**2) / dof)
        try:
            covariance = np.linalg.inv(jac.T @ jac) * variance
        except np.linalg.LinAlgError:
            covariance = None
    return values, covariance, jac


def _confounded(jac: np.ndarray, free: list[int], a: int, b: int) -> bool:
    if a not in free or b not in free:
        return False
    ca, cb = jac[:, free.index(a)], jac[:, free.index(b)]
    norm = float(np.linalg.norm(ca) * np.linalg.norm(cb))
    return norm == 0 or abs(float(ca @ cb)) / norm > CONFOUNDED


@dataclass
class FabricFit:
    """A calibration and the rows it was fitted on, described and calibrated."""

    calibration: FabricCalibration
    rows: pd.DataFrame

    def summary_lines(self) -> list[str]:
        described = self.rows["described_rel_error"].abs().median()
        fitted = self.rows["rel_error"].abs().median()
        return [f"{len(self.rows)} rows of {len(self.calibration.logs)} log(s): median |error| {described:.1%} "
                f"described, {fitted:.1%} calibrated", *self.calibration.describe()]


def calibrate_fabric(cluster: Any, logs: Sequence[NcclTestsLog]) -> FabricFit:
    """Fit the fabric parameters of ``cluster`` on ``logs`` (nccl-tests runs of it, any collective, any scale)."""
    if not logs:
        raise InputError("logs", "none", "at least one nccl-tests log of the cluster")
    base = cluster.model_copy(update={"calibration": None})
    rows = price_logs(base, logs)
    if len(rows) < 2:
        raise InputError(logs[0].source, f"{len(rows)} row", "at least 2 rows (sizes) to fit a parameter on")
    described = described_values(base)
    reasons = _candidates(rows)
    free = [i for i, name in enumerate(NAMES) if not reasons[name]]
    call = NAMES.index("call_overhead_us")
    values, covariance, jac = _fit(rows, free, described)
    for other in (NAMES.index("network_step_latency_us"), NAMES.index("p2p_call_overhead_us")):
        if _confounded(jac, free, other, call):  # every row crosses nodes: what they measured is the network's
            reasons["call_overhead_us"] = (f"the runs cannot tell it from {NAMES[other]} (every row pays both the "
                                           f"same way); the constant is fitted as {NAMES[other]}")
            free.remove(call)
            values, covariance, jac = _fit(rows, free, described)
            break
    while covariance is not None:
        spread = np.sqrt(np.maximum(np.diag(covariance), 0.0))
        loose = [(i, s) for i, s in zip(free, spread, strict=True)
                 if s > max(DETERMINED[NAMES[i]], 0.5 * abs(values[i]) if NAMES[i].endswith("_us") else 0.0)]
        if not loose:
            break
        worst, spread_of = max(loose, key=lambda item: item[1] / DETERMINED[NAMES[item[0]]])
        spec = PARAMETERS[NAMES[worst]]
        reasons[NAMES[worst]] = ("the runs do not determine it (" + (
            f"fitted +- {spread_of:.3g}{' ' + spec.unit if spec.unit else ''})" if spread_of < spec.high - spec.low
            else "its uncertainty spans its whole physical range)"))
        free.remove(worst)
        values, covariance, jac = _fit(rows, free, described)
    if covariance is None and free and len(rows) <= len(free):
        raise InputError(logs[0].source, f"{len(rows)} rows", f"more rows than the {len(free)} parameters they "
                         "speak for (add sizes or runs)")
    spread = np.sqrt(np.maximum(np.diag(covariance), 0.0)) if covariance is not None else None
    parameters = {}
    for i, name in enumerate(NAMES):
        fitted = i in free
        uncertainty = float(spread[free.index(i)]) if fitted and spread is not None else None
        note = reasons[name] if not fitted else ""
        parameters[name] = CalibratedValue(value=float(values[i]), described=float(described[i]),
                                           uncertainty=uncertainty, fitted=fitted, note=note)
    for name, reason in reasons.items():  # the constant's attribution is said on the parameter that carries it
        keep = reason.rsplit("fitted as ", 1)[1] if "fitted as" in reason else None
        if keep is None:
            continue
        if parameters[keep].fitted:
            parameters[keep] = parameters[keep].model_copy(update={"note": f"includes {name} (the runs "
                                                                           "cannot tell them apart)"})
        else:
            parameters[name] = parameters[name].model_copy(update={"note": f"the runs do not determine it, nor "
                                                                           f"{keep}, which it cannot be told from"})
    calibrated = seconds(rows, values)
    frame = _frame(rows, seconds(rows, described), calibrated)
    calibration = FabricCalibration(
        made_for=made_for(cluster), parameters=parameters,
        logs=[f"{Path(log.source).name}: {log.collective}, {int(r)} ranks, {len(log.rows)} rows"
              for log, r in zip(logs, _ranks_of(rows, logs), strict=True)],
        rows=len(rows), fit_median_abs_error=float(frame["rel_error"].abs().median()))
    return FabricFit(calibration, frame)


def _ranks_of(rows: PricedRows, logs: Sequence[NcclTestsLog]) -> list[int]:
    out, start = [], 0
    for log in logs:
        out.append(int(rows.ranks[start]))
        start += len(log.rows)
    return out


def _frame(rows: PricedRows, described: np.ndarray, calibrated: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"log": rows.log, "collective": rows.collective, "ranks": rows.ranks, "bytes": rows.size,
                         "algorithm": rows.algorithm, "measured_s": rows.measured_s, "described_s": described,
                         "calibrated_s": calibrated, "described_rel_error": described / rows.measured_s - 1.0,
                         "rel_error": calibrated / rows.measured_s - 1.0})


def made_for(cluster: Any) -> MadeFor:
    fabric = cluster.gpu_fabric
    return MadeFor(cluster=cluster.name, device=cluster.device.name, devices_per_node=cluster.devices_per_node,
                   nics_per_node=cluster.nics_per_node or 1, nic_bandwidth_Bps=cluster.inter_link.bandwidth_Bps,
                   library=fabric.library, network=fabric.network)


def read_logs(paths: Sequence[str | Path], collective: str | None = None) -> list[NcclTestsLog]:
    """nccl-tests logs (or flexcomm bench-collectives CSVs, one log per collective and rank count)."""
    logs: list[NcclTestsLog] = []
    for path in paths:
        if str(path).lower().endswith(".csv"):
            logs += _csv_logs(Path(path))
        else:
            logs.append(read_nccl_tests(str(path), collective))
    return logs


def _csv_logs(path: Path) -> list[NcclTestsLog]:
    """A bench-collectives CSV (``collective, algorithm, ranks, bytes, seconds``) as logs of its NCCL rows."""
    table = load_measurements(path)
    logs = []
    for (collective, ranks), group in table.groupby(["collective", "ranks"], sort=True):
        medians = group.groupby("bytes", sort=True)["seconds"].median()
        rows = []
        for i, (nbytes, secs) in enumerate(medians.items()):
            size = int(size_column(str(collective), float(nbytes), int(ranks)))
            if size <= 0 or not (math.isfinite(secs) and secs > 0):
                continue
            rows.append(NcclTestsRow(i + 2, size, 0, "", "", None, float(secs), size / secs, 0.0, None, None, None))
        if rows:
            logs.append(NcclTestsLog(str(collective), rows, "csv", ranks=int(ranks), ranks_from="CSV ranks column",
                                     source=f"{path}[{collective}, {int(ranks)} ranks]"))
    if not logs:
        raise InputError("measurements", str(path), "a bench-collectives CSV with rows of more than 0 bytes")
    return logs
