"""What one optimiser step dispatches: every aten call counted by a `TorchDispatchMode` on torch's meta device (shapes
only, so full-width networks cost nothing here; on a GPU each such call is a kernel launch or a view). The
forgetting instruments (`before_step` + `after_step`) must stay a small part of the network's forward + backward,
which CUDA graphs replay as one launch while the instruments run eagerly: at most 25 % for ResNet-9 with K = 7 and
ResNet-110 with K = 1 at width 1, b = 128 (before the flat-buffer design: 248 against 182 and 2,220 against 1,565;
then 30 for both, docs/performance.md); and at most an eighth of a whole ResNet-9 K = 1 training step
(`Loop.train_step`: network, loss, optimiser and instruments). Before the paired buffers of 2026-12-06: 30 of 201 ops
with SGD (14.9 %), 30 of 261 with Adam (11.5 %); now 24 of 195 (12.3 %) and 24 of 255 (9.4 %), Muon 24 of 675. The
goal of issue 51, 10 % with SGD, is not met by the eager instruments, which keep their values bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from initmem.config import TrainConfig
from initmem.data import splits
from initmem.engine.loop import Loop

META = torch.device("meta")


class OpCounter(TorchDispatchMode):
    """Counts the aten calls dispatched inside it, by name."""

    def __init__(self):
        super().__init__()
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] = self.ops.get(str(func), 0) + 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def step_counts(arch: str, k: int, width: float = 1.0, batch: int = 128) -> tuple[int, int]:
    """(the network's forward + backward, the instruments' before_step + after_step) aten calls of one step."""
    base = TrainConfig(arch=arch, width=width, data="synthetic", n_train=2 * batch, n_val=10, n_test=10,
                       train_eval_size=10, batch_size=batch, epochs=1, device="cpu", optimizer="sgd_momentum")
    sp = splits.make_splits(splits.make_synthetic(2 * batch + 10, 10), 10, 2 * batch, 10, 0, META, 10)
    loop = Loop.build([base.replace(sigma_w=0.5 + j) for j in range(k)], META, sp)
    x, y = loop._batch((torch.arange(batch, device=META),))
    with OpCounter() as net:
        loop.pop.losses(loop.net(x).float(), y).sum().backward()
    with OpCounter() as before:
        loop.instruments.before_step()
    loop.opt.step()  # not counted: the optimiser is not an instrument
    with OpCounter() as after:
        loop.instruments.after_step()
    return net.total, before.total + after.total


def train_step_counts(arch: str, k: int, optimizer: str, width: float = 1.0, batch: int = 128) -> tuple[int, int]:
    """(a whole `Loop.train_step`, its instruments' before_step + after_step) aten calls, after a first step (which
    makes the optimiser's state)."""
    base = TrainConfig(arch=arch, width=width, data="synthetic", n_train=2 * batch, n_val=10, n_test=10,
                       train_eval_size=10, batch_size=batch, epochs=1, device="cpu", optimizer=optimizer)
    sp = splits.make_splits(splits.make_synthetic(2 * batch + 10, 10), 10, 2 * batch, 10, 0, META, 10)
    loop = Loop.build([base.replace(sigma_w=0.5 + j) for j in range(k)], META, sp)
    idxs, sums = (torch.arange(batch, device=META),), torch.zeros(k, 2, dtype=torch.float64, device=META)
    loop.train_step(idxs, sums)
    with OpCounter() as step:
        loop.train_step(idxs, sums)
    with OpCounter() as instruments:
        loop.instruments.before_step()
        loop.instruments.after_step()
    return step.total, instruments.total


def test_the_counter_counts_the_network():
    net, _ = step_counts("resnet20", 1, width=1 / 16, batch=8)
    deeper, _ = step_counts("resnet56", 1, width=1 / 16, batch=8)
    assert net > 100 and deeper > 2 * net  # ~ a fixed number of calls per layer, forward and backward


@pytest.mark.parametrize("arch, k", [("resnet9", 7), ("resnet110", 1)])
def test_the_instruments_dispatch_at_most_a_quarter_of_the_networks_ops(arch, k):
    net, instruments = step_counts(arch, k)
    assert instruments <= 0.25 * net, (arch, k, instruments, net)


def test_the_instruments_cost_does_not_grow_with_depth():
    assert step_counts("resnet110", 1, width=1 / 16, batch=8)[1] == step_counts("resnet20", 1, width=1 / 16, batch=8)[1]


@pytest.mark.parametrize("optimizer, share", [("sgd", 0.125), ("adam", 0.10)])
def test_the_instruments_dispatch_a_small_share_of_a_resnet9_step(optimizer, share):
    step, instruments = train_step_counts("resnet9", 1, optimizer)
    assert instruments <= share * step, (optimizer, instruments, step)
