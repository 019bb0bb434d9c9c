"""Time-varying networks: traces against hand calculations, seeded processes reproducible bit for bit."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import simpy

from flexcomm.costmodel.errors import InputError
from flexcomm.sim.collectives import simulate_collective
from flexcomm.sim.dynamics import CrossTraffic, JitterDynamics, MarkovCongestion, TraceDynamics, TraceEvent
from flexcomm.sim.network import Network

GBIT = 1e9 / 8


def _trace(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_trace_halving_bandwidth_mid_transfer_gives_hand_computed_finish(tmp_path: Path) -> None:
    """1.25 GB over 10 Gbit/s with 25 us latency; at 0.5 s node 0's NIC drops to 5 Gbit/s."""
    path = _trace(tmp_path, "time_s,link,bandwidth,latency\n0.5,node0,5Gbit/s,\n")
    env = simpy.Environment()
    net = Network(env, "8x1-10gbe", dynamics=TraceDynamics.from_csv(path))
    n, lat = 1.25e9, 25e-6
    event = net.transfer([(0, 1)], n)
    env.run(until=event)
    moved = (0.5 - lat) * 10 * GBIT
    expected = 0.5 + (n - moved) / (5 * GBIT)
    assert event.value.end == pytest.approx(expected, rel=1e-12)
    assert event.value.bottleneck == "node0->switch"


def test_trace_accepts_units_all_links_and_latency_changes(tmp_path: Path) -> None:
    path = _trace(tmp_path, "time_s,link,bandwidth,latency\n"
                            "0,*,,100us\n"          # every inter-node edge: 100 us each way
                            "10ms,node3->switch,1Gbit/s,\n")
    env = simpy.Environment()
    net = Network(env, "8x1-10gbe", dynamics=TraceDynamics.from_csv(path))
    env.run(until=0.02)
    assert net.pattern([(0, 1)]).latency() == pytest.approx(200e-6)  # two edges of 100 us
    assert net.bandwidth("node3->switch")[0] == pytest.approx(GBIT)
    assert net.bandwidth("switch->node3")[0] == pytest.approx(10 * GBIT)


def test_trace_can_restore_and_events_apply_in_time_order() -> None:
    trace = TraceDynamics([TraceEvent(0.2, "node0", 10 * GBIT), TraceEvent(0.1, "node0", 5 * GBIT)])
    env = simpy.Environment()
    net = Network(env, "8x1-10gbe", dynamics=trace)
    event = net.transfer([(0, 1)], 1.25e9, latency_s=0.0)
    env.run(until=event)
    # 0.1 s at 10, 0.1 s at 5, then 10 Gbit/s again: 0.125 + 0.0625 GB done by 0.2 s
    assert event.value.end == pytest.approx(0.2 + (1.25e9 - 0.1 * 10 * GBIT - 0.1 * 5 * GBIT) / (10 * GBIT))


@pytest.mark.parametrize(
    "text,field",
    [
        ("when,link,bandwidth\n0,node0,1Gbit/s\n", "trace"),               # no time_s column
        ("time_s,link\n0,node0\n", "trace"),                               # neither bandwidth nor latency
        ("time_s,link,bandwidth,latency\nsoon,node0,1Gbit/s,\n", "time_s"),
        ("time_s,link,bandwidth,latency\n-1,node0,1Gbit/s,\n", "time_s"),
        ("time_s,link,bandwidth,latency\n0,node0,fast,\n", "bandwidth"),
        ("time_s,link,bandwidth,latency\n0,node0,10G,\n", "bandwidth"),     # prefix without unit
        ("time_s,link,bandwidth,latency\n0,node0,,ten\n", "latency"),
        ("time_s,link,bandwidth,latency\n0,,1Gbit/s,\n", "link"),
        ("time_s,link,bandwidth,latency\n0,node0,,\n", "bandwidth"),        # nothing to change
        ("time_s,link,bandwidth,latency\n0,node0,1Gbit/s,1us,extra\n", "line 2"),
        ("", "trace"),
    ],
)
def test_malformed_trace_is_an_input_error_naming_the_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InputError) as info:
        TraceDynamics.from_csv(_trace(tmp_path, text))
    assert field in info.value.field
    if field not in ("trace",):
        assert "trace.csv line 2" in info.value.field


def test_trace_naming_an_unknown_link_fails_when_attached(tmp_path: Path) -> None:
    trace = TraceDynamics.from_csv(_trace(tmp_path, "time_s,link,bandwidth,latency\n0,node42,1Gbit/s,\n"))
    with pytest.raises(InputError, match="link") as info:
        Network(simpy.Environment(), "8x1-10gbe", dynamics=trace)
    assert info.value.got == "node42"


def test_missing_trace_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="trace"):
        TraceDynamics.from_csv(tmp_path / "nope.csv")


def _noisy(seed: int) -> list:
    return [
        JitterDynamics(sigma=0.3, period_s=2e-3, seed=seed),
        MarkovCongestion(mean_good_s=0.02, mean_congested_s=0.005, congested_factor=0.25, seed=seed + 1),
        CrossTraffic(rate_per_s=500, mean_bytes="1MiB", seed=seed + 2),
    ]


def test_same_seed_same_result_bit_for_bit() -> None:
    runs = [simulate_collective("8x1-10gbe", "allreduce", "ring", 16 * 2**20, granularity="steps",
                                dynamics=_noisy(7)) for _ in range(2)]
    assert runs[0].seconds == runs[1].seconds  # exact, not approx
    pd.testing.assert_frame_equal(runs[0].flows, runs[1].flows, check_exact=True)
    assert (runs[0].flows["tag"] == "cross-traffic").any()


def test_different_seeds_differ() -> None:
    a = simulate_collective("8x1-10gbe", "allreduce", "ring", 16 * 2**20, granularity="steps", dynamics=_noisy(1))
    b = simulate_collective("8x1-10gbe", "allreduce", "ring", 16 * 2**20, granularity="steps", dynamics=_noisy(2))
    assert a.seconds != b.seconds


@pytest.mark.parametrize("make", [
    lambda s: JitterDynamics(sigma=0.5, period_s=1e-3, seed=s),
    lambda s: MarkovCongestion(mean_good_s=0.05, mean_congested_s=0.002, seed=s),
    lambda s: CrossTraffic(rate_per_s=1000, mean_bytes=2e6, seed=s),
], ids=["jitter", "markov", "cross-traffic"])
def test_each_process_alone_is_reproducible_and_seed_dependent(make) -> None:
    run = lambda s: simulate_collective("8x1-10gbe", "allreduce", "ring", 8 * 2**20,  # noqa: E731
                                        granularity="steps", dynamics=make(s)).seconds
    assert run(3) == run(3)
    assert run(3) != run(4)


def test_congestion_and_cross_traffic_slow_the_ring_down() -> None:
    base = simulate_collective("8x1-10gbe", "allreduce", "ring", 32 * 2**20, granularity="steps").seconds
    always_bad = MarkovCongestion(mean_good_s=1e-9, mean_congested_s=1e3, congested_factor=0.5, seed=0,
                                  start_good=False)
    congested = simulate_collective("8x1-10gbe", "allreduce", "ring", 32 * 2**20, granularity="steps",
                                    dynamics=always_bad)
    assert congested.seconds > 1.9 * (base - 14 * 25e-6)
    busy = simulate_collective("8x1-10gbe", "allreduce", "ring", 32 * 2**20, granularity="steps",
                               dynamics=CrossTraffic(rate_per_s=2000, mean_bytes="4MiB", seed=1))
    assert busy.seconds > base
    ring_rows = busy.flows[busy.flows["tag"].str.startswith("allreduce")]
    assert ring_rows["bottleneck_flows"].max() > 1  # the record shows the sharing
    assert "cross-traffic" not in busy.explain()


def test_jitter_keeps_the_mean_bandwidth() -> None:
    env = simpy.Environment()
    net = Network(env, "8x1-10gbe", dynamics=JitterDynamics(sigma=0.2, period_s=1.0, seed=5))
    samples = []
    for t in range(400):
        env.run(until=t + 0.5)
        samples.extend(net.bandwidth("*"))
    assert sum(samples) / len(samples) == pytest.approx(10 * GBIT, rel=0.01)


@pytest.mark.parametrize("bad", [
    lambda: JitterDynamics(sigma=-1),
    lambda: JitterDynamics(period_s=0),
    lambda: MarkovCongestion(congested_factor=1.5),
    lambda: MarkovCongestion(mean_good_s=0),
    lambda: CrossTraffic(rate_per_s=0, mean_bytes=1),
    lambda: CrossTraffic(rate_per_s=1, mean_bytes="lots"),
])
def test_bad_dynamics_parameters_are_input_errors(bad) -> None:
    with pytest.raises(InputError):
        bad()
