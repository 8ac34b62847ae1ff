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
        assert len(v.limits) <= 200 and len(v.decided_limits) <= 200, v.finding


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
    assert f"{v.line()}, read from `{v.source}`" in md
    assert verdicts.headline_set("01_optimizers") == "results/cpu_w025"
    assert verdicts.headline_set("03_lr_l2") == "results/cpu"


@pytest.mark.parametrize("outcomes, want", [
    ({"1. the clock, time route": "held", "4. T_adapt": "held"}, "consistent"),
    ({"1. the clock, time route": "refuted", "4. T_adapt": "refuted"}, "contradicted"),
    ({"1. the clock, time route": "refuted", "4. T_adapt": "held"}, "partly"),
    ({"1. the clock, time route": "not on f (below)", "4. T_adapt": "held"}, "partly"),
    ({"1. the clock, time route": "held", "4. T_adapt": "pending"}, "not shown")])  # still its word until read
def test_a_clock_finding_takes_its_word_from_the_registered_criteria(monkeypatch, outcomes, want):
    monkeypatch.setattr(verdicts, "_t10", lambda p: ("r", outcomes[p]))
    v = verdicts.VERDICTS[7]
    assert v.decided_by == tuple(outcomes) and v.word == want
    assert v.source == ("results/cpu_w025_clocks" if want != "not shown" else v.evidence)
    assert v.what_not == (v.limits if want == "not shown" else v.decided_limits)


def test_finding_4s_l2_half_joins_its_lr_half():
    v = verdicts.VERDICTS[4]
    assert v.decided_by == (verdicts.L2,) and v.known == ("consistent",)
    for outcome, want in (("held", "consistent"), ("refuted", "partly"), ("pending", "partly")):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(verdicts, "_t10", lambda p, o=outcome: ("r", o))
            assert v.word == want


def _reading(route, lr, epoch, t_sgd, g, epochs=60, optimizer="sgd", b=32, wd=0.0):
    return {"route": route, "optimizer": optimizer, "lr": lr, "batch_size": b, "weight_decay": wd, "epochs": epochs,
            "epoch": epoch, "T_SGD": t_sgd, "T_L2": 0.0, "T_adapt": 11.16 if optimizer == "adam" else 1.0, "G_pp": g,
            "se_pp": 0.8, "G_lo": g - 1.6, "G_hi": g + 1.5, "n": 3, "fitted": "6/6"}


def test_decided_verdicts_quote_their_readings_within_a_cell(monkeypatch):
    """Once T10 decides, findings 3, 4, 5 and 7 quote its readings with intervals and n, each cell ≤ 200 chars."""
    import pandas as pd

    from initmem.analysis import clocks
    r = pd.DataFrame([
        _reading("lr", 0.01, 60, 0.0116, 20.5), _reading("lr", 0.1, 60, 1.16, 4.1),
        _reading("time", 0.0562, 60, 0.36, 8.3, epochs=180), _reading("time", 0.0562, 180, 1.09, 7.9, epochs=180),
        _reading("time", 0.01, 60, 0.0116, 20.6, epochs=600), _reading("time", 0.01, 600, 0.116, 17.4, epochs=600),
        _reading("batch", 0.01, 60, 0.046, 15.0, b=16), _reading("batch", 0.01, 120, 0.0058, 21.0, 120, b=64),
        _reading("batch", 0.01, 120, 0.0014, 21.5, 120, b=128),
        _reading("adaptive", 3e-3, 60, 0.0, 9.0, optimizer="adam"),
        _reading("adaptive", 1e-3, 120, 0.0, 10.0, 180, optimizer="adam"),
        _reading("adaptive", 1e-3, 180, 0.0, 8.0, 180, optimizer="adam"),
        _reading("L2", 0.01, 60, 0.0116, 12.0, wd=0.03), _reading("L2", 0.01, 60, 0.0116, 2.0, wd=0.3)])
    said = {name: ("ΔG = −2.1 pp [−3.5, −0.8] (n = 3)", "consistent") if fn is None else fn(r)
            for name, (_, fn) in clocks.PREDICTIONS.items()}
    crit = pd.DataFrame([{"prediction": n, "reading": g, "outcome": o} for n, (g, o) in said.items()])
    crit = crit.set_index("prediction")
    assert "pending" not in crit["outcome"].tolist()
    monkeypatch.setattr(verdicts, "_clock_readings", lambda: (crit, r))
    table = verdicts.findings_table()
    for f in (3, 4, 5, 7):
        assert verdicts.VERDICTS[f].decided() and "`results/cpu_w025_clocks`" in table
    for row in table.splitlines()[2:]:
        assert all(len(cell.strip()) <= 200 for cell in row.strip("|").split(" | ")), row
    assert "lr 0.01 × 600: 17.4 [15.8, 18.9] vs f" in table
    assert "at T_adapt 11.2 by time 8.0 [6.4, 9.5], by lr 9.0 [7.4, 10.5] (n = 3)" in table
