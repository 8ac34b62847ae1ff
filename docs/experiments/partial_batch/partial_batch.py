"""Where does the gap between eval-mode and running training accuracy come from (tau_interp)?

The cpu_steps protocol of params/01_optimizers.yaml (ResNet-9 width 0.125, 5,000 images, b = 32, so every epoch
ends with a step on 5,000 mod 32 = 8 images), one run, written as a plain loop so that each epoch's end can be
probed. At the end of every epoch: eval-mode accuracy on the 1,000-image train-eval subset with the BatchNorm
running statistics as trained (`eval_run`), with statistics recomputed over the whole train split (`eval_recal`,
cumulative average, no step), with the running statistics restored to what they were *before* the partial batch
(`eval_noLastStats`: weights after it), train-mode (batch-statistics) accuracy (`trainmode`), and the epoch's
running minibatch accuracy (`running`); val/test the same way.

    python docs/experiments/partial_batch/partial_batch.py sgd 0.1 0 keep 20 > keep.jsonl   # partial batch kept
    python docs/experiments/partial_batch/partial_batch.py sgd 0.1 0 drop 20 > drop.jsonl   # dropped

(from the repository root, with CIFAR-10 in data/ (`initmem data`); ~15 min each on one
core). What the two files show is in docs/findings.md ("The tau_interp artefact").
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

from initmem.data import splits as D
from initmem.data.sources import load_cifar10
from initmem.engine import models, optim


@torch.no_grad()
def accuracy(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, train_mode: bool = False) -> tuple[float, float]:
    """(accuracy, mean loss) in eval mode (running statistics) or train mode (batch statistics, 500 a batch)."""
    net.train(train_mode)
    correct, loss = 0, 0.0
    for i in range(0, len(x), 500):
        out = net(x[i:i + 500])
        correct += (out.argmax(1) == y[i:i + 500]).sum().item()
        loss += F.cross_entropy(out, y[i:i + 500], reduction="sum").item()
    return correct / len(x), loss / len(x)


def bn_stats(bns: list[torch.nn.BatchNorm2d]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(b.running_mean.clone(), b.running_var.clone()) for b in bns]


@torch.no_grad()
def set_bn_stats(bns: list[torch.nn.BatchNorm2d], stats: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for b, (m, v) in zip(bns, stats, strict=True):
        b.running_mean.copy_(m)
        b.running_var.copy_(v)


@torch.no_grad()
def recalibrated(net, bns, sp, evals) -> list[float]:
    """Eval-mode accuracy of each (x, y) in `evals` with BatchNorm statistics recomputed over the train split."""
    saved, momenta = bn_stats(bns), [b.momentum for b in bns]
    for b in bns:
        b.reset_running_stats()
        b.momentum = None  # cumulative average over the whole split
    net.train()
    for i in range(0, len(sp.train_x), 500):
        net(sp.train_x[i:i + 500])
    out = [accuracy(net, x, y) for x, y in evals]
    set_bn_stats(bns, saved)
    for b, m in zip(bns, momenta, strict=True):
        b.momentum = m
    return out


def main(opt_name: str, sigma_w: float, seed: int, drop_last: bool, epochs: int, batch_size: int = 32,
         width: float = 0.125) -> None:
    torch.set_num_threads(1)
    data = load_cifar10("data", "auto", progress=False)
    sp = D.make_splits(data, 1000, 5000, 2000, 0, "cpu", 1000)
    ex, ey = sp.train_x[sp.train_eval_idx], sp.train_y[sp.train_eval_idx]
    torch.manual_seed(seed)
    net = models.build_model("resnet9", sigma_w, width).to(memory_format=torch.channels_last)
    opt = optim.build_optimizer(opt_name, net)
    order = torch.Generator().manual_seed(seed)
    bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for epoch in range(1, epochs + 1):
        net.train()
        correct, seen, before_last = 0, 0, None
        for idx in D.batches(len(sp.train_y), batch_size, order, drop_last=drop_last):
            if len(idx) < batch_size:
                before_last = bn_stats(bns)
            x, y = sp.train_x[idx], sp.train_y[idx]
            out = net(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct, seen = correct + (out.argmax(1) == y).sum().item(), seen + len(y)
        (tr, _), (va, vl), (te, _) = (accuracy(net, *e) for e in ((ex, ey), (sp.val_x, sp.val_y),
                                                                   (sp.test_x, sp.test_y)))
        (tr_rc, _), (va_rc, vl_rc), (te_rc, _) = recalibrated(net, bns, sp, [(ex, ey), (sp.val_x, sp.val_y),
                                                                              (sp.test_x, sp.test_y)])
        row = dict(ep=epoch, running=round(correct / seen, 3), eval_run=tr, eval_recal=tr_rc,
                   trainmode=accuracy(net, ex, ey, True)[0], val_run=va, val_recal=va_rc, vloss_run=round(vl, 3),
                   vloss_recal=round(vl_rc, 3), test_run=te, test_recal=te_rc)
        if before_last is not None:
            now = bn_stats(bns)
            set_bn_stats(bns, before_last)
            row["eval_noLastStats"] = accuracy(net, ex, ey)[0]
            set_bn_stats(bns, now)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], float(a[1]), int(a[2]), a[3] == "drop", int(a[4]), *(int(a[5]),) if len(a) > 5 else (),
         *(float(a[6]),) if len(a) > 6 else ())
