"""One pasted nccl-tests log priced on one cluster: the engine behind ``flexcomm validate --nccl-tests LOG
--cluster C`` and ``flexcomm.validate_nccl_tests``.

Why a module of its own: :mod:`costmodel.collective_libraries.validation` prices a parsed log with a given model
and is imported by the fabric fit that :mod:`costmodel.cluster` reaches; loading the cluster, its profile and
the log from their names here keeps that module free of a cycle back through the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm.costmodel.calibration import CalibrationProfile
from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.collective_libraries.logs import read_nccl_tests
from flexcomm.costmodel.collective_libraries.validation import SUMMARY_MIN_BYTES, LogValidation, validate_log
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import format_time

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["NcclTestsCheck", "check_nccl_tests", "report_lines"]


@dataclass(frozen=True)
class NcclTestsCheck:
    """Every row of one log, measured against predicted, and what the report around them says.

    ``run_id`` (the log's stem), ``collective``, ``ranks``, ``hardware_class`` and ``rows`` are what
    :func:`experiments.published_plots.plot_run` draws, so the figure of a pasted run is a published run's.
    """

    validation: LogValidation
    cluster_name: str
    hardware_class: str  # the cluster as the caller named it (the figure's title)
    can_calibrate: bool  # a GPU fabric still on its datasheet values: this log could calibrate it

    @property
    def run_id(self) -> str:
        return Path(self.validation.log.source).stem

    @property
    def source(self) -> str:
        return self.validation.log.source

    @property
    def collective(self) -> str:
        return self.validation.log.collective

    @property
    def ranks(self) -> int:
        return self.validation.ranks

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.validation.rows

    def summary(self) -> dict[str, Any]:
        """Over rows >= 1 MiB: median and worst |error|, the baseline's median, whether the log is partial."""
        return self.validation.summary

    def to_dict(self) -> dict[str, Any]:
        """What ``--json`` prints: the log, its collective and ranks, every row and the summary."""
        return self.validation.to_dict()

    def table(self) -> pd.DataFrame:
        """One line per row: bytes, measured and predicted seconds, error, the algorithm priced."""
        import pandas as pd

        return pd.DataFrame(self.rows)


def check_nccl_tests(log: str | Path, cluster: str | Path | Cluster | None, *, profile: str | Path | None = None,
                     collective: str | None = None, algorithm: str | None = None) -> NcclTestsCheck:
    """Price every row of the nccl-tests output in ``log`` with ``cluster``'s cost model (with ``profile``: the
    calibrated one). ``collective`` names the log's collective when the log does not; ``algorithm``: ``nccl``
    (NCCL's own choice, the default on a cluster with a GPU fabric), ``nccl:ring/ll128`` or a formula's."""
    if not cluster:
        raise InputError("cluster", None, "--cluster NAME|FILE: the hardware the log ran on")
    parsed = read_nccl_tests(str(log), collective)
    loaded = load_cluster(cluster)
    if profile:  # the profile's own fit per collective and algorithm where it has one, else the cluster's
        model = CostModel.from_profile(CalibrationProfile.load(profile), loaded)
    else:
        model = CostModel.from_cluster(loaded)
    validation = validate_log(parsed, model, loaded.nodes * loaded.devices_per_node, algorithm)
    named = loaded.name if isinstance(cluster, Cluster) else str(cluster)
    return NcclTestsCheck(validation, loaded.name, named,
                          can_calibrate=loaded.gpu_fabric is not None and loaded.calibration is None)


def report_lines(check: NcclTestsCheck) -> list[str]:
    """What ``validate --nccl-tests`` prints: a heading, one line per row, the summary over rows >= 1 MiB and,
    where the cluster's GPU fabric is uncalibrated, the command that would calibrate it from this log."""
    lines = [f"{check.source}: {check.collective}, {check.ranks} ranks on {check.cluster_name}",
             f"{'bytes':>12s} {'measured':>12s} {'predicted':>12s} {'error':>8s} {'baseline':>9s}  algorithm"]
    for row in check.rows:
        label = row["algorithm"] + (f"/{row['protocol']}" if row["protocol"] else "")
        lines.append(f"{row['bytes']:12d} {format_time(row['measured_s']):>12s} "
                     f"{format_time(row['predicted_s']):>12s} {row['rel_error']:+8.1%} "
                     f"{_signed(row['baseline_rel_error']):>9s}  {label}")
    s = check.summary()
    if s["median_abs_error"] is None:
        lines.append(f"no rows of {SUMMARY_MIN_BYTES >> 20} MiB or more: no summary")
    else:
        lines.append(f"rows >= 1 MiB: median |error| {s['median_abs_error']:.1%}, worst {s['worst_abs_error']:.1%} "
                     f"({s['rows_at_least_1MiB']} rows{'; partial log: no rows below 1 MiB' if s['partial'] else ''});"
                     f" baseline (alpha-beta at the datasheet rates) {_signed(s['baseline_median_abs_error'], '')}")
    if check.can_calibrate:
        lines.append(f"hint: this log can calibrate {check.cluster_name}'s NCCL model: flexcomm calibrate --cluster "
                     f"{check.hardware_class} {check.source}")
    return lines


def _signed(value: float | None, sign: str = "+") -> str:
    return "-" if value is None else f"{value:{sign}.1%}"
