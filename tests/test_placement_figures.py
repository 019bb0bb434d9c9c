"""The placement figures (figure defect 33): a search that never left its start is named with the baseline it
lies on instead of hiding it; the timeline draws every device, a key, micro-batches and transfers."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexcomm.placement.baselines import PlacerResult
from flexcomm.placement.compare import Comparison
from flexcomm.placement.devices import DeviceSet
from flexcomm.placement.simulator import PlacementProblem
from flexcomm.placement.toy import chain_graph


def _capture(monkeypatch: pytest.MonkeyPatch) -> list:
    """Figures the placement plots save (still saved, and so checked by tests/figure_check.py)."""
    from flexcomm.placement import plots

    drawn: list = []
    original = plots.save_figure_atomic
    monkeypatch.setattr(plots, "save_figure_atomic", lambda fig, path: drawn.append(fig) or original(fig, path))
    return drawn


def test_a_search_stuck_on_its_start_is_named_in_that_baselines_entry(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from flexcomm.placement.plots import search_curves

    results = [PlacerResult("single", [0], 5.7e-3, True, 0.0, 1),
               PlacerResult("partition", [0], 2.8e-3, True, 0.0, 1),
               PlacerResult("sync-es", [0], 2.8e-3, True, 2.0, 150),
               PlacerResult("async-es", [0], 2.7e-3, True, 2.0, 160)]
    curves = {"sync-es": [(0.0, 1, 2.8e-3), (1.0, 80, 2.8e-3)],
              "async-es": [(0.0, 1, 2.8e-3), (0.7, 60, 2.75e-3), (1.5, 120, 2.7e-3)]}
    drawn = _capture(monkeypatch)
    search_curves(Comparison(results, curves, "partition"), tmp_path / "search_curves.png", "made up")
    (ax,) = [a for a in drawn[0].axes if a.get_legend() is not None]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "sync-es" not in labels and "async-es" in labels
    assert "partition (2.8 ms)\n= sync-es: never beat it\n  (150 evaluations)" in labels
    search = next(line for line in ax.lines if line.get_label() == "async-es")
    baseline = next(line for line in ax.lines if line.get_label().startswith("partition"))
    assert search.get_zorder() > baseline.get_zorder()  # the search runs along the baseline, drawn over it


def test_the_timeline_draws_every_device_micro_batch_and_transfer(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from flexcomm.placement.plots import timeline

    devices = DeviceSet.uniform(4, latency_s=1e-5, bandwidth_Bps=1e9)
    problem = PlacementProblem(chain_graph(4, flops=1e12, act_bytes=5e7), devices, micro_batches=2)
    drawn = _capture(monkeypatch)
    timeline(problem, [0, 0, 1, 1], tmp_path / "timeline.png", "made up on 4 devices")
    ax = drawn[0].axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert len(ticks) == 4 and sum(t.endswith("(no ops)") for t in ticks) == 2
    assert "ops on 2 of 4 devices" in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "forward, micro-batch 0", "forward, micro-batch 1", "backward, micro-batch 0", "backward, micro-batch 1",
        "tensor in flight to another device"]


def test_a_traced_step_records_each_transfer_with_its_bytes_and_time() -> None:
    graph = chain_graph(2, flops=1e12, act_bytes=5e7)
    problem = PlacementProblem(graph, DeviceSet.uniform(2, latency_s=1e-4, bandwidth_Bps=1e9))
    sim = problem.simulate([0, 1], trace=True)
    assert sorted((src, dst) for src, dst, *_ in sim.transfers) == [(0, 1), (1, 0)]  # activation, gradient
    assert sum(t[4] for t in sim.transfers) == pytest.approx(sim.transfer_bytes)
    assert all(arrive - start == pytest.approx(1e-4 + 5e7 / 1e9) for _, _, start, arrive, _ in sim.transfers)
    assert problem.simulate([0, 1]).transfers == []  # untraced: nothing kept
