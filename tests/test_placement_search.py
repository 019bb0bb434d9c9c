"""Learned placement and evolution strategies: they beat the single device, async ES vs sync ES."""

from __future__ import annotations

import pytest
import torch

from flexcomm.costmodel.errors import InputError
from flexcomm.placement.baselines import critical_path, single
from flexcomm.placement.compare import compare, parse_methods, table, time_to_within
from flexcomm.placement.devices import DeviceSet
from flexcomm.placement.es import ESConfig, async_es, sync_es
from flexcomm.placement.ppo import PPOConfig, PPOPlacer, train_ppo
from flexcomm.placement.simulator import PlacementProblem
from flexcomm.placement.toy import branchy_graph, random_dag


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _branchy() -> PlacementProblem:
    return PlacementProblem(branchy_graph(), DeviceSet.uniform(4, bandwidth_Bps=50e9))


def _valid(problem: PlacementProblem, placement: list[int]) -> None:
    assert len(placement) == len(problem.nodes)
    assert all(0 <= d < problem.devices.count for d in placement)


def test_ppo_beats_the_single_device_on_a_small_graph_within_a_short_budget() -> None:
    problem = _branchy()
    result = train_ppo(problem, PPOConfig(iterations=30, budget_s=30.0, seed=0))
    _valid(problem, result.placement)
    base = problem.step_time(single(problem))
    assert result.step_time_s < 0.8 * base
    assert result.step_time_s == pytest.approx(problem.step_time(result.placement))
    assert result.evaluations == 30 * 16 + 1  # every batch plus the final greedy placement
    best = [b for _, _, b in result.curve]
    assert best == sorted(best, reverse=True)


def test_ppo_training_is_deterministic_with_a_seed() -> None:
    problem = PlacementProblem(random_dag(20, seed=1), DeviceSet.uniform(3))
    runs = [train_ppo(problem, PPOConfig(iterations=3, seed=7)) for _ in range(2)]
    assert runs[0].placement == runs[1].placement
    assert runs[0].step_time_s == runs[1].step_time_s
    other = train_ppo(problem, PPOConfig(iterations=3, seed=8))
    assert other.placement != runs[0].placement or other.step_time_s != runs[0].step_time_s


def test_ppo_learns_its_policy_moves_towards_faster_placements() -> None:
    """The batch mean step time falls as the policy trains (not just a lucky best sample)."""
    problem = _branchy()
    placer = PPOPlacer(problem, PPOConfig(seed=0))
    first = sum(problem.step_time(p) for p in placer.iterate()) / 16
    for _ in range(25):
        last = placer.iterate()
    assert sum(problem.step_time(p) for p in last) / 16 < 0.9 * first


def test_async_es_improves_over_its_start() -> None:
    problem = _branchy()
    start = single(problem)
    cfg = ESConfig(workers=2, budget_s=2.0, executor="thread", seed=0)
    result = async_es(problem, start, cfg)
    _valid(problem, result.placement)
    assert result.step_time_s < 0.9 * problem.step_time(start)
    assert result.step_time_s == pytest.approx(problem.step_time(result.placement))
    assert result.curve[0][2] == pytest.approx(problem.step_time(start))  # the start is its first point


def test_sync_es_improves_and_is_deterministic_with_one_worker() -> None:
    problem = _branchy()
    start = single(problem)
    cfg = ESConfig(workers=1, budget_s=60.0, max_evaluations=60, population=6, executor="thread", seed=3)
    runs = [sync_es(problem, start, cfg) for _ in range(2)]
    assert runs[0].placement == runs[1].placement and runs[0].evaluations == runs[1].evaluations == 61
    assert runs[0].step_time_s < problem.step_time(start)


def test_async_es_keeps_workers_busier_than_sync_es_when_evaluations_vary() -> None:
    """Under the same wall clock with evaluation times spread widely, sync ES waits at every
    generation's slowest evaluation; async ES does not, so it finishes more evaluations."""
    problem = _branchy()
    start = critical_path(problem)
    cfg = ESConfig(workers=4, population=4, budget_s=2.0, measure_steps=0.15, eval_jitter=1.0,
                   executor="thread", seed=1)
    a = async_es(problem, start, cfg)
    s = sync_es(problem, start, cfg)
    util_a = a.busy_worker_s / (cfg.workers * a.wall_s)
    util_s = s.busy_worker_s / (cfg.workers * s.wall_s)
    assert util_a > 0.85
    assert util_a > util_s + 0.1
    assert a.evaluations > s.evaluations
    for r in (a, s):
        assert r.step_time_s <= problem.step_time(start)


def test_hybrid_async_es_takes_a_share_of_candidates_from_ppo() -> None:
    problem = _branchy()
    cfg = ESConfig(workers=2, budget_s=2.0, executor="thread", rl_share=0.3, seed=0)
    policy = PPOPlacer(problem, PPOConfig(batch=4, seed=0))
    result = async_es(problem, single(problem), cfg, rl_policy=policy)
    assert result.rl_evaluations >= 1
    assert result.rl_evaluations < result.evaluations
    _valid(problem, result.placement)


def test_compare_tables_every_method_against_the_baselines() -> None:
    problem = _branchy()
    methods = parse_methods("all")
    cmp = compare(problem, methods, es=ESConfig(workers=1, budget_s=0.5, executor="thread"),
                  ppo=PPOConfig(iterations=3))
    frame = table(problem, cmp)
    assert list(frame["method"]) == ["single", "critical-path", "partition", "dp-chain", "ppo", "sync-es",
                                     "async-es"]
    assert frame.loc[frame.method == "single", "speedup_vs_single"].item() == pytest.approx(1.0)
    assert (frame["speedup_vs_single"] > 0).all()
    es_rows = frame[frame.method.str.endswith("es")]
    best_base = frame[frame.method.isin(["single", "critical-path", "partition", "dp-chain"])].step_time_ms.min()
    assert (es_rows.step_time_ms <= best_base + 1e-9).all()  # ES starts from the best baseline
    assert time_to_within(cmp.curves["async-es"], cmp.by_method("async-es").step_time_s) <= 0.5 + 1.0


def test_bad_search_settings_are_input_errors() -> None:
    with pytest.raises(InputError, match="rule"):
        ESConfig(rule="nope").validate()
    with pytest.raises(InputError, match="workers"):
        ESConfig(workers=0).validate()
    with pytest.raises(InputError, match="groups"):
        PPOConfig(groups=0).validate()
    with pytest.raises(InputError, match="method"):
        parse_methods("single,magic")
    assert parse_methods("es,single,es") == ["es", "single"]
