"""Layout defects a reader sees without a person looking (`initmem.figures.layout`): text outside the canvas or
under a legend, a title of more than one line, a legend entry for nothing drawn. Every committed figure is checked
where it is made: tests/test_figures_clean.py regenerates every committed set with `initmem figures --check-layout`,
which fails on any such defect; here the checks catch planted ones, and `--check-layout` names the figure that
has one."""

import textwrap

import matplotlib
import pytest
from matplotlib.legend import Legend

from initmem.analysis import style
from initmem.errors import NotebookError
from initmem.figures import layout
from initmem.figures.artefacts import ROOT, make_figures


@pytest.fixture
def legend_handles(monkeypatch):
    """id(legend) -> the handles it was given, as `layout.record_legend_handles` keeps them (here, for this test)."""
    given: dict = {}
    original = Legend.__init__

    def init(self, parent, handles, labels, *args, **kw):
        original(self, parent, handles, labels, *args, **kw)
        given[id(self)] = list(handles)

    monkeypatch.setattr(Legend, "__init__", init)
    return given


def test_a_clipped_label_or_a_lying_legend_is_caught(legend_handles):
    with matplotlib.rc_context(style.STYLE):
        fig, (ax,) = style.new_figure(width=3.0, height=2.0)
        ax.plot([0, 1], [0, 1], label="a line")
        ax.errorbar([0, 1], [1, 0], yerr=[0, 0], label="one seed")  # whiskers of length zero
        ax.legend()
        style.caption_figure(fig, "a title", "a footer")
    problems = layout.layout_problems(fig, legend_handles)
    assert [p for p in problems if "one seed" in p] and not [p for p in problems if "a line" in p]
    assert not [p for p in problems if "outside" in p or "title" in p]
    fig.set_layout_engine("none")
    ax.set_ylabel("a label pushed off the canvas")
    ax.yaxis.set_label_coords(-0.6, 0.5)
    assert [p for p in layout.layout_problems(fig, legend_handles) if "a label pushed off the canvas" in p]
    fig.suptitle("a title\nof two lines")
    assert [p for p in layout.layout_problems(fig, legend_handles) if "more than one line" in p]


def test_a_value_label_under_the_legend_is_caught(legend_handles):
    """F13's bar labels once reached into its one-row legend when a collapse ratio passed 1.15 (its fixed ylim)."""
    with matplotlib.rc_context(style.STYLE):
        fig, (ax,) = style.new_figure(width=3.0, height=2.0)
        ax.bar([0, 1], [0.5, 1.1], label="bars")
        ax.set_ylim(0, 1.2)
        labels = [ax.text(0, 0.5, "0.50", ha="center", va="bottom"), ax.text(1, 1.1, "1.10", ha="center")]
        ax.legend(loc="upper right")
    problems = layout.layout_problems(fig, legend_handles)
    assert [p for p in problems if "under the legend" in p and "1.10" in p]
    assert not [p for p in problems if "0.50" in p or "'bars'" in p]  # clear of it; the legend's own text is not
    labels[1].set_position((1, 0.3))
    assert not [p for p in layout.layout_problems(fig, legend_handles) if "under the legend" in p]


PLANTED = '''
# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem.analysis import style
from initmem.figures.artefacts import FigureBook

s = FigureBook(results_dir, out_dir, "01_optimizers")


def clipped():
    fig, (ax,) = style.new_figure(width=3.0, height=2.0)
    fig.text(1.1, 0.5, "a label pushed off the canvas")  # figure coordinates: right of the canvas
    return fig


s.figure("F99_planted", clipped, "A planted figure")
'''


def test_check_layout_fails_on_a_planted_clipped_label_naming_the_figure(tmp_path):
    nb = tmp_path / "99_planted_figures.py"
    nb.write_text(textwrap.dedent(PLANTED).lstrip(), encoding="utf-8")
    with pytest.raises(NotebookError, match=r"F99_planted .*a label pushed off the canvas"):
        make_figures(ROOT / "results" / "cpu", tmp_path / "out", notebooks=[nb], progress=False, check_layout=True)
    assert (tmp_path / "out" / "F99_planted.png").is_file()  # written first: a reader can look at what is wrong


def test_an_annotation_on_the_data_and_two_texts_on_one_spot_are_caught(legend_handles):
    """F12 once wrote each panel's collapse ratio in a box over its lines, and its two bottom labels ran into each
    other; F9's legend sat on a curve: all are caught; a note or a legend clear of the data is not."""
    with matplotlib.rc_context(style.STYLE):
        fig, (ax,) = style.new_figure(width=3.0, height=2.0)
        ax.plot([0, 1], [0, 1], label="a line")
        ax.plot([0.2], [0.8], "o", label="a point")
        on_line = ax.text(0.5, 0.5, "on the line", ha="center", va="center")
        on_point = ax.text(0.2, 0.8, "on the point", ha="center", va="center")
        ax.text(0.55, 0.05, "clear of both")
    problems = layout.layout_problems(fig, legend_handles)
    assert [p for p in problems if "text over data" in p and "'on the line'" in p]
    assert [p for p in problems if "text over data" in p and "'on the point'" in p]
    assert not [p for p in problems if "clear of both" in p]
    on_line.set_position((0.9, 0.35))
    on_point.set_position((0.2, 0.55))
    assert not [p for p in layout.layout_problems(fig, legend_handles) if "text over data" in p]
    leg = ax.legend(loc="upper left")  # over the point at (0.2, 0.8)
    assert [p for p in layout.layout_problems(fig, legend_handles) if "legend over data: line 'a point'" in p]
    leg.set_loc("lower right")  # under the line's end, clear of the point: nothing drawn there
    assert not [p for p in layout.layout_problems(fig, legend_handles) if "legend over data" in p]
    fig.text(0.3, 0.02, "one label")
    fig.text(0.32, 0.02, "another label")
    assert [p for p in layout.layout_problems(fig, legend_handles)
            if "one spot" in p and "'one label'" in p and "'another label'" in p]
