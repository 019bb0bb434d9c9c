"""Placement simulator and baselines: valid schedules, exact small cases, memory, determinism."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.placement.baselines import BASELINES, chain_stages, critical_path, dp_chain, partition, single
from flexcomm.placement.coarsen import chain_units, expand, unit_devices_of
from flexcomm.placement.devices import DeviceSet
from flexcomm.placement.simulator import PlacementProblem
from flexcomm.placement.toy import branchy_graph, chain_graph, random_dag


def _check_schedule(problem: PlacementProblem, placement: list[int]) -> None:
    """Every task once, on its op's device; devices run one task at a time; dependencies kept."""
    sim = problem.simulate(placement, trace=True)
    n, m = len(problem.nodes), problem.micro_batches
    assert len(sim.schedule) == 2 * n * m
    when = {}
    for op, mb, dev, bwd, start, end in sim.schedule:
        assert dev == placement[op]
        assert end >= start >= 0
        key = (op, mb, bwd)
        assert key not in when
        when[key] = (start, end)
    assert len(when) == 2 * n * m
    for dev in set(placement):
        spans = sorted((s, e) for _, _, d, _, s, e in sim.schedule if d == dev)
        for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False):
            assert s1 >= e0 - 1e-15
    D = problem.devices
    for mb in range(m):
        for i in range(n):
            assert when[(i, mb, True)][0] >= when[(i, mb, False)][1] - 1e-15
            for j, nbytes in problem.succs[i]:
                wire = D.transfer_s(placement[i], placement[j], nbytes / m)
                assert when[(j, mb, False)][0] >= when[(i, mb, False)][1] + wire - 1e-12
                assert when[(i, mb, True)][0] >= when[(j, mb, True)][1] + wire - 1e-12
    assert sim.makespan_s == pytest.approx(max(e for *_, e in sim.schedule))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), ops=st.integers(1, 25), devices=st.integers(1, 4), micro=st.integers(1, 3),
       contention=st.booleans())
def test_random_placements_give_valid_schedules(seed: int, ops: int, devices: int, micro: int,
                                                contention: bool) -> None:
    problem = PlacementProblem(random_dag(ops, seed=seed), DeviceSet.uniform(devices), micro_batches=micro,
                               contention=contention)
    placement = np.random.default_rng(seed).integers(0, devices, ops).tolist()
    _check_schedule(problem, placement)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), ops=st.integers(1, 30), micro=st.integers(1, 4))
def test_single_device_is_the_sum_of_op_times(seed: int, ops: int, micro: int) -> None:
    problem = PlacementProblem(random_dag(ops, seed=seed), DeviceSet.uniform(3), micro_batches=micro)
    total = sum(problem.graph.nodes[v]["flops"] for v in problem.nodes) / (0.65 * 100e12) * 3.0
    for d in range(3):
        sim = problem.simulate([d] * ops)
        assert sim.makespan_s == pytest.approx(total, rel=1e-9)
        assert sim.transfer_bytes == 0.0
    assert problem.single_device_s() == pytest.approx(total, rel=1e-9)


def test_a_transfer_adds_latency_and_bytes_over_bandwidth_both_ways() -> None:
    graph = chain_graph(2, flops=1e12, act_bytes=5e7)
    devices = DeviceSet.uniform(2, latency_s=1e-4, bandwidth_Bps=1e9)
    problem = PlacementProblem(graph, devices)
    compute = 2 * 1e12 / (0.65 * 100e12) * 3.0
    wire = 1e-4 + 5e7 / 1e9
    assert problem.simulate([0, 0]).makespan_s == pytest.approx(compute)
    split = problem.simulate([0, 1])
    assert split.makespan_s == pytest.approx(compute + 2 * wire)  # activation forward, gradient back
    assert split.transfer_bytes == pytest.approx(2 * 5e7)


def test_contention_queues_transfers_on_the_sending_port() -> None:
    graph = nx.DiGraph(name="fan", batch_size=1)
    graph.add_node("src", kind="x", flops=1e9, param_bytes=0.0, activation_bytes=1e8, grad_bytes=0.0)
    for k in (1, 2):
        graph.add_node(f"dst{k}", kind="x", flops=1e9, param_bytes=0.0, activation_bytes=1.0, grad_bytes=0.0)
        graph.add_edge("src", f"dst{k}", bytes=1e8)
    devices = DeviceSet.uniform(3, latency_s=0.0, bandwidth_Bps=1e9)
    placement = [0, 1, 2]  # lexicographic order: dst1, dst2, src
    placement = [{"src": 0, "dst1": 1, "dst2": 2}[v] for v in PlacementProblem(graph, devices).nodes]
    free = PlacementProblem(graph, devices, contention=False).simulate(placement).makespan_s
    queued = PlacementProblem(graph, devices, contention=True).simulate(placement).makespan_s
    assert queued == pytest.approx(free + 0.1)  # the second 100 MB waits for the first at 1 GB/s (forward)


def test_memory_limit_makes_a_placement_infeasible_and_penalised() -> None:
    graph = chain_graph(4, param_bytes=1e9, act_bytes=1e6)
    per_op = 4 * 1e9 + 1e6
    devices = DeviceSet.uniform(4, memory_bytes=2.5 * per_op)
    problem = PlacementProblem(graph, devices)
    crowded = problem.simulate([0, 0, 0, 0])
    assert not crowded.feasible
    assert crowded.memory_bytes[0] == pytest.approx(4 * per_op)
    assert crowded.step_time_s > 2 * crowded.makespan_s
    spread = problem.simulate([0, 0, 1, 1])
    assert spread.feasible and spread.step_time_s == spread.makespan_s
    cp = problem.simulate(critical_path(problem))
    assert cp.feasible  # m-ETF skips devices without room
    dp = problem.simulate(dp_chain(problem))
    assert dp.feasible


def test_micro_batches_pipeline_a_staged_chain() -> None:
    graph = chain_graph(8, flops=4e11, act_bytes=1e6)
    devices = DeviceSet.uniform(4, latency_s=1e-6, bandwidth_Bps=100e9)
    stages = [k // 2 for k in range(8)]
    one = PlacementProblem(graph, devices, micro_batches=1).simulate(stages)
    four = PlacementProblem(graph, devices, micro_batches=4).simulate(stages)
    assert four.makespan_s < 0.6 * one.makespan_s
    assert four.makespan_s >= four.busy_s.max()
    # the same staged placement on a multi-branch graph pipelines too
    branchy = branchy_graph(4, 3, 2)
    p1, p4 = (PlacementProblem(branchy, devices, micro_batches=m) for m in (1, 4))
    stage_of = [min(3, k * 4 // len(p1.nodes)) for k in range(len(p1.nodes))]
    assert p4.simulate(stage_of).makespan_s < p1.simulate(stage_of).makespan_s


@pytest.mark.parametrize("graph", [branchy_graph(), chain_graph(12, seed=1), random_dag(40, seed=3)],
                         ids=lambda g: g.graph["name"])
@pytest.mark.parametrize("micro", [1, 4])
def test_baselines_are_valid_deterministic_and_never_worse_than_needed(graph: nx.DiGraph, micro: int) -> None:
    problem = PlacementProblem(graph, DeviceSet.uniform(4), micro_batches=micro)
    base = problem.step_time(single(problem))
    for name, placer in BASELINES.items():
        placement = placer(problem)
        assert len(placement) == len(problem.nodes) and set(placement) <= set(range(4)), name
        assert placer(problem) == placement, f"{name} is not deterministic"
        _check_schedule(problem, placement)
    # partition and dp-chain choose the best k by the simulator, k = 1 (single) included
    assert problem.step_time(partition(problem)) <= base
    assert problem.step_time(dp_chain(problem)) <= base


def test_branch_parallel_graph_is_faster_spread_and_dp_pipelines_a_chain() -> None:
    problem = PlacementProblem(branchy_graph(), DeviceSet.uniform(4, bandwidth_Bps=100e9))
    assert problem.step_time(critical_path(problem)) < 0.6 * problem.step_time(single(problem))
    chain = PlacementProblem(chain_graph(8), DeviceSet.uniform(4, bandwidth_Bps=100e9), micro_batches=4)
    stages = chain_stages(chain, 4)
    assert stages is not None and sorted(set(stages)) == [0, 1, 2, 3]
    assert stages == sorted(stages)  # contiguous stages along the chain
    assert chain.step_time(dp_chain(chain)) < 0.6 * chain.step_time(single(chain))


def test_chain_units_cover_every_op_once_and_respect_a_placement() -> None:
    problem = PlacementProblem(branchy_graph(4, 3, 2), DeviceSet.uniform(4))
    units = chain_units(problem, max_unit_ops=10)
    assert sorted(op for u in units for op in u) == list(range(len(problem.nodes)))
    assert len(units) == 1 + 2 * 4 + 2  # the input, one unit per branch, both concats (the head joins the last)
    for unit in units:
        for a, b in zip(unit, unit[1:], strict=False):
            assert [s for s, _ in problem.succs[a]] == [b]
    placement = critical_path(problem)
    respected = chain_units(problem, 10, respect=placement)
    assert expand(respected, unit_devices_of(respected, placement), len(placement)) == placement


def test_devices_from_a_cluster_see_its_slow_link() -> None:
    devices = DeviceSet.from_cluster(load_cluster("8x1-10gbe-slow-node"))
    assert devices.count == 8
    assert devices.beta_s_per_byte[5, 0] == pytest.approx(10 * devices.beta_s_per_byte[1, 0])
    assert devices.bandwidth_rank()[-1] == 5
    nvlink = DeviceSet.from_cluster(load_cluster("4x8-a100-ib"), 10)
    assert nvlink.latency_s[0, 1] == pytest.approx(3e-6) and nvlink.latency_s[0, 8] == pytest.approx(5e-6)
    with pytest.raises(InputError, match="devices"):
        DeviceSet.from_cluster(load_cluster("8x1-10gbe"), 9)


def test_bad_placements_and_graphs_are_input_errors() -> None:
    problem = PlacementProblem(chain_graph(3), DeviceSet.uniform(2))
    with pytest.raises(InputError, match="placement"):
        problem.simulate([0, 1])
    with pytest.raises(InputError, match="placement"):
        problem.simulate([0, 1, 2])
    assert problem.from_mapping({"op0": 0, "op1": 1, "op2": 1}) == [0, 1, 1]
    cyclic = chain_graph(3)
    cyclic.add_edge("op2", "op0", bytes=1.0)
    with pytest.raises(InputError, match="graph"):
        PlacementProblem(cyclic, DeviceSet.uniform(2))
    with pytest.raises(InputError, match="micro_batches"):
        PlacementProblem(chain_graph(3), DeviceSet.uniform(2), micro_batches=0)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), ops=st.integers(1, 18), devices=st.integers(1, 3), micro=st.integers(1, 2))
def test_simulator_agrees_with_the_plain_reference_schedule(seed: int, ops: int, devices: int, micro: int) -> None:
    from flexcomm.placement.reference import reference_makespan

    problem = PlacementProblem(random_dag(ops, seed=seed), DeviceSet.uniform(devices), micro_batches=micro,
                               contention=False)
    placement = np.random.default_rng(seed + 1).integers(0, devices, ops).tolist()
    assert problem.simulate(placement).makespan_s == pytest.approx(reference_makespan(problem, placement),
                                                                   rel=1e-12)


def test_mixed_devices_run_ops_at_their_own_speed() -> None:
    from flexcomm.planner.rank_devices import load_plan_cluster

    plan = load_plan_cluster("4x4-a100-v100")
    devices = DeviceSet.from_cluster(plan.cluster, rank_devices=plan.devices)
    assert devices.count == 16 and devices.peak_flops[0] > devices.peak_flops[15]
    ranked = devices.bandwidth_rank()
    assert set(ranked[:8]) == set(range(8))  # the A100s first
    problem = PlacementProblem(chain_graph(3), devices)
    fast, slow = problem.simulate([0, 0, 0]).makespan_s, problem.simulate([15, 15, 15]).makespan_s
    assert slow / fast == pytest.approx(devices.peak_flops[0] / devices.peak_flops[15])


def test_the_best_of_the_chosen_methods_finds_a_search_by_its_option_name() -> None:
    from flexcomm.placement.compare import Comparison, PlacerResult

    results = [PlacerResult("single", [0], 3.0, True, 0.1, 1), PlacerResult("sync-es", [1], 2.0, True, 1.0, 40),
               PlacerResult("async-es", [2], 1.0, True, 1.0, 40)]
    # `--method es` runs the synchronous ES, whose result is named sync-es (it crashed on an empty pool)
    assert Comparison(results).best(["es"]).method == "sync-es"
    assert Comparison(results).best(["es", "async-es"]).method == "async-es"
