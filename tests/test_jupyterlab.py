"""JupyterLab end to end, as a researcher uses it: a real `jupyter lab` server, driven in headless Chromium.

The server serves a temporary copy of the repository's notebooks/ and params/ (initmem itself comes from the
working tree through PYTHONPATH), so running a notebook writes its results into the copy and never into the repo.
It checks that a percent-format `.py` opens *as a notebook* (jupytext), both by URL and by double-clicking it in
the file browser; that markdown is rendered and the `parameters` cell is there; and that Run All on the experiment
notebook's smoke-sized defaults trains, writes run folders and shows the summary in an output area, with
nothing on stderr.

Needs Debian's `chromium` (.ci/install-browser.sh) and the `playwright` Python package (driver only: its own
browser download cannot work offline); skips with the reason otherwise.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import jupytext
import pytest
from lab_server import ROOT, start_lab

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
EXPERIMENT = "notebooks/01_optimizers.py"
SUMMARY_TEXT = "What we found"  # the experiment notebook's last output (`initmem.what_we_found`)
STDERR = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"  # what JupyterLab paints red
NOTEBOOK = ".jp-NotebookPanel:visible"  # the notebook in the active main-area tab


def _heading(path: Path) -> str:
    """The text of the notebook's first markdown heading."""
    for cell in jupytext.read(path).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    raise AssertionError(f"{path} has no markdown heading")


def _parameters_line(path: Path) -> str:
    """The first code line of the notebook's `parameters` cell."""
    cells = [c for c in jupytext.read(path).cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path}: expected one cell tagged 'parameters', found {len(cells)}"
    return next(ln.strip() for ln in cells[0].source.splitlines() if ln.strip() and not ln.startswith("#"))


def _run_jsons(folder: Path, since: float) -> list[Path]:
    return [p for p in folder.rglob("run.json") if p.stat().st_mtime >= since and ".venv" not in p.parts]


def _wait_for_idle_kernel(page) -> None:
    """Wait until the active notebook's kernel is idle (Run All before it has connected runs nothing), answering
    "Select Kernel" with the preselected python3 as a user would: Lab asks when the notebook names no kernelspec."""
    from playwright.sync_api import expect

    idle = page.locator("#jp-main-statusbar").get_by_text(re.compile(r"\| Idle$"))
    ask = page.locator(".jp-Dialog", has_text="Select Kernel")
    expect(idle.or_(ask)).to_be_visible()
    if ask.is_visible():
        ask.locator(".jp-mod-accept").click()
    expect(idle).to_be_visible()


def _save_and_compare(page, root: Path, rel: str) -> None:
    """Save the active notebook as a user does (Ctrl+S): the .py is byte-identical to the repository's, the paired
    .ipynb is written beside it, and the tab is no longer marked modified (JupyterLab marks a notebook modified when
    its kernel starts: it records the kernel's language_info, which jupytext keeps out of the .py)."""
    from playwright.sync_api import expect

    page.keyboard.press("Control+s")
    tab = page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current")
    expect(tab).not_to_have_class(re.compile(r"\bjp-mod-dirty\b"))
    assert (root / rel).read_bytes() == (ROOT / rel).read_bytes(), f"saving {rel} in JupyterLab changed it"
    assert (root / rel).with_suffix(".ipynb").is_file()


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server over a temporary copy of notebooks/ and params/; stopped by its PID afterwards."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (install it with .ci/install-browser.sh)")
    pytest.importorskip("playwright.sync_api", reason="the playwright package is absent (pip install -e '.[dev]')")
    figures = sorted((ROOT / "notebooks" / "figures").glob("*.py"))
    if not (ROOT / EXPERIMENT).is_file() or not figures:
        pytest.skip(f"{EXPERIMENT} or notebooks/figures/*.py does not exist yet")
    repo = tmp_path / "repo"
    # no earlier results: the notebook would skip its complete runs and train nothing
    junk = shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints", "__pycache__", "results")
    for d in ("notebooks", "params"):
        if (ROOT / d).is_dir():
            shutil.copytree(ROOT / d, repo / d, ignore=junk)
    server = start_lab(repo, tmp_path / "jupyter")
    yield server
    server.stop()


def test_lab_opens_and_runs_percent_notebooks(lab, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    started = time.time()
    experiment = lab.root / EXPERIMENT
    figure = sorted((lab.root / "notebooks" / "figures").glob("*.py"))[0]

    # the jupytext server extension serves a percent .py as a notebook, parameters cell included
    model = lab.api(f"contents/{EXPERIMENT}?type=notebook&content=1")
    assert model["type"] == "notebook", model["type"]
    assert any("parameters" in c["metadata"].get("tags", []) for c in model["content"]["cells"])

    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
        )  # fmt: skip
        page = browser.pages[0] if browser.pages else browser.new_page()
        page.set_default_timeout(60_000)
        expect.set_options(timeout=60_000)  # assertions wait as long as actions: a loaded machine renders slowly
        try:
            # 1. the experiment notebook by URL: rendered markdown, the parameters cell, Run All with smoke defaults
            page.goto(lab.lab_url(EXPERIMENT))
            nb = page.locator(NOTEBOOK)
            expect(nb.locator(".jp-MarkdownOutput h1", has_text=_heading(experiment))).to_be_visible()
            expect(nb.locator(".jp-CodeCell .cm-content", has_text=_parameters_line(experiment))).to_have_count(1)
            _wait_for_idle_kernel(page)
            page.locator("#jp-MainMenu").get_by_text("Run", exact=True).click()
            page.locator(".lm-Menu-content").get_by_text("Run All Cells", exact=True).click()
            summary = nb.locator(".jp-OutputArea-output", has_text=SUMMARY_TEXT)
            try:
                expect(summary.first).to_be_visible(timeout=120_000)
            except AssertionError:
                outputs = "\n---\n".join(nb.locator(".jp-OutputArea-output").all_inner_texts())
                raise AssertionError(f"no output with {SUMMARY_TEXT!r} after Run All; outputs:\n{outputs}") from None
            errors = nb.locator(".jp-OutputArea-output", has_text="Traceback (most recent call last)")
            assert errors.count() == 0, errors.first.inner_text()
            stderr = nb.locator(STDERR)  # e.g. tqdm's "IProgress not found" without ipywidgets: none at all
            assert stderr.count() == 0, stderr.first.inner_text()
            page.screenshot(path=str(tmp_path / "experiment.png"))
            _save_and_compare(page, lab.root, EXPERIMENT)  # outputs and all: they go to the ignored .ipynb

            # 2. a figure notebook the way a user finds it: double-clicks in the file browser
            if not page.locator("#filebrowser").is_visible():
                page.locator(".jp-SideBar [data-id='filebrowser']").click()
            crumbs = page.locator("#filebrowser .jp-BreadCrumbs")
            page.locator("#filebrowser .jp-BreadCrumbs-home").click()
            expect(crumbs).not_to_contain_text("notebooks")
            listing = page.locator("#filebrowser .jp-DirListing-content .jp-DirListing-itemText")
            for name in ("notebooks", "figures", figure.name):
                # figures/ repeats names of notebooks/: wait for each listing, or a click lands on the old one's row
                listing.get_by_text(name, exact=True).dblclick()
                if name != figure.name:
                    expect(crumbs).to_contain_text(name)
            tab = page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current")
            expect(tab).to_have_attribute("title", re.compile(f"Path: notebooks/figures/{re.escape(figure.name)}"))
            fig = page.locator(NOTEBOOK)
            expect(fig.locator(".jp-MarkdownOutput h1", has_text=_heading(figure))).to_be_visible()
            expect(fig.locator(".jp-CodeCell .cm-content", has_text=_parameters_line(figure))).to_have_count(1)
            assert page.locator(".jp-FileEditor:visible").count() == 0, "the .py opened in the text editor"
            _wait_for_idle_kernel(page)
            page.screenshot(path=str(tmp_path / "figure.png"))
            _save_and_compare(page, lab.root, f"notebooks/figures/{figure.name}")
        except BaseException:
            page.screenshot(path=str(tmp_path / "failure.png"))  # what the browser showed: look at it first
            print(f"screenshot of the failure: {tmp_path / 'failure.png'}\nserver log:\n{lab.log_tail()}")
            raise
        finally:
            browser.close()

    for png in ("experiment.png", "figure.png"):
        data = (tmp_path / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, f"{png}: {len(data)} bytes"
    # Run All trained into the temporary copy, and nothing into the repository
    assert _run_jsons(lab.root, started), f"no run.json written under {lab.root}"
    assert not [p for d in ("results", "notebooks") for p in _run_jsons(ROOT / d, started)]
