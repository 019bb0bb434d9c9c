"""bench-collectives: size parsing, the append-and-flush CSV, and a real 2-rank sweep that calibrates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from flexcomm.costmodel.calibration import load_measurements
from flexcomm.costmodel.collectives import BUS_BANDWIDTH_FACTOR
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.real_backend.bench import (
    CSV_COLUMNS,
    MeasurementWriter,
    algorithm_bytes,
    check_output,
    element_count,
    parse_collectives,
    parse_sizes,
)


def test_sizes_double_from_min_to_max_or_come_as_a_list() -> None:
    assert parse_sizes("1KiB:8KiB") == [1024, 2048, 4096, 8192]
    assert parse_sizes("1KiB:9KiB") == [1024, 2048, 4096, 8192]
    assert parse_sizes("1KiB:16KiB:4") == [1024, 4096, 16384]
    assert parse_sizes("4MiB,1KiB,4MiB") == [1024, 4 * 2**20]
    assert parse_sizes("64KiB:64KiB") == [65536]
    for bad in ["", "8KiB:1KiB", "0:1KiB", "1KiB:2KiB:1", "1KiB:2KiB:x", "a:b", "2B", "1:2:3:4", "1KiB:1TiB:1.1"]:
        with pytest.raises(InputError):
            parse_sizes(bad)


def test_collective_names_are_validated() -> None:
    assert parse_collectives("allreduce, reduce_scatter,allreduce") == ["allreduce", "reduce-scatter"]
    with pytest.raises(InputError):
        parse_collectives("alltoall")


def test_sizes_follow_the_cost_model_conventions() -> None:
    assert element_count("reduce-scatter", 1000, 3) == 249  # whole elements, a multiple of the ranks
    assert element_count("allgather", 4096, 4) == 1024  # each rank's contribution
    assert algorithm_bytes("allgather", 4096, 4) == 4 * 4096  # nccl-tests' S: the gathered output
    assert algorithm_bytes("allreduce", 4096, 4) == 4096


def test_rows_are_appended_with_one_header_and_foreign_files_refused(tmp_path: Path) -> None:
    out = tmp_path / "m.csv"
    row = {c: 1 for c in CSV_COLUMNS} | {"collective": "allreduce", "algorithm": "ring", "seconds": 0.5,
                                         "link_class": "intra", "backend": "gloo", "implementation": "x"}
    for _ in range(2):  # two runs appending to the same file
        writer = MeasurementWriter(check_output(out))
        writer.write(row)
        # Flushed at once: another reader sees the row before the writer is closed.
        assert out.read_text().splitlines()[-1].startswith("allreduce,ring,")
        writer.close()
    lines = out.read_text().splitlines()
    assert lines.count(",".join(CSV_COLUMNS)) == 1 and len(lines) == 3
    foreign = tmp_path / "other.csv"
    foreign.write_text("a,b\n1,2\n")
    with pytest.raises(InputError):
        check_output(foreign)


@pytest.mark.timeout(90)
def test_two_rank_sweep_writes_a_calibration_csv(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "measurements.csv"
    code = main(["bench-collectives", "--nproc", "2", "--sizes", "1KiB:64KiB", "--warmup", "1", "--iters", "2",
                 "--out", str(out), "--op-timeout", "30s", "--timeout", "80s", "--nccl-tests-dir",
                 str(tmp_path / "logs")])
    printed = capfd.readouterr().out  # the ranks print to the real stdout
    assert code == 0
    assert "busbw" in printed and "reduce-scatter" in printed
    table = load_measurements(out)
    assert list(pd.read_csv(out).columns) == list(CSV_COLUMNS)
    assert set(table["collective"]) == {"allreduce", "allgather", "broadcast", "reduce-scatter"}
    assert len(table) == 4 * 7 * 2  # collectives x sizes (1 KiB .. 64 KiB) x repetitions
    assert set(table["ranks"]) == {2} and set(table["link_class"]) == {"intra"}
    assert (table["seconds"] > 0).all()
    algorithms = dict(zip(table["collective"], table["algorithm"], strict=False))
    assert algorithms == {"allreduce": "ring", "allgather": "ring", "broadcast": "binomial", "reduce-scatter": "ring"}
    for collective, rows in table.groupby("collective"):
        factor = float(BUS_BANDWIDTH_FACTOR[collective](np.float64(2)))
        data = rows["bytes"] * (2 if collective == "allgather" else 1)
        algbw, busbw = rows["algbw_Bps"].astype(float), rows["busbw_Bps"].astype(float)  # extra columns stay text
        np.testing.assert_allclose(algbw, data / rows["seconds"], rtol=1e-9)
        np.testing.assert_allclose(busbw, algbw * factor, rtol=1e-9)
    assert main(["calibrate", str(out), "-o", str(tmp_path / "profile.json")]) == 0
    assert (tmp_path / "profile.json").exists()
    # what a GPU user's own machine does (issue 43): the benchmark's nccl-tests logs teach a cluster's NCCL model
    logs = sorted(str(p) for p in (tmp_path / "logs").glob("*.txt"))
    assert len(logs) == 4
    assert main(["calibrate", "--cluster", "pcie-4x-rtx4090", *logs, "-o", str(tmp_path / "ours.yaml")]) == 0
    written = yaml.safe_load((tmp_path / "ours.yaml").read_text())
    assert written["rows"] == 4 * 7 and len(written["logs"]) == 4
    assert written["parameters"]["network_step_latency_us"]["fitted"] is False  # one node: no network rows


def test_bad_requests_exit_2_before_starting_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.csv"
    assert main(["bench-collectives", "--sizes", "64KiB:1KiB", "--out", str(out)]) == 2
    assert main(["bench-collectives", "--collectives", "gossip", "--out", str(out)]) == 2
    assert main(["bench-collectives", "--iters", "0", "--sizes", "1KiB", "--out", str(out)]) == 2
    assert main(["bench-collectives", "--testbed", "ffffff", "--sizes", "1KiB", "--out", str(out)]) == 2
    assert not out.exists()
    assert all(line.startswith("flexcomm: error:") for line in capsys.readouterr().err.strip().splitlines())
