"""The compiled whole step (`compile=True`, `engine.capture`) against the eager one, on the CPU. The instruments' fused
reduction (`Instruments(fused=True)`) equals the eager one to rounding (no compiler: the functional form itself). A
tiny population trained compiled and eagerly by every optimiser, with an lr that changes at every step, ends equal to
rounding: traced by dynamo with `fullgraph=True` (a graph break fails) into one graph that no lr change recompiles,
run by torch's `aot_eager` backend (the graph inductor would compile, without its code generation: seconds, not
minutes). What differs is rounding: lr is a float32 tensor, not a Python float, and Adam's bias corrections are
float32 tensors (`capturable`). Muon runs its Newton-Schulz in float32 here: in bfloat16, rounding a few float32 ulps
apart before the cast moves the orthogonalised update by bfloat16 ulps (~0.4 %), which the following steps carry."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from initmem.config import OPTIMIZERS, TrainConfig
from initmem.data import splits
from initmem.engine import capture, members, models, runtime
from initmem.engine.instruments import Instruments
from initmem.engine.loop import Loop

CPU = torch.device("cpu")
TINY = dict(arch="resnet9", width=1 / 16, data="synthetic", n_train=32, n_val=10, n_test=10, train_eval_size=10,
            batch_size=8, epochs=1, device="cpu", schedule="cosine")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("channels_last", [False, True])
def test_the_fused_instruments_equal_the_eager_ones_to_rounding(channels_last):
    torch.manual_seed(0)
    pop = members.population([models.build_model("resnet9", s, 1 / 16) for s in (0.5, 2.0)], same_input=True)
    if channels_last:
        pop.model.to(memory_format=torch.channels_last)
    eager, fused = (Instruments(pop.weights, 2, pop.layers, fused=f) for f in (False, True))
    for step in range(3):
        for ins in (eager, fused):
            ins.before_step()
        with torch.no_grad():
            for w in pop.weights:
                w.add_(torch.randn_like(w), alpha=1e-3 * (step + 1))
        for ins in (eager, fused):
            ins.after_step()
    a, b = eager.read(), fused.read()
    assert a.shape == b.shape == (2, len(eager.columns())) and torch.isfinite(a).all()
    torch.testing.assert_close(b, a, rtol=1e-12, atol=0)


@pytest.fixture
def traced(monkeypatch) -> list[CompileCounterWithBackend]:
    """torch.compile as `fullgraph=True` on `aot_eager`, each compilation's counter listed; dynamo's caches empty."""
    counters, real = [], torch.compile

    def compile_(fn, **kwargs):
        counters.append(CompileCounterWithBackend("aot_eager"))
        return real(fn, backend=counters[-1], fullgraph=True, dynamic=kwargs.get("dynamic"))

    monkeypatch.setattr(capture.torch, "compile", compile_)
    runtime.reset_compiled()
    yield counters
    runtime.reset_compiled()


def _loop(optimizer: str, compile: bool, steps: int = 4) -> Loop:
    """A tiny ResNet-9 K = 2 population (two seeds: two inputs) after `steps` full-batch steps of a cosine schedule."""
    cfg = TrainConfig(**{**TINY, "n_train": 8 * steps}, optimizer=optimizer, compile=compile,
                      **({"ns_dtype": "float32"} if optimizer == "muon" else {}))
    sp = splits.make_splits(splits.make_synthetic(8 * steps + 10, 10), 10, 8 * steps, 10, 0, CPU, 10)
    loop = Loop.build([cfg.replace(sigma_w=s, seed=j) for j, s in enumerate((0.5, 2.0))], CPU, sp)
    loop.run_epoch()
    return loop


def _assert_equal_to_rounding(comp: Loop, eager: Loop, what: str) -> None:
    assert comp.step == eager.step and comp.instruments.steps == eager.instruments.steps
    for (name, a), b in zip(eager.pop.model.state_dict().items(), comp.pop.model.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{what} {n}: {m}")
    torch.testing.assert_close(comp.instruments.read(), eager.instruments.read(), rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_the_compiled_whole_step_is_one_graph_and_equals_the_eager_one_to_rounding(optimizer, traced):
    eager = _loop(optimizer, False)
    comp = _loop(optimizer, True)
    step = [c for c in traced if c.frame_count]
    assert len(step) == 1 and step[0].frame_count == 1  # one graph, not recompiled by 3 new lrs
    _assert_equal_to_rounding(comp, eager, optimizer)


def test_an_eager_checkpoint_resumes_compiled_and_a_later_population_reuses_the_graph(traced):
    """Muon's AdamW step counters: host ints eagerly, device tensors compiled (`capturable`), converted by the first,
    eager step after a restore; a later population of the shape compiles nothing and starts afresh."""
    eager = _loop("muon", False, steps=2)
    state = eager.state_dict()
    comp = _loop("muon", True, steps=2)
    comp.load_state_dict(state)
    eager.run_epoch()
    comp.run_epoch()
    _assert_equal_to_rounding(comp, eager, "resumed")
    compiled = len(traced), sum(c.frame_count for c in traced)
    later = _loop("muon", True, steps=2)  # trains with `comp`'s optimiser and instruments, reset
    assert (len(traced), sum(c.frame_count for c in traced)) == compiled
    _assert_equal_to_rounding(later, _loop("muon", False, steps=2), "reused")
