"""The CLI end to end: predictions, JSON, the what-if study, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from flexcomm.experiments.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cost_json_has_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "cost", "--collective", "allreduce", "--algorithm", "ring", "--ranks", "8",
                           "--size", "64MiB", "--latency", "10us", "--bandwidth", "10Gbit/s", "--json")
    assert code == 0
    result = json.loads(out)
    expected_bw = 2 * 7 / 8 * 64 * 2**20 / 1.25e9
    assert result["latency_s"] == pytest.approx(14 * 10e-6)
    assert result["bandwidth_s"] == pytest.approx(expected_bw)
    assert result["seconds"] == pytest.approx(14e-5 + expected_bw)


def test_cost_plain_text_names_the_parts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "cost", "--ranks", "4", "--size", "1MiB", "--latency", "2ms",
                           "--bandwidth", "1Gbit/s")
    assert code == 0
    assert "allreduce/ring over 4 ranks" in out and "latency 12ms" in out


def test_cost_with_a_cluster_uses_its_links(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "cost", "--ranks", "8", "--size", "64MiB", "--cluster", "8x1-10gbe", "--json")
    assert code == 0
    from flexcomm.costmodel.cluster import load_cluster

    link = load_cluster("8x1-10gbe").inter_link
    expected = 14 * link.latency_s + 2 * 7 / 8 * 64 * 2**20 / link.bandwidth_Bps
    assert json.loads(out)["seconds"] == pytest.approx(expected)


def test_cost_of_a_compressed_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "cost", "--scheme", "topk-ag", "--ratio", "0.01", "--ranks", "8",
                           "--size", "400MB", "--latency", "10us", "--bandwidth", "10Gbit/s", "--json")
    assert code == 0
    k = 1e6  # 1% of 1e8 fp32 elements
    assert json.loads(out)["bandwidth_s"] == pytest.approx(7 * k * 8 / 1.25e9)


@pytest.mark.parametrize(
    "argv,field",
    [
        (["cost", "--ranks", "8", "--size", "64MiB", "--latency", "10us", "--bandwidth", "fast"], "bandwidth"),
        (["cost", "--ranks", "8", "--size", "64MiB", "--latency", "10us", "--bandwidth", "-5Gbit/s"], "bandwidth"),
        (["cost", "--ranks", "8", "--size", "64Mib/s", "--latency", "10us", "--bandwidth", "1Gbit/s"], "size"),
        (["cost", "--ranks", "0", "--size", "1MiB", "--latency", "10us", "--bandwidth", "1Gbit/s"], "ranks"),
        (["cost", "--ranks", "8", "--size", "1MiB", "--latency", "soon", "--bandwidth", "1Gbit/s"], "latency"),
        (["cost", "--collective", "allscatter", "--ranks", "8", "--size", "1MiB", "--latency", "1us",
          "--bandwidth", "1Gbit/s"], "collective"),
        (["cost", "--algorithm", "butterfly", "--ranks", "8", "--size", "1MiB", "--latency", "1us",
          "--bandwidth", "1Gbit/s"], "algorithm"),
        (["cost", "--ranks", "8", "--size", "1MiB"], "bandwidth"),
        (["cost", "--ranks", "8", "--size", "1MiB", "--cluster", "no-such-cluster"], "cluster"),
        (["cost", "--ranks", "64", "--size", "1MiB", "--cluster", "8x1-10gbe"], "ranks"),
        (["cost", "--ranks", "eight", "--size", "1MiB"], "ranks"),
        (["whatif", "--index-dtype", "int33"], "index_dtype"),
        (["whatif", "--shard", "4/4"], "shard"),
        (["validate", "--bandwidths", "fast"], "bandwidth"),
        (["whatif", "--shard", "a/b"], "shard"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], field: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("flexcomm: error:") and field in lines[0]
    assert "Traceback" not in err and out == ""


def test_malformed_cluster_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnodes: 2\ndevices_per_node: 1\ninter_link: {latency: 1us, bandwidth: lots}\n")
    code, _, err = run_cli(capsys, "cost", "--ranks", "2", "--size", "1MiB", "--cluster", str(bad))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cluster" in err


def test_whatif_writes_a_tidy_csv_and_maps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "whatif", "--out", str(tmp_path))
    assert code == 0
    table = pd.read_csv(tmp_path / "whatif.csv")
    assert set(table["scheme"]) == {"dense", "topk-ag", "topk-ar"}
    assert table["ranks"].min() == 2 and table["ranks"].max() == 1024
    assert table["ratio"].max() == pytest.approx(0.1) and table["ratio"].min() == pytest.approx(1e-4)
    assert table["bandwidth_gbit_s"].min() == pytest.approx(1)
    assert table["bandwidth_gbit_s"].max() == pytest.approx(10 ** 3.5)  # the maps reach NVLink's speed
    # exactly one best scheme per configuration, and it is the fastest one
    keys = ["model", "ratio", "bandwidth_Bps", "latency_s", "ranks"]
    assert (table.groupby(keys)["is_best"].sum() == 1).all()
    fastest = table.loc[table.groupby(keys)["seconds"].idxmin()]
    assert fastest["is_best"].all()
    for name in ["whatif_resnet50.png", "whatif_vgg16.png", "whatif_transformer-1.3b.png", "whatif_crossover.png"]:
        assert (tmp_path / name).stat().st_size > 10_000
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["configurations"] * 3 == len(table)


def test_whatif_on_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run_cli(capsys, "whatif", "--cluster", "4x8-a100-ib", "--out", str(tmp_path))
    assert code == 0
    table = pd.read_csv(tmp_path / "whatif.csv")
    assert table["ranks"].max() == 32
    assert (tmp_path / "whatif_cluster.png").exists()


def test_console_script_exits_2_without_traceback(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("flexcomm")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "flexcomm.experiments.cli"]
    proc = subprocess.run([*cmd, "cost", "--ranks", "8", "--size", "1 parsec"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "size" in proc.stderr


def test_whatif_shards_concatenate_to_the_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "whatif", "--no-plots", "--out", str(tmp_path / "all"))[0] == 0
    parts = []
    for k in range(3):
        assert run_cli(capsys, "whatif", "--shard", f"{k}/3", "--out", str(tmp_path / f"p{k}"))[0] == 0
        parts.append(pd.read_csv(tmp_path / f"p{k}" / "whatif.csv"))
    keys = ["model", "scheme", "ratio", "bandwidth_Bps", "latency_s", "ranks"]
    whole = pd.read_csv(tmp_path / "all" / "whatif.csv").sort_values(keys).reset_index(drop=True)
    merged = pd.concat(parts).sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(whole, merged)


def test_allgather_bus_bandwidth_follows_nccl_tests(capsys: pytest.CaptureFixture[str]) -> None:
    """Allgather of m per rank over a 1.25 GB/s link: the bandwidth term is (p-1) m / B, and
    nccl-tests' bus bandwidth (p-1)/p * (p m) / t then equals the link bandwidth exactly."""
    code, out, _ = run_cli(capsys, "cost", "--collective", "allgather", "--ranks", "8", "--size", "8MiB",
                           "--latency", "0s", "--bandwidth", "10Gbit/s", "--json")
    assert code == 0
    assert json.loads(out)["bus_bandwidth_Bps"] == pytest.approx(1.25e9)


def test_every_cluster_command_takes_a_calibration_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A profile fitted at 1 Gbit/s makes whatif and simulate price the 10 GbE cluster at 1 Gbit/s."""
    from flexcomm.costmodel.calibration import fit, synthetic_measurements

    profile = tmp_path / "profile.json"
    fit(synthetic_measurements("allreduce", "ring", 50e-6, 1 / 1.25e8, noise=0.0)).save(profile)
    assert run_cli(capsys, "whatif", "--cluster", "8x1-10gbe", "--profile", str(profile), "--no-plots",
                   "--out", str(tmp_path / "w"))[0] == 0
    table = pd.read_csv(tmp_path / "w" / "whatif.csv")
    assert table["bandwidth_Bps"].unique().tolist() == pytest.approx([1.25e8])
    assert table["latency_s"].unique().tolist() == pytest.approx([50e-6])
    code, out, _ = run_cli(capsys, "simulate", "--cluster", "8x1-10gbe", "--profile", str(profile),
                           "--workload", "resnet50", "--iterations", "2", "--json")
    assert code == 0
    slow = json.loads(out)["summary"]
    code, out, _ = run_cli(capsys, "simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50",
                           "--iterations", "2", "--json")
    assert slow["median_time_s"] > json.loads(out)["summary"]["median_time_s"]
    code, _, err = run_cli(capsys, "whatif", "--profile", str(profile), "--out", str(tmp_path / "x"))
    assert code == 2 and "profile" in err


def test_unusable_output_path_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me\n")
    code, _, err = run_cli(capsys, "whatif", "--no-plots", "--out", str(blocker / "sub"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "a-file" in err
    assert blocker.read_text() == "keep me\n"  # nothing already written is touched


def test_cli_option_lists_match_the_modules_that_use_them() -> None:
    """`experiments.options` keeps start-up light; the lists must stay the ones the modules act on."""
    from flexcomm.compression.moo import RULES
    from flexcomm.experiments import options
    from flexcomm.experiments.reproductions import REPRODUCTIONS

    assert options.MOO_RULES == RULES
    assert options.REPRODUCTION_IDS == tuple(sorted(REPRODUCTIONS, key=lambda k: REPRODUCTIONS[k].number))
    assert [REPRODUCTIONS[k].number for k in options.REPRODUCTION_IDS] == list(range(1, 10))


def test_cli_start_up_does_not_import_torch() -> None:
    code = ("import sys; from flexcomm.experiments.cli import build_parser; build_parser(); "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_json_output_is_always_valid_json(capsys: pytest.CaptureFixture[str]) -> None:
    """--json never prints Infinity or NaN (not JSON: other languages' readers refuse them)."""
    import numpy as np

    from flexcomm.experiments.commands.common import print_json

    print_json({"a": float("inf"), "b": [float("nan"), 1.5, np.float64("-inf")], "c": {"d": (2, float("nan"))}})
    text = capsys.readouterr().out
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text) == {"a": None, "b": [None, 1.5, None], "c": {"d": [2, None]}}


@pytest.mark.parametrize("argv", [["simulate"], ["plan"], ["study"], ["reproduce"], ["train-emulated"], ["validate"],
                                  ["place"], ["controller", "train"], ["controller", "evaluate"]])
def test_every_long_command_takes_no_progress(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    assert "--no-progress" in capsys.readouterr().out


def test_progress_bars_stay_off_pipes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Captured output is not a terminal: no tqdm bar is written into it (a log or a pipe)."""
    assert main(["reproduce", "megatron", "--out", str(tmp_path / "r")]) == 0
    captured = capsys.readouterr()
    assert "|" not in captured.err and "it/s" not in captured.err and "study/s" not in captured.err, captured.err


@pytest.mark.parametrize(("argv", "field"), [
    (["cost", "--ranks", "8", "--size", "64MiB", "--latency", "10", "--bandwidth", "10Gbit/s"], "latency"),
    (["cost", "--ranks", "8", "--size", "64MiB", "--latency", "10us", "--bandwidth", "100"], "bandwidth"),
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--optimizer-time", "5"], "optimizer-time"),
])
def test_a_bare_number_where_a_unit_belongs_is_refused_with_the_form(argv: list[str], field: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``--latency 10`` was priced as 10 seconds without a word: a duration or bandwidth needs its unit."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"flexcomm: error: {field}: got ") and "with its unit" in err[0]


def test_a_size_that_reads_like_a_parameter_count_gets_a_hint_and_busbw_is_in_gb_s(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--ranks", "8", "--size", "7B", "--latency", "10us", "--bandwidth", "10Gbit/s"]) == 0
    captured = capsys.readouterr()
    assert captured.err.strip() == ("flexcomm: note: --size 7B is 7 bytes; for the gradient of a 7-billion-parameter "
                                    "model write --size 28GB (fp32) or 14GB (16-bit)")
    assert main(["cost", "--ranks", "8", "--size", "64MiB", "--latency", "10us", "--bandwidth", "10Gbit/s"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.strip().endswith("; busbw 1.25 GB/s")  # as nccl-tests prints it
