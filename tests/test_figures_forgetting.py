"""The tables and figures of the forgetting instruments (T6, T7, T8, F10, F11, F12: `tables_forgetting`,
`plots_forgetting`),
the diverged σ_w made visible in every table that shows a spread, and one point as a section notebook shows it
(`point_report.point_table`, `point_report.point_figure`), all on hand-made frames or run folders written through
`RunFolders.write`, with the numbers computed by hand."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from initmem import metrics
from initmem.analysis import cells, display, instrument_plots, plots, point_report, tables
from initmem.analysis import instrument_tables as tf
from initmem.errors import ConfigError, NoResults


def _runs(rows: list[dict], section: str = "03_lr_l2") -> pd.DataFrame:
    """A load_runs-like frame with the columns the tables read; unspecified ones get neutral values."""
    base = {"section": section, "optimizer": "sgd", "arch": "resnet9", "lr": 0.1, "weight_decay": 0.0, "momentum": 0.0,
            "betas": (0.9, 0.999), "batch_size": 128, "epochs": 10, "seed": 0, "status": "complete",
            "test_acc_at_best": 0.5, "tau_interp": 5.0, "repair_gap": 0.0, "init_weight_norm": 10.0,
            "final_weight_norm": 10.0, "T_SGD": 1e-4, "T_L2": 0.0, "T_adapt": 1.0}
    out = pd.DataFrame([{**base, **r} for r in rows])
    return out.assign(run_id=[f"r{i:03d}" for i in range(len(out))], interpolated=out["tau_interp"].notna())


def _step_history(run_id: str, convs: list[list[float]], head: float = 1.0) -> pd.DataFrame:
    """Epochs 0..n: step_angle:<conv k> = convs[k][epoch-1] (epoch 0 has none, as the engine writes it), and a huge
    head that must not count."""
    n = len(convs[0])
    h = pd.DataFrame({"run_id": run_id, "epoch": np.arange(n + 1)})
    for k, vals in enumerate(convs):
        h[f"step_angle:layer{k}.conv"] = [np.nan, *vals]
    h["step_angle:head"] = [np.nan, *[head] * n]
    h["step_angle"] = h["step_angle:layer0.conv"]
    return h


# --- T6 ------------------------------------------------------------------------------------------------------
def test_equilibrium_angle_is_the_literatures_formula():
    assert tf.equilibrium_angle("sgd", 0.1, 0.01) == pytest.approx(math.sqrt(0.002)) == pytest.approx(0.04472, abs=1e-5)
    assert tf.equilibrium_angle("sgd_momentum", 0.01, 1e-3, momentum=0.9) == pytest.approx(math.sqrt(2e-5 / 1.9))
    assert tf.equilibrium_angle("adamw", 1e-3, 1e-2, betas=(0.9, 0.999)) == pytest.approx(math.sqrt(2e-5 * 0.1 / 1.9))
    assert tf.equilibrium_angle("adamw", 1e-3, 1e-2, betas=(0.5, 0.999)) == pytest.approx(math.sqrt(2e-5 * 0.5 / 1.5))
    for args in (("sgd", 0.1, 0.0), ("adam", 1e-3, 1e-2), ("muon", 0.02, 1e-2)):
        assert tf.equilibrium_angle(*args) is None  # no equilibrium, or none stated
    with pytest.raises(ConfigError, match="lr=-0.1 is invalid"):
        tf.equilibrium_angle("sgd", -0.1, 0.01)


def test_step_angle_at_end_is_the_conv_median_over_the_last_epochs():
    # three convs: medians per epoch 2, 4, 6, 8 (the head's 1.0 would raise every one of them if it counted)
    h = _step_history("r", [[1, 3, 5, 7], [2, 4, 6, 8], [9, 9, 9, 9]], head=100.0)
    assert tf.step_angle_at_end(h, tail=0) == pytest.approx(8.0)  # last measured epoch only
    assert tf.step_angle_at_end(h, tail=0.1) == pytest.approx(8.0)  # 10 % of 4 epochs: still one
    assert tf.step_angle_at_end(h, tail=0.5) == pytest.approx(7.0)  # mean of the last two medians (6, 8)
    h.loc[h["epoch"] == 4, [c for c in h.columns if c.startswith("step_angle")]] = np.nan  # diverged in epoch 4
    assert tf.step_angle_at_end(h, tail=0) == pytest.approx(6.0)
    assert math.isnan(tf.step_angle_at_end(h.drop(columns=[c for c in h.columns if c.startswith("step_angle")])))


def test_equilibrium_table_predicted_against_measured_per_sigma():
    pred = math.sqrt(2 * 0.1 * 0.01)
    rows = [{"weight_decay": 0.01, "sigma_w": s, "seed": k, "T_L2": 6.0} for s in (0.5, 2.0) for k in (0, 1)]
    rows += [{"weight_decay": 0.0, "sigma_w": s} for s in (0.5, 2.0)]  # no weight decay: not in T6
    rows += [{"weight_decay": 0.1, "sigma_w": s} for s in (0.5, 2.0)]  # recorded before the instruments
    rows += [{"optimizer": "adam", "lr": 1e-3, "weight_decay": 0.01, "sigma_w": s} for s in (0.5, 2.0)]
    runs = _runs(rows)
    # measured (last epoch, tail 0): σ 0.5 seeds 0.9 and 1.1 × pred (mean 1.0), σ 2.0 both 1.2 × pred
    factors = {"r000": 0.9, "r001": 1.1, "r002": 1.2, "r003": 1.2, "r004": 5.0, "r005": 5.0, "r008": 0.3, "r009": 0.4}
    h = pd.concat([_step_history(r, [[0.0, pred * f]] * 3) for r, f in factors.items()]
                  + [pd.DataFrame({"run_id": ["r006", "r007"], "epoch": [2, 2]})])
    t = tf.equilibrium_table(runs, h, tail=0)
    assert len(t) == 2 and set(t["optimizer"]) == {"sgd", "adam"}  # the weight-decay configs with instruments
    sgd = t[t["optimizer"] == "sgd"].iloc[0]
    assert sgd["predicted"] == pytest.approx(pred)
    assert sgd["sigma_w=0.5"] == pytest.approx(pred) and sgd["sigma_w=2"] == pytest.approx(1.2 * pred)
    assert sgd["ratio_min"] == pytest.approx(1.0) and sgd["ratio_max"] == pytest.approx(1.2)
    assert sgd["sigma_rel_spread"] == pytest.approx(0.2 / 1.1) and sgd["independent_of_sigma"] == "no"
    assert sgd["T_L2"] == 6.0
    adam = t[t["optimizer"] == "adam"].iloc[0]
    assert math.isnan(adam["predicted"]) and math.isnan(adam["ratio_min"])  # adam + coupled L2: none stated
    assert adam["sigma_w=0.5"] == pytest.approx(0.3 * pred)
    assert tf.equilibrium_table(runs, h, tail=0, tolerance=0.2).set_index("optimizer").loc[
        "sgd", "independent_of_sigma"] == "yes"
    with pytest.raises(NoResults, match="no weight-decay configuration"):
        tf.equilibrium_table(runs, h[h["run_id"].isin(["r004", "r005"])])  # only the wd = 0 runs are measured
    with pytest.raises(NoResults):
        tf.equilibrium_table(runs, pd.DataFrame(columns=["run_id", "epoch"]))


# --- T7, F11 -------------------------------------------------------------------------------------------------
def _measured_configs() -> pd.DataFrame:
    """Four configurations of section 03 (σ_w 0.5 / 2.0): spreads 40, 30, 20, 10 pp; angle at best differing by
    20, 15, 10, 5° across σ_w (ρ = +1 with the spread); Θ 1, 2, 4, 8 (ρ = −1); T_adapt 4, 1, 3, 2 (ρ = +0.4); plus
    a section-01 configuration recorded before the instruments (spread 50 pp, in no correlation)."""
    rows = []
    for k, (spread, dangle, theta, t_adapt) in enumerate(((0.4, 20, 1, 4), (0.3, 15, 2, 1), (0.2, 10, 4, 3),
                                                         (0.1, 5, 8, 2))):
        for s, acc, ang in ((0.5, 0.5 + spread, 30.0), (2.0, 0.5, 30.0 - dangle)):
            rows.append({"lr": 0.01 * (k + 1), "sigma_w": s, "test_acc_at_best": acc, "angle_at_best": ang,
                         "Theta_final": theta, "T_adapt": t_adapt})
    return pd.concat([_runs(rows), _runs([{"sigma_w": 0.5, "test_acc_at_best": 0.9, "angle_at_best": None,
                                           "Theta_final": None}, {"sigma_w": 2.0, "test_acc_at_best": 0.4,
                                                                  "angle_at_best": None, "Theta_final": None}],
                                         section="01_optimizers")], ignore_index=True).assign(
        run_id=lambda d: [f"r{i:03d}" for i in range(len(d))])


def test_clock_correlations_on_hand_made_spreads():
    runs = _measured_configs()
    cs = tables.config_spreads(runs).set_index("label")
    assert cs.loc["lr=0.01", "angle_range_deg"] == pytest.approx(20.0) and cs.loc["lr=0.04", "Theta_final"] == 8
    assert math.isnan(cs.loc["sgd", "angle_range_deg"])  # the pre-instrument configuration
    c = tf.clock_correlations(runs).set_index("x")
    assert c.loc["angle_range_deg", "spearman"] == pytest.approx(1.0)
    assert c.loc["Theta_final", "spearman"] == pytest.approx(-1.0)
    assert c.loc["T_adapt", "spearman"] == pytest.approx(0.4)  # ranks (4,1,3,2) vs (4,3,2,1): 1 - 6·6/60
    assert math.isnan(c.loc["T_SGD", "spearman"])  # a constant clock has no rank correlation
    assert (c["n_configs"] == 4).all() and (c.loc[["T_SGD", "T_adapt"], "kind"] == "clock").all()  # same configs
    assert "T_SGD_eff" not in c.index  # not recorded in these runs
    sentence = tf.correlation_sentence(c.reset_index())
    assert "σ_w-range of the angle at the selected epoch +1.00, Θ_final −1.00 (measured)" in sentence
    assert "T_adapt +0.40" in sentence and "n = 4 configuration(s) of 1 section(s)" in sentence
    assert tf.correlation_sentence("T7: no results") == ""
    with pytest.raises(NoResults, match="forgetting instruments"):
        tf.clock_correlations(runs[runs["section"] == "01_optimizers"])


def test_spread_vs_measured_clock_places_every_configuration():
    runs = _measured_configs()
    fig = instrument_plots.spread_vs_measured_clock(runs)
    left, right = fig.axes[:2]
    assert not left.containers  # one seed: a marker each, no error bar (nor one in the legend)
    pts = sorted((float(ln.get_xdata()[0]), float(ln.get_ydata()[0])) for ln in left.lines)
    assert np.allclose(pts, [(5, 10), (10, 20), (15, 30), (20, 40)])
    assert sorted(float(ln.get_xdata()[0]) for ln in right.lines) == [1, 2, 4, 8]
    assert right.get_xscale() == "log"
    assert left.get_title() == "Spearman ρ = +1.00 (n = 4)" and right.get_title() == "Spearman ρ = −1.00 (n = 4)"
    legend = fig.axes[-1].get_legend()  # beside the one row: the old section-01 runs are left out
    assert [t.get_text() for t in legend.get_texts()] == ["lr=0.01", "lr=0.02", "lr=0.03", "lr=0.04"]
    assert legend.get_title().get_text() == "03_lr_l2" and len(fig.axes) == 3
    with pytest.raises(NoResults):
        instrument_plots.spread_vs_measured_clock(runs[runs["section"] == "01_optimizers"])


# --- F10 -----------------------------------------------------------------------------------------------------
def test_angle_curves_one_panel_per_configuration_one_line_per_sigma():
    runs = _runs([{"optimizer": o, "lr": 0.01 if o == "sgd" else 1e-3, "sigma_w": s, "seed": k}
                  for o in ("sgd", "adam", "muon") for s in (0.5, 2.0) for k in (0, 1)], section="01_optimizers")
    frames = []
    for r in runs.itertuples():
        h = pd.DataFrame({"run_id": r.run_id, "epoch": np.arange(4)})
        if r.optimizer != "muon":  # muon's runs predate the instruments: no angle column values
            h["angle"] = np.arange(4) * (10.0 if r.optimizer == "adam" else 1.0 / r.sigma_w) + r.seed
        frames.append(h)
    fig = instrument_plots.angle_curves(runs, pd.concat(frames, ignore_index=True))
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.lines]
    assert [ax.get_title() for ax in axes] == ["sgd", "adam"]
    sgd = {line.get_label(): line.get_ydata().tolist() for line in axes[0].lines}
    assert sgd == {"σ_w=0.5": pytest.approx([0.5, 2.5, 4.5, 6.5]), "σ_w=2": pytest.approx([0.5, 1.0, 1.5, 2.0])}
    assert axes[0].get_shared_y_axes().joined(axes[0], axes[1])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["σ_w=0.5", "σ_w=2"]
    with pytest.raises(NoResults, match="angle"):
        instrument_plots.angle_curves(runs, pd.concat(frames).drop(columns="angle"))


# --- diverged σ_w --------------------------------------------------------------------------------------------
def _write(root, section, cfg, diverged: bool, acc: float):
    from initmem.config import run_id
    from initmem.store.folders import RunFolders

    e = np.arange(4)
    bad = np.where(e >= 1, np.nan, 2.3) if diverged else None
    h = pd.DataFrame({"epoch": e, "step": 10 * e, "lr": cfg.lr,
                      "train_loss": bad if diverged else [np.nan, 1.0, 0.5, 0.1],
                      "train_acc_running": [np.nan, 0.5, 0.8, 1.0], "train_acc": [0.1, 0.1, 0.1, 0.1] if diverged
                      else [0.1, 0.6, 0.9, 1.0], "val_loss": bad if diverged else [2.3, 1.0, 0.8, 0.9],
                      "val_acc": 0.1 if diverged else acc, "test_loss": bad if diverged else [2.3, 1.0, 0.8, 0.9],
                      "test_acc": [0.1, 0.1, 0.1, 0.1] if diverged else [0.1, acc - 0.1, acc, acc - 0.05],
                      "weight_norm": [10.0, np.nan, np.nan, np.nan] if diverged else [10.0, 11.0, 12.0, 12.5],
                      "T_SGD": 1e-4 * e, "T_L2": cfg.weight_decay * cfg.lr * 10 * e, "T_adapt": cfg.lr * 10 * e,
                      "wall_time": e.astype(float),
                      "angle": [0.0, np.nan, np.nan, np.nan] if diverged else [0.0, 5.0, 8.0, 10.0],
                      "Theta": [0.0, np.nan, np.nan, np.nan] if diverged else [0.0, 0.1, 0.2, 0.3]})
    RunFolders(root, section).write(SimpleNamespace(
        config=cfg, run_id=run_id(cfg), status="diverged" if diverged else "complete", history=h,
        summary=metrics.summarize_history(h), provenance={}, started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:00:01Z"))


@pytest.fixture
def diverged_tree(tmp_path):
    """Section 03, SGD lr 0.1 × wd {0, 0.01}, σ_w {0.1, 1, 2.5} × seeds {0, 1}: at wd = 0.01 the σ_w = 2.5 runs
    diverge at epoch 1 (NaN losses from then on), so that point's spread is over σ_w 0.1 and 1 only."""
    from initmem.config import TrainConfig

    accs = {0.1: 0.6, 1.0: 0.5, 2.5: 0.3}
    for wd in (0.0, 0.01):
        for s, acc in accs.items():
            for seed in (0, 1):
                cfg = TrainConfig(data="synthetic", optimizer="sgd", lr=0.1, weight_decay=wd, sigma_w=s, seed=seed,
                                  epochs=3, device="cpu")
                _write(tmp_path, "03_lr_l2", cfg, diverged=wd > 0 and s == 2.5, acc=acc + 0.01 * seed)
    return tmp_path


def test_a_diverged_sigma_is_shown_in_every_spread_table(diverged_tree):
    from initmem.store.results import load_runs

    runs = load_runs(diverged_tree)
    assert runs["status"].eq("diverged").sum() == 2 and runs["test_acc_at_best"].isna().sum() == 2
    summary = metrics.point_summary(runs[runs["weight_decay"] > 0])
    assert summary["sigma_ws_missing"] == [2.5] and summary["diverged_sigma_ws"] == [2.5]

    t1 = tables.optimizer_table(runs).set_index("weight_decay")
    assert t1.loc[0.01, "sigma_w=2.5"] == cells.DIVERGED and t1.loc[0.0, "sigma_w=2.5"] == pytest.approx(30.5)
    assert t1.loc[0.01, "diverged"] == "2/6" and t1.loc[0.0, "diverged"] == "0/6"
    assert t1.loc[0.01, "spread_pp"] == pytest.approx(10.0)  # over σ_w 0.1 and 1 only: and it says so

    headers, rows = display.display_rows(t1.reset_index())
    assert rows[1][headers.index("σ_w=2.5")] == "diverged"

    cs = tables.config_spreads(runs).set_index("label")
    assert cs.loc["wd=0.01", ["n_sigma", "n_sigma_in_spread", "n_diverged"]].tolist() == [3, 2, 2]
    assert cs.loc["wd=0", ["n_sigma", "n_sigma_in_spread"]].tolist() == [3, 3]
    assert cs.loc["wd=0.01", "diverged"] == "2/6"

    t3 = tables.lr_l2_table(runs)
    assert list(t3.columns) == ["lr", "wd=0", "wd=0_lo", "wd=0_hi", "wd=0.01", "wd=0.01_lo", "wd=0.01_hi",
                                "diverged"]  # two seeds: each spread with its interval
    assert t3.loc[0, "diverged"] == "2/12 (wd=0.01 without σ_w=2.5)" and t3.attrs["narrowed"] == [(0, "wd=0.01")]
    f5 = plots.spread_heatmap(runs).axes[0]
    assert sorted(t.get_text() for t in f5.texts) == ["10.0*", "30.0"] and "fewer σ_w" in f5.get_xlabel()
    labels = [t.get_text() for t in plots.spread_vs_clocks(runs).axes[-1].get_legend().get_texts()]
    assert labels == ["wd=0", "wd=0.01 (σ_w 2/3)"]

    t5 = tables.depth_table(runs)
    assert t5.loc[1, "sigma_w=2.5"] == "diverged" and t5.loc[1, "diverged"] == "2/6"
    t2 = tables.long_training_table(runs, marks=[2, 3])  # a history with no finite val_loss is no crash
    assert t2.loc[t2["weight_decay"] == 0.01, "sigma_w=2.5"].tolist() == ["diverged"] * 2
    assert t2.loc[t2["weight_decay"] == 0.01, "spread_pp"].tolist() == pytest.approx([10.0, 10.0])
    rt = point_report.run_rows(runs)
    assert rt.loc[rt["status"] == "diverged", "diverged_epoch"].tolist() == [1, 1]
    assert list(rt.columns[-3:]) == ["diverged_epoch", "angle_final", "Theta_final"]
    assert rt.loc[rt["status"] == "complete", "angle_final"].tolist() == [10.0] * 10
    shown = point_report.run_table(runs)  # as a person reads it: '–' where a diverged run has no accuracy
    assert list(shown.columns[-3:]) == ["diverged at epoch", "final angle (°)", "Θ_final (rad)"]
    assert shown.loc[shown["status"] == "diverged", ["test acc (%)", "diverged at epoch"]].values.tolist() == [
        ["–", "1"]] * 2
    assert shown.loc[shown["status"] == "complete", "final angle (°)"].tolist() == ["10.00"] * 10
    assert point_report.point_table(runs[runs["weight_decay"] > 0]).loc[2.5, "test acc (%)"] == "diverged"


# --- T8, F12: forgetting as it unfolds -----------------------------------------------------------------------
def _unfolding_runs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two section-03 configurations (lr 0.01, 0.1; no weight decay), σ_w 0.5 / 2.0 × seeds 0 / 1, three epochs:
    test accuracy 0.5, 0.6, 0.7 (σ_w 0.5) and 0.4 throughout (σ_w 2.0); the validation loss lowest at epoch 2, the
    validation accuracy highest at epoch 1. So the spread had training stopped at e = 1, 2, 3 is 10, 20, 20 pp
    (lowest val_loss), 10, 10, 10 (highest val_acc), 10, 20, 30 (last epoch). Θ = e (σ_w 0.5) and 0.5 e + 0.1 seed
    (σ_w 2.0, the slowest: seed mean 0.5 e + 0.05)."""
    runs = _runs([{"lr": lr, "sigma_w": s, "seed": k} for lr in (0.01, 0.1) for s in (0.5, 2.0) for k in (0, 1)])
    frames = []
    for r in runs.itertuples():
        e = np.arange(4)
        frames.append(pd.DataFrame({
            "run_id": r.run_id, "epoch": e, "val_loss": [2.3, 1.0, 0.5, 0.8], "val_acc": [0.1, 0.9, 0.5, 0.5],
            "test_acc": [0.1, 0.5, 0.6, 0.7] if r.sigma_w == 0.5 else [0.1, 0.4, 0.4, 0.4],
            "T_SGD": 1e-4 * e, "T_L2": 0.0 * e, "T_adapt": 10 * r.lr * e,
            "Theta": 1.0 * e if r.sigma_w == 0.5 else 0.5 * e + 0.1 * r.seed * (e > 0)}))
    return runs, pd.concat(frames, ignore_index=True)


def test_unfolding_table_reads_each_epoch_under_each_rule():
    runs, h = _unfolding_runs()
    t = tf.unfolding_table(runs, h)
    assert list(dict.fromkeys(t["rule"])) == ["val_loss", "val_acc", "last"] and len(t) == 2 * 3 * 3
    for lr in (0.01, 0.1):
        c = t[t["label"] == f"lr={lr:g}"]
        by = {rule: c.loc[c["rule"] == rule, "spread_pp"].tolist() for rule in ("val_loss", "val_acc", "last")}
        assert by == {"val_loss": pytest.approx([10, 20, 20]), "val_acc": pytest.approx([10, 10, 10]),
                      "last": pytest.approx([10, 20, 30])}
        one = c[c["rule"] == "val_loss"]
        assert one["epoch"].tolist() == [1, 2, 3] and (one["spread_pp_hi"] >= one["spread_pp_lo"]).all()
        assert one["T_SGD"].tolist() == pytest.approx([1e-4, 2e-4, 3e-4]) and (one["T_L2"] == 0).all()
        assert one["T_adapt"].tolist() == pytest.approx([10 * lr, 20 * lr, 30 * lr])
        assert one["Theta_slowest"].tolist() == pytest.approx([0.55, 1.05, 1.55])  # σ_w 2.0's seed mean
        assert (one["n_sigma_in_spread"] == 2).all() and (one["n_sigma"] == 2).all()
    # the same run ids in a second section (one config run by both) with other histories: each reads its own
    other = runs.assign(section="02_long_training")
    both = tf.unfolding_table(pd.concat([runs, other], ignore_index=True), pd.concat(
        [h.assign(section="03_lr_l2"), h.assign(section="02_long_training", test_acc=0.5)], ignore_index=True))
    assert both.loc[both["section"] == "03_lr_l2", "spread_pp"].tolist() == pytest.approx(t["spread_pp"].tolist())
    assert both.loc[both["section"] == "02_long_training", "spread_pp"].tolist() == pytest.approx([0] * 18)
    only = tf.unfolding_table(runs, h, rules=["last"])
    assert set(only["rule"]) == {"last"}
    with pytest.raises(ConfigError, match="rule='best' is invalid"):
        tf.unfolding_table(runs, h, rules=["best"])
    with pytest.raises(NoResults, match="no training history"):
        tf.unfolding_table(runs, h[h["epoch"] == 0])


def test_unfolding_table_is_point_summarys_spread_of_the_restricted_selection(diverged_tree):
    """Every row, diverged σ_w included (wd = 0.01: σ_w 2.5 diverged at epoch 1, out of every spread), equals
    `point_spread` of the runs read at `test_at_best(history, upto=e, rule)`; the last epoch under the paper's rule
    is the configuration's spread."""
    from initmem.store.results import load_histories, load_runs

    runs, h = load_runs(diverged_tree), load_histories(diverged_tree)
    t = tf.unfolding_table(runs)
    confs = tables.configurations(runs)

    def at(rid: str, e: int, rule: str) -> float:
        try:
            return metrics.test_at_best(h[h["run_id"] == rid], upto=e, rule=rule)
        except ConfigError:
            return math.nan

    for r in t.itertuples():
        g = confs[confs["config"] == r.config]
        want = cells.spread_cells(g.assign(test_acc_at_best=[at(x, r.epoch, r.rule) for x in g["run_id"]]), True)
        assert [r.spread_pp, r.spread_pp_lo, r.spread_pp_hi] == pytest.approx(
            [want["spread_pp"], want["spread_pp_lo"], want["spread_pp_hi"]], nan_ok=True), r
    wd = t[t["label"] == "wd=0.01"]
    assert (wd["n_sigma_in_spread"] == 2).all() and (wd["n_sigma"] == 3).all()
    final = t[(t["rule"] == "val_loss") & (t["epoch"] == 3)].set_index("label")["spread_pp"]
    assert final.to_dict() == pytest.approx(tables.config_spreads(runs).set_index("label")["spread_pp"].to_dict())


def test_collapse_table_measures_the_disagreement_at_equal_clock():
    runs, h = _unfolding_runs()
    c = tf.collapse_table(tf.unfolding_table(runs, h)).set_index(["rule", "clock"])
    # both configurations share T_SGD and Θ and their spreads agree there: one curve
    assert c.loc[("val_loss", "T_SGD"), ["dispersion_pp", "collapse_ratio"]].tolist() == pytest.approx([0, 0])
    assert c.loc[("last", "Theta_slowest"), "n_bins"] >= 2 and c.loc[("last", "Theta_slowest"), "configs_per_bin"] == 2
    # T_adapt = 10 lr e puts them a decade apart: no bin is shared; T_L2 is zero for both
    assert c.loc[("val_loss", "T_adapt"), "n_bins"] == 0 and math.isnan(c.loc[("val_loss", "T_adapt"),
                                                                               "dispersion_pp"])
    assert c.loc[("val_loss", "T_L2"), "n_configs"] == 0
    apart = pd.DataFrame({"rule": "val_loss", "config": [0, 0, 1, 1], "spread_pp": [10.0, 10.0, 30.0, 30.0],
                          "T_SGD": [1e-4, 1e-3] * 2, "T_adapt": 1.0, "T_L2": 0.0, "Theta_slowest": np.nan})
    a = tf.collapse_table(apart).set_index("clock")
    assert a.loc["T_SGD", "dispersion_pp"] == pytest.approx(math.sqrt(200)) and a.loc["T_SGD", "n_bins"] == 2
    assert a.loc["T_SGD", "collapse_ratio"] > 1  # at equal clock they disagree as much as anywhere
    assert math.isnan(a.loc["T_SGD", "ratio_theta_configs"])  # neither configuration has Θ
    some = apart.assign(Theta_slowest=[0.1, 1.0, np.nan, np.nan], spread_pp=[10.0, 20.0, 30.0, 30.0])
    s = tf.collapse_table(pd.concat([some, some.assign(config=2, spread_pp=[10.0, 20.0, 10.0, 20.0])]))
    s = s.set_index("clock")  # configurations 0 and 2 have Θ and agree on T_SGD: 0 there, not over all three
    assert s.loc["T_SGD", "ratio_theta_configs"] == 0 and s.loc["T_SGD", "collapse_ratio"] > 0.5
    assert "T_SGD" in tf.collapse_sentence(s.reset_index()) and "(0.00 on Θ's 2)" in tf.collapse_sentence(
        s.reset_index())
    sentence = tf.collapse_sentence(c.reset_index())
    assert sentence.startswith("collapse ratio under lowest validation loss selection") and "T_SGD 0.00" in sentence
    assert "T_adapt –" in sentence and "T_L2 – (0 configuration(s))" in sentence
    assert tf.collapse_sentence("T8: no results") == ""


def test_unfolding_figure_one_line_per_configuration_per_rule_and_clock():
    runs, h = _unfolding_runs()
    fig = instrument_plots.unfolding_figure(runs, h)  # the paper's rule: a panel per clock
    t_sgd, t_adapt, t_l2, theta = fig.axes[:4]
    assert [line.get_label() for line in t_sgd.lines] == ["lr=0.01", "lr=0.1"]
    assert theta.lines[1].get_xdata().tolist() == pytest.approx([0.55, 1.05, 1.55])  # Θ of the slowest σ_w
    assert all(ax.get_xscale() == "log" for ax in (t_sgd, t_adapt, theta))
    assert not t_l2.lines and t_l2.get_xlabel().endswith("2 not shown\n(T_L2 = 0: no L2)")
    assert "ratio 0.00" in t_sgd.get_title() and "no clock bin" in t_adapt.get_title()  # T8's, over the column
    assert not any(ax.texts for ax in fig.axes)  # nothing written over the lines
    assert [t.get_text() for t in fig.axes[-1].get_legend().get_texts()] == ["lr=0.01", "lr=0.1"]
    last = instrument_plots.unfolding_figure(runs, h, rule="last").axes[0]  # another rule: its own lines
    assert last.lines[0].get_xdata().tolist() == pytest.approx([1e-4, 2e-4, 3e-4])
    assert last.lines[0].get_ydata().tolist() == pytest.approx([10, 20, 30])
    with pytest.raises(NoResults, match="selection rule"):
        instrument_plots.unfolding_figure(runs, h, rule="no_such_rule")


def test_the_selection_rules_figure_bars_t8s_collapse_ratio_per_clock_and_rule():
    runs, h = _unfolding_runs()
    t = tf.unfolding_table(runs, h)
    fig = instrument_plots.selection_rules_figure(table=t)
    (ax,) = fig.axes
    collapse = tf.collapse_table(t).set_index(["rule", "clock"])["collapse_ratio"]
    rules = list(dict.fromkeys(t["rule"]))
    bars = [b for c in ax.containers for b in c]
    assert len(bars) == len(rules) * len(tf.UNFOLD_CLOCKS)
    first = [b.get_height() for b in ax.containers[0]]
    want = [0 if np.isnan(v) else v for v in collapse.loc[rules[0]].reindex(tf.UNFOLD_CLOCKS)]
    assert first == pytest.approx(want)
    assert collapse.isna().any() and "–" in {t.get_text() for t in ax.texts}  # a missing ratio says so, not 0
    assert "(paper)" in ax.get_legend().get_texts()[0].get_text()


# --- one point -----------------------------------------------------------------------------------------------
def test_point_table_one_row_per_sigma_with_mean_and_std(diverged_tree):
    from initmem.store.results import load_runs

    runs = load_runs(diverged_tree)
    point = runs[runs["weight_decay"] > 0]
    t = point_report.point_table(point)
    assert t.index.tolist() == [0.1, 1.0, 2.5] and t.index.name == "σ_w" and len(t.columns) == 7
    assert t.loc[0.1, "test acc (%)"] == f"60.5 ± {100 * math.sqrt(0.5e-4):.1f}"  # seeds 0.60, 0.61
    assert t.loc[0.1, "runs"] == "2 complete" and t.loc[2.5, "runs"] == "2 diverged"
    assert t.loc[0.1, "best epoch"] == "2 ± 0" and t.loc[0.1, "τ_interp"] == "3 ± 0"  # the seeds agree
    assert t.loc[0.1, "angle at best (°)"] == "8.000 ± 0.000" and t.loc[0.1, "Θ_final (rad)"] == "0.3000 ± 0.0000"
    assert t.loc[2.5, "τ_interp"] == "never" and t.loc[2.5, "angle at best (°)"] == "–"
    old = _runs([{"sigma_w": s, "seed": k, "test_acc_at_best": 0.5 + 0.1 * k} for s in (0.5, 1.0) for k in (0, 1)])
    t = point_report.point_table(old.assign(tau_interp=[3.0, None, 4.0, 6.0]))  # recorded before the instruments
    assert t.loc[0.5, "angle at best (°)"] == "–" and t.loc[0.5, "τ_interp"] == "3 (1/2)"
    assert t.loc[1.0, "τ_interp"] == f"5 ± {math.sqrt(2):.0f}"
    with pytest.raises(ConfigError, match="2 configurations"):
        point_report.point_table(runs)


def test_point_figure_reads_the_run_folders_and_shows_inline(diverged_tree):
    from IPython.core.formatters import DisplayFormatter

    from initmem.store.results import load_runs

    runs = load_runs(diverged_tree)
    fig = point_report.point_figure(runs[runs["weight_decay"] > 0])  # histories from the runs' own folders
    a, b, c = fig.axes
    assert tuple(fig.get_size_inches()) == (8.0, 2.6)
    assert a.get_title() == "test acc. at selected epoch\nspread 10.0 pp over 2/3 σ_w"
    assert [t.get_text() for t in a.texts] == ["✗ diverged"]
    assert [line.get_label() for line in c.lines] == ["σ_w=0.1", "σ_w=1"]  # the diverged σ_w has no angle
    assert c.lines[0].get_ydata().tolist() == [0.0, 5.0, 8.0, 10.0]
    assert b.get_yscale() == "linear"  # norms 10 to 12.5: no decade to span
    data, _ = DisplayFormatter().format(fig)
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"  # inline in Jupyter without registering anything
    old = runs[runs["weight_decay"] == 0]
    h = pd.DataFrame({"run_id": old["run_id"].repeat(2).to_numpy(), "epoch": [0, 1] * len(old), "weight_norm": 1.0})
    fig = point_report.point_figure(old, h)  # histories without the instruments
    assert not fig.axes[2].lines and "no angle from initialisation recorded" in fig.axes[2].texts[0].get_text()
    with pytest.raises(NoResults):
        point_report.point_figure(old.iloc[:0], h)


def test_show_point_shows_each_view_under_the_line_that_says_what_it_is(diverged_tree, monkeypatch):
    import IPython.display
    from matplotlib.figure import Figure

    from initmem.store.results import load_runs

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs: shown.append(objs))
    point = load_runs(diverged_tree)
    point = point[point["weight_decay"] > 0]
    point_report.show_point(point)
    assert len(shown) == 3  # one display call per group: its text first, then its views
    texts = [objs[0].data for objs in shown]
    assert texts[0].startswith("The point as a researcher reads it") and texts[1].startswith("One row per run")
    assert texts[2].startswith("The point's numbers")
    (table, fig), (runs_table,), (summary,) = (objs[1:] for objs in shown)
    assert table.equals(point_report.point_table(point)) and isinstance(fig, Figure)
    assert len(runs_table) == len(point) and summary.equals(point_report.summary_table(point))
    s = metrics.point_summary(point)
    c = cells.spread_cells(point, multi=True)  # T1's definition and interval, not the std of per-seed spreads
    shown_spread = summary.loc["spread across σ_w (pp)", "value"]
    assert shown_spread.startswith(display.number(c["spread_pp"], "percent"))
    assert shown_spread.endswith("(one seed: no interval)" if point.groupby("sigma_w")["seed"].nunique().max() < 2
                                 else f"[{display.number(c['spread_pp_lo'], 'percent')}, "
                                      f"{display.number(c['spread_pp_hi'], 'percent')}] (95 %)")
    assert summary.loc["runs diverged", "value"] == f"{s['n_diverged']}/{s['n_runs']}"


def test_a_points_spread_is_shown_with_t1s_interval_where_it_has_seeds():
    from initmem.store.results import load_runs
    runs = load_runs(Path(__file__).resolve().parents[1] / "results" / "cpu_w025_pilot")
    sgd = runs[runs["optimizer"] == "sgd"]
    t1 = cells.spread_cells(sgd, multi=True)
    assert point_report.summary_table(sgd).loc["spread across σ_w (pp)", "value"] == (
        f"{t1['spread_pp']:.1f} [{t1['spread_pp_lo']:.1f}, {t1['spread_pp_hi']:.1f}] (95 %)")
    assert point_report.summary_table(sgd[sgd["seed"] == 0]).loc["spread across σ_w (pp)", "value"].endswith(
        "(one seed: no interval)")
