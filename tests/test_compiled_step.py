"""The instruments' fused reduction (`Instruments(fused=True)`, what a compiled step traces) against the eager one:
equal to rounding over a few steps of a K = 2 population in both memory layouts (no compiler: the functional form
itself, eagerly)."""

from __future__ import annotations

import pytest
import torch

from initmem.engine import members, models
from initmem.engine.instruments import Instruments


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
