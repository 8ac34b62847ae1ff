"""Rotation-matched learning rates (candidate d): the whole network's mean per-step angle (the engine's
`step_angle` instrument, radians) over the first 20 steps, per optimiser, at widths 0.125, 0.25 and 1, sigma_w
2.5, the hypotheses' data and batch size (real CIFAR-10, b = 32, 640 images). One JSON line per (optimizer, width):

    python docs/experiments/hypotheses/rotation.py sgd,adam > rotation.jsonl

The rotation-matched lr of an optimiser at width w is its default lr x step_angle(width 1) / step_angle(width w)
(to first order the per-step angle is proportional to the lr, for SGD and for Adam).
"""

from __future__ import annotations

import json
import sys

import torch

from initmem.config import TrainConfig
from initmem.engine.trainer import train


def main(optimizers: list[str]) -> None:
    torch.set_num_threads(1)
    for opt in optimizers:
        for width in (0.125, 0.25, 1.0):
            c = TrainConfig(data="auto", data_root="data", arch="resnet9", width=width,
                            sigma_w=2.5, optimizer=opt, batch_size=32, epochs=1, n_train=640, n_val=10, n_test=10,
                            train_eval_size=10, drop_last=True, device="cpu", seed=0)
            h = train(c, progress=False).history.iloc[-1]
            layers = {k.split(":", 1)[1]: float(h[k]) for k in h.index if k.startswith("step_angle:")}
            print(json.dumps({"optimizer": opt, "width": width, "lr": c.lr, "steps": int(h["step"]),
                              "step_angle": float(h["step_angle"]), "layers": layers}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else ["sgd", "adam", "adamw", "sgd_momentum", "muon"])
