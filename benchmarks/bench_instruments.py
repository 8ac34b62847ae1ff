"""What the forgetting instruments cost: the engine's step time with the per-step angle accumulation against the same
engine with it switched off (before_step/after_step made no-ops), alternated so that machine load hits both alike.

    .venv/bin/python benchmarks/bench_instruments.py [--arch resnet9] [--width 0.125] [--batch-size 128] [--repeats 5]

Prints the median ms per step of each and the overhead in percent of a step. Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from initmem.config import TrainConfig
from initmem.engine import instruments
from initmem.engine.trainer import time_steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="resnet9")
    ap.add_argument("--width", type=float, default=0.125)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    config = TrainConfig(arch=a.arch, width=a.width, batch_size=a.batch_size, optimizer=a.optimizer, device=a.device)
    on, off = [], []
    real = instruments.Instruments.before_step, instruments.Instruments.after_step
    for _ in range(a.repeats):
        on.append(time_steps(config, steps=a.steps))
        instruments.Instruments.before_step = instruments.Instruments.after_step = lambda self: None
        try:
            off.append(time_steps(config, steps=a.steps))
        finally:
            instruments.Instruments.before_step, instruments.Instruments.after_step = real
    t_on, t_off = statistics.median(on), statistics.median(off)
    print(f"{a.arch} width {a.width:g} b={a.batch_size} {a.optimizer} on {a.device} ({a.threads} thread(s)), "
          f"{a.repeats} alternated repeats of {a.steps} steps")
    print(f"step with instruments {1e3 * t_on:.1f} ms, without {1e3 * t_off:.1f} ms: "
          f"overhead {100 * (t_on - t_off) / t_off:+.1f} % of a step")


if __name__ == "__main__":
    main()
