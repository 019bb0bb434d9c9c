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
import pandas as pd
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
    assert job.job_step_s("measured") == pytest.approx(max(r.replayed.measured_mean_s for r in job.ranks))


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


@pytest.mark.parametrize("option", [["--bandwidth", "10Gbit/s"], ["--algorithm", "ring"], ["--seed", "3"],
                                    ["--iterations", "5"], ["--scheme", "topk"]])
def test_options_a_gpu_replay_would_ignore_are_refused(option: list[str]) -> None:
    proc = _cli("simulate", "--from-trace", str(TRACES / "hta__nccl_data_a100x2_resnet.json.gz"), *option,
                "--no-progress")
    assert proc.returncode == 2 and "with a GPU trace" in proc.stderr and "Traceback" not in proc.stderr


def test_public_traces_are_checked_against_the_naive_baseline(tmp_path: Path) -> None:
    from figure_check import capture_figures

    from flexcomm.experiments.cli import main

    with capture_figures() as figures:
        assert main(["validate", "--gpu-traces", "--out", str(tmp_path)]) == 0
    assert figures and all(not problems for problems in figures.values()), figures
    written = pd.read_csv(tmp_path / "gpu_traces.csv")
    frame = validate_gpu_traces()  # a second run gives the same numbers
    assert np.allclose(written["model_step_ms"], frame["model_step_ms"], equal_nan=True)
    assert "naive baseline" in (tmp_path / "gpu_traces.md").read_text()
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


def test_ddp_buckets_are_formed_as_torch_forms_them() -> None:
    from flexcomm.sim.gpu_data_parallel import ddp_buckets

    mib = 1 << 20
    # reversed order; a parameter joins the open bucket, which closes once it holds 1 MiB (the first) or 25 MiB
    # (reducer.cpp compute_bucket_assignment_by_size: add, then compare with the limit)
    assert ddp_buckets((10 * mib, 20 * mib, 3 * mib, mib // 2, mib // 2)) == [mib, 33 * mib]
    assert ddp_buckets((5 * mib, 30 * mib, 2 * mib)) == [2 * mib, 30 * mib, 5 * mib]
    assert ddp_buckets(()) == []


def test_a_one_gpu_trace_becomes_data_parallel_with_its_own_parameters() -> None:
    trace = read_gpu_trace(TRACES / "kineto__resnet50_v100_1gpu_2021.pt.trace.json.gz")
    assert len(trace.parameter_bytes) == 161 and sum(trace.parameter_bytes) == 25_557_032 * 4  # ResNet-50
    from flexcomm.sim.gpu_data_parallel import as_data_parallel

    ddp = as_data_parallel(trace)
    for before, after in zip(trace.steps, ddp.steps, strict=True):
        added = [a for a in after.activities if a.kind == "nccl"]
        assert sum(c.nbytes for c in after.calls) == 25_557_032 * 4 and len(added) == len(after.calls) == 5
        # the buckets leave during the backward, in order, and the traced step is unchanged by adding them
        assert all(before.backward_us[0] <= a.launch_us <= before.backward_us[1] for a in added)
        assert [a.call for a in added] == sorted(a.call for a in added)
    durations = [np.array([a.duration_us for a in s.activities]) for s in ddp.steps]
    assert gr.replay(ddp, durations).predicted_step_s == pytest.approx(gr.replay(trace, [
        np.array([a.duration_us for a in s.activities]) for s in trace.steps]).measured_step_s)
    slow = [np.array([a.duration_us if a.kind != "nccl" else 200_000.0 for a in s.activities]) for s in ddp.steps]
    assert min(gr.replay(ddp, slow).predicted_step_s) > 0.2  # the optimizer waits for the last bucket
    proc = _cli("simulate", "--from-trace", str(TRACES / "kineto__resnet50_v100_1gpu_2021.pt.trace.json.gz"),
                "--cluster", "8x1-10gbe", "--ranks", "8", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "5 x allreduce (backward), 97.5MiB" in proc.stdout and "one GPU as data parallel" in proc.stdout


def test_a_one_gpu_trace_without_parameter_sizes_says_what_it_needs(tmp_path: Path) -> None:
    doc = _synthetic(300.0)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if "nccl" not in e["name"].lower()
                          and e["name"] != "record_param_comms"]
    doc["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 1}
    proc = _cli("simulate", "--from-trace", str(_write(tmp_path, doc)), "--cluster", "dgx-h100", "--ranks", "8",
                "--no-progress")
    assert proc.returncode == 2 and "Optimizer.step" in proc.stderr and proc.stderr.count("\n") == 1


def _rank(rank: int, compute_us: float, clock_us: float) -> dict:
    """Rank ``rank`` of 2: compute A for ``compute_us``, then an allreduce that ends at 50 us after the later
    rank arrives (traced: rank 0's kernel spins until rank 1 joins), then compute B that waits for it; every
    time shifted by ``clock_us`` (each host has its own clock)."""
    doc = _synthetic(0.0)
    arrive = {0: 12.0 + 100.0, 1: 12.0 + 300.0}
    for event in doc["traceEvents"]:
        if event["name"].startswith("void elementwise") and event["ts"] == 12.0:
            event["dur"] = compute_us
        if event["name"].startswith("nccl"):
            event["ts"], event["dur"] = arrive[rank], max(arrive.values()) + 50.0 - arrive[rank]
        if event["name"].startswith("void elementwise") and event["ts"] > 12.0:
            event["ts"] = max(arrive.values()) + 50.0
        if event["name"] == "record_param_comms":
            event["args"]["Group size"] = 2
        event["ts"] += clock_us
    doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    return doc


def test_ranks_are_coupled_at_every_job_wide_collective(tmp_path: Path) -> None:
    from flexcomm.sim.gpu_job import clock_offsets_us, couple

    traces = [read_gpu_trace(_write(tmp_path, _rank(0, 100.0, 0.0), "r0.json")),
              read_gpu_trace(_write(tmp_path, _rank(1, 300.0, 5e6), "r1.json"))]
    assert clock_offsets_us(traces) == pytest.approx([0.0, 5e6])
    # every collective re-priced at 50 us: rank 0 still waits for rank 1 (arrives 200 us later) to move data
    durations = [[np.array([a.duration_us if a.kind != "nccl" else 50.0 for a in s.activities]) for s in t.steps]
                 for t in traces]
    coupled, settled = couple(traces, durations, clock_offsets_us(traces))
    assert settled
    alone = gr.replay(traces[0], durations[0])
    assert alone.predicted_step_s[0] == pytest.approx((100 + 50 + 50) * 1e-6)
    assert coupled[0].predicted_step_s[0] == pytest.approx((300 + 50 + 50) * 1e-6)  # waits for rank 1
    assert coupled[1].predicted_step_s[0] == pytest.approx((300 + 50 + 50) * 1e-6)


def test_a_host_sync_moves_later_launches_with_the_work_before_it(tmp_path: Path) -> None:
    doc = _synthetic(0.0, wait=False)
    events = [e for e in doc["traceEvents"] if "nccl" not in e["name"].lower() and e["name"] != "record_param_comms"]
    # kernel A (12-112 us), the host synchronizes at 120-125 us (the GPU was already idle), kernel B on another
    # stream launched at 130 us starts at 132
    events = [e for e in events if not (e["name"].startswith("void") and e["ts"] > 12.0)
              and not (e["name"] == "cudaLaunchKernel" and e["ts"] > 12.0)]
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
                   "ts": 120.0, "dur": 5.0, "args": {"correlation": 9}})
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 130.0,
                   "dur": 2.0, "args": {"correlation": 10}})
    events.append({"ph": "X", "cat": "kernel", "name": "void other_kernel", "pid": 0, "tid": 9, "ts": 132.0,
                   "dur": 10.0, "args": {"stream": 9, "correlation": 10}})
    doc["traceEvents"] = events
    trace = read_gpu_trace(_write(tmp_path, doc))
    longer = [np.array([1000.0 if a.stream % (1 << 20) == 7 else a.duration_us for a in s.activities])
              for s in trace.steps]
    times = gr.replay_timeline(trace, longer)[0]
    b = next(i for i, a in enumerate(trace.steps[0].activities) if a.stream % (1 << 20) == 9)
    assert times.starts_us[b] == pytest.approx(12.0 + 1000.0 + 5.0 + 5.0 + 2.0)  # A's end, the sync, the launch gap


def test_streams_of_two_gpus_of_one_process_are_apart(tmp_path: Path) -> None:
    doc = _synthetic(0.0, wait=False)
    for event in doc["traceEvents"]:
        if event["name"].startswith("void") and event["ts"] > 12.0:
            event["args"]["device"], event["pid"], event["ts"] = 1, 1, 20.0  # B on GPU 1's stream 7
    trace = read_gpu_trace(_write(tmp_path, doc))
    compute = [i for i, a in enumerate(trace.steps[0].activities) if a.kind == "compute"]
    assert len({trace.steps[0].activities[i].stream for i in compute}) == 2
    longer = [np.array([a.duration_us * 5 for a in s.activities]) for s in trace.steps]
    times = gr.replay_timeline(trace, longer)[0]
    assert times.starts_us[compute[1]] == pytest.approx(20.0)  # not behind GPU 0's kernel


def test_a_foreach_optimizer_gives_every_group_of_parameters(tmp_path: Path) -> None:
    from flexcomm.workloads.gpu_trace import optimizer_parameters
    from flexcomm.workloads.profiler_trace import _events

    span = {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step", "pid": 1, "tid": 1,
            "ts": 0.0, "dur": 100.0}

    def op(name: str, ts: float, shapes: list) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1.0,
                "args": {"Input Dims": [shapes, []], "Input type": ["TensorList", "Scalar"]}}

    events = [span, op("aten::_foreach_add_", 1.0, [[], []]),  # the step counts: scalars
              op("aten::_foreach_lerp_", 2.0, [[4, 8], [8]]), op("aten::_foreach_mul_", 3.0, [[4, 8], [8]]),
              op("aten::_foreach_add_", 4.0, [[]]), op("aten::_foreach_lerp_", 5.0, [[16]])]  # a second group
    path = _write(tmp_path, {"traceEvents": events})
    assert optimizer_parameters(_events(path), path) == (32 * 4, 8 * 4, 16 * 4)


def test_a_job_on_one_gpu_exchanges_nothing() -> None:
    proc = _cli("simulate", "--from-trace", str(TRACES / "hta__trace_diff_control_a100x8_rank3.json.gz"),
                "--cluster", "dgx-h100", "--ranks", "1", "--no-progress", "--json")
    assert proc.returncode == 0, proc.stderr
    calls = json.loads(proc.stdout)["per_rank"][0]["target_calls"]
    assert calls and all(c["predicted_s"] == 0.0 and c["repriced"] for c in calls)
