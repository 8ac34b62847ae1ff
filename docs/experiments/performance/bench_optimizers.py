"""What each optimiser's training step costs, against plain SGD's in the same run: why the planner times Muon's step
apart and the others' as SGD's (docs/planner.md), and where Muon's extra time goes.

Contenders, alternated within each repeat (sgd, sgd_momentum, adam, adamw, muon, muon at ns_dtype="float32", sgd,
...) so that load from other processes hits them alike: the engine's own epoch (`initmem.engine.trainer.train`,
`--steps` steps, epoch 2 timed from the run's wall_time column, evaluation kept to 10 images a split), as
benchmarks.bench_train's contender a.
Then Muon's Newton–Schulz alone (`optim.muon_update` over the network's Muon parameters, random gradients, in
bfloat16 as the recipe has it, and at ns_dtype="float32"), to show whether bfloat16 matmuls are what a
CPU without native bfloat16 pays for. Prints medians and ends with `ratio_muon_vs_sgd=X ratio_muon_fp32_vs_sgd=Y
ratio_ns_bf16_vs_fp32=Z` (step times / SGD's; Newton-Schulz's bfloat16 time / float32's).

    PYTHONPATH=. .venv/bin/python docs/experiments/performance/bench_optimizers.py [--width 0.25 --batch-size 32
        --steps 40 --repeats 3 --threads 1]

From the repository root (`PYTHONPATH=.`: it times with `benchmarks.bench_train`). Results: README.md beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from benchmarks.bench_train import DATA, bench_engine
from initmem.config import OPTIMIZERS, TrainConfig
from initmem.data import splits as _data
from initmem.engine import models, optim


def time_newton_schulz(config: TrainConfig, repeats: int = 5) -> tuple[float, float]:
    """Seconds of one Muon update of every Muon parameter of `config`'s network at ns_dtype bfloat16 and at float32
    (`optim.muon_update`), best of `repeats` each."""
    net = models.build_model(config.arch, 1.0, config.width)
    opt = optim.build_optimizer("muon", net)
    params = [p for g in opt.param_groups if g["use_muon"] for p in g["params"]]
    grads = [torch.randn_like(p) for p in params]

    def update(ns_dtype: str) -> None:
        for p, g in zip(params, grads, strict=True):
            optim.muon_update(g, torch.zeros_like(p), ns_dtype=ns_dtype)

    out = []
    for dtype in ("bfloat16", "float32"):
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            update(dtype)
            best = min(best, time.perf_counter() - t0)
        out.append(best)
    return out[0], out[1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="resnet9")
    ap.add_argument("--width", type=float, default=0.25)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40, help="timed steps per contender and repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--data-root", default=os.environ.get("INITMEM_DATA", str(DATA)))
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        _data.load_cifar10(args.data_root)
        source = "auto"
    except Exception as exc:  # speed only: synthetic images do as well
        print(f"real CIFAR-10 not found ({type(exc).__name__}); using synthetic images")
        source = "synthetic"
    base = TrainConfig(arch=args.arch, width=args.width, batch_size=args.batch_size, data=source,
                       data_root=args.data_root, n_train=args.steps * args.batch_size, n_val=10, n_test=10,
                       train_eval_size=10, epochs=2, device=args.device)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.device}; {args.arch} width "
          f"{args.width:g}, b={args.batch_size}, {args.steps} timed steps, {args.repeats} repeats")
    contenders = {o: base.replace(optimizer=o) for o in OPTIMIZERS}
    contenders["muon float32"] = base.replace(optimizer="muon", ns_dtype="float32")  # the faster ns_dtype
    step: dict[str, list[float]] = {o: [] for o in contenders}
    for r in range(args.repeats):
        for o, config in contenders.items():
            step[o].append(args.batch_size / bench_engine(config))
            print(f"repeat {r + 1}: {o:<13} {1e3 * step[o][-1]:8.1f} ms/step", flush=True)
    med = {o: statistics.median(v) for o, v in step.items()}
    print("\nmedian ms per training step (x: against sgd's):")
    for o, s in med.items():
        print(f"  {o:<13} {1e3 * s:8.1f}   x{s / med['sgd']:.2f}")
    ns, fp32 = time_newton_schulz(base)
    print(f"Muon's Newton-Schulz alone (every Muon parameter, one step): {1e3 * ns:.1f} ms in bfloat16; at "
          f"ns_dtype float32: {1e3 * fp32:.1f} ms; muon's step - sgd's: {1e3 * (med['muon'] - med['sgd']):.1f} ms")
    print(f"ratio_muon_vs_sgd={med['muon'] / med['sgd']:.2f} "
          f"ratio_muon_fp32_vs_sgd={med['muon float32'] / med['sgd']:.2f} ratio_ns_bf16_vs_fp32={ns / fp32:.2f}")


if __name__ == "__main__":
    main()
