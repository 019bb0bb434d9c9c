# ruff: noqa: E501  (nccl-tests prints 130-column rows; the fixtures are pasted as printed)
"""nccl-tests logs as input: every published run parses, nccl-tests' bandwidth convention holds exactly,
what flexcomm writes parses back, and bad logs are one error naming the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.collective_libraries.logs import (
    COLLECTIVES,
    bus_factor,
    format_log,
    parse_nccl_tests,
    read_nccl_tests,
    to_measurements,
)
from flexcomm.costmodel.errors import InputError

CORPUS = Path(__file__).resolve().parents[1] / "validation" / "nccl-tests"
RUNS = sorted(CORPUS.glob("*.txt"))
#: Published runs whose text is not a whole table, as their own notes say.
CUT: set[str] = set()  # rows cut short are marked "[cut]" by their transcriber and kept (out-of-place half)

LOG = """\
$ mpirun -np 2 ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 4
[1,0]<stdout>:# nThread 1 nGpus 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20
[1,0]<stdout>:#  Rank  0 Group  0 Pid  11 on node1 device  0 [0x1b] NVIDIA A100-SXM4-80GB
[1,0]<stdout>:#  Rank  1 Group  0 Pid  11 on node1 device  1 [0x43] NVIDIA A100-SXM4-80GB
[1,1]<stdout>:#  Rank  2 Group  0 Pid  12 on node2 device  0 [0x1b] NVIDIA A100-SXM4-80GB
[1,1]<stdout>:#  Rank  3 Group  0 Pid  12 on node2 device  1 [0x43] NVIDIA A100-SXM4-80GB
node1:11:11 [0] NCCL INFO NCCL version 2.18.3+cuda12.2
node1:11:20 [0] NCCL INFO Channel 00/24 :    0   1   2   3
[1,0]<stdout>:#                                                              out-of-place                       in-place
[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
[1,0]<stdout>:#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
[1,0]<stdout>:     1048576        262144     float     sum      -1    40.00   26.21   39.32      0    39.00   26.89   40.33      0
[1,0]<stdout>:     2097152        524288     float     sum      -1    60.00   34.95   52.43      0    61.00   34.38   51.57      0
[1,0]<stdout>:# Out of bounds values : 0 OK
[1,0]<stdout>:# Avg bus bandwidth    : 45.91
"""


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_every_published_run_parses_or_fails_on_the_line_its_notes_call_cut(path: Path) -> None:
    if path.stem in CUT:
        with pytest.raises(InputError) as info:
            read_nccl_tests(str(path))
        assert " line " in info.value.field and "truncated" in info.value.expected
        return
    log = read_nccl_tests(str(path))
    declared = next(line.split(":", 1)[1].strip() for line in path.read_text().splitlines()
                    if line.lstrip("# ").startswith("collective:"))
    assert log.collective.replace("-", "") in declared.replace("_", "").lower()
    assert log.rows and log.sizes == sorted(set(log.sizes))
    for row in log.rows:  # the printed algbw is size / time, to its two decimals (or rounding of time)
        assert row.algbw_Bps == pytest.approx(row.bytes / row.time_s, rel=0.02, abs=0.006e9)


def test_ranks_come_from_rank_lines_and_the_layout_from_the_header() -> None:
    log = parse_nccl_tests(LOG)
    assert (log.collective, log.ranks, log.ranks_from, log.layout) == ("allreduce", 4, "Rank lines", "root")
    assert log.nccl_version == "2.18.3+cuda12.2" and len(log.rows) == 2
    row = log.rows[0]
    assert (row.bytes, row.count, row.time_s, row.in_place_time_s) == (1048576, 262144, 40e-6, 39e-6)
    assert row.busbw_Bps == pytest.approx(row.algbw_Bps * bus_factor("allreduce", 4), rel=1e-3)


def test_ranks_inferred_from_the_bus_factor_only_when_rounding_leaves_one_answer() -> None:
    by_name = {p.stem: read_nccl_tests(str(p)) for p in RUNS if p.stem not in CUT}
    assert by_name["dgxh100-2n16g-allreduce-dgx06-07"].ranks == 16
    assert by_name["gcp-a4xmax-gb300-jobset-allgather"].ranks_from == "size / count"
    # at 1,440 ranks 2(n-1)/n is 1.9986: two printed decimals allow dozens of rank counts, so none is claimed
    assert by_name["coreweave-gb200-nvl72-20rack-1440g-allreduce"].ranks is None


@pytest.mark.parametrize("collective, factor", [
    ("allreduce", 2 * 7 / 8), ("allgather", 7 / 8), ("reduce-scatter", 7 / 8), ("alltoall", 7 / 8),
    ("broadcast", 1.0), ("sendrecv", 1.0), ("reduce", 1.0),
])
def test_bus_factor_is_nccl_tests_convention(collective: str, factor: float) -> None:
    assert bus_factor(collective, 8) == factor


@settings(max_examples=60, deadline=None)
@given(collective=st.sampled_from(COLLECTIVES), ranks=st.integers(2, 64),
       times=st.lists(st.floats(1e-5, 10.0), min_size=1, max_size=8))
def test_what_flexcomm_writes_parses_back(collective: str, ranks: int, times: list[float]) -> None:
    rows = []
    for i, seconds in enumerate(times):
        count = 256 << i
        nbytes = count * 4 * (ranks if collective in ("allgather", "reduce-scatter", "alltoall") else 1)
        rows.append((nbytes, count, "float", "sum", 0, seconds))
    log = parse_nccl_tests(format_log(collective, ranks, rows))
    assert log.collective == collective and log.ranks == ranks and len(log.rows) == len(rows)
    for row, (nbytes, _, _, _, _, seconds) in zip(log.rows, rows, strict=True):
        assert row.bytes == nbytes and row.in_place_time_s is None
        assert row.time_s == pytest.approx(seconds, rel=5e-3, abs=6e-9)  # printed to 4 significant digits


def test_measurements_count_allgather_bytes_per_rank() -> None:
    text = format_log("allgather", 4, [(4096 * 4, 4096, "float", "none", 0, 1e-3)])
    table = to_measurements(parse_nccl_tests(text))
    assert table.loc[0, ["collective", "algorithm", "ranks", "bytes"]].tolist() == ["allgather", "ring", 4, 4096]
    with pytest.raises(InputError) as info:
        to_measurements(parse_nccl_tests(text), ranks=8)
    assert info.value.field == "ranks"


def _bad(lines: list[str]) -> InputError:
    with pytest.raises(InputError) as info:
        parse_nccl_tests("\n".join(lines), name="log")
    return info.value


HEADER = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   " \
         "busbw #wrong"
ROW = "     1048576        262144     float     sum      -1    40.00   26.21   39.32      0    39.00   26.89   40.33      0"
ROW2 = "     2097152        524288     float     sum      -1    60.00   34.95   52.43      0    61.00   34.38   51.57      0"


@pytest.mark.parametrize("lines, line, words", [
    (["./all_reduce_perf -g 8", ROW], 2, "no header"),
    (["./all_reduce_perf -g 8", HEADER, ROW, ROW2[:60]], 4, "truncated"),
    (["./all_reduce_perf -g 8", HEADER, ROW.replace("40.00", "4O.00")], 3, "number in the time column"),
    (["./all_reduce_perf -g 8", HEADER, ROW2, ROW], 4, "sizes must increase"),
    (["./all_reduce_perf -g 8", HEADER, ROW, "# Avg bus bandwidth : 1", HEADER, ROW2], 5, "one table per log"),
    (["collective: all_reduce", HEADER, ROW, "# Collective test concluded: all_gather_perf"], 4, "one collective"),
    ([HEADER, ROW], 1, "names its test"),
    (["./all_reduce_perf", HEADER, ROW, ROW2.replace(" float ", " half  ")], 4, "one type and operation"),
    (["nothing here"], 1, "none found"),
])
def test_a_bad_log_is_one_error_naming_its_line(lines: list[str], line: int, words: str) -> None:
    error = _bad(lines)
    assert error.field == f"log line {line}" and words in error.expected, (error.field, error.expected)


def test_a_command_line_running_several_tests_is_decided_by_the_declaration() -> None:
    text = "\n".join(["collective: alltoall", "command: ./all_reduce_perf; ./alltoall_perf",
                      HEADER, ROW.replace(" sum ", " none")])
    assert parse_nccl_tests(text).collective == "alltoall"
    with pytest.raises(InputError):
        parse_nccl_tests("\n".join(["command: ./all_reduce_perf; ./alltoall_perf", HEADER, ROW]))
    assert parse_nccl_tests("\n".join([HEADER, ROW]), collective="all_reduce").collective == "allreduce"


# --- the commands ----------------------------------------------------------------------------------


def _cluster(folder: Path, nodes: int) -> Path:
    path = folder / "cluster.yaml"
    path.write_text(f"name: two-hosts\nnodes: {nodes}\ndevices_per_node: 1\n"
                    "device: {name: cpu, peak_flops: 1e11, memory: 16GB}\n"
                    "intra_link: {bandwidth: 10Gbit/s, latency: 10us}\n"
                    "inter_link: {bandwidth: 10Gbit/s, latency: 50us}\n", encoding="utf-8")
    return path


def test_a_benchmark_writes_nccl_tests_logs_that_calibrate_and_validate_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import pandas as pd

    from flexcomm.costmodel.cost_model import CostModel
    from flexcomm.experiments.cli import main

    logs = tmp_path / "logs"
    assert main(["bench-collectives", "--nproc", "2", "--sizes", "64KiB:4MiB:4", "--collectives", "allreduce,allgather",
                 "--iters", "3", "--warmup", "1", "--out", str(tmp_path / "m.csv"), "--nccl-tests-dir", str(logs)]) == 0
    measured = pd.read_csv(tmp_path / "m.csv")
    log = read_nccl_tests(str(logs / "all_gather_perf-2ranks.txt"))
    assert (log.collective, log.ranks) == ("allgather", 2)
    medians = measured[measured["collective"] == "allgather"].groupby("bytes")["seconds"].median()
    back = to_measurements(log).set_index("bytes")["seconds"]
    assert list(back.index) == list(medians.index)  # per-rank bytes, as flexcomm counts them
    assert back.to_numpy() == pytest.approx(medians.to_numpy(), rel=5e-3)
    capsys.readouterr()
    assert main(["calibrate", *map(str, sorted(logs.glob("*.txt"))), "-o", str(tmp_path / "p.json"), "--json"]) == 0
    fits = json.loads(capsys.readouterr().out)
    assert {f["collective"] for f in fits} == {"allreduce", "allgather"}
    cluster = _cluster(tmp_path, 2)
    assert main(["validate", "--nccl-tests", str(logs / "all_reduce_perf-2ranks.txt"), "--cluster", str(cluster),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    from flexcomm.costmodel.cluster import load_cluster

    model = CostModel.from_cluster(load_cluster(str(cluster)))
    for row in report["rows"]:
        predicted = float(model.collective("allreduce", "ring", float(row["bytes"]), 2).total)
        assert row["predicted_s"] == pytest.approx(predicted, rel=1e-12)
        assert row["rel_error"] == pytest.approx(predicted / row["measured_s"] - 1, rel=1e-9)
    large = [abs(r["rel_error"]) for r in report["rows"] if r["bytes"] >= 1 << 20]
    assert report["summary"]["worst_abs_error"] == pytest.approx(max(large))
    assert report["summary"]["rows_at_least_1MiB"] == len(large) == 2 and not report["summary"]["partial"]


def test_validate_refuses_a_cluster_of_another_size_in_one_line(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from flexcomm.experiments.cli import main

    log = tmp_path / "ar.txt"
    log.write_text(format_log("allreduce", 4, [(1 << 20, 1 << 18, "float", "sum", -1, 1e-3)]), encoding="utf-8")
    assert main(["validate", "--nccl-tests", str(log), "--cluster", str(_cluster(tmp_path, 2))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "4 ranks" in err and err.startswith("flexcomm: error: cluster:")
    bad = tmp_path / "bad.txt"
    bad.write_text("./all_reduce_perf\n" + HEADER + "\n" + ROW[:50] + "\n", encoding="utf-8")
    assert main(["calibrate", str(bad), "-o", str(tmp_path / "p.json")]) == 2
    assert f"{bad} line 3:" in capsys.readouterr().err


def test_logs_as_people_paste_them_srun_labels_split_rows_cut_rows_and_empty_rows() -> None:
    lines = ["0: # nThread 1 nGpus 8 minBytes 0 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0", "0: " + HEADER,
             "0:            0             0     float     sum      -1     0.10    0.00    0.00      0     0.10    0.00"
             "    0.00      0", "0: " + ROW,
             ROW2[:60] + "[1,0]<stdout>:" + ROW2[60:],  # a row split by its rank's tag
             "     4194304       1048576     float     sum      -1    90.00   46.60   69.90      0    91.00   46.09 "
             "[cut]", "# Collective test concluded: all_reduce_perf"]
    log = parse_nccl_tests("\n".join(lines), name="pasted")
    assert log.sizes == [1048576, 2097152, 4194304] and log.zero_byte_rows == 1
    assert log.gpus_per_thread == 8 and not log.cuda_graph
    assert log.rows[-1].in_place_time_s is None and log.rows[-1].time_s == pytest.approx(90e-6)
    graph = parse_nccl_tests("\n".join(lines).replace("graph: 0", "graph: 1"), name="graph")
    assert graph.cuda_graph


def test_csv_transcriptions_are_read_with_time_from_size_and_algbw() -> None:
    text = "\n".join(["# collective: all_reduce", "# nccl_version: pins NCCL v2.27.7-1", "# env: NCCL_BUFFSIZE=8388608",
                      "Nodes,GPUs,size(MB),iterations,blocking,out algbw(GB/s),out busbw(GB/s),in algbw(GB/s),"
                      "in busbw(GB/s)", "2,16,32,1000,false,78.57,147.32,78.52,147.22",
                      "2,16,64,1000, false,110.40,207.00,120.51,225.95"])
    log = parse_nccl_tests(text, name="csv")
    assert (log.collective, log.ranks, log.ranks_from, log.nccl_version) == ("allreduce", 16, "GPUs column", "2.27.7")
    assert log.sizes == [32 << 20, 64 << 20] and log.env["NCCL_BUFFSIZE"] == "8388608"
    assert log.rows[0].time_s == pytest.approx((32 << 20) / 78.57e9)
    with pytest.raises(InputError, match="comma-separated"):
        parse_nccl_tests(text + "\n2,16,128,1000", name="csv")
    with pytest.raises(InputError, match="one rank count"):
        parse_nccl_tests(text + "\n4,32,128,1000,false,162.74,305.13,160.16,300.29", name="csv")
