"""Does measuring train accuracy on a fixed subset (train_eval_size) leave tau_interp unchanged? The paper profiles
evaluate 5,000 of the 45,000 training images (a ninth); here the same fraction at a tenth of the scale: 4,500
training images, train_eval_size 500 against the whole split, each pair trained identically (train_eval_size only
chooses what is evaluated: the val_loss columns must agree bitwise). One JSON line per run pair.

    cd docs/experiments/train_eval_subset && ../../../.venv/bin/python subset.py ARCHIVE > subset.jsonl
"""

import json
import sys

import torch

from initmem import summarize_history, train
from initmem.config import TrainConfig


def main(archive: str) -> None:
    torch.set_num_threads(1)
    base = TrainConfig(data="auto", data_root=archive, arch="resnet9", width=0.125, batch_size=128, n_train=4500,
                       n_val=500, n_test=500, epochs=25, sigma_w=1.0, seed=0, device="cpu")
    for optimizer in ("adam", "sgd_momentum"):
        cfg = base.replace(optimizer=optimizer)
        full = train(cfg, progress=False).history
        sub = train(cfg.replace(train_eval_size=500), progress=False).history
        print(json.dumps({"optimizer": optimizer, "n_train": cfg.n_train, "train_eval_size": 500,
                          "tau_interp_full": summarize_history(full)["tau_interp"],
                          "tau_interp_subset": summarize_history(sub)["tau_interp"],
                          "training_identical": bool((full["val_loss"] == sub["val_loss"]).all()),
                          "train_acc_full": full["train_acc"].round(5).tolist(),
                          "train_acc_subset": sub["train_acc"].round(5).tolist()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
