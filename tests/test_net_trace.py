"""Testbed traces: the simulator's format, checked strictly, and the paper's C1/C2 scaled to this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.errors import InputError
from flexcomm.emulation.network import DYNAMIC_NETWORKS
from flexcomm.real_backend.net_trace import builtin_trace, load_trace, parse_trace


def test_c1_is_the_papers_schedule_scaled_in_time_and_rate() -> None:
    trace = load_trace("c1", 4, duration_s=120.0, max_rate="200Mbit/s")
    schedule, epochs = DYNAMIC_NETWORKS["c1"]
    assert [c.time_s for c in trace.changes] == pytest.approx([s / epochs * 120 for s, _, _ in schedule] + [120.0])
    rates = [c.rates[0][2] for c in trace.changes[:-1]]
    assert rates == pytest.approx([gbits / 25 * 200e6 / 8 for _, _, gbits in schedule])  # 25 Gbit/s -> 200 Mbit/s
    assert [c.delay_s for c in trace.changes[:-1]] == pytest.approx([lat for _, lat, _ in schedule])
    assert trace.changes[-1].rates == () and trace.changes[-1].delay_s is None  # the end marker changes nothing
    assert trace.duration_s == 120.0 and trace.has_latency
    assert all(len(c.rates) == 8 for c in trace.changes[:-1])  # 4 ranks x both directions


def test_state_at_follows_the_changes() -> None:
    trace = load_trace("c2", 2, duration_s=48.0, max_rate="25Mbit/s")
    assert trace.state_at(0.0)[1:] == pytest.approx((25e6 / 8, 1e-3))
    phase, rate, delay = trace.state_at(21.5)  # C2's slowest phase: epochs 20-27
    assert (phase, rate, delay) == (5, pytest.approx(1e6 / 8), pytest.approx(32e-3))
    assert trace.state_at(1e9)[0] == len(trace.changes) - 1


def test_links_select_ranks_and_directions(tmp_path: Path) -> None:
    text = "time_s,link,bandwidth,latency\n0,*,100Mbit/s,1ms\n1,node1,10Mbit/s,\n2,node0->switch,5Mbit/s,\n" \
           "3,switch->node2,1Mbit/s,\n"
    trace = parse_trace(text, "t.csv", 3)
    assert set(trace.changes[1].rates) == {(1, "egress", 10e6 / 8), (1, "ingress", 10e6 / 8)}
    assert trace.changes[2].rates == ((0, "egress", 5e6 / 8),)
    assert trace.changes[3].rates == ((2, "ingress", 1e6 / 8),)
    assert trace.changes[0].delay_s == pytest.approx(2e-3)  # one hop 1 ms: rank -> switch -> rank is 2 ms


@pytest.mark.parametrize(("text", "field"), [
    ("time_s,link,bandwidth\n2,*,1Mbit/s\n1,*,2Mbit/s\n", "time_s"),          # out of order
    ("time_s,link,bandwidth\n0,*,-1Mbit/s\n", "bandwidth"),                    # negative
    ("time_s,link,bandwidth\n0,*,0Mbit/s\n", "bandwidth"),                     # zero
    ("time_s,link,bandwidth\n0,node7,1Mbit/s\n", "link"),                      # no such rank
    ("time_s,link,bandwidth\n0,spine0,1Mbit/s\n", "link"),                     # not a testbed link
    ("time_s,link,bandwidth,latency\n0,node0,,1ms\n", "link"),                 # latency on one link only
    ("time_s,link,bandwidth,latency\n0,*,,900ms\n", "latency"),               # beyond the delay line
    ("time_s,link,speed\n0,*,1Mbit/s\n", "trace"),                             # no bandwidth/latency column
    ("time_s,link,bandwidth\n0,node1,\n", "bandwidth"),                        # nothing to set on a link
    ("time_s,link,bandwidth\nsoon,*,1Mbit/s\n", "time_s"),                     # not a time
])
def test_bad_traces_name_the_line_and_field(text: str, field: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_trace(text, "bad.csv", 4)
    message = str(caught.value)
    assert message.startswith(field) and "\n" not in message
    if field != "trace":
        assert "bad.csv line" in message


def test_a_trace_longer_than_the_run_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text("time_s,link,bandwidth\n0,*,1Mbit/s\n600,*,2Mbit/s\n")
    with pytest.raises(InputError, match="trace: got 'long.csv lasts 600 s'"):
        load_trace(path, 2, lifetime_s=60.0)
    assert load_trace(path, 2, lifetime_s=601.0).duration_s == 600.0
    with pytest.raises(InputError, match="c1, c2 or a readable CSV"):
        load_trace(tmp_path / "missing.csv", 2)
    with pytest.raises(InputError, match="c1, c2 or a CSV"):
        builtin_trace("c3")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0.1, 1000)), min_size=1, max_size=12),
       st.integers(1, 6))
def test_any_sorted_trace_round_trips_and_holds_the_last_value(rows: list[tuple[float, float]], ranks: int) -> None:
    rows = sorted(rows)
    text = "time_s,link,bandwidth\n" + "".join(f"{t!r},*,{mbit!r}Mbit/s\n" for t, mbit in rows)
    trace = parse_trace(text, "p.csv", ranks)
    assert len(trace.changes) == len(rows) and trace.duration_s == rows[-1][0]
    for t, _ in rows:
        _, rate, _ = trace.state_at(t)
        last = [m for (s, m) in rows if s <= t][-1]
        assert rate == pytest.approx(last * 1e6 / 8)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=2, max_size=8, unique=True))
def test_any_decrease_in_time_is_refused(times: list[float]) -> None:
    shuffled = sorted(times, reverse=True)  # strictly decreasing somewhere
    text = "time_s,link,bandwidth\n" + "".join(f"{t!r},*,1Mbit/s\n" for t in shuffled)
    with pytest.raises(InputError, match="time_s"):
        parse_trace(text, "d.csv", 2)
