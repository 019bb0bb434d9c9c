"""Your own job from a PyTorch profiler trace: the reader, the replay, ``simulate --from-trace``, the study axis."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import needs_netns
from figure_check import capture_figures
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cost_model import CostModel
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.sim.profile_replay import host_compute_scale, link_target, predicted_step_s, replay
from flexcomm.sim.traced_step import step_profile
from flexcomm.sim.workload import get_training_workload
from flexcomm.workloads.profiler_trace import read_profiler_trace

MAIN, GLOO = 100, 200  # thread ids: the training thread, gloo's runloop


def kineto(steps: list[dict], world: int = 3, shapes: bool = True, info: bool = True) -> dict:
    """A trace as torch.profiler writes one for DDP on gloo: per step (times in us from its start) ``len``,
    ``bwd`` (start, end), ``buckets`` [(launch, numel, span)], ``resumed``."""
    events: list[dict] = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN, "args": {"name": "python"}}]
    t = 1_000_000.0
    for n, step in enumerate(steps, start=2):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": MAIN,
                       "ts": t, "dur": step["len"]})
        b0, b1 = step["bwd"]
        events.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AddmmBackward0",
                       "pid": 1, "tid": MAIN, "ts": t + b0, "dur": b1 - b0})
        for launch, numel, span in step["buckets"]:
            args = {"Input Dims": [[[numel]], [], []], "Input type": ["TensorList", "", ""],
                    "Record function id": int(t + launch)} if shapes else {"Record function id": int(t + launch)}
            events.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": MAIN,
                           "ts": t + launch, "dur": 1.0, "args": args})
            span_args = {"Input Dims": [[numel]], "Input type": ["float"]} if shapes else {}
            events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": GLOO,
                           "ts": t + launch + 5.0, "dur": span, "args": span_args})
        events.append({"ph": "X", "cat": "cpu_op", "name": "torch.distributed.ddp.reducer::copy_bucket_to_grad",
                       "pid": 1, "tid": MAIN, "ts": t + step["resumed"], "dur": 10.0})
        t += step["len"] + 50.0
    doc: dict = {"schemaVersion": 1, "traceEvents": events}
    if info:
        doc["distributedInfo"] = {"backend": "gloo", "rank": 0, "world_size": world}
    return doc


def write(tmp_path: Path, doc: dict | str, name: str = "trace.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


STEP = {"len": 80_000.0, "bwd": (2_000.0, 4_000.0),
        "buckets": [(3_000.0, 262_144, 60_000.0), (3_900.0, 32_768, 50_000.0)], "resumed": 70_000.0}


def test_the_reader_finds_steps_backward_and_buckets(tmp_path: Path) -> None:
    trace = read_profiler_trace(write(tmp_path, kineto([STEP, STEP])))
    assert (trace.backend, trace.world_size, trace.device) == ("gloo", 3, "cpu")
    assert [s.number for s in trace.steps] == [2, 3]
    step = trace.steps[0]
    assert step.duration_s == pytest.approx(0.08)
    assert (step.backward_start_s, step.backward_end_s, step.resumed_s) == pytest.approx((0.002, 0.004, 0.07))
    buckets = step.bucket_exchanges()
    assert [(c.numel, c.element_bytes, c.group_size) for c in buckets] == [(262_144, 4, 3), (32_768, 4, 3)]
    assert [c.launch_s for c in buckets] == pytest.approx([0.003, 0.0039])  # the c10d op, not the span's start
    # gzip, as tensorboard_trace_handler writes it, reads the same
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(kineto([STEP, STEP])).encode()))
    assert read_profiler_trace(gz).steps == trace.steps


bucket = st.tuples(st.floats(0.05, 0.95), st.integers(1, 2_000_000))


@settings(max_examples=40, deadline=None)
@given(st.lists(bucket, min_size=1, max_size=5), st.floats(1e6, 1e10), st.integers(2, 8))
def test_the_replay_is_ddp_overlap_of_the_measured_parts(buckets: list, bandwidth: float, ranks: int) -> None:
    """Predicted step = max(backward end, buckets sent in order once ready) + the part after the exchange,
    with each bucket priced by the cost model on the target: DDP's overlap on measured compute."""
    fractions = sorted(f for f, _ in buckets)
    bwd = (1_000.0, 21_000.0)
    launches = [bwd[0] + f * (bwd[1] - bwd[0]) for f in fractions]
    step = {"len": 100_000.0, "bwd": bwd, "buckets": [(t, n, 1.0) for t, (_, n) in zip(launches, buckets,
                                                                                        strict=True)],
            "resumed": 90_000.0}
    doc = kineto([step, step], world=ranks)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        profile = step_profile(read_profiler_trace(write(Path(folder), doc)))
    cluster = link_target(ranks, bandwidth)
    predicted = predicted_step_s(replay(profile, cluster, ranks=ranks, iterations=1))
    model = CostModel.from_cluster(cluster)
    end = 0.0
    for launch, (_, numel) in zip(launches, buckets, strict=True):
        price = float(model.collective("allreduce", "ring", numel * 4.0, ranks).total)
        end = max(end, launch / 1e6) + price
    expected = max(end, bwd[1] / 1e6) + (100_000.0 - 90_000.0) / 1e6
    assert predicted == pytest.approx(expected, rel=1e-9)


def test_steps_with_another_bucket_layout_are_left_out_and_said_so(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    first = {**STEP, "buckets": [(3_000.0, 294_912, 60_000.0)]}  # DDP before it rebuilt its buckets
    path = write(tmp_path, kineto([first, STEP, STEP]))
    profile = step_profile(read_profiler_trace(path))
    assert profile.steps == (3, 4) and profile.left_out == (2,)
    assert profile.bucket_bytes == (262_144 * 4, 32_768 * 4)
    assert main(["simulate", "--from-trace", str(path)]) == 0
    assert "steps 3, 4 (step 2 left out: other buckets or no backward)" in capsys.readouterr().out


def test_host_sharing_scales_compute_by_oversubscription() -> None:
    assert host_compute_scale(3, 3, None) == 1.0
    assert host_compute_scale(3, 4, 2) == pytest.approx(2.0 / 1.5)
    assert host_compute_scale(3, 2, 2) == pytest.approx(1.0 / 1.5)
    assert host_compute_scale(1, 2, 4) == 1.0  # both fit the cores
    with pytest.raises(InputError, match="host-cores"):
        host_compute_scale(3, 4, 0)


def test_sizes_come_from_the_execution_trace_where_the_trace_has_no_shapes(tmp_path: Path) -> None:
    doc = kineto([STEP, STEP], shapes=False)
    path = write(tmp_path, doc)
    with pytest.raises(InputError, match="without a size.*record_shapes"):
        read_profiler_trace(path)
    nodes = []
    for event in doc["traceEvents"]:
        if event.get("name") == "c10d::allreduce_":
            numel = 262_144 if len(nodes) % 2 == 0 else 32_768
            nodes.append({"id": len(nodes), "name": "c10d::allreduce_",
                          "attrs": [{"name": "rf_id", "type": "uint64", "value": event["args"]["Record function id"]}],
                          "inputs": {"values": [[[7, 8, 0, numel, 4, "cpu"]], "<Object>"]}})
    et = write(tmp_path, {"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}, "et.json")
    trace = read_profiler_trace(path, et)
    assert [c.numel for c in trace.steps[0].bucket_exchanges()] == [262_144, 32_768]


def test_the_exchange_ends_when_ddp_copies_the_last_bucket_back(tmp_path: Path) -> None:
    """DDP copies bucket 0 back as soon as it is done, maybe while bucket 1 is still in flight: the exchange is
    over when the last bucket's copies begin (the copies whose elements add up to its size)."""
    doc = kineto([STEP, STEP])
    events = doc["traceEvents"]
    for event in [e for e in events if e.get("name") == "torch.distributed.ddp.reducer::copy_bucket_to_grad"]:
        events.remove(event)
        start = event["ts"] - 70_000.0  # the step's start
        for offset, dims in ((40_000.0, [512, 512]), (40_100.0, [4, 16_384]), (71_000.0, [32_768])):
            events.append({**event, "ts": start + offset, "args": {"Input Dims": [dims]}})
    step = read_profiler_trace(write(tmp_path, doc)).steps[0]
    assert step.resumed_s == pytest.approx(0.071)  # not 0.040: bucket 0's copies ran during bucket 1's exchange


def test_what_a_gpu_or_nccl_trace_adds_is_read_or_skipped(tmp_path: Path) -> None:
    """CUDA traces repeat each step as gpu_user_annotation; NCCL's record_param_comms also marks waits and
    communicator creation; a trace's events need not be in time order."""
    doc = kineto([STEP, STEP])
    for event in list(doc["traceEvents"]):
        if event.get("name", "").startswith("ProfilerStep"):
            doc["traceEvents"].append({**event, "cat": "gpu_user_annotation", "tid": 7, "ts": event["ts"] + 3.0})
        if event.get("name") == "gloo:all_reduce":  # as NCCL writes it: record_param_comms on the main thread
            doc["traceEvents"].remove(event)
            numel = event["args"]["Input Dims"][0][0]
            doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1,
                                       "tid": MAIN, "ts": event["ts"] - 4.0, "dur": 2.0,
                                       "args": {"Collective name": "allreduce", "In msg nelems": numel,
                                                "Out msg nelems": numel, "Group size": 3, "dtype": "Float"}})
            doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1,
                                       "tid": MAIN, "ts": event["ts"] + 2.0, "dur": 1.0,
                                       "args": {"Collective name": "wait", "Group size": 3}})
    doc["traceEvents"].reverse()
    trace = read_profiler_trace(write(tmp_path, doc))
    assert [s.number for s in trace.steps] == [2, 3]
    assert [c.numel for c in trace.steps[0].bucket_exchanges()] == [262_144, 32_768]


def _bad(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    out_of_order = kineto([STEP, STEP])
    steps = [e for e in out_of_order["traceEvents"] if e.get("name", "").startswith("ProfilerStep")]
    steps[0]["name"], steps[1]["name"] = steps[1]["name"], steps[0]["name"]
    no_size = kineto([STEP])
    for event in no_size["traceEvents"]:
        event.get("args", {}).pop("Input Dims", None)
    text = json.dumps(kineto([STEP]))
    bool_dims = kineto([STEP])
    for event in bool_dims["traceEvents"]:
        if event.get("name") == "gloo:all_reduce":
            event["args"]["Input Dims"] = [[True]]
        if event.get("name") == "c10d::allreduce_":
            event["args"]["Input Dims"] = [[[True]], [], []]
    odd_info = kineto([STEP, STEP])
    odd_info["distributedInfo"] = {"backend": "gloo", "rank": "r0", "world_size": True}
    huge = kineto([{**STEP, "buckets": [(3_000.0, 2_000 * 2**40, 60_000.0)]}])  # 8,000 TiB of float32
    empty_bucket = kineto([{**STEP, "buckets": [(3_000.0, 0, 60_000.0)]}])
    outside = kineto([STEP])
    outside["distributedInfo"]["rank"] = 7  # in a world of 3
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    damaged = tmp_path / "damaged.json.gz"
    damaged.write_bytes(gzip.compress(text.encode())[:12] + b"\x00" * 64)
    return {
        "no step": (write(tmp_path, {"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}]}, "a.json"),
                    "no ProfilerStep#N event"),
        "truncated": (write(tmp_path, text[: len(text) // 2], "b.json"), "truncated JSON (it ends early)"),
        "not json": (write(tmp_path, "hello\n", "c.json"), "not JSON (lexical error: invalid char in json text)"),
        "out of order": (write(tmp_path, out_of_order, "d.json"), "out of order"),
        "no size": (write(tmp_path, no_size, "e.json"), "(gloo:all_reduce) without a size"),
        "negative": (write(tmp_path, {"traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": -3}]}, "f.json"),
                     "event #0 ('x') dur=-3"),
        "no ddp": (write(tmp_path, kineto([{**STEP, "buckets": []}]), "g.json"), "no gradient allreduce"),
        "a boolean size": (write(tmp_path, bool_dims, "h.json"), "without a size"),
        "odd distributedInfo": (write(tmp_path, odd_info, "i.json"), "(gloo:all_reduce) without a group size"),
        "deep": (deep, "JSON nested at most 100 levels"),
        "a collective larger than any GPU": (write(tmp_path, huge, "j.json"), "(gloo:all_reduce) of "
                                             "8,796,093,022,208,000 bytes"),
        "an empty gradient bucket": (write(tmp_path, empty_bucket, "k.json"), "a gradient allreduce of 0 bytes"),
        "a rank outside its world": (write(tmp_path, outside, "l.json"), "distributedInfo rank 7 in a world of 3"),
        "damaged gzip": (damaged, "a gzip trace file that inflates"),
    }


def test_bad_traces_are_one_line_errors_naming_the_file_and_event(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for case, (path, message) in _bad(tmp_path).items():
        code = main(["simulate", "--from-trace", str(path), "--bandwidth", "1Gbit/s"])
        err = capsys.readouterr().err
        assert code == 2, case
        assert err.count("\n") == 1 and "Traceback" not in err, (case, err)
        assert str(path) in err and message in err, (case, err)
    missing = tmp_path / "missing.json"
    assert main(["simulate", "--from-trace", str(missing)]) == 2
    assert "a readable trace file" in capsys.readouterr().err


def test_bad_what_if_knobs_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, kineto([STEP, STEP]))
    for argv, message in (
        (["--bandwidth", "1Gbit/s", "--scheme", "powersgd"], "casts and PowerSGD are priced from a device"),
        (["--bandwidth", "fast"], "bandwidth"),
        (["--cluster", "dgx-h100", "--bandwidth", "1Gbit/s"], "either --cluster or --bandwidth"),
        (["--workload", "resnet50"], "a trace alone"),
        (["--traced-on", "nowhere"], "cluster"),
        (["--bandwidth", "1Gbit/s", "--ranks", "1"], "one rank does not communicate"),
        (["--bandwidth", "1Gbit/s", "--host-cores", "0"], "host-cores"),
    ):
        assert main(["simulate", "--from-trace", str(path), *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


def test_simulate_from_trace_reproduces_then_predicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, kineto([STEP, STEP]))
    assert main(["simulate", "--from-trace", str(path), "--traced-on", "200Mbit/s", "--bandwidth", "50Mbit/s",
                 "--json", "--out", str(tmp_path / "out")]) == 0
    report = json.loads(capsys.readouterr().out)
    traced, target = report["traced"], report["target"]
    assert traced["measured_step_s"] == pytest.approx(0.08)
    assert math.isfinite(traced["error"]) and traced["setting"] == "3 ranks on 200Mbit/s links"
    assert target["predicted_step_s"] > traced["predicted_step_s"]  # a quarter of the bandwidth
    assert json.loads((tmp_path / "out" / "replay.json").read_text())["target"] == target
    assert main(["simulate", "--from-trace", str(path), "--cluster", "dgx-h100", "--ranks", "16"]) == 0
    out = capsys.readouterr().out
    assert "not reproduced: give --traced-on" in out and "predicted on 16 ranks of dgx-h100, dense" in out


def test_a_study_sweeps_a_traced_step(tmp_path: Path) -> None:
    trace = write(tmp_path, kineto([STEP, STEP]))
    assert get_training_workload(str(trace)).measured_buckets
    study = tmp_path / "study.yaml"
    # named beside the study file, as a cluster file may be: found there whatever the working folder
    study.write_text("name: traced\nengine: sim\ncluster: 8x1-10gbe\nworkload: trace.json\n"
                     "strategies: [dense]\nsweep:\n  bandwidth: [100Mbit/s, 10Gbit/s]\n  ranks: [2]\nseed: 0\n")
    with capture_figures() as figures:
        assert main(["study", str(study), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert figures and all(not problems for problems in figures.values()), figures
    results = pd.read_csv(tmp_path / "out" / "results.csv").sort_values("bandwidth_Bps")
    slow, fast = results["step_time_s"].tolist()
    assert slow > fast >= 0.004 + 0.01  # never below the measured backward end plus the part after it
    assert np.isfinite(results["comm_time_s"]).all()


def test_a_real_profiled_ddp_run_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """train-ddp --torch-profile writes the trace torch.profiler writes; simulate --from-trace reads it."""
    out = tmp_path / "run"
    assert main(["train-ddp", "--nproc", "2", "--strategy", "builtin", "--steps", "6", "--hidden", "64",
                 "--out", str(out), "--torch-profile", "--timeout", "600s"]) == 0
    capsys.readouterr()
    trace = read_profiler_trace(out / "builtin" / "trace.json")
    assert (trace.backend, trace.world_size) == ("gloo", 2)
    assert len(trace.steps) >= 2 and all(s.bucket_exchanges() for s in trace.steps)
    params = 64 * 64 + 64 + 64 * 10 + 10  # mlp-digits with one hidden layer of 64
    assert sum(c.numel for c in trace.steps[-1].bucket_exchanges()) == params
    assert main(["simulate", "--from-trace", str(out / "builtin" / "trace.json"), "--traced-on", "10Gbit/s",
                 "--ranks", "4", "--host-cores", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(str(out / "builtin" / "trace.json") + ": gloo on cpu, 2 ranks; steps ")
    assert lines[2].startswith("reproduced on the traced setting (2 ranks on 10Gbit/s links): ")
    assert lines[3].startswith("predicted on 4 ranks on 10Gbit/s links, dense: ")
    assert lines[3].endswith("compute x2.00 for ranks sharing the host's cores")


@needs_netns
def test_validate_from_trace_on_the_testbed(tmp_path: Path, private_testbed_state: Path) -> None:
    """The loop on a tiny scale: trace 2 ranks at 1 Gbit/s, predict 500 Mbit/s and 3 ranks, measure them."""
    from flexcomm.real_backend.from_trace_validate import COLUMNS, run_from_trace_validation
    from flexcomm.real_backend.testbed import list_namespaces

    before = set(list_namespaces())
    out = tmp_path / "loop"
    with capture_figures() as figures:
        folder, summary, failures = run_from_trace_validation(
            out, traced_ranks=2, traced_bandwidth="1Gbit/s", bandwidths="500Mbit/s", rank_counts="3", steps=5,
            hidden="64", timeout_s=300, quiet=True)
    assert failures == [] and set(list_namespaces()) == before
    assert figures["from_trace.png"] == []
    table = pd.read_csv(folder / "from_trace.csv")
    assert tuple(table.columns) == COLUMNS and len(table) == 9  # 3 settings x builtin, topk-ag, topk-ar
    assert table["traced"].sum() == 1 and (table["measured_step_s"] > 0).all() and (table["predicted_step_s"] > 0).all()
    assert set(table["setting"]) == {"2 ranks, 1Gbit/s", "2 ranks, 500Mbit/s", "3 ranks, 1Gbit/s"}
    # structure only: how close the replay comes is a measurement (`flexcomm validate --from-trace`, docs)
    assert math.isfinite(summary["traced_error"]) and summary["points"] == 8
    assert 0.0 <= summary["pairwise_order_agreement"] <= 1.0
    # predicting again from the same folder gives the same numbers (Top-k's measured rate is kept)
    again, summary_again, _ = run_from_trace_validation(
        out, traced_ranks=2, traced_bandwidth="1Gbit/s", bandwidths="500Mbit/s", rank_counts="3", steps=5,
        hidden="64", measure_runs=False, quiet=True)
    pd.testing.assert_frame_equal(pd.read_csv(again / "from_trace.csv"), table)


def test_the_committed_from_trace_table_carries_the_naive_baseline_its_trace_gives() -> None:
    """validation/from-trace (the docs' table): the naive column is re-made from the committed trace, not typed,
    and the summary's counts of where the replay beats it follow from the table."""
    from flexcomm.real_backend.from_trace_validate import COLUMNS, summarize, with_naive_baseline
    from flexcomm.sim.traced_step import step_profile
    from flexcomm.workloads.profiler_trace import read_profiler_trace

    folder = Path(__file__).resolve().parents[1] / "validation" / "from-trace"
    table = pd.read_csv(folder / "from_trace.csv")
    committed = json.loads((folder / "summary.json").read_text())
    profile = step_profile(read_profiler_trace(folder / "mlp-3ranks-200mbit.trace.json.gz"))
    again = with_naive_baseline(table.drop(columns=["naive_step_s", "naive_error"]), profile, committed["ratio"])
    pd.testing.assert_frame_equal(again[list(COLUMNS)], table, check_exact=False, rtol=1e-9)
    fresh = summarize(table)
    for key in ("median_abs_error", "naive_median_abs_error", "naive_worst_abs_error", "model_closer_than_naive"):
        assert fresh[key] == pytest.approx(committed[key], rel=1e-9), key
    # what the docs say: the baseline is too fast everywhere (no latency, no codec), the replay closer on 13 of 14
    assert (table["naive_error"] < 0).all() and committed["model_closer_than_naive"] == 13


def test_the_from_trace_figure_reads_for_any_measured_range(tmp_path: Path) -> None:
    """The testbed's measured steps set the axes' range; 5 of these 40 ranges overlapped the tick labels of a
    fixed log locator (one failed a clean-clone CI run)."""
    from flexcomm.real_backend.from_trace_validate import STRATEGIES, plot

    rng = np.random.default_rng(1)
    with capture_figures() as figures:
        for k in range(40):
            base, spread = 10 ** rng.uniform(0, 3), 10 ** rng.uniform(0.02, 1.5)
            rows = []
            for strategy in STRATEGIES:
                for j in range(3):
                    m = base * spread ** rng.uniform(0, 1)
                    rows.append({"strategy": strategy, "measured_step_s": m / 1e3,
                                 "predicted_step_s": m * rng.uniform(0.7, 1.4) / 1e3,
                                 "naive_step_s": m * rng.uniform(0.5, 1.1) / 1e3,
                                 "traced": j == 0 and strategy == STRATEGIES[0]})
            plot(pd.DataFrame(rows), tmp_path / f"from_trace_{k}.png")
    assert len(figures) == 40 and all(not problems for problems in figures.values()), figures
