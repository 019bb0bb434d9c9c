"""How NCCL runs a call (costmodel.collective_libraries.runtime): channels launched per size as the enqueue
reduces them, the chunk pipeline's fill, the host's launch, the explanation a user reads, and its errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.collective_libraries.call_cost import explain
from flexcomm.costmodel.collective_libraries.runtime import THREAD_THRESHOLD, describe, launched
from flexcomm.costmodel.collective_libraries.topology import nccl_system
from flexcomm.experiments.cli import main

H100 = load_cluster("dgx-h100")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.sampled_from(["ll", "ll128", "simple"]), st.sampled_from(["ring", "tree"]))
def test_channels_shrink_below_the_thread_threshold_and_never_grow_with_less_data(log_bytes: int, protocol: str,
                                                                                 algorithm: str) -> None:
    system = nccl_system(H100, 16)
    nbytes = 2.0 ** log_bytes
    nc, nt = launched(system, algorithm, protocol, nbytes)
    smaller, _ = launched(system, algorithm, protocol, nbytes / 2)
    assert 1 <= smaller <= nc
    threshold = THREAD_THRESHOLD[protocol] * (16 if (algorithm, protocol) == ("ring", "ll") else 1)
    if nc > 1:  # the enqueue stops dropping channels once each thread has its threshold of bytes
        assert nbytes >= nc * nt * threshold


def test_the_time_is_its_parts_and_the_host_bounds_small_calls_from_one_thread() -> None:
    for size in (8, 1 << 20, 64 << 20, 4 << 30):
        run = explain(H100, "allreduce", size, 16)
        assert run.seconds == pytest.approx(run.launch_s + run.latency_s + run.fill_s + run.bandwidth_s)
        assert run.dominant in ("launch", "latency", "pipeline fill", "bandwidth")
    alone = explain(H100, "allreduce", 1024, 8)
    eight = explain(H100, "allreduce", 1024, 8, gpus_per_process=8)
    assert alone.launch_s == 0.0 and eight.seconds == pytest.approx(8 * 5e-6)  # 8 launches of 5 us, host-bound
    assert eight.dominant == "launch"
    graph = explain(H100, "allreduce", 1024, 8, gpus_per_process=0)  # a CUDA-graph replay pays no launch
    assert graph.seconds == pytest.approx(alone.seconds)


def test_chains_fill_their_pipeline_and_rings_do_not() -> None:
    ring = explain(H100, "allreduce", 64 << 20, 8, "nccl:ring/simple")
    nvls = explain(H100, "allreduce", 64 << 20, 8, "nccl:nvls")
    tree = explain(H100, "allreduce", 64 << 20, 16, "nccl:tree/simple")
    assert ring.fill_s == 0.0 and nvls.fill_s > 0 and tree.fill_s > 0
    assert nvls.channels == 16 and nvls.threads == 640  # NVLS runs its nvlsChannels (Hopper: 16)


def test_the_network_step_pays_a_slower_fabric_and_the_plugin_latency_only_steers() -> None:
    efa = load_cluster("p5-48xlarge")
    run = explain(efa, "allreduce", 8, 16)
    data = efa.to_dict()
    data["inter_link"]["latency_s"] = 1e-6  # the same hardware with InfiniBand's latency
    from flexcomm.costmodel.cluster import Cluster

    fast = explain(Cluster.from_dict(data), "allreduce", 8, 16, f"nccl:{run.algorithm}/{run.protocol}")
    assert run.latency_s > fast.latency_s
    # the 75 us aws-ofi-nccl reports is in no time: a tree step costs hwLat + (20 - 1) us, not + 75 us
    assert run.latency_s < fast.latency_s + 4 * 20e-6


def test_cost_explain_prints_what_runs_and_where_the_time_goes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--cluster", "dgx-h100", "--ranks", "16", "--size", "64MiB", "--algorithm", "nccl",
                 "--explain"]) == 0
    out = capsys.readouterr().out
    for word in ("channels", "threads a block", "chunk", "launch (host-bound)", "latency", "pipeline fill",
                 "bandwidth", "dominated by"):
        assert word in out
    assert main(["cost", "--cluster", "dgx-h100", "--ranks", "16", "--size", "64MiB", "--algorithm", "nccl",
                 "--explain", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    explained = data["explain"]
    assert explained["seconds"] == pytest.approx(data["seconds"])
    assert {"channels", "threads", "chunk_bytes", "launch_s", "latency_s", "fill_s", "bandwidth_s"} <= set(explained)
    assert describe(explain(H100, "allreduce", 1 << 20, 16))[0].startswith("NCCL 2.30.7 runs")


@pytest.mark.parametrize(("argv", "field"), [
    (["--explain", "--order", "rack-major"], "explain"),  # an order is walked by a formula's ring
    (["--algorithm", "ring", "--explain"], "explain"),
    (["--algorithm", "nccl", "--nccl-version", "2.12"], "nccl-version"),
    (["--algorithm", "nccl:pat", "--nccl-version", "2.20.3", "--collective", "allgather"], "algorithm"),
    (["--algorithm", "nccl:fast"], "algorithm"),
    (["--algorithm", "nccl", "--gpus-per-process", "-1"], "gpus-per-process"),
])
def test_nccl_options_are_refused_in_one_line(argv: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--cluster", "dgx-h100", "--ranks", "16", "--size", "1MiB", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"flexcomm: error: {field}")


@pytest.mark.parametrize("argv", [[], ["--scheme", "powersgd"], ["--scheme", "topk-ar"], ["--collective", "allgather"]])
def test_cost_on_a_gpu_cluster_prices_as_nccl_runs_it_by_default(argv: list[str],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """One price for one job: ``cost`` without --algorithm on a cluster with a gpu_fabric prices what simulate
    and whatif price there (every call as NCCL runs it), not a flat ring 9x slower for 28 GB."""
    base = ["cost", "--cluster", "dgx-h100", "--ranks", "16", "--size", "28GB", "--json", *argv]
    assert main(base) == 0
    default = json.loads(capsys.readouterr().out)
    assert main([*base, "--algorithm", "nccl"]) == 0
    assert default == json.loads(capsys.readouterr().out)
    assert main([*base, "--algorithm", "ring"]) == 0
    assert json.loads(capsys.readouterr().out)["seconds"] > default["seconds"]


def test_rccl_names_what_it_does_not_model(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from flexcomm.costmodel.cluster import Cluster

    corpus = Path(__file__).parent.parent / "validation" / "nccl-tests"
    amd = Cluster.from_file(corpus / "clusters" / "_amd-mi300x.yaml")
    small = explain(amd, "allreduce", 1 << 20, 8)
    assert small.library == "rccl" and small.note.startswith("msccl not modelled")
    assert small.dominant.startswith("msccl")
    big = explain(amd, "allreduce", 1 << 30, 8)
    assert big.note == "" and big.threads == 256 and big.channels == 56  # 28 xGMI rings, doubled
    tiny = explain(amd, "allreduce", 64 << 10, 8)
    assert tiny.channels < 56  # dropped while bytes < channels x 256 x threshold
    older = explain(amd, "allreduce", 1 << 30, 8, version="2.20.5")
    assert older.latency_s > big.latency_s  # RCCL 2.20.5's tuning model 5: 3.6 us a ring step, 2.1 in 2.21.5
