"""The parallel-plan planner: memory limits, pricing terms, heterogeneous balance, search, simulator, CLI."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.cluster import Cluster, cluster_names, load_cluster
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.planner.graphs import VIEW_KINDS, build_graph
from flexcomm.planner.pipeline_units import Units, build_units
from flexcomm.planner.plans import PlanConfig, Pricer
from flexcomm.planner.rank_devices import load_plan_cluster
from flexcomm.planner.search import enumerate_plans, loses_on, search
from flexcomm.planner.simulate import one_f_one_b, simulate_plan

GPT_SMALL = {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1000}


@pytest.fixture(scope="module")
def gpt_units() -> Units:
    return build_units(build_graph("gpt", batch_size=1, **GPT_SMALL))


def _cluster(memory: str = "32GiB", bandwidth: str = "10Gbit/s", nodes: int = 4, per_node: int = 2,
             node_devices: list | None = None) -> object:
    data = {"name": "test", "nodes": nodes, "devices_per_node": per_node,
            "device": {"name": "gpu", "peak_flops": "100TFLOP/s", "memory": memory},
            "intra_link": {"latency": "2us", "bandwidth": "100GB/s"},
            "inter_link": {"latency": "10us", "bandwidth": bandwidth}}
    if node_devices:
        data["node_devices"] = node_devices
    return load_plan_cluster(Cluster.from_dict(data))


def _uniform_units(n: int, work: float = 1e9, params: float = 4e6, act: float = 1e6, boundary: float = 1e3) -> Units:
    z = np.zeros(n)
    return Units("uniform", 1, tuple(f"u{i}" for i in range(n)), tuple((f"u{i}",) for i in range(n)),
                 np.full(n, work), z.copy(), np.full(n, params), z.copy(), np.full(n, act), z.copy(),
                 np.full(n, boundary), np.ones(n))


def test_every_ranked_plan_fits_every_devices_memory(gpt_units: Units) -> None:
    roomy = search(Pricer(gpt_units, _cluster(memory="80GiB"), 32), simulate_top=0)
    median = float(np.median([c.peak_memory_bytes for c in roomy.costs]))  # half the plans fit
    cluster = _cluster(memory=f"{median:.0f}B")
    pricer = Pricer(gpt_units, cluster, 32)
    result = search(pricer, simulate_top=0)
    assert result.ranked and len(result.ranked) < len(result.costs)  # some plans rejected, some fit
    limit = cluster.memory_bytes.min()
    for cost in result.ranked:
        assert cost.feasible and cost.peak_memory_bytes <= limit and cost.memory_use <= 1
    for cost in result.costs:
        if not cost.feasible:
            assert cost.peak_memory_bytes > limit and cost.reason.startswith("memory")
            assert loses_on(cost, result.best) == "memory"


def test_memory_of_the_plain_plan_from_the_graph_itself() -> None:
    graph = build_graph("gpt", batch_size=1, **GPT_SMALL)
    units = build_units(graph)
    cluster = _cluster(nodes=1, per_node=1, memory="80GiB")
    cost = Pricer(units, cluster, 8).price(PlanConfig(1, 1, 1, 1))
    params = 4 * graph.graph["parameters"]
    acts = sum(d["activation_bytes"] for _, d in graph.nodes(data=True) if d["kind"] not in VIEW_KINDS)
    # weights + gradients + two Adam moments, and 8 samples' stored activations
    assert cost.peak_memory_bytes == pytest.approx(4 * params + 8 * acts)


def test_zero_and_micro_batches_cut_memory_not_time(gpt_units: Units) -> None:
    pricer = Pricer(gpt_units, _cluster(), 64)
    z = [pricer.price(PlanConfig(8, 1, 1, 1, zero)) for zero in (0, 1, 2)]
    assert z[0].peak_memory_bytes > z[1].peak_memory_bytes > z[2].peak_memory_bytes
    assert z[0].step_s == z[1].step_s == z[2].step_s
    m = [pricer.price(PlanConfig(8, 1, 1, mb)) for mb in (1, 2, 4)]
    assert m[0].peak_memory_bytes > m[1].peak_memory_bytes > m[2].peak_memory_bytes


def test_pipeline_bubble_is_pp_minus_one_over_m() -> None:
    units = _uniform_units(8, boundary=0.0)
    cluster = _cluster(nodes=1, per_node=4, memory="80GiB")
    pricer = Pricer(units, cluster, 16)
    t = 2 * 1e9 * 3 / 1e14  # two units per stage, 1 sample per micro-batch, forward + backward on 100 TFLOP/s
    for m in (1, 4, 16):
        cost = pricer.price(PlanConfig(1, 1, 4, m))
        assert cost.stage_units == (2, 2, 2, 2)
        assert cost.compute_s == pytest.approx(m * t * 16 / m)
        assert cost.bubble_s == pytest.approx(3 * t * 16 / m)  # (pp - 1) micro-batch times
        assert cost.step_s == pytest.approx((m + 3) * t * 16 / m)


def test_tensor_parallel_allreduces_use_the_fast_link(gpt_units: Units) -> None:
    cluster = _cluster(nodes=2, per_node=4)
    pricer = Pricer(gpt_units, cluster, 8)
    inside = pricer.price(PlanConfig(2, 4, 1, 1))  # tp groups inside a node
    across = pricer.price(PlanConfig(1, 8, 1, 1))  # a tp group across the 10 Gbit/s network
    assert 0 < inside.tp_comm_s < across.tp_comm_s / 10
    assert pricer.price(PlanConfig(8, 1, 1, 1)).tp_comm_s == 0


def test_gradient_allreduce_sees_the_slowest_link(gpt_units: Units) -> None:
    fast = load_plan_cluster("8x1-10gbe")
    slow = load_plan_cluster("8x1-10gbe-slow-node")  # node 5 at 1 Gbit/s
    cfg = PlanConfig(8, 1, 1, 1)
    t_fast = Pricer(gpt_units, fast, 8).price(cfg).dp_comm_s
    t_slow = Pricer(gpt_units, slow, 8).price(cfg).dp_comm_s
    assert t_slow == pytest.approx(10 * t_fast, rel=0.05)


def test_heterogeneous_cluster_gives_faster_devices_more_work_and_beats_an_even_split(gpt_units: Units) -> None:
    mixed = _cluster(memory="80GiB", node_devices=[{"nodes": [2, 3], "device": {
        "name": "slow", "peak_flops": "25TFLOP/s", "memory": "80GiB"}}])
    assert mixed.heterogeneous
    speed = Pricer(gpt_units, mixed, 64, balance="speed")
    even = Pricer(gpt_units, mixed, 64, balance="even")
    pipeline = PlanConfig(1, 2, 4, 16)  # stages 0-1 on the fast nodes, 2-3 on the slow ones
    fast_first = speed.price(pipeline)
    assert sum(fast_first.stage_units[:2]) > sum(fast_first.stage_units[2:])
    assert fast_first.step_s < even.price(pipeline).step_s
    data = PlanConfig(8, 1, 1, 2)  # replicas 0-3 fast, 4-7 slow
    split = speed.price(data)
    assert min(split.replica_micro_batch[:4]) > max(split.replica_micro_batch[4:])
    assert sum(split.replica_micro_batch) == 32
    assert split.step_s < even.price(data).step_s
    assert speed.price(PlanConfig(8, 1, 1, 2)).step_s < even.price(data).step_s
    best_speed = search(speed, simulate_top=0).best
    best_even = search(even, simulate_top=0).best
    assert best_speed.step_s < best_even.step_s


def test_the_shipped_mixed_cluster_loads_from_the_one_registry() -> None:
    cluster = load_plan_cluster("4x4-a100-v100")
    names = [d.name for d in cluster.devices]
    assert names[:8] == ["A100-80GB"] * 8 and names[8:] == ["V100-32GB"] * 8
    assert "4x4-a100-v100" in cluster_names()  # the same registry `clusters` and `cost` read
    data = load_cluster("4x4-a100-v100").to_dict()
    with pytest.raises(InputError) as err:
        Cluster.from_dict({**data, "node_devices": [{"nodes": [9], "device": data["device"]}]})
    assert err.value.field == "cluster.node_devices.0.nodes"
    with pytest.raises(InputError) as err:
        load_plan_cluster("no-such-cluster")
    assert err.value.field == "cluster" and "4x4-a100-v100" in err.value.expected


@settings(max_examples=40, deadline=None)
@given(work=st.lists(st.floats(0.1, 10.0), min_size=2, max_size=8), pp=st.integers(1, 4),
       speeds=st.lists(st.floats(0.25, 1.0), min_size=4, max_size=4))
def test_partition_is_the_best_contiguous_split(work: list[float], pp: int, speeds: list[float]) -> None:
    pp = min(pp, len(work))
    units = _uniform_units(len(work))
    units = Units(**{**units.__dict__, "work_shard": np.array(work)})
    pricer = Pricer(units, _cluster(), 8)
    s = tuple(speeds[:pp])
    sizes = pricer.partition(pp, 1, s)
    assert sum(sizes) == len(work) and min(sizes) >= 1

    def worst(split: tuple[int, ...]) -> float:
        bounds = np.concatenate([[0], np.cumsum(split)])
        return max(sum(work[a:b]) / sp for a, b, sp in zip(bounds[:-1], bounds[1:], s, strict=True))

    best = min(worst(tuple(np.diff([0, *c, len(work)])))
               for c in itertools.combinations(range(1, len(work)), pp - 1))
    assert worst(sizes) == pytest.approx(best, rel=1e-6)


def test_enumeration_covers_divisors_and_rejects_bad_plans(gpt_units: Units) -> None:
    pricer = Pricer(gpt_units, _cluster(), 32)
    plans = enumerate_plans(pricer)
    assert all(p.dp * p.tp * p.pp == 8 for p in plans)
    assert {(p.dp, p.tp, p.pp) for p in plans} == {(8 // (t * q), t, q) for t in (1, 2, 4, 8) for q in (1, 2, 4, 8)
                                                    if 8 % (t * q) == 0}
    assert {p.zero for p in plans if p.dp > 1} == {0, 1, 2}
    for bad in (PlanConfig(2, 2, 1, 1), PlanConfig(8, 1, 1, 3), PlanConfig(8, 1, 1, 1, zero=3),
                PlanConfig(1, 1, 8, 64), PlanConfig(8, 1, 1, 1, order="x")):
        with pytest.raises(InputError):
            pricer.price(bad)


def test_random_search_is_deterministic_per_seed(gpt_units: Units) -> None:
    pricer = Pricer(gpt_units, _cluster(), 32)
    a = search(pricer, method="random", samples=20, seed=3, simulate_top=0)
    b = search(pricer, method="random", samples=20, seed=3, simulate_top=0)
    c = search(pricer, method="random", samples=20, seed=4, simulate_top=0)
    labels = [x.config.label for x in a.costs]
    assert labels == [x.config.label for x in b.costs] and len(labels) == 20
    assert [x.step_s for x in a.ranked] == [x.step_s for x in b.ranked]
    assert labels != [x.config.label for x in c.costs]


def test_one_f_one_b_schedule() -> None:
    for stages, m in ((4, 8), (4, 2), (1, 3)):
        for p in range(stages):
            order = one_f_one_b(p, stages, m)
            assert sorted(order) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
            assert all(order.index(("F", i)) < order.index(("B", i)) for i in range(m))


def test_simulator_agrees_with_the_price_where_nothing_contends() -> None:
    units = _uniform_units(8, boundary=0.0, params=0.0)
    pricer = Pricer(units, _cluster(nodes=1, per_node=4, memory="80GiB"), 16)
    cost = pricer.price(PlanConfig(1, 1, 4, 8))
    sim = simulate_plan(pricer, cost)
    assert sim.step_s == pytest.approx(cost.step_s, rel=1e-6)
    assert sim.busy_fraction == pytest.approx(8 / 11, rel=1e-6)  # m / (m + pp - 1)


def test_simulator_reranks_the_top_plans(gpt_units: Units) -> None:
    pricer = Pricer(gpt_units, _cluster(memory="80GiB"), 32)
    result = search(pricer, simulate_top=3)
    assert 1 <= len({result.simulated[c.config.label] for c in result.ranked[:9] if c.config.label in result.simulated})
    head = [c for c in result.ranked if c.config.label in result.simulated]
    times = [result.simulated[c.config.label] for c in head]
    assert times == sorted(times) and result.ranked[: len(head)] == head
    table = result.table()
    assert table["loses_on"].iloc[0] == "-" and set(table["loses_on"]) <= {
        "-", "tie", "memory", "compute", "communication", "bubble", "simulation"}


def test_cli_plan_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan"
    code = main(["plan", "--model", "resnet18", "--image-size", "64", "--cluster", "4x4-a100-v100", "--batch-size",
                 "16", "--out", str(out), "--simulate-top", "2", "--no-progress"])
    text, _ = capsys.readouterr()
    assert code == 0 and "best:" in text
    for name in ("plans.csv", "plans.md", "best_plan.json", "plans.png"):
        assert (out / name).stat().st_size > 0
    summary = json.loads((out / "best_plan.json").read_text())
    assert summary["best"]["plan"] in text and summary["cluster"] == "4x4-a100-v100"
    assert "loses_on" in (out / "plans.md").read_text()


def test_cli_plan_with_measured_op_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flexcomm.planner.graphs import save_op_times

    graph = build_graph("eca-resnet20", batch_size=8)
    slow = tmp_path / "slow.json"
    save_op_times(str(slow), dict.fromkeys(graph.nodes, 1e-3), 8, "1TFLOP/s")  # every op 1 ms on a 1 TFLOP/s device
    steps = {}
    for name, extra in (("flops", []), ("measured", ["--op-times", str(slow)])):
        code = main(["plan", "--model", "eca-resnet20", "--cluster", "8x1-10gbe", "--batch-size", "64", "--out",
                     str(tmp_path / name), "--simulate-top", "0", "--no-progress", *extra])
        assert code == 0
        steps[name] = json.loads((tmp_path / name / "best_plan.json").read_text())["best"]["breakdown_s"]
    capsys.readouterr()
    # 136 ops x 1 ms per 8 samples at 1 TFLOP/s -> on 125 TFLOP/s, 8 samples per rank, x3 for the backward
    ops = graph.number_of_nodes()
    assert steps["measured"]["compute_s"] == pytest.approx(ops * 1e-3 / 125 * 3, rel=0.05)
    assert steps["flops"]["compute_s"] != pytest.approx(steps["measured"]["compute_s"], rel=0.05)  # replaced


@pytest.mark.parametrize(("argv", "field"), [
    (["--model", "alexnet"], "model"),
    (["--model", "gpt", "--cluster", "nowhere"], "cluster"),
    (["--model", "resnet18", "--layers", "3"], "layers"),
    (["--model", "resnet18", "--batch-size", "0"], "batch-size"),
    (["--model", "resnet18", "--search", "greedy"], "search"),
    (["--model", "gpt", "--layers", "96", "--hidden", "12288", "--heads", "96", "--cluster", "8x1-v100-40g",
      "--precision", "fp16"], "model"),
])
def test_cli_plan_bad_input_is_one_line_exit_2(argv: list[str], field: str, capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    code = main(["plan", *argv, "--out", str(tmp_path), "--no-progress"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and field in err


def test_cli_plan_takes_a_calibration_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A profile fitted at 1 Gbit/s makes the 10 GbE cluster's gradient allreduce about 10x slower."""
    from flexcomm.costmodel.calibration import fit, synthetic_measurements

    profile = tmp_path / "profile.json"
    fit(synthetic_measurements("allreduce", "ring", 25e-6, 1 / 1.25e8, noise=0.0)).save(profile)
    dp_comm = {}
    for name, extra in (("plain", []), ("profiled", ["--profile", str(profile)])):
        code = main(["plan", "--model", "resnet18", "--cluster", "8x1-10gbe", "--batch-size", "64", "--out",
                     str(tmp_path / name), "--simulate-top", "0", "--no-progress", *extra])
        assert code == 0
        dp_comm[name] = json.loads((tmp_path / name / "best_plan.json").read_text())["best"]["dp_comm_s"]
    capsys.readouterr()
    assert dp_comm["profiled"] == pytest.approx(10 * dp_comm["plain"], rel=0.1)


def test_the_graph_planner_prices_and_simulates_a_compressed_data_parallel_exchange(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``plan --model resnet50 --scheme powersgd``: every plan's data-parallel groups exchange as PowerSGD
    (its calls, device work and error feedback), and the simulator's re-ranking runs the same calls."""
    import json

    from flexcomm.experiments.cli import main

    runs = {}
    for scheme in ("dense", "powersgd"):
        out = tmp_path / scheme
        assert main(["plan", "--model", "resnet50", "--cluster", "4x8-a100-ib", "--out", str(out), "--no-progress",
                     "--scheme", scheme, "--simulate-top", "1"]) == 0
        runs[scheme] = json.loads((out / "best_plan.json").read_text())
    printed = capsys.readouterr().out
    assert "data-parallel exchange: powersgd" in printed
    dense, powersgd = runs["dense"]["best"], runs["powersgd"]["best"]
    assert powersgd["dp_algorithm"].startswith("powersgd/") and not dense["dp_algorithm"].startswith("powersgd")
    assert powersgd["peak_memory_bytes"] > dense["peak_memory_bytes"]  # the fp32 error feedback
    simulated = runs["powersgd"]["simulated"][powersgd["plan"]]
    assert simulated == pytest.approx(powersgd["step_s"], rel=0.05)
    assert powersgd["step_s"] != dense["step_s"]


def test_plans_that_differ_only_in_memory_are_one_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a pipeline or a tensor-parallel collective per micro-batch, the micro-batch count splits the same
    work into equal pieces: memory only, like the ZeRO stage. plans.png drew six such rows of one plan."""
    from flexcomm.experiments.cli import main
    from flexcomm.planner.plans import PlanConfig
    from flexcomm.planner.search import signature

    def cfg(**fields):  # noqa: ANN003, ANN202
        return PlanConfig(**{"dp": 32, "tp": 1, "pp": 1, "micro_batches": 1, "zero": 0, "order": "tp-dp-pp",
                             **fields})

    assert signature(cfg(micro_batches=1)) == signature(cfg(micro_batches=8)) == signature(cfg(zero=2))
    assert signature(cfg(dp=16, pp=2, micro_batches=4)) != signature(cfg(dp=16, pp=2, micro_batches=8))
    assert main(["plan", "--model", "resnet18", "--cluster", "4x8-a100-ib", "--out", str(tmp_path),
                 "--no-progress", "--simulate-top", "0"]) == 0
    rows = [line.split()[1] for line in capsys.readouterr().out.splitlines() if line.strip()[:2] in
            {f"{n}." for n in range(1, 6)}]
    schedules = [tuple(part for part in plan.split("-") if not part.startswith(("z", "m"))) for plan in rows]
    pp1 = [s for s in schedules if "pp1" in s and "tp1" in s]
    assert len(pp1) == len(set(pp1)) and len(rows) == 5


def test_every_feasible_plan_simulates_with_its_buckets_overlapping_the_backward(gpt_units: Units) -> None:
    """Each plan's buckets fill in its last backward on the simulator (planner/overlap.py): every feasible plan
    of a search runs (a bucket ready a rounding error before the one before it once crashed simpy), and the pure
    data-parallel one, where nothing else contends, simulates as its price says."""
    from flexcomm.planner.search import enumerate_plans

    pricer = Pricer(gpt_units, _cluster(memory="80GiB"), 32)
    costs = [pricer.price(c) for c in enumerate_plans(pricer)]
    feasible = [c for c in costs if c.feasible]
    assert feasible
    for cost in feasible:
        assert simulate_plan(pricer, cost).step_s > 0
    pure = next(c for c in feasible if c.config.dp == 8 and c.config.micro_batches == 1)
    assert pure.dp_exposed_s <= pure.dp_comm_s  # one bucket here (a small model): the backward hides none of it
    assert simulate_plan(pricer, pure).step_s == pytest.approx(pure.step_s, rel=0.05)
