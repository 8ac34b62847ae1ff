"""The study's look (`STYLE`: the rc settings to build and save under) and the pieces every figure is built from:
`StudyFigure` (inline as PNG, no pyplot), σ_w axes, colours and curves, the caption footer, the placeholder."""

import base64
import html
import io
import textwrap
from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure

DPI = 150
STYLE = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7,
         "ytick.labelsize": 7, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
         "grid.alpha": 0.3, "grid.linewidth": 0.5, "lines.linewidth": 1.2, "lines.markersize": 4,
         "savefig.dpi": DPI, "pdf.compression": 6, "svg.hashsalt": "initmem"}
SECTION_COLORS = {"01": "C0", "02": "C1", "03": "C2", "04": "C3", "05": "C4"}
PNG_METADATA = {"Software": None}  # no software entry: the same figure gives the same bytes
FOOTER_PT = 6.5  # at most ~7.2 in wide, shown ~800 px wide in a notebook: ~9 px text
TITLE_PT = 9.0


def png_bytes(fig: Figure) -> bytes:
    """`fig` as the PNG its artefact holds: what Jupyter shows inline (mime type image/png)."""
    buf = io.BytesIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buf, format="png", dpi=DPI, metadata=PNG_METADATA)
    return buf.getvalue()


class StudyFigure(Figure):
    """A Figure that IPython displays inline as its artefact's PNG, without pyplot or a formatter; with a
    `description` (set when saved), also as HTML with that caption under the image (what JupyterLab shows)."""

    description = ""
    _repr_png_ = png_bytes

    def _repr_html_(self) -> str | None:
        if not self.description:
            return None
        data = base64.b64encode(png_bytes(self)).decode("ascii")
        return (f'<figure style="margin:0"><img src="data:image/png;base64,{data}" style="max-width:100%">'
                f'<figcaption style="max-width:52em;font-size:90%">{html.escape(self.description)}</figcaption>'
                "</figure>")


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 6.4, height: float = 3.2,
               **kw) -> tuple[Figure, np.ndarray]:
    """A `StudyFigure` (constrained layout, inches) and its axes as a flat array."""
    fig = StudyFigure(figsize=(width, height), layout="constrained", dpi=DPI)  # laid out at the DPI it is saved at
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw).ravel()


def panels_over_legend(ncols: int, nrows: int, width: float, panel_height: float, legend_height: float,
                       sharey: bool = True) -> tuple[Figure, np.ndarray, object]:
    """A `StudyFigure` of `nrows` × `ncols` panels (flat array) over one row for a long legend (the returned axes,
    axis off): the legend stays inside the layout, above the footer, and the figure keeps a notebook's width."""
    fig = StudyFigure(figsize=(width, panel_height * nrows + legend_height + 0.4), layout="constrained", dpi=DPI)
    grid = fig.add_gridspec(nrows + 1, ncols, height_ratios=[panel_height] * nrows + [legend_height])
    axes: list = []
    for i in range(nrows):
        for j in range(ncols):
            axes.append(fig.add_subplot(grid[i, j], sharey=axes[0] if sharey and axes else None))
            if sharey and j:
                axes[-1].tick_params(labelleft=False)
    legend_axes = fig.add_subplot(grid[nrows, :])
    legend_axes.set_axis_off()
    return fig, np.array(axes), legend_axes


def log_axis(ax, which: str) -> None:
    """Log scale with plain-number ticks at 1-2-5 (a norm axis spans less than a few decades)."""
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    axis.set_minor_formatter(ticker.NullFormatter())


def sigma_axis(ax, sigmas: Sequence[float]) -> None:
    """A log σ_w x-axis ticked at the σ_w that ran."""
    ax.set_xscale("log")
    ax.set_xticks(list(sigmas), [f"{s:g}" for s in sigmas])
    ax.minorticks_off()
    ax.set_xlabel("σ_w (initialisation scale)")


def sigma_colors(sigmas: Sequence[float]) -> dict:
    """One viridis colour per σ_w, on a log scale: every figure colours a σ_w alike."""
    norm = LogNorm(min(sigmas), max(sigmas)) if len(sigmas) > 1 and min(sigmas) > 0 else Normalize(0, 1)
    cmap = matplotlib.colormaps["viridis"]
    return {s: cmap(0.9 * norm(s)) if len(sigmas) > 1 else cmap(0.4) for s in sigmas}


def legend(ax, **kw) -> None:
    """A frameless legend, only when something is labelled."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(frameon=False, **kw)


def with_sigma(h: pd.DataFrame, g: pd.DataFrame) -> pd.DataFrame:
    """History rows `h` with their run's σ_w (from the runs `g`)."""
    return h.assign(sigma_w=h["run_id"].map(g.set_index("run_id")["sigma_w"]))  # the run's, not the history's


def has_values(h: pd.DataFrame, column: str) -> bool:
    """True when `h` has `column` with at least one number (older runs lack the instruments' columns)."""
    return column in h.columns and bool(pd.to_numeric(h[column], errors="coerce").notna().any())


def sigma_lines(ax, h: pd.DataFrame, column: str, sigmas: Sequence[float], colors: dict) -> None:
    """One line per σ_w: the mean over seeds of `column` against epoch."""
    for s in sigmas:
        curve = pd.to_numeric(h.loc[h["sigma_w"] == s, column], errors="coerce").groupby(
            h.loc[h["sigma_w"] == s, "epoch"]).mean().dropna()
        if len(curve) >= 2:  # a run that diverged in its first epoch has only epoch 0: no curve
            ax.plot(curve.index, curve.to_numpy(), color=colors[s], label=f"σ_w={s:g}")


def caption_figure(fig: Figure, title: str, footer: str) -> Figure:
    """Add the one-line `title` (unless the figure has one; the long caption goes beside the figure, not in it) and
    the grey provenance `footer` (the stamp), wrapped to the width, with room kept for it under the axes."""
    width, height = fig.get_size_inches()
    if title and fig.get_suptitle() == "":
        fig.suptitle(title, fontsize=TITLE_PT)
    # DejaVu Sans averages ~0.5 em per character; 0.6 leaves room for digit-heavy lines
    lines = textwrap.wrap(footer, int(width * 72 / (0.6 * FOOTER_PT)), break_on_hyphens=False)
    fig.text(0.005, 0.004, "\n".join(lines), fontsize=FOOTER_PT, color="0.35", ha="left", va="bottom",
             linespacing=1.2)
    bottom = (len(lines) * 1.2 * FOOTER_PT + 4) / (72 * height)
    if fig.get_layout_engine() is not None:
        fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))
    return fig


def message_figure(message: str) -> Figure:
    """A figure that says only `message` (a section without results)."""
    fig, (ax,) = new_figure(width=6.4, height=2.0)
    ax.set_axis_off()
    ax.text(0.5, 0.5, textwrap.fill(message, 90), ha="center", va="center", fontsize=9, transform=ax.transAxes)
    return fig
