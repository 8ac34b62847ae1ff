"""What the forgetting instruments cost: the engine's step time with the per-step angle accumulation against the same
engine with it switched off (before_step/after_step made no-ops) and with the per-layer implementation it replaced
(before: a reshape copy and ~10 ops per layer, `PerLayer` below), alternated so that machine load hits all alike.

    .venv/bin/python docs/experiments/performance/bench_instruments.py [--arch resnet9] [--width 0.125] [--repeats 5]

Prints the median ms per step of each, the overhead in percent of a step and the new overhead against the old one.
Results: README.md beside it.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from initmem.config import TrainConfig
from initmem.engine import instruments
from initmem.engine.trainer import time_steps


class PerLayer(instruments.Instruments):
    """The per-step angle as it was before the flat buffers (for this comparison only): per layer, a `reshape(K, -1)`
    (a copy for a `channels_last` weight), a float64 cast and a sum of each of the three products."""

    @torch.no_grad()
    def before_step(self) -> None:
        torch._foreach_copy_(self.prev, [w.detach() for w in self.weights])

    @torch.no_grad()
    def after_step(self) -> None:
        d = torch._foreach_sub([w.detach() for w in self.weights], self.prev)
        k = self.k

        def dots(xs, ys):
            return torch.stack([(x.reshape(k, -1).double() * y.reshape(k, -1).double()).sum(1)
                                for x, y in zip(xs, ys, strict=True)])

        parts = torch.stack([dots(d, self.prev), dots(d, d), dots(self.prev, self.prev)])
        step = instruments.angle(torch.cat([parts.sum(1, keepdim=True), parts], 1))
        self.step_sum += step
        self.theta += step[0]
        self.steps += 1


def instruments_alone(config: TrainConfig, population: int, calls: int, repeats: int) -> tuple[float, float]:
    """Median seconds of one before_step + after_step on the engine's population, new and old, alternated."""
    import time

    from initmem.engine import runtime

    dev = runtime.run_device(config)
    pop, _ = runtime.network([config.replace(sigma_w=0.1 + i) for i in range(population)], dev)
    both = [cls(pop.weights, population, pop.layers) for cls in (instruments.Instruments, PerLayer)]
    times: list[list[float]] = [[], []]
    for _ in range(repeats):
        for inst, out in zip(both, times, strict=True):
            t0 = time.perf_counter()
            for _ in range(calls):
                inst.before_step()
                inst.after_step()
            float(inst.theta.sum())  # waits for a GPU's queued work
            out.append((time.perf_counter() - t0) / calls)
    return statistics.median(times[0]), statistics.median(times[1])


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
    ap.add_argument("--population", type=int, default=1, help="K members (spread sigma_w) per step")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    config = TrainConfig(arch=a.arch, width=a.width, batch_size=a.batch_size, optimizer=a.optimizer, device=a.device)
    on, off, old = [], [], []
    real = instruments.Instruments.before_step, instruments.Instruments.after_step
    for _ in range(a.repeats):
        on.append(time_steps(config, steps=a.steps, population=a.population))
        instruments.Instruments.before_step = instruments.Instruments.after_step = lambda self: None
        try:
            off.append(time_steps(config, steps=a.steps, population=a.population))
        finally:
            instruments.Instruments.before_step, instruments.Instruments.after_step = real
        instruments.Instruments.before_step, instruments.Instruments.after_step = (PerLayer.before_step,
                                                                                   PerLayer.after_step)
        try:
            old.append(time_steps(config, steps=a.steps, population=a.population))
        finally:
            instruments.Instruments.before_step, instruments.Instruments.after_step = real
    t_on, t_off, t_old = statistics.median(on), statistics.median(off), statistics.median(old)
    print(f"{a.arch} width {a.width:g} b={a.batch_size} {a.optimizer} on {a.device} ({a.threads} thread(s)), "
          f"K={a.population}, {a.repeats} alternated repeats of {a.steps} steps")
    print(f"step with instruments {1e3 * t_on:.1f} ms, without {1e3 * t_off:.1f} ms: "
          f"overhead {100 * (t_on - t_off) / t_off:+.1f} % of a step")
    ratio = f"new / old overhead {(t_on - t_off) / (t_old - t_off):.2f}" if t_old > t_off else "no old overhead seen"
    print(f"the per-layer implementation it replaced: {1e3 * t_old:.1f} ms, overhead "
          f"{100 * (t_old - t_off) / t_off:+.1f} % of a step; {ratio}")
    new, before = instruments_alone(config, a.population, a.steps, a.repeats)
    print(f"before_step + after_step alone: {1e3 * new:.2f} ms, the per-layer implementation {1e3 * before:.2f} ms "
          f"(new / old {new / before:.2f})")


if __name__ == "__main__":
    main()
