"""README.md's result numbers are T1 of the committed width-0.25 runs: the block between its markers is exactly what
`tables.readme_block` renders from the results tree behind figures/cpu_w025 (`paths.COMMITTED_SETS`: one place to
change when the five-seed grid replaces the two-seed one), so a number that differs fails here."""

from pathlib import Path

import pytest

from initmem.analysis import tables
from initmem.figures.paths import COMMITTED_SETS
from initmem.store.results import load_runs

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
W025 = ROOT / next(tree for tree, out, _ in COMMITTED_SETS if out == "figures/cpu_w025")  # T1's tree


def readme_block_text(text: str) -> str:
    """The text between the README's result markers (one pair of them, in order)."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise AssertionError(f"README.md needs one {BEGIN} … {END} pair")
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()


def test_readme_block_is_t1_of_the_committed_runs():
    want = tables.readme_block(load_runs(W025))
    assert readme_block_text((ROOT / "README.md").read_text(encoding="utf-8")) == want


def test_readme_block_check_fails_on_a_changed_number():
    want = tables.readme_block(load_runs(W025))
    assert "| sgd | 22.5 |" in want  # the number the README's summary quotes
    changed = f"{BEGIN}\n{want.replace('| sgd | 22.5 |', '| sgd | 22.4 |')}\n{END}"
    assert readme_block_text(changed) != want
    with pytest.raises(AssertionError, match="one"):
        readme_block_text(f"{END}{BEGIN}")
