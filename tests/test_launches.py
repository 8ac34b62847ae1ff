"""What one optimiser step dispatches: every aten call counted by a `TorchDispatchMode` on torch's meta device (shapes
only, so full-width networks cost nothing here; on a GPU each such call is a kernel launch or a view). The
forgetting instruments (`before_step` + `after_step`) must stay a small part of the network's forward + backward:
at most 25 % for ResNet-9 with K = 7 and ResNet-110 with K = 1 at width 1, b = 128 (before the flat-buffer design:
248 against 182 and 2,220 against 1,565; then 30, docs/performance.md); and at most a tenth of a whole ResNet-9
K = 1 training step (`Loop.train_step`: network, loss, optimiser and instruments), issue 51's goal. On `meta`, as on
a GPU, the instruments are the fused ones (`ChunkLayout`): 16 ops a step at any depth, 16 of 187 with SGD (8.6 %),
16 of 247 with Adam (6.5 %), 16 of 667 with Muon. Before (2026-12-06, the `Layout` the CPU keeps for its values bit
for bit): 24 of 195 (12.3 %) and 24 of 255 (9.4 %); before the paired buffers 30 of 201 (14.9 %) and 30 of 261."""

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


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_instruments_dispatch_at_most_a_tenth_of_a_resnet9_step(optimizer):
    step, instruments = train_step_counts("resnet9", 1, optimizer)
    assert instruments <= 0.10 * step, (optimizer, instruments, step)
