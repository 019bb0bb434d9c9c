"""Faults: parsing, hand-computed restart costs, stalled collectives, elastic shrink and grow, seeds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from flexcomm.costmodel.errors import InputError
from flexcomm.sim.faults import Fault, FaultPolicy, RandomNodeFaults, parse_fault
from flexcomm.sim.training import simulate_training
from flexcomm.sim.training_config import TrainingConfig

CLUSTER = "8x1-10gbe"
CONFIG = TrainingConfig(workload="resnet18", iterations=6)


def _clean(config: TrainingConfig = CONFIG, policy: FaultPolicy | None = None, cluster: str = CLUSTER):
    return simulate_training(cluster, config, policy=policy)


def _identity(result) -> None:  # noqa: ANN001 - a TrainingResult
    """Job time = useful iterations + time lost (reduced throughput is inside the useful iterations)."""
    lost = result.lost
    expected = result.useful["time_s"].sum() + lost.total_s - lost.reduced_throughput_s
    assert result.job_time_s == pytest.approx(expected, rel=1e-12, abs=1e-9)


# --- specs ------------------------------------------------------------------------------------------


def test_fault_specs_parse() -> None:
    assert parse_fault("node3@12s") == Fault("node", "3", 12.0, "node3@12s")
    assert parse_fault("link:node3->switch@500ms") == Fault("link", "node3->switch", 0.5, "link:node3->switch@500ms")
    assert parse_fault("random:mtbf=2h", seed=4) == RandomNodeFaults(7200.0, 4, "random:mtbf=2h")
    assert parse_fault("random:mtbf=10min,seed=9").seed == 9


@pytest.mark.parametrize("spec", ["node3", "node@1s", "nodeX@1s", "node3@soon", "link:@1s", "disk3@1s",
                                  "random:mtbf=", "random:every=1h", "node3@-1s", "random:mtbf=0s"])
def test_malformed_fault_specs_name_the_field(spec: str) -> None:
    with pytest.raises(InputError) as info:
        parse_fault(spec)
    assert info.value.field == "fail"


def test_policy_validation() -> None:
    with pytest.raises(InputError, match="checkpoint-every"):
        FaultPolicy(checkpoint_every=-1)
    with pytest.raises(InputError, match="timeout"):
        FaultPolicy(timeout_s=-1.0)
    assert FaultPolicy(timeout_s="2min").timeout_s == 120.0
    assert FaultPolicy().write_seconds(10**9) == pytest.approx(6.0)  # 12 GB at 2 GB/s
    with pytest.raises(InputError, match="fail"):
        simulate_training(CLUSTER, CONFIG, faults=["node8@1s"])
    with pytest.raises(InputError, match="fail"):
        simulate_training(CLUSTER, CONFIG, faults=["link:nowhere@1s"])


# --- a failure, by hand -------------------------------------------------------------------------------


def test_a_node_failure_costs_timeout_restart_and_lost_work() -> None:
    """Node 5 dies in iteration 3's forward pass; the job restarts from the checkpoint after iteration 2.

    Survivors enter bucket 0 at t_entry and the watchdog fires ``timeout`` later; relaunch + load;
    iterations 2..5 again. So the failure costs (t_entry - checkpoint end) + timeout + restart + load.
    """
    policy = FaultPolicy(checkpoint_every=2, checkpoint_write_s=0.5, checkpoint_load_s=0.25, restart_s=3.0,
                         timeout_s=2.0, repair_s=0.0)
    clean = _clean(policy=policy)
    t = clean.iterations["time_s"].iloc[0]
    assert np.allclose(clean.iterations["time_s"], t)
    ckpt_end = 2 * t + 0.5
    start3 = 3 * t + 0.5
    forward = clean.attempts[0].scale * float(clean.layer_times[0].sum())
    t_fail = start3 + 0.5 * forward
    entry = clean.buckets.query("attempt == 3 and bucket == 0")["start_s"].iloc[0]
    assert entry > t_fail

    faulty = simulate_training(CLUSTER, CONFIG, policy=policy, faults=[f"node5@{float(t_fail)!r}s"])
    lost = faulty.lost
    assert lost.restarts == 1 and lost.repair_wait_s == 0
    assert lost.lost_work_s == pytest.approx(t_fail - ckpt_end, abs=1e-12)
    assert lost.detection_s == pytest.approx(entry + 2.0 - t_fail, abs=1e-12)
    assert lost.restart_s == pytest.approx(3.25, abs=1e-12)
    assert faulty.job_time_s == pytest.approx(clean.job_time_s + (entry - ckpt_end) + 2.0 + 3.25, abs=1e-9)
    assert faulty.iterations["status"].tolist() == ["ok", "ok", "lost", "failed"] + ["ok"] * 4
    assert faulty.iterations["step"].tolist() == [0, 1, 2, 3, 2, 3, 4, 5]
    assert faulty.faults["effect"].tolist() == ["caused restart"]
    failed = faulty.iterations.query("status == 'failed'").iloc[0]
    assert failed.end_s == pytest.approx(entry + 2.0)
    assert failed.stall_s == pytest.approx(entry + 2.0 - start3 - failed.compute_s)
    _identity(faulty)


def test_waiting_for_the_repair_on_the_same_ranks() -> None:
    policy = FaultPolicy(checkpoint_every=2, checkpoint_write_s=0.5, checkpoint_load_s=0.25, restart_s=3.0,
                         timeout_s=2.0, repair_s=10.0)
    faulty = simulate_training(CLUSTER, CONFIG, policy=policy, faults=["node5@0.2s"])
    detected = faulty.events.query("kind == 'detected'")["start_s"].iloc[0]
    assert faulty.lost.repair_wait_s == pytest.approx(0.2 + 10.0 - detected, abs=1e-12)
    assert faulty.iterations.query("status == 'ok'")["world_size"].eq(8).all()
    _identity(faulty)


def test_a_link_failure_stalls_the_running_collective_until_the_watchdog() -> None:
    clean = _clean()
    bucket = clean.buckets.query("attempt == 1 and bucket == 0").iloc[0]
    at = bucket.start_s + 0.3 * bucket.comm_s
    policy = FaultPolicy(timeout_s=2.0, restart_s=1.0, checkpoint_load_s=0.0, repair_s=5.0)
    faulty = simulate_training(CLUSTER, CONFIG, policy=policy, faults=[f"link:node0<->switch@{float(at)!r}s"])
    detected = faulty.events.query("kind == 'detected'")["start_s"].iloc[0]
    assert detected == pytest.approx(bucket.start_s + 2.0, abs=1e-12)  # its ranks entered at bucket.start_s
    assert faulty.lost.repair_wait_s == pytest.approx(at + 5.0 - detected, abs=1e-12)  # same ranks: wait for it
    hung = faulty.buckets.query("status == 'hung'").iloc[0]
    assert hung.start_s == pytest.approx(bucket.start_s)
    failed = faulty.iterations.query("status == 'failed'").iloc[0]
    # bytes moved until the link went down, then nothing: once a rank's backward is done, exposed comm
    # until the fault and stall after it
    assert failed.stall_s == pytest.approx(detected - max(at, failed.start_s + failed.compute_s), rel=1e-9)
    _identity(faulty)


def test_a_short_link_flap_only_slows_the_collective() -> None:
    clean = _clean()
    bucket = clean.buckets.query("attempt == 1 and bucket == 0").iloc[0]
    at = bucket.start_s + 0.3 * bucket.comm_s
    faulty = simulate_training(CLUSTER, CONFIG, policy=FaultPolicy(timeout_s=2.0, repair_s=0.1),
                               faults=[f"link:node0->switch@{float(at)!r}s"])
    assert faulty.lost.restarts == 0
    assert faulty.job_time_s == pytest.approx(clean.job_time_s + 0.1, rel=1e-9)


def test_faults_off_the_jobs_path_or_after_its_end_do_nothing() -> None:
    config = TrainingConfig(workload="resnet18", iterations=4, ranks=16)
    clean = simulate_training("4x8-a100-ib", config)
    faulty = simulate_training("4x8-a100-ib", config, faults=["link:node3->switch@1ms", "node2@2ms", "node0@1h"])
    assert faulty.job_time_s == pytest.approx(clean.job_time_s, rel=1e-12)
    assert faulty.faults["effect"].tolist() == ["no restart", "no restart", "after job end"]


# --- elastic ------------------------------------------------------------------------------------------


def test_elastic_shrink_continues_with_fewer_ranks_and_grows_back_at_a_checkpoint() -> None:
    config = TrainingConfig(workload="resnet18", iterations=30)
    policy = FaultPolicy(checkpoint_every=5, checkpoint_write_s=0.1, checkpoint_load_s=0.1, restart_s=1.0,
                         timeout_s=1.0, repair_s=1.5, elastic=True)
    clean = simulate_training("4x8-a100-ib", config, policy=policy)
    at = clean.iterations["end_s"].iloc[6] + 1e-4
    result = simulate_training("4x8-a100-ib", config, policy=policy, faults=[f"node2@{float(at)!r}s"])
    ok = result.iterations.query("status == 'ok'")
    sizes = ok["world_size"].tolist()
    assert sizes[:5] == [32] * 5 and 24 in sizes and sizes[-1] == 32
    shrunk = ok.query("world_size == 24")
    assert shrunk["epoch"].nunique() == 1 and len(shrunk) >= 5
    # global batch kept: each survivor computes 32/24 as much, and the exchange runs over 24 ranks
    full = ok.query("world_size == 32")
    assert shrunk["compute_s"].iloc[0] == pytest.approx(full["compute_s"].iloc[0] * 32 / 24, rel=1e-9)
    assert result.lost.shrinks == 1 and result.lost.grows == 1
    grow = result.events.query("kind == 'grow'").iloc[0]
    assert grow.start_s >= at + 1.5  # not before the repair
    assert result.lost.reduced_throughput_s == pytest.approx(
        (shrunk["time_s"] - full["time_s"].median()).sum(), rel=1e-9)
    assert ok["step"].tolist() == list(range(30))[:5] + list(range(5, 30))
    _identity(result)


def test_an_aborted_collective_does_not_come_back_when_its_link_is_repaired() -> None:
    """Elastic: node 0's link fails mid-collective, the job goes on without node 0, the link comes back
    while the shrunk job runs: the abandoned coflows must not resume and steal its bandwidth."""
    config = TrainingConfig(workload="resnet18", iterations=40)
    clean = _clean(config)
    bucket = clean.buckets.query("attempt == 1 and bucket == 0").iloc[0]
    at = bucket.start_s + 0.3 * bucket.comm_s
    policy = FaultPolicy(timeout_s=0.5, restart_s=0.2, checkpoint_load_s=0.0, checkpoint_write_s=0.0,
                         checkpoint_every=100, repair_s=0.5 + 0.2 + 0.3, elastic=True)
    result = simulate_training(CLUSTER, config, policy=policy, faults=[f"link:node0<->switch@{float(at)!r}s"])
    shrunk = result.iterations.query("status == 'ok' and world_size == 7")
    repaired = at + policy.repair_s
    assert shrunk["start_s"].min() < repaired < shrunk["end_s"].max()
    assert np.ptp(shrunk["time_s"].to_numpy()) < 1e-12


def test_random_failures_are_seeded() -> None:
    config = TrainingConfig(workload="resnet18", iterations=60)
    policy = FaultPolicy(checkpoint_every=10, checkpoint_write_s=0.05, checkpoint_load_s=0.05, restart_s=0.5,
                         timeout_s=0.5, repair_s=2.0, elastic=True)

    def run(seed: int):  # noqa: ANN202
        return simulate_training("4x8-a100-ib", config, policy=policy, faults=[f"random:mtbf=20s,seed={seed}"])

    a, b, c = run(1), run(1), run(2)
    pd.testing.assert_frame_equal(a.iterations, b.iterations, check_exact=True)
    pd.testing.assert_frame_equal(a.faults, b.faults, check_exact=True)
    assert not a.faults["time_s"].equals(c.faults["time_s"])
    assert a.lost.restarts >= 1 and a.completed == 60
    _identity(a)
    _identity(c)


def test_a_job_that_cannot_outrun_its_failures_aborts() -> None:
    policy = FaultPolicy(restart_s=1.0, timeout_s=1.0, repair_s=0.0, max_restarts=3)
    result = simulate_training(CLUSTER, TrainingConfig(workload="resnet18", iterations=50), policy=policy,
                               faults=["random:mtbf=1s"])
    assert result.aborted and result.completed < 50 and result.lost.relaunches == 3
    assert result.events["kind"].iloc[-1] == "aborted"
    assert math.isfinite(result.job_time_s)


def test_the_python_api_takes_one_fault_or_straggler_as_a_string() -> None:
    """flexcomm.simulate(faults="node2@1s") is one fault, not eight one-character ones."""
    import flexcomm

    one = flexcomm.simulate("4x8-a100-ib", "resnet50", iterations=3, faults="node2@0.05s", stragglers="1=1.5")
    listed = flexcomm.simulate("4x8-a100-ib", "resnet50", iterations=3, faults=["node2@0.05s"], stragglers=["1=1.5"])
    assert len(one.faults) == len(listed.faults) >= 1
    assert one.summary() == listed.summary()
