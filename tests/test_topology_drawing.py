"""Topology drawings (``flexcomm clusters NAME --draw``): every embedded cluster draws through the figure checks,
at any size in a bounded number of artists; legends key widths to bandwidths; names sit beside markers, never on
them; tori, NVLink domains and GPUs inside nodes are drawn. And the two figure checks these drawings needed
(a legend line at another width than its line; a text over a marker) catch what they are meant to."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from figure_check import capture_figures, legend_line_problems, text_over_marker_problems  # noqa: E402
from matplotlib.collections import LineCollection, PathCollection  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

import flexcomm.costmodel.topologies.draw as draw  # noqa: E402
from flexcomm.costmodel.cluster import Cluster, cluster_names, load_cluster  # noqa: E402
from flexcomm.costmodel.topologies.draw import draw_fabric  # noqa: E402
from flexcomm.costmodel.topologies.draw_model import AGGREGATE_ABOVE  # noqa: E402

#: What an aggregated drawing may hold at most: markers plus line segments (16,928 vertices drew 49,000).
MAX_DRAWN = 400


def _drawn(cluster_name: str | Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, list[str]]:
    """Draw a cluster; return facts about the figure as saved, and the figure checks' verdict."""
    cluster = cluster_name if isinstance(cluster_name, Cluster) else load_cluster(cluster_name)
    cluster_name = cluster.name
    facts: dict = {}
    original = draw.save_figure_atomic

    def record(fig, path, dpi=None):  # noqa: ANN001, ANN202
        fig.canvas.draw()
        ax = fig.axes[0]
        renderer = fig.canvas.get_renderer()
        lines = [c for c in ax.collections if isinstance(c, LineCollection)]
        facts.update(
            ax=ax, lines=lines, segments=sum(len(c.get_segments()) for c in lines),
            markers=sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection)),
            texts=[(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts if t.get_text().strip()],
            axes_box=ax.get_window_extent(renderer), legend=ax.get_legend(), caption=ax.get_title(loc="left"),
            patches=list(ax.patches))
        return original(fig, path, dpi)

    monkeypatch.setattr(draw, "save_figure_atomic", record)
    with capture_figures() as found:
        draw_fabric(cluster, tmp_path / f"topo_{cluster_name}.png", dpi=40)
    return facts, found[f"topo_{cluster_name}.png"]


def _legend(facts: dict) -> list[tuple]:
    legend = facts["legend"]
    return list(zip(legend.legend_handles, [t.get_text() for t in legend.get_texts()], strict=True))


@pytest.mark.parametrize("name", cluster_names())
def test_every_embedded_cluster_draws_readably_in_bounded_ink(name: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    facts, problems = _drawn(name, tmp_path, monkeypatch)
    assert problems == []
    box = facts["axes_box"]
    for text, extent in facts["texts"]:  # inside the axes: nothing clipped at the figure's edge
        assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1 and box.y0 - 1 <= extent.y0, text
    vertices = len(load_cluster(name).fabric.graph)
    if vertices > AGGREGATE_ABOVE:
        assert facts["markers"] + facts["segments"] <= MAX_DRAWN
        assert "aggregated" in facts["caption"]


def test_the_16k_superpod_is_one_glyph_per_rail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts, _ = _drawn("superpod-h100-16k", tmp_path, monkeypatch)
    names = [text for text, _ in facts["texts"]]
    assert facts["markers"] == 8 + 8 + 1  # each rail's NICs, each rail's leaves, the spines
    assert all(f"rail {r}\n2,048 NICs" in names and f"rail {r}\n64 leaves" in names for r in range(8))
    assert facts["segments"] == 16  # one line per rail down, one per rail's leaves up to the spines


def test_a_large_torus_is_a_ring_of_planes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = Cluster.from_dict({
        "name": "torus-8x8x8", "nodes": 512, "devices_per_node": 1,
        "device": {"name": "A", "peak_flops": "100TFLOP/s", "memory": "80GiB"},
        "intra_link": {"latency": "1us", "bandwidth": "300GB/s"},
        "inter_link": {"latency": "2us", "bandwidth": "100Gbit/s"}, "topology": {"kind": "torus", "dims": [8, 8, 8]}})
    facts, problems = _drawn(big, tmp_path, monkeypatch)
    assert problems == [] and facts["markers"] == 8  # one glyph per plane of the first dimension
    assert facts["segments"] == 8  # neighbouring planes, wrap-around included: a ring
    assert "1,024 cables inside a group not drawn" in facts["caption"].replace("\n", " ").replace("  ", " ")


def test_each_cable_is_one_segment_and_the_key_has_a_width_per_bandwidth(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    facts, _ = _drawn("graph-dumbbell", tmp_path, monkeypatch)
    assert facts["segments"] == 12  # 12 cables, tor0-core0 among them once
    lines = [(h.get_linewidth(), label) for h, label in _legend(facts)
             if isinstance(h, Line2D) and h.get_linestyle() == "-"]
    assert [label.split(": ")[1].split(" ")[0] for _, label in lines] == ["40Gbit/s", "100Gbit/s", "200Gbit/s"]
    widths = [w for w, _ in lines]
    assert widths == sorted(widths) and len(set(widths)) == 3
    drawn = {c.get_label(): float(c.get_linewidths()[0]) for c in facts["lines"]}
    assert all(drawn[label] == pytest.approx(width) for width, label in lines)


def test_rail_pod_names_sit_beside_markers_and_the_caption_explains_the_spine_capacity(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts, _ = _drawn("dgx-h100-rail-pod", tmp_path, monkeypatch)
    names = {text for text, _ in facts["texts"]}
    assert {"spine0", "rail0.leaf0", "rail 7"} <= names
    # each leaf: 4 x 400G down, 8 x 1.6T up, because the uplinks are sized for 32 hosts (hosts_per_leaf)
    caption = facts["caption"].replace("\n", " ").replace("  ", " ")
    assert "down 4 x 400Gbit/s = 1.6Tbit/s, up 8 x 1.6Tbit/s = 12.8Tbit/s" in caption
    assert "up:down 8:1" in caption and "hosts_per_leaf = 32 hosts, 4 attached" in caption


def test_torus_draws_planes_without_crossing_cables_and_labels_inside_markers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts, _ = _drawn("torus-4x4x4", tmp_path, monkeypatch)
    segments = np.concatenate([np.asarray(c.get_segments()) for c in facts["lines"]])
    lengths = np.linalg.norm(segments[:, 1] - segments[:, 0], axis=1)
    straight = np.isclose(segments[:, 1, 0], segments[:, 0, 0]) | np.isclose(segments[:, 1, 1], segments[:, 0, 1])
    assert straight.all() and lengths.max() <= 1.0 + 1e-9  # grid steps, stubs and short bundles: no long arcs
    digits = [text for text, _ in facts["texts"] if text.isdigit()]
    assert len(digits) >= 64
    texts = facts["ax"].texts
    assert all(mcolors.to_hex(t.get_color()) == "#ffffff" for t in texts if t.get_text() == "63")
    assert any("wrap-around" in label and "48 cables" in label for _, label in _legend(facts))


def test_nvlink_domains_are_shaded_bands_in_their_legend_colours(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    facts, _ = _drawn("nvl72-pair", tmp_path, monkeypatch)
    bands = {mcolors.to_hex(p.get_facecolor()) for p in facts["patches"] if isinstance(p, Rectangle)}
    keyed = {mcolors.to_hex(h.get_facecolor()): label for h, label in _legend(facts) if isinstance(h, Patch)}
    assert len(keyed) == 2 and set(keyed) <= bands
    nics = [c for c in facts["ax"].collections if isinstance(c, PathCollection) and "NICs" in c.get_label()]
    (marker,) = [h for h, label in _legend(facts) if "NICs" in label]
    assert {mcolors.to_hex(c) for c in nics[0].get_facecolors()} == {mcolors.to_hex(marker.get_color())}


@pytest.mark.parametrize(("name", "gpus", "intra"),
                         [("4x8-a100-ib", 32, "300 GB/s"), ("16x8-h100-2to1", 128, "450 GB/s")])
def test_nodes_are_boxes_of_their_gpus_on_the_intra_node_link(name: str, gpus: int, intra: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    facts, _ = _drawn(name, tmp_path, monkeypatch)
    (scatter,) = [c for c in facts["ax"].collections if isinstance(c, PathCollection) and "GPUs" in c.get_label()]
    assert len(scatter.get_offsets()) == gpus
    assert any(label.startswith("inside each node") and intra in label for _, label in _legend(facts))


# --- the figure checks themselves ---------------------------------------------------------------


def _figure() -> tuple:
    fig, ax = plt.subplots(figsize=(4, 3), dpi=50)
    ax.set_axis_off()
    return fig, ax


def test_a_legend_line_wider_than_its_line_is_flagged_and_a_matching_one_is_not() -> None:
    fig, ax = _figure()
    ax.add_collection(LineCollection([[(0, 0), (1, 1)]], linewidths=0.5, colors="#1f77b4", label="rail links"))
    ax.legend(handles=[Line2D([], [], color="#1f77b4", lw=2.5, label="rail links")])
    (problem,) = legend_line_problems(fig, ax, "t")
    assert "rail links" in problem and "2.5 pt" in problem and "0.5 pt" in problem
    ax.legend(handles=[Line2D([], [], color="#1f77b4", lw=0.5, label="rail links")])
    assert legend_line_problems(fig, ax, "t") == []
    ax.legend(handles=[Line2D([], [], color="#1f77b4", lw=0.5, ls=":", label="rail links")])
    assert len(legend_line_problems(fig, ax, "t")) == 1  # right width, wrong dashes
    plt.close(fig)


def test_a_name_over_a_marker_is_flagged_and_one_beside_or_inside_it_is_not() -> None:
    fig, ax = _figure()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.scatter([0.5], [0.5], s=15**2, marker="o")
    over = ax.text(0.5, 0.5, "rail0.leaf0", ha="center", va="center", fontsize=7)
    fig.canvas.draw()
    assert len(text_over_marker_problems(fig, ax, "t")) == 1
    over.remove()
    ax.annotate("rail0.leaf0", (0.5, 0.5), xytext=(0, 10), textcoords="offset points", ha="center", va="bottom",
                fontsize=7)
    ax.text(0.5, 0.5, "3", ha="center", va="center", fontsize=5, color="white")  # fits inside its marker
    fig.canvas.draw()
    assert text_over_marker_problems(fig, ax, "t") == []
    plt.close(fig)


def test_a_node_of_several_nics_drawn_as_one_cable_says_why_and_keys_wrap(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """4x8-a100-ib's drawing showed one 200 Gbit/s cable a node where the file names 8 NICs, unsaid (the flow
    simulator's flat fabric is one link a node: the drawing is right about the model, and now says it); its
    key's longest line reached the image's edge."""
    from flexcomm.costmodel.topologies.draw import KEY_CHARS

    facts, problems = _drawn("4x8-a100-ib", tmp_path, monkeypatch)
    assert not problems
    assert "the cluster names 8 NICs a node" in " ".join(facts["caption"].split())
    assert all(len(line) <= KEY_CHARS for _, text in _legend(facts) for line in text.split("\n"))
