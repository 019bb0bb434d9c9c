"""The figure checks added for figure defects 16 and 28: a legend key's marker must be one the drawing uses,
and an axis' tick labels must not mix "1e+03" with plain decimals."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedFormatter, FixedLocator  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from figure_check import figure_problems, legend_marker_problems, tick_notation_problems  # noqa: E402


def test_a_lone_scientific_label_among_plain_ones_is_found() -> None:
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [200, 500, 1000])
    ax.yaxis.set_major_locator(FixedLocator([200, 500, 1000]))
    ax.yaxis.set_major_formatter(FixedFormatter(["200", "500", "1e+03"]))
    fig.canvas.draw()
    assert tick_notation_problems(ax, "a") == ["'a': the y axis mixes '1e+03' with plain numbers ('200')"]
    ax.yaxis.set_major_formatter(FixedFormatter(["200", "500", "1000"]))
    fig.canvas.draw()
    assert tick_notation_problems(ax, "a") == []
    plt.close(fig)


def test_a_legend_key_with_a_marker_the_drawing_does_not_use_is_found() -> None:
    fig, ax = plt.subplots()
    ax.scatter([1, 2], [1, 2], marker="^", label="AR-compatible Top-k")
    ax.scatter([1, 2], [2, 1], marker="o", label="Allgather")
    ax.legend()
    fig.canvas.draw()
    assert legend_marker_problems(fig, ax, "a") == []
    ax.legend(handles=[Line2D([], [], marker="s", ls="none", label="dense")])  # squares: none drawn
    assert legend_marker_problems(fig, ax, "a") == [
        "'a': legend key 'dense' shows a marker drawn nowhere in the figure"]
    legend = ax.legend()
    legend.legend_handles[0].set_paths(ax.collections[1].get_paths())  # the triangles' key drawn as a circle
    assert legend_marker_problems(fig, ax, "a") == [
        "'a': legend key 'AR-compatible Top-k' shows another marker than the series it names"]
    assert any("shows another marker" in p for p in figure_problems(fig))
    plt.close(fig)


def test_contour_labels_on_top_of_each_other_are_found_and_the_whatif_maps_space_theirs() -> None:
    """Any two texts of one axes that overlap (contour labels are texts, not annotations: "1.25x" was printed
    over "1.5x" where two speed-up contours ran close); the what-if maps now place one label per level clear of
    the others."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from flexcomm.experiments.whatif_plots import spaced_contour_labels

    x, y = np.meshgrid(np.linspace(1, 10, 40), np.linspace(1, 10, 40))
    speed = x + 0.01 * y  # contours 0.1 apart: crowded
    fig, ax = plt.subplots()
    ax.plot([1, 10], [1, 10], alpha=0)
    contour = ax.contour(x, y, speed, levels=[5.0, 5.1, 5.2], colors="k")
    ax.clabel(contour, fmt=lambda v: f"{v:g}x", fontsize=7, manual=[(5.0, 5.0), (5.1, 5.0), (5.2, 5.0)])
    assert any("two texts overlap" in p for p in figure_problems(fig))
    plt.close(fig)
    fig, ax = plt.subplots()
    ax.plot([1, 10], [1, 10], alpha=0)
    contour = ax.contour(x, y, speed, levels=[2.0, 5.0, 5.1, 5.2, 8.0], colors="k")
    spaced_contour_labels(ax, contour)
    assert not [p for p in figure_problems(fig) if "overlap" in p]
    assert len(ax.texts) >= 2 and all(t.get_text().endswith("x") for t in ax.texts)  # one per level at most
    plt.close(fig)


def test_a_legend_over_a_map_is_found() -> None:
    import numpy as np

    fig, ax = plt.subplots()
    ax.pcolormesh(np.arange(5), np.arange(5), np.arange(16).reshape(4, 4), shading="flat")
    ax.plot([0, 4], [0, 4], label="a line")
    ax.legend(loc="lower right")
    assert any("legend covers part of a map" in p for p in figure_problems(fig))
    ax.get_legend().remove()
    fig.legend(loc="outside lower center")
    assert not any("legend covers" in p for p in figure_problems(fig))
    plt.close(fig)


def test_two_legend_keys_that_look_the_same_are_found() -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], "-o", color="C1", label="topk-ar")
    ax.plot([0, 1], [1, 0], "-o", color="C1", label="topk-ar = flexible")
    fig.legend()
    assert any("have the same key" in p for p in figure_problems(fig))
    ax.lines[1].set_markerfacecolor("C2")
    ax.lines[1].set_markeredgecolor("C2")
    fig.legends[0].remove()
    fig.legend()
    assert not any("have the same key" in p for p in figure_problems(fig))
    plt.close(fig)


def test_powers_of_ten_in_mathtext_beside_plain_decimals_are_found() -> None:
    """predicted_vs_measured.png read "5x10^-5" (mathtext) beside "0.0001": the check knew only "5e-05"."""
    fig, ax = plt.subplots()
    ax.plot([1e-6, 1e-3], [1e-6, 1e-3])
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(FixedLocator([5e-5, 1e-4, 2e-4]))
    ax.yaxis.set_major_formatter(FixedFormatter(["$\\mathdefault{5\\times10^{-5}}$", "0.0001", "0.0002"]))
    assert tick_notation_problems(ax, "panel")
    plt.close(fig)


def test_readable_log_axes_keep_one_notation_for_any_range() -> None:
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from flexcomm.costmodel.plotting import readable_log_axis

    rng = np.random.default_rng(3)
    for _ in range(20):
        low = 10 ** rng.uniform(-8, 5)
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot([low, low * 10 ** rng.uniform(0.3, 4)], [1, 2])
        ax.set_xscale("log")
        readable_log_axis(ax, "x")
        fig.canvas.draw()
        assert not tick_notation_problems(ax, "panel"), [t.get_text() for t in ax.get_xticklabels()]
        plt.close(fig)
