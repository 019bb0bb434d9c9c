"""Small matplotlib helpers every figure of flexcomm shares, so each reads at a glance.

Why: matplotlib's log axes label only powers of ten, so an axis spanning less than a decade shows no number
at all, and one spanning a decade and a half labels its minor ticks until they collide. The figures' tests
(``tests/figure_check.py``) check that every axis has readable tick labels and every series shows; these
helpers are how the plotting code meets that.
"""

from __future__ import annotations

import math
from typing import Any

#: Line styles of the strategies every engine compares; a series that often coincides with another (flexible
#: with Top-k over Allgather when it keeps choosing it) is drawn thin and dashed *over* a thick solid one, so
#: both stay visible where they agree.
#: One colour per exchange scheme and strategy in every figure of every tool (what-if maps, study winners,
#: emulated runs, reproductions), so a colour means the same thing wherever it appears.
SCHEME_COLOURS: dict[str, str] = {
    "dense": "#7f7f7f", "topk-ag": "#1f77b4", "topk-ar": "#ff7f0e", "flexible": "#2ca02c", "moo": "#d62728",
    "powersgd": "#17becf", "fp16": "#9467bd", "bf16": "#8c564b",
}
STRATEGY_STYLES: dict[str, dict[str, Any]] = {
    "dense": {"color": SCHEME_COLOURS["dense"], "ls": "-", "marker": "s", "lw": 2.0, "zorder": 2},
    "topk-ag": {"color": SCHEME_COLOURS["topk-ag"], "ls": "-", "marker": "o", "lw": 5.0, "zorder": 1, "alpha": 0.55},
    "topk-ar": {"color": SCHEME_COLOURS["topk-ar"], "ls": "-", "marker": "^", "lw": 2.4, "zorder": 2},
    "flexible": {"color": SCHEME_COLOURS["flexible"], "ls": "--", "marker": "D", "lw": 2.0, "zorder": 3, "mfc": "none"},
    "moo": {"color": SCHEME_COLOURS["moo"], "ls": "-.", "marker": "v", "lw": 1.5, "zorder": 4, "mfc": "none"},
}


def strategy_style(name: str, markers: bool = True) -> dict[str, Any]:
    """Keyword arguments of ``ax.plot`` for a strategy (a grey solid line for one not listed)."""
    style = dict(STRATEGY_STYLES.get(name, {"color": "#444444", "ls": "-", "marker": ".", "lw": 1.5}))
    if not markers:
        style.pop("marker", None)
        style.pop("mfc", None)
    return style


def readable_log_axis(ax: Any, which: str = "x") -> None:
    """Label a log axis however few decades it spans and however short it is drawn.

    The ticks are chosen when the figure is drawn (:class:`FittingLogLocator`), from the axis' length on the
    canvas and its labels' font: 1-2-5 ticks while they fit, then one per decade, then every k-th decade, and
    round linear steps within one decade. Choosing them when the axis is set up (from the data alone) let a
    short panel of measured data get more labels than fit, so they overlapped for some data and not others."""
    from matplotlib.ticker import NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(FittingLogLocator(which))
    axis.set_major_formatter(OneNotationFormatter())
    axis.set_minor_locator(DecadeMinorLocator())
    axis.set_minor_formatter(NullFormatter())


def square_log_axes(ax: Any, low: float, high: float, xlabel: str, ylabel: str) -> None:
    """Both axes log over the same range: predicted-against-measured plots, where y = x must be the diagonal."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def plain_number(value: float) -> str:
    """A tick label in plain decimals (3 significant digits) from 1e-4 to 1e6, powers of ten beyond: never
    "1e+03" beside "500" on the same axis."""
    import numpy as np

    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    if 1e-4 <= abs(value) < 1e6:
        return np.format_float_positional(value, precision=3, fractional=False, trim="-")
    return power_of_ten_label(value)


def power_of_ten_label(value: float) -> str:
    """``$10^{-5}$`` or ``$5\\times10^{-5}$``: the notation of an axis that reaches beyond plain decimals."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    exponent = math.floor(math.log10(abs(value)) + 1e-9)
    mantissa = value / 10 ** exponent
    if abs(mantissa - round(mantissa)) < 1e-6 and round(abs(mantissa)) == 1:
        return f"$10^{{{exponent}}}$" if mantissa > 0 else f"$-10^{{{exponent}}}$"
    return f"${mantissa:.2g}\\times10^{{{exponent}}}$"


def OneNotationFormatter() -> Any:  # noqa: N802 (a class made on first use: matplotlib loads lazily)
    """Tick labels in one notation per axis: plain decimals when every tick is one (1e-4 to 1e6), powers of
    ten on every tick otherwise. Labelled one at a time, an axis from 2e-6 to 5e-4 read "5x10^-5" beside
    "0.0001" (predicted_vs_measured.png)."""
    from matplotlib.ticker import Formatter

    class _OneNotation(Formatter):
        def __call__(self, value: float, pos: int | None = None) -> str:
            return plain_number(value)

        def format_ticks(self, values: Any) -> list[str]:
            finite = [abs(v) for v in values if v and math.isfinite(v)]
            if all(1e-4 <= v < 1e6 for v in finite):
                return [plain_number(v) for v in values]
            return [power_of_ten_label(v) for v in values]

    return _OneNotation()


def DecadeMinorLocator() -> Any:  # noqa: N802 (a class made on first use: matplotlib loads lazily)
    """Log minor ticks only on an axis spanning a decade or more: within one, the labelled ticks are already
    1-2-5 or linear steps, and an unlabelled minor tick read as a value nobody named (emulated.png's ratio
    panel showed one at the 0.009 MOO settled on)."""
    from matplotlib.ticker import LogLocator

    class _DecadeMinor(LogLocator):
        def __init__(self) -> None:
            super().__init__(subs="auto")

        def __call__(self) -> Any:
            low, high = sorted(self.axis.get_view_interval())
            if low <= 0 or high / low < 10:
                return []
            return super().__call__()

    return _DecadeMinor()


def _round_inside(lo: float, hi: float) -> float:
    """The roundest number (fewest significant digits) near the geometric middle of [lo, hi] and inside it."""
    middle = math.sqrt(lo * hi)
    for digits in range(1, 8):
        value = float(f"{middle:.{digits}g}")
        if lo <= value <= hi:
            return value
    return middle


def FittingLogLocator(which: str) -> Any:  # noqa: N802 (a class made on first use: matplotlib loads lazily)
    """A :class:`_FittingLogLocator` for the ``which`` axis (matplotlib imported only when a figure is drawn)."""
    global _FITTING_CLASS
    if _FITTING_CLASS is None:
        from matplotlib.ticker import LogLocator  # its nonsingular/view_limits keep log limits positive

        _FITTING_CLASS = type("FittingLogLocator", (_FittingLogLocator, LogLocator), {})
    return _FITTING_CLASS(which)


_FITTING_CLASS: Any = None


class _FittingLogLocator:
    """Log-axis ticks whose labels fit the axis as drawn: the densest of 1-2-5 per decade, 1 per decade, one
    every k decades (or round linear steps inside one decade) whose neighbouring labels do not touch."""

    #: free space between two labels, in label font sizes (y: stacked lines; x: beside each other)
    GAP_Y_EM = 1.35
    GAP_X_EM = 0.6
    CHAR_EM = 0.62  # a digit's width in font sizes (DejaVu Sans: 0.636)

    def __init__(self, which: str) -> None:
        super().__init__(base=10.0)  # type: ignore[call-arg]
        self.which = which

    def __call__(self) -> list[float]:
        vmin, vmax = self.axis.get_view_interval()
        return self.tick_values(vmin, vmax)

    def _length_px_and_font_px(self) -> tuple[float, float]:
        axes = self.axis.axes
        length = axes.bbox.height if self.which == "y" else axes.bbox.width
        ticks = self.axis.get_major_ticks(1)
        size_pt = ticks[0].label1.get_fontsize() if ticks else 10.0
        return float(length), float(size_pt) * axes.figure.dpi / 72.0

    def _fits(self, values: list[float], lo: float, hi: float, length: float, font: float) -> bool:
        inside = [v for v in values if lo <= v <= hi]
        if len(inside) < 2:
            return True
        span = math.log10(hi) - math.log10(lo)
        positions = [length * (math.log10(v) - math.log10(lo)) / span for v in inside]
        for i in range(1, len(inside)):
            gap = positions[i] - positions[i - 1]
            if self.which == "y":
                need = self.GAP_Y_EM * font
            else:
                widths = [len(plain_number(v).strip("$")) * self.CHAR_EM * font for v in inside[i - 1:i + 1]]
                need = (widths[0] + widths[1]) / 2 + self.GAP_X_EM * font
            if gap < need:
                return False
        return True

    def tick_values(self, vmin: float, vmax: float) -> list[float]:
        """Only ticks inside the view: a label outside it is never drawn, so it cannot be checked either."""
        lo, hi = sorted((float(vmin), float(vmax)))
        return [v for v in self._candidates(lo, hi) if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]

    def _candidates(self, lo: float, hi: float) -> list[float]:
        from matplotlib.ticker import MaxNLocator

        if not (lo > 0 and math.isfinite(hi) and hi > lo):
            return []
        try:
            length, font = self._length_px_and_font_px()
        except (AttributeError, IndexError):
            length, font = 300.0, 10.0
        decades = math.log10(hi / lo)
        middle = _round_inside(lo, hi)  # one label inside the view, if nothing else fits
        if decades < 1:
            for nbins in (5, 4, 3, 2, 1):
                values = [float(v) for v in MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
                          if v > 0]
                if any(lo <= v <= hi for v in values) and self._fits(values, lo, hi, length, font):
                    return values
            return [middle]
        first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        candidates = [[m * 10.0 ** e for e in range(first, last + 1) for m in (1, 2, 5)]]
        for every in range(1, last - first + 2):
            start = first - (first % every)
            candidates.append([10.0 ** e for e in range(start, last + 1, every)])
        for values in candidates:
            inside = [v for v in values if lo <= v <= hi]
            if inside and self._fits(values, lo, hi, length, font):
                return values
        return [middle]


def use_file_backend() -> None:
    """Draw with Agg (figures go to files: no window on a desktop, no display needed on a server), unless the
    session already uses pyplot: then its backend stays (Jupyter's inline backend shows the figures a notebook
    draws; switching it to Agg would hide every later figure of the notebook)."""
    import sys

    if "matplotlib.pyplot" in sys.modules:
        return
    import matplotlib

    matplotlib.use("Agg")


def coinciding_line(x: Any, y: Any, drawn: list[tuple[Any, Any, Any]], rtol: float = 0.02) -> Any | None:
    """The line already drawn (``drawn``: (artist, x, y) of one panel) that ``(x, y)`` would lie on: the same x
    and y within ``rtol`` everywhere. Two such lines hide each other whatever their styles, so a caller draws
    the second one not at all and names the first for both (``A = B``)."""
    import numpy as np

    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    for artist, seen_x, seen_y in drawn:
        if (seen_x.shape == xs.shape and np.array_equal(seen_x, xs)
                and np.allclose(ys, seen_y, rtol=rtol, atol=0.0, equal_nan=True)):
            return artist
    return None


def name_coinciding(line: Any, label: str, colour: Any) -> None:
    """Name a drawn ``line`` for a second series that lies on it (``A = B``), its markers in the second one's
    ``colour``: the merged key then differs from A's own key where A is drawn alone in another panel."""
    line.set_label(f"{line.get_label()} = {label}")
    line.set_markerfacecolor(colour)
    line.set_markeredgecolor(colour)
