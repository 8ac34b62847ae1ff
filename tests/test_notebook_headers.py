"""What a reader meets on opening a notebook, without a browser: opening and saving it (jupytext's contents
manager, as JupyterLab does) leaves the .py byte-identical, a section's two notebooks have different tab titles,
the first heading asks its question, and the last cells say what we found."""

import asyncio
import inspect
import shutil
from pathlib import Path

import jupytext
import pytest

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
