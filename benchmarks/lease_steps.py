"""The measuring steps of `benchmarks.lease`: what the H200 of 2026-12-04 did not measure (docs/gpu/README.md), each
run in its own process by `python -m benchmarks.lease --worker NAME` under a time limit, as the device check's steps.

Every configuration trains two short epochs through the engine (`device_steps._timed_epochs`: synchronised only at
the epochs' edges, so the steps between run as a real run's do) on synthetic data of CIFAR-10's shape; a
configuration whose time would pass the step's deadline is listed under `not_reached`, not started.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks import device_steps as ds
from benchmarks import parity

# per mode: the eager grid (arch, b, optimizer), the population grid, the compiled members, the profiled config,
# the steps an epoch, the images each evaluation set holds, the network's width
SIZES = {
    "full": {"eager": [("resnet9", 16, "sgd"), ("resnet9", 32, "sgd"), ("resnet9", 64, "sgd"), ("resnet9", 128, "sgd"),
                       ("resnet9", 256, "sgd"), ("resnet56", 128, "sgd"), ("resnet110", 128, "sgd"),
                       ("resnet9", 128, "muon")],
             "pop_batches": (16, 32, 128), "members": (3, 7), "compiled": (1, 7), "compile_batch": 128,
             "trace": ("resnet9", 128), "steps": 20, "eval": 1000, "width": 1.0},
    "tiny": {"eager": [("resnet9", 16, "sgd"), ("resnet9", 32, "sgd"), ("resnet20", 32, "sgd"),
                       ("resnet9", 32, "muon")],
             "pop_batches": (16, 32), "members": (3,), "compiled": (1, 3), "compile_batch": 32,
             "trace": ("resnet9", 32), "steps": 3, "eval": 64, "width": 0.0625},
}


def precision(ctx: ds.Ctx) -> str:
    """The study's tf32 on CUDA; fp32 on the CPU stand-in (a CPU has no TF32)."""
    return "tf32" if ctx.cuda else "fp32"


def config(ctx: ds.Ctx, arch: str, batch_size: int, **changes: Any):
    """Two epochs of `steps` whole batches of synthetic CIFAR-10-shaped data, evaluated on `eval` images a set."""
    from initmem.config import TrainConfig

    size = SIZES[ctx.s["mode"]]
    n = size["eval"]
    return TrainConfig(**{"arch": arch, "width": size["width"], "batch_size": batch_size, "precision": precision(ctx),
                          "device": ctx.s["device"], "data": "synthetic", "n_train": batch_size * size["steps"],
                          "n_val": n, "n_test": n, "train_eval_size": min(n, batch_size * size["steps"]), "epochs": 2,
                          **changes})


def _timed_grid(ctx: ds.Ctx, grid: list[tuple[str, int, str, int]], key: str = "runs") -> None:
    """Time each (arch, b, optimizer, members) in order until the step's deadline (an arch or population size not
    timed yet is guessed at the slowest so far, scaled by its members)."""
    last: dict[tuple, float] = {}
    for arch, b, opt, k in grid:
        what = {"arch": arch, "batch_size": b, "optimizer": opt, "members": k}
        guess = last.get((arch, k), k * max(last.values(), default=0.0))
        if ctx.left() < 1.3 * guess + 3:
            ctx.add("not_reached", {**what, "reason": f"{ctx.left():.0f} s left in the step"})
            continue
        t0 = time.perf_counter()
        try:
            with ds.guard(ctx.left() - 1):
                run = ds._timed_epochs(config(ctx, arch, b, optimizer=opt), members=k)
        except ds.Overrun:
            ctx.add("not_reached", {**what, "reason": "guard: not finished at the step's deadline"})
            break
        ctx.add(key, run)
        last[(arch, k)] = time.perf_counter() - t0


def step_eager(ctx: ds.Ctx) -> None:
    """One network, eager, at the study's precision: ResNet-9 at b = 16/32/64/128/256, ResNet-56 and -110 at b = 128,
    a Muon step at b = 128 (b = 128 is the anchor against the committed H200 number and the populations' K = 1)."""
    _timed_grid(ctx, [(a, b, o, 1) for a, b, o in SIZES[ctx.s["mode"]]["eager"]])


def step_population(ctx: ds.Ctx) -> None:
    """Populations of K = 3 and 7 ResNet-9s trained as one, at b = 16/32/128, unsynchronised between the epochs'
    edges (the K = 1 rates are the eager step's)."""
    size = SIZES[ctx.s["mode"]]
    _timed_grid(ctx, [("resnet9", b, "sgd", k) for b in size["pop_batches"] for k in size["members"]])


def step_compiled(ctx: ds.Ctx) -> bool:
    """`compile=True` at K = 1 and 7 (b = 128), each from a cold compile, against the same run eager: timings, and
    the compiled-vs-eager parity of every member (`parity.verdict` at the run's precision: epoch 0 the same initial
    weights forward, the trained epochs within the rounding tolerance)."""
    from initmem.engine import runtime

    size, ok = SIZES[ctx.s["mode"]], True
    ds.compile_backend(ctx)
    for k in size["compiled"]:
        if ctx.left() < 10:
            ctx.add("not_reached", {"members": k, "reason": f"{ctx.left():.0f} s left in the step"})
            continue
        eager, compiled = [], []
        cfg = config(ctx, "resnet9", size["compile_batch"], deterministic=True)
        try:
            with ds.guard(ctx.left() - 1):
                ref = ds._timed_epochs(cfg, members=k, histories=eager)
                runtime.reset_compiled()
                run = ds._timed_epochs(cfg.replace(compile=True), members=k, histories=compiled)
        except ds.Overrun:
            ctx.add("not_reached", {"members": k, "reason": "guard: not finished at the step's deadline"})
            break
        verdicts = [parity.verdict(a, b, cfg.precision) for a, b in zip(eager, compiled, strict=True)]
        run.update(eager_step_s=ref["step_s"], compiled_vs_eager=ref["step_s"] / run["step_s"],
                   parity_pass=all(v["pass"] for v in verdicts),
                   parity_trained_max=max((v["trained"]["max"] or float("inf")) for v in verdicts),
                   parity_epoch0_max=max((v["epoch0"]["max"] or float("inf")) for v in verdicts))
        ok = ok and run["parity_pass"]
        ctx.add("runs", run)
    return ok if ctx.res.get("runs") else None


def step_trace(ctx: ds.Ctx) -> None:
    """torch.profiler over `steps` training steps of one network (eager): the GPU's busy time (the union of its
    kernels' intervals) against the wall time, kernels and top-level aten ops per step (the host's launches)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from initmem.engine.trainer import train

    size = SIZES[ctx.s["mode"]]
    arch, b = size["trace"]
    cfg, n = config(ctx, arch, b, epochs=1), size["steps"] // 2
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.cuda else [])
    prof, marks = profile(activities=acts), {}

    def mark(step: int) -> None:  # profile steps n/2 .. n/2 + n: after the warm-up, before the epoch's end
        if step in (n // 2, n // 2 + n):
            if ctx.cuda:
                torch.cuda.synchronize()
            marks[step] = time.perf_counter()
            if step == n // 2:
                prof.__enter__()
            else:
                prof.__exit__(None, None, None)

    with ds.guard(ctx.left() - 1):
        train(cfg, progress=False, on_step=mark)
    ctx.put("setup", {"arch": arch, "batch_size": b, "precision": cfg.precision, "steps": n, "width": cfg.width})
    ctx.put("summary", trace_summary(prof.events(), marks[n // 2 + n] - marks[n // 2], n))


def trace_summary(events: list, wall_s: float, steps: int) -> dict[str, Any]:
    """GPU-busy seconds (the union of the device kernels' intervals) against `wall_s`, per step: kernels, top-level
    aten ops, and the five kernels that took the most time."""
    from torch.autograd import DeviceType

    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy, end = 0.0, float("-inf")
    for a, z in spans:  # microseconds; overlapping kernels (streams) counted once
        busy += max(0.0, z - max(a, end))
        end = max(end, z)
    top_ops = [e for e in events if e.name.startswith("aten::") and (e.cpu_parent is None or
                                                                    not e.cpu_parent.name.startswith("aten::"))]
    by_name: dict[str, float] = {}
    for e in kernels:
        by_name[e.name[:80]] = by_name.get(e.name[:80], 0.0) + e.time_range.elapsed_us() / 1e6
    return {"wall_s": wall_s, "steps": steps, "step_s": wall_s / steps, "gpu_busy_s": busy / 1e6 if kernels else None,
            "gpu_busy_fraction": busy / 1e6 / wall_s if kernels else None, "kernels_per_step": len(kernels) / steps,
            "aten_ops_per_step": len(top_ops) / steps,
            "top_kernels_s": dict(sorted(by_name.items(), key=lambda kv: -kv[1])[:5]),
            "note": "profiled: the profiler's own overhead is in wall_s"}


STEPS = {  # name -> (title, function), in run order; env is the device check's (versions, modules, data warmed)
    "env": ds.STEPS["env"],
    "eager": ("epoch times, eager, one network", step_eager),
    "population": ("populations K = 3, 7, unsynchronised", step_population),
    "compiled": ("compiled K = 1, 7 against eager: speed and parity", step_compiled),
    "trace": ("profiler: GPU busy against wall time", step_trace),
}
