"""Graph breaks of the whole training step under dynamo, per optimiser: what `torch.compile` would have to split
(each break is a return to Python, and a CUDA graph cannot replay across one). The step is `Loop.train_step`'s with
`compile=True` (`engine.capture.whole_step`: forward, loss, backward, the instruments' fused reductions and the
optimiser's update), traced by `torch._dynamo.explain` as `capture.compiled` traces it (no inductor: seconds on the
CPU) on a tiny ResNet-9 population, after its first (eager) step.

    python -m benchmarks.graph_breaks [--optimizers sgd adam ...] [--k 1] [--fused-adam] [--device cuda]

prints one line per optimiser: graphs, breaks and the distinct break reasons (the first line of each); zero breaks
for every optimiser is issue 51's goal. `--fused-adam` traces Adam(W) with torch's fused kernel, as on CUDA (where
`--device cuda` traces it on the GPU)."""

from __future__ import annotations

import argparse

import torch

from initmem.config import OPTIMIZERS, TrainConfig
from initmem.data import splits
from initmem.engine import capture, runtime
from initmem.engine.loop import Loop


def warm_loop(optimizer: str, k: int = 1, batch: int = 8, fused_adam: bool = False, device: str = "cpu") -> Loop:
    """A tiny ResNet-9 population trained by `optimizer` with `compile=True`, after its first (eager) step."""
    base = TrainConfig(arch="resnet9", width=1 / 16, data="synthetic", n_train=2 * batch, n_val=10, n_test=10,
                       train_eval_size=10, batch_size=batch, epochs=1, device=device, optimizer=optimizer, compile=True)
    dev = torch.device(device)
    sp = splits.make_splits(splits.make_synthetic(2 * batch + 10, 10), 10, 2 * batch, 10, 0, dev, 10)
    runtime.reset_compiled()
    loop = Loop.build([base.replace(sigma_w=0.5 + j) for j in range(k)], dev, sp)
    if fused_adam and isinstance(loop.opt, torch.optim.Adam):
        for g in loop.opt.param_groups + loop.whole.groups:
            g.update(fused=True, foreach=False)
    loop.train_step((torch.arange(batch, device=dev),), torch.zeros(k, 2, dtype=torch.float64, device=dev))
    return loop


def breaks(optimizer: str, k: int = 1, fused_adam: bool = False, device: str = "cpu") -> dict:
    """{optimizer, graphs, breaks, reasons} of one traced whole step."""
    loop = warm_loop(optimizer, k, fused_adam=fused_adam, device=device)
    x, y = loop._batch((torch.arange(loop.cfg.batch_size, device=loop.dev),))
    with torch._dynamo.config.patch(trace_autograd_ops=True):  # as `capture.compiled` traces it
        out = torch._dynamo.explain(capture.whole_step)(*loop.whole.parts, x, y, loop.live, loop.whole.groups,
                                                         loop.whole.lrs)
    reasons = sorted({str(r.reason).splitlines()[0][:160] for r in out.break_reasons})
    return dict(optimizer=optimizer, graphs=out.graph_count, breaks=out.graph_break_count, reasons=reasons)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.graph_breaks", description=__doc__.splitlines()[0])
    ap.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS), choices=OPTIMIZERS)
    ap.add_argument("--k", type=int, default=1, help="population members (default 1)")
    ap.add_argument("--fused-adam", action="store_true", help="Adam(W) with torch's fused kernel (CUDA's)")
    ap.add_argument("--device", default="cpu", help="where the step runs (default cpu)")
    a = ap.parse_args(argv)
    for name in a.optimizers:
        r = breaks(name, a.k, a.fused_adam, a.device)
        print(f"{name}: {r['graphs']} graphs, {r['breaks']} graph breaks" + "".join(
            f"\n    {reason}" for reason in r["reasons"]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
