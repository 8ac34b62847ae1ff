"""Training speed, side by side: initmem's engine against a plain PyTorch DataLoader loop, the engine at bf16
against that loop at fp32, and K separate runs against one K-member sigma_w population. Same model (ResNet-9
width 0.25 by default), optimiser and batch size.

Contenders, alternated within each repeat (a, a16, b0, b2, c-separate, c-population, a, ...) so that load from
other processes hits them alike; the first epoch / first steps of each are warm-up and are not timed:
  a   engine       `initmem.engine.trainer.train` itself at `--precision` (default fp32): an epoch of `--steps` steps
                   (n_train = steps * b) timed from the run's own `wall_time` column (epoch 2 minus epoch 1; epoch 1
                   is the warm-up). Evaluation is kept to 10 images per split, so the timed epoch is training plus a
                   negligible measurement.
  a16 engine bf16  the same at precision="bf16" (autocast; on a CPU with AVX512-BF16/AMX oneDNN runs the convs in
                   bf16): the precision contender, against the loop below at fp32.
  b0/b2 dataloader the loop a user would write, on a seeded random sample of the training images (`loop_sample`):
                   a torchvision-style Dataset (CIFAR10's __getitem__: PIL image ->
                   ToTensor -> Normalize) + DataLoader(shuffle=True, num_workers=0 or 2) + the same model and
                   optimiser, `loss.item()` and accuracy read every step; contiguous (NCHW) tensors; `--precision`
                   (fp32 by default: what a user writes).
  c   separate     K `train()` runs (sigma_w spread over the study's grid), epoch 2 of each timed as in (a);
      population   one `train([c1, ..., cK])` over the same K configs, epoch 2 timed.
Images per second are training images (x K for c); glibc malloc is set once for all contenders (--malloc).
Prints the median over repeats and ends with `ratio_engine_vs_dataloader=X ratio_engine_bf16_vs_dataloader=Y
ratio_ensemble_vs_separate=Z` (X and Y against the faster DataLoader variant). `--components` times the parts
(best of N), `--profile` prints top ops.

    .venv/bin/python -m benchmarks.bench_train [--width 0.25 --batch-size 128 --steps 20 --k 3 --repeats 3]

What it measured and what that means: docs/performance.md.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from initmem.config import TrainConfig
from initmem.data import splits as _data
from initmem.data.device import resolve_device
from initmem.engine import members as _members
from initmem.engine import models, optim
from initmem.engine.trainer import train
from initmem.store.provenance import portable_source

SIGMA_GRID = (0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5)
DATA = Path(__file__).resolve().parents[1] / "data"  # the repository's data/, where `initmem data` puts CIFAR-10


class Cifar10Images(torch.utils.data.Dataset):
    """torchvision.datasets.CIFAR10's storage and __getitem__: HWC uint8 numpy array, PIL image per item."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, transform):
        self.data, self.targets, self.transform = x.permute(0, 2, 3, 1).numpy(), y.tolist(), transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        from PIL import Image

        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


def _epoch_rate(history, images: int) -> float:
    """Images per second of the run's second epoch, from its own wall_time column."""
    t = history.set_index("epoch")["wall_time"]
    return images / (t[2] - t[1])


def bench_engine(cfg: TrainConfig) -> float:
    r = train(cfg, progress=False)
    return _epoch_rate(r.history, cfg.n_train)


def bench_separate(cfgs: list[TrainConfig]) -> float:
    t = 0.0
    for c in cfgs:
        h = train(c, progress=False).history.set_index("epoch")["wall_time"]
        t += h[2] - h[1]
    return len(cfgs) * cfgs[0].n_train / t


def bench_ensemble(cfgs: list[TrainConfig]) -> float:
    rs = train(cfgs, progress=False)
    return _epoch_rate(rs[0].history, len(cfgs) * cfgs[0].n_train)


def loop_sample(data: _data.Cifar10, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random sample of n training images, as a user's (shuffled) CIFAR10 gives. An image-folder source is
    stored class by class: its first n images are one class, which drives the loss to 0 within a few steps and the
    gradients into denormals, whose arithmetic is far slower on x86 (measured: 0.6 s -> 30 s a step at width 0.5),
    so the loop timed would not be the loop a user runs."""
    idx = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(seed))[:n]
    return data.train_x[idx], data.train_y[idx]


def bench_dataloader(cfg: TrainConfig, data: _data.Cifar10, workers: int, steps: int, warmup: int = 3) -> float:
    """The plain loop: returns images/s over `steps` steps after `warmup` untimed ones."""
    from torchvision import transforms

    dev = resolve_device(cfg.device)
    x, y = loop_sample(data, (steps + warmup) * cfg.batch_size, cfg.seed)
    mean = (x.float() / 255).mean((0, 2, 3)).tolist()
    std = (x.float() / 255).std((0, 2, 3)).tolist()
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean, std)])
    loader = torch.utils.data.DataLoader(Cifar10Images(x, y, tf), batch_size=cfg.batch_size, shuffle=True,
                                         num_workers=workers, pin_memory=dev.type == "cuda", drop_last=True)
    torch.manual_seed(cfg.seed)
    model = models.build_model(cfg.arch, cfg.sigma_w, cfg.width).to(dev)
    opt = optim.build_optimizer(cfg.optimizer, model, lr=cfg.lr)
    net = torch.compile(model) if cfg.compile else model
    model.train()
    running, correct, t0 = 0.0, 0, None
    for i, (xb, yb) in enumerate(loader):
        if i == warmup:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
            out = net(xb)
        loss = F.cross_entropy(out.float(), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running += loss.item()
        correct += (out.argmax(1) == yb).sum().item()
    return steps * cfg.batch_size / (time.perf_counter() - t0)


def profile(cfg: TrainConfig, data: _data.Cifar10, steps: int) -> None:
    """torch.profiler top ops (self CPU time) of the engine and of the DataLoader loop (num_workers=0)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    for name, fn in (("engine", lambda: train(cfg.replace(epochs=1), progress=False)),
                     ("dataloader nw=0", lambda: bench_dataloader(cfg, data, 0, steps, warmup=0))):
        fn()  # warm-up
        with prof(activities=acts) as p:
            fn()
        print(f"\n== profile: {name} ({steps} steps) ==")
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=40))


def components(cfg: TrainConfig, data: _data.Cifar10, k: int, repeats: int) -> None:
    """Where the time goes, as the best (least disturbed) of `repeats` timings of 3 steps each: one training step
    in channels_last and in NCHW, the DataLoader's per-batch cost alone, and a K-member grouped step against K
    separate steps. Best-of-N resists load from other processes better than the whole-run medians above."""
    from torchvision import transforms

    dev = resolve_device(cfg.device)
    b, cl = cfg.batch_size, torch.channels_last
    x = torch.randn(b, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (b,), device=dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            for _ in range(3):
                fn()
            sync()
            times.append((time.perf_counter() - t0) / 3)
        return min(times)

    def stepper(net, opt, xb, loss_fn):
        def step():
            loss = loss_fn(net(xb))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return step

    nets = [models.build_model(cfg.arch, s, cfg.width).to(dev) for s in SIGMA_GRID[:k]]
    opt0 = optim.build_optimizer(cfg.optimizer, nets[0], lr=cfg.lr)
    ce = lambda out: F.cross_entropy(out, y)  # noqa: E731
    t_nchw = best(stepper(nets[0], opt0, x, ce))
    nets = [n.to(memory_format=cl) for n in nets]
    xc = x.contiguous(memory_format=cl)
    t_cl = best(stepper(nets[0], opt0, xc, ce))
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.25,) * 3)])
    ds = Cifar10Images(data.train_x[: 8 * b], data.train_y[: 8 * b], tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=b, shuffle=True)
    t_data = best(lambda: next(iter(loader)))
    opts = [optim.build_optimizer(cfg.optimizer, n, lr=cfg.lr) for n in nets]
    steps = [stepper(n, o, xc, ce) for n, o in zip(nets, opts, strict=True)]
    t_sep = best(lambda: [s() for s in steps])
    pop = _members.population(nets)
    grouped = pop.model.to(dev, memory_format=cl)
    gopt = optim.build_optimizer(cfg.optimizer, grouped, lr=cfg.lr, members=k)
    t_ens = best(stepper(grouped, gopt, xc, lambda out: pop.losses(out, y).sum()))
    print(f"best of {repeats} x 3 steps, b={b}: step NCHW {1e3 * t_nchw:.1f} ms, step channels_last "
          f"{1e3 * t_cl:.1f} ms, DataLoader batch (PIL -> ToTensor -> Normalize, nw=0) {1e3 * t_data:.1f} ms; "
          f"K={k}: {k} separate steps {1e3 * t_sep:.1f} ms, one ensemble step {1e3 * t_ens:.1f} ms")
    print(f"expected ratio_engine_vs_dataloader ~ {(t_nchw + t_data) / t_cl:.2f} (no overlap of data and compute), "
          f"ratio_ensemble_vs_separate ~ {t_sep / t_ens:.2f}")


def main(argv: list[str] | None = None) -> None:
    cuda = torch.cuda.is_available()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--arch", default="resnet9")
    ap.add_argument("--width", type=float, default=0.25)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--optimizer", default="sgd_momentum")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per contender and repeat")
    ap.add_argument("--k", type=int, default=7 if cuda else 3, help="ensemble members (7 on GPU, 3 on CPU)")
    ap.add_argument("--distinct-seeds", action="store_true", help="members get seeds 0..K-1 (default: all seed 0)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32",
                    help="precision of a, b0/b2 and c (a16 is always bf16); tf32 is CUDA only")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model, every contender")
    ap.add_argument("--data-root", default=os.environ.get("INITMEM_DATA", str(DATA)))
    ap.add_argument("--malloc", choices=("tuned", "default"), default="tuned",
                    help="glibc malloc for every contender: tuned (members.tune_malloc, what a population sets on "
                         "CPU) or default; process-wide, so the same for all")
    ap.add_argument("--skip", default="", help="comma-separated contenders to skip: a,a16,b0,b2,c")
    ap.add_argument("--profile", action="store_true", help="print torch.profiler top ops of a and b0, then exit")
    ap.add_argument("--components", action="store_true", help="best-of-N step, data and ensemble timings, then exit")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.malloc == "default":
        os.environ["INITMEM_MALLOC"] = "default"  # a population must not switch it on half-way through
    tuned = _members.tune_malloc()

    try:
        data, source = _data.load_cifar10(args.data_root), "auto"
    except Exception as exc:  # no real data here: the benchmark is about speed, synthetic images do as well
        print(f"real CIFAR-10 not found ({type(exc).__name__}); using synthetic images")
        data, source = _data.make_synthetic(args.steps * args.batch_size + 10, 10), "synthetic"
    base = TrainConfig(arch=args.arch, width=args.width, optimizer=args.optimizer, batch_size=args.batch_size,
                       data=source, data_root=args.data_root, n_train=args.steps * args.batch_size, n_val=10,
                       n_test=10, train_eval_size=10, epochs=2, device=args.device,
                       precision=args.precision, compile=args.compile)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device "
          f"{resolve_device(args.device)}, malloc {'tuned' if tuned else 'default'}, "
          f"data {portable_source(data.source)}")
    print(f"{args.arch} width {args.width:g}, b={args.batch_size}, {args.optimizer}, precision {args.precision}, "
          f"compile {args.compile}, {args.steps} timed steps, K={args.k}, {args.repeats} repeats")
    if args.profile:
        profile(base, data, args.steps)
        return
    if args.components:
        components(base, data, args.k, max(3, args.repeats))
        return
    sigmas = [SIGMA_GRID[round(i * (len(SIGMA_GRID) - 1) / max(1, args.k - 1))] if args.k <= len(SIGMA_GRID)
              else 0.1 + 2.4 * i / (args.k - 1) for i in range(args.k)]
    members = [base.replace(sigma_w=s, seed=i if args.distinct_seeds else 0) for i, s in enumerate(sigmas)]
    contenders = {
        "a engine": lambda: bench_engine(base),
        "a16 engine bf16": lambda: bench_engine(base.replace(precision="bf16")),
        "b0 dataloader nw=0": lambda: bench_dataloader(base, data, 0, args.steps),
        "b2 dataloader nw=2": lambda: bench_dataloader(base, data, 2, args.steps),
        "c separate xK": lambda: bench_separate(members),
        "c population K": lambda: bench_ensemble(members),
    }
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    contenders = {k: v for k, v in contenders.items() if k.split()[0] not in skip
                  and not (k.startswith("c ") and "c" in skip)}
    rates: dict[str, list[float]] = {k: [] for k in contenders}
    for r in range(args.repeats):
        for name, fn in contenders.items():
            rates[name].append(fn())
            print(f"repeat {r + 1}: {name:<20} {rates[name][-1]:8.0f} img/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print("\nmedian images/s (training):")
    for k, v in med.items():
        print(f"  {k:<20} {v:8.0f}   (all: {', '.join(f'{x:.0f}' for x in rates[k])})")
    loader = max((v for k, v in med.items() if k.startswith("b")), default=math.nan)
    r1 = med.get("a engine", math.nan) / loader
    r16 = med.get("a16 engine bf16", math.nan) / loader
    r2 = med.get("c population K", math.nan) / med.get("c separate xK", math.nan)
    print(f"engine bf16 / DataLoader loop ({args.precision}): {r16:.2f}x (target >= 3: "
          f"{'met' if r16 >= 3 else 'not met'}); engine {args.precision} / the same loop: {r1:.2f}x")
    print(f"ratio_engine_vs_dataloader={r1:.2f} ratio_engine_bf16_vs_dataloader={r16:.2f} "
          f"ratio_ensemble_vs_separate={r2:.2f}")


if __name__ == "__main__":
    main()
