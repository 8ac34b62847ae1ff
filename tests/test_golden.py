"""Golden test: the engine still computes what the committed CPU study computed.

Two committed runs of section 01 (one SGD, one Muon) are retrained for their first 2 epochs on the real archive
(the constant schedule makes the first epochs independent of the total length) and compared with their committed
history.csv rows, with one torch thread.

Tolerances, measured: epoch 0 (initialisation, split, normalisation, evaluation: no training step yet) agrees to
float32 rounding (measured 7e-8 relative on the SGD run's val_loss; held to rtol 1e-6: the float32 reductions of
another machine's CPU kernels). Epochs 1-2 cannot agree bit for bit: the committed runs were trained on
another machine's CPU kernels, and low-lr SGD and Muon (bfloat16 Newton-Schulz) amplify float rounding from step to
step; on this machine the engine before the single-loop redesign (commit 5fec7e9) and after it give the same rows
and differ from the committed ones by up to 3.7 % (SGD val_acc) and 9.5 % (Muon val_acc) relative, 0.7 % / 3.3 % on
the losses. So the trained rows are held to 5 % on losses and weight norms and to 4 points of accuracy (15 % of
a validation set of 1,000 would be a different recipe: another lr, optimiser or data order moves them by far more).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from initmem.config import TrainConfig

pytestmark = pytest.mark.cifar10
REPO = Path(__file__).resolve().parents[1]
GOLDEN = {"sgd": "200285748550", "muon": "199bc3a1419e"}  # section 01 cpu: sigma_w 2.5 (SGD) and 1.0 (Muon), seed 0
LOSSES = ("train_loss", "val_loss", "test_loss", "weight_norm")
ACCS = ("train_acc_running", "train_acc", "val_acc", "test_acc")


@pytest.mark.parametrize("optimizer", sorted(GOLDEN))
def test_the_first_epochs_of_committed_runs_are_reproduced(optimizer, cifar10_real, one_torch_thread, monkeypatch):
    from initmem.engine.trainer import train

    folder = REPO / "results" / "cpu" / "01_optimizers" / GOLDEN[optimizer]
    record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    assert record["config"]["optimizer"] == optimizer and record["config"]["schedule"] == "constant"
    monkeypatch.setenv("INITMEM_CACHE", str(cifar10_real.cache_dir))
    config = TrainConfig.from_dict({**record["config"], "epochs": 2, "checkpoint_every": 0,
                                    "data_root": str(cifar10_real.archive)})
    new = train(config, progress=False).history
    old = pd.read_csv(folder / "history.csv").iloc[:3]
    assert new["epoch"].tolist() == old["epoch"].tolist() == [0, 1, 2]
    assert new["step"].tolist() == old["step"].tolist()
    layers = [c for c in old.columns if c.startswith("norm:")]
    assert [c for c in new.columns if c.startswith("norm:")] == layers
    exact = [c for c in (*LOSSES, *ACCS, *layers, "T_SGD", "T_adapt") if c not in ("train_loss", "train_acc_running")]
    np.testing.assert_allclose(new.loc[0, exact].to_numpy(float), old.loc[0, exact].to_numpy(float), rtol=1e-6)
    for col in ("T_SGD", "T_L2", "T_adapt", "lr"):
        np.testing.assert_allclose(new[col].iloc[1:], old[col].iloc[1:], rtol=1e-12, err_msg=col)
    for col in (*LOSSES, *layers):
        np.testing.assert_allclose(new[col].iloc[1:], old[col].iloc[1:], rtol=0.05, err_msg=col)
    for col in ACCS:
        np.testing.assert_allclose(new[col].iloc[1:], old[col].iloc[1:], atol=0.04, err_msg=col)
