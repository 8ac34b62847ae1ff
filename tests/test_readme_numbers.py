"""README.md's result numbers are T1 of the committed width-0.25 runs: the block between its markers is exactly what
`verdicts.readme_block` renders from the results tree behind figures/cpu_w025 (`paths.COMMITTED_SETS`: one place to
change when another set of runs replaces the 5-seed grid), so a number that differs fails here; so does a spread the
README's prose quotes outside the block that is no T1 or T9 row of that tree."""

import re
from pathlib import Path

import pytest
from conftest import PROSE_NAMES

from initmem.analysis import instrument_tables, tables, verdicts
from initmem.figures.paths import COMMITTED_SETS
from initmem.store.results import load_histories, load_runs

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
W025 = ROOT / next(tree for tree, out, _ in COMMITTED_SETS if out == "figures/cpu_w025")  # T1's tree
QUOTE = r"(\d+\.\d)(?: pp)? \[(\d+\.\d), (\d+\.\d)\]"  # "23.7 pp [23.0, 24.3]" or "7.9 [3.7, 12.4]"


def readme_block_text(text: str) -> str:
    """The text between the README's result markers (one pair of them, in order)."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise AssertionError(f"README.md needs one {BEGIN} … {END} pair")
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()


@pytest.fixture(scope="module")
def block() -> str:
    return verdicts.readme_block(load_runs(W025))


def test_readme_block_is_t1_of_the_committed_runs(block):
    assert readme_block_text((ROOT / "README.md").read_text(encoding="utf-8")) == block
    t1 = tables.optimizer_table(load_runs(W025)).set_index("optimizer")
    for prefix in ("", "end_"):  # both readings, each with its interval, as T1 gives them
        r = t1.loc["sgd"]
        quote = "{:.1f} [{:.1f}, {:.1f}]".format(*(r[f"{prefix}spread_pp{s}"] for s in ("", "_lo", "_hi")))
        assert "| sgd |" in block and quote in block.splitlines()[2], (prefix, quote)


def test_readme_block_check_fails_on_a_changed_number(block):
    changed = f"{BEGIN}\n{block.replace('| sgd | 23.7', '| sgd | 23.6')}\n{END}"
    assert readme_block_text(changed) != block
    with pytest.raises(AssertionError, match="one"):
        readme_block_text(f"{END}{BEGIN}")


def test_the_block_calls_its_interval_crude_only_with_two_seeds(block):
    """The pilot's two seeds make a crude interval (each σ_w's mean is a, b or their average); five do not."""
    assert "crude with 2 seeds" in verdicts.readme_block(load_runs(ROOT / "results" / "cpu_w025_pilot"))
    assert (load_runs(W025).groupby("optimizer")["seed"].nunique() == 5).all()
    assert "crude" not in block and "all 10,000 test images" in block


def test_every_interval_the_readme_prose_quotes_is_a_committed_t1_or_t9_spread():
    """README.md's prose outside its generated blocks: a spread quoted after an optimiser's name ("SGD 23.7 pp
    [23.0, 24.3]") is that optimiser's T1 (selected or end) or T9 spread in figures/cpu_w025's tree, and any other
    "s [lo, hi]" is some committed row's; a number left behind by new runs fails here."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("results", "verdicts"):  # the generated blocks: tested above and in test_verdicts.py
        text = re.sub(rf"<!-- {name}:begin -->.*<!-- {name}:end -->", "", text, flags=re.S)
    prose = " ".join(text.split())
    runs = load_runs(W025)
    spreads: dict[str, set[tuple[str, ...]]] = {}
    for r in tables.optimizer_table(runs).to_dict("records"):
        for p in ("", "end_"):
            spreads.setdefault(r["optimizer"], set()).add(
                tuple(f"{r[f'{p}spread_pp{s}']:.1f}" for s in ("", "_lo", "_hi")))
    for r in instrument_tables.selection_rule_table(runs, load_histories(W025)).itertuples():
        spreads.setdefault(r.optimizer, set()).add(tuple(f"{v:.1f}" for v in (r.spread_pp, r.spread_pp_lo,
                                                                                 r.spread_pp_hi)))
    for name, *quote in re.findall(r"(SGD\+momentum|SGD|AdamW|Adam|Muon),? " + QUOTE, prose):
        assert tuple(quote) in spreads[PROSE_NAMES[name]], (name, quote)
    anyone = set().union(*spreads.values())
    for quote in re.findall(QUOTE, prose):
        assert tuple(quote) in anyone, quote
