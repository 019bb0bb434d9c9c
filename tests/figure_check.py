"""What makes a figure readable at a glance, checked on the matplotlib Figure just before it is saved.

* every axes that shows data has tick labels on both axes (a log axis spanning less than a decade has none
  by default; a shared axis hides them on inner panels);
* every series is visible: hiding it changes the rendered pixels (a line drawn exactly under another one
  does not), and no two labelled series in one panel share colour, line style and marker;
* every legend entry names a series that is drawn in the figure;
* annotations do not overlap one another;
* a legend line is drawn at the width and style of the line it names (:func:`legend_line_problems`);
* no text sits on a marker it does not fit inside (:func:`text_over_marker_problems`).

:func:`capture_figures` wraps ``Figure.savefig`` so a test can run any command and then ask what was wrong
with each file it saved.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.collections import Collection, LineCollection, PathCollection, PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

#: Pixels (at the check's dpi) two texts of one axes keep between them.
TEXT_GAP_PX = 1.5
#: Verdicts by rendered picture: tests that draw the same figure (the same study, the same seed) pay once.
_VERDICTS: dict[str, list[str]] = {}
CHECK_DPI = 50  # small renders (a 1.5 pt line is still a pixel wide), cheap enough to repeat


def _render(fig: Figure) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def _series(ax: Axes) -> list:
    """The data artists of one axes that a reader is meant to tell apart."""
    found = []
    for artist in [*ax.lines, *ax.collections, *ax.images, *ax.patches]:
        if not artist.get_visible():
            continue
        if isinstance(artist, Line2D) and len(np.atleast_1d(artist.get_xdata())) == 0:
            continue
        if isinstance(artist, Rectangle) and artist in ax.patches and not artist.get_label().strip():
            continue
        if _is_reference_line(artist, ax):
            continue  # an unlabelled axhline/axvline marks a level (1x, a target); it is not a series
        found.append(artist)
    return found


def _is_reference_line(artist, ax: Axes) -> bool:
    if not isinstance(artist, Line2D) or not artist.get_label().startswith("_"):
        return False
    transform = artist.get_transform()
    return transform == ax.get_yaxis_transform() or transform == ax.get_xaxis_transform()


def _has_data(ax: Axes) -> bool:
    return bool(_series(ax)) or any(isinstance(c, Collection) for c in ax.collections)


def _style(artist) -> tuple | None:
    if isinstance(artist, Line2D):
        return ("line", mcolors.to_hex(artist.get_color()), str(artist.get_linestyle()), str(artist.get_marker()))
    if isinstance(artist, PathCollection):
        def key(colours: np.ndarray) -> str:
            return "none" if len(colours) == 0 else mcolors.to_hex(colours[0]) if len(colours) == 1 else "mapped"

        paths = artist.get_paths()
        shape = hash(paths[0].vertices.round(3).tobytes()) if paths else None
        return ("points", key(artist.get_facecolors()), key(artist.get_edgecolors()), shape)
    return None


def _is_colorbar(ax: Axes) -> bool:
    return getattr(ax, "_colorbar", None) is not None or ax.get_label() == "<colorbar>"


def _tick_labels(ax: Axes, which: str) -> list[str]:
    axis = ax.xaxis if which == "x" else ax.yaxis
    labels = [t.get_text() for t in axis.get_ticklabels() if t.get_visible()]
    minor = [t.get_text() for t in axis.get_ticklabels(minor=True) if t.get_visible()]
    lo, hi = (ax.get_xlim() if which == "x" else ax.get_ylim())
    lo, hi = min(lo, hi), max(lo, hi)
    ticks = axis.get_majorticklocs()
    shown = [label for label, loc in zip(labels, ticks, strict=False) if label.strip() and lo <= loc <= hi]
    return shown + [m for m in minor if m.strip()]


#: A series must show at least this share of the pixels it would cover alone (antialiased edges of a line
#: drawn exactly under another one still differ in a few pixels: that is not "visible").
MIN_VISIBLE_SHARE = 0.15
#: Colour distance (0-255 per channel, summed) below which a pixel counts as unchanged: above the blend of an
#: antialiased edge, below the distance between two colours a reader tells apart.
PIXEL_TOLERANCE = 150
AREA_TOLERANCE = 20


def _visible_share(fig: Figure, base: np.ndarray, empty: np.ndarray, artist, series: list) -> float:
    """Share of the artist's own footprint whose colour changes when it is hidden. ``base``: the figure as
    drawn while checking this artist's axes (the other axes hidden, which keeps renders cheap); ``empty``: the
    same with every series of that axes hidden."""
    others = [a for a in series if a is not artist]
    for other in others:
        other.set_visible(False)
    try:
        alone = _render(fig)
    finally:
        for other in others:
            other.set_visible(True)
    # an area (a band, a bar, an image) has few edge pixels: a pale one counts from a small colour change
    tolerance = AREA_TOLERANCE if isinstance(artist, (PolyCollection, Patch, AxesImage)) else PIXEL_TOLERANCE
    footprint = np.abs(alone.astype(int) - empty.astype(int)).sum(axis=2) > tolerance
    if not footprint.any():
        return 0.0
    artist.set_visible(False)
    try:
        hidden = _render(fig)
    finally:
        artist.set_visible(True)
    changed = np.abs(base.astype(int) - hidden.astype(int)).sum(axis=2) > tolerance
    return float((changed & footprint).sum() / footprint.sum())


def _overlapping_ticks(fig: Figure, ax: Axes, which: str) -> bool:
    axis = ax.xaxis if which == "x" else ax.yaxis
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in [*axis.get_ticklabels(), *axis.get_ticklabels(minor=True)]
             if t.get_visible() and t.get_text().strip()]
    boxes.sort(key=lambda b: b.x0 if which == "x" else b.y0)
    return any(a.overlaps(b) for a, b in zip(boxes, boxes[1:], strict=False))


@contextmanager
def _hidden(artists: list) -> Iterator[None]:
    """Hide the visible ones of ``artists`` for the block, and show them again however it ends."""
    shown = [a for a in artists if a is not None and a.get_visible()]
    for artist in shown:
        artist.set_visible(False)
    try:
        yield
    finally:
        for artist in shown:
            artist.set_visible(True)


def _series_problems(fig: Figure, ax: Axes, name: str) -> list[str]:
    """Series of ``ax`` drawn in one style, or hidden under others (rendered with only this axes' data)."""
    problems = []
    series = _series(ax)
    others = [other for other in fig.axes if other is not ax]
    # only this axes, and only its data: ticks, titles and legends cost most of a render and cover no series
    decor = [ax.xaxis, ax.yaxis, ax.title, ax._left_title, ax._right_title, ax.get_legend(), *fig.legends,
             *fig.texts, getattr(fig, "_suptitle", None)]
    with _hidden(others + decor):
        base = _render(fig)
        with _hidden(series):
            empty = _render(fig)
        styles: dict[tuple, str] = {}
        for artist in series:
            label = artist.get_label()
            labelled = not label.startswith("_")
            style = _style(artist)
            if labelled and style is not None:
                if style in styles and styles[style] != label:
                    problems.append(f"{name!r}: {label!r} and {styles[style]!r} are drawn in the same style")
                styles.setdefault(style, label)
            if isinstance(artist, (Patch, AxesImage)) and not labelled:
                continue  # bars and images without labels: a whole, not series
            shown = _visible_share(fig, base, empty, artist, series)
            if shown < MIN_VISIBLE_SHARE:
                what = label if labelled else f"an unlabelled {type(artist).__name__}"
                problems.append(f"{name!r}: {what} is {'not' if shown == 0 else 'hardly'} visible "
                                f"({shown:.0%} of it shows; covered by another series or outside the axes)")
    return problems


def title_overlap_problems(fig: Figure) -> list[str]:
    """A panel's title that runs into another panel or its title is cut off where they meet (a long title over
    two side-by-side panels read "...then the model's" and stopped)."""
    fig.canvas.draw()  # titles are placed at draw time: measure them where this render puts them
    renderer = fig.canvas.get_renderer()
    shown = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    problems = []
    for ax in shown:
        title = ax.title.get_window_extent(renderer)
        own = ax.get_position().bounds
        for other in fig.axes:
            if other is ax or not other.get_visible() or not other.axison:
                continue
            if np.allclose(other.get_position().bounds, own):  # a twin axes (twinx): the same panel
                continue
            box = other.get_window_extent(renderer)
            other_title = other.title.get_window_extent(renderer) if other.get_title() else None
            if title.overlaps(box) or (other_title is not None and title.overlaps(other_title)):
                problems.append(f"{ax.get_title()!r}: the title runs into another panel")
                break
    return problems


def figure_problems(fig: Figure) -> list[str]:
    """Everything :mod:`figure_check` finds wrong with ``fig`` (empty when it reads at a glance)."""
    problems: list[str] = []
    dpi = fig.get_dpi()
    engine = fig.get_layout_engine()
    fig.set_dpi(CHECK_DPI)
    try:
        key = hashlib.sha1(_render(fig).tobytes()).hexdigest()  # lay out once; the same picture, the same verdict
        if key in _VERDICTS:
            return list(_VERDICTS[key])
        fig.set_layout_engine("none")  # positions are fixed now; re-running the layout per render is the cost
        for index, ax in enumerate(fig.axes):
            if ax.get_visible():  # diagrams (axes off) too: their legends and labels must read as well
                label = ax.get_title() or ax.get_ylabel() or f"axes {index}"
                problems += legend_line_problems(fig, ax, label) + text_over_marker_problems(fig, ax, label)
            if not ax.get_visible() or not ax.axison:
                continue
            name = ax.get_title() or ax.get_ylabel() or f"axes {index}"
            if _is_colorbar(ax):
                long_axis = "y" if ax.get_position().height >= ax.get_position().width else "x"
                if not _tick_labels(ax, long_axis):
                    problems.append(f"{name!r}: colour bar without tick labels")
                continue
            if not _has_data(ax):
                continue
            for which in ("x", "y"):
                if not _tick_labels(ax, which):
                    problems.append(f"{name!r}: no tick labels on the {which} axis")
                elif _overlapping_ticks(fig, ax, which):
                    problems.append(f"{name!r}: tick labels overlap on the {which} axis")
            problems += _series_problems(fig, ax, name)
            problems += tick_notation_problems(ax, name) + legend_marker_problems(fig, ax, name)
            problems += unit_scale_problems(ax, name)
            legend = ax.get_legend()
            if legend is not None and _legend_over_map(fig, ax, legend):
                problems.append(f"{name!r}: the legend covers part of a map (put it beside or below the panels)")
            if legend is not None:
                drawn = {a.get_label() for other in fig.axes for a in _series(other)}
                for text in legend.get_texts():
                    label = text.get_text()
                    if label and label not in drawn and not _proxy_ok(legend, label, fig):
                        problems.append(f"{name!r}: legend entry {label!r} names nothing drawn")
            # every text of the axes, not only annotations: contour labels ("1.25x" over "1.5x") are texts too
            texts = [a for a in ax.texts if a.get_visible() and a.get_text().strip()]
            # a point's gap at least: names that touch read as one ("agg1.3agg2.0")
            boxes = [Text.get_window_extent(a).expanded(1.0, 1.0).padded(TEXT_GAP_PX / 2) for a in texts]
            for i, first in enumerate(boxes):
                for j, second in enumerate(boxes[i + 1:], start=i + 1):
                    if first.overlaps(second):
                        problems.append(f"{name!r}: two texts overlap ({texts[i].get_text()!r} and "
                                        f"{texts[j].get_text()!r})")
        problems += title_overlap_problems(fig) + same_key_problems(fig)
        _VERDICTS[key] = list(problems)
    finally:
        fig.set_layout_engine(engine)
        fig.set_dpi(dpi)
    return problems


def same_key_problems(fig: Figure) -> list[str]:
    """Two entries of one legend whose keys look the same (colour, line, marker and its colours) but name
    different things: a merged "topk-ar = flexible" drawn exactly as "topk-ar" read as the same series twice."""
    problems = []
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]:
        handles = getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", [])
        seen: dict[tuple, str] = {}
        for handle, text in zip(handles, legend.get_texts(), strict=False):
            if not isinstance(handle, Line2D):
                continue
            look = (mcolors.to_hex(handle.get_color()), str(handle.get_linestyle()), str(handle.get_marker()),
                    mcolors.to_hex(handle.get_markerfacecolor()), mcolors.to_hex(handle.get_markeredgecolor()),
                    round(float(handle.get_linewidth()), 1))
            label = text.get_text()
            if look in seen and seen[look] != label:
                problems.append(f"legend: {seen[look]!r} and {label!r} have the same key")
            seen.setdefault(look, label)
    return problems


def _legend_over_map(fig: Figure, ax: Axes, legend) -> bool:
    """A legend drawn inside an axes that holds a map (a mesh or an image filling it): wherever it sits it
    hides cells (the crossover map's legend covered the dense region of its third panel)."""
    from matplotlib.collections import QuadMesh

    if not any(isinstance(a, (QuadMesh, AxesImage)) for a in ax.get_children()):
        return False
    renderer = fig.canvas.get_renderer()
    box, frame = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
    return box.overlaps(frame) and box.x0 < frame.x1 - 2 and box.x1 > frame.x0 + 2


def _proxy_ok(legend, label: str, fig: Figure) -> bool:
    """A proxy entry (a marker explained, a colour of a heat map) is fine when its style is drawn somewhere."""
    handles = getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", [])
    for handle, text in zip(handles, legend.get_texts(), strict=False):
        if text.get_text() != label:
            continue
        if isinstance(handle, Line2D):
            marker, colour = handle.get_marker(), mcolors.to_hex(handle.get_color())
            for ax in fig.axes:
                for artist in _series(ax):
                    if isinstance(artist, Line2D) and (
                            (marker not in ("None", "", " ") and artist.get_marker() == marker)
                            or (marker in ("None", "", " ") and mcolors.to_hex(artist.get_color()) == colour)):
                        return True
                    if isinstance(artist, PathCollection) and marker not in ("None", "", " "):
                        return True  # scatter markers are not comparable by name; trust the proxy
        if isinstance(handle, Patch):
            colour = mcolors.to_hex(handle.get_facecolor())
            for ax in fig.axes:
                for artist in _series(ax):
                    colours = []
                    if isinstance(artist, Patch):
                        colours = [artist.get_facecolor()]
                    elif isinstance(artist, Collection):
                        colours = list(artist.get_facecolors())
                    elif isinstance(artist, AxesImage):
                        data = np.ma.masked_invalid(np.asarray(artist.get_array(), dtype=float))
                        if data.count():
                            colours = list(artist.cmap(artist.norm(np.unique(data.compressed()))))
                    if any(mcolors.to_hex(c) == colour for c in colours):
                        return True
    return False


@contextmanager
def capture_figures() -> Iterator[dict[str, list[str]]]:
    """Run the block with every ``Figure.savefig`` checked first: file name -> problems found."""
    found: dict[str, list[str]] = {}
    original = Figure.savefig

    def checked(self: Figure, fname, *args, **kwargs):  # noqa: ANN001, ANN202
        target = getattr(fname, "name", fname)
        if isinstance(target, int):  # an os.fdopen handle (write_atomic): ask the kernel for its path
            target = os.readlink(f"/proc/self/fd/{target}")
        name = Path(str(target)).name
        if name.startswith(".") and name.endswith(".tmp"):  # write_atomic's ".<name>.<random>.tmp"
            name = name[1:].rsplit(".", 2)[0]
        found[name] = figure_problems(self)
        return original(self, fname, *args, **kwargs)

    Figure.savefig = checked  # type: ignore[method-assign]
    try:
        yield found
    finally:
        Figure.savefig = original  # type: ignore[method-assign]


# --- legend lines and labels on markers (topology drawings first; any figure) ---------------------------

#: A legend line and the line it names may differ by this much (points, or share of the legend's width).
WIDTH_TOLERANCE_PT, WIDTH_TOLERANCE_SHARE = 0.3, 0.35


def _dashes(artist) -> tuple | None:
    """The unscaled dash pattern of a line or of a line collection's first line (None: solid)."""
    if isinstance(artist, Line2D):
        pattern = getattr(artist, "_unscaled_dash_pattern", (0, None))
    else:
        patterns = getattr(artist, "_us_linestyles", [(0, None)])
        pattern = patterns[0] if patterns else (0, None)
    seq = pattern[1]
    return tuple(round(float(x), 2) for x in seq) if seq else None


def _drawn_lines(fig: Figure) -> list[tuple[str, str | None, float, tuple | None]]:
    """(label, colour, width, dashes) of every visible line and line collection in the figure."""
    found = []
    for ax in fig.axes:
        for artist in [*ax.lines, *ax.collections]:
            if not artist.get_visible():
                continue
            if isinstance(artist, Line2D) and artist.get_linestyle() not in ("None", "", " "):
                found.append((artist.get_label(), mcolors.to_hex(artist.get_color()), float(artist.get_linewidth()),
                              _dashes(artist)))
            elif isinstance(artist, LineCollection) and len(artist.get_segments()):
                colours = artist.get_colors()
                colour = mcolors.to_hex(colours[0]) if len(colours) == 1 else None
                found.append((artist.get_label(), colour, float(artist.get_linewidths()[0]), _dashes(artist)))
    return found


def legend_line_problems(fig: Figure, ax: Axes, name: str) -> list[str]:
    """Legend lines drawn thicker, thinner or in another dash than the lines they name: a key from width to
    bandwidth (or weight, or load) read off a wrong width misleads. The drawn line is the one with the
    entry's label, else (a proxy entry) the lines of the entry's colour; an entry whose colour no line has is
    left to the other checks."""
    legend = ax.get_legend()
    if legend is None:
        return []
    drawn = _drawn_lines(fig)
    handles = getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", [])
    problems = []
    for handle, text in zip(handles, legend.get_texts(), strict=False):
        if not isinstance(handle, Line2D) or handle.get_linestyle() in ("None", "", " "):
            continue
        label, width, dashes = text.get_text(), float(handle.get_linewidth()), _dashes(handle)
        named = [d for d in drawn if d[0] == label] or [d for d in drawn if d[1] == mcolors.to_hex(handle.get_color())]
        if not named:
            continue
        tolerance = max(WIDTH_TOLERANCE_PT, WIDTH_TOLERANCE_SHARE * width)
        if not any(abs(d[2] - width) <= tolerance and d[3] == dashes for d in named):
            widths = sorted({round(d[2], 1) for d in named})
            problems.append(f"{name!r}: legend line {label!r} is {width:.1f} pt {'dashed' if dashes else 'solid'}, "
                            f"but the line it names is drawn {', '.join(f'{w:g}' for w in widths)} pt "
                            f"{'dashed' if named[0][3] else 'solid'}")
    return problems


#: A marker counts as covered where a text reaches this far into it (share of its half-size): antialiased
#: edges and a label that merely touches a marker's rim do not count.
MARKER_CORE = 0.8


def _marker_boxes(fig: Figure, ax: Axes) -> np.ndarray:
    """(n, 4) display boxes (x0, y0, x1, y1) of every marker drawn in ``ax`` (scatter and line markers)."""
    boxes = []
    scale = fig.dpi / 72.0
    for artist in ax.collections:
        if not isinstance(artist, PathCollection) or not artist.get_visible() or not len(artist.get_offsets()):
            continue
        paths, sizes = artist.get_paths(), artist.get_sizes()
        if not paths or not len(sizes):
            continue
        reach = float(np.abs(paths[0].vertices).max())
        centres = artist.get_offset_transform().transform(np.asarray(artist.get_offsets(), dtype=float))
        half = reach * np.sqrt(np.resize(sizes, len(centres))) * scale
        boxes.append(np.column_stack([centres[:, 0] - half, centres[:, 1] - half, centres[:, 0] + half,
                                      centres[:, 1] + half]))
    for line in ax.lines:
        if not line.get_visible() or line.get_marker() in ("None", "", " ", None):
            continue
        centres = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        half = line.get_markersize() / 2 * scale
        boxes.append(np.column_stack([centres[:, 0] - half, centres[:, 1] - half, centres[:, 0] + half,
                                      centres[:, 1] + half]))
    return np.concatenate(boxes) if boxes else np.zeros((0, 4))


def text_over_marker_problems(fig: Figure, ax: Axes, name: str) -> list[str]:
    """Texts printed over a marker they do not fit inside: a switch name over its circle, a black label on a
    dark square wider than it. A label wholly inside its own marker (white digits on a square) is fine."""
    markers = _marker_boxes(fig, ax)
    if not len(markers):
        return []
    renderer = fig.canvas.get_renderer()
    centre = (markers[:, :2] + markers[:, 2:]) / 2
    core = np.hstack([centre - (centre - markers[:, :2]) * MARKER_CORE,
                      centre + (markers[:, 2:] - centre) * MARKER_CORE])
    problems = []
    for text in ax.texts:
        if not text.get_visible() or not text.get_text().strip():
            continue
        box = Text.get_window_extent(text, renderer)  # the text alone, not an annotation's arrow
        hits = (box.x0 < core[:, 2]) & (box.x1 > core[:, 0]) & (box.y0 < core[:, 3]) & (box.y1 > core[:, 1])
        inside = ((box.x0 >= markers[:, 0] - 1) & (box.x1 <= markers[:, 2] + 1)
                  & (box.y0 >= markers[:, 1] - 1) & (box.y1 <= markers[:, 3] + 1))
        if (hits & ~inside).any():
            problems.append(f"{name!r}: text {text.get_text()!r} is printed over a marker it does not fit inside")
    return problems


# --- tick notation and legend marker shapes (any figure) ---------------------------------------------

#: matplotlib's "%g" scientific labels ("1e+03", "2.5e-05"), the minus sign either ASCII or Unicode.
_SCIENTIFIC_LABEL = r"^[-\u2212]?\d+(\.\d+)?e[+\-\u2212]?\d+$"
_PLAIN_LABEL = r"^[-\u2212]?(\d+(\.\d*)?|\.\d+)$"
#: A power of ten in mathtext ("\\mathdefault{5\\times10^{-5}}", "10^{3}"): a notation of its own too.
_POWER_LABEL = r"10\^\{?[-\u2212]?\d+"


#: A unit in an axis label: "ms per step", "(GB/s)", "time (s)", "hours lost"; the values under it should read
#: as numbers of that unit, not as 0.003 of it (a plan's compute in "ms" read 0.000-0.010: it wanted us).
_UNIT_IN_LABEL = r"(?<![\w/])(ns|us|µs|ms|s|min|h|hours|B|KiB|MiB|GiB|KB|MB|GB|Gbit/s|GB/s|MB/s|TFLOP/s)(?![\w/])"
#: Below this, every tick of a linear axis says the label's unit is too large for the data.
SMALLEST_READABLE_TICK = 0.01


def unit_scale_problems(ax: Axes, name: str) -> list[str]:
    """A linear axis whose label names a unit and whose largest tick is still under 0.01 of it: the values
    read "0.000, 0.002, ..." and the unit should be a smaller one."""
    import re

    problems = []
    for which in ("x", "y"):
        axis = ax.xaxis if which == "x" else ax.yaxis
        if axis.get_scale() != "linear" or not re.search(_UNIT_IN_LABEL, axis.get_label_text()):
            continue
        low, high = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
        ticks = [abs(float(t)) for t in axis.get_ticklocs() if low <= t <= high]
        if ticks and 0 < max(ticks) < SMALLEST_READABLE_TICK:
            problems.append(f"{name!r}: the {which} axis labelled {axis.get_label_text()!r} tops out at "
                            f"{max(ticks):.3g}: a smaller unit would read")
    return problems


def tick_notation_problems(ax: Axes, name: str) -> list[str]:
    """An axis whose labels mix "1e+03" with plain decimals ("500", "2000"): the odd one out reads as another
    unit or a typo. (Powers of ten typeset as 10^3 on every tick are one notation, and fine.)"""
    import re

    problems = []
    for which in ("x", "y"):
        labels = [label.strip().strip("$") for label in _tick_labels(ax, which)]
        scientific = [label for label in labels if re.match(_SCIENTIFIC_LABEL, label) or re.search(_POWER_LABEL, label)]
        plain = [label for label in labels if re.match(_PLAIN_LABEL, label)]
        if scientific and plain:
            problems.append(f"{name!r}: the {which} axis mixes {scientific[0]!r} with plain numbers ({plain[0]!r})")
    return problems


def _shape(artist) -> bytes | None:
    """The marker's outline, scaled to unit size (so a legend key and the drawing compare whatever their
    sizes), or None when the artist draws no marker."""
    from matplotlib.markers import MarkerStyle

    if isinstance(artist, Line2D):
        marker = artist.get_marker()
        if marker in ("None", "", " ", None):
            return None
        style = MarkerStyle(marker)
        vertices = style.get_path().transformed(style.get_transform()).vertices
    elif isinstance(artist, PathCollection):
        paths = artist.get_paths()
        if not paths:
            return None
        vertices = paths[0].vertices
    else:
        return None
    reach = float(np.abs(vertices).max()) if len(vertices) else 0.0
    return (vertices / reach).round(2).tobytes() if reach > 0 else None


def legend_marker_problems(fig: Figure, ax: Axes, name: str) -> list[str]:
    """Legend keys whose marker shape the drawing does not use: an entry drawn as a triangle must name
    triangles. A key with a drawn series of its label is compared with that series; a proxy key (no series
    of its label) with every marker in the figure."""
    legend = ax.get_legend()
    if legend is None:
        return []
    drawn: dict[str, set[bytes]] = {}
    every: set[bytes] = set()
    for other in fig.axes:
        for artist in _series(other):
            shape = _shape(artist)
            if shape is not None:
                drawn.setdefault(artist.get_label(), set()).add(shape)
                every.add(shape)
    handles = getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", [])
    problems = []
    for handle, text in zip(handles, legend.get_texts(), strict=False):
        shape, label = _shape(handle), text.get_text()
        if shape is None:
            continue
        if label in drawn and shape not in drawn[label]:
            problems.append(f"{name!r}: legend key {label!r} shows another marker than the series it names")
        elif label not in drawn and every and shape not in every:
            problems.append(f"{name!r}: legend key {label!r} shows a marker drawn nowhere in the figure")
    return problems

