"""Unit parsing: hand-checked values, round trips, and rejection of everything else as InputError."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.units import (
    MIN_BANDWIDTH_BPS,
    format_bandwidth,
    format_size,
    format_time,
    parse_bandwidth,
    parse_flops,
    parse_size,
    parse_time,
)

PARSERS = [parse_size, parse_bandwidth, parse_time, parse_flops]


@pytest.mark.parametrize(
    ("parser", "text", "value"),
    [
        (parse_size, "64MiB", 67108864),
        (parse_size, "1GB", 1e9),
        (parse_size, "80GiB", 80 * 2**30),
        (parse_size, "4096", 4096),
        (parse_size, "8kb", 1000),  # bits
        (parse_size, "2 bytes", 2),
        (parse_size, 512, 512),
        (parse_bandwidth, "10Gbit/s", 1.25e9),
        (parse_bandwidth, "1.25GB/s", 1.25e9),
        (parse_bandwidth, "100Mbps", 12.5e6),
        (parse_bandwidth, "400 Gbit / s", 50e9),
        (parse_bandwidth, "1e9", 1e9),  # YAML 1.1 reads a bare 1e9 as a string
        (parse_bandwidth, 1.25e9, 1.25e9),
        (parse_time, "10us", 1e-5),
        (parse_time, "2ms", 2e-3),
        (parse_time, "25us", 25e-6),
        (parse_time, "10\u00b5s", 1e-5),  # micro sign
        (parse_time, "10\u03bcs", 1e-5),  # Greek mu
        (parse_time, "1.5min", 90.0),
        (parse_time, "0.5", 0.5),
        (parse_time, 0, 0.0),
        (parse_flops, "312TFLOP/s", 312e12),
        (parse_flops, "19.5T", 19.5e12),
        (parse_flops, "1.5e13", 1.5e13),
        (parse_flops, "989 TFLOPS", 989e12),
    ],
)
def test_hand_values(parser, text, value):
    assert parser(text) == pytest.approx(value, rel=1e-15)


def test_sub_second_times_are_the_exact_floats():
    # "10us" is the literal 1e-5, not 10 * 1e-6 (which is 9.999999999999999e-06).
    assert parse_time("10us") == 1e-5
    assert parse_time("50us") == 5e-5
    assert parse_time("5ns") == 5e-9


SIZE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 1e3, "MB": 1e6, "GB": 1e9, "Mb": 1e6 / 8}
BANDWIDTH_UNITS = {"B/s": 1, "GB/s": 1e9, "Gbit/s": 1e9 / 8, "Mbps": 1e6 / 8, "MiB/s": 2**20, "kbit/s": 1e3 / 8}
TIME_UNITS = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60, "h": 3600}
FLOPS_UNITS = {"FLOP/s": 1, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOPS": 1e15, "T": 1e12}

numbers = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize(
    ("parser", "units"),
    [
        (parse_size, SIZE_UNITS),
        (parse_bandwidth, BANDWIDTH_UNITS),
        (parse_time, TIME_UNITS),
        (parse_flops, FLOPS_UNITS),
    ],
    ids=["size", "bandwidth", "time", "flops"],
)
@settings(max_examples=60, deadline=None)
@given(number=numbers, data=st.data())
def test_number_and_unit_parse_to_number_times_scale(parser, units, number, data):
    unit = data.draw(st.sampled_from(sorted(units)))
    space = data.draw(st.sampled_from(["", " "]))
    if parser is parse_bandwidth and number * units[unit] < MIN_BANDWIDTH_BPS:
        with pytest.raises(InputError, match="at least 1bit/s"):  # slower than any link: refused, not priced
            parser(f"{number!r}{space}{unit}")
        return
    assert parser(f"{number!r}{space}{unit}") == pytest.approx(number * units[unit], rel=1e-12)


@pytest.mark.parametrize(
    ("fmt", "parser"),
    [(format_size, parse_size), (format_bandwidth, parse_bandwidth), (format_time, parse_time)],
    ids=["size", "bandwidth", "time"],
)
@settings(max_examples=100, deadline=None)
@given(value=st.floats(min_value=1e-3, max_value=1e18, allow_nan=False, allow_infinity=False))
def test_format_then_parse_round_trips(fmt, parser, value):
    # format_* keeps three significant digits, so the round trip is within half a unit of the
    # third digit: 0.5 %. (A bandwidth below 1 bit/s is refused: tested above.)
    if parser is parse_bandwidth:
        value = max(value, MIN_BANDWIDTH_BPS)
    assert parser(fmt(value)) == pytest.approx(value, rel=5e-3)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@pytest.mark.parametrize(
    "bad",
    [
        "",
        "fast",
        "10 parsecs",
        "GB",
        "1..2GB",
        "nan",
        "inf",
        "-1",
        "-5GB",
        "-10Gbit/s",
        "-2ms",
        float("nan"),
        float("inf"),
        -1,
        -0.5,
        True,
        False,
        None,
        10**400,
        [1],
        "10Gbit/s/s",
    ],
    ids=repr,
)
def test_garbage_is_an_input_error_naming_the_field(parser, bad):
    # None of these is valid for any parser; the caller's field name must come back.
    with pytest.raises(InputError) as info:
        parser(bad, "cluster.inter_link.bandwidth")
    assert info.value.field == "cluster.inter_link.bandwidth"
    assert "such as" in info.value.expected
    assert str(info.value).startswith("cluster.inter_link.bandwidth: got ")


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (parse_size, "10Gbit/s"),
        (parse_bandwidth, "10G"),
        (parse_bandwidth, "10GB"),
        (parse_bandwidth, "0Gbit/s"),
        (parse_bandwidth, 0),
        (parse_time, "10GB"),
        (parse_flops, "0"),
        (parse_flops, "10GB/s"),
        (parse_size, "1e400"),
        (parse_time, "1e400s"),
    ],
)
def test_wrong_kind_of_unit_or_out_of_range(parser, text):
    with pytest.raises(InputError):
        parser(text)


def test_default_field_names():
    assert pytest.raises(InputError, parse_size, "x").value.field == "size"
    assert pytest.raises(InputError, parse_bandwidth, "x").value.field == "bandwidth"
    assert pytest.raises(InputError, parse_time, "x").value.field == "time"
    assert pytest.raises(InputError, parse_flops, "x").value.field == "peak_flops"


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(max_size=20), st.from_regex(r"\A-?[0-9.eE+-]{1,8} ?[kKMGTPEiBbitsunmhF/p]{0,7}\Z")))
def test_any_text_gives_a_finite_nonnegative_number_or_an_input_error(text):
    for parser in PARSERS:
        try:
            value = parser(text)
        except InputError:
            continue
        assert math.isfinite(value) and value >= 0


def test_input_error_survives_pickling_from_a_worker() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(InputError("sweep.bandwidth[1]", "fast", "a bandwidth such as 10Gbit/s")))
    assert (error.field, error.got, error.expected) == ("sweep.bandwidth[1]", "fast", "a bandwidth such as 10Gbit/s")
    assert str(error) == "sweep.bandwidth[1]: got 'fast'; expected a bandwidth such as 10Gbit/s"


@pytest.mark.parametrize(("count", "text"), [(25.557e6, "25.6M"), (1.3e9, "1.3B"), (138.36e6, "138M"), (999, "999"),
                                             (1000, "1K"), (7e12, "7T")])
def test_counts_read_as_people_write_them(count: float, text: str) -> None:
    from flexcomm.costmodel.units import format_count

    assert format_count(count) == text
