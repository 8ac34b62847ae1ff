"""Committed results are byte-exact on every platform: `.gitattributes` keeps git from converting results/ and
figures/ (core.autocrlf=true is Git for Windows' default), so a clone with that setting verifies every run; without
the attributes, verification names the line endings, not tampering."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from initmem.errors import ResultsError
from initmem.store.results import load_runs

REPO = Path(__file__).resolve().parents[1]
RUN = "results/cpu/01_optimizers/200285748550"  # one committed run (the golden SGD run)

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (REPO / RUN).is_dir(),
                                reason="needs git and the committed results")


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@invalid", *args], cwd=cwd, check=True,
                   capture_output=True)


def _clone_with_autocrlf(tmp_path: Path, attributes: bool) -> Path:
    """A repository holding one committed run (and the project's .gitattributes, or none), cloned with
    core.autocrlf=true."""
    src = tmp_path / "src"
    shutil.copytree(REPO / RUN, src / RUN)
    if attributes:
        shutil.copy(REPO / ".gitattributes", src / ".gitattributes")
    _git("init", "-q", cwd=src)
    _git("add", "-A", cwd=src)
    _git("commit", "-q", "-m", "one run", cwd=src)
    _git("-c", "core.autocrlf=true", "clone", "-q", str(src), str(tmp_path / "clone"), cwd=tmp_path)
    return tmp_path / "clone"


def test_a_clone_with_autocrlf_verifies_the_committed_runs(tmp_path):
    clone = _clone_with_autocrlf(tmp_path, attributes=True)
    assert (clone / RUN / "history.csv").read_bytes() == (REPO / RUN / "history.csv").read_bytes()
    assert list(load_runs(clone / "results")["run_id"]) == [Path(RUN).name]


def test_without_the_attributes_the_converted_line_endings_are_named(tmp_path):
    clone = _clone_with_autocrlf(tmp_path, attributes=False)
    assert b"\r\n" in (clone / RUN / "history.csv").read_bytes()  # git did convert them
    with pytest.raises(ResultsError, match=r"has CRLF line endings; it was written with LF") as err:
        load_runs(clone / "results")
    assert "changed after it was written" not in str(err.value) and "\n" not in str(err.value)


def test_the_attributes_cover_every_byte_compared_tree():
    text = (REPO / ".gitattributes").read_text()
    assert "results/** -text" in text and "figures/** -text" in text
