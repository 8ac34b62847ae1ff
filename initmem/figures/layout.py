"""Layout defects a reader sees, found without a person looking: every drawn text inside the canvas, clear of the
legends, of every other text and, for an annotation, of its axes' data; every legend clear of the data lines; a
one-line title that fits the figure's width; and legend entries only for what is drawn (no error-bar marker without
an error bar).
`initmem figures --check-layout` runs it on every figure a figure notebook saves (`FigureBook.figure`)."""

import io
import math

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from initmem.analysis import style

CHECK_ENV = "INITMEM_FIGURES_CHECK_LAYOUT"  # "1" while `make_figures(check_layout=True)` runs its figure notebooks
GIVEN: dict[int, list] = {}  # id(legend) -> the handles it was given (a Legend keeps only proxies), once recording


def record_legend_handles() -> None:
    """From now on in this process, remember the handles every Legend is given (`GIVEN`): `undrawn` needs them."""
    if getattr(Legend.__init__, "_initmem_records", False):
        return
    original = Legend.__init__

    def init(self, parent, handles, labels, *args, **kw):
        original(self, parent, handles, labels, *args, **kw)
        GIVEN[id(self)] = list(handles)

    init._initmem_records = True
    Legend.__init__ = init


def drawn_artists(fig: Figure) -> tuple[list[tuple[Text, object, object]], list[tuple[Line2D, np.ndarray]]]:
    """Every non-empty text the renderer draws as the artefact's PNG is written (its DPI), with its window extent
    and the canvas's (pixels); and every data line of an axes (`ax.lines`) with its points in pixels."""
    texts: list = []
    lines: list = []
    draw_text, draw_line = Text.draw, Line2D.draw

    def record_text(self, renderer):
        draw_text(self, renderer)
        if self.get_visible() and self.get_text().strip():
            texts.append((self, self.get_window_extent(renderer), self.figure.bbox.frozen()))

    def record_line(self, renderer):
        draw_line(self, renderer)
        if self.get_visible() and self.axes is not None and self in self.axes.lines:
            lines.append((self, self.get_transform().transform(np.asarray(self.get_xydata(), dtype=float))))

    FigureCanvasAgg(fig)
    Text.draw, Line2D.draw = record_text, record_line
    try:
        with matplotlib.rc_context(style.STYLE):
            fig.savefig(io.BytesIO(), format="png", dpi=style.DPI)
    finally:
        Text.draw, Line2D.draw = draw_text, draw_line
    last = {id(t[0]): t for t in texts}  # a constrained layout draws twice: where an artist was drawn last counts
    return list(last.values()), list({id(ln[0]): ln for ln in lines}.values())


def layout_problems(fig: Figure, legend_handles: dict[int, list] | None = None) -> list[str]:
    """What is wrong with `fig`'s layout, one line each (empty: nothing); legends are judged by the handles they were
    given (`legend_handles`, default `GIVEN`)."""
    given = GIVEN if legend_handles is None else legend_handles
    problems = []
    texts, lines = drawn_artists(fig)
    for text, box, page in texts:
        if box.x0 < page.x0 - 1 or box.y0 < page.y0 - 1 or box.x1 > page.x1 + 1 or box.y1 > page.y1 + 1:
            problems.append(f"text outside the canvas: {text.get_text()!r} at {box.bounds} (canvas {page.bounds})")
    title = fig.get_suptitle()
    if "\n" in title:
        problems.append(f"title of more than one line: {title!r}")
    if fig._suptitle is not None and fig._suptitle.get_window_extent().width > fig.bbox.width:
        problems.append(f"title wider than the figure: {title!r}")
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    problems += covered_by_legend(texts, legends) + overlapping(texts) + over_data(texts, lines)
    problems += [f"legend over data: line {line.get_label()!r}" for leg in legends for line, xy in lines
                 if _hits(xy, _shrunk(leg.get_window_extent(), 2), line.get_linestyle() not in ("None", "none", ""))]
    for leg in legends:
        for handle, text in zip(given.get(id(leg), []), leg.get_texts(), strict=False):
            if why := undrawn(handle, fig):
                problems.append(f"legend entry {text.get_text()!r}: {why}")
    return problems


def overlapping(texts: list[tuple[Text, object, object]]) -> list[str]:
    """Two drawn texts on one spot (two column titles, two axis labels): neither can be read."""
    problems = []
    for k, (a, box_a, _) in enumerate(texts):
        for b, box_b, _ in texts[k + 1:]:
            if _shrunk(box_a).overlaps(_shrunk(box_b)):
                problems.append(f"texts on one spot: {a.get_text()!r} and {b.get_text()!r}")
    return problems


def over_data(texts: list[tuple[Text, object, object]], lines: list[tuple[Line2D, np.ndarray]]) -> list[str]:
    """An annotation of an axes (`ax.texts`) drawn over that axes' data: a marker under it or a line through it."""
    problems = []
    for text, box, _ in texts:
        if text.axes is None or text not in text.axes.texts:
            continue
        inner = _shrunk(box)
        for line, xy in lines:
            if line.axes is text.axes and _hits(xy, inner, line.get_linestyle() not in ("None", "none", "")):
                problems.append(f"text over data: {text.get_text()!r} on line {line.get_label()!r}")
                break
    return problems


def _shrunk(box, px: float = 1.0) -> Bbox:
    """`box` less `px` pixels on every side: texts and lines that only touch do not count."""
    return Bbox.from_extents(box.x0 + px, box.y0 + px, box.x1 - px, box.y1 - px)


def _hits(xy: np.ndarray, box: Bbox, joined: bool) -> bool:
    """Whether points `xy` (pixels) fall inside `box`, or, `joined`, a segment between two of them crosses it
    (Liang–Barsky clipping over every segment at once)."""
    inside = (xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)
    if inside.any() or not joined or len(xy) < 2:
        return bool(inside.any())
    p, d = xy[:-1], np.diff(xy, axis=0)
    ok = np.isfinite(p).all(axis=1) & np.isfinite(d).all(axis=1)  # a NaN breaks the line: no segment there
    p, d = p[ok], d[ok]
    lo, hi = np.zeros(len(p)), np.ones(len(p))
    with np.errstate(divide="ignore", invalid="ignore"):
        for q, r in ((-d[:, 0], p[:, 0] - box.x0), (d[:, 0], box.x1 - p[:, 0]),
                     (-d[:, 1], p[:, 1] - box.y0), (d[:, 1], box.y1 - p[:, 1])):
            t = r / q
            lo = np.where(q < 0, np.maximum(lo, t), lo)
            hi = np.where(q > 0, np.minimum(hi, t), hi)
            hi = np.where((q == 0) & (r < 0), -1.0, hi)  # parallel to this edge and outside it
    return bool((lo < hi).any())


def covered_by_legend(texts: list[tuple[Text, object, object]], legends: list[Legend]) -> list[str]:
    """A drawn text (a value label, an annotation) that a legend's box overlaps: one hides the other."""
    problems = []
    for leg in legends:
        own = {id(t) for t in leg.findobj(Text)}
        frame = leg.get_window_extent()
        for text, box, _ in texts:
            if id(text) not in own and box.overlaps(frame):
                problems.append(f"text under the legend: {text.get_text()!r} at {box.bounds} (legend {frame.bounds})")
    return problems


def undrawn(handle, fig: Figure) -> str:
    """Why a legend `handle` stands for nothing drawn ('' when it does)."""
    if isinstance(handle, ErrorbarContainer):
        segments = [s for c in handle[2] for s in c.get_segments()]
        if not any(math.dist(*s[:2]) > 0 for s in segments if len(s) >= 2):
            return "error-bar marker, but no error bar is drawn"
        return ""
    if isinstance(handle, Line2D) and handle.axes is None:  # a proxy: something of its style must be drawn
        style_of = (handle.get_linestyle(), handle.get_color())
        for artist in fig.findobj(lambda a: a is not handle and hasattr(a, "get_linestyle")):
            if artist.get_visible() and artist.get_linestyle() == style_of[0] and artist.get_linestyle() != "None":
                return ""
        return f"proxy of line style {style_of[0]} stands for nothing drawn"
    if isinstance(handle, Line2D) and not len(handle.get_xdata()):
        return "an empty line"
    return ""
