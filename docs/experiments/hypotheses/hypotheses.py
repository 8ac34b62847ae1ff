"""The hypothesis runs (docs/findings.md, "Which small protocol shows the contrast?"): each job is
`candidate:optimizer:sigma_w:seed[:lr=...]`, trained run by run on one torch thread through `point.train_point`
(the path a notebook takes), into `results/hypotheses/<candidate>/01_optimizers/` (w025, the winning protocol: into
`results/cpu_w025_pilot/01_optimizers/`, the tree of its params profile `cpu_w025`, whose run ids it shares). From the
repository root:

    python docs/experiments/hypotheses/hypotheses.py w025:adam:2.5:0 w025:adam:0.1:0

The protocol every candidate shares (`BASE`) is the study's outside data point: ResNet-9, 2,000 training
images, 1,000 validation, 2,000 test, b = 32, 60 epochs, constant lr, no augmentation, every optimiser at its
default (docs/study.md), plus `drop_last` (the partial last minibatch is the tau_interp artefact). A job skips a run
that is already complete, so re-running the command trains nothing new.
"""

from __future__ import annotations

import json
import sys
import time

import torch

from initmem.config import point_configs
from initmem.study.point import train_point

BASE = dict(data="auto", data_root="data", arch="resnet9", batch_size=32, epochs=60,
            n_train=2000, n_val=1000, n_test=2000, train_eval_size=1000, drop_last=True, checkpoint_every=10,
            device="cpu", schedule="constant")
CANDIDATES = {
    "w0125": dict(width=0.125),  # the control: the committed studies' width
    "w025": dict(width=0.25),  # (a) width: Adam's angular step grows as sqrt(fan_in)
    "w05": dict(width=0.5),
    "w0125_aug": dict(width=0.125, augment=True),  # (c) crop + flip: later over-fitting, later selection
    # (d) rotation-matched lr: lr x (width-1 / width-0.125 per-step angle), measured by rotation.py (rotation.jsonl)
    "w0125_rot": dict(width=0.125),
}


def job(spec: str) -> tuple[str, dict]:
    """The candidate's folder name and the point's parameters of one job spec."""
    cand, opt, sigma_w, seed, *extra = spec.split(":")
    params = dict(BASE, **CANDIDATES[cand], optimizer=opt, sigma_ws=[float(sigma_w)], seeds=[int(seed)])
    for kv in extra:
        key, value = kv.split("=")
        params[key] = float(value)
    return cand, params


def main(specs: list[str]) -> None:
    torch.set_num_threads(1)
    for spec in specs:
        cand, params = job(spec)
        t = time.time()
        tree = "results/cpu_w025_pilot" if cand == "w025" else f"results/hypotheses/{cand}"
        rows = train_point(point_configs(params), results=tree, section="01_optimizers",
                           population=False, progress=True)
        r = rows.iloc[0]
        keys = ("test_acc_at_best", "best_epoch", "tau_interp", "angle_at_best", "final_test_acc")
        print("DONE", spec, json.dumps({k: r[k] for k in keys}, default=float), f"{time.time() - t:.0f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
