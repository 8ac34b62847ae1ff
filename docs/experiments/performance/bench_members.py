"""How to batch K members of a population: grouped modules against torch.func (stack_module_state + vmap) against K
separate models, one training step (forward, backward, SGD update) each, same inputs.

    .venv/bin/python docs/experiments/performance/bench_members.py [--width 0.125 0.25] [--members 3 7] [--threads 1]

Prints ms per step and the ratio to K separate steps (> 1: the population is faster). Results: README.md beside it.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

from initmem.engine import members, models


def _timed(step, device: torch.device, repeats: int) -> float:
    for _ in range(2):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def bench(arch: str, width: float, k: int, batch: int, device: torch.device, repeats: int) -> dict[str, float]:
    sigmas = [0.1 + 2.4 * i / max(1, k - 1) for i in range(k)]
    nets = [models.build_model(arch, s, width).to(device) for s in sigmas]
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def separate() -> None:
        for net in nets:
            loss = F.cross_entropy(net(x), y)
            net.zero_grad(set_to_none=True)
            loss.backward()
            with torch.no_grad():
                torch._foreach_add_([p for p in net.parameters()], [p.grad for p in net.parameters()], alpha=-0.01)

    grouped = members.build_grouped([copy.deepcopy(n) for n in nets]).to(device)

    def grouped_step() -> None:
        out = grouped(x)  # [b, K, 10]
        loss = F.cross_entropy(out.permute(0, 2, 1), y[:, None].expand(-1, k), reduction="none").mean(0).sum()
        grouped.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            ps = list(grouped.parameters())
            torch._foreach_add_(ps, [p.grad for p in ps], alpha=-0.01)

    params, buffers = stack_module_state([copy.deepcopy(n) for n in nets])
    base = copy.deepcopy(nets[0]).to("meta")
    forward = vmap(lambda p, b, xx: functional_call(base, (p, b), (xx,)), in_dims=(0, 0, None))
    plist = list(params.values())

    def vmap_step() -> None:
        out = forward(params, buffers, x)  # [K, b, 10]
        loss = F.cross_entropy(out.permute(1, 2, 0), y[:, None].expand(-1, k), reduction="none").mean(0).sum()
        for p in plist:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            torch._foreach_add_(plist, [p.grad for p in plist], alpha=-0.01)

    t_sep = _timed(separate, device, repeats)
    t_grp = _timed(grouped_step, device, repeats)
    t_vm = _timed(vmap_step, device, repeats)
    return {"separate_ms": 1e3 * t_sep, "grouped_ms": 1e3 * t_grp, "vmap_ms": 1e3 * t_vm,
            "grouped_vs_separate": t_sep / t_grp, "vmap_vs_separate": t_sep / t_vm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="resnet9")
    ap.add_argument("--width", type=float, nargs="+", default=[0.125, 0.25])
    ap.add_argument("--members", type=int, nargs="+", default=[3])
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    members.tune_malloc()
    dev = torch.device(a.device)
    print(f"{a.arch} b={a.batch_size} on {dev} ({a.threads} thread(s)); speed-up = separate time / population time")
    heads = ("width", "K", "separate ms", "grouped ms", "vmap ms", "grouped x", "vmap x")
    print(" ".join(f"{h:>{n}}" for h, n in zip(heads, (6, 3, 12, 11, 9, 10, 8), strict=True)))
    for w in a.width:
        for k in a.members:
            r = bench(a.arch, w, k, a.batch_size, dev, a.repeats)
            print(f"{w:>6g} {k:>3} {r['separate_ms']:>12.1f} {r['grouped_ms']:>11.1f} {r['vmap_ms']:>9.1f} "
                  f"{r['grouped_vs_separate']:>10.2f} {r['vmap_vs_separate']:>8.2f}")


if __name__ == "__main__":
    main()
