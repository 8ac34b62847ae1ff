"""Metrics on hand-made histories with hand-computed answers; the clocks against closed forms."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from initmem import metrics
from initmem.errors import ConfigError
from initmem.metrics import (
    DEFAULT_RULE,
    DIAGNOSTIC_KEYS,
    EXTRA_CLOCKS,
    SELECTION_RULES,
    SUMMARY_KEYS,
    ClockAccumulator,
    best_epoch,
    forgetting_clocks,
    interpolation_epoch,
    lr_scale,
    radial_memory,
    repair_gap,
    spread,
    summarize_history,
    test_at_best,
    test_at_best_by_epoch,
)

nan = float("nan")


def _history(**cols) -> pd.DataFrame:
    """Epochs 0..4; epoch 0 at initialisation (NaN train loss)."""
    base = dict(
        epoch=[0, 1, 2, 3, 4],
        step=[0, 10, 20, 30, 40],
        lr=[0.1] * 5,
        train_loss=[nan, 2.0, 1.0, 0.5, 0.1],
        train_acc_running=[nan, 0.3, 0.6, 0.9, 0.99],
        train_acc=[0.10, 0.40, 0.90, 0.996, 1.0],
        val_loss=[2.3, 1.5, 1.2, 1.3, 1.4],
        val_acc=[0.10, 0.50, 0.60, 0.62, 0.65],
        test_loss=[2.3, 1.5, 1.2, 1.3, 1.4],
        test_acc=[0.10, 0.48, 0.61, 0.60, 0.64],
        weight_norm=[10.0, 11.0, 12.0, 14.0, 15.0],
        T_SGD=[0.0, 0.1, 0.2, 0.3, 0.4],
        T_L2=[0.0] * 5,
        T_adapt=[0.0, 1.0, 2.0, 3.0, 4.0],
        wall_time=[0.0, 1.5, 3.0, 4.5, 6.25],
    )
    base.update(cols)
    return pd.DataFrame(base)


def test_interpolation_epoch():
    assert interpolation_epoch([0.5, 0.99, 0.995, 1.0]) == 3  # 1-based, >= threshold
    assert interpolation_epoch([0.5, nan, 0.9]) is None
    assert interpolation_epoch([0.5, 0.9], threshold=0.9) == 2
    assert interpolation_epoch([]) is None


def test_collapse_epoch_is_the_first_fall_of_drop_below_the_best_since_tau_interp():
    acc = [0.5, 0.9, 0.996, 1.0, 0.85, 0.79, 1.0, 0.2]
    assert metrics.collapse_epoch(acc, 3) == 6  # 0.79 <= 1.0 - 0.2; 0.85 is not a collapse
    assert metrics.collapse_epoch(acc, 3, drop=0.1) == 5
    assert metrics.collapse_epoch(acc[:5], 3) is None
    assert metrics.collapse_epoch(acc, None) is None
    assert metrics.collapse_epoch([1.0, 0.5, 0.6, 1.0], 3) is None  # a fall before tau_interp is not a collapse
    assert metrics.collapse_epoch([1.0, float("nan"), 0.7], 1) == 3  # a missing epoch neither counts nor resets


def test_best_epoch():
    assert best_epoch([3.0, 1.0, 2.0, 1.0]) == 2  # first of the ties
    assert best_epoch([nan, 5.0, nan, 4.0]) == 4
    with pytest.raises(ConfigError):
        best_epoch([nan, nan])
    with pytest.raises(ConfigError):
        best_epoch([])


def test_test_at_best():
    h = _history()
    assert test_at_best(h) == 0.61  # val_loss lowest at epoch 2 (epoch 0 excluded even if lower)
    assert test_at_best(_history(val_loss=[0.1, 1.5, 1.2, 1.3, 1.4])) == 0.61
    assert test_at_best(h, upto=1) == 0.48


def test_selection_rules_pick_the_epoch_they_name():
    assert DEFAULT_RULE == "val_loss" and list(SELECTION_RULES) == ["val_loss", "val_acc", "last"]
    assert best_epoch([3.0, 1.0, 2.0, 1.0], rule="val_loss") == best_epoch([3.0, 1.0, 2.0, 1.0]) == 2
    assert best_epoch([0.5, 0.7, 0.6, 0.7], rule="val_acc") == 2  # highest, the first of the ties
    assert best_epoch([nan, 0.7, nan, 0.8], rule="val_acc") == 4
    assert best_epoch([1.0, 2.0, nan], rule="last") == 2  # the last with a value
    with pytest.raises(ConfigError, match="rule='best' is invalid"):
        best_epoch([1.0], rule="best")
    with pytest.raises(ConfigError, match="val_acc has no non-NaN value"):
        best_epoch([nan], rule="val_acc")
    h = _history()  # val_loss lowest at epoch 2, val_acc highest at epoch 4
    assert test_at_best(h, rule="val_loss") == test_at_best(h) == 0.61
    assert test_at_best(h, rule="val_acc") == 0.64 and test_at_best(h, upto=3, rule="val_acc") == 0.60
    assert test_at_best(h, rule="last") == 0.64 and test_at_best(h, upto=2, rule="last") == 0.61
    # epoch 4 diverged (NaN val_loss): its validation accuracy is a broken network's and no rule selects it
    bad = _history(val_loss=[2.3, 1.5, 1.2, 1.3, nan], val_acc=[0.1, 0.5, 0.6, 0.62, 0.9])
    assert test_at_best(bad, rule="val_acc") == 0.60 and test_at_best(bad, rule="last") == 0.60
    with pytest.raises(ConfigError, match="rule='first' is invalid"):
        test_at_best(h, rule="first")


@pytest.mark.parametrize("rule", list(SELECTION_RULES))
def test_selection_by_epoch_is_the_restricted_selection_at_every_epoch(rule):
    rng = np.random.default_rng(3)
    n = 12
    h = pd.DataFrame({"epoch": np.arange(n + 1), "val_loss": [2.3, nan, *rng.uniform(0.5, 2.0, n - 1)],
                      "val_acc": [0.1, 0.2, *rng.uniform(0.3, 0.9, n - 1)], "test_acc": rng.uniform(0.1, 0.9, n + 1)})
    by = test_at_best_by_epoch(h.sample(frac=1, random_state=0), rule)  # row order does not matter
    assert by.index.tolist() == list(range(1, n + 1))
    assert math.isnan(by.loc[1])  # epoch 1 alone has no validation loss: nothing to select
    assert by.loc[2:].tolist() == [test_at_best(h, upto=e, rule=rule) for e in range(2, n + 1)]
    assert by.iloc[-1] == test_at_best(h, rule=rule)  # stopped at the last epoch: the unrestricted selection


def test_spread():
    assert spread([0.90, 0.635, 0.8]) == pytest.approx(26.5)  # accuracies -> percentage points
    assert spread([90.0, 63.5, nan]) == pytest.approx(26.5)
    assert spread([0.5]) == 0.0
    with pytest.raises(ConfigError):
        spread([])
    with pytest.raises(ConfigError):
        spread([nan, nan])


def test_repair_gap():
    assert repair_gap(_history()) == pytest.approx(0.65 - 0.62)  # tau = epoch 3
    assert repair_gap(_history(train_acc=[0.1, 0.2, 0.3, 0.4, 0.5])) is None


def test_repair_gap_of_a_run_that_interpolates_and_later_diverges_is_read_at_its_last_finite_epoch():
    # interpolates at epoch 2 (val 0.60), still finite at epoch 3 (val 0.63), diverges at epoch 4 (chance-level
    # val_acc 0.10 beside NaN losses): the gap is 0.63 - 0.60, not 0.10 - 0.60
    h = _history(train_acc=[0.1, 0.5, 0.996, 0.998, 0.1], train_loss=[nan, 2.0, 0.1, 0.05, nan],
                 val_loss=[2.3, 1.5, 1.2, 1.1, nan], test_loss=[2.3, 1.5, 1.2, 1.1, math.inf],
                 val_acc=[0.1, 0.5, 0.60, 0.63, 0.10])
    assert repair_gap(h) == pytest.approx(0.63 - 0.60)
    s = summarize_history(h)
    assert (s["tau_interp"], s["diverged_epoch"]) == (2, 4) and s["repair_gap"] == pytest.approx(0.03)
    # only the val loss is non-finite at epoch 4: that row is not finite either
    h2 = _history(train_acc=[0.1, 0.5, 0.996, 0.998, 0.1], val_loss=[2.3, 1.5, 1.2, 1.1, nan],
                  val_acc=[0.1, 0.5, 0.60, 0.63, 0.10])
    assert repair_gap(h2) == pytest.approx(0.03)


def test_radial_memory():
    init = np.array([1.0, 2.0, 4.0, 8.0])
    assert radial_memory(init, 3 * init) == pytest.approx(1.0)  # coupled: memory
    assert radial_memory(init, [5.0, 5.0, 5.0, 5.0]) == pytest.approx(0.0, abs=1e-12)  # common scale: forgotten
    assert radial_memory(init, init**0.5) == pytest.approx(0.5)
    # y = [1, 2, 2] against x = [1, 2, 4] in logs: slope = cov / var, by hand
    lx, ly = np.log([1, 2, 4]), np.log([1, 2, 2])
    assert radial_memory([1, 2, 4], [1, 2, 2]) == pytest.approx(np.polyfit(lx, ly, 1)[0])
    with pytest.raises(ConfigError):
        radial_memory([1.0, 1.0], [2.0, 3.0])
    with pytest.raises(ConfigError):
        radial_memory([1.0, 2.0], [0.0, 3.0])


def test_clocks_constant_schedule():
    c = forgetting_clocks([0.01] * 1000, batch_size=128, l2=5e-4)
    assert c["T_SGD"] == pytest.approx(1000 * 0.01**2 / 128, rel=1e-12)
    assert c["T_adapt"] == pytest.approx(10.0, rel=1e-12)
    assert c["T_L2"] == pytest.approx(5e-4 * 10.0, rel=1e-12)


def test_clocks_cosine_schedule():
    # eta_k = eta (1 + cos(pi k / K)) / 2, k = 0..K-1: sum = eta K / 2 + eta / 2 (the cos terms sum to 1);
    # sum of squares = eta^2 (3K/8 + 1/2) (cos sums to 1, cos^2 sums to K/2 for K > 2)
    eta, K, b = 0.1, 1000, 64
    lrs = [eta * 0.5 * (1 + math.cos(math.pi * k / K)) for k in range(K)]
    c = forgetting_clocks(lrs, batch_size=b, l2=1e-2)
    assert c["T_adapt"] == pytest.approx(eta * (K / 2 + 0.5), rel=1e-12)
    assert c["T_SGD"] == pytest.approx(eta**2 * (3 * K / 8 + 0.5) / b, rel=1e-12)
    assert c["T_L2"] == pytest.approx(1e-2 * eta * (K / 2 + 0.5), rel=1e-12)


@pytest.mark.parametrize("optimizer, momentum, factor", [("sgd_momentum", 0.9, 10.0), ("sgd_momentum", 0.5, 2.0),
                                                         ("sgd", 0.0, 1.0), ("adam", 0.0, 1.0), ("adamw", 0.0, 1.0),
                                                         ("muon", 0.95, 1.0)])
def test_lr_scale_is_one_over_one_minus_beta_for_heavy_ball_momentum_only(optimizer, momentum, factor):
    assert lr_scale(optimizer, momentum) == pytest.approx(factor, rel=1e-15)


def test_the_eff_clocks_by_hand():
    # sgd_momentum beta 0.9: effective step 10 eta. 100 steps of eta = 0.01, b = 64, l2 = 1e-3:
    # T_SGD_eff = 100 (10 * 0.01)^2 / 64 = 0.015625, T_L2_eff = 1e-3 * 100 * 0.1 = 0.01, T_adapt_eff = 100 * 0.1 = 10
    acc = ClockAccumulator(64, l2=1e-3, scale=lr_scale("sgd_momentum", 0.9))
    for _ in range(100):
        acc.update(0.01)
    t = acc.totals()
    assert tuple(t) == ("T_SGD", "T_L2", "T_adapt", *EXTRA_CLOCKS)
    assert t["T_SGD_eff"] == pytest.approx(0.015625, rel=1e-12)
    assert t["T_L2_eff"] == pytest.approx(0.01, rel=1e-12)
    assert t["T_adapt_eff"] == pytest.approx(10.0, rel=1e-12)
    assert (t["T_SGD"], t["T_L2"], t["T_adapt"]) == pytest.approx((0.00015625, 1e-3, 1.0), rel=1e-12)  # unscaled
    plain = ClockAccumulator(64, l2=1e-3)  # scale 1: the _eff clocks are the plain ones
    plain.update(0.01)
    assert [plain.totals()[f"{k}_eff"] for k in ("T_SGD", "T_L2", "T_adapt")] == [
        plain.totals()[k] for k in ("T_SGD", "T_L2", "T_adapt")]


def test_clock_accumulator_matches_and_resumes():
    lrs = [1e-3 * (1 + 0.5 * math.sin(k)) for k in range(20_000)]
    acc = ClockAccumulator(32, l2=1e-4)
    for lr in lrs[:7000]:
        acc.update(lr)
    resumed = ClockAccumulator(32, l2=1e-4)
    resumed.load_state_dict(json.loads(json.dumps(acc.state_dict())))  # survives a JSON checkpoint
    for lr in lrs[7000:]:
        resumed.update(lr)
    exact = forgetting_clocks(lrs, 32, 1e-4)
    assert resumed.steps == 20_000
    for k, v in resumed.totals().items():
        assert v == pytest.approx(exact[k.removesuffix("_eff")], rel=1e-15), k  # scale 1: _eff = plain
    with pytest.raises(ConfigError, match="batch_size=64"):
        ClockAccumulator(64, 1e-4).load_state_dict(acc.state_dict())


def test_clock_accumulator_stays_accurate_over_a_million_steps():
    acc = ClockAccumulator(1)
    for _ in range(1_000_000):
        acc.update(0.1)  # 0.1 is not exact in binary: naive summation drifts by ~1e-9 relative
    assert acc.totals()["T_adapt"] == math.fsum([0.1] * 1_000_000)
    with pytest.raises(ConfigError, match="batch_size=0"):
        ClockAccumulator(0)
    with pytest.raises(ConfigError, match="l2=-1"):
        ClockAccumulator(8, -1)


def test_summarize_history():
    s = summarize_history(_history())
    assert tuple(s) == (*SUMMARY_KEYS, *DIAGNOSTIC_KEYS)
    assert all(s[k] is None for k in DIAGNOSTIC_KEYS)  # a history without those columns (schema-1 runs)
    assert {k: v for k, v in s.items() if k in SUMMARY_KEYS} == {
        "best_epoch": 2, "test_acc_at_best": 0.61, "val_loss_at_best": 1.2, "val_acc_at_best": 0.60,
        "tau_interp": 3, "interpolated": True, "repair_gap": pytest.approx(0.03),
        "init_weight_norm": 10.0, "final_weight_norm": 15.0, "norm_ratio": 1.5,
        "final_train_acc": 1.0, "final_test_acc": 0.64, "T_SGD": 0.4, "T_L2": 0.0, "T_adapt": 4.0,
        "diverged_epoch": None, "epochs_run": 4, "steps": 40, "wall_time_s": 6.25,
    }
    json.dumps(s, allow_nan=False)
    assert all(type(v) in (int, float, bool, type(None)) for v in s.values())


def test_summarize_history_reads_the_diagnostics_at_the_best_and_the_last_finite_epoch():
    h = _history(angle=[0.0, 10.0, 20.0, 30.0, 40.0], Theta=[0.0, 0.2, 0.4, 0.6, 0.8],
                 T_SGD_eff=[0.0, 1.0, 2.0, 3.0, 4.0], T_L2_eff=[0.0] * 5, T_adapt_eff=[0.0, 10.0, 20.0, 30.0, 40.0],
                 test_acc_full=[0.1, nan, 0.62, nan, 0.65])  # full_test: the whole test set where a rule can pick
    s = summarize_history(h)
    assert {k: s[k] for k in DIAGNOSTIC_KEYS} == {"angle_at_best": 20.0, "angle_final": 40.0, "Theta_final": 0.8,
                                                  "T_SGD_eff": 4.0, "T_L2_eff": 0.0, "T_adapt_eff": 40.0,
                                                  "test_acc_full_at_best": 0.62}
    # diverged at epoch 4 (NaN losses, NaN angle): the final values are epoch 3's
    bad = h.assign(train_loss=[nan, 2.0, 1.0, 0.5, nan], val_loss=[2.3, 1.5, 1.2, 1.3, nan],
                   angle=[0.0, 10.0, 20.0, 30.0, nan], Theta=[0.0, 0.2, 0.4, 0.6, nan])
    s = summarize_history(bad)
    assert (s["angle_final"], s["Theta_final"], s["T_adapt_eff"], s["diverged_epoch"]) == (30.0, 0.6, 30.0, 4)
    json.dumps(s, allow_nan=False)


def test_summarize_diverged_history():
    h = _history(train_loss=[nan, 2.0, nan, nan, nan], val_loss=[2.3, nan, nan, nan, nan],
                 train_acc=[0.1, 0.2, 0.1, 0.1, 0.1], weight_norm=[10.0, 11.0, nan, nan, math.inf])
    s = summarize_history(h)
    assert s["diverged_epoch"] == 2 and s["best_epoch"] is None and s["test_acc_at_best"] is None
    assert s["interpolated"] is False and s["tau_interp"] is None and s["repair_gap"] is None
    assert s["final_weight_norm"] is None and s["norm_ratio"] is None
    json.dumps(s, allow_nan=False)


def test_spread_resamples_exact_enumeration_of_two_seeds():
    # two σ_w with two seeds each: 2^2 resamples per σ_w, 16 in all, enumerated (each mean: a, b or their average)
    s, method = metrics.spread_resamples([[0.50, 0.60], [0.70, 0.70]])
    assert method == "exact" and len(s) == 16
    assert sorted(set(np.round(s, 6))) == pytest.approx([10.0, 15.0, 20.0])
    assert (np.round(s, 6) == 15.0).sum() == 8  # the mixed resample (a, b) or (b, a) is half of them
    assert metrics.interval(s) == pytest.approx((10.0, 20.0))


def test_spread_resamples_bootstrap_is_seeded_and_stable():
    groups = [list(np.linspace(0.4, 0.5, 6)), list(np.linspace(0.6, 0.7, 6))]  # 6^6 per σ_w: too many to enumerate
    a, method = metrics.spread_resamples(groups)
    b, _ = metrics.spread_resamples(groups)
    assert method == f"bootstrap {metrics.BOOT_RESAMPLES}" and len(a) == metrics.BOOT_RESAMPLES
    assert np.array_equal(a, b)
    lo, hi = metrics.interval(a)
    assert lo < 20.0 < hi


def test_spread_resamples_and_interval_reject_bad_input():
    with pytest.raises(ConfigError, match="at least 2"):
        metrics.spread_resamples([[0.5, 0.6], [np.nan]])
    with pytest.raises(ConfigError, match="level=1.5"):
        metrics.interval(np.array([1.0, 2.0]), level=1.5)
    with pytest.raises(ConfigError, match="at least one"):
        metrics.contrast_resamples(np.array([1.0]), [])


def test_contrast_resamples_subtracts_the_largest_other():
    c = metrics.contrast_resamples(np.array([20.0, 22.0]), [np.array([3.0]), np.array([5.0, 7.0])])
    assert set(np.unique(c)) <= {13.0, 15.0, 17.0} and len(c) == metrics.BOOT_RESAMPLES


def test_the_end_of_training_reading_is_the_median_of_the_last_window_and_ignores_one_collapsed_epoch():
    h = pd.DataFrame({"epoch": range(0, 21), "test_acc": [0.1] + [0.5] * 19 + [0.2]})  # epoch 20 caught mid-collapse
    assert metrics.end_accuracy(h) == 0.5 and metrics.end_accuracy(h, window=1) == 0.2
    h.loc[h["epoch"].between(8, 10), "test_acc"] = 0.6
    assert metrics.end_accuracy(h, end=10, window=3) == pytest.approx(0.6)  # epochs 8-10: a prefix read as a run
    assert math.isnan(metrics.end_accuracy(h.iloc[:1]))  # only the initialisation row: nothing trained to read
