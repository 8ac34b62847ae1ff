"""What a reader meets on opening a notebook, without a browser: opening and saving it (jupytext's contents
manager, as JupyterLab does) leaves the .py byte-identical, a section's two notebooks have different tab titles,
the first heading asks its question in a header of at most ten lines, the last cells say what we found, and every
figure's and table's caption fits four lines and links its definitions."""

import ast
import asyncio
import inspect
import json
import re
import shutil
from pathlib import Path

import jupytext
import pytest

from initmem.figures.paths import LINK, caption_links

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.py")) + sorted((ROOT / "notebooks" / "figures").glob("0*.py"))


def test_every_notebook_survives_a_read_and_a_write_byte_for_byte():
    for nb in NOTEBOOKS:
        text = nb.read_text(encoding="utf-8")
        assert jupytext.writes(jupytext.reads(text, fmt="py:percent"), fmt="py:percent") == text, nb.name


def test_opening_and_saving_through_jupytexts_contents_manager_changes_nothing(tmp_path):
    cm_module = pytest.importorskip("jupytext.async_contentsmanager")
    large = pytest.importorskip("jupyter_server.services.contents.largefilemanager")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    cm = cm_module.build_async_jupytext_contents_manager_class(large.AsyncLargeFileManager)(root_dir=str(tmp_path))

    async def roundtrip(rel: str) -> None:
        model = cm.get(rel, content=True)
        model = await model if inspect.isawaitable(model) else model
        saved = cm.save({"type": "notebook", "format": "json", "content": model["content"]}, rel)
        await saved if inspect.isawaitable(saved) else None

    for nb in NOTEBOOKS:
        rel = nb.relative_to(ROOT).as_posix()
        asyncio.run(roundtrip(rel))
        assert (tmp_path / rel).read_bytes() == nb.read_bytes(), rel


def test_a_sections_two_notebooks_open_under_different_tab_titles():
    names = [nb.name for nb in NOTEBOOKS]
    assert len(set(names)) == len(names), names
    for nb in (ROOT / "notebooks").glob("0*.py"):
        assert (ROOT / "notebooks" / "figures" / f"{nb.stem}_figures.py").is_file(), nb.name


def test_every_notebook_asks_its_question_and_ends_with_what_we_found():
    for nb in NOTEBOOKS:
        cells = jupytext.read(nb).cells
        heading = next(c.source.splitlines()[0] for c in cells if c.cell_type == "markdown")
        assert heading.startswith("# ") and heading.rstrip().endswith("?"), (nb.name, heading)
        *_, md, code = cells
        assert md.cell_type == "markdown" and md.source.startswith("## What we found"), nb.name
        assert "docs/findings.md" in md.source, nb.name
        assert code.cell_type == "code" and ("findings.of(" in code.source or "what_we_found(" in code.source)


HEADER_LINES, CAPTION_LINES = 10, 4  # a notebook's first markdown cell; a figure's or table's title and caption
CAPTION_CHARS = 480  # about four lines of a notebook's caption, as a reader sees it (links as their text)


def _slug(heading: str) -> str:
    """A markdown heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _link_problems(text: str, base: Path) -> list[str]:
    """Each markdown link of `text` (relative to `base`) whose file or heading does not exist."""
    problems = []
    for label, target in LINK.findall(text):
        path, _, anchor = target.partition("#")
        file = (base / path).resolve()
        headings = [_slug(line.lstrip("#")) for line in file.read_text(encoding="utf-8").splitlines()
                    if line.startswith("#")] if file.is_file() and file.suffix == ".md" else []
        if not file.exists() or anchor and anchor not in headings:
            problems.append(f"[{label}]({target})")
    return problems


def _captions(nb: Path) -> list[tuple[str, int, str]]:
    """(artefact, source lines, words) of each title and caption a figure notebook gives `table`, `show_table` and
    `figure` (words: its string constants; a computed sentence is measured in the committed sidecars)."""
    found = []
    for node in ast.walk(ast.parse(nb.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("table", "show_table", "figure"):
            name, words = node.args[0], node.args[2:]
            text = "".join(c.value for w in words for c in ast.walk(w) if isinstance(c, ast.Constant)
                           and isinstance(c.value, str))
            found.append((ast.literal_eval(name), words[-1].end_lineno - words[0].lineno + 1, text))
    return found


def test_every_notebook_header_fits_ten_lines_and_its_links_resolve():
    for nb in NOTEBOOKS:
        first = next(c for c in jupytext.read(nb).cells if c.cell_type == "markdown")
        assert len(first.source.splitlines()) <= HEADER_LINES, (nb.name, len(first.source.splitlines()))
        assert _link_problems(first.source, nb.parent) == [], nb.name


def test_every_caption_fits_four_lines_and_links_its_definitions():
    written = [c for nb in (ROOT / "notebooks" / "figures").glob("0*.py") for c in _captions(nb)]
    assert len(written) >= 20  # every figure and table of the six figure notebooks
    for name, lines, text in written:
        assert lines <= CAPTION_LINES, (name, lines)
        assert _link_problems(text, ROOT) == [], name  # a caption's links are relative to the repository root
    assert sum("](docs/study.md#" in text for _, _, text in written) >= len(written) - 5  # most link a definition
    for sidecar in (ROOT / "figures").rglob("*.json"):  # as committed, computed sentences included
        rec = json.loads(sidecar.read_text(encoding="utf-8"))
        seen = caption_links(f"{rec['title']}. {rec.get('description', '')}", "text")
        assert len(seen) <= CAPTION_CHARS, (sidecar.relative_to(ROOT).as_posix(), len(seen))
