"""The committed figures/ are what the figures command makes from the committed results, the way a user meets
them: `git clone` the repository, run `initmem figures` (what `make figures` runs: every set of
`initmem.figures.artefacts.COMMITTED_SETS`, results/cpu -> figures/, results/cpu_steps and results/cpu_w025 ->
figures/<profile>/) in the clone, with the clone's own code, and `git status --porcelain` there stays empty.

While the working tree has changes nobody committed yet, the clone gets them on top of HEAD (one commit in the
clone), so the check is about the code and figures under test; once they are committed the clone is a plain clone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from initmem.figures.artefacts import COMMITTED_SETS

REPO = Path(__file__).resolve().parents[1]
KINDS = {".png", ".pdf", ".md", ".tex", ".csv", ".json"}

pytestmark = pytest.mark.skipif(not (REPO / ".git").exists() or shutil.which("git") is None
                                or not (REPO / "results" / "cpu").is_dir(),
                                reason="needs a git checkout with the committed results/cpu")


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _clone_with_working_tree(dst: Path) -> Path:
    _git("clone", "--quiet", str(REPO), str(dst), cwd=REPO.parent)
    changed = [f for f in _git("ls-files", "-z", "--modified", "--others", "--exclude-standard", cwd=REPO)
               .split("\0") if f]
    for f in dict.fromkeys(changed):
        src, to = REPO / f, dst / f
        if src.is_file():
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, to)
        else:  # deleted in the working tree
            to.unlink(missing_ok=True)
    if changed:
        _git("add", "-A", cwd=dst)
        _git("-c", "user.name=test", "-c", "user.email=test@invalid", "commit", "--quiet", "--allow-empty", "-m",
             "the working tree under test", cwd=dst)
    assert _git("status", "--porcelain", cwd=dst) == ""
    return dst


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    dst = _clone_with_working_tree(tmp_path_factory.mktemp("clone") / "initmem")
    env = {**os.environ, "PYTHONPATH": str(dst)}  # the clone's initmem, in this process and in papermill's kernels
    where = subprocess.run([sys.executable, "-c", "import initmem; print(initmem.__file__)"], cwd=dst, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(dst), where
    # --check-layout: every figure's layout is checked as it is made (tests/test_figure_layout.py)
    proc = subprocess.run([sys.executable, "-m", "initmem.cli", "figures", "--no-progress", "--check-layout"],
                          cwd=dst, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dst, proc


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*")
                  if p.is_file() and p.suffix in KINDS and ".executed" not in p.parts)


def test_the_figures_command_leaves_a_fresh_clone_clean(clone):
    dst, proc = clone
    for _, out, nbs in COMMITTED_SETS:  # it did run the notebooks of every set
        first = nbs[0] if nbs else "01_optimizers"
        assert (dst / out / ".executed" / f"{first}_figures.ipynb").is_file(), out
    status = _git("status", "--porcelain", "--untracked-files=all", cwd=dst)
    assert status == "", f"the figures command changed the clone (run `make figures` and commit figures/):\n{status}"
    assert f"{len(_files(dst / 'figures'))} files" in proc.stdout  # every artefact and README.md, counted once
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    said = re.search(r"`make figures` regenerates .*?, (\d+) files,", readme, re.S)
    assert said and f"{said.group(1)} files written" in proc.stdout, "README's count of what `make figures` writes"


def test_the_committed_figures_are_what_the_figures_command_makes_from_the_committed_results(clone):
    """Byte for byte, sidecars included (they hold no generation time and no absolute path of this machine)."""
    dst, _ = clone
    made, committed = dst / "figures", REPO / "figures"
    assert _files(made) == _files(committed)
    differ = [str(rel) for rel in _files(made) if (made / rel).read_bytes() != (committed / rel).read_bytes()]
    assert not differ, f"figures/ is stale, run `make figures`: {differ}"
    assert (made / "README.md").read_bytes() == (committed / "README.md").read_bytes()
