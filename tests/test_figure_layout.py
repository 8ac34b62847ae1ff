"""Layout defects a reader sees without a person looking: every committed figure, re-created in this process by its
figure notebook's own cells on the committed results, keeps every drawn text inside its canvas, has a one-line
title that fits its width, and legend entries only for what is drawn (no error-bar marker without an error bar)."""

import io
import math
from pathlib import Path

import jupytext
import matplotlib
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Text

from initmem.analysis import style
from initmem.figures import artefacts

ROOT = Path(__file__).resolve().parents[1]
SETS = [(results, out, nbs) for results, out, nbs in artefacts.COMMITTED_SETS]


def run_figure_notebook(nb: Path, results: Path, out: Path) -> dict[str, Figure]:
    """Execute the code cells of figure notebook `nb` here (its parameters set to `results`/`out`); the figures its
    `FigureBook` built, by name."""
    ns: dict = {}
    for cell in jupytext.read(nb).cells:
        if cell.cell_type != "code":
            continue
        src = cell.source
        if "parameters" in cell.metadata.get("tags", []):
            src += f"\nresults_dir = {str(results)!r}\nout_dir = {str(out)!r}\n"
        exec(compile(src, str(nb), "exec"), ns)  # noqa: S102 - the repository's own notebook
    return ns["s"].figures


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


def layout_problems(fig: Figure, legend_handles: dict) -> list[str]:
    """What is wrong with `fig`'s layout, one line each (empty: nothing)."""
    problems = []
    for text, box, page in drawn_texts(fig):
        if box.x0 < page.x0 - 1 or box.y0 < page.y0 - 1 or box.x1 > page.x1 + 1 or box.y1 > page.y1 + 1:
            problems.append(f"text outside the canvas: {text.get_text()!r} at {box.bounds} (canvas {page.bounds})")
    title = fig.get_suptitle()
    if "\n" in title:
        problems.append(f"title of more than one line: {title!r}")
    if fig._suptitle is not None and fig._suptitle.get_window_extent().width > fig.bbox.width:
        problems.append(f"title wider than the figure: {title!r}")
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    for leg in legends:
        for handle, text in zip(legend_handles.get(id(leg), []), leg.get_texts(), strict=False):
            if why := undrawn(handle, fig):
                problems.append(f"legend entry {text.get_text()!r}: {why}")
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


@pytest.fixture
def legend_handles(monkeypatch):
    """id(legend) -> the handles it was given (a Legend keeps only proxies of them)."""
    given: dict = {}
    original = Legend.__init__

    def init(self, parent, handles, labels, *args, **kw):
        original(self, parent, handles, labels, *args, **kw)
        given[id(self)] = list(handles)

    monkeypatch.setattr(Legend, "__init__", init)
    return given


@pytest.mark.parametrize(("results", "out", "notebooks"), SETS, ids=[out for _, out, _ in SETS])
def test_every_committed_figure_is_laid_out_for_a_reader(results, out, notebooks, tmp_path, legend_handles,
                                                         capsys):
    nbs = ([artefacts.NOTEBOOK_DIR / f"{nb}{artefacts.FIGURES_SUFFIX}.py" for nb in notebooks] if notebooks
           else artefacts.figure_notebooks())
    checked, problems = [], []
    for nb in nbs:
        for name, fig in run_figure_notebook(nb, ROOT / results, tmp_path / nb.stem).items():
            checked.append(name)
            problems += [f"{out}/{name}: {p}" for p in layout_problems(fig, legend_handles)]
    assert not problems, "\n".join(problems)
    committed = sorted(p.stem for p in (ROOT / out).glob("F*.png"))
    assert sorted(checked) == committed  # every committed figure, and only those, was checked


def test_a_clipped_label_or_a_lying_legend_is_caught(legend_handles):
    with matplotlib.rc_context(style.STYLE):
        fig, (ax,) = style.new_figure(width=3.0, height=2.0)
        ax.plot([0, 1], [0, 1], label="a line")
        ax.errorbar([0, 1], [1, 0], yerr=[0, 0], label="one seed")  # whiskers of length zero
        ax.legend()
        style.caption_figure(fig, "a title", "a footer")
    assert [p for p in layout_problems(fig, legend_handles) if "one seed" in p]
    assert not [p for p in layout_problems(fig, legend_handles) if "outside" in p or "title" in p]
    fig.set_layout_engine("none")
    ax.set_ylabel("a label pushed off the canvas")
    ax.yaxis.set_label_coords(-0.6, 0.5)
    assert [p for p in layout_problems(fig, legend_handles) if "a label pushed off the canvas" in p]
    fig.suptitle("a title\nof two lines")
    assert [p for p in layout_problems(fig, legend_handles) if "more than one line" in p]
