"""Inputs that were accepted although they mean nothing (issue 31, item 6): each is one line naming its field,
exit 2, before any work, and the option refusals of the torch-backed commands come before torch is imported."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import Cluster, check_topology, cluster_names, load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import parse_bandwidth, parse_flops, parse_ratio, parse_size, parse_time
from flexcomm.experiments.cli import build_parser, main

CLUSTERS = Path(__file__).resolve().parents[1] / "costmodel" / "clusters"


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line a refused command prints (asserting exit 2, one line, no traceback)."""
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


# --- cluster files: the topology checks a job makes, made when the file is loaded ---------------------------

def _yaml_with(name: str, old: str, new: str) -> str:
    text = (CLUSTERS / f"{name}.yaml").read_text()
    assert old in text
    return text.replace(old, new)


TORUS_4x4x3 = _yaml_with("torus-4x4x4", "dims: [4, 4, 4]", "dims: [4, 4, 3]")
GRAPH_9_HOSTS = _yaml_with("graph-dumbbell", "hosts: [h0, h1, h2, h3, h4, h5, h6, h7]",
                           "hosts: [h0, h1, h2, h3, h4, h5, h6, h7, h8]").replace(
    "    links:\n", "    links:\n      - {between: [h8, tor1], bandwidth: 100Gbit/s, latency: 1us}\n")
NVLINK_1024 = """name: nvl-1024
nodes: 36
devices_per_node: 4
device: {name: GB200-186GB, peak_flops: 2500TFLOP/s, memory: 186GB}
intra_link: {latency: 2us, bandwidth: 900GB/s}
inter_link: {latency: 1us, bandwidth: 400Gbit/s}
topology: {kind: nvlink-domain, domain_size: 1024}
"""
NVL72_PAIR_12 = "extends: gb200-nvl72\nname: pair-12\nnodes: 36\ntopology: {kind: nvlink-domain, domain_size: 12}\n"
H100_DOMAIN_12 = "extends: dgx-h100\nname: h100-12\ngpu_fabric: {nvlink_domain: 12}\n"


@pytest.mark.parametrize(("text", "field"), [
    (TORUS_4x4x3, "topology.dims"),
    (GRAPH_9_HOSTS, "topology.graph.hosts"),
    (NVLINK_1024, "topology.domain_size"),
    (NVL72_PAIR_12, "cluster.topology.domain_size"),
    (H100_DOMAIN_12, "cluster.gpu_fabric.nvlink_domain"),
], ids=["torus-dims", "graph-hosts", "nvlink-1024", "nvlink-12-vs-72", "nvlink-12-of-8"])
def test_clusters_file_runs_the_topology_checks_a_job_runs(text: str, field: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        Cluster.from_file(path)
    assert info.value.field == field
    assert refusal(capsys, "clusters", str(path)).startswith(f"flexcomm: error: {field}: ")


def test_a_topology_that_fits_its_nodes_still_loads_and_its_fabric_is_the_one_jobs_use(tmp_path: Path) -> None:
    path = tmp_path / "torus.yaml"
    path.write_text(_yaml_with("torus-4x4x4", "dims: [4, 4, 4]", "dims: [8, 8]"))
    cluster = Cluster.from_file(path)
    assert "fabric" in cluster.__dict__  # built once, at load
    assert cluster.fabric.graph.number_of_nodes() > 0


@pytest.mark.parametrize("name", [n for n in cluster_names() if n != "superpod-h100-128k"])
def test_every_shipped_cluster_passes_the_load_time_topology_check(name: str) -> None:
    check_topology(load_cluster(name))


def test_a_graph_without_links_is_told_it_needs_cables_not_link_classes(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    text = (CLUSTERS / "graph-dumbbell.yaml").read_text()
    path = tmp_path / "nolinks.yaml"
    path.write_text(text[: text.index("    links:")])
    line = refusal(capsys, "clusters", str(path))
    assert line.startswith("flexcomm: error: cluster.topology.graph.links: got nothing; expected a list of cables")
    assert "link class" not in line


def test_a_graph_cable_without_ends_names_vertices_not_node_indices(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    text = (CLUSTERS / "graph-dumbbell.yaml").read_text().replace("{between: [h0, tor0], ", "{")
    path = tmp_path / "noends.yaml"
    path.write_text(text)
    line = refusal(capsys, "clusters", str(path))
    assert "cluster.topology.graph.links.0.between: got nothing" in line and "vertex names" in line


# --- options accepted and ignored --------------------------------------------------------------------------

def _namespace(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(("fail", "steps", "words"), [
    ("rank5@1", "20", "a rank 0..1 of the first round's 2 ranks"),
    ("rank1@20", "20", "a step 0..19"),
])
def test_train_ddp_refuses_a_failure_that_would_never_happen(fail: str, steps: str, words: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    line = refusal(capsys, "train-ddp", "--strategy", "dense", "--out", str(tmp_path / "o"), "--nproc", "2",
                   "--steps", steps, "--fail", fail)
    assert line.startswith("flexcomm: error: fail: ") and words in line
    assert not (tmp_path / "o").exists()


def test_train_ddp_accepts_the_last_rank_at_the_last_step() -> None:
    from flexcomm.experiments.commands.train_ddp import _check_checkpointed

    args = _namespace("train-ddp", "--strategy", "dense", "--out", "o", "--steps", "20", "--fail", "rank1@19")
    assert _check_checkpointed(args) == (None, None, 2)
    elastic = _namespace("train-ddp", "--strategy", "dense", "--out", "o", "--elastic", "2:4", "--fail", "rank3@0")
    assert _check_checkpointed(elastic) == (2, 4, 4)


def test_two_strategies_with_checkpoints_are_refused_as_strategies_not_as_a_ratio(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refusal(capsys, "train-ddp", "--strategy", "dense,topk-ag", "--checkpoint-every", "5", "--out",
                   str(tmp_path / "o"))
    assert line.startswith("flexcomm: error: strategy: got 'dense,topk-ag'; expected one strategy")


@pytest.mark.parametrize(("argv", "field"), [
    (["launch", "--nproc", "1", "--report", "{tmp}/r", "--", "true"], "report"),
    (["launch", "--nproc", "2", "--elastic", "1:2", "--master-port", "29500", "--", "true"], "master-port"),
    (["train-ddp", "--strategy", "dense", "--ratio", "0", "--out", "{tmp}/o"], "ratio"),
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--scheme", "dense", "--ratio", "0"], "ratio"),
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--ratio", "1.5"], "ratio"),
    (["validate", "--ratio", "nan", "--out", "{tmp}/v"], "ratio"),
    (["cost", "--ranks-per-node", "3", "--ranks", "8", "--size", "1MiB", "--latency", "1us", "--bandwidth",
      "1Gbit/s"], "ranks"),
    (["cost", "--ranks", "8", "--size", "1MiB", "--latency", "1e-400s", "--bandwidth", "1Gbit/s"], "latency"),
    (["cost", "--ranks", "8", "--size", "1e-400MiB", "--latency", "1us", "--bandwidth", "1Gbit/s"], "size"),
    (["plan", "--model", "gpt", "--batch-size", "1000000000000", "--out", "{tmp}/p"], "batch-size"),
    (["plan", "--model", "gpt", "--batch-size", "1e12", "--out", "{tmp}/p"], "batch-size"),
    (["plan", "--model", "resnet50", "--tp", "2", "--out", "{tmp}/p"], "tp"),
    (["plan", "--model", "resnet50", "--memory-fraction", "0", "--out", "{tmp}/p"], "memory-fraction"),
    (["launch", "--nproc", "1", "--backend", "mpi", "--", "true"], "backend"),
    (["train-ddp", "--out", "{tmp}/o"], "strategy"),
])
def test_nonsense_is_one_line_naming_its_field(argv: list[str], field: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    line = refusal(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert line.startswith(f"flexcomm: error: {field}: "), line
    assert not any(tmp_path.iterdir()), "a refused command created files"


def test_the_batch_limit_names_its_variable_and_can_be_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexcomm.costmodel.limits import MAX_GLOBAL_BATCH

    with pytest.raises(InputError, match="FLEXCOMM_MAX_GLOBAL_BATCH"):
        MAX_GLOBAL_BATCH.check("batch-size", 2**20 + 1)
    MAX_GLOBAL_BATCH.check("batch-size", 2**20)
    monkeypatch.setenv("FLEXCOMM_MAX_GLOBAL_BATCH", str(2**21))
    MAX_GLOBAL_BATCH.check("batch-size", 2**20 + 1)


def test_ranks_that_fill_whole_nodes_are_priced(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cost", "--ranks-per-node", "4", "--ranks", "8", "--size", "1MiB", "--latency", "1us",
                 "--bandwidth", "1Gbit/s", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["seconds"] > 0


# --- units: a nonzero literal that underflows to 0 ---------------------------------------------------------

@pytest.mark.parametrize(("parse", "text"), [
    (parse_time, "1e-400s"), (parse_time, "5e-330"), (parse_time, "1e-316ns"), (parse_size, "1e-400MiB"),
    (parse_size, "3e-324b"), (parse_bandwidth, "1e-400Gbit/s"), (parse_flops, "1e-400TFLOP/s"),
])
def test_a_nonzero_literal_that_underflows_is_refused(parse: object, text: str) -> None:
    with pytest.raises(InputError, match="below the smallest float"):
        parse(text)  # type: ignore[operator]


@pytest.mark.parametrize(("parse", "text"), [
    (parse_time, "0"), (parse_time, "0s"), (parse_time, "0e-400s"), (parse_time, "0.000e5us"),
    (parse_size, "0e-400MiB"), (parse_size, "0.0B"),
])
def test_a_zero_literal_is_still_zero(parse: object, text: str) -> None:
    assert parse(text) == 0.0  # type: ignore[operator]


@given(st.integers(1, 9), st.integers(330, 5000))
def test_every_underflowing_time_is_refused(digit: int, exponent: int) -> None:
    with pytest.raises(InputError, match="below the smallest float"):
        parse_time(f"{digit}e-{exponent}s")
    assert parse_time(f"{digit}e-300s") > 0  # tiny but representable: kept


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)))
def test_parse_ratio_accepts_exactly_the_fractions_in_0_1(value: object) -> None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if math.isfinite(number) and 0 < number <= 1:
        assert parse_ratio(value) == number
    else:
        with pytest.raises(InputError):
            parse_ratio(value)


# --- output folders ---------------------------------------------------------------------------------------

def test_an_out_that_is_a_file_names_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me\n")
    for out in (blocker, blocker / "sub"):
        line = refusal(capsys, "train-ddp", "--strategy", "dense", "--out", str(out))
        assert line.startswith(f"flexcomm: error: out: got '{out}'") and f"{blocker} is a file, not a folder" in line
    assert blocker.read_text() == "keep me\n"


def test_a_path_that_fails_late_is_blamed_on_its_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = refusal(capsys, "simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--iterations", "1",
                   "--trace", str(blocker / "t.json"))
    assert line.startswith(f"flexcomm: error: trace: got '{blocker / 't.json'}'") and "is a file, not a folder" in line


# --- torch-backed commands refuse options before importing torch --------------------------------------------

TORCH_FREE = [
    ["train-ddp", "--strategy", "dense", "--out", "{tmp}/o", "--fail", "rank5@1"],
    ["train-ddp", "--strategy", "dense", "--out", "{tmp}/o", "--checkpoint-every", "0"],
    ["train-ddp", "--strategy", "moo", "--out", "{tmp}/o", "--checkpoint-every", "5"],
    ["train-ddp", "--strategy", "dense", "--out", "{tmp}/o", "--workload", "nosuch"],
    ["train-ddp", "--strategy", "dense", "--out", "{tmp}/o", "--steps", "1000000000"],
    ["train-ddp", "--strategy", "dense", "--out", "{tmp}/file"],
    ["pareto", "--workers", "0", "--out", "{tmp}/o"],
    ["pareto", "--rule", "nosuch", "--out", "{tmp}/o"],
    ["pareto", "--workload", "nosuch", "--out", "{tmp}/o"],
    ["pareto", "--grid-points", "1", "--out", "{tmp}/o"],
    ["reproduce", "nosuch", "--out", "{tmp}/o"],
    ["reproduce", "1", "--jobs", "0", "--out", "{tmp}/o"],
    ["reproduce", "1", "--out", "{tmp}/file"],
    ["place", "--method", "nosuch", "--out", "{tmp}/o"],
    ["place", "--es-start", "nosuch", "--out", "{tmp}/o"],
    ["place", "--rule", "nosuch", "--out", "{tmp}/o"],
    ["place", "--seed", "-1", "--out", "{tmp}/o"],
    ["controller", "train", "--workload", "nosuch", "--out", "{tmp}/o"],
    ["controller", "train", "--variants", "nosuch", "--out", "{tmp}/o"],
    ["controller", "train", "--cluster", "nosuch", "--out", "{tmp}/o"],
    ["controller", "evaluate", "--baselines", "topk-ag@0", "--out", "{tmp}/o"],
    ["controller", "evaluate", "--model", "{tmp}/nomodel", "--out", "{tmp}/o"],
    ["controller", "curves", "{tmp}/nomodel", "--out", "{tmp}/o"],
]

_REFUSE_ALL = """
import contextlib, io, json, sys
from flexcomm.experiments.cli import main
rows = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    rows.append([rc, err.getvalue(), 'torch' in sys.modules])
print(json.dumps(rows))
"""


def test_torch_backed_commands_refuse_options_before_importing_torch(tmp_path: Path) -> None:
    """One interpreter for every case (torch, once imported, stays): each refusal must leave it unimported."""
    (tmp_path / "file").write_text("")
    cases = [[a.replace("{tmp}", str(tmp_path)) for a in argv] for argv in TORCH_FREE]
    proc = subprocess.run([sys.executable, "-c", _REFUSE_ALL, json.dumps(cases)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    for argv, (rc, err, torch) in zip(cases, json.loads(proc.stdout), strict=True):
        assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("flexcomm: error: "), (argv, err)
        assert not torch, f"{' '.join(argv)} imported torch to refuse: {err}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"], "a refused command created files"


#: A cluster written with ``extends`` meets the checks a cluster written out whole meets (issue 44, item 3):
#: (the child's lines, the field refused, what the one line says).
EXTENDS_REFUSED = [
    ("extends: dgx-h100\ndevice: {name: NoSuchGPU}\n", "cluster.device", "a catalog device (closest:"),
    ("extends: dgx-h100\ndevice: {name: ''}\n", "cluster.device", "a device's name"),
    ("extends: dgx-h100\ndevice: {precision: fp3}\n", "cluster.device", "a precision, one of"),
    ("extends: dgx1-v100\ndevice: {precision: fp8}\n", "cluster.device", "V100-SXM2-32GB's datasheet rates"),
    ("extends: dgx-h100\ngpu_fabric: {library: rccl, gcn_arch: gfx942, intra: xgmi, xgmi_links_per_gpu: 7}\n",
     "cluster.device.name", "a device RCCL drives (AMD GPUs)"),
    ("extends: dgx-h100\ndevice: {name: MI300X}\n", "cluster.device.name", "a device NCCL drives (NVIDIA GPUs)"),
    ("extends: dgx-h100\ngpu_fabric: {nvlink_domain: 1000000}\n", "cluster.gpu_fabric.nvlink_domain", "at most 576"),
    ("extends: 4x4-a100-v100\nnode_devices:\n  - {nodes: [2, 3], device: {name: V100-32GB}}\n"
     "  - {nodes: [3], device: {name: A100-40GB}}\n", "cluster.node_devices.1.nodes", "a node not already given"),
]


@pytest.mark.parametrize(("text", "field", "expected"), EXTENDS_REFUSED,
                         ids=["unknown", "empty-name", "fp3", "fp8-on-v100", "h100-rccl", "mi300x-nccl",
                              "domain-1e6", "node-twice"])
def test_extends_meets_the_checks_of_a_file_written_out_whole(text: str, field: str, expected: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "child.yaml"
    path.write_text(text)
    line = refusal(capsys, "clusters", str(path))
    assert line.startswith(f"flexcomm: error: {field}: ") and expected in line, line


def test_another_device_under_extends_is_that_device_not_the_base_with_its_name(tmp_path: Path) -> None:
    """``extends: dgx-h100`` with a V100 is priced as a V100 (it was "V100's 989 TFLOP/s"), the same as a file that
    names the V100 whole; a precision alone takes that precision's datasheet rate, not bf16's."""
    child = tmp_path / "v100.yaml"
    child.write_text("extends: dgx-h100\ndevice: {name: V100-SXM2-32GB}\n")
    v100 = Cluster.from_file(child).device
    assert (v100.peak_flops, v100.memory_bytes, v100.sms) == (125e12, 32 * 2**30, 80)
    fp8 = tmp_path / "fp8.yaml"
    fp8.write_text("extends: dgx-h100\ndevice: {precision: fp8}\n")
    assert Cluster.from_file(fp8).device.peak_flops == 1979e12  # H100 SXM datasheet, dense fp8


# --- nonsense that used to be accepted (issue 44, item 6): one line, exit 2 ------------------------------------

CORPUS = Path(__file__).resolve().parents[1] / "validation" / "nccl-tests"
CSV_LOG = CORPUS / "aws-p5-2n16g-allgather-efa-csv.txt"


def test_a_log_of_another_vendors_gpus_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    amd = str(CORPUS / "amd-mi350x-8g-allreduce-mpi.txt")
    line = refusal(capsys, "validate", "--nccl-tests", amd, "--cluster", str(CORPUS / "clusters" /
                                                                          "a100-40g-1n8g-allreduce-testfixture.yaml"))
    assert "a cluster of the log's AMD GPUs (the log names AMD Instinct MI350X)" in line
    nvidia = str(CORPUS / "a100-40g-1n8g-allreduce-testfixture.txt")
    line = refusal(capsys, "validate", "--nccl-tests", nvidia, "--cluster", str(CORPUS / "clusters" /
                                                                             "_amd-mi300x.yaml"))
    assert "a cluster of the log's NVIDIA GPUs" in line


def test_collective_cannot_override_what_the_log_says(capsys: pytest.CaptureFixture[str]) -> None:
    line = refusal(capsys, "validate", "--nccl-tests", str(CSV_LOG), "--collective", "allreduce", "--cluster",
                   str(CORPUS / "clusters" / "aws-p5-2n16g-allgather-efa-csv.yaml"))
    assert line.startswith("flexcomm: error: collective: got 'allreduce'; expected the log's own collective, "
                           "allgather")


def test_a_csv_row_whose_busbw_is_not_its_algbw_times_the_bus_factor_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = CSV_LOG.read_text().replace("2,16,64,1000,false,213.80,200.43", "2,16,64,1000,false,213.80,100.43")
    path = tmp_path / "edited.txt"
    path.write_text(text)
    line = refusal(capsys, "calibrate", str(path))
    assert "got 'busbw 100.43 GB/s'; expected algbw x 0.9375 = 200 GB/s" in line and "from its GPUs column" in line


def test_calibrate_reads_the_csv_transcriptions_validate_reads(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(CSV_LOG), "-o", str(tmp_path / "p.json")]) == 0
    assert "allgather" in capsys.readouterr().out and (tmp_path / "p.json").exists()


def test_an_exponent_in_a_published_throughput_cell_is_not_read_as_its_mantissa(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.md"
    path.write_text("## BERT pre-training\n### Pre-training NVIDIA DGX A100 (8x A100 80GB)\n\n"
                    "| GPUs | Batch size / GPU (TF32 and FP16) | Accumulation steps (TF32 and FP16) | Sequence length "
                    "| Throughput - TF32 (sequences/sec) | Throughput - mixed precision (sequences/sec) |\n"
                    "|---|---|---|---|---|---|\n| 8 | 128 and 256 | 64 and 32 | 128 | 1e308 | 4591 |\n")
    line = refusal(capsys, "validate", "--published-training", str(path), "--out", str(tmp_path / "o"))
    assert "got '1e308'; expected a number a table could print (at most 1e15)" in line


@pytest.mark.parametrize(("argv", "start"), [
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--execution-trace", "et.json"],
     "execution-trace: got 'et.json'; expected --execution-trace only with --from-trace"),
    (["simulate", "--from-trace", "{trace}", "--bandwidth", "1Gbit/s", "--trace", "t.json"],
     "trace: got 't.json'; expected no --trace with --from-trace"),
    (["simulate", "--from-trace", "{trace}", "--bandwidth", "1Gbit/s", "--jitter", "0.1"],
     "jitter: got 0.1; expected no --jitter with --from-trace"),
    (["cost", "--cluster", "dgx-h100", "--ranks", "16", "--size", "1GiB", "--algorithm", "nccl", "--nccl-version",
      "2.20.3.4.5"], "nccl-version: got '2.20.3.4.5'"),
    (["cost", "--ranks", "8", "--size", "1GiB", "--latency", "1us", "--bandwidth", "1e-300bit/s"],
     "bandwidth: got '1e-300bit/s'; expected a bandwidth of at least 1bit/s"),
], ids=["execution-trace-alone", "trace-with-from-trace", "jitter-with-from-trace", "nccl-version", "bandwidth"])
def test_an_option_that_would_be_ignored_or_overflow_is_refused(argv: list[str], start: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    trace = Path(__file__).resolve().parents[1] / "validation" / "from-trace" / "mlp-3ranks-200mbit.trace.json.gz"
    line = refusal(capsys, *[a.replace("{trace}", str(trace)) for a in argv])
    assert line.startswith(f"flexcomm: error: {start}"), line


def test_a_second_run_on_an_output_folder_in_use_is_refused(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from flexcomm.costmodel.atomic import output_folder_lock

    out = tmp_path / "run"
    with output_folder_lock(out):  # another run, holding it
        line = refusal(capsys, "simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--iterations", "1",
                       "--out", str(out))
    assert "expected an output folder no other flexcomm run is writing to" in line
    assert main(["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--iterations", "1",
                 "--out", str(out)]) == 0  # free again once that run ends
    assert (out / "summary.json").exists()


def test_a_refused_file_gets_its_refusal_alone_not_a_warning_first(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: w\nnodes: 2\ndevices_per_node: 1\ndevice: {name: MyGPU, peak_flops: 100TFLOP/s, "
                    "memory: 16GiB}\nintra_link: {latency: 1us, bandwidth: 10GB/s}\n"
                    "inter_link: {latency: 1us, bandwidth: 10Gbit/s}\ntopology: {kind: torus, dims: [3, 3]}\n")
    line = refusal(capsys, "cost", "--cluster", str(path), "--ranks", "2", "--size", "1MiB")
    assert line.startswith("flexcomm: error: topology.dims") and "warning" not in line
