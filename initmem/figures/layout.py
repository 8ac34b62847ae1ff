"""Layout defects a reader sees, found without a person looking: every drawn text inside the canvas and clear of the
legends, a one-line title that fits the figure's width, and legend entries only for what is drawn (no error-bar
marker without an error bar).
`initmem figures --check-layout` runs it on every figure a figure notebook saves (`FigureBook.figure`)."""

import io
import math

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Text

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


def drawn_texts(fig: Figure) -> list[tuple[Text, object, object]]:
    """Every non-empty text the renderer draws as the artefact's PNG is written (its DPI), with its window extent
    and the canvas's (pixels)."""
    seen: list = []
    original = Text.draw

    def record(self, renderer):
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            seen.append((self, self.get_window_extent(renderer), self.figure.bbox.frozen()))

    FigureCanvasAgg(fig)
    Text.draw = record
    try:
        with matplotlib.rc_context(style.STYLE):
            fig.savefig(io.BytesIO(), format="png", dpi=style.DPI)
    finally:
        Text.draw = original
    return seen


def layout_problems(fig: Figure, legend_handles: dict[int, list] | None = None) -> list[str]:
    """What is wrong with `fig`'s layout, one line each (empty: nothing); legends are judged by the handles they were
    given (`legend_handles`, default `GIVEN`)."""
    given = GIVEN if legend_handles is None else legend_handles
    problems = []
    texts = drawn_texts(fig)
    for text, box, page in texts:
        if box.x0 < page.x0 - 1 or box.y0 < page.y0 - 1 or box.x1 > page.x1 + 1 or box.y1 > page.y1 + 1:
            problems.append(f"text outside the canvas: {text.get_text()!r} at {box.bounds} (canvas {page.bounds})")
    title = fig.get_suptitle()
    if "\n" in title:
        problems.append(f"title of more than one line: {title!r}")
    if fig._suptitle is not None and fig._suptitle.get_window_extent().width > fig.bbox.width:
        problems.append(f"title wider than the figure: {title!r}")
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    problems += covered_by_legend(texts, legends)
    for leg in legends:
        for handle, text in zip(given.get(id(leg), []), leg.get_texts(), strict=False):
            if why := undrawn(handle, fig):
                problems.append(f"legend entry {text.get_text()!r}: {why}")
    return problems


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
