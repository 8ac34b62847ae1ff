"""Does measuring train accuracy on a fixed subset (train_eval_size) leave tau_interp unchanged? The paper profiles
evaluate 5,000 of the 45,000 training images (a ninth); here the same fraction at a tenth of the scale: 4,500
training images, train_eval_size 500 against the whole split, each pair trained identically (train_eval_size only
chooses what is evaluated: the val_loss columns must agree bitwise). One JSON line per run pair.

    cd docs/experiments/train_eval_subset && ../../../.venv/bin/python subset.py ARCHIVE > subset.jsonl

It did not (Adam: 17 on the whole split, 15 on the subset). `--exact` then trains the Adam run once more with the
subset and exact_tau (the whole split measured only where it can have reached 99.5 %, `metrics.subset_bound`) and
compares it with subset.jsonl's two runs (the same training, so the same per-epoch numbers):

    ../../../.venv/bin/python subset.py ARCHIVE --exact > exact.jsonl
"""

import json
import sys

import torch

from initmem import summarize_history, train
from initmem.config import TrainConfig


def exact(base: TrainConfig) -> None:
    """The Adam run with train_eval_size 500 and exact_tau, against subset.jsonl's whole-split and subset runs."""
    pair = next(r for r in map(json.loads, open("subset.jsonl")) if r["optimizer"] == "adam")
    h = train(base.replace(optimizer="adam", train_eval_size=500, exact_tau=True), progress=False).history
    whole = h["train_acc_full"]
    measured = [int(e) for e in h.loc[whole.notna(), "epoch"]]
    print(json.dumps({"optimizer": "adam", "n_train": base.n_train, "train_eval_size": 500,
                      "tau_interp_exact": summarize_history(h)["tau_interp"],
                      "tau_interp_full": pair["tau_interp_full"], "tau_interp_subset": pair["tau_interp_subset"],
                      "whole_split_epochs": measured, "epochs": int(h["epoch"].max()),
                      "subset_curve_identical": h["train_acc"].round(5).tolist() == pair["train_acc_subset"],
                      "whole_split_identical": [round(whole[h["epoch"] == e].item(), 5) for e in measured] == [
                          pair["train_acc_full"][e] for e in measured]}), flush=True)


def main(archive: str, exact_only: bool = False) -> None:
    torch.set_num_threads(1)
    base = TrainConfig(data="auto", data_root=archive, arch="resnet9", width=0.125, batch_size=128, n_train=4500,
                       n_val=500, n_test=500, epochs=25, sigma_w=1.0, seed=0, device="cpu")
    if exact_only:
        return exact(base)
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
    main(sys.argv[1], "--exact" in sys.argv[2:])
