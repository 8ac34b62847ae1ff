"""The reports of docs/experiments that docs/findings.md quotes, each kept equal to what the committed runs give: the
matched-learning-rate control (its table reads the effective lr off each configuration) and Adam's late collapses
against ε and AMSGrad (the spike table counts what metrics.collapse_epoch finds in each run, the figure marks only what
happened)."""

import runpy
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from initmem.analysis import instrument_plots, instrument_tables, plots, tables
from initmem.errors import ConfigError
from initmem.store.results import load_histories, load_runs

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "docs" / "experiments"


def load_script(name: str) -> SimpleNamespace:
    """docs/experiments/<name>/<name>.py's functions, without running its main()."""
    return SimpleNamespace(**runpy.run_path(str(EXPERIMENTS / name / f"{name}.py")))


@pytest.fixture(scope="module")
def w025():
    runs = load_runs(ROOT / "results" / "cpu_w025_pilot")
    return runs[runs["optimizer"].isin(["sgd", "sgd_momentum"])].reset_index(drop=True)


@pytest.fixture(scope="module")
def adaptive():
    runs = load_runs(ROOT / "results" / "cpu_w025_pilot")
    runs = runs[runs["optimizer"].isin(["adam", "adamw"])].reset_index(drop=True)
    hist = load_histories(ROOT / "results" / "cpu_w025_pilot")
    return runs, hist[hist["run_id"].isin(runs["run_id"])].reset_index(drop=True)


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


def test_the_last_epoch_spread_reads_the_whole_test_set_where_every_run_has_it_there():
    """`tables.last_accuracy`: the grid's histories have the whole test set at the last epoch, so the control's
    last-epoch spreads are T9's (one definition); one run without it there sends every row back to the subset."""
    from initmem.analysis.cells import FULL_TEST, SUBSET_TEST

    tree = ROOT / "results" / "cpu_w025"
    runs = load_runs(tree)
    runs = runs[runs["optimizer"].isin(["sgd", "sgd_momentum"])].reset_index(drop=True)
    hist = load_histories(tree)
    last = tables.last_accuracy(runs, hist)
    assert last.attrs["accuracy"] == FULL_TEST and not last.equals(runs["final_test_acc"].astype(float))
    t = tables.effective_lr_table(runs, hist).set_index("optimizer")
    assert t.attrs["last_accuracy"] == FULL_TEST
    t9 = instrument_tables.selection_rule_table(runs, hist)
    for r in t9[t9["rule"] == "last epoch"].itertuples():
        assert [r.spread_pp, r.spread_pp_lo, r.spread_pp_hi] == pytest.approx(
            t.loc[r.optimizer, ["last_spread_pp", "last_spread_pp_lo", "last_spread_pp_hi"]].tolist())
    rid = runs["run_id"][0]
    end = (hist["run_id"] == rid) & (hist["epoch"] == hist.loc[hist["run_id"] == rid, "epoch"].max())
    back = tables.last_accuracy(runs, hist.assign(test_acc_full=hist["test_acc_full"].mask(end)))
    assert back.attrs["accuracy"] == SUBSET_TEST and back.tolist() == pytest.approx(runs["final_test_acc"].tolist())
    assert tables.last_accuracy(runs.drop(columns="path")).attrs["accuracy"] == SUBSET_TEST  # nothing to read


def test_the_figure_draws_both_selection_rules_per_optimiser(w025):
    fig = plots.spread_vs_effective_lr(w025)
    (ax,) = fig.axes
    assert ax.get_legend_handles_labels()[1] == ["sgd (lr 0.01), selected epoch", "sgd, last epoch",
                                                 "sgd_momentum (lr 0.01), selected epoch", "sgd_momentum, last epoch"]
    assert ax.get_xscale() == "log"


def test_the_committed_control_table_is_what_the_committed_runs_give():
    script = load_script("matched_lr")
    committed = (EXPERIMENTS / "matched_lr" / "matched_lr.md").read_text(encoding="utf-8")
    assert committed == script.report(script.control_runs())


def test_the_spike_table_counts_the_collapses_the_recompute_found(adaptive):
    t = instrument_tables.spike_table(*adaptive)
    assert list(t["optimizer"]) == ["adam", "adamw"]
    n = [tuple(map(int, c.split("/"))) for c in t["collapsed"]]
    assert sum(k for k, _ in n) == 7 and sum(m for _, m in n) == 12  # docs/experiments/recompute/recompute.txt
    assert all(len(e.split(", ")) == k for e, (k, _) in zip(t["collapse_epochs"], n, strict=True))
    assert (t["spread_pp_lo"] <= t["spread_pp"]).all() and (t["last_spread_pp"] <= t["last_spread_pp_hi"]).all()


def test_a_planted_collapse_is_counted_and_one_before_tau_interp_is_not(adaptive):
    runs, hist = adaptive
    before = instrument_tables.spike_table(runs, hist)
    quiet = next(r for r in runs.itertuples() if r.optimizer == "adam"
                 and hist.loc[hist["run_id"] == r.run_id, "train_acc"].iloc[-5:].min() > 0.99)
    at = (hist["run_id"] == quiet.run_id) & (hist["epoch"] == 59)
    after = instrument_tables.spike_table(runs, hist.assign(train_acc=hist["train_acc"].mask(at, 0.5)))
    assert int(after["collapsed"][0].split("/")[0]) == int(before["collapsed"][0].split("/")[0]) + 1
    assert "59" in after["collapse_epochs"][0].split(", ")
    early = (hist["run_id"] == quiet.run_id) & (hist["epoch"] == int(quiet.tau_interp) - 1)
    moved = instrument_tables.spike_table(runs, hist.assign(train_acc=hist["train_acc"].mask(early, 0.1)))
    assert moved["collapsed"].tolist() == before["collapsed"].tolist()


def test_the_spike_figure_has_a_panel_per_variant_and_marks_only_what_happened(adaptive):
    runs, hist = load_script("adam_collapses").adam_runs()
    fig = instrument_plots.spike_curves(runs, hist)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == [
        "adam eps=1e-08 amsgrad=False", "adam eps=1e-08 amsgrad=True", "adam eps=1e-06 amsgrad=False",
        "adam eps=0.0001 amsgrad=False", "adamw eps=1e-08 amsgrad=False", "adamw eps=1e-08 amsgrad=True"]
    rows = sorted({round(ax.get_position().y0, 3) for ax in panels})
    assert len(fig.axes) == 6 and len(rows) == 2  # six panels wrap into two rows of three, no empty axes left
    assert [ax.get_ylabel() != "" for ax in panels] == [True, False, False] * 2
    assert [t.get_text() for t in fig.legends[0].get_texts()][-2:] == ["collapse", "selected epoch"]
    calm = adaptive[0][adaptive[0]["optimizer"] == "adam"]
    calm_hist = adaptive[1].assign(train_acc=1.0)  # no run ever loses its fit
    texts = [t.get_text() for t in instrument_plots.spike_curves(calm, calm_hist).legends[0].get_texts()]
    assert "collapse" not in texts and "selected epoch" in texts


def test_the_committed_spike_table_is_what_the_committed_runs_give():
    script = load_script("adam_collapses")
    committed = (EXPERIMENTS / "adam_collapses" / "adam_collapses.md").read_text(encoding="utf-8")
    assert committed == script.report(*script.adam_runs())
    t = instrument_tables.spike_table(*script.adam_runs())  # what docs/findings.md quotes
    assert list(t.loc[t["amsgrad"], "optimizer"]) == ["adam", "adamw"]
    assert (t.loc[t["amsgrad"], "collapsed"] == "0/6").all() and (t.loc[~t["amsgrad"], "collapsed"] != "0/6").all()


def test_the_committed_grid_report_is_what_the_committed_runs_give():
    script = load_script("grid")
    committed = (EXPERIMENTS / "grid" / "grid.md").read_text(encoding="utf-8")
    assert committed == script.report(load_runs(ROOT / script.GRID), load_runs(ROOT / script.PILOT),
                                      load_histories(ROOT / script.GRID / "01_optimizers"))
    assert "## Late collapses" in committed and "| sgd | 5 | 0/15 |" in committed  # the table the findings quote


def test_the_grid_report_takes_an_optimiser_only_with_all_fifteen_runs_complete():
    script = load_script("grid")
    grid = load_runs(ROOT / script.GRID)
    for o in script.complete(grid):
        assert len(grid[(grid["optimizer"] == o) & (grid["status"] == "complete")]) == 15
    sgd = grid[(grid["optimizer"] == "sgd") & (grid["sigma_w"] == 0.1)]
    assert sorted(sgd["seed"]) == [0, 1, 2, 3, 4]
    full = pd.concat([sgd.assign(sigma_w=s) for s in script.SIGMA_WS], ignore_index=True)  # 3 σ_w × 5 seeds
    assert script.complete(full) == ["sgd"]
    assert script.complete(full.iloc[1:]) == []  # one run missing
    assert script.complete(full.assign(status=["running", *["complete"] * 14])) == []  # one run unfinished
    assert "sgd | results/cpu_w025 | 5 | all 10,000 test images" in script.report(full, load_runs(
        ROOT / script.PILOT))


def test_the_selection_rule_table_reads_each_rules_epoch_and_equals_t1_for_t1s_rule():
    runs = load_runs(ROOT / "results" / "cpu_w025_pilot")
    hist = load_histories(ROOT / "results" / "cpu_w025_pilot")
    t = instrument_tables.selection_rule_table(runs, hist)
    cols = ["spread_pp", "spread_pp_lo", "spread_pp_hi"]
    t1 = tables.optimizer_table(runs).set_index("optimizer")[cols]
    own = t[t["rule"] == "lowest validation loss"].set_index("optimizer")[cols]
    pd.testing.assert_frame_equal(own, t1.loc[own.index])  # T1's rule gives T1, the contrast row included
    assert list(own.index) == [*tables.optimizer_table(runs)["optimizer"]]
    # the last epoch by hand: each σ_w's seed mean of the last row's test accuracy, max − min
    last = hist.sort_values("epoch").groupby("run_id").tail(1).set_index("run_id")["test_acc"]
    for opt in ("sgd", "muon"):
        g = runs[runs["optimizer"] == opt]
        means = last.loc[g["run_id"]].groupby(g["sigma_w"].to_numpy()).mean()
        row = t[(t["optimizer"] == opt) & (t["rule"] == "last epoch")]
        assert row["spread_pp"].item() == pytest.approx(100 * (means.max() - means.min()))
    assert len(t) == 3 * len(own) and list(t["optimizer"][:3]) == ["sgd"] * 3  # configuration by configuration
    one = runs[runs["seed"] == runs["seed"].min()]  # one seed: the spreads without an interval, as T1
    t1 = instrument_tables.selection_rule_table(one, hist)
    assert list(t1.columns) == ["optimizer", "rule", "spread_pp", "selected_after_tau"]
    assert t1["spread_pp"].notna().all()
    never = instrument_tables.selection_rule_table(one.assign(tau_interp=None), hist)  # as a run that never fit
    assert never["selected_after_tau"].eq(f"0/{len(one) // one['optimizer'].nunique()}").all()
    # how many selected networks had interpolated: under T1's rule, each run's own summary (best_epoch >= τ_interp)
    for opt, g in runs.groupby("optimizer"):
        row = t[(t["optimizer"] == opt) & (t["rule"] == "lowest validation loss")]
        assert row["selected_after_tau"].item() == f"{int((g['best_epoch'] >= g['tau_interp']).sum())}/{len(g)}"
    assert (t.loc[t["rule"] == "last epoch", "selected_after_tau"].iloc[:-1] == "6/6").all()  # all interpolate
    assert t.loc[t["optimizer"] == tables.CONTRAST, "selected_after_tau"].eq("–").all()
    with pytest.raises(ConfigError, match="rule='best' is invalid"):
        instrument_tables.selection_rule_table(runs, hist, rules=["best"])


