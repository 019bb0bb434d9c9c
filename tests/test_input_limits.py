"""Issue 31 item 5: no input file or flag can hang flexcomm or take its memory (and the nccl-tests reader
refuses corrupted, negative and absurd rows).

The CLI cases run the console script in a subprocess with a timeout, so a hang fails the test instead of
hanging the suite, and read the child's peak memory (``ru_maxrss`` of a parent that runs nothing else).
No speed is asserted; ``benchmarks/bench_bad_inputs.py`` measures that.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from cli_probe import run_cli_measured
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.collective_libraries.logs import looks_like_nccl_tests, parse_nccl_tests
from flexcomm.costmodel.errors import ECHO_CHARS, InputError
from flexcomm.costmodel.limits import MAX_FILE_BYTES, read_bytes_bounded, read_text_bounded

MAX_RSS_BYTES = 500 * 2**20

HEADER = """# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid   1 on host device  0 [0x00] GPU
#  Rank  1 Group  0 Pid   2 on host device  1 [0x00] GPU
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""
GOOD_ROW = "     1048576 262144 float sum -1 78.77 13.31 13.31 0 81.31 12.90 12.90 0"
FOOTER = "# Collective test concluded: all_reduce_perf\n"


def log_with(*rows: str) -> str:
    return HEADER + "\n".join(rows) + "\n" + FOOTER


FAT_TREE = """name: ft
nodes: 8
devices_per_node: 1
device: {name: g, peak_flops: 1TFLOP/s, memory: 1GiB}
intra_link: {latency: 1us, bandwidth: 1GB/s}
inter_link: {latency: 1us, bandwidth: 1GB/s}
topology: {kind: fat-tree, k: 100000}
"""
HORIZON_STUDY = """name: hz
engine: recovery
workload: gpt-1.7b
cluster: 16x8-h100-2to1
strategies: [restart]
sweep: {mtbf: [2d], horizon: [1e9d]}
"""


def _values(n: int, form: str) -> str:
    return "[" + ", ".join(form.format(i + 1) for i in range(n)) + "]"


BIG_STUDY = f"""name: big
engine: model
workload: resnet50
strategies: [dense, topk-ag, topk-ar]
sweep:
  bandwidth: {_values(100, "{}Gbit/s")}
  ranks: {_values(100, "{}")}
  ratio: {_values(100, "{}e-4")}
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("limits")
    os.mkfifo(here / "fifo")
    os.mkfifo(here / "fifo.yaml")
    os.mkfifo(here / "fifo.csv")
    os.mkfifo(here / "fifo.json")
    (here / "a-dir").mkdir()
    with open(here / "huge.txt", "wb") as handle:  # sparse: 17 MiB that take no disk
        handle.truncate(17 * 2**20)
    (here / "rows.txt").write_text(log_with(*(
        f"{2**i:12d} {2**i // 4:12d} float sum -1 {2**i / 1e3:.3f} 1.00 1.00 0 {2**i / 1e3:.3f} 1.00 1.00 0"
        for i in range(10, 30))))
    (here / "long-cell.txt").write_text(log_with(GOOD_ROW.replace("78.77", "7" * 200_000)))
    (here / "ft.yaml").write_text(FAT_TREE)
    (here / "hz.yaml").write_text(HORIZON_STUDY)
    (here / "big.yaml").write_text(BIG_STUDY)
    (here / "a-file").write_text("x")
    with open(here / "dense.csv", "w") as handle:
        handle.write("time_s,link,bandwidth,latency\n")
        handle.writelines(f"{i * 1e-9:.9f},*,{1 + i % 5}Gbit/s,\n" for i in range(200_000))
    return here


SIM = ["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50"]
#: (argv with {dir}, the start of the one line after "flexcomm: error: ", extra environment)
CASES = [
    (["validate", "--nccl-tests", "/dev/zero", "--cluster", "8x1-10gbe"], "nccl-tests: got '/dev/zero'; "
     "expected a regular nccl-tests log; this is a character device", {}),
    (["validate", "--nccl-tests", "{dir}/fifo", "--cluster", "8x1-10gbe"], "nccl-tests: got '{dir}/fifo'; "
     "expected a regular nccl-tests log; this is a FIFO", {}),
    (["validate", "--nccl-tests", "{dir}/a-dir", "--cluster", "8x1-10gbe"], "nccl-tests: got '{dir}/a-dir'; "
     "expected a regular nccl-tests log; this is a directory", {}),
    (["validate", "--nccl-tests", "{dir}/huge.txt", "--cluster", "8x1-10gbe"], "nccl-tests: got '{dir}/huge.txt'; "
     "expected at most 16,777,216 bytes, this asks for 17,825,792 (set FLEXCOMM_MAX_FILE_BYTES", {}),
    (["validate", "--nccl-tests", "{dir}/rows.txt", "--cluster", "8x1-10gbe"], "{dir}/rows.txt: got 11; expected "
     "at most 10 table rows of one nccl-tests log (set FLEXCOMM_MAX_LOG_ROWS", {"FLEXCOMM_MAX_LOG_ROWS": "10"}),
    (["calibrate", "/dev/zero"], "measurements: got '/dev/zero'", {}),
    (["calibrate", "{dir}/fifo", "-o", "{dir}/p.json"], "measurements: got '{dir}/fifo'", {}),
    (["cost", "--ranks", "2", "--size", "1MiB", "--profile", "{dir}/fifo.json", "--cluster", "8x1-10gbe"],
     "profile: got '{dir}/fifo.json'; expected a regular calibration JSON file; this is a FIFO", {}),
    (["simulate", "--scenario", "{dir}/fifo.yaml"], "scenario: got '{dir}/fifo.yaml'; expected a regular", {}),
    ([*SIM, "--network-trace", "{dir}/fifo.csv"], "network-trace: got '{dir}/fifo.csv'; expected a regular CSV", {}),
    ([*SIM, "--network-trace", "/dev/zero"], "network-trace: got '/dev/zero'; expected a regular CSV file", {}),
    ([*SIM, "--network-trace", "{dir}/dense.csv"], "trace (dense.csv): got '1,000 changes within 9.99e-07 s'; "
     "expected at most 1,000,000 events per simulated second, this asks for 1,000,000,000", {}),
    (["simulate", "--from-trace", "{dir}/fifo.json", "--bandwidth", "1Gbit/s"], "from-trace: got "
     "'{dir}/fifo.json'; expected a regular trace file; this is a FIFO", {}),
    (["clusters", "{dir}/ft.yaml"], "cluster.topology: got 'fat-tree k=100000'; expected at most 524,288 cables "
     "in the fabric, this asks for 500,000,000,000,008 (set FLEXCOMM_MAX_FABRIC_LINKS", {}),
    (["cost", "--ranks", "8", "--size", "1MiB", "--cluster", "{dir}/ft.yaml"], "cluster.topology: got "
     "'fat-tree k=100000'", {}),
    (["simulate", "--recovery", "all", "--workload", "gpt-1.7b", "--cluster", "16x8-h100-2to1", "--mtbf", "2d",
      "--horizon", "1e9d"], "horizon: got '1e+09 d'; expected at most 10,000 failures within the horizon", {}),
    (["study", "{dir}/hz.yaml", "--out", "{dir}/hz-out"], "sweep.horizon: got '1e+09 d'; expected at most "
     "10,000 failures within the horizon", {}),
    (["study", "{dir}/big.yaml", "--out", "{dir}/big-out"], "sweep: got '1 workloads x 1 repeats x 100 bandwidth "
     "x 100 ranks x 100 ratio x 3 strategies'; expected at most 100,000 points after expanding the sweeps, "
     "this asks for 2,010,000 (set FLEXCOMM_MAX_STUDY_POINTS", {}),
    ([*SIM, "--fail", "random:mtbf=2s"], "fail: got 'random:mtbf=2s'; expected at most 1,000 failures in one "
     "simulated job", {}),
    (["bench-collectives", "--nproc", "2", "--sizes", "1KiB", "--out", "{dir}/m.csv", "--nccl-tests-dir",
      "{dir}/a-file"], "nccl-tests-dir: got '{dir}/a-file'; expected a folder to write the logs into", {}),
]


@pytest.mark.parametrize(("argv", "line", "env"), CASES, ids=[" ".join(a[:3]) + f" {i}" for i, (a, _, _) in
                                                               enumerate(CASES)])
def test_input_is_refused_in_one_line_bounded(argv: list[str], line: str, env: dict[str, str], folder: Path) -> None:
    args = [a.replace("{dir}", str(folder)) for a in argv]
    code, err, rss = run_cli_measured(args, env)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("flexcomm: error: " + line.replace("{dir}", str(folder))), lines[0]
    assert 0 < rss < MAX_RSS_BYTES, f"peak memory {rss / 2**20:.0f} MiB"


def test_a_200_kb_cell_is_echoed_cut(folder: Path) -> None:
    code, err, _ = run_cli_measured(["validate", "--nccl-tests", str(folder / "long-cell.txt"),
                                     "--cluster", "8x1-10gbe"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "… (200,000 chars)" in err and len(err) < 600, err[:600]


# --- the bounded reader ------------------------------------------------------------------------------


def test_reader_refuses_what_is_not_a_regular_file_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "p"
    os.mkfifo(fifo)  # opening it for reading would block until a writer came
    for path, kind in ((fifo, "a FIFO"), (tmp_path, "a directory"), (Path("/dev/zero"), "a character device")):
        with pytest.raises(InputError, match=f"expected a regular log; this is {kind}"):
            read_bytes_bounded(path, "log", "log")
    with pytest.raises(InputError, match=r"a readable log \(No such file"):
        read_bytes_bounded(tmp_path / "missing", "log", "log")


def test_reader_caps_bytes_at_the_limit_named_in_the_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.txt"
    path.write_text("x" * 100)
    monkeypatch.setenv(MAX_FILE_BYTES.env, "100")
    assert read_text_bounded(path, "f") == "x" * 100
    monkeypatch.setenv(MAX_FILE_BYTES.env, "99")
    with pytest.raises(InputError, match=r"at most 99 bytes, this asks for 100 \(set FLEXCOMM_MAX_FILE_BYTES"):
        read_text_bounded(path, "f")
    (tmp_path / "bad.txt").write_bytes(b"ok\xff")
    monkeypatch.delenv(MAX_FILE_BYTES.env)
    with pytest.raises(InputError, match="a UTF-8 file \\(byte 2 is not UTF-8\\)"):
        read_text_bounded(tmp_path / "bad.txt", "f")
    assert read_text_bounded(tmp_path / "bad.txt", "f", errors="replace") == "ok\ufffd"


def test_sniffing_a_fifo_or_device_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "p")
    assert not looks_like_nccl_tests(str(tmp_path / "p"))
    assert not looks_like_nccl_tests("/dev/zero")
    (tmp_path / "log.txt").write_text(log_with(GOOD_ROW))
    assert looks_like_nccl_tests(str(tmp_path / "log.txt"))


@given(st.text(min_size=0, max_size=400))
def test_an_echoed_value_is_cut_to_its_start_and_length(value: str) -> None:
    message = str(InputError("f", value, "x"))
    shown = message.removeprefix("f: got ").removesuffix("; expected x")
    if len(repr(value)) <= ECHO_CHARS + 20:
        assert shown == repr(value)
    else:
        assert shown == repr(value)[:ECHO_CHARS] + f"… ({len(value):,} chars)"


# --- nccl-tests rows ---------------------------------------------------------------------------------


def test_a_row_with_wrong_results_is_refused() -> None:
    assert parse_nccl_tests(log_with(GOOD_ROW)).rows[0].time_s == pytest.approx(78.77e-6)
    corrupted = GOOD_ROW.replace("13.31 0", "13.31 5")
    with pytest.raises(InputError, match="line 6: got '5'; expected 0 in the #wrong column: nccl-tests found "
                       "corrupted results"):
        parse_nccl_tests(log_with(corrupted))
    with pytest.raises(InputError, match="got 'x'; expected a count >= 0 or N/A in the #wrong column"):
        parse_nccl_tests(log_with(GOOD_ROW.replace("13.31 0", "13.31 x")))
    in_place = GOOD_ROW[:-1] + "3"
    with pytest.raises(InputError, match="got '3'; expected 0 in the #wrong column"):
        parse_nccl_tests(log_with(in_place))


def test_a_negative_size_is_refused_not_skipped() -> None:
    negative = GOOD_ROW.replace("     1048576", "    -1048576", 1)
    with pytest.raises(InputError, match="line 6: got '-1048576'; expected a finite number >= 0 in the size column"):
        parse_nccl_tests(log_with(negative, GOOD_ROW.replace("1048576", "2097152", 1)))


@pytest.mark.parametrize("time", ["1e308", "7877", "0.7877"])
def test_a_time_that_disagrees_with_its_algbw_or_passes_an_hour_is_refused(time: str) -> None:
    with pytest.raises(InputError, match=f"got '{time}'; expected a time (below|matching)"):
        parse_nccl_tests(log_with(GOOD_ROW.replace("78.77", time)))


@settings(max_examples=50, deadline=None)
@given(st.integers(3, 34), st.floats(0.5, 1e7))
def test_a_time_printed_as_nccl_tests_prints_it_is_accepted(power: int, time_us: float) -> None:
    size = 2**power
    algbw = size / time_us / 1e3
    shown = f"{time_us:7.2f}" if time_us < 1e4 else (f"{time_us:7.1f}" if time_us < 1e5 else f"{time_us:7.0f}")
    row = f"{size:12d} {size // 4:12d} float sum -1 {shown} {algbw:6.2f} {algbw:6.2f} 0 N/A N/A N/A N/A"
    assert parse_nccl_tests(log_with(row)).rows[0].bytes == size


def test_the_row_limit_is_checked_as_rows_arrive(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [f"{2**i:12d} {2**i // 4:12d} float sum -1 {2**i / 1e3:.3f} 1.00 1.00 0 N/A N/A N/A N/A"
            for i in range(10, 16)]
    monkeypatch.setenv("FLEXCOMM_MAX_LOG_ROWS", "6")
    assert len(parse_nccl_tests(log_with(*rows)).rows) == 6
    monkeypatch.setenv("FLEXCOMM_MAX_LOG_ROWS", "5")
    with pytest.raises(InputError, match="at most 5 table rows of one nccl-tests log"):
        parse_nccl_tests(log_with(*rows))


# --- fabrics, traces, studies, failures ----------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([2, 4, 6, 8]), st.sampled_from([2, 3]), st.integers(1, 16))
def test_the_counted_fabric_is_the_built_one(k: int, tiers: int, nodes: int) -> None:
    from flexcomm.costmodel.cluster import Cluster
    from flexcomm.costmodel.topologies.size import fabric_size

    capacity = k**3 // 4 if tiers == 3 else k * k // 2
    cluster = Cluster.from_dict({
        "name": "t", "nodes": min(nodes, capacity), "devices_per_node": 1,
        "device": {"name": "g", "peak_flops": "1TFLOP/s", "memory": "1GiB"},
        "intra_link": {"latency": "1us", "bandwidth": "1GB/s"}, "inter_link": {"latency": "1us", "bandwidth": "1GB/s"},
        "topology": {"kind": "fat-tree", "k": k, "tiers": tiers}})
    cables, paths = fabric_size(cluster)
    fabric = cluster.fabric
    assert fabric.graph.number_of_edges() == 2 * cables
    far = cluster.nodes - 1
    if far:
        assert len(fabric.paths(0, far)) <= paths


def test_a_fabric_past_the_limit_is_refused_when_the_cluster_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexcomm.costmodel.cluster import load_cluster

    monkeypatch.setenv("FLEXCOMM_MAX_EQUAL_COST_PATHS", "15")
    # the file, not the name: an embedded cluster is read once per process and earlier tests may have read it
    path = Path(__file__).resolve().parents[1] / "costmodel" / "clusters" / "fat-tree-k8.yaml"
    with pytest.raises(InputError, match="at most 15 equal-cost paths between two hosts, this asks for 16"):
        load_cluster(path)


def test_a_trace_s_change_rate_is_its_densest_stretch(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexcomm.sim.dynamics import TraceDynamics

    rows = [{"time_s": "0", "link": "*", "bandwidth": "1Gbit/s"} for _ in range(5)]  # one change of 5 links
    rows += [{"time_s": str(t), "link": "*", "bandwidth": "1Gbit/s"} for t in (1.0, 1.5, 2.0)]
    monkeypatch.setenv("FLEXCOMM_MAX_EVENTS_PER_SIM_SECOND", "2")
    assert len(TraceDynamics.from_rows(rows).events) == 8  # 3 changes over 2 s: 1.5 a second
    monkeypatch.setattr("flexcomm.sim.dynamics.RATE_WINDOW", 2)  # the densest 2: 1 change in 0.5 s
    assert len(TraceDynamics.from_rows(rows).events) == 8
    rows.append({"time_s": "0.1", "link": "*", "bandwidth": "1Gbit/s"})  # out of order: measured once sorted
    with pytest.raises(InputError, match="at most 2 events per simulated second, this asks for 10 "):
        TraceDynamics.from_rows(rows)
    monkeypatch.setattr("flexcomm.sim.dynamics.RATE_WINDOW", 1000)  # in order: refused as the rows arrive
    dense = [{"time_s": f"{i * 1e-9:.9f}", "link": "*", "bandwidth": "1Gbit/s"} for i in range(1000)]
    with pytest.raises(InputError, match="this asks for 1,000,000,000"):
        TraceDynamics.from_rows(iter([*dense, {"time_s": "bad"}]))  # the bad row after them is never read


def test_the_counted_points_are_the_expanded_ones() -> None:
    from flexcomm.experiments.study.spec import load_spec, point_count, shipped_studies

    for name, path in shipped_studies().items():
        if name.startswith("scenario"):
            continue
        spec = load_spec(path)
        assert point_count(spec) == len(spec.points), name


@pytest.mark.parametrize(("mtbf", "elastic", "max_restarts", "refused"), [
    (2.0, False, 1000, True), (60.0, False, 1000, False), (2.0, False, 3, False), (2.0, True, 1000, False),
    (0.01, True, 1000, True)])
def test_random_failures_a_job_cannot_outlive_are_refused(mtbf: float, elastic: bool, max_restarts: int,
                                                          refused: bool) -> None:
    from flexcomm.sim.faults import RandomNodeFaults, check_random_failures

    sources = [RandomNodeFaults(mtbf, 0, f"random:mtbf={mtbf}s")]
    expected_failures = 10 * 8 * 0.2 / mtbf if elastic else min(math.expm1(10 * 8 * 0.2 / mtbf), max_restarts + 1)
    assert (expected_failures > 1000) == refused
    if refused:
        with pytest.raises(InputError, match="at most 1,000 failures in one simulated job"):
            check_random_failures(sources, 8, 10, 0.2, 0, elastic, max_restarts)
    else:  # a job that aborts after 3 relaunches is cheap: it runs and says it aborted
        check_random_failures(sources, 8, 10, 0.2, 0, elastic, max_restarts)


def test_failures_past_the_limit_stop_a_running_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexcomm.sim.training import simulate_training
    from flexcomm.sim.training_config import TrainingConfig

    monkeypatch.setenv("FLEXCOMM_MAX_SIM_FAILURES", "20")  # the estimate passes (a lower bound); the run stops
    with pytest.raises(InputError, match="at most 20 failures in one simulated job \\(the job had not finished"):
        simulate_training("8x1-10gbe", TrainingConfig(workload="resnet50", iterations=10),
                          faults=["random:mtbf=20s"])
