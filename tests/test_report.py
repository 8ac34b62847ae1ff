"""initmem.figures.report: executed notebooks of a results tree → standalone HTML pages plus an index.

The executed notebooks are made by papermill itself from tiny percent-format sources (no torch in the kernel), so
the test reads papermill's real metadata (duration, exception flag) and real error outputs.
"""

from __future__ import annotations

import re
import warnings

import jupytext
import pytest

from initmem.cli.commands import main
from initmem.errors import ResultsError
from initmem.figures.report import export_reports

SOURCE = """# %% [markdown]
# # Tiny section
# %% tags=["parameters"]
spread_pp = 1.0
fail = False
# %%
if fail:
    raise RuntimeError("kernel says no")
print(f"spread_pp = {spread_pp:.1f} percentage points")
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """results/<profile>/<section>/notebooks/<point>.ipynb: two ok points in one section, a failed one in another."""
    import papermill

    root = tmp_path_factory.mktemp("results")
    nb = jupytext.reads(SOURCE, fmt="py:percent")
    for section, point, params in (
        ("01_optimizers", "sgd-b128", {"spread_pp": 26.5}),
        ("01_optimizers", "adam-b128", {"spread_pp": 4.0}),
        ("02_long", "sgd-e5000", {"fail": True}),
    ):
        out = root / "cpu" / section / "notebooks" / f"{point}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            papermill.execute_notebook(nb, str(out), parameters=params, kernel_name="python3", language="python",
                                       progress_bar=False, cwd=str(root))  # fmt: skip
        except papermill.PapermillExecutionError:
            assert params.get("fail"), "the ok notebook failed"
    return root


def _index_rows(index_html: str) -> dict[str, str]:
    return {m[0]: m[1] for m in re.findall(r'<a href="([^"]+)">[^<]*</a></td>\s*<td class="(\w+)"', index_html)}


def test_export_writes_pages_with_outputs_and_an_index(results, tmp_path):
    out = tmp_path / "reports"
    written = export_reports(results / "cpu", out)
    adam, ok, failed = (
        out / s / f"{p}.html"
        for s, p in (("01_optimizers", "adam-b128"), ("01_optimizers", "sgd-b128"), ("02_long", "sgd-e5000"))
    )
    assert written == [adam, ok, failed, out / "index.html"]
    assert "spread_pp = 26.5 percentage points" in ok.read_text()  # the cell's output, not just its source
    assert "Tiny section" in ok.read_text()
    assert "kernel says no" in failed.read_text()  # the traceback is in the page
    index = (out / "index.html").read_text()
    assert _index_rows(index) == {
        "01_optimizers/adam-b128.html": "ok", "01_optimizers/sgd-b128.html": "ok", "02_long/sgd-e5000.html": "failed",
    }  # fmt: skip
    assert "RuntimeError: kernel says no" in index
    assert "<summary>spread_pp=26.5</summary>" in index  # what tells the section's points apart, in sight
    assert "&quot;spread_pp&quot;: 26.5" in index  # and every injected parameter, one click away
    assert "2 ok, 1 failed" in index


def test_a_tree_of_profiles_keeps_them_apart(results, tmp_path):
    written = export_reports(results, tmp_path / "r")
    assert tmp_path / "r" / "cpu" / "01_optimizers" / "sgd-b128.html" in written
    assert set(_index_rows((tmp_path / "r" / "index.html").read_text())) == {
        "cpu/01_optimizers/adam-b128.html", "cpu/01_optimizers/sgd-b128.html", "cpu/02_long/sgd-e5000.html",
    }  # fmt: skip


def test_unreadable_notebook_is_listed_not_fatal(results, tmp_path):
    bad = results / "cpu" / "03_l2" / "notebooks" / "broken.ipynb"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"cells": [')  # truncated, as a killed writer leaves it
    try:
        with pytest.warns(UserWarning, match="broken.ipynb"):
            written = export_reports(results / "cpu", tmp_path / "r")
    finally:
        bad.unlink()
        bad.parent.rmdir()
        bad.parent.parent.rmdir()
    assert len(written) == 4  # three pages and the index, no page for the broken file
    index = (tmp_path / "r" / "index.html").read_text()
    assert re.search(r"<td>broken</td>\s*<td class=\"unreadable\">", index)


def test_incomplete_notebook_is_marked(results, tmp_path):
    """papermill writes the notebook as it goes: no end_time means it was killed (or is still running)."""
    import nbformat

    src = results / "cpu" / "01_optimizers" / "notebooks" / "sgd-b128.ipynb"
    nb = nbformat.read(src, as_version=4)
    nb.metadata.papermill.end_time = None
    tree = tmp_path / "res"
    (tree / "04_batch" / "notebooks").mkdir(parents=True)
    nbformat.write(nb, tree / "04_batch" / "notebooks" / "b256.ipynb")
    export_reports(tree, tmp_path / "r")
    assert _index_rows((tmp_path / "r" / "index.html").read_text()) == {"04_batch/b256.html": "incomplete"}


def test_no_executed_notebooks_is_a_clear_error(tmp_path):
    (tmp_path / "01_optimizers" / "abc123").mkdir(parents=True)
    with pytest.raises(ResultsError, match=r"no executed notebooks under .*looked for \*\*/notebooks/\*\.ipynb"):
        export_reports(tmp_path, tmp_path / "out")
    with pytest.raises(ResultsError, match="does not exist"):
        export_reports(tmp_path / "nowhere", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_mirrors_export_reports(results, tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean tree exports without warnings
        assert main(["report", "--results", str(results / "cpu"), "--out", str(tmp_path / "r")]) == 0
    assert "3 notebooks exported" in capsys.readouterr().out
    assert (tmp_path / "r" / "02_long" / "sgd-e5000.html").is_file()
    assert main(["report", "--results", str(tmp_path / "empty"), "--out", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("initmem report: error:") and "empty" in err and len(err.strip().splitlines()) == 1
