"""``pareto.png`` (figure defect 18): every candidate readable where the schemes crowd, each point marked by the
scheme it uses. Drawn from a made-up study: the figure, not the study, is under test here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flexcomm.compression.moo import ParetoFront
from flexcomm.experiments import pareto
from flexcomm.experiments.pareto import ParetoResult, plot_pareto


def _study() -> ParetoResult:
    """Allgather dominates at small c, where both schemes' candidates crowd within a fraction of a ms, and
    AR-compatible Top-k is the front at large c (the shape of the documented 11.69M-parameter example)."""
    c = np.logspace(-3, -1, 20)
    gain = 0.03 + 3.4 * c
    ag = 46.4e-3 + 0.13 * c  # s
    ar = 47.0e-3 + 0.045 * c
    candidates = pd.concat([
        pd.DataFrame({"c": c, "step_s": ag, "gain": gain, "scheme": "topk-ag", "dominated": c > 0.007}),
        pd.DataFrame({"c": c, "step_s": ar, "gain": gain, "scheme": "topk-ar", "dominated": c <= 0.007}),
    ], ignore_index=True)
    best = candidates[~candidates["dominated"]].sort_values("c")
    front = ParetoFront(frame=best[["c", "step_s", "gain", "scheme"]].reset_index(drop=True),
                        chosen=9, rule="asf", weights=(0.6, 0.4))
    picks = pd.DataFrame([{"rule": rule, "c": float(c[9]), "scheme": "topk-ar", "step_s": float(ar[9]),
                           "comm_s": float(ar[9]) - 0.03, "gain": float(gain[9])}
                          for rule in ("asf", "knee", "utopia")])
    info = {"workload": "made-up", "cluster": "8x1-v100-40g", "workers": 8, "rule": "asf"}
    return ParetoResult(candidates, front, picks, pd.DataFrame({"c": c[:3], "gain": gain[:3]}), info)


def test_crowded_corner_gets_a_zoom_and_every_point_its_scheme_marker(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = []
    original = pareto.save_figure_atomic
    monkeypatch.setattr(pareto, "save_figure_atomic", lambda fig, path: drawn.append(fig) or original(fig, path))
    plot_pareto(_study(), tmp_path / "pareto.png")  # checked as it is saved (tests/figure_check.py)
    (fig,) = drawn
    main, zoom = fig.axes[:2]
    assert zoom.get_title().startswith("zoom on the rules' corner")
    assert zoom.get_xlim()[1] - zoom.get_xlim()[0] < 0.5 * (main.get_xlim()[1] - main.get_xlim()[0])
    labels = [t.get_text() for t in main.get_legend().get_texts()]
    assert {"dominated: topk-ag", "dominated: topk-ar", "NSGA-II front: topk-ag",
            "NSGA-II front: topk-ar"} <= set(labels)
    front_ar = next(col for col in main.collections if col.get_label() == "NSGA-II front: topk-ar")
    dominated_ar = next(col for col in main.collections if col.get_label() == "dominated: topk-ar")
    assert np.allclose(front_ar.get_paths()[0].vertices, dominated_ar.get_paths()[0].vertices)  # both triangles
    assert dominated_ar.get_zorder() > front_ar.get_zorder()  # hollow, over the filled front


def test_a_front_spread_over_the_axis_needs_no_zoom(tmp_path: Path) -> None:
    study = _study()
    assert pareto._zoom_box(study) is not None
    study.picks["c"] = 0.1  # the rules pick the far end: the corner is the whole figure
    assert pareto._zoom_box(study) is None
    plot_pareto(study, tmp_path / "pareto.png")
