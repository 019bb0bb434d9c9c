"""The bounded stream every trace is read through, and the bounded JSON/CSV readers of run folders."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.bounded_stream import open_bounded, read_csv_bounded, read_json_bounded
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import Limit


def _limit(n: int) -> Limit:
    return Limit("FLEXCOMM_TEST_LIMIT_NOT_SET", n, "bytes")


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=200_000), compressed=st.booleans())
def test_what_comes_out_is_the_file_or_its_gunzipped_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes,
                                                           compressed: bool) -> None:
    path = tmp_path_factory.mktemp("s") / "f"
    raw = gzip.compress(data) if compressed else data
    if not compressed and raw[:2] == b"\x1f\x8b":  # plain bytes that look like gzip are read as gzip
        raw = b"x" + raw
        data = raw
    path.write_bytes(raw)
    with open_bounded(path, "f", limit=_limit(max(1, len(data), len(raw)))) as stream:  # the file's size counts too
        assert stream.read() == data
    if data:  # one byte less than it produces: refused, naming the limit
        with pytest.raises(InputError, match="at most"), open_bounded(path, "f", limit=_limit(len(data) - 1)) as s:
            s.read()


def test_a_gzip_bomb_stops_at_the_limit_with_memory_at_a_chunk(tmp_path: Path) -> None:
    path = tmp_path / "bomb.gz"
    path.write_bytes(gzip.compress(b"\0" * 50_000_000))  # 50 MB from ~50 KB
    with pytest.raises(InputError, match="at most 1,000,000 bytes once decompressed"):
        with open_bounded(path, "trace", limit=_limit(1_000_000)) as stream:
            while stream.read(1 << 16):
                pass


@pytest.mark.parametrize(("tail", "message"), [
    (gzip.compress(b"more"), "one gzip stream"), (b"junk", "one gzip stream"), (None, "it ends early")])
def test_a_gzip_file_is_one_whole_stream(tmp_path: Path, tail: bytes | None, message: str) -> None:
    whole = gzip.compress(b'{"a": 1}')
    path = tmp_path / "t.json.gz"
    path.write_bytes(whole[:-6] if tail is None else whole + tail)
    with pytest.raises(InputError, match=message), open_bounded(path, "trace") as stream:
        stream.read()


def test_json_nesting_is_refused_while_read(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 5_000 + b"]" * 5_000)
    with pytest.raises(InputError, match="JSON nested at most 100"), open_bounded(path, "t", json_nesting=True) as s:
        s.read()
    with open_bounded(path, "t") as stream:  # not asked to: plain bytes
        assert len(stream.read()) == 10_000


def test_run_files_are_read_bounded_and_one_line_when_bad(tmp_path: Path) -> None:
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        read_json_bounded(fifo, "run")
    with pytest.raises(InputError, match="character device"):
        read_csv_bounded("/dev/zero", "run")
    damaged = tmp_path / "summary.json"
    damaged.write_text('{"strategy": ')
    with pytest.raises(InputError, match="a JSON file that parses"):
        read_json_bounded(damaged, "run")
    table = tmp_path / "steps.csv"
    table.write_text("step,step_s\n0,0.5\n1,0.25\n")
    assert read_csv_bounded(table, "run")["step_s"].tolist() == [0.5, 0.25]
    with pytest.raises(InputError, match="at most 10 bytes"):
        read_csv_bounded(table, "run", limit=_limit(10))
