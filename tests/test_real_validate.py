"""flexcomm validate (tiny: 2 ranks, 2 sizes, loopback; one testbed variant as root), and the GPU check script.

Loopback timings on 2 cores are noise, so only the plumbing is asserted: every measured point has a
prediction from the calibrated model, the link and the simulator with a finite error, and the CSV, markdown,
PNG and JSON are written.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import needs_netns

from flexcomm.experiments.cli import main
from flexcomm.real_backend.testbed import list_namespaces
from flexcomm.real_backend.validate import TABLE_COLUMNS, analyze, parse_bandwidths, run_validation

ROOT = Path(__file__).resolve().parents[1]
GPU_CHECK = ROOT / "real_backend" / "gpu_check.sh"
COLLECTIVES = {"allreduce", "allgather", "broadcast", "reduce-scatter"}


@pytest.fixture(autouse=True)
def _private_state_dir(private_testbed_state: Path) -> None:
    """Every test here keeps its testbed state files to itself."""


def _check_outputs(out: Path, condition: str, strategies: list[str]) -> pd.DataFrame:
    table = pd.read_csv(out / "errors.csv")
    assert tuple(table.columns) == TABLE_COLUMNS
    rows = table[table["condition"] == condition]
    bench = rows[rows["collective"] != "ddp-step"]
    assert set(bench["collective"]) == COLLECTIVES
    assert sorted(set(bench["bytes"])) == [2**20, 2**21]
    for kind in ("model", "link", "sim"):
        assert np.isfinite(bench[f"rel_error_{kind}"]).all(), kind
    ddp = rows[rows["collective"] == "ddp-step"]
    assert list(ddp["algorithm"]) == strategies
    assert np.isfinite(ddp["rel_error_model"]).all() and np.isfinite(ddp["rel_error_sim"]).all()
    assert (ddp["compute_s"] > 0).all()
    markdown = (out / "errors.md").read_text()
    assert "## Summary" in markdown and f"| {condition} | collectives >= 1 MiB | 8 |" in markdown
    assert (out / "predicted_vs_measured.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    entry = next(c for c in summary["conditions"] if c["condition"] == condition)
    assert entry["collectives_ge_1MiB"]["model"]["points"] == 8
    return table


def test_tiny_loopback_validation_writes_the_error_table(tmp_path: Path) -> None:
    out = tmp_path / "validate"
    result = run_validation(out, ranks=2, sizes="1MiB,2MiB", warmup=1, iters=2, strategies="dense,topk-ag",
                            ratio=0.01, steps=4, hidden="64", quiet=True, timeout_s=120)
    assert result.failures == []
    table = _check_outputs(out, "loopback", ["dense", "topk-ag"])
    # with two sizes there is nothing left to fit on after leaving one out: said so in the table
    assert set(table[table["collective"] != "ddp-step"]["fit"]) == {"in-sample (too few sizes to leave one out)"}
    # the analysis is a pure function of the folder: re-running it gives the same table
    again, _ = analyze(out)
    pd.testing.assert_frame_equal(again.reset_index(drop=True), result.table.reset_index(drop=True))


@needs_netns
def test_tiny_testbed_validation_predicts_and_removes_its_testbed(tmp_path: Path) -> None:
    before = set(list_namespaces())
    out = tmp_path / "validate"
    result = run_validation(out, testbed=True, loopback=False, bandwidths="1Gbit/s", ranks=2, sizes="1MiB,2MiB",
                            warmup=1, iters=2, strategies="topk-ag", ratio=0.01, steps=4, hidden="64", quiet=True,
                            timeout_s=120)
    assert result.failures == []
    assert set(list_namespaces()) == before  # always cleaned up
    table = _check_outputs(out, "1Gbit/s", ["topk-ag"])
    bench = table[table["collective"] == "allreduce"]
    # structure only: how close the link prediction comes is a measurement (`flexcomm validate`, the docs'
    # validation table), and under CPU load it drifts, so no bound on it here
    assert np.isfinite(bench["rel_error_link"]).all() and (bench["predicted_link_s"] > 0).all()
    assert (table["bandwidth"].dropna() == 125e6).all()
    # the naive baseline stands beside every testbed row, DDP steps included, and the report compares them
    assert (table["predicted_nominal_s"] > 0).all() and np.isfinite(table["rel_error_nominal"]).all()
    assert "- 1Gbit/s: the model is closer in " in (out / "errors.md").read_text()


def test_the_baseline_lines_name_the_classes_where_the_naive_guess_is_closer() -> None:
    from flexcomm.real_backend.validate import baseline_lines

    def stats(model: float, naive: float | None) -> dict:
        return {"model": {"median_abs": model}, "nominal": {"median_abs": naive}}

    summary = {"conditions": [
        {"condition": "1Gbit/s", "collectives_ge_1MiB": stats(0.05, 0.03),
         "per_collective": {"allgather": stats(0.1, 0.3), "broadcast": stats(0.02, 0.02)},
         "ddp_steps": stats(0.08, 0.16)},
        {"condition": "loopback", "collectives_ge_1MiB": stats(0.2, None), "per_collective": {},
         "ddp_steps": stats(0.1, None)}]}
    (line,) = baseline_lines(summary)  # loopback has no nominal rate: no baseline, no line
    assert line.startswith("1Gbit/s: the model is closer in 2 of 4 classes; not for collectives >= 1 MiB, "
                           "broadcast >= 1 MiB (")  # a tie is not a win
    assert "allgather >= 1 MiB 10.0% vs 30.0%" in line


def test_bad_validate_arguments_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--ranks", "1"], ["--sizes", "big"], ["--strategies", "bogus"], ["--testbed", "--bandwidths", "x"],
                 ["--no-loopback"]):
        assert main(["validate", "--out", str(tmp_path / "v"), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("flexcomm: error:") and "\n" not in err
    assert parse_bandwidths("100Mbit/s, 1Gbit/s") == [12.5e6, 125e6]


# --- the GPU check ------------------------------------------------------------------------------------


def test_gpu_check_script_parses() -> None:
    subprocess.run(["bash", "-n", str(GPU_CHECK)], check=True)
    assert os.access(GPU_CHECK, os.X_OK)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine: the script would really run")
def test_gpu_check_says_no_cuda_and_exits_69_without_a_gpu(tmp_path: Path) -> None:
    proc = subprocess.run([str(GPU_CHECK), str(tmp_path / "gpu")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 69
    assert "gpu_check: no CUDA: nvidia-smi not found" in proc.stderr
    assert not (tmp_path / "gpu").exists()  # nothing was run


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees CUDA here")
def test_gpu_check_without_a_cuda_torch_exits_69_too(tmp_path: Path) -> None:
    """A driver but a CPU-only torch (this venv): the second check stops it, with its own message."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'GPU 0: fake'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    proc = subprocess.run([str(GPU_CHECK), str(tmp_path / "gpu")], capture_output=True, text=True, timeout=120,
                          env=env, cwd=ROOT)
    assert proc.returncode == 69, proc.stderr
    assert "gpu_check: no CUDA:" in proc.stderr and "torch.cuda.is_available() is False" in proc.stderr


def test_gpu_topk_runs_on_the_cpu_too(tmp_path: Path) -> None:
    from flexcomm.experiments.commands.gpu_topk import main as gpu_topk

    out = tmp_path / "topk.json"
    assert gpu_topk(["--device", "cpu", "--sizes", "20000", "--ratios", "0.01", "--repeats", "1", "--numel", "4000",
                     "--workers", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["selection"][0]["k"] == 200 and result["selection"][0]["topk_s"] > 0
    assert {r["scheme"] for r in result["exchanges"]} >= {"dense", "topk-ag", "topk-ar"}
    if not torch.cuda.is_available():
        assert gpu_topk(["--device", "cuda"]) == 69


def test_gpu_report_pastes_what_the_check_wrote_and_says_what_is_missing(tmp_path: Path) -> None:
    """The report runs on the CPU from the check's files; absent steps are named, not invented."""
    from flexcomm.real_backend.gpu_report import main as gpu_report

    out = tmp_path / "gpu"
    (out / "ddp" / "builtin").mkdir(parents=True)
    (out / "ddp" / "dense").mkdir()
    (out / "environment.txt").write_text("torch 2.13 cuda 12.8 nccl (2, 27, 3)\n")
    (out / "status.txt").write_text("nccl-bench exit=0 seconds=40\n")
    (out / "nccl_collectives.csv").write_text(
        "collective,algorithm,ranks,bytes,seconds,link_class,rep,backend,algbw_Bps,busbw_Bps,implementation\n"
        "allreduce,ring,8,1048576,0.0001,intra,0,nccl,1e10,1.75e10,x\n"
        "allreduce,ring,8,268435456,0.002,intra,0,nccl,1.3e11,2.4e11,x\n")
    (out / "ddp" / "builtin" / "summary.json").write_text('{"median_step_s": 0.010, "median_comm_s": null}')
    (out / "ddp" / "dense" / "summary.json").write_text('{"median_step_s": 0.0104, "median_comm_s": 0.004, '
                                                        '"solo_step_s": 0.008}')
    assert gpu_report([str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "| allreduce | 8 | 256 MiB | 2.00 ms | 240.0 GB/s |" in text
    assert "| dense | 10.40 ms | 1.040x |" in text
    assert "Top-k on the GPU: not measured (no topk.json)." in text
    assert "Compute model: not measured (no gpu_compute.csv)." in text
    assert "no validation" in text
    (out / "gpu_compute.csv").write_text(
        "section,case,m,n,k,count,dtype,measured_s,predicted_s,rel_error,device,catalog_device,torch,cuda\n"
        "gemm,a,1,1,1,1,bfloat16,0.001,0.0011,0.1,NVIDIA H200,H200-SXM,2.11,13.0\n"
        "gemm,b,1,1,1,1,bfloat16,0.002,0.0015,-0.25,NVIDIA H200,H200-SXM,2.11,13.0\n")
    assert gpu_report([str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "On NVIDIA H200 (catalog: H200-SXM):" in text and "| gemm | 2 | 2 | 17.5% | 25.0% |" in text
    assert "GEMM targets (median 10%, worst 25%) on NVIDIA H200: not met" in text
    assert gpu_report([str(tmp_path / "absent")]) == 2


def test_collectives_that_cost_the_same_all_show_in_the_figure(
        tmp_path: Path, every_saved_figure_reads_at_a_glance: dict[str, list[str]]) -> None:
    """gloo's reduce-scatter is an allreduce, and with 2 ranks a broadcast costs what both do: their points
    coincide, and each collective's ring must still show around the smaller ones (it once hid one)."""
    from flexcomm.real_backend.validate import plot

    rows = [{"collective": c, "condition": cond, "measured_s": t / speed, "predicted_model_s": 1.05 * t / speed,
             "predicted_sim_s": 0.97 * t / speed, "predicted_nominal_s": 0.8 * t / speed}
            for c in ("allgather", "allreduce", "broadcast", "reduce-scatter")
            for cond, speed in (("100Mbit/s", 1.0), ("1Gbit/s", 10.0)) for t in (0.1, 0.2)]
    plot(pd.DataFrame(rows), tmp_path / "predicted_vs_measured.png")
    assert every_saved_figure_reads_at_a_glance["predicted_vs_measured.png"] == []


def test_the_predicted_against_measured_figure_reads_for_any_measured_range(tmp_path: Path) -> None:
    """The testbed's measured seconds set the axes: one notation per axis whatever they span (an axis from
    2e-6 to 5e-4 read "5x10^-5" beside "0.0001"), labels laid out before the layout (they poked into the
    other panel); every figure saved in a test goes through the figure checks."""
    from flexcomm.real_backend.validate import plot

    rng = np.random.default_rng(4)
    for k in range(8):
        base = 10 ** rng.uniform(-5.5, -1)
        rows = []
        for collective in ("allreduce", "allgather", "broadcast"):
            for condition in ("no shaping", "1Gbit/s"):
                for _ in range(4):
                    m = base * 10 ** rng.uniform(0, 2)
                    rows.append({"collective": collective, "condition": condition, "measured_s": m,
                                 "predicted_model_s": m * rng.uniform(0.7, 1.3),
                                 "predicted_sim_s": m * rng.uniform(0.7, 1.3),
                                 "predicted_nominal_s": m * rng.uniform(0.3, 1.0)})
        plot(pd.DataFrame(rows), tmp_path / f"predicted_vs_measured_{k}.png")
    assert len(list(tmp_path.glob("*.png"))) == 8
