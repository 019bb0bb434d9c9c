"""Table IV of Tyagi & Swany 2023 against the cost model: what fits and what the paper's forms miss."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from flexcomm.experiments.cli import main
from flexcomm.experiments.tyagi_table4 import TABLE_IV, reproduce_table_iv, summary


def test_dense_tree_allreduce_steps_match_the_papers_measurements() -> None:
    """Compute + the tree allreduce form, 4 ms and 20 Gbit/s, lands within 5% of every dense step measured."""
    table = reproduce_table_iv()
    dense = table[table["scheme"] == "dense"]
    assert len(dense) == 4
    assert (dense["paper forms: rel_error"].abs() < 0.05).all()


def test_sparse_steps_expose_the_per_step_latency_of_the_papers_forms() -> None:
    """The paper's AR-Top-k ring form charges 2(N-1) + lg N = 17 latencies of 4 ms: more than the whole
    measured step leaves for communication. Every sparse entry is over-predicted, and the tree variant
    (3 lg N = 9 latencies) is always closer: the measured steps hold 0-9 latency terms."""
    table = reproduce_table_iv()
    sparse = table[table["scheme"] != "dense"]
    assert len(sparse) == sum(1 for row in TABLE_IV if row[1] != "dense")
    assert (sparse["paper forms: rel_error"] > 0.3).all()
    assert (sparse["STAR on tree: rel_error"].abs() < sparse["paper forms: rel_error"].abs()).all()
    assert sparse["paper forms: latency_ms"].tolist() == pytest.approx([17 * 4.0] * len(sparse))
    assert (sparse["implied_latency_terms"] < 10).all()
    stats = summary(table).set_index(["rows", "variant"])
    assert stats.loc[("dense", "paper forms"), "worst_abs_error"] < 0.05


def test_cli_writes_table_and_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "table4", "--out", str(tmp_path), "--no-progress"]) == 0
    assert "median |error|" in capsys.readouterr().out
    assert (tmp_path / "table4_detail.md").read_text().count("\n| resnet18 |") == 4
    assert (tmp_path / "table4.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(pd.read_csv(tmp_path / "table4.csv")) == len(TABLE_IV)
    assert "What the literature reports" in (tmp_path / "table4.md").read_text()
