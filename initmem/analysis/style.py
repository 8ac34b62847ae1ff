"""The study's look (`STYLE`: the rc settings to build and save under) and the pieces every figure is built from:
`StudyFigure` (inline as PNG, no pyplot), one look per optimiser (`OPTIMIZER_LOOKS`), σ_w axes, colours and curves,
the caption footer, the placeholder; and the configurations' looks, labels, points and legends, drawn as small
multiples, a row of panels per section (`config_rows`, `section_grid`: F7, F11, F12)."""

import base64
import html
import io
import textwrap
from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.colors import LogNorm, Normalize, to_rgb
from matplotlib.figure import Figure

from initmem.analysis import cells

DPI = 150
STYLE = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7,
         "ytick.labelsize": 7, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
         "grid.alpha": 0.3, "grid.linewidth": 0.5, "lines.linewidth": 1.2, "lines.markersize": 4,
         "savefig.dpi": DPI, "pdf.compression": 6, "svg.hashsalt": "initmem"}
# One look per optimiser in every figure: Okabe-Ito colours (told apart in colour-blind vision too) and a marker each,
# so that two optimisers never share a colour or a marker (Adam and AdamW drawn on one spot both stay visible).
OPTIMIZER_LOOKS = {"sgd": ("#0072B2", "o"), "sgd_momentum": ("#E69F00", "s"), "adam": ("#D55E00", "^"),
                   "adamw": ("#009E73", "D"), "muon": ("#CC79A7", "v")}
OTHER_LOOK = ("0.45", "P")  # an optimiser the map does not know
CONTEXT_COLOR = "0.8"  # the other panels' data, drawn behind a small multiple's own
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
    caption_html = ""  # the description as HTML, its links as anchors (set with it by `initmem.figures`)
    _repr_png_ = png_bytes

    def _repr_html_(self) -> str | None:
        if not self.description:
            return None
        data = base64.b64encode(png_bytes(self)).decode("ascii")
        return (f'<figure style="margin:0"><img src="data:image/png;base64,{data}" style="max-width:100%">'
                '<figcaption style="max-width:52em;font-size:90%">'
                f"{self.caption_html or html.escape(self.description)}</figcaption></figure>")


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 6.4, height: float = 3.2,
               **kw) -> tuple[Figure, np.ndarray]:
    """A `StudyFigure` (constrained layout, inches) and its axes as a flat array."""
    fig = StudyFigure(figsize=(width, height), layout="constrained", dpi=DPI)  # laid out at the DPI it is saved at
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw).ravel()


def optimizer_look(optimizer: str) -> tuple[str, str]:
    """(colour, marker) of `optimizer` (`OPTIMIZER_LOOKS`), the same in every figure."""
    return OPTIMIZER_LOOKS.get(optimizer, OTHER_LOOK)


def shade(color: str, k: int, n: int) -> tuple[float, float, float]:
    """The `k`-th of `n` shades of `color`, darker to lighter (n = 1: the colour itself): several configurations of
    one optimiser in one panel keep its hue and stay apart."""
    rgb = np.array(to_rgb(color))
    t = 0.0 if n < 2 else -0.3 + 1.0 * k / (n - 1)  # < 0 towards black, > 0 towards white
    return tuple(float(v) for v in (rgb * (1 + t) if t < 0 else rgb + (1 - rgb) * t))


def section_grid(nrows: int, ncols: int, width: float = 7.2, panel_height: float = 1.5,
                 legend_width: float = 1.5) -> tuple[Figure, np.ndarray, list]:
    """Small multiples: `nrows` × `ncols` panels (2-d array; one y axis, one x axis per column, tick labels on the
    outer panels only) and, right of each row, an axes (axis off) for that row's legend; a notebook's width."""
    height = panel_height * nrows + (0.9 if nrows == 1 else 0.6)
    fig = StudyFigure(figsize=(width, height), layout="constrained", dpi=DPI)
    panel = (width - legend_width) / ncols
    grid = fig.add_gridspec(nrows, ncols + 1, width_ratios=[panel] * ncols + [legend_width])
    axes = np.empty((nrows, ncols), dtype=object)
    for i in range(nrows):
        for j in range(ncols):
            axes[i, j] = fig.add_subplot(grid[i, j], sharex=axes[0, j] if i else None,
                                         sharey=axes[0, 0] if i or j else None)
            axes[i, j].tick_params(labelleft=j == 0, labelbottom=i == nrows - 1)
    legends = [fig.add_subplot(grid[i, ncols]) for i in range(nrows)]
    for ax in legends:
        ax.set_axis_off()
    return fig, axes, legends


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


def config_looks(cs: pd.DataFrame) -> pd.DataFrame:
    """Rows of configurations (`config_spreads`, or a run per configuration) with a `color` and `marker`: the
    optimiser's look (`optimizer_look`), in shades where a section holds several of one optimiser's
    configurations; every figure of configurations draws each alike."""
    by = cs.groupby(["section", "optimizer"], sort=False)["optimizer"]
    looks = [optimizer_look(o) for o in cs["optimizer"]]
    return cs.assign(color=[shade(c, k, n) for (c, _), k, n in zip(
        looks, by.cumcount(), by.transform("size"), strict=True)], marker=[m for _, m in looks])


def config_label(r, section: bool = True) -> str:
    """'03 lr=0.1 wd=0.01' for a `config_spreads` row (itertuples; without the section's number when `section` is
    False), '(σ_w 2/3)' added when a σ_w's runs diverged."""
    narrowed = getattr(r, "n_sigma_in_spread", r.n_sigma) < r.n_sigma
    return (f"{r.section[:2]} " if section else "") + r.label + (
        f" (σ_w {r.n_sigma_in_spread}/{r.n_sigma})" if narrowed else "")


def config_rows(cs: pd.DataFrame, ncols: int) -> tuple[Figure, np.ndarray, list, list[str]]:
    """Small multiples of `config_looks` rows: a row of `ncols` panels per section (in `cs`'s order) with its legend
    beside it, wide enough for the longest label (`section_grid`); the figure, panels, legend axes and
    sections."""
    sections = list(dict.fromkeys(cs["section"]))
    longest = max((len(config_label(r, section=False)) for r in cs.itertuples()), default=10)
    fig, axes, legends = section_grid(len(sections), ncols, panel_height=2.4 if len(sections) == 1 else 1.35,
                                            legend_width=max(1.1, 0.05 * longest + 0.5))
    return fig, axes, legends, sections


def spread_label(fig: Figure, axes: np.ndarray) -> None:
    """The spread axis of small multiples: one label for every row, from 0 (a zero spread stays visible)."""
    fig.supylabel("test-accuracy spread across σ_w (pp)", fontsize=8)
    axes[0, 0].set_ylim(bottom=-0.5)


def config_points(ax, cs: pd.DataFrame, x: str, log: bool = True) -> None:
    """Each `config_looks` row at (`x`, spread, its 95 % seed interval) in its look; rows on one spot (Adam and AdamW
    at one clock) set a marker's width apart (`dodged`), so that none hides another."""
    cs = cs.assign(**{x: dodged(cs[x].to_numpy(dtype=float), log)}) if len(cs) else cs
    for r in cs.itertuples():
        look = {"color": r.color, "markersize": 5, "markeredgecolor": "white", "markeredgewidth": 0.4,
                "label": config_label(r, section=False), "zorder": 3}
        err = cells.interval_err(pd.DataFrame([r._asdict()]))
        if not err.any():  # one seed: no whisker, and none in the legend
            ax.plot(getattr(r, x), r.spread_pp, r.marker, **look)
        else:
            ax.errorbar(getattr(r, x), r.spread_pp, yerr=err, fmt=r.marker, capsize=2, **look)


def dodged(x: np.ndarray, log: bool, step: float = 0.03) -> np.ndarray:
    """`x` with values closer than `step` of their span (in decades on a log axis) spread `step` apart, centred on
    where they were: a group of markers on one spot drawn side by side; every other value exactly as given."""
    u = np.log10(x) if log else x.astype(float)
    span = float(np.nanmax(u) - np.nanmin(u)) or 1.0
    out, group = x.astype(float).copy(), []
    for i in [*np.argsort(u, kind="stable"), None]:
        if i is not None and group and u[i] - u[group[0]] < step * span:
            group.append(i)
            continue
        for k, j in enumerate(group if len(group) > 1 else []):
            moved = u[j] + step * span * (k - (len(group) - 1) / 2)
            out[j] = 10 ** moved if log else moved
        group = [] if i is None else [i]
    return out


def context_points(ax, cs: pd.DataFrame, x: str) -> None:
    """The other panels' configurations in grey, behind, unlabelled: where a panel's own sit among all."""
    if len(cs):
        ax.plot(cs[x], cs["spread_pp"], "o", color=CONTEXT_COLOR, markersize=3, zorder=1)


def config_legend(legend_axes, axes, cs: pd.DataFrame, title: str) -> None:
    """One legend entry per configuration of `cs` drawn on `axes` (a row of panels), in `cs`'s order, in
    `legend_axes` beside them, under `title` (the section)."""
    handles = {lab: h for ax in axes for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)}
    order = [lab for r in cs.itertuples() if (lab := config_label(r, section=False)) in handles]
    if order:
        legend_axes.legend([handles[k] for k in order], order, loc="center left", frameon=False, fontsize=6,
                           title=title, title_fontsize=6.5, handletextpad=0.3, labelspacing=0.35, borderaxespad=0,
                           alignment="left")
