"""One verdict per finding, told once: `verdicts.VERDICTS` is the source; docs/study.md defines its words,
docs/findings.md's table and headings, README's verdict table and the notebooks' "What we found" show it."""

import re
from pathlib import Path

import pytest

from initmem.analysis import findings, verdicts

ROOT = Path(__file__).resolve().parents[1]


def block(text: str, name: str) -> str:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    assert text.count(begin) == 1 and text.count(end) == 1, name
    return text.split(begin)[1].split(end)[0].strip()


def test_the_words_are_docs_study_mds():
    study = (ROOT / "docs" / "study.md").read_text(encoding="utf-8")
    section = study.split("## Verdicts\n")[1].split("\n## ")[0]
    assert tuple(re.findall(r"^- \*\*(.+?)\*\* —", section, flags=re.MULTILINE)) == verdicts.WORDS
    assert sorted(verdicts.VERDICTS) == list(range(1, 8))
    for v in verdicts.VERDICTS.values():
        assert v.word in verdicts.WORDS, v
        heading = re.search(rf"^### (Finding {v.finding}: .+)$", study, flags=re.MULTILINE).group(1)
        assert verdicts._slug(heading) == v.anchor, (heading, v.anchor)  # the link lands on study.md's heading
        assert len(v.limits) <= 200, v.finding


@pytest.fixture(scope="module")
def table() -> str:
    return verdicts.findings_table()


def test_findings_md_shows_the_verdicts(table):
    text = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    assert block(text, "verdicts") == table
    for v in verdicts.VERDICTS.values():
        assert re.search(rf"^{re.escape(v.heading())}$", text, flags=re.MULTILINE), v.heading()
        assert len(re.findall(rf"^## {v.finding}\. ", text, flags=re.MULTILINE)) == 1
    for row in table.splitlines()[2:]:
        assert all(len(cell.strip()) <= 200 for cell in row.strip("|").split(" | ")), row


def test_readme_shows_the_verdicts():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert block(text, "verdicts") == verdicts.readme_table()


def test_findings_claim_that_the_contrast_stays_above_zero_is_the_committed_runs():
    """findings.md, finding 2: SGD − max(adaptive) stays above 0 at the selected epoch, at the highest validation
    accuracy and at the end of training: every such interval's low end, from T9 and T1 of the headline set."""
    from initmem.analysis import instrument_tables, tables
    from initmem.store.results import load_histories, load_runs
    runs = load_runs(ROOT / verdicts.HEADLINE)
    t9 = instrument_tables.selection_rule_table(runs, load_histories(ROOT / verdicts.HEADLINE))
    lows = t9[(t9["optimizer"] == tables.CONTRAST) & (t9["rule"] != "last epoch")]["spread_pp_lo"].tolist()
    lows.append(float(tables.optimizer_table(runs).set_index("optimizer").at[tables.CONTRAST, "end_spread_pp_lo"]))
    assert len(lows) == 3 and min(lows) > 0, lows
    assert "stays above 0 at the selected epoch, at the highest validation accuracy and at the end of training" in \
        " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())


def test_what_we_found_says_the_verdict_and_its_set():
    found = findings.of("03_lr_l2", {"T3_lr_l2": "no T3"})
    md = found.markdown()
    v = verdicts.VERDICTS[4]
    assert f"{v.line()}, read from `{v.evidence}`" in md
    assert verdicts.headline_set("01_optimizers") == "results/cpu_w025"
    assert verdicts.headline_set("03_lr_l2") == "results/cpu"
