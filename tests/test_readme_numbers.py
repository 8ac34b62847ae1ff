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


def test_the_findings_quote_the_contrast_under_each_selection_rule_as_t9_gives_it():
    """docs/findings.md's sentence on T9 (the contrast under each selection rule) against T9 of the same tree."""
    from initmem.analysis import display, instrument_tables
    from initmem.store.results import load_histories

    t = instrument_tables.selection_rule_table(runs := load_runs(W025), load_histories(W025))
    assert len(runs) and (t["optimizer"] == tables.CONTRAST).sum() == 3
    c = t[t["optimizer"] == tables.CONTRAST].set_index("rule")
    quote = {rule: display.spread(*c.loc[rule, ["spread_pp", "spread_pp_lo", "spread_pp_hi"]])
             for rule in ("lowest validation loss", "highest validation accuracy", "last epoch")}
    text = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    assert (f"the contrast is {quote['lowest validation loss']} at the lowest validation loss, "
            f"{quote['highest validation accuracy']} at the highest validation accuracy and "
            f"{quote['last epoch']} at the last epoch") in text
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = "the contrast's interval stays above 0 whichever epoch is reported" in readme
    assert said and (c["spread_pp_lo"] > 0).all()  # the README's claim, true of every rule's interval
