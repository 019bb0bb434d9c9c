"""Compressed exchanges on GPU clusters priced call by call as NCCL runs them: cost, simulate, whatif, priors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import cluster_names, load_cluster
from flexcomm.costmodel.compressed import (
    PRICED_SCHEMES,
    SchemeAlgorithms,
    SparsePayload,
    powersgd_side,
    scheme_messages,
    scheme_parts,
    topk_count,
)
from flexcomm.costmodel.cost_model import CostModel
from flexcomm.experiments.cli import main

GPU_CLUSTERS = [name for name in cluster_names() if load_cluster(name).gpu_fabric is not None]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("cluster", GPU_CLUSTERS)
def test_every_scheme_prices_through_nccl_on_every_gpu_cluster(cluster: str) -> None:
    model = CostModel.from_cluster(load_cluster(cluster))
    ranks = load_cluster(cluster).world_size
    numel = 25.6e6
    library = SchemeAlgorithms(library="nccl")
    dense = model.nccl_choice("allreduce", "nccl", numel * 4, ranks).seconds if ranks > 1 else 0.0
    for scheme in PRICED_SCHEMES:
        total = float(model.scheme(scheme, numel, ranks, 0.01, algorithms=library).total)
        assert np.isfinite(total) and total >= 0
        if scheme == "dense":  # the baseline is exactly NCCL's allreduce of the fp32 gradient
            assert total == pytest.approx(dense, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(scheme=st.sampled_from(PRICED_SCHEMES), numel=st.floats(1, 1e10), ranks=st.integers(1, 4096),
       ratio=st.floats(1e-5, 1.0), rank=st.integers(1, 32), owner=st.sampled_from(["star", "var"]))
def test_messages_carry_the_bytes_the_formulas_price(scheme: str, numel: float, ranks: int, ratio: float,
                                                     rank: int, owner: str) -> None:
    algorithms = SchemeAlgorithms(powersgd_rank=rank, index_owner=owner)
    messages = scheme_messages(scheme, numel, ranks, ratio, algorithms=algorithms)
    assert len(messages) == len(scheme_parts(scheme, numel, ranks, ratio, algorithms=algorithms))
    if scheme == "dense":
        assert [m.nbytes for m in messages] == [numel * 4]
    elif scheme in ("fp16", "bf16"):
        assert [m.nbytes for m in messages] == [numel * 2]
    elif scheme == "powersgd":
        side = float(powersgd_side(numel))
        assert [m.nbytes for m in messages] == [side * rank * 4] * 2
    elif scheme == "topk-ag":
        assert [(m.collective, m.nbytes) for m in messages] == [("allgather", float(topk_count(numel, ratio)) * 8)]
    else:
        k = float(topk_count(numel, ratio))
        expected = [("broadcast", k * 4), ("allreduce", k * 4)] + ([("allgather", 4.0)] if owner == "var" else [])
        assert [(m.collective, m.nbytes) for m in messages] == expected


def test_cost_scheme_through_nccl_names_each_call(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "cost", "--scheme", "topk-ar", "--algorithm", "nccl", "--size", "28GB",
                           "--ranks", "16", "--cluster", "dgx-h100", "--json")
    assert code == 0
    result = json.loads(out)
    assert [c["collective"] for c in result["calls"]] == ["broadcast", "allreduce"]
    assert result["seconds"] == pytest.approx(sum(c["seconds"] for c in result["calls"]))
    code, dense_out, _ = run_cli(capsys, "cost", "--scheme", "dense", "--algorithm", "nccl", "--size", "28GB",
                                 "--ranks", "16", "--cluster", "dgx-h100", "--json")
    code, flat_out, _ = run_cli(capsys, "cost", "--scheme", "dense", "--algorithm", "ring", "--size", "28GB",
                                "--ranks", "16", "--cluster", "dgx-h100", "--json")
    nccl_dense, flat_dense = json.loads(dense_out)["seconds"], json.loads(flat_out)["seconds"]
    assert nccl_dense < flat_dense / 5  # the flat ring prices NVLink SHARP's node as one NIC ring


def test_cost_scheme_explain_prints_every_call(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "cost", "--scheme", "powersgd", "--algorithm", "nccl", "--size", "1GiB",
                           "--ranks", "16", "--cluster", "dgx-h100", "--explain")
    assert code == 0
    assert "rank 4, the gradient as one" in out
    assert out.count("allreduce ") >= 2 and "channels" in out


@pytest.mark.parametrize(("argv", "field"), [
    (["--scheme", "topk-ag", "--index-dtype", "int16"], "index-dtype"),
    (["--scheme", "powersgd", "--powersgd-rank", "0"], "powersgd-rank"),
    (["--scheme", "gossip"], "scheme"),
])
def test_bad_scheme_inputs_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], field: str) -> None:
    code, out, err = run_cli(capsys, "cost", "--algorithm", "nccl", "--size", "64MiB", "--ranks", "16",
                             "--cluster", "dgx-h100", *argv)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and f"error: {field}:" in err


def test_a_scheme_through_nccl_needs_a_gpu_fabric(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "cost", "--scheme", "topk-ag", "--algorithm", "nccl", "--size", "64MiB",
                           "--ranks", "8", "--cluster", "8x1-10gbe")
    assert code == 2 and "gpu_fabric" in err and err.strip().count("\n") == 0


@pytest.mark.parametrize("scheme", PRICED_SCHEMES)
def test_simulator_agrees_with_the_cost_model_uncontended(scheme: str) -> None:
    from flexcomm.sim.training import analytical_iteration, simulate_training
    from flexcomm.sim.training_config import TrainingConfig

    config = TrainingConfig(workload="resnet50", iterations=2, scheme=scheme, record_flows=False)
    simulated = simulate_training("dgx-h100", config)
    assert simulated.config["algorithm"] == "nccl"  # auto on a gpu_fabric cluster
    analytical = analytical_iteration("dgx-h100", config)
    assert float(simulated.iterations["time_s"].median()) == pytest.approx(analytical["time_s"], rel=0.01)
    assert float(simulated.iterations["comm_s"].median()) == pytest.approx(analytical["comm_s"], rel=0.01)


def test_whatif_on_a_gpu_cluster_prices_every_scheme_as_nccl_runs_it(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    import pandas as pd

    code, out, _ = run_cli(capsys, "whatif", "--cluster", "dgx-h100", "--out", str(tmp_path))
    assert code == 0
    table = pd.read_csv(tmp_path / "whatif.csv")
    assert set(table["scheme"]) == set(PRICED_SCHEMES)
    assert table["bandwidth_gbit_s"].max() >= 800 and table["bandwidth_gbit_s"].min() <= 10
    own = table[table["fabric_nic"] & (table["scheme"] == "dense") & (table["ranks"] == 16)]
    nccl = CostModel.from_cluster(load_cluster("dgx-h100")).nccl_choice("allreduce", "nccl", 25.557e6 * 4, 16)
    assert float(own[own["model"] == "resnet50"]["exchange_seconds"].iloc[0]) == pytest.approx(nccl.seconds)
    assert (table["ranked_by"] == "training step").all()
    assert (table["seconds"] == table["step_seconds"]).all()
    assert (tmp_path / "whatif_nic_sweep.png").exists() and (tmp_path / "whatif_cluster.png").exists()
    assert "ranked by the training step" in out and "fastest step per rank count" in out


@pytest.mark.parametrize("nic_gbit", [10.0, 400.0])
def test_whatif_prices_the_step_as_simulate_does(nic_gbit: float) -> None:
    """One job, one answer: the what-if's step of every scheme is the simulator's iteration (uncontended, so
    its analytical twin's) to the last digit, at a NIC where compression pays and at one where it does not."""
    import numpy as np

    from flexcomm.experiments.whatif import WhatIfGrid, _with_nic, run_whatif
    from flexcomm.sim.training import simulate_training

    cluster = load_cluster("dgx-h100")
    grid = WhatIfGrid(models={"transformer-1.3b": 1.3e9}, ratios=np.array([0.01]),
                      nic_bandwidths_Bps=np.array([nic_gbit * 1.25e8]))
    table = run_whatif(grid, cluster)
    rows = table[(table["ranks"] == 16) & np.isclose(table["bandwidth_gbit_s"], nic_gbit)].set_index("scheme")
    for scheme in PRICED_SCHEMES:
        simulated = simulate_training(_with_nic(cluster, nic_gbit * 1.25e8), workload="transformer-1.3b",
                                      scheme=scheme, ratio=0.01, iterations=2)
        assert rows.loc[scheme, "step_seconds"] == pytest.approx(simulated.summary()["median_time_s"], rel=1e-9)
    best = rows["best_scheme"].iloc[0]
    assert best == rows["step_seconds"].idxmin()
    assert (rows["best_scheme"] == best).all() and rows.loc[best, "is_best"]


def test_whatif_says_an_exchange_the_backward_hides_does_not_shorten_the_step(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """PowerSGD's exchange alone is faster than dense's on 400G NICs, but dense's buckets hide under the
    backward and PowerSGD adds device work: the what-if ranks by the step and says both."""
    import pandas as pd

    code, out, _ = run_cli(capsys, "whatif", "--cluster", "dgx-h100", "--model", "transformer-1.3b",
                           "--out", str(tmp_path), "--no-plots")
    assert code == 0
    table = pd.read_csv(tmp_path / "whatif.csv")
    own = table[table["fabric_nic"] & (table["ranks"] == 16)].drop_duplicates("scheme").set_index("scheme")
    assert own.loc["powersgd", "exchange_speedup_vs_dense"] > 1 > own.loc["powersgd", "speedup_vs_dense"]
    assert own.loc["powersgd", "step_device_work_seconds"] > own.loc["dense", "step_exposed_exchange_seconds"]
    assert "powersgd: never shortens the step" in out and "but the backward hides dense's" in out
    assert own.loc["powersgd", "accuracy_cost"].startswith("not priced")
    assert "accuracy: topk-ar measured on Fashion-MNIST at c = 0.1, 0.01, 0.001" in out
    slow = table[(table["ranks"] == 16) & (table["bandwidth_gbit_s"] == 10) & table["is_best"]]
    assert set(slow["scheme"]) == {"powersgd"}  # on 10G NICs compression pays, and the what-if says where
    assert "at 16 ranks by NIC speed: 10G powersgd" in out


def test_whatif_reports_a_scheme_that_does_not_fit_and_never_ranks_it(tmp_path) -> None:
    import numpy as np

    from flexcomm.experiments.whatif import WhatIfGrid, run_whatif

    base = load_cluster("pcie-4x-rtx4090")  # 24 GiB: the 1.3B model's Adam state fits, its error feedback not
    table = run_whatif(WhatIfGrid(models={"transformer-1.3b": 1.3e9}, ratios=np.array([0.01])), base)
    fits = table.drop_duplicates("scheme").set_index("scheme")["fits_memory"]
    assert fits["dense"] and fits["fp16"] and not fits["topk-ag"] and not fits["powersgd"]
    assert not table[~table["fits_memory"]]["is_best"].any()
    memory = table.drop_duplicates("scheme").set_index("scheme")["memory_GB"]
    assert memory["dense"] == pytest.approx(1.3e9 * 16 / 1e9, rel=0.05)  # ZeRO's 16 bytes a parameter
    assert memory["topk-ag"] - memory["dense"] == pytest.approx(memory["dense"] / 4, rel=1e-6)  # fp32 residual


def test_flexible_prior_on_a_gpu_cluster_follows_nccl() -> None:
    from flexcomm.compression.network_estimate import PRIOR_SIZES, NetworkEstimator

    model = CostModel.from_cluster(load_cluster("dgx-a100-80g"))
    estimator = NetworkEstimator.from_cost_model(model, 16)
    alpha, beta = estimator.prior
    ratios = []
    for n in PRIOR_SIZES:
        nccl = model.nccl_choice("allreduce", "nccl", float(n), 16).seconds
        ratios.append((30 * alpha + 30 / 16 * n * beta) / nccl)
    assert 0.4 < min(ratios) and max(ratios) < 2.5  # a two-parameter form through NCCL's curve
    flat = model.group_link(16)[1]
    assert beta < flat.beta  # NCCL's allreduce runs faster than the flat ring's slowest link


def test_emulated_clock_prices_calls_as_nccl_on_a_gpu_cluster() -> None:
    from flexcomm.compression.comm import CollectiveRecord
    from flexcomm.emulation.network import NetworkClock

    cluster = load_cluster("dgx-h100")
    clock = NetworkClock.for_run(cluster, "static", 16, 10)
    record = CollectiveRecord("allreduce", "ring", 64 * 2**20, "float32", "payload", 0.0)
    nccl = CostModel.from_cluster(cluster).nccl_choice("allreduce", "nccl", 64 * 2**20, 16)
    assert clock.seconds(record, 16) == pytest.approx(nccl.seconds)


def test_powersgd_layout_follows_the_layers() -> None:
    from flexcomm.costmodel.compressed import powersgd_sides

    one = scheme_messages("powersgd", 2e6, 8, 1.0)
    layered = scheme_messages("powersgd", 2e6, 8, 1.0, SparsePayload(matrix_sides=powersgd_sides([1e6, 1e6])))
    assert layered[0].nbytes == pytest.approx(one[0].nbytes * 2000 / 1415, rel=1e-3)


def test_nccl_calls_contend_channel_by_channel_where_they_share_nics() -> None:
    """Two jobs on disjoint GPUs of the same two nodes: on a flat node (one host endpoint) their channels meet
    at the node's NICs and each takes twice as long; on a rail-optimized pod GPUs 0-3 and 4-7 ride different
    rails and neither notices the other."""
    from flexcomm.sim.collectives import run_collective
    from flexcomm.sim.network import CountingEnvironment, Network

    first, second = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
    times = {}
    for name in ("dgx-h100", "dgx-h100-rail-pod"):
        for jobs in ([first], [first, second]):
            env = CountingEnvironment()
            network = Network(env, load_cluster(name))
            calls = [run_collective(env, network, "allreduce", "nccl", ranks, 256 * 2**20) for ranks in jobs]
            env.run()
            times[name, len(jobs)] = calls[0].value
    # four GPUs on each of two nodes: NCCL sees nodes of 4 GPUs and their 4 NICs, not one packed 8-GPU node
    cluster = load_cluster("dgx-h100")
    view = cluster.model_copy(update={"devices_per_node": 4, "nodes": 2, "nics_per_node": 4})
    spread = CostModel.from_cluster(view).nccl_choice("allreduce", "nccl", 256 * 2**20, 8)
    packed = CostModel.from_cluster(cluster).nccl_choice("allreduce", "nccl", 256 * 2**20, 8)
    assert times["dgx-h100", 1] == pytest.approx(spread.seconds, rel=1e-9)
    assert spread.seconds > 1.5 * packed.seconds  # crossing half the NICs costs more than one node's NVLink
    assert times["dgx-h100", 2] > 1.8 * times["dgx-h100", 1]
    assert times["dgx-h100-rail-pod", 2] == pytest.approx(times["dgx-h100-rail-pod", 1], rel=1e-9)


def _halve_links_at(env, network, when: float):  # noqa: ANN001, ANN202 - a simpy process
    yield env.timeout(when)
    ids = network.resources("*")
    network.set_bandwidth(ids, network.cluster_bandwidth[ids] / 2)


def test_a_changing_network_acts_inside_a_call() -> None:
    """Halving every link mid-call slows what is left of it: rates are recomputed at the change, so the call
    ends between its own time and twice it (1.5x when the change lands halfway through the bytes)."""
    from flexcomm.sim.collectives import run_collective
    from flexcomm.sim.network import CountingEnvironment, Network

    cluster = load_cluster("dgx-h100")
    choice = CostModel.from_cluster(cluster).nccl_choice("allreduce", "nccl", 1 << 30, 16)
    env = CountingEnvironment()
    network = Network(env, cluster)
    call = run_collective(env, network, "allreduce", "nccl", 16, 1 << 30)
    env.process(_halve_links_at(env, network, choice.latency_s + choice.bandwidth_s / 2))
    env.run()
    assert call.value == pytest.approx(choice.latency_s + 1.5 * choice.bandwidth_s, rel=1e-6)


def test_topk_allgather_is_priced_at_each_ranks_contribution() -> None:
    """flexcomm's allgather size is what each rank sends: k values + k indices (8 bytes a pair)."""
    model = CostModel.from_cluster(load_cluster("dgx-a100-80g"))
    k = float(topk_count(25.6e6, 0.01))
    library = SchemeAlgorithms(library="nccl")
    calls = model.scheme_choices("topk-ag", 25.6e6, 32, 0.01, algorithms=library)
    assert [m.nbytes for m, _ in calls] == [k * 8]
    assert calls[0][1].seconds == pytest.approx(model.nccl_choice("allgather", "nccl", k * 8, 32).seconds)
    var = model.scheme_choices("topk-ar", 25.6e6, 32, 0.01, algorithms=SchemeAlgorithms(library="nccl",
                                                                                          index_owner="var"))
    assert [(m.collective, m.nbytes) for m, _ in var] == [("broadcast", k * 4), ("allreduce", k * 4),
                                                          ("allgather", 4.0)]


def test_spread_groups_are_priced_as_nccls_communicator() -> None:
    """Uneven and spread groups: priced with nodes of the fullest node's GPU count (never as one packed node)."""
    from flexcomm.sim.collectives import run_collective
    from flexcomm.sim.network import CountingEnvironment, Network

    cluster = load_cluster("dgx-h100")
    times = {}
    for ranks in ([0, 1, 2, 3], [0, 1, 2, 8], list(range(12)), list(range(16))):
        env = CountingEnvironment()
        network = Network(env, cluster)
        call = run_collective(env, network, "allreduce", "nccl", ranks, 256 * 2**20)
        env.run()
        times[len(ranks), ranks[-1]] = call.value
    assert times[4, 8] > 1.5 * times[4, 3]  # three GPUs here, one there: across the NICs, not NVLink
    assert times[12, 11] == pytest.approx(times[16, 15])  # 8 + 4 runs at the pace of two full nodes


SMALL_GPU_CLUSTERS = [name for name in GPU_CLUSTERS if load_cluster(name).world_size <= 256]


@settings(max_examples=60, deadline=None)
@given(which=st.sampled_from(SMALL_GPU_CLUSTERS), collective=st.sampled_from(
    ["allreduce", "allgather", "reduce-scatter", "broadcast", "alltoall"]), size=st.floats(1e3, 4e9),
    nodes=st.integers(1, 8))
def test_an_nccl_call_simulated_alone_equals_the_cost_model(which: str, collective: str, size: float,
                                                            nodes: int) -> None:
    """The property the simulator keeps: nothing else on the fabric, a packed group's call takes exactly
    NCCL's price (latency, then its channels' flows at their uncontended rate)."""
    from flexcomm.sim.collectives import run_collective
    from flexcomm.sim.network import CountingEnvironment, Network

    cluster = load_cluster(which)
    domain = (cluster.gpu_fabric.nvlink_domain or cluster.devices_per_node)
    ranks = min(cluster.world_size, domain * nodes) if nodes > 1 else min(cluster.world_size, domain)
    env = CountingEnvironment()
    call = run_collective(env, Network(env, cluster), collective, "nccl", ranks, size)
    env.run()
    expected = CostModel.from_cluster(cluster).nccl_choice(collective, "nccl", size, ranks).seconds
    assert call.value == pytest.approx(expected, rel=0.01)


def test_whatif_and_simulate_share_one_memory_rule_on_a_mixed_pool() -> None:
    """A data-parallel job must fit the smallest device of its ranks' nodes: the what-if says so per rank
    count as simulate refuses it (on 4x4-a100-v100 ranks 8-15 sit on V100-32GB nodes)."""
    import numpy as np

    from flexcomm.costmodel.compute import LayerSpec, ModelSpec
    from flexcomm.costmodel.errors import InputError
    from flexcomm.experiments.whatif import WhatIfGrid, run_whatif
    from flexcomm.sim.training import TrainingSimulator
    from flexcomm.sim.training_config import TrainingConfig
    from flexcomm.sim.workload import TrainingWorkload

    big = TrainingWorkload("big", ModelSpec("big", [LayerSpec("w", int(2.5e9), 2 * 2.5e9)]), 1.0)  # 40 GB of state
    cluster = load_cluster("4x4-a100-v100")
    table = run_whatif(WhatIfGrid(models={"big": 2.5e9}, workloads={"big": big}, ratios=np.array([0.01])), cluster)
    dense = table[table["scheme"] == "dense"].drop_duplicates("ranks").set_index("ranks")["fits_memory"]
    assert dense[8] and not dense[16]
    TrainingSimulator(cluster, TrainingConfig(workload=big, ranks=8))
    with pytest.raises(InputError, match="V100"):
        TrainingSimulator(cluster, TrainingConfig(workload=big, ranks=16))
