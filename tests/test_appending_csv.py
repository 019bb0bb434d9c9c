"""Row-by-row CSV logs that a kill can interrupt: a torn last row is cut before the next append."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.atomic import AppendingCsv, cut_torn_tail
from flexcomm.costmodel.errors import InputError

COLUMNS = ["attempt", "world_size", "step", "loss", "step_s", "since_start_s", "event"]


def test_a_torn_row_is_cut_before_the_resumed_run_appends(tmp_path: Path) -> None:
    path = tmp_path / "steps.csv"
    log = AppendingCsv(path, COLUMNS)
    log.write({"attempt": 0, "world_size": 2, "step": 1, "loss": 2.3, "step_s": 0.01, "since_start_s": 1.0})
    log.close()
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("0,2,2,2.29")  # a kill mid-row
    log = AppendingCsv(path, COLUMNS)
    log.write({"attempt": 1, "world_size": 2, "step": 2, "loss": 2.2, "step_s": 0.01, "since_start_s": 2.0})
    log.close()
    assert log.cut_bytes == len("0,2,2,2.29")
    table = pd.read_csv(path)  # 7 cells a row again (it was 8 under a 7-column header)
    assert list(table["step"]) == [1, 2] and list(table["attempt"]) == [0, 1]


def test_another_files_header_is_refused_not_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "steps.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="a CSV with columns attempt,world_size"):
        AppendingCsv(path, COLUMNS)
    assert path.read_text() == "a,b\n1,2\n"


@settings(max_examples=80, deadline=None)
@given(lines=st.lists(st.text(alphabet="ab,1\n", max_size=30), max_size=6),
       tail=st.text(alphabet="ab,1", max_size=70000))
def test_cutting_keeps_every_whole_line_and_nothing_else(tmp_path_factory: pytest.TempPathFactory, lines: list[str],
                                                       tail: str) -> None:
    path = tmp_path_factory.mktemp("c") / "log.csv"
    whole = "".join(line.replace("\n", "") + "\n" for line in lines)
    path.write_text(whole + tail)
    assert cut_torn_tail(path) == len(tail.encode())
    assert path.read_text() == whole
