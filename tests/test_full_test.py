"""TrainConfig.full_test: the whole test set at the epochs a selection rule can pick (`metrics.selectable`), with
training unchanged bit for bit (a run and a population), the same epochs after a resume, the same run id, and the
summary and `test_at_best` reading the full column.

Runs are tiny (ResNet-9 at width 1/16, 256 synthetic training images, 4 epochs: seconds each on one CPU).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from initmem import metrics
from initmem.config import RUN_ID_EXCLUDE, TrainConfig, point_configs, run_id
from initmem.data import splits as data_splits
from initmem.engine import trainer as train_mod
from initmem.engine.trainer import train
from initmem.errors import ConfigError, InitmemError
from initmem.store.folders import RunFolders
from initmem.study.params import load_section

TINY = dict(arch="resnet9", width=0.0625, sigma_w=1.0, optimizer="sgd", lr=0.05, batch_size=64, epochs=4,
            data="synthetic", n_train=256, n_val=100, n_test=100, device="cpu", augment=True)
pytestmark = pytest.mark.usefixtures("one_torch_thread")
nan = math.nan


def _without_time(h: pd.DataFrame) -> pd.DataFrame:
    return h.drop(columns="wall_time")


@pytest.fixture(scope="module")
def pair():
    """The same run without and with full_test."""
    return (train(TrainConfig(**TINY), progress=False),
            train(TrainConfig(**TINY, full_test=True), progress=False))


def test_full_test_changes_no_training_step_and_no_run_id(pair):
    plain, full = pair
    assert run_id(plain.config) == run_id(full.config) and "full_test" in RUN_ID_EXCLUDE
    assert not set(metrics.FULL_TEST_COLUMNS) & set(plain.history.columns)  # absent without full_test
    assert list(full.history.columns) == [*plain.history.columns, *metrics.FULL_TEST_COLUMNS]
    a, b = _without_time(plain.history), _without_time(full.history)[_without_time(plain.history).columns]
    pd.testing.assert_frame_equal(a, b, check_exact=True)  # every value bit for bit
    assert plain.summary["test_acc_full_at_best"] is None


def test_the_full_columns_are_filled_exactly_where_a_rule_can_pick(pair):
    _, full = pair
    h = full.history
    filled = h["test_acc_full"].notna().to_numpy()
    assert (filled == metrics.selectable(h)).all() and filled[0] and filled[-1]
    assert (h["test_loss_full"].notna().to_numpy() == filled).all()
    # synthetic data has n_test test images: the full set is the subset itself, evaluated the same way
    assert (h.loc[filled, "test_acc_full"] == h.loc[filled, "test_acc"]).all()
    assert (h.loc[filled, "test_loss_full"] == h.loc[filled, "test_loss"]).all()
    assert full.summary["test_acc_full_at_best"] == metrics.test_at_best(h, column="test_acc_full") == \
        full.summary["test_acc_at_best"]


def test_a_population_with_full_test_trains_as_without():
    configs = [TrainConfig(**{**TINY, "epochs": 3, "sigma_w": s, "seed": seed}) for s, seed in ((0.5, 0), (2.0, 1))]
    plain = train(configs, progress=False)
    full = train([c.replace(full_test=True) for c in configs], progress=False)
    for p, f in zip(plain, full, strict=True):
        cols = list(p.history.drop(columns="wall_time").columns)
        pd.testing.assert_frame_equal(p.history[cols], f.history[cols], check_exact=True)
        assert (f.history["test_acc_full"].notna().to_numpy() == metrics.selectable(f.history)).all()


def test_the_full_test_set_is_every_test_image_of_the_source():
    data = data_splits.make_synthetic(300, 250)
    sub = data_splits.make_splits(data, n_val=50, n_test=100, full_test=True)
    assert len(sub.test_y) == 100 and len(sub.full_test_y) == 250
    idx = data_splits.stratified_indices(data.test_y, 100, data_splits._generator(0, 2))  # the subset's positions
    assert torch.equal(sub.full_test_x[idx], sub.test_x) and torch.equal(sub.full_test_y[idx], sub.test_y)
    every = data_splits.make_splits(data, n_val=50, full_test=True)
    assert every.full_test_x is every.test_x  # n_test None: the test split already is the whole set
    assert data_splits.make_splits(data, n_val=50, n_test=100).full_test_x is None


def test_a_run_evaluates_the_whole_test_set_beyond_the_subset(monkeypatch):
    load = train_mod._data.load_cifar10
    monkeypatch.setattr(train_mod._data, "load_cifar10", lambda *a, **kw: load(*a, **{**kw, "synthetic_sizes": (
        kw["synthetic_sizes"][0], 300)}))  # 300 test images, of which n_test = 100 are the subset
    h = train(TrainConfig(**TINY, full_test=True), progress=False).history
    acc = h["test_acc_full"].dropna().to_numpy()
    assert len(acc) and np.allclose(acc * 300, np.round(acc * 300))  # fractions of 300 images
    assert not np.allclose(acc * 100, np.round(acc * 100))  # not of the 100-image subset


class _Stop(Exception):
    pass


def test_a_resumed_run_evaluates_the_same_epochs(tmp_path, monkeypatch):
    cfg = TrainConfig(**{**TINY, "epochs": 5, "checkpoint_every": 1}, full_test=True)
    reference = train(cfg, progress=False).history
    save = train_mod._ckpt.save

    def boom(folder, at, payload, **kw):  # killed as it checkpoints epoch 3, after epoch 2's checkpoint
        if at == 3:
            raise _Stop
        return save(folder, at, payload, **kw)

    with monkeypatch.context() as m:
        m.setattr(train_mod._ckpt, "save", boom)
        with pytest.raises(_Stop):
            train(cfg, out_dir=tmp_path, section="s", progress=False)
    assert RunFolders(tmp_path, "s").checkpoint_folder([cfg]).exists()
    resumed = train(cfg, out_dir=tmp_path, section="s", progress=False).history
    pd.testing.assert_frame_equal(_without_time(resumed), _without_time(reference), check_exact=True)


# ---------------------------------------------------------------------------------------------- the rule set
def _history(val_loss, val_acc, train_acc) -> pd.DataFrame:
    return pd.DataFrame({"epoch": range(len(val_loss)), "val_loss": val_loss, "val_acc": val_acc,
                         "train_acc": train_acc})


def test_selectable_marks_new_bests_post_interpolation_minima_and_the_last_epoch():
    h = _history(val_loss=[2.3, 1.5, 1.2, 1.4, 1.3, 1.25, 1.35, 1.6],
                 val_acc=[0.1, 0.4, 0.5, 0.55, 0.5, 0.52, 0.55, 0.4],
                 train_acc=[0.1, 0.5, 0.9, 0.99, 0.996, 1.0, 1.0, 0.9])
    # epoch 0: reference; 1, 2: new minima; 3: new max accuracy; 4 (tau_interp), 5: post-interp minima; 6: a tie in
    # accuracy (the first is picked) and no minimum; 7: the last
    assert metrics.selectable(h).tolist() == [True, True, True, True, True, True, False, True]
    online = [metrics.selectable(h.iloc[:i + 1], final=False)[-1] for i in range(len(h))]
    assert online[:-1] == metrics.selectable(h).tolist()[:-1] and not online[-1]
    for rule in metrics.SELECTION_RULES:  # every rule's pick is marked
        e = metrics.best_epoch(metrics._rule_values(h[h["epoch"] >= 1], rule), rule)
        assert metrics.selectable(h)[e]


def test_selectable_skips_nan_and_the_val_acc_of_a_non_finite_loss():
    h = _history(val_loss=[2.3, nan, 1.5, np.inf, 1.6], val_acc=[0.1, 0.3, 0.2, 0.9, 0.1],
                 train_acc=[0.1] * 5)
    assert metrics.selectable(h, final=False).tolist() == [True, False, True, False, False]


def test_test_at_best_reads_the_full_column_and_names_a_missing_one(pair):
    plain, full = pair
    h = full.history.assign(test_acc_full=full.history["test_acc_full"] + 0.5)  # tell the columns apart
    for rule in metrics.SELECTION_RULES:
        assert metrics.test_at_best(h, rule=rule, column="test_acc_full") == \
            metrics.test_at_best(h, rule=rule) + 0.5
    by_epoch = metrics.test_at_best_by_epoch(h, column="test_acc_full")
    assert (by_epoch == metrics.test_at_best_by_epoch(h) + 0.5).all()
    with pytest.raises(ConfigError, match="column='test_acc_full' is invalid.*full_test"):
        metrics.test_at_best(plain.history, column="test_acc_full")


def test_full_test_is_a_flag():
    with pytest.raises(ConfigError, match=r"full_test=1 is invalid: True or False"):
        TrainConfig(**TINY, full_test=1)


# ---------------------------------------------------------------------------------------------- the profiles
REPO = Path(__file__).resolve().parent.parent


def test_the_cpu_w025_profiles_keep_the_committed_run_ids_and_pair_the_effective_lrs():
    section = load_section(REPO / "params" / "01_optimizers.yaml")
    w025 = [c for p in section.points("cpu_w025") for c in point_configs(section.effective(p))]
    assert len(w025) == 75 and all(c.full_test for c in w025) and {c.seed for c in w025} == {0, 1, 2, 3, 4}
    committed = {p.name for p in (REPO / "results" / "cpu_w025_pilot" / "01_optimizers").iterdir() if p.is_dir()}
    old = {run_id(c) for c in w025 if c.seed in (0, 1)}
    assert len(old) == 30 and committed >= old  # seeds 0 and 1 are the committed runs, full_test or not
    points = section.points("cpu_w025_lr")
    assert [p.grid for p in points] == [{"optimizer": "sgd_momentum", "lr": 0.001}, {"optimizer": "sgd", "lr": 0.1}]
    assert section.results_for("cpu_w025_lr") == REPO / "results" / "cpu_w025_lr"
    lr_runs = [c for p in points for c in point_configs(section.effective(p))]
    assert len(lr_runs) == 18 and {c.seed for c in lr_runs} == {0, 1, 2}
    eff = {c.optimizer: c.lr * metrics.lr_scale(c.optimizer, c.momentum) for c in lr_runs}
    assert eff == pytest.approx({"sgd_momentum": 0.01, "sgd": 0.1})  # cpu_w025's sgd's and sgd_momentum's
    varied = ("optimizer", "lr", "momentum", "seed", "sigma_w")
    protocol = {k for k in TrainConfig.__dataclass_fields__ if k not in varied}
    same = {c.optimizer: c for c in w025 if c.seed == 0 and c.sigma_w == 1.0}
    assert {c.sigma_w for c in lr_runs} == {c.sigma_w for c in w025} == {0.1, 1.0, 2.5}
    for c in lr_runs:  # the same protocol as cpu_w025 in every other field
        assert {k: getattr(c, k) for k in protocol} == {k: getattr(same[c.optimizer], k) for k in protocol}


@pytest.mark.parametrize(("points", "message"), [
    ("[{optimizer: sgd, lr: 0.1}, {optimizer: sgd, lr: 0.1}]", "points repeats"),
    ("[{sigma_ws: [0.5], lr: 0.1}]", r"\['sigma_ws'\] are both in points and fixed"),
    ("[]", "points=\\[\\] is invalid"),
    ("[{optimizer: nope}]", "optimizer"),
])
def test_bad_points_are_refused_on_one_line(tmp_path, points, message):
    (tmp_path / "params").mkdir()
    (tmp_path / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / "01_optimizers.py", tmp_path / "notebooks" / "t.py")
    path = tmp_path / "params" / "t.yaml"
    path.write_text("section: t\nnotebook: notebooks/t.py\nprofiles:\n  smoke:\n    fixed: {data: synthetic, "
                    f"sigma_ws: [0.5], device: cpu}}\n    points: {points}\n")
    with pytest.raises(InitmemError, match=message) as exc:
        load_section(path)
    assert "\n" not in str(exc.value)
