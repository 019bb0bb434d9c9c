"""Calibrate on your own cluster (issue 43): nccl-tests runs teach the NCCL model a few physical parameters,
which every consumer then prices with; what the runs cannot determine is said and left at the description."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.collective_libraries import transports
from flexcomm.costmodel.collective_libraries.call_cost import explain_described
from flexcomm.costmodel.collective_libraries.fabric_calibration import (
    PARAMETERS,
    CalibratedValue,
    FabricCalibration,
    apply,
    save_calibration,
)
from flexcomm.costmodel.collective_libraries.fabric_fit import calibrate_fabric, made_for, price_logs, seconds
from flexcomm.costmodel.collective_libraries.logs import format_log, parse_nccl_tests, size_column
from flexcomm.experiments.cli import main

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "validation" / "nccl-tests"
H100 = "NVIDIA H100 80GB HBM3"
SIZES = [2**k for k in range(10, 34, 2)]  # 1 KiB .. 8 GiB


def _cluster(nodes: int = 4) -> Cluster:
    return load_cluster("p5-48xlarge").with_nodes(nodes)


def _calibration(cluster: Cluster, values: dict[str, float], fitted: bool = True) -> FabricCalibration:
    described = {"intra_bandwidth_efficiency": 1.0, "network_bandwidth_efficiency": 1.0,
                 "network_step_latency_us": transports.extra_latency_us(cluster), "call_overhead_us": 0.0,
                 "p2p_call_overhead_us": 0.0}
    return FabricCalibration(made_for=made_for(cluster), parameters={
        name: CalibratedValue(value=values.get(name, described[name]), described=described[name], fitted=fitted)
        for name in PARAMETERS})


def _log(cluster: Cluster, calibration: FabricCalibration, collective: str, ranks: int) -> str:
    """An nccl-tests log of ``cluster`` whose times are the model's under ``calibration`` (printed as nccl-tests
    prints them, to its precision)."""
    step = transports.extra_latency_us(cluster)
    rows = []
    for size in SIZES:
        run = apply(calibration, explain_described(cluster, collective, size, ranks), step)
        rows.append((size, size // 4, "float", "sum", -1, run.seconds))
    return format_log(collective, ranks, rows, devices=[H100] * ranks)


def test_the_fit_recovers_the_parameters_that_made_its_runs(tmp_path: Path) -> None:
    cluster = _cluster()
    truth = {"intra_bandwidth_efficiency": 0.85, "network_bandwidth_efficiency": 0.7, "network_step_latency_us": 60.0,
             "call_overhead_us": 12.0, "p2p_call_overhead_us": 300.0}
    made = _calibration(cluster, truth)
    logs = [parse_nccl_tests(_log(cluster, made, collective, ranks), name=f"{collective}-{ranks}")
            for collective, ranks in (("allreduce", 8), ("allreduce", 16), ("allreduce", 32), ("allgather", 32),
                                      ("alltoall", 16))]
    fit = calibrate_fabric(cluster, logs)
    for name, value in truth.items():
        entry = fit.calibration.parameters[name]
        assert entry.fitted, (name, entry.note)
        assert entry.value == pytest.approx(value, rel=0.03, abs=1.0), name
        assert entry.uncertainty is not None and entry.uncertainty < 0.1 * max(value, 10.0), name
    assert fit.rows["rel_error"].abs().max() < 0.01  # the runs' own rows, to nccl-tests' printed precision


def test_what_the_runs_cannot_determine_keeps_the_described_value_and_says_why() -> None:
    cluster = _cluster()
    made = _calibration(cluster, {"intra_bandwidth_efficiency": 0.9, "network_bandwidth_efficiency": 0.8,
                                  "network_step_latency_us": 40.0})
    in_node = calibrate_fabric(cluster, [parse_nccl_tests(_log(cluster, made, "allreduce", 8), name="in-node")])
    p = in_node.calibration.parameters
    assert p["intra_bandwidth_efficiency"].fitted and p["intra_bandwidth_efficiency"].value == pytest.approx(0.9, 0.02)
    for name in ("network_bandwidth_efficiency", "network_step_latency_us", "p2p_call_overhead_us"):
        assert not p[name].fitted and p[name].value == p[name].described and "across nodes" in p[name].note
    across = calibrate_fabric(cluster, [parse_nccl_tests(_log(cluster, made, "allreduce", 32), name="across")])
    p = across.calibration.parameters
    assert p["network_step_latency_us"].fitted and "includes call_overhead_us" in p["network_step_latency_us"].note
    assert not p["call_overhead_us"].fitted and "cannot tell it from network_step_latency_us" in \
        p["call_overhead_us"].note
    assert not p["intra_bandwidth_efficiency"].fitted  # every row crosses nodes: NVLink is not what bounds them


@settings(max_examples=40, deadline=None)
@given(intra=st.floats(0.05, 1.5), network=st.floats(0.05, 1.5), step=st.floats(0.0, 2000.0),
       call=st.floats(0.0, 10000.0), p2p=st.floats(0.0, 10000.0), row=st.integers(0, len(SIZES) - 1),
       case=st.sampled_from([("allreduce", 8), ("allreduce", 32), ("allgather", 16), ("alltoall", 32),
                             ("alltoall", 8), ("reduce-scatter", 32)]))
def test_the_fit_prices_rows_exactly_as_a_calibrated_cluster_does(intra: float, network: float, step: float,
                                                                  call: float, p2p: float, row: int,
                                                                  case: tuple[str, int]) -> None:
    """The vectorised pricing the fit minimises over is :func:`apply`, the one every consumer uses."""
    cluster = _cluster()
    collective, ranks = case
    values = {"intra_bandwidth_efficiency": intra, "network_bandwidth_efficiency": network,
              "network_step_latency_us": step, "call_overhead_us": call, "p2p_call_overhead_us": p2p}
    calibration = _calibration(cluster, values)
    calibrated = cluster.model_copy(update={"calibration": calibration})
    from flexcomm.costmodel.collective_libraries.call_cost import explain

    log = parse_nccl_tests(_log(cluster, _calibration(cluster, {}), collective, ranks), name="t")
    rows = price_logs(cluster, [log])
    vectorised = seconds(rows, calibration.values_for(rows.described_step_us))[row]
    size = size_column(collective, float(SIZES[row] // ranks if collective == "allgather" else SIZES[row]), ranks)
    one = explain(calibrated, collective, size, ranks, "nccl", {}, 1)
    assert vectorised == pytest.approx(one.seconds, rel=1e-9)


def test_calibrating_is_deterministic_and_fast_enough_to_run_on_every_log(tmp_path: Path) -> None:
    cluster = Cluster.from_file(CORPUS / "clusters" / "together-h100-1n8g-allreduce-ring-nccl2262.yaml")
    log = CORPUS / "together-h100-1n8g-allreduce-ring-nccl2262.txt"
    outputs = []
    for i in range(2):
        assert main(["calibrate", "--cluster", str(CORPUS / "clusters" /
                                                   "together-h100-1n8g-allreduce-ring-nccl2262.yaml"),
                     str(log), "-o", str(tmp_path / f"c{i}.yaml")]) == 0
        outputs.append((tmp_path / f"c{i}.yaml").read_text())
    assert outputs[0] == outputs[1]
    document = yaml.safe_load(outputs[0])
    assert document["format"] == "flexcomm-fabric-calibration/1" and document["rows"] == 31
    assert document["made_for"]["cluster"] == cluster.name


def test_a_cluster_file_that_names_a_calibration_prices_every_consumer_with_it(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture) -> None:
    source = CORPUS / "clusters" / "aws-p5-2n16g-allreduce-efa-csv.yaml"
    fit = calibrate_fabric(Cluster.from_file(source), [parse_nccl_tests(
        (CORPUS / "aws-p5-2n16g-allreduce-efa-csv.txt").read_text(), name="p5-2n")])
    save_calibration(fit.calibration, tmp_path / "p5.yaml")
    (tmp_path / "ours.yaml").write_text(f"extends: {source}\nname: ours\nnodes: 8\ncalibration: p5.yaml\n")
    ours = Cluster.from_file(tmp_path / "ours.yaml")
    described = Cluster.from_file(source).with_nodes(8)
    from flexcomm.costmodel.cost_model import CostModel

    calibrated_s = CostModel.from_cluster(ours).nccl_choice("allreduce", "nccl", 2**26, 64).seconds
    described_s = CostModel.from_cluster(described).nccl_choice("allreduce", "nccl", 2**26, 64).seconds
    efficiency = fit.calibration.value("network_bandwidth_efficiency")
    assert efficiency < 1 and calibrated_s > described_s  # a slower fabric than described, at another node count
    assert main(["cost", "--cluster", str(tmp_path / "ours.yaml"), "--collective", "allreduce", "--size", "64MiB",
                 "--ranks", "64", "--algorithm", "nccl"]) == 0
    shown = capsys.readouterr().out
    assert main(["clusters", str(tmp_path / "ours.yaml")]) == 0
    library = json.loads(capsys.readouterr().out)["collective_library"]["calibration"]
    assert library["network_bandwidth_efficiency"] == {"value": efficiency, "from": "fitted",
                                                       "uncertainty": fit.calibration.parameters[
                                                           "network_bandwidth_efficiency"].uncertainty}
    assert library["fitted_on"] == fit.calibration.logs and "64MiB" in shown


def _refusal(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_bad_calibration_inputs_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    small = CORPUS / "clusters" / "together-h100-1n8g-allreduce-ring-nccl2262.yaml"
    # a log of more GPUs than the cluster has
    line = _refusal(capsys, ["calibrate", "--cluster", str(small), str(CORPUS / "aws-p5-8n64g-allreduce-efa-csv.txt")])
    assert "64 ranks" in line and "at most 8 ranks" in line
    # a log whose GPUs are another model's
    line = _refusal(capsys, ["calibrate", "--cluster", str(small), str(CORPUS / "amd-mi350x-8g-allreduce-mpi.txt")])
    assert "AMD Instinct MI350X" in line
    # one row: nothing to fit
    text = (CORPUS / "together-h100-1n8g-allreduce-ring-nccl2262.txt").read_text().splitlines()
    first = next(r for r in text if r.strip()[:1].isdigit())
    one_row = [row for row in text if not row.strip()[:1].isdigit()] + [first]
    (tmp_path / "one.txt").write_text("\n".join(one_row) + "\n")
    assert "at least 2 rows" in _refusal(capsys, ["calibrate", "--cluster", str(small), str(tmp_path / "one.txt")])
    # a calibration file out of its physical bounds, and one made for other nodes
    fit = calibrate_fabric(Cluster.from_file(small), [parse_nccl_tests(
        (CORPUS / "together-h100-1n8g-allreduce-ring-nccl2262.txt").read_text(), name="ring")])
    save_calibration(fit.calibration, tmp_path / "h100.yaml")
    document = yaml.safe_load((tmp_path / "h100.yaml").read_text())
    document["parameters"]["intra_bandwidth_efficiency"]["value"] = 7.0
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(document))
    (tmp_path / "uses-bad.yaml").write_text(f"extends: {small}\ncalibration: bad.yaml\n")
    line = _refusal(capsys, ["clusters", str(tmp_path / "uses-bad.yaml")])
    assert "intra_bandwidth_efficiency.value within its physical bounds" in line
    (tmp_path / "other.yaml").write_text("extends: dgx-a100-80g\ncalibration: h100.yaml\n")
    line = _refusal(capsys, ["clusters", str(tmp_path / "other.yaml")])
    assert "a calibration made for these nodes" in line and "device" in line
    (tmp_path / "missing.yaml").write_text(f"extends: {small}\ncalibration: nowhere.yaml\n")
    assert "cluster.calibration" in _refusal(capsys, ["clusters", str(tmp_path / "missing.yaml")])
    ring = str(CORPUS / "together-h100-1n8g-allreduce-ring-nccl2262.txt")
    assert "nothing with --cluster" in _refusal(capsys, ["calibrate", "--cluster", str(small), "--ranks", "8", ring])


def test_transfer_reports_every_pair_beside_the_bus_bandwidth_baseline(tmp_path: Path) -> None:
    from flexcomm.experiments.published_transfer import baseline_seconds, load_run, validate_transfer

    folder = tmp_path / "corpus"
    (folder / "clusters").mkdir(parents=True)
    runs = ["aws-p5-2n16g-allreduce-efa-csv", "aws-p5-8n64g-allreduce-efa-csv", "aws-p5-2n16g-alltoall-efa-csv"]
    for run in runs:
        shutil.copy(CORPUS / f"{run}.txt", folder)
        shutil.copy(CORPUS / "clusters" / f"{run}.yaml", folder / "clusters")
    frame = validate_transfer(folder, tmp_path / "out", progress=False)
    assert len(frame) == 6 and set(frame["system"]) == {"aws-p5"}
    for name in ("transfer.csv", "transfer.md", "transfer.png", "calibrations/aws-p5-2n16g-allreduce-efa-csv.yaml"):
        assert (tmp_path / "out" / name).is_file(), name
    pair = frame[(frame["calibrated_on"] == runs[0]) & (frame["predicted_run"] == runs[1])].iloc[0]
    assert pair["change"] == "nodes"
    # the baseline: the 2-node run's busbw at each size (same sizes here) applied to the 8-node run's rank count
    two, eight = load_run(folder, runs[0]), load_run(folder, runs[1])
    bus_two = two.rows.size / two.rows.measured_s * 2 * 15 / 16
    expected = eight.rows.size / (bus_two / (2 * 63 / 64))
    assert np.allclose(baseline_seconds(two, eight), expected)
    errors = np.abs(expected / eight.rows.measured_s - 1)
    assert pair["baseline_median_abs_error"] == pytest.approx(float(np.median(errors)))
    assert math.isfinite(pair["median_abs_error"]) and pair["judged"]


def test_the_simulator_runs_a_calibrated_clusters_nccl_calls_at_the_calibrated_price() -> None:
    """The flow simulator times an NCCL call by the cost model's latency and bandwidth terms: alone on the fabric
    it equals ``nccl_choice``, calibrated or not, so a calibration reaches every simulated job."""
    import flexcomm
    from flexcomm.costmodel.cost_model import CostModel

    cluster = _cluster(nodes=2)
    calibrated = cluster.model_copy(update={"calibration": _calibration(cluster, {
        "network_bandwidth_efficiency": 0.6, "network_step_latency_us": 80.0})})
    for which in (cluster, calibrated):
        simulated = flexcomm.simulate_collective(which, "allreduce", "nccl", "256MiB", 16).seconds
        priced = CostModel.from_cluster(which).nccl_choice("allreduce", "nccl", 2**28, 16).seconds
        assert simulated == pytest.approx(priced, rel=1e-3)
    assert flexcomm.simulate_collective(calibrated, "allreduce", "nccl", "256MiB", 16).seconds > \
        1.3 * flexcomm.simulate_collective(cluster, "allreduce", "nccl", "256MiB", 16).seconds
