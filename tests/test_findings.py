"""The notebooks' closing "What we found" cells: their numbers are the committed tables' (computed, never typed),
their verdict is `verdicts.VERDICTS`'s, and a section without results says so instead."""

import re
from pathlib import Path

import pandas as pd
import pytest

from initmem.analysis import display, findings, tables, verdicts
from initmem.store.results import load_runs

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "results" / "cpu"


def committed(name: str) -> pd.DataFrame:
    return pd.read_csv(ROOT / "figures" / "tables" / f"{name}.csv")


@pytest.fixture(scope="module")
def t1() -> pd.DataFrame:
    return tables.optimizer_table(load_runs(CPU / "01_optimizers"))


def test_section_01_says_the_spreads_of_the_committed_t1(t1):
    found = findings.of("01_optimizers", {"T1_optimizers": t1})
    csv = committed("T1_optimizers").set_index("optimizer")
    shown = found.numbers.set_index("optimizer")
    assert shown["spread_pp"].round(6).tolist() == csv.loc[shown.index, "spread_pp"].round(6).tolist()
    others = csv["spread_pp"].drop(["sgd", "sgd − max(adaptive)"])
    built = t1.set_index("optimizer")  # T1 as its notebook builds it (the CSV keeps 6 digits: 11.15 for 11.1499…)
    for name in ("sgd", others.idxmin(), others.idxmax()):  # the sentence's spreads with T1's intervals, as T1.md
        v, lo, hi = (display.number(built.at[name, c], "percent")
                     for c in ("spread_pp", "spread_pp_lo", "spread_pp_hi"))
        assert f"{v} pp [{lo}, {hi}]" in found.sentence, found.sentence
    assert found.sentence.endswith("(95 % seed-resampled intervals).")
    one_seed = findings.of("01_optimizers", {"T1_optimizers": tables.optimizer_table(
        load_runs(CPU / "01_optimizers").query("seed == 0"))})  # no interval to show: none claimed
    assert "[" not in one_seed.sentence and "interval" not in one_seed.sentence
    md = found.markdown()
    lo, hi = (display.number(csv.at["sgd", c], "percent") for c in ("spread_pp_lo", "spread_pp_hi"))
    assert f"| sgd | 22.9 | {lo} | {hi} |" in md and "[docs/findings.md](../../docs/findings.md)" in md
    assert "sgd − max(adaptive))" not in found.sentence  # the contrast row is not one of the optimisers
    assert f"{verdicts.VERDICTS[1].line()}, read from `results/cpu_w025`" in md


@pytest.mark.parametrize("section", ["03_lr_l2", "04_batch_size", "05_depth"])
def test_sections_03_to_05_show_their_committed_tables_rows(section):
    runs = load_runs(CPU / section)
    built = findings.study_tables(section, runs)
    (name,) = built
    found = findings.of(section, built)
    csv = committed(name)
    for col in found.numbers.columns:
        got = found.numbers[col].tolist()
        want = csv[col].tolist()
        assert [round(v, 6) if isinstance(v, float) else v for v in got] == \
               [round(v, 6) if isinstance(v, float) else v for v in want], (section, col)
    assert not re.search(r"\d\.\d{3,}", found.sentence), found.sentence  # shown as the table shows them


def test_section_04_names_where_sgd_peaks():
    t4 = committed("T4_batch_size").set_index("batch_size")
    found = findings.of("04_batch_size", findings.study_tables("04_batch_size", load_runs(CPU / "04_batch_size")))
    peak = int(t4["sgd"].idxmax())
    assert f"sgd's spread is largest at b = {peak} ({display.number(t4['sgd'].max(), 'percent')} pp)" in found.sentence


def test_a_section_notebook_says_its_point_then_the_committed_study():
    point = load_runs(CPU / "01_optimizers").query("optimizer == 'sgd' and seed == 0")
    found = findings.what_we_found("01_optimizers", point)
    spread = point.groupby("sigma_w")["test_acc_at_best"].mean()
    assert found.sentence.startswith(f"This point: a spread of {100 * (spread.max() - spread.min()):.1f} pp across "
                                     "4 σ_w (1 seed(s)).")
    grid = tables.optimizer_table(load_runs(ROOT / "results" / "cpu_w025")).set_index("optimizer").loc["sgd"]
    assert ("The committed study (results/cpu_w025, this section's headline set): plain SGD's test-accuracy spread "
            f"across σ_w is {display.spread(grid['spread_pp'], grid['spread_pp_lo'], grid['spread_pp_hi'])}"
            in found.sentence), found.sentence
    assert "[docs/findings.md](../docs/findings.md)" in found.markdown()


def test_no_results_is_said_not_computed():
    found = findings.of("01_optimizers", {"T1_optimizers": "no results for section 01_optimizers in results/x"})
    assert found.sentence == "no results for section 01_optimizers in results/x." and found.numbers.empty
    assert "What we found" in found.markdown()
