"""The matched-learning-rate control: its table reads the effective lr off each configuration, and the committed
docs/experiments/matched_lr/matched_lr.md (what docs/findings.md quotes) is what the committed runs give."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from initmem.analysis import plots, tables
from initmem.store.results import load_runs

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "docs" / "experiments" / "matched_lr" / "matched_lr.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("matched_lr", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def w025():
    runs = load_runs(ROOT / "results" / "cpu_w025")
    return runs[runs["optimizer"].isin(["sgd", "sgd_momentum"])].reset_index(drop=True)


def test_the_effective_lr_folds_momentum_in_and_orders_the_rows(w025):
    t = tables.effective_lr_table(w025)
    assert list(t["optimizer"]) == ["sgd", "sgd_momentum"]  # effective 0.01, then 0.1
    assert t["effective_lr"].tolist() == pytest.approx([0.01, 0.1])
    assert t["momentum"].tolist() == [0.0, 0.9]
    assert t["T_SGD_eff"].tolist() == pytest.approx([0.011625, 1.1625])  # 3,720 steps × η_eff² / 32
    assert (t["spread_pp_lo"] <= t["spread_pp"]).all() and (t["spread_pp"] <= t["spread_pp_hi"]).all()
    assert t.attrs["accuracy"] == "test_acc_at_best"  # the cpu_w025 runs have no whole-test accuracy


def test_selected_after_tau_counts_runs_selected_once_interpolated(w025):
    moved = w025.assign(tau_interp=w025["best_epoch"])  # every run selected exactly at its tau_interp
    assert set(tables.effective_lr_table(moved)["selected_after_tau"]) == {"6/6"}
    never = w025.assign(tau_interp=float("nan"))  # no run interpolated
    assert set(tables.effective_lr_table(never)["selected_after_tau"]) == {"0/6"}


def test_a_mix_of_whole_and_subset_test_accuracies_uses_the_subset_for_every_row(w025):
    mixed = pd.concat([w025.assign(test_acc_full_at_best=float("nan")).iloc[:6],
                       w025.iloc[6:].assign(test_acc_full_at_best=0.0)], ignore_index=True)
    t = tables.effective_lr_table(mixed)
    assert t.attrs["accuracy"] == "test_acc_at_best"
    assert t["spread_pp"].tolist() == pytest.approx(tables.effective_lr_table(w025)["spread_pp"].tolist())


def test_the_last_epoch_spread_is_the_range_of_the_seed_mean_final_accuracies(w025):
    t = tables.effective_lr_table(w025)
    for r in t.itertuples():
        g = w025[w025["optimizer"] == r.optimizer]
        by_sigma = g.groupby("sigma_w")["final_test_acc"].mean()
        assert r.last_spread_pp == pytest.approx(100 * (by_sigma.max() - by_sigma.min()))
        assert r.last_spread_pp_lo <= r.last_spread_pp <= r.last_spread_pp_hi
    # a change to the last epoch's accuracies moves the last-epoch spread and leaves the selected one
    shifted = w025.assign(final_test_acc=w025["final_test_acc"] + 0.05 * (w025["sigma_w"] == 0.1))
    u = tables.effective_lr_table(shifted)
    assert u["spread_pp"].tolist() == pytest.approx(t["spread_pp"].tolist())
    assert u["last_spread_pp"].tolist() != pytest.approx(t["last_spread_pp"].tolist())


def test_the_figure_draws_both_selection_rules_per_optimiser(w025):
    fig = plots.spread_vs_effective_lr(w025)
    (ax,) = fig.axes
    assert ax.get_legend_handles_labels()[1] == ["sgd (lr 0.01), selected epoch", "sgd, last epoch",
                                                 "sgd_momentum (lr 0.01), selected epoch", "sgd_momentum, last epoch"]
    assert ax.get_xscale() == "log"


def test_the_committed_control_table_is_what_the_committed_runs_give(script):
    committed = (SCRIPT.parent / "matched_lr.md").read_text(encoding="utf-8")
    assert committed == script.report(script.control_runs())
