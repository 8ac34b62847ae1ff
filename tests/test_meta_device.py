"""The GPU's code path on a device that is not the CPU, on a machine without a GPU: torch's `meta` device (tensors
with shapes and devices but no data) runs every network forward and backward and every optimiser's step. The
engine's own loop (`engine.loop.Loop`: the same build, step, epoch and readings a GPU run calls) is built on meta
for every architecture at K = 1 and K = 2 and every optimiser, trains an epoch (augmentation, distinct seeds),
evaluates, and must leave nothing off the device: a tensor made without `device=` (as the grouped modules once were,
which failed every CUDA population at its first step) lands on the CPU and fails here.

What meta cannot run, and where it is covered instead: reading numbers back to the host (`Loop.measure`'s one
`.tolist()`, the epoch's finiteness check), so the harness stops at `Loop.readings` (the device tensor `measure`
reads) and tests/test_train.py covers the host side on the CPU; bf16 autocast (torch has no meta autocast: covered
on the CPU by tests/test_train.py); generators (torch has none on meta: the
augmentation generators live on the CPU there, `loop.generator_device`, and the rule for real devices is checked
below on stand-ins). torch's `FakeTensorMode` with a fake `cuda` device was tried first: it makes tensors, but
moving a module to it fails on torch 2.14 ("_apply(): Couldn't swap Conv2d.weight"), so meta it is.
"""

from __future__ import annotations

import types

import pytest
import torch

from initmem.config import ARCHS, OPTIMIZERS, TrainConfig
from initmem.data import splits
from initmem.engine import members, models, optim
from initmem.engine.loop import DeviceMismatch, Loop

META = torch.device("meta")
BASE = TrainConfig(arch="resnet9", width=1 / 16, data="synthetic", n_train=40, n_val=10, n_test=10,
                   train_eval_size=10, batch_size=32, epochs=1, augment=True, device="cpu")


def _splits(dev: torch.device) -> splits.Splits:
    return splits.make_splits(splits.make_synthetic(50, 10), 10, 40, 10, 0, dev, 10)


def _loop(dev: torch.device, k: int, **changes) -> Loop:
    base = BASE.replace(**changes)
    configs = [base.replace(sigma_w=0.5 + j, seed=j % 2) for j in range(k)]  # K = 2: distinct seeds and inputs
    return Loop.build(configs, dev, _splits(dev))


def _off_meta(loop: Loop) -> list[str]:
    return [name for name, t in loop._tensors() if t.device != META]


def test_a_population_of_members_on_meta_keeps_every_tensor_there_and_steps_with_every_optimizer():
    nets = [models.build_model("resnet20", s, 1 / 16).to(META) for s in (0.5, 2.0)]
    pop = members.population(nets, same_input=False)
    assert isinstance(pop, members.GroupedPopulation) and pop.k == 2
    state = list(pop.model.state_dict().items())
    assert state and [n for n, t in state if t.device != META] == []
    for name in OPTIMIZERS:
        opt = optim.build_optimizer(name, pop.model, members=2)
        x, y = torch.empty(8, 6, 32, 32, device=META), torch.zeros(8, 2, dtype=torch.long, device=META)
        pop.losses(pop.model(pop.inputs([x])), y).sum().backward()
        opt.step()
        tensors = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        assert tensors or name == "sgd", name  # plain SGD keeps no state
        assert [t.device for t in tensors if t.device != META and t.ndim] == [], name  # Adam's step: a host scalar
        assert {p.device for p in pop.model.parameters()} == {META}, name


@pytest.mark.parametrize("arch", ["resnet9", "resnet20"])  # resnet56 and 110: resnet20's modules, deeper (below)
@pytest.mark.parametrize("k", [1, 2])
def test_the_engine_loop_runs_an_epoch_and_evaluates_on_meta_and_leaves_nothing_off_it(arch, k):
    loop = _loop(META, k, arch=arch, optimizer="sgd_momentum", channels_last=arch == "resnet9")
    assert _off_meta(loop) == []
    sums, lr = loop.run_epoch()  # 2 steps (the last one partial): check_device runs after the first
    assert loop.checked and loop.step == 2 and loop.epoch == 1 and lr == BASE.lr
    assert sums.device == META and loop.opt.state and _off_meta(loop) == []
    values = loop.readings(sums)  # the evaluation forward passes, norms and instruments: what measure() reads
    assert values.device == META and values.shape == (k, 9 + len(loop.pop.layers) + len(loop.instruments.columns()))
    loop.check_device()


@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_builds_and_steps_as_a_population_on_meta(arch):
    assert _off_meta(_loop(META, 1, arch=arch)) == []
    loop = _loop(META, 2, arch=arch, optimizer="sgd_momentum")
    assert _off_meta(loop) == [] and isinstance(loop.pop, members.GroupedPopulation)
    idx = torch.arange(8, device=META)
    loop.train_step((idx, idx), torch.zeros(2, 2, dtype=torch.float64, device=META))
    assert loop.opt.state and _off_meta(loop) == []
    loop.check_device()


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_every_optimizer_steps_a_population_on_meta(optimizer):
    loop = _loop(META, 2, optimizer=optimizer, augment=False, schedule="cosine", warmup_epochs=0.5)
    loop.run_epoch()
    state = [(key, t) for s in loop.opt.state.values() for key, t in s.items() if isinstance(t, torch.Tensor)]
    assert (state or optimizer == "sgd") and _off_meta(loop) == []  # plain SGD keeps no state
    loop.check_device()


def test_a_loop_state_round_trip_stays_on_meta():
    loop = _loop(META, 2, optimizer="adamw")
    loop.run_epoch()
    state = loop.state_dict()
    assert all(t.device == META for t in state["model"].values()) and state["live"].device == META
    loop.load_state_dict(state)
    assert _off_meta(loop) == []


def test_a_tensor_off_the_run_device_is_one_line_naming_it():
    loop = _loop(torch.device("cpu"), 2)
    loop.check_device()
    loop.instruments.theta = loop.instruments.theta.to(META)
    with pytest.raises(DeviceMismatch, match=r"^instrument theta is on meta, not on cpu: .*run's device cpu") as e:
        loop.check_device()
    assert "\n" not in str(e.value)
    loop = _loop(META, 2)
    head = loop.pop.model.get_submodule("head")
    head.bias = torch.nn.Parameter(torch.zeros(2, 10))  # what a factory without device= makes
    with pytest.raises(DeviceMismatch, match=r"^parameter head.bias is on cpu, not on meta"):
        loop.check_device()


def test_generators_are_checked_where_they_belong():
    loop = _loop(torch.device("cpu"), 2)
    assert {g.device.type for g in [*loop.order_gen.values(), *loop.aug_gen.values()]} == {"cpu"}
    loop.check_device()
    loop.order_gen[0] = types.SimpleNamespace(device=META)  # stand-in: no second real generator device here
    with pytest.raises(DeviceMismatch, match=r"^data-order generator of seed 0 is on meta, not on cpu"):
        loop.check_device()
    loop = _loop(torch.device("cpu"), 2)
    loop.aug_gen[1] = types.SimpleNamespace(device=torch.device("cuda", 0))
    with pytest.raises(DeviceMismatch, match=r"^augmentation generator of seed 1 is on cuda:0, not on cpu"):
        loop.check_device()


def test_an_optimizer_state_off_the_device_is_named_but_torchs_host_step_counter_is_not():
    loop = _loop(META, 1, optimizer="adam")
    loop.run_epoch()
    steps = [s["step"] for s in loop.opt.state.values()]
    assert steps and all(t.device.type == "cpu" and t.ndim == 0 for t in steps)  # torch's design: host counters
    loop.check_device()
    p = next(iter(loop.opt.state))
    loop.opt.state[p]["exp_avg"] = torch.zeros(p.shape)
    with pytest.raises(DeviceMismatch, match=r"^optimizer state prep\.conv\.weight\.exp_avg is on cpu, not on meta"):
        loop.check_device()
