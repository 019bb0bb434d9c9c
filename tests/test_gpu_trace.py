"""GPU profiler traces: the GPU timeline read, every collective re-priced, all ranks of a job, the public traces.

The public traces (validation/gpu-traces, with their provenance in INDEX.md) are real GPU training runs; the
small traces built here test one rule each."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.sim import gpu_replay as gr
from flexcomm.sim.gpu_job import Settings, replay_job
from flexcomm.sim.gpu_trace_validate import shipped_traces, validate_gpu_traces
from flexcomm.workloads.gpu_trace import read_gpu_trace
from flexcomm.workloads.profiler_trace import check_execution_trace, read_execution_trace

TRACES = shipped_traces()
GPU_FILES = sorted(TRACES.glob("*.json.gz")) + sorted((TRACES / "param__dlrm_v100x8_kineto").glob("*.json.gz"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flexcomm.experiments.cli", *args], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def negative_queue():  # 16 A100s, all_to_all, reduce-scatter, all-gather and all-reduce on 3 NCCL streams
    return read_gpu_trace(TRACES / "hta__negative_queue_a100x16_rank0.json.gz")


@pytest.mark.parametrize("path", GPU_FILES, ids=lambda p: p.name[:40])
def test_the_replay_with_traced_times_gives_every_public_trace_back(path: Path) -> None:
    trace = read_gpu_trace(path)
    assert trace is not None and trace.steps
    durations = [np.array([a.duration_us for a in s.activities]) for s in trace.steps]
    replayed = gr.replay(trace, durations)
    assert replayed.predicted_step_s == pytest.approx(replayed.measured_step_s, rel=1e-12)
    times = gr.replay_timeline(trace, durations)
    for step, t in zip(trace.steps, times, strict=True):
        assert t.starts_us == pytest.approx([a.start_us for a in step.activities], abs=1e-6)


def test_every_collective_kind_is_read_with_its_size_and_group(negative_queue) -> None:
    step = negative_queue.steps[-1]
    kinds = {c.kind for c in step.calls}
    assert {"alltoall", "reduce-scatter", "allgather", "allreduce"} <= kinds
    assert all(c.nbytes for c in step.calls) and all(c.group_size == 16 for c in step.calls)
    # reduce-scatter counts the whole vector, allgather each rank's part: flexcomm's sizes
    rs = next(c for c in step.calls if c.kind == "reduce-scatter")
    ag = next(c for c in step.calls if c.kind == "allgather")
    assert rs.nbytes == 65536 * 384 * 4 and ag.nbytes * 16 <= rs.nbytes * 16
    assert {c.phase for c in step.calls} == {"forward", "backward"}


def test_gpu_side_copies_of_nccl_spans_are_not_collectives() -> None:
    trace = read_gpu_trace(TRACES / "hta__nccl_data_a100x2_resnet.json.gz")
    # 2 broadcasts (DDP's buffers) and 5 gradient buckets a step, each once although drawn on the GPU too
    assert [sorted(c.kind for c in s.calls) for s in trace.steps] == [["allreduce"] * 5 + ["broadcast"] * 2] * 3
    assert trace.library == "nccl" and trace.world_size == 2


def test_rccl_traces_are_labelled_rccl() -> None:
    trace = read_gpu_trace(TRACES / "tracelens__mi300x8_resnet_act_checkpoint_rank0.json.gz")
    assert trace.library == "rccl" and "MI300X" in trace.device


def test_old_kineto_format_is_read() -> None:
    trace = read_gpu_trace(TRACES / "kineto__resnet50_v100_1gpu_2021.pt.trace.json.gz")
    assert [s.number for s in trace.steps] == [16, 17, 18, 19, 20, 21]
    assert all(s.breakdown().compute_s > 0.05 for s in trace.steps) and not any(s.calls for s in trace.steps)


def test_a_repriced_call_is_what_flexcomm_cost_says(negative_queue) -> None:
    cluster = load_cluster("dgx-h100")
    calls = gr.price_calls(negative_queue, gr.nccl_pricer(cluster, 16))
    for kind in ("alltoall", "reduce-scatter", "allgather", "allreduce"):
        call = next(c for c in calls if c.kind == kind and c.repriced)
        proc = _cli("cost", "--cluster", "dgx-h100", "--collective", kind, "--size", str(call.nbytes), "--ranks",
                    "16", "--algorithm", "nccl", "--json")
        assert proc.returncode == 0, proc.stderr
        assert call.predicted_s == pytest.approx(json.loads(proc.stdout)["seconds"], rel=0.02)


def _synthetic(nccl_us: float, wait: bool = True) -> dict:
    """One step: compute kernel A (100 us), an allreduce launched after it (``nccl_us``), the host waits for it
    and launches compute kernel B (50 us), which must wait for the allreduce."""
    e: list[dict] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
                      "ts": 0.0, "dur": 1000.0}]

    def launch(ts: float, corr: int) -> None:
        e.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                  "dur": 2.0, "args": {"correlation": corr}})

    def kernel(name: str, stream: int, ts: float, dur: float, corr: int) -> None:
        e.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                  "args": {"stream": stream, "correlation": corr}})

    launch(10.0, 1)
    kernel("void elementwise_kernel", 7, 12.0, 100.0, 1)
    e.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 20.0, "dur": 10.0,
              "args": {"Collective name": "allreduce", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                       "dtype": "Float", "Group size": 8}})
    launch(22.0, 2)
    kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, 112.0, nccl_us, 2)
    if wait:
        e.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": 1, "tid": 1, "ts": 40.0,
                  "dur": 1.0, "args": {"correlation": 3}})
    launch(45.0, 4)
    kernel("void elementwise_kernel", 7, 112.0 + nccl_us if wait else 112.0, 50.0, 4)
    return {"traceEvents": e, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}}


def _write(tmp_path: Path, doc: dict, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_compute_that_waits_for_a_collective_moves_with_its_new_price(tmp_path: Path) -> None:
    trace = read_gpu_trace(_write(tmp_path, _synthetic(300.0)))
    base = trace.steps[0].breakdown()
    assert base.span_s == pytest.approx(450e-6) and base.exposed_nccl_s == pytest.approx(300e-6)
    for factor in (0.5, 2.0):
        durations = [np.array([a.duration_us * (factor if a.kind == "nccl" else 1) for a in s.activities])
                     for s in trace.steps]
        assert gr.replay(trace, durations).predicted_step_s[0] == pytest.approx((150 + 300 * factor) * 1e-6)


def test_compute_that_did_not_wait_does_not_move(tmp_path: Path) -> None:
    trace = read_gpu_trace(_write(tmp_path, _synthetic(300.0, wait=False)))
    durations = [np.array([a.duration_us * (2 if a.kind == "nccl" else 1) for a in s.activities])
                 for s in trace.steps]
    replayed = gr.replay_timeline(trace, durations)[0]
    b = [i for i, a in enumerate(trace.steps[0].activities) if a.kind == "compute"][-1]
    assert replayed.starts_us[b] == pytest.approx(trace.steps[0].activities[b].start_us)


def test_all_ranks_of_a_job_are_read_and_the_job_step_is_the_slowest(tmp_path: Path) -> None:
    job = replay_job([TRACES / "param__dlrm_v100x8_kineto"], Settings(traced=load_cluster("dgx1-v100")),
                     progress=False)
    assert sorted(r.rank for r in job.ranks) == list(range(8)) and job.world_size == 8
    assert job.job_step_s("measured") == pytest.approx(max(r.replayed.measured_median_s for r in job.ranks))


def test_ranks_of_different_jobs_are_refused(tmp_path: Path) -> None:
    shutil.copy(TRACES / "param__dlrm_v100x8_kineto" / sorted(
        p.name for p in (TRACES / "param__dlrm_v100x8_kineto").iterdir())[0], tmp_path)
    shutil.copy(TRACES / "hta__trace_diff_control_a100x8_rank3.json.gz", tmp_path)
    proc = _cli("simulate", "--from-trace", str(tmp_path), "--no-progress")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the traces of one job" in proc.stderr and ".json.gz" in proc.stderr


def test_a_trace_whose_collectives_have_no_size_says_which_option_records_them(tmp_path: Path) -> None:
    doc = _synthetic(300.0)
    for event in doc["traceEvents"]:
        if event["name"] == "record_param_comms":
            event["name"], event["cat"], event["args"] = "nccl:all_reduce", "user_annotation", {}
    proc = _cli("simulate", "--from-trace", str(_write(tmp_path, doc)), "--no-progress")
    assert proc.returncode == 2 and "record_shapes=True" in proc.stderr and "Traceback" not in proc.stderr


def test_execution_traces_of_both_schemas_and_of_another_run(tmp_path: Path) -> None:
    with tarfile.open(TRACES / "param__dlrm_v100x8_et.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    ets = sorted(tmp_path.rglob("dlrm_eg_*.json"))
    sizes = read_execution_trace(ets[0])  # schema 1.0.1: rf_id and tensors at the node's top level
    assert sizes and all(numel > 0 and element in (4, 8) for numel, element in sizes.values())
    new = json.loads(ets[0].read_text())
    new["schema"] = "1.1.1-chakra.0.0.4"
    for node in new["nodes"]:
        node["attrs"] = [{"name": "rf_id", "type": "uint64", "value": node.pop("rf_id", 0)}]
        node["inputs"] = {"values": node["inputs"], "shapes": node.pop("input_shapes", []), "types": []}
    converted = tmp_path / "et11.json"
    converted.write_text(json.dumps(new))
    assert read_execution_trace(converted) == sizes  # schema 1.1.x: under attrs and inputs.values
    from flexcomm.workloads.profiler_trace import _events

    worker0 = sorted((TRACES / "param__dlrm_v100x8_kineto").glob("worker0_*"))[0]
    check_execution_trace(worker0, _events(worker0), ets[0], sizes)
    other = ets[1]
    with pytest.raises(InputError, match="the same rank and process"):
        check_execution_trace(worker0, _events(worker0), other, read_execution_trace(other))


def test_simulate_reads_a_gpu_job_and_lists_what_each_collective_became() -> None:
    proc = _cli("simulate", "--from-trace", str(TRACES / "hta__negative_queue_a100x16_rank0.json.gz"),
                "--traced-on", "dgx-a100-80g", "--cluster", "dgx-h100", "--ranks", "16", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "measured GPU step" in out and "reproduced where it ran" in out and "predicted on the target" in out
    for kind in ("alltoall", "reduce-scatter", "allgather", "allreduce"):
        assert f"x {kind} (" in out
    assert "compute A100-SXM4-80GB -> H100-SXM" in out


def test_options_of_the_host_path_are_refused_for_a_gpu_trace() -> None:
    proc = _cli("simulate", "--from-trace", str(TRACES / "hta__nccl_data_a100x2_resnet.json.gz"),
                "--bandwidth", "10Gbit/s", "--no-progress")
    assert proc.returncode == 2 and "with a GPU trace" in proc.stderr and "Traceback" not in proc.stderr


def test_public_traces_are_checked_against_the_naive_baseline() -> None:
    frame = validate_gpu_traces()
    checked = frame[frame["model_step_ms"].notna()]
    assert len(frame) == 6 and len(checked) == 4
    assert checked["naive_step_ms"].notna().all()
    # the measured step is what the trace says: steps 550-554 of the 16-rank run take ~216 ms each
    row = frame.set_index("trace").loc["hta__negative_queue_a100x16_rank0.json.gz"]
    assert 200 < row["measured_step_ms"] < 230


def test_gzip_trace_and_plain_trace_read_the_same(tmp_path: Path) -> None:
    doc = _synthetic(300.0)
    plain = _write(tmp_path, doc)
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_gpu_trace(plain).steps == read_gpu_trace(packed).steps


def test_fsdp_and_pipeline_traces_made_here_on_gloo_are_read(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = Path(__file__).with_name("gloo_fsdp_pipeline_trace.py")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), str(port)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from flexcomm.workloads.profiler_trace import read_profiler_trace

    for rank, p2p in ((0, "send"), (1, "recv")):
        trace = read_profiler_trace(tmp_path / f"rank{rank}.json")
        assert (trace.backend, trace.world_size, trace.rank) == ("gloo", 2, rank)
        for step in trace.steps:
            found = {(c.kind, c.numel, c.group_size) for c in step.collectives}
            # all_gather: each rank's shard; gloo runs reduce_scatter_tensor as an allreduce of the whole vector
            assert found == {("allgather", 4096, 2), ("allreduce", 8192, 2), (p2p, 1024, 2)}
    # host-only traces of two ranks are not a GPU job: the CPU path says it replays one rank
    cli = _cli("simulate", "--from-trace", str(tmp_path), "--no-progress")
    assert cli.returncode == 2 and "one host-only trace" in cli.stderr
