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
STRATEGY_STYLES: dict[str, dict[str, Any]] = {
    "dense": {"color": "#7f7f7f", "ls": "-", "marker": "s", "lw": 2.0, "zorder": 2},
    "topk-ag": {"color": "#1f77b4", "ls": "-", "marker": "o", "lw": 5.0, "zorder": 1, "alpha": 0.55},
    "topk-ar": {"color": "#ff7f0e", "ls": "-", "marker": "^", "lw": 2.4, "zorder": 2},
    "flexible": {"color": "#2ca02c", "ls": "--", "marker": "D", "lw": 2.0, "zorder": 3, "mfc": "none"},
    "moo": {"color": "#d62728", "ls": "-.", "marker": "v", "lw": 1.5, "zorder": 4, "mfc": "none"},
}


def strategy_style(name: str, markers: bool = True) -> dict[str, Any]:
    """Keyword arguments of ``ax.plot`` for a strategy (a grey solid line for one not listed)."""
    style = dict(STRATEGY_STYLES.get(name, {"color": "#444444", "ls": "-", "marker": ".", "lw": 1.5}))
    if not markers:
        style.pop("marker", None)
        style.pop("mfc", None)
    return style


def readable_log_axis(ax: Any, which: str = "x") -> None:
    """Label a log axis however few decades it spans: 1-2-5 ticks within three decades, powers beyond."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    low, high = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    decades = math.log10(high / low) if low > 0 and high > 0 else 0.0
    if decades < 1:  # less than a decade: evenly spaced round numbers, as on a linear axis
        axis.set_major_locator(MaxNLocator(nbins=5))
    else:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,), numticks=12))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.3g}"))
    axis.set_minor_formatter(NullFormatter())


def use_file_backend() -> None:
    """Draw with Agg (figures go to files: no window on a desktop, no display needed on a server), unless the
    session already uses pyplot: then its backend stays (Jupyter's inline backend shows the figures a notebook
    draws; switching it to Agg would hide every later figure of the notebook)."""
    import sys

    if "matplotlib.pyplot" in sys.modules:
        return
    import matplotlib

    matplotlib.use("Agg")
