"""TrainConfig.exact_tau: train accuracy on a subset (train_eval_size) for the curve, tau_interp of the whole train
split all the same. The whole split is measured wherever it can have reached the threshold (`metrics.subset_bound`),
so tau_interp equals a whole-split run's where the subset alone gets it wrong; training is unchanged bit for bit.

Runs are tiny (ResNet-9 at width 1/16, 512 synthetic training images, 10 epochs: seconds each on one CPU).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from initmem import metrics
from initmem.config import TrainConfig, run_id
from initmem.engine.trainer import train
from initmem.errors import ConfigError

TINY = dict(arch="resnet9", width=0.0625, sigma_w=1.0, batch_size=64, epochs=10, data="synthetic", n_train=512,
            n_val=128, n_test=128, device="cpu")
SUBSET = 20  # a subset small enough that alone it often misplaces tau_interp on these runs
SEEDS = range(8)  # where `runs` looks for a run on which it does (about 1 seed in 10 places it right on the CPUs tried)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tau(history: pd.DataFrame) -> int | None:
    return metrics.summarize_history(history)["tau_interp"]


@pytest.fixture(scope="module", params=[("adam", 0.003), ("sgd", 0.1)], ids=["adam", "sgd"])
def runs(request):
    """One recipe trained three ways: the whole split measured, the subset only, the subset with exact_tau. Its seed
    is searched, the first whose whole split interpolates and whose subset alone misplaces tau_interp: which seed that
    is depends on the CPU's rounding, so no single one is assumed."""
    optimizer, lr = request.param
    for seed in SEEDS:
        cfg = TrainConfig(**TINY, optimizer=optimizer, lr=lr, seed=seed)
        whole = train(cfg, progress=False).history
        if _tau(whole) is None:
            continue
        subset = train(cfg.replace(train_eval_size=SUBSET), progress=False).history
        if _tau(subset) != _tau(whole):
            return whole, subset, train(cfg.replace(train_eval_size=SUBSET, exact_tau=True), progress=False).history
    pytest.fail(f"{optimizer}: on no seed in {SEEDS} does a {SUBSET}-image subset misplace tau_interp: a smaller "
                "SUBSET or more SEEDS gives the test its case")


def test_exact_tau_gives_the_whole_splits_tau_where_the_subset_alone_does_not(runs):
    whole, subset, exact = runs
    assert _tau(whole) is not None and _tau(subset) != _tau(whole)  # the case `runs` searched for
    assert _tau(exact) == _tau(whole)
    tau = _tau(whole)
    assert exact.loc[exact["epoch"] == tau, metrics.WHOLE_TRAIN_COLUMN].item() == pytest.approx(
        whole.loc[whole["epoch"] == tau, "train_acc"].item(), abs=1e-12)  # the same whole-split measurement


def test_training_is_unchanged_and_the_whole_split_is_measured_only_near_the_threshold(runs):
    _, subset, exact = runs
    cols = [c for c in subset.columns if c != "wall_time"]
    pd.testing.assert_frame_equal(subset[cols], exact[cols], check_exact=True)  # every step and reading the same
    measured = exact[metrics.WHOLE_TRAIN_COLUMN].notna().to_numpy()
    bound = metrics.subset_bound(TINY["n_train"], SUBSET)
    near = exact["train_acc"].to_numpy() >= bound
    first = int(np.flatnonzero(exact[metrics.WHOLE_TRAIN_COLUMN].to_numpy() >= metrics.THRESHOLD)[0])
    assert (measured[:first + 1] == near[:first + 1]).all() and not measured[first + 1:].any()
    assert 0 < measured.sum() < len(exact)  # at tau_interp, never at the untrained epoch 0: not one per epoch


def test_exact_tau_is_in_the_run_id_and_does_nothing_without_a_subset():
    cfg = TrainConfig(**{**TINY, "epochs": 2}, optimizer="sgd", lr=0.1)
    assert run_id(cfg) == run_id(cfg.replace(exact_tau=False))
    assert run_id(cfg.replace(train_eval_size=SUBSET)) != run_id(cfg.replace(train_eval_size=SUBSET, exact_tau=True))
    h = train(cfg.replace(exact_tau=True), progress=False).history
    assert metrics.WHOLE_TRAIN_COLUMN not in h.columns  # without a subset, train_acc already is the whole split's
    with pytest.raises(ConfigError, match=r"exact_tau=1 .*True or False"):
        TrainConfig(**TINY, exact_tau=1)


def test_subset_bound_is_where_every_error_of_the_whole_split_could_sit_in_the_subset():
    assert metrics.subset_bound(45_000, 5_000) == pytest.approx(1 - 0.005 * 9)  # the paper profile's: 95.5 %
    # 45,000 images at 99.5 %: 225 errors; all in the subset, it reads 1 - 225/5000
    assert metrics.subset_bound(45_000, 5_000) == pytest.approx(1 - 225 / 5_000)
    assert metrics.subset_bound(2_000, 2_000) == pytest.approx(metrics.THRESHOLD)


def test_tau_reads_the_whole_split_column_where_a_run_has_it():
    h = pd.DataFrame({"epoch": range(5), "val_loss": [2.0, 1.0, 0.9, 0.8, 0.7], "val_acc": [0.1, 0.5, 0.6, 0.7, 0.8],
                      "train_acc": [0.1, 0.9, 1.0, 1.0, 1.0], "train_acc_full": [math.nan, math.nan, 0.99, 0.996,
                                                                                math.nan]})
    assert metrics.interpolation_epoch(metrics.tau_accuracies(h.iloc[1:])) == 3  # epoch 3, not the subset's 2
    assert metrics.interpolation_epoch(metrics.tau_accuracies(h.drop(columns="train_acc_full").iloc[1:])) == 2
    never = h.assign(train_acc_full=math.nan, train_acc=[0.1, 0.5, 0.6, 0.7, 0.8])  # never near: train_acc decides
    assert metrics.interpolation_epoch(metrics.tau_accuracies(never.iloc[1:])) is None


class _Stop(Exception):
    pass


def test_a_resumed_run_measures_the_same_epochs(tmp_path, monkeypatch):
    from initmem.engine import trainer as train_mod
    cfg = TrainConfig(**{**TINY, "epochs": 7, "checkpoint_every": 1}, optimizer="adam", lr=0.003,
                      train_eval_size=SUBSET, exact_tau=True)
    reference = train(cfg, progress=False).history
    measured = reference.loc[reference[metrics.WHOLE_TRAIN_COLUMN].notna(), "epoch"]
    assert len(measured) and measured.min() < cfg.epochs, "no whole-split measurement before the last epoch"
    kill = int(measured.min()) + 1  # the kill comes after a measurement, whichever epoch this CPU's run makes it at
    save = train_mod._ckpt.save

    def boom(folder, at, payload, **kw):  # killed as it checkpoints the epoch after the first measurement
        if at == kill:
            raise _Stop
        return save(folder, at, payload, **kw)

    with monkeypatch.context() as m:
        m.setattr(train_mod._ckpt, "save", boom)
        with pytest.raises(_Stop):
            train(cfg, out_dir=tmp_path, section="s", progress=False)
    from initmem.store.folders import RunFolders
    assert RunFolders(tmp_path, "s").checkpoint_folder([cfg]).exists()  # what the rerun resumes from
    resumed = train(cfg, out_dir=tmp_path, section="s", progress=False).history
    pd.testing.assert_frame_equal(resumed.drop(columns="wall_time"), reference.drop(columns="wall_time"),
                                  check_exact=True)
