"""The figure pipeline: tables.py and plots.py on hand-made frames with hand-computed spreads, then every figure
notebook through papermill (`make_figures`) over a results tree, and the 'no results' placeholders of a missing
section. Writing (stamps, atomicity, loud failures, inline images) is tests/test_figures_artefacts.py; the committed
figures against a fresh clone, tests/test_figures_clean.py.

The pipeline runs over real smoke results of every section (the params files' `smoke` profiles, swept once per
session); the other tests over a small synthetic tree (`write_fake_results`) written through `RunFolders.write`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from initmem.analysis import cells, display, plots, point_report, style, tables
from initmem.errors import ConfigError, NoResults
from initmem.figures import artefacts

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("01_optimizers", "02_long_training", "03_lr_l2", "04_batch_size", "05_depth")
TABLES = ("T1_optimizers", "T2_long_training", "T3_lr_l2", "T4_batch_size", "T5_depth", "T6_equilibrium",
          "T7_clock_correlations", "T8_unfolding_collapse", "T9_selection_rules")
FIGURES = ("F1_accuracy_vs_sigma", "F2_weight_norm", "F3_radial_memory", "F4_spread_vs_batch_size",
           "F5_spread_lr_l2", "F6_depth_interpolation", "F7_spread_vs_clocks", "F8_repair_gap",
           "F9_training_curves", "F10_angle_curves", "F11_spread_vs_measured_clock", "F12_forgetting_unfolds",
           "F13_selection_rules")


# --- hand-made frames ----------------------------------------------------------------------------------------
def _runs(rows: list[dict], section: str = "01_optimizers") -> pd.DataFrame:
    """A load_runs-like frame with only the columns the tables read; unspecified ones get neutral values."""
    base = {"section": section, "optimizer": "sgd", "arch": "resnet9", "lr": 0.01, "weight_decay": 0.0,
            "batch_size": 128, "epochs": 10, "seed": 0, "tau_interp": 5.0, "repair_gap": 0.01,
            "init_weight_norm": 10.0, "final_weight_norm": 10.0, "T_SGD": 1e-4, "T_L2": 0.0, "T_adapt": 1.0}
    out = pd.DataFrame([{**base, **r} for r in rows])
    return out.assign(run_id=[f"r{i:03d}" for i in range(len(out))], status="complete",
                      interpolated=out["tau_interp"].notna())


# σ_w → test accuracy for two seeds. SGD: per-seed spreads 80-55 = 25 and 79-50 = 29 pp (std √8); per-σ_w means
# 55, 79.5, 58.5 → spread 24.5 pp (the spread of the means, not the mean of the spreads, 27). Adam: per-seed
# spreads 2 and 0 (std √2), means 80, 80.5, 79.5 → 1 pp.
SGD_ACC = {0: {0.5: 0.60, 1.0: 0.80, 2.0: 0.55}, 1: {0.5: 0.50, 1.0: 0.79, 2.0: 0.62}}
ADAM_ACC = {0: {0.5: 0.80, 1.0: 0.81, 2.0: 0.79}, 1: {0.5: 0.80, 1.0: 0.80, 2.0: 0.80}}


@pytest.fixture
def two_optimizers() -> pd.DataFrame:
    rows = []
    for opt, acc, lr in (("adam", ADAM_ACC, 1e-3), ("sgd", SGD_ACC, 0.01)):  # adam first: order must not matter
        for seed, by_sigma in acc.items():
            for s, a in by_sigma.items():
                final = 10 * s if opt == "sgd" else 30.0  # SGD keeps its norm (slope 1), Adam forgets (slope 0)
                rows.append({"optimizer": opt, "lr": lr, "sigma_w": s, "seed": seed, "test_acc_at_best": a,
                             "init_weight_norm": 10 * s, "final_weight_norm": final,
                             "tau_interp": None if (opt, s) == ("sgd", 2.0) else 4.0 + seed})
    return _runs(rows)


def test_configurations_order_labels_and_ids(two_optimizers):
    c = tables.configurations(two_optimizers)
    assert list(dict.fromkeys(c["label"])) == ["sgd", "adam"]  # study order, lr not needed to tell them apart
    assert c.groupby("config")["optimizer"].nunique().eq(1).all() and c["config"].nunique() == 2
    grid = _runs([{"lr": lr, "weight_decay": wd, "sigma_w": s, "test_acc_at_best": 0.5}
                  for lr in (0.05, 0.01) for wd in (1e-3, 0.0) for s in (0.5, 1.0)], section="03_lr_l2")
    labels = list(dict.fromkeys(tables.configurations(grid)["label"]))
    assert labels == ["lr=0.01 wd=0", "lr=0.01 wd=0.001", "lr=0.05 wd=0", "lr=0.05 wd=0.001"]
    with pytest.raises(NoResults):
        tables.configurations(two_optimizers.iloc[:0])


def test_optimizer_table_spread_of_seed_means_with_interval(two_optimizers):
    t = tables.optimizer_table(two_optimizers).set_index("optimizer")
    assert list(t.index) == ["sgd", "adam"]
    assert t.loc["sgd", "spread_pp"] == pytest.approx(24.5)
    lo, hi = t.loc["sgd", "spread_pp_lo"], t.loc["sgd", "spread_pp_hi"]  # the same statistic, seeds resampled
    assert lo <= t.loc["sgd", "spread_pp"] <= hi and lo < hi
    assert "spread_pp_std" not in t.columns  # one definition: no second statistic under the spread
    assert t.loc["sgd", "sigma_w=0.5"] == pytest.approx(55.0) and t.loc["sgd", "sigma_w=0.5_std"] == pytest.approx(
        math.sqrt(50.0))
    assert t.loc["sgd", "interpolated"] == "4/6" and t.loc["adam", "interpolated"] == "6/6"
    assert t.loc["sgd", "tau_interp"] == pytest.approx(4.5)
    assert t.loc["sgd", "radial_slope"] == pytest.approx(1.0) and t.loc["adam", "radial_slope"] == pytest.approx(0.0)
    assert t.loc["adam", "norm_ratio_min"] == pytest.approx(1.5) and t.loc["adam", "norm_ratio_max"] == pytest.approx(
        6.0)
    headers, rows = display.display_rows(t.reset_index())
    assert headers[:4] == ["optimizer", "σ_w=0.5", "σ_w=1", "σ_w=2"] and "spread (pp)" in headers
    lo_col = headers[headers.index("spread (pp)") + 1]  # the interval follows its centre value
    assert rows[0][headers.index("spread (pp)")] == "24.5" and rows[0][headers.index(lo_col)] == display.number(
        lo, "percent")


def test_a_configurations_sigma_cells_are_over_the_accuracy_its_spread_is_over(two_optimizers):
    """Where every run of a configuration has its whole-test accuracy, its σ_w cells and its spread are both over it
    (the cells subtract to the spread); a configuration without it keeps the subset's, cells and spread alike."""
    sgd = two_optimizers["optimizer"] == "sgd"
    whole = two_optimizers.assign(test_acc_full_at_best=np.where(
        sgd, two_optimizers["test_acc_at_best"] + 0.01 * two_optimizers["sigma_w"], np.nan))
    t, before = (tables.optimizer_table(r).set_index("optimizer") for r in (whole, two_optimizers))
    sigmas = [c for c in t.columns if c.startswith("sigma_w=") and not c.endswith("_std")]
    assert t.loc["sgd", sigmas].tolist() == pytest.approx(
        [before.loc["sgd", c] + float(c.split("=")[1]) for c in sigmas])  # + σ_w pp: the whole-test values
    assert t.loc["sgd", "spread_pp"] == pytest.approx(max(t.loc["sgd", sigmas]) - min(t.loc["sgd", sigmas]))
    assert t.loc["sgd", "spread_pp"] != pytest.approx(before.loc["sgd", "spread_pp"])
    assert t.loc["adam"].equals(before.loc["adam"])  # no whole-test accuracy: the subset's, as before
    fig = plots.accuracy_vs_sigma(whole)  # F1 plots and names T1's numbers
    ax, legend = fig.axes[0], [h.get_text() for h in fig.legends[0].get_texts()]
    assert {f"{o}: {t.loc[o, 'spread_pp']:.1f} pp [{t.loc[o, 'spread_pp_lo']:.1f}, {t.loc[o, 'spread_pp_hi']:.1f}]"
            for o in ("sgd", "adam")} <= set(legend)  # T1's centre and its 95 % interval, as T1 prints them
    assert fig.legends[0].get_title().get_text().endswith("[95 % interval]")
    single = plots.accuracy_vs_sigma(whole[whole["seed"] == 0])  # one seed: no interval to show, none claimed
    assert all("[" not in h.get_text() for h in single.legends[0].get_texts())
    assert "interval" not in single.legends[0].get_title().get_text()
    drawn = [list(ln.get_ydata()) for ln in ax.get_lines() if len(ln.get_ydata()) == len(sigmas)]
    assert t.loc["sgd", sigmas].tolist() in [pytest.approx(y) for y in drawn]


def test_a_spread_over_fewer_sigma_w_is_named_and_kept_out_of_the_contrast(two_optimizers):
    """A sweep under way: Adam's σ_w 2 not yet trained. T1's caption names its narrower spread, F1's legend marks it,
    and SGD − max(adaptive) is not formed from spreads over different σ_w; complete, the contrast row is back."""
    adaptive = pd.concat([two_optimizers[two_optimizers["optimizer"] == "adam"].assign(optimizer=o)
                          for o in ("adamw", "muon")])
    full = _runs(pd.concat([two_optimizers, adaptive]).drop(columns=["run_id", "status", "interpolated"])
                 .to_dict("records"))
    t = tables.optimizer_table(full)
    assert tables.CONTRAST in t["optimizer"].tolist() and t.attrs["narrowed_note"] == ""
    partial = full[~((full["optimizer"] == "adam") & (full["sigma_w"] == 2.0))]
    t = tables.optimizer_table(partial)
    assert tables.CONTRAST not in t["optimizer"].tolist()
    assert t.attrs["narrowed_note"] == "; adam's spread over σ_w 0.5, 1 only (not 2)"
    assert cells.interval_note(t, "T1").endswith(t.attrs["narrowed_note"])
    legend = [h.get_text() for h in plots.accuracy_vs_sigma(partial).legends[0].get_texts()]
    adam = t.set_index("optimizer").loc["adam", "spread_pp"]
    t = t.set_index("optimizer")
    assert any(x.startswith(f"adam: {adam:.1f} pp [") and x.endswith("] (σ_w 2/3)") for x in legend)
    assert f"sgd: 24.5 pp [{t.loc['sgd', 'spread_pp_lo']:.1f}, {t.loc['sgd', 'spread_pp_hi']:.1f}]" in legend


def test_single_seed_tables_have_no_std_columns(two_optimizers):
    t = tables.optimizer_table(two_optimizers[two_optimizers["seed"] == 0])
    assert not [c for c in t.columns if c.endswith("_std")]
    assert t.set_index("optimizer").loc["sgd", "spread_pp"] == pytest.approx(25.0)


def _history(run_id: str, val_loss: list[float], test_acc: list[float]) -> pd.DataFrame:
    e = np.arange(len(val_loss))
    return pd.DataFrame({"run_id": run_id, "epoch": e, "val_loss": val_loss, "test_acc": test_acc,
                         "T_SGD": 1e-3 * e, "T_adapt": 0.01 * e})


def test_long_training_table_reads_each_mark_at_its_own_best_epoch():
    runs = _runs([{"sigma_w": 0.5, "test_acc_at_best": 0.0}, {"sigma_w": 2.0, "test_acc_at_best": 0.0},
                  {"optimizer": "adam", "sigma_w": 0.5, "test_acc_at_best": 0.0}], section="02_long_training")
    # epoch 0 is at initialisation and never selected; run 0 improves until epoch 4, run 1 is best at epoch 1;
    # the adam run trained 2 epochs only
    h = pd.concat([_history("r000", [0.1, 2.0, 1.5, 1.2, 1.0], [0.1, 0.50, 0.60, 0.70, 0.90]),
                   _history("r001", [0.1, 1.0, 1.1, 1.2, 1.3], [0.1, 0.55, 0.40, 0.30, 0.20]),
                   _history("r002", [0.1, 1.0, 0.9], [0.1, 0.3, 0.4])])
    t = tables.long_training_table(runs, h, marks=[4, 1, 2])
    assert t["optimizer"].tolist() == ["sgd"] * 3 + ["adam"] * 2  # a configuration gets the marks it reached
    t = t[t["optimizer"] == "sgd"].set_index("epoch")
    assert list(t.index) == [1, 2, 4]
    assert t.loc[1, "spread_pp"] == pytest.approx(5.0)  # 0.50 vs 0.55
    assert t.loc[2, "spread_pp"] == pytest.approx(5.0)  # 0.60 vs 0.55
    assert t.loc[4, "spread_pp"] == pytest.approx(35.0)  # 0.90 vs 0.55
    assert t.loc[4, "sigma_w=0.5"] == pytest.approx(90.0) and t.loc[2, "T_SGD"] == pytest.approx(2e-3)
    assert t.loc[4, "T_adapt"] == pytest.approx(0.04)
    assert tables.default_marks(200) == [5, 10, 20, 50, 100, 200] and tables.default_marks(3) == [1, 2, 3]
    assert tables.long_training_table(runs, h)["epoch"].tolist() == [1, 2, 4, 1, 2]  # default marks of 4 epochs
    with pytest.raises(NoResults):
        tables.long_training_table(runs, h.iloc[:0])
    for bad, why in (([9], "the runs trained 4 epochs; marks <= 4"), ([], "non-empty list"), ([0, 1], ">= 1"),
                     (["2"], ">= 1"), ([True], ">= 1")):
        with pytest.raises(ConfigError, match=f"epoch_marks=.* is invalid: .*{why}"):
            tables.long_training_table(runs, h, marks=bad)


def test_long_training_table_reads_the_histories_of_run_folders_like_spread_at_marks(tmp_path):
    """What the section notebook 02 shows (it was `sections.spread_at_marks`): runs from load_runs, their
    histories read from their folders, one row per mark."""
    from types import SimpleNamespace

    from initmem.config import TrainConfig, run_id
    from initmem.metrics import summarize_history
    from initmem.store.folders import RunFolders
    from initmem.store.results import load_runs

    for sigma, val_loss, test_acc in ((0.1, [9, 1.0, 2.0, 0.5], [0.0, 0.6, 0.7, 0.9]),  # best: epoch 1, then 3
                                      (2.5, [9, 3.0, 1.0, 2.0], [0.0, 0.2, 0.3, 0.8])):  # best: epoch 2 throughout
        cfg = TrainConfig(data="synthetic", sigma_w=sigma, epochs=3, device="cpu")
        e = np.arange(4)
        h = pd.DataFrame({"epoch": e, "step": 10 * e, "lr": 0.01, "train_loss": [np.nan, 1.0, 0.5, 0.2],
                          "train_acc_running": [np.nan, 0.5, 0.8, 1.0], "train_acc": [0.1, 0.5, 0.8, 1.0],
                          "val_loss": val_loss, "val_acc": test_acc, "test_loss": val_loss, "test_acc": test_acc,
                          "weight_norm": 10.0, "T_SGD": e.astype(float), "T_L2": 0.0, "T_adapt": 0.1 * e,
                          "wall_time": e.astype(float)})
        RunFolders(tmp_path, "02_long_training").write(SimpleNamespace(
            config=cfg, run_id=run_id(cfg), status="complete", history=h, summary=summarize_history(h),
            provenance={}, started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:00:01Z"))
    t = tables.long_training_table(load_runs(tmp_path), marks=[3, 1, 2])
    assert t["epoch"].tolist() == [1, 2, 3]
    assert t["spread_pp"].round(6).tolist() == [40.0, 30.0, 60.0]  # |0.6-0.2|, |0.6-0.3|, |0.9-0.3|
    assert t["T_SGD"].tolist() == [1.0, 2.0, 3.0] and t["sigma_w=0.1"].tolist() == pytest.approx([60.0, 60.0, 90.0])
    with pytest.raises(ConfigError, match="without a `path` column"):
        tables.long_training_table(load_runs(tmp_path).drop(columns="path"))


def test_run_and_interpolation_tables(two_optimizers):
    runs = two_optimizers.assign(arch="resnet56", best_epoch=3, norm_ratio=1.0, wall_time_s=1.0, final_train_acc=0.9)
    t = point_report.run_rows(runs)
    assert list(t.columns) == list(point_report.RUN_TABLE_COLUMNS) and len(t) == len(runs)
    assert t[["sigma_w", "seed"]].apply(tuple, axis=1).is_monotonic_increasing
    i = point_report.interpolation_rows(runs)
    assert i["failed_to_interpolate"].sum() == 2 and not i.loc[i["sigma_w"] != 2.0, "failed_to_interpolate"].any()
    with pytest.raises(ConfigError, match="lacking columns \\['best_epoch'"):
        point_report.run_table(runs.drop(columns="best_epoch"))
    # what a person reads: the same rows, accuracies in percent, headers in the study's symbols
    shown = point_report.run_table(runs.assign(norm_ratio=1.0037))
    assert shown.index.names == ["σ_w", "seed"] and len(shown) == len(runs)
    first = t.iloc[0]
    row = shown.iloc[0]
    assert row["test acc (%)"] == f"{100 * first['test_acc_at_best']:.1f}" and row["norm ratio"] == "1.004"
    assert row["best epoch"] == "3" and "test_acc_at_best" not in shown.columns
    fails = point_report.interpolation_table(runs)["failed to interpolate"]
    assert fails.tolist() == [str(v) for v in i["failed_to_interpolate"]]


def test_paper_spreads_sit_beside_ours_in_t1_and_f1(two_optimizers):
    runs = pd.concat([two_optimizers, two_optimizers[two_optimizers["optimizer"] == "adam"].assign(optimizer="muon")])
    t = tables.optimizer_table(runs).set_index("optimizer")
    assert t.loc["sgd", "paper_spread_pp"] == 26.5 and t.loc["muon", "paper_spread_pp"] == 4.0
    assert math.isnan(t.loc["adam", "paper_spread_pp"])
    assert math.isnan(tables.paper_spread({"optimizer": "sgd", "arch": "resnet9", "batch_size": 256,
                                           "weight_decay": 0.0}))  # not the paper's conditions
    headers, rows = display.display_rows(t.reset_index())
    assert "paper spread (pp)" in headers and rows[0][headers.index("paper spread (pp)")] == "26.5"
    fig = plots.accuracy_vs_sigma(runs)
    ax = fig.axes[0]
    assert sorted(x.get_text() for x in ax.texts if x.get_text()) == ["paper: muon ≈ 4 pp", "paper: sgd 26.5 pp"]
    sgd_best = 100 * max(np.mean([SGD_ACC[k][s] for k in SGD_ACC]) for s in (0.5, 1.0, 2.0))
    assert ax.get_ylim()[0] < sgd_best - 26.5  # the paper's SGD bracket is inside the axes
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "sgd: 24.5 pp [19.5, 30.0]" in labels and any("the paper's spread" in lab for lab in labels)
    assert not plots.accuracy_vs_sigma(two_optimizers[two_optimizers["optimizer"] == "adam"]).axes[0].texts


def test_spread_vs_clocks_is_a_row_per_section_each_configuration_in_its_optimisers_look():
    rows = [{"optimizer": "sgd", "lr": lr, "weight_decay": wd, "sigma_w": s, "test_acc_at_best": 0.5 + 0.1 * s * lr,
             "T_L2": wd, "T_SGD": lr**2} for lr in (0.01, 0.1) for wd in (0.0, 0.01) for s in (0.5, 2.0)]
    runs = pd.concat([_runs(rows, "03_lr_l2"), _runs([{"optimizer": o, "sigma_w": s, "test_acc_at_best": 0.6}
                                                       for o in ("sgd", "adam") for s in (0.5, 2.0)])])
    fig = plots.spread_vs_clocks(runs.reset_index(drop=True))
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]  # one beside each row
    assert [(lg.get_title().get_text(), [t.get_text() for t in lg.get_texts()]) for lg in legends] == [
        ("01_optimizers", ["sgd", "adam"]),
        ("03_lr_l2", ["lr=0.01 wd=0", "lr=0.01 wd=0.01", "lr=0.1 wd=0", "lr=0.1 wd=0.01"])]
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == 6 and not any(ax.containers for ax in panels)  # 2 sections × 3 clocks; one seed: no bars
    own = {ln.get_label(): (ln.get_marker(), to_rgb(ln.get_color())) for ln in panels[0].lines + panels[3].lines
           if not ln.get_label().startswith("_")}
    assert own["sgd"] == ("o", to_rgb(style.OPTIMIZER_LOOKS["sgd"][0]))  # one look per optimiser, everywhere
    assert own["adam"] == ("^", to_rgb(style.OPTIMIZER_LOOKS["adam"][0]))
    sgd03 = [own[t.get_text()] for t in legends[1].get_texts()]
    assert {m for m, _ in sgd03} == {"o"} and len({c for _, c in sgd03}) == 4  # sgd's marker, four shades
    grey = [ln for ln in panels[3].lines if ln.get_label().startswith("_")]  # section 01 behind section 03's row
    assert [len(ln.get_xdata()) for ln in grey] == [2] and grey[0].get_zorder() < 3
    assert panels[4].get_xlabel().endswith("4 configuration(s) with T_L2 = 0 not shown")
    assert panels[1].get_xlabel() == ""  # the clocks are named under the bottom row only


def test_every_figure_draws_an_optimiser_in_its_one_look(two_optimizers):
    """F1, F3, F8 and F9 colour (and mark) SGD and Adam as `style.OPTIMIZER_LOOKS` says, whatever else they draw."""
    h = pd.concat([pd.DataFrame({"run_id": r, "epoch": np.arange(4), "train_acc": 0.5, "val_acc": 0.4,
                                 "train_loss": 1.0, "val_loss": 1.0, "weight_norm": 10.0})
                   for r in two_optimizers["run_id"]])
    look = {o: (to_rgb(c), m) for o, (c, m) in style.OPTIMIZER_LOOKS.items()}
    assert len({c for c, _ in look.values()}) == len({m for _, m in look.values()}) == len(look)  # all apart
    for fig in (plots.accuracy_vs_sigma(two_optimizers), plots.radial_memory_plot(two_optimizers),
                plots.training_curves(two_optimizers, h)):
        handles = [(h[0] if isinstance(h, tuple) else h, lab) for ax in fig.axes
                   for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)]  # an error bar's: its line
        drawn = {lab.split(" ")[0].rstrip(":"): (to_rgb(ln.get_color()), ln.get_marker())
                 for ln, lab in handles if lab[:1] in "as"}
        assert drawn == {"sgd": look["sgd"], "adam": look["adam"]}, drawn
    bars = plots.repair_gap_bars(two_optimizers).axes[0].patches
    assert [to_rgb(b.get_facecolor()) for b in bars] == [look["sgd"][0], look["adam"][0]]


def test_spread_pivots_lr_l2_and_batch_size():
    acc = {(0.01, 0.0): (0.5, 0.9), (0.01, 1e-2): (0.85, 0.9), (0.1, 0.0): (0.7, 0.9), (0.1, 1e-2): (0.9, 0.9)}
    grid = _runs([{"lr": lr, "weight_decay": wd, "sigma_w": s, "test_acc_at_best": a}
                  for (lr, wd), accs in acc.items() for s, a in zip((0.5, 2.0), accs, strict=True)]
                 + [{"optimizer": "adam", "lr": 1e-3, "sigma_w": 1.0, "test_acc_at_best": 0.5}], section="03_lr_l2")
    t = tables.lr_l2_table(grid)  # adam is not part of the SGD grid
    assert list(t.columns) == ["lr", "wd=0", "wd=0.01", "diverged"] and list(t["lr"]) == [0.01, 0.1]
    assert t[["wd=0", "wd=0.01"]].to_numpy(dtype=float).ravel().tolist() == pytest.approx([40.0, 5.0, 20.0, 0.0])
    assert t["diverged"].tolist() == ["0/4", "0/4"] and t.attrs["narrowed"] == []
    b = _runs([{"optimizer": o, "lr": 0.01 if o == "sgd" else 1e-3, "batch_size": bs, "sigma_w": s,
                "test_acc_at_best": 0.9 - (d if o == "sgd" and s == 2.0 else 0)}
               for o in ("sgd", "adam") for bs, d in ((256, 0.3), (32, 0.1)) for s in (0.5, 2.0)],
              section="04_batch_size")
    t = tables.batch_size_table(b)
    assert list(t.columns) == ["batch_size", "sgd", "adam", "diverged"] and list(t["batch_size"]) == [32, 256]
    assert t[["sgd", "adam"]].to_numpy(dtype=float).ravel().tolist() == pytest.approx([10.0, 0.0, 30.0, 0.0])


def test_depth_table_cells_and_config_spreads():
    rows = [{"arch": a, "optimizer": "sgd", "sigma_w": s, "test_acc_at_best": acc, "tau_interp": tau,
             "repair_gap": None if tau is None else 0.02}
            for a, s, acc, tau in (("resnet56", 0.5, 0.7, 8.0), ("resnet56", 2.0, 0.1, None),
                                   ("resnet9", 0.5, 0.8, 5.0), ("resnet9", 2.0, 0.6, 6.0))]
    t = tables.depth_table(_runs(rows, section="05_depth"))
    assert list(t["arch"]) == ["resnet9", "resnet56"] and list(t.columns[:2]) == ["arch", "optimizer"]
    assert t.iloc[1]["sigma_w=2"] == "10.0 / never" and t.iloc[0]["sigma_w=0.5"] == "80.0 / 5"
    assert list(t["interpolated"]) == ["2/2", "1/2"] and t["spread_pp"].tolist() == pytest.approx([20.0, 60.0])
    cs = tables.config_spreads(_runs(rows, section="05_depth"))
    assert cs["repair_gap_pp"].tolist() == pytest.approx([2.0, 2.0]) and cs["n_interp"].tolist() == [2, 1]
    assert cs["T_adapt"].tolist() == [1.0, 1.0] and list(cs["label"]) == ["resnet9", "resnet56"]


def test_the_display_rule_shows_the_signal(two_optimizers):
    n = display.number
    assert [n(0.5163, "fraction"), n(51.63, "percent"), n(22.94, "percent")] == ["51.6", "51.6", "22.9"]
    # a norm ratio 0.4 % above 1 reads as such, not as 1; angles likewise keep 4 significant digits
    assert [n(1.0037, "fine"), n(1.68, "fine"), n(33.57, "fine"), n(0.99613, "fine"), n(5.2, "fine")] == [
        "1.004", "1.680", "33.57", "0.9961", "5.200"]
    assert [n(9.083e-05, "fine"), n(36.0, "count"), n(0.84, "decimal2"), n(-0.4, "signed"), n(2.5e-05, "clock")] == [
        "9.083e-05", "36", "0.84", "-0.40", "2.5e-05"]
    assert [n(128.0), n(0.001), n(None, "fine"), n(math.nan), n("diverged", "percent")] == [
        "128", "0.001", "–", "–", "diverged"]
    assert display.with_std(1.0037, 0.00123, "fine") == "1.004 ± 0.001"  # the std at the mean's resolution
    assert display.with_std(0.516, 0.011, "fraction") == "51.6 ± 1.1"
    assert display.with_std(51.6, math.nan, "percent") == "51.6"
    with pytest.raises(ValueError, match="display kind 'pct' is unknown"):
        n(1.0, "pct")
    assert [display.column_kind(c) for c in ("sigma_w=0.5", "spread_pp", "test_acc_at_best", "norm_ratio_min",
                                                "angle_at_best", "best_epoch", "T_SGD", "lr")] == [
        "percent", "percent", "fraction", "fine", "fine", "count", "clock", "general"]
    # the inline table is the written one: display_rows' headers and cells, first column as the index
    t = tables.optimizer_table(two_optimizers)
    headers, rows = display.display_rows(t)
    shown = display.display_frame(t)
    assert shown.index.name == headers[0] and list(shown.columns) == headers[1:]
    assert shown.reset_index().values.tolist() == rows and display.display_frame("no results") == "no results"


def test_text_formats_escape_and_stamp(tmp_path, two_optimizers):
    assert display.tex_escape("σ_w=0.5 & 10% ± 1_x") == r"$\sigma_w$=0.5 \& 10\% $\pm$ 1\_x"
    md = display.markdown_table(["a", "b"], [["1", "x|y"]])
    assert md.splitlines() == ["| a | b |", "|---|---|", r"| 1 | x\|y |"]
    runs = two_optimizers.assign(git_commit="abcdef0123456789", data_source="imagefolder")
    stamp = artefacts.Stamp.of(runs, tmp_path / "cpu", ["01_optimizers"])
    assert stamp.profile == "cpu" and stamp.n_runs == 12
    assert "abcdef0123" in stamp.caption() and "CIFAR-10 (JPEG folder)" in stamp.caption()
    assert "12 runs" in stamp.caption() and "modified" not in stamp.caption()  # said only when true
    paths = artefacts.save_table(tables.optimizer_table(runs), "T1_optimizers", tmp_path / "out", stamp, "Title")
    assert [p.name for p in paths] == [f"T1_optimizers.{x}" for x in ("md", "tex", "csv", "json")]
    tex = paths[1].read_text()
    assert r"\toprule" in tex and r"\bottomrule" in tex and "& 24.5 &" in tex and stamp.caption()[:20] in tex
    side = json.loads(paths[3].read_text())
    assert {"caption", "profile", "n_runs", "data_sources", "git_commits", "results_dir"} <= set(side)
    assert "generated_at" not in side  # the same results give the same bytes
    assert side["git_commits"] == ["abcdef0123456789"] and side["n_runs"] == 12 and not side["missing"]
    csv = pd.read_csv(paths[2])
    assert csv.shape[0] == 2 and csv.set_index("optimizer").loc["sgd", "spread_pp"] == pytest.approx(24.5)


def test_figures_are_deterministic_and_stamped(tmp_path, two_optimizers):
    stamp = artefacts.Stamp.of(two_optimizers, tmp_path / "cpu", ["01_optimizers"])
    blobs = []
    for k in range(2):
        paths = artefacts.save_figure(plots.accuracy_vs_sigma(two_optimizers), "F1", tmp_path / f"o{k}", stamp, "T")
        blobs.append([p.read_bytes() for p in paths])
    assert blobs[0] == blobs[1]  # same data, same bytes: no timestamps in PNG, PDF or sidecar
    assert b"CreationDate" not in blobs[0][1] and b"Software" not in blobs[0][0]


def test_figure_builders_pick_what_they_show(two_optimizers):
    runs = two_optimizers
    h = pd.concat([pd.DataFrame({"run_id": r, "epoch": np.arange(4), "train_acc": [0.1, 0.5, 0.9, 1.0],
                                 "val_acc": [0.1, 0.4, 0.6, 0.7], "train_loss": [np.nan, 1.0, 0.3, 0.1],
                                 "val_loss": [2.3, 1.5, 1.0, 0.9], "weight_norm": [10.0, 11.0, 12.0, 12.5]})
                   for r in runs["run_id"]])
    fig = plots.training_curves(runs, h, sigma_w=0.9)  # nearest σ_w both optimisers have: 1.0
    assert fig.axes[0].get_title() == "accuracy, σ_w = 1" and len(fig.axes[0].lines) == 4  # 2 optimisers × 2
    labels = plots.radial_memory_plot(runs).axes[0].get_legend_handles_labels()[1]
    assert "sgd (slope 1.00)" in labels and "adam (slope 0.00)" in labels
    fig = plots.spread_vs_clocks(runs)  # T_L2 = 0 everywhere: left off the log axis, said under the panel
    assert fig.axes[1].get_xlabel().endswith("\n2 configuration(s) with T_L2 = 0 not shown")
    assert not fig.axes[1].texts and "not shown" not in fig.axes[0].get_xlabel()
    assert len(plots.weight_norm_curves(runs, h).axes) == 2  # SGD beside Adam
    with pytest.raises(NoResults, match="muon"):
        plots.weight_norm_curves(runs, h, optimizers=("muon",))


# --- the whole pipeline --------------------------------------------------------------------------------------
FAKE = {  # section → (config overrides, epochs, seeds)
    "01_optimizers": [({"optimizer": o}, 6, (0, 1)) for o in ("sgd", "adam", "muon")],
    "02_long_training": [({"optimizer": "sgd"}, 20, (0,))],
    "03_lr_l2": [({"optimizer": "sgd", "lr": lr, "weight_decay": wd}, 6, (0,)) for lr in (0.01, 0.05)
                 for wd in (0.0, 1e-3)],
    "04_batch_size": [({"optimizer": o, "batch_size": b}, 6, (0,)) for o in ("sgd", "adam") for b in (32, 128)],
    "05_depth": [({"optimizer": o, "arch": a}, 6, (0,)) for a in ("resnet9", "resnet56") for o in ("sgd", "adam")],
}


def _fake_history(cfg) -> pd.DataFrame:
    """Curves shaped like the findings: SGD's accuracy and norm depend on σ_w, Adam's do not; ResNet-56 at large
    σ_w never interpolates."""
    e = np.arange(cfg.epochs + 1, dtype=float)
    adaptive = cfg.optimizer != "sgd"
    memory = 0.1 if adaptive else 1 / (1 + 20 * cfg.weight_decay + 10 * (cfg.lr - 0.01) + cfg.batch_size / 1000)
    off = abs(math.log(cfg.sigma_w))
    fails = cfg.arch == "resnet56" and cfg.sigma_w >= 2.0
    speed = 0.2 if fails else 1.2 / (1 + memory * off)
    train_acc = (1 - 0.9 * np.exp(-speed * e)) * (0.6 if fails else 1.0)
    test_acc = 0.1 + (0.75 - 0.12 * memory * off - 0.001 * cfg.seed) * (1 - np.exp(-speed * e))
    val_loss = 2.3 * np.exp(-speed * e) + 0.02 * np.maximum(e - 3, 0) + 0.5
    steps = np.ceil(512 / cfg.batch_size) * e
    w0 = 40.0 * cfg.sigma_w
    norm = w0 + (30.0 - w0) * (1 - np.exp(-0.8 * e)) if adaptive else w0 * (1 + 0.01 * e)
    return pd.DataFrame({
        "epoch": e.astype(int), "step": steps.astype(int), "lr": cfg.lr,
        "train_loss": np.where(e > 0, -np.log(train_acc), np.nan), "train_acc_running": np.where(e > 0, train_acc,
                                                                                                 np.nan),
        "train_acc": train_acc, "val_loss": val_loss, "val_acc": test_acc + 0.01, "test_loss": val_loss + 0.05,
        "test_acc": test_acc, "weight_norm": norm, "T_SGD": steps * cfg.lr**2 / cfg.batch_size,
        "T_L2": cfg.weight_decay * steps * cfg.lr, "T_adapt": steps * cfg.lr, "wall_time": 2.0 * e,
        "norm:head": norm / 10})


def write_fake_results(root: Path, sections=SECTIONS) -> Path:
    """A results tree in the contract's format, written through `RunFolders.write` without training anything."""
    from types import SimpleNamespace

    from initmem.config import TrainConfig, run_id
    from initmem.metrics import summarize_history
    from initmem.store.folders import RunFolders

    for section in sections:
        for over, epochs, seeds in FAKE[section]:
            for seed in seeds:
                for s in (0.25, 1.0, 2.0):
                    cfg = TrainConfig(**over, sigma_w=s, seed=seed, epochs=epochs, width=0.125, data="synthetic",
                                      n_train=512, n_val=128, n_test=128, device="cpu",
                                      split_seed=SECTIONS.index(section))  # one run id, one section
                    h = _fake_history(cfg)
                    RunFolders(root, section).write(SimpleNamespace(
                        config=cfg, run_id=run_id(cfg), status="complete", history=h, summary=summarize_history(h),
                        provenance={"git_commit": "0123456789abcdef", "dirty": False, "data_source": "synthetic"},
                        started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:01:00Z"))
    return root


@pytest.fixture(scope="module")
def results(smoke_study) -> Path:
    """Real smoke results of every section, swept once per session through papermill (tests/conftest.py)."""
    return smoke_study.results


@pytest.fixture(scope="module")
def made(results, tmp_path_factory) -> tuple[Path, list[Path]]:
    from initmem.figures.artefacts import make_figures

    out = tmp_path_factory.mktemp("figures")
    return out, make_figures(results, out, progress=False)


def test_every_artefact_is_written_with_sidecar_and_index(made, results):
    out, written = made
    expected = [out / "tables" / f"{t}.{x}" for t in TABLES for x in ("md", "tex", "csv", "json")]
    expected += [out / f"{f}.{x}" for f in FIGURES for x in ("png", "pdf", "json")]
    assert sorted(set(written) - {out / "README.md"}) == sorted(expected)
    assert (out / ".executed" / "01_optimizers_figures.ipynb").is_file()
    index = (out / "README.md").read_text()
    for p in expected:
        side = json.loads(p.with_suffix(".json").read_text())
        assert not side["missing"] and side["n_runs"] > 0 and side["profile"] == "smoke"
        assert side["results_dir"] == str(results) and side["data_sources"] and side["git_commits"] is not None
        assert f"**{side['name']}**" in index and side["caption"] in index
    for t in TABLES:
        assert "profile smoke" in (out / "tables" / f"{t}.md").read_text()


def _warnings_in(notebook: Path) -> list[str]:
    """Every warning line an executed notebook's cells printed (stderr streams and error outputs)."""
    found = []
    for cell in json.loads(notebook.read_text())["cells"]:
        for o in cell.get("outputs", []):
            text = "".join(o.get("text", "")) if o.get("output_type") == "stream" else ""
            found += [ln for ln in text.splitlines() if "Warning" in ln]
    return found


def test_a_smoke_study_and_its_figures_print_no_warning(made, results):
    """`make smoke` prints no warning: no section notebook of the smoke sweep and no figure notebook over it does
    (a fragmented history frame once made pandas warn 132 times here)."""
    out, _ = made
    notebooks = sorted((out / ".executed").glob("*.ipynb")) + sorted(results.glob("*/notebooks/*.ipynb"))
    assert len(notebooks) > 6
    assert {nb.name: w for nb in notebooks if (w := _warnings_in(nb))} == {}


def test_histories_are_one_consolidated_frame(tmp_path):
    """load_histories of a tree with many per-layer columns: adding a column to it is silent even with pandas'
    PerformanceWarning as an error (one block per column made every later insert warn)."""
    import warnings

    from initmem.store.results import load_histories
    h = load_histories(REPO / "results" / "cpu")
    assert h.shape[1] > 100 and h._mgr.nblocks < 10
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)
        for i in range(5):
            h[f"extra{i}"] = 0.0
        h.groupby(["run_id", "epoch"]).size()


def test_every_png_decodes_to_a_non_blank_image(made):
    import matplotlib.image

    out, _ = made
    for f in FIGURES:
        img = matplotlib.image.imread(out / f"{f}.png")
        assert img.ndim == 3 and min(img.shape[:2]) > 200, f
        assert img[..., :3].std() > 0.02 and (img[..., :3] < 0.5).mean() > 0.002, f  # ink, not a blank page
        assert (out / f"{f}.pdf").read_bytes().startswith(b"%PDF")


def test_tables_have_one_row_per_configuration_and_a_column_per_sigma(made, results):
    from initmem.store.results import load_runs

    out, _ = made
    runs = load_runs(results)

    def sec(s: str) -> pd.DataFrame:
        return runs[runs["section"] == s]

    def csv(t: str) -> pd.DataFrame:
        return pd.read_csv(out / "tables" / f"{t}.csv")

    r1, t1 = sec("01_optimizers"), csv("T1_optimizers")
    assert sorted(t1["optimizer"]) == sorted(r1["optimizer"].unique())
    sig = [cells.sigma_column(s) for s in sorted(r1["sigma_w"].unique())]
    assert [c for c in t1.columns if c.startswith("sigma_w=") and not c.endswith("_std")] == sig
    assert {"spread_pp", "interpolated", "tau_interp", "norm_ratio_min", "radial_slope"} <= set(t1.columns)
    assert (t1["spread_pp"] >= 0).all()
    t2 = csv("T2_long_training")
    assert t2["epoch"].max() == sec("02_long_training")["epochs"].max() and t2["spread_pp"].notna().all()
    r3, t3 = sec("03_lr_l2"), csv("T3_lr_l2")
    assert len(t3) == r3["lr"].nunique() and len([c for c in t3.columns if c.startswith("wd=")]) >= 1
    r4, t4 = sec("04_batch_size"), csv("T4_batch_size")
    assert sorted(t4["batch_size"]) == sorted(r4["batch_size"].unique())
    assert set(r4["optimizer"]) <= set(t4.columns)
    r5, t5 = sec("05_depth"), csv("T5_depth")
    assert len(t5) == len(r5.groupby(["arch", "optimizer"])) and set(t5["arch"]) == set(r5["arch"])
    assert all(" / " in str(v) for v in t5.filter(like="sigma_w=").to_numpy().ravel())


def test_missing_section_gives_no_results_artefacts_through_the_cli(tmp_path, capsys):
    from initmem.cli.commands import main

    root = write_fake_results(tmp_path / "cpu", sections=("01_optimizers",))
    out = tmp_path / "figs"
    assert main(["figures", "--results", str(root), "--out", str(out), "--notebooks", "05_depth",
                 "--no-progress"]) == 0
    md = (out / "tables" / "T5_depth.md").read_text()
    assert "no results for section 05_depth in" in md and str(root) in md
    side = json.loads((out / "F6_depth_interpolation.json").read_text())
    assert side["missing"] and side["n_runs"] == 0
    assert matplotlib_ink(out / "F6_depth_interpolation.png") > 0.001  # the message is drawn
    assert "F6_depth_interpolation** **(no results)**" in (out / "README.md").read_text()
    assert "initmem figures:" in capsys.readouterr().out


def matplotlib_ink(png: Path) -> float:
    import matplotlib.image

    return float((matplotlib.image.imread(png)[..., :3] < 0.5).mean())


def test_a_section_without_runs_or_a_builder_without_data_gives_a_placeholder(tmp_path, two_optimizers, capsys):
    root = write_fake_results(tmp_path / "cpu", sections=("01_optimizers",))
    s = artefacts.FigureBook(root, tmp_path / "out", "05_depth")  # the tree exists, the section has no runs
    assert s.message == f"no results for section 05_depth in {s.stamp.results_dir}" and s.stamp.n_runs == 0
    assert s.table("T5_depth", lambda: tables.depth_table(s.runs), "t") == s.message
    s.figure("F6_depth_interpolation", lambda: plots.depth_interpolation_map(s.runs), "t")
    assert "no results for section 05_depth" in capsys.readouterr().out
    assert (tmp_path / "out" / "F6_depth_interpolation.pdf").is_file() and len(s.written) == 7
    # runs present, but not the optimisers a figure needs: a placeholder naming what is missing
    s = artefacts.FigureBook(root, tmp_path / "out", "01_optimizers")
    assert s.message is None and len(s.runs) == 3 * 3 * 2
    s.figure("F2_weight_norm", lambda: plots.weight_norm_curves(s.runs, s.histories, optimizers=("sgd_momentum",)),
             "t")
    assert json.loads((tmp_path / "out" / "F2_weight_norm.json").read_text())["missing"]
    assert "no runs of optimizer sgd_momentum" in capsys.readouterr().out


def test_unknown_notebook_is_a_config_error(tmp_path):
    from initmem.figures.artefacts import make_figures

    with pytest.raises(ConfigError, match="01_optimizers"):
        make_figures(tmp_path, tmp_path / "out", notebooks=["99_nope"])
