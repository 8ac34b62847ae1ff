"""README.md's result numbers are T1 of the committed width-0.25 runs: the block between its markers is exactly what
`tables.readme_block` renders from the results tree behind figures/cpu_w025 (`paths.COMMITTED_SETS`: one place to
change when another set of runs replaces the 5-seed grid), so a number that differs fails here; so does a spread its
prose quotes that is no T1 or T9 row of that tree or the 5-seed grid, and docs/findings.md's contrast under each
selection rule."""

import re
from pathlib import Path

import pytest
from conftest import PROSE_NAMES

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
    assert "| sgd | 23.7 |" in want  # the number the README's summary quotes
    changed = f"{BEGIN}\n{want.replace('| sgd | 23.7 |', '| sgd | 23.6 |')}\n{END}"
    assert readme_block_text(changed) != want
    with pytest.raises(AssertionError, match="one"):
        readme_block_text(f"{END}{BEGIN}")


def test_the_block_calls_its_interval_crude_only_with_two_seeds():
    """The pilot's two seeds make a crude interval (each σ_w's mean is a, b or their average); five do not."""
    assert "crude with 2 seeds" in tables.readme_block(load_runs(ROOT / "results" / "cpu_w025_pilot"))
    grid = load_runs(ROOT / "results" / "cpu_w025")
    assert (grid.groupby("optimizer")["seed"].nunique() == 5).all()
    block = tables.readme_block(grid)
    assert "| sgd | 23.7 | 23.0–24.3 | 5 |" in block and "crude" not in block and "all 10,000 test images" in block


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


QUOTE = r"(\d+\.\d)(?: pp)? \[(\d+\.\d), (\d+\.\d)\]"  # "23.7 pp [23.0, 24.3]" or "7.9 [3.7, 12.4]"


def committed_spreads() -> dict[str, set[tuple[str, str, str]]]:
    """optimiser (or the contrast row) -> every "s [lo, hi]" T1 and T9 give it in the trees the README draws on:
    figures/cpu_w025's tree and the 5-seed grid's complete optimisers (docs/experiments/grid/grid.py's `complete`)."""
    import runpy

    from initmem.analysis import instrument_tables
    from initmem.store.results import load_histories

    grid_script = runpy.run_path(str(ROOT / "docs" / "experiments" / "grid" / "grid.py"))
    trees = {W025: None, ROOT / grid_script["GRID"]: grid_script["complete"]}
    spreads: dict[str, set[tuple[str, str, str]]] = {}
    for tree, complete in trees.items():
        runs = load_runs(tree)
        if complete is not None:
            runs = runs[runs["optimizer"].isin(complete(runs))]
        rows = [*tables.optimizer_table(runs).itertuples(),
                *instrument_tables.selection_rule_table(runs, load_histories(tree)).itertuples()]
        for r in rows:
            spreads.setdefault(r.optimizer, set()).add(
                tuple(f"{v:.1f}" for v in (r.spread_pp, r.spread_pp_lo, r.spread_pp_hi)))
    return spreads


def test_every_interval_the_readme_result_quotes_is_a_committed_t1_or_t9_spread():
    """README.md's "The result" prose, beyond its generated block: a spread quoted after an optimiser's name
    ("SGD 23.7 pp [23.0, 24.3]") is that optimiser's T1 or T9 spread in figures/cpu_w025's tree or the grid, and any
    other "s [lo, hi]" is some committed row's; a number left behind by new runs fails here."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    section = text[text.index("## The result"):text.index("## Two commands")]
    prose = section.replace(section[section.index(BEGIN):section.index(END)], "")  # the block: the test above
    spreads = committed_spreads()
    named = re.findall(r"(SGD\+momentum|SGD|AdamW|Adam|Muon),? " + QUOTE, prose)
    for name, *quote in named:
        assert tuple(quote) in spreads[PROSE_NAMES[name]], (name, quote, sorted(spreads[PROSE_NAMES[name]]))
    every = re.findall(QUOTE, prose)
    assert len(every) >= 3 and len(named) >= 1  # the README quotes the grid's spreads: this test reads them
    anyone = set().union(*spreads.values())
    for quote in every:
        assert tuple(quote) in anyone, quote
