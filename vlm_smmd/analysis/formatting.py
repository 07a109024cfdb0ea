"""Text and figure helpers shared by the reports: figures as text, markdown tables, PNG figures.

Figures drawn with matplotlib's object API on the Agg canvas: no pyplot, no global backend state."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

WIDE_KEYS = frozenset({"mae", "mean_time_gap_min", "mean_time_gap_worst_min"})  # figures written with 2 decimals


def fmt(value, key: str = "", *, signed: bool = False) -> str:
    """A figure as text: None -> "–"; a float with 3 decimals, 2 when `key` (a headline key) is in WIDE_KEYS,
    with its sign when `signed` ("+0.012"); anything else as str()."""
    if value is None:
        return "–"
    if isinstance(value, float):
        digits = 2 if key in WIDE_KEYS else 3
        return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return str(value)


def md_cell(value) -> str:
    """`fmt(value)` with "|" escaped, so that any text stays one cell of a markdown table."""
    return fmt(value).replace("|", "\\|")


def md_table(header: Sequence, rows: Iterable[Sequence]) -> list[str]:
    """The lines of a markdown table, each cell through `md_cell`, and a blank line after it."""
    lines = ["| " + " | ".join(md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_cell(v) for v in row) + " |" for row in rows]
    return lines + [""]


def new_figure(width: float = 7.0, height: float = 4.0, ncols: int = 1, nrows: int = 1):
    """(figure, axes) at 100 dpi on the Agg canvas: `nrows` rows of `ncols` axes, a list of them (row by
    row) when there are several."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(nrows * ncols)]
    return fig, (axes[0] if len(axes) == 1 else axes)


def series_color(i: int, n: int):
    """The colour of series `i` of `n` in one plot: matplotlib's ten default colours while they suffice,
    else evenly spaced ones, so that no two series of a plot share a colour."""
    if n <= 10:
        return f"C{i}"
    from matplotlib import colormaps

    return colormaps["tab20"](i) if n <= 20 else colormaps["turbo"](i / (n - 1))


CROWDED = 4  # more series than this in one plot: legend beside it, per-bar notes upright


def place_legend(ax, series: int) -> None:
    """The legend of `series` data series: inside the axes for a few, beside them (right) past `CROWDED`,
    where a legend inside would cover bars."""
    if series > CROWDED:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        ax.legend(fontsize=8)


def save_figure(fig, path: Path) -> None:
    """Write `fig` as PNG after a tight layout, without the Software entry (no matplotlib version in the
    file)."""
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
