"""Which throughput table `initmem plan` times a profile with (docs/planner.md), and measuring one (`calibrate`). The
reference CPU's and the reference GPU's (an H200's, measured by the device check) ship with the package, so a fresh
clone answers "how long"; a GPU without its own table (or `--device cuda` on a machine without one) gets the H200's,
labelled with the GPU it was measured on; the roofline estimate (`plan.roofline_entry`) only where that file is
missing."""

import datetime
import time
from pathlib import Path

from initmem.config import TrainConfig
from initmem.study import plan, throughput
from initmem.study.plan import KEY_FIELDS, SectionPlan, device_name
from initmem.study.throughput import Entry, Throughput, describe, optimizer_fields

# The committed CPU runs' own cost: `from_runs(COMMITTED_CPU, <an --calibrate table>)` (docs/planner.md). No GPU table.
_REFERENCE = "initmem/study/throughput/reference-cpu.json"  # in the repository: how the line names it, in every clone
REFERENCE_CPU = Path(__file__).resolve().parents[2] / _REFERENCE
COMMITTED_CPU = ("results/cpu", "results/cpu_steps", "results/cpu_w025_pilot")  # what the reference table reproduces
# The one GPU measured: the device check's table of docs/gpu/2026-12-04-h200-speeds/ (tests/test_gpu_record.py: equal)
_REFERENCE_GPU = "initmem/study/throughput/reference-h200.json"
REFERENCE_GPU = Path(__file__).resolve().parents[2] / _REFERENCE_GPU


def choose_table(device: str = "auto", path: str | Path | None = None) -> tuple[throughput.Throughput | None, str]:
    """The table for `device` (or the one at `path`) and the line saying which (`initmem plan`'s first)."""
    if path is not None:  # a table of another device kind than an explicit `device` is refused
        kind = None if device == "auto" else "cpu" if device == "cpu" else "cuda"
        table = throughput.load_throughput(path, kind=kind)
        return table, f"throughput: {table.device}, from {path}"
    name, kind = (plan.cuda_name(device), "cuda") if device.startswith("cuda") else plan.device_name(device)
    cached = plan.default_table_path(name) if name else None
    if cached is not None and cached.is_file():
        return throughput.load_throughput(cached), f"throughput: {name}, calibrated on this machine ({cached})"
    if kind == "cpu" and REFERENCE_CPU.is_file():
        table = throughput.load_throughput(REFERENCE_CPU)
        when = f", {table.created[:10]}" if table.created else ""
        return table, (f"throughput: the reference CPU table ({_REFERENCE}{when}): what the committed CPU runs took "
                       "on 2-core machines, one torch thread a run, two or three side by side; `initmem plan "
                       f"--calibrate --device cpu` measures this one ({name})")
    if kind == "cuda" and REFERENCE_GPU.is_file():
        table = throughput.load_throughput(REFERENCE_GPU, kind="cuda")
        other = ("" if name == table.device else f", not on this {name}" if name else ", no GPU here")
        return table, (f"throughput: the reference GPU table ({_REFERENCE_GPU}, {table.created[:10]}): measured on an "
                       f"{table.device} by the device check (torch {table.torch}){other}; configurations it lacks "
                       "are scaled from its nearest entry; `initmem plan --calibrate --device cuda` on the GPU "
                       "measures them")
    if kind == "cuda":
        here = f"no table for {name}: {cached}" if name else f"no GPU here: --device {device}"
        peaks = ", ".join(f"{p} {v / 1e12:g}" for p, v in plan.ROOFLINE_PEAK.items())
        return plan.roofline_table(), (
            f"throughput: ESTIMATE, not a measurement ({here}): the roofline of an {plan.ROOFLINE_GPU} from the FLOP "
            f"count (2 per MAC; a training image 3 forward passes, an evaluated image 1) against its dense peak at "
            f"each run's precision ({peaks} TFLOP/s) at an assumed {plan.ROOFLINE_EFFICIENCY:.0%} of it; a measured "
            "table replaces it (`python -m benchmarks.device_check`, or `initmem plan --calibrate --device cuda` on "
            "the GPU)")
    return None, (f"throughput: no table for {name} yet, so no time is given (none is guessed from another "
                  f"device): measure one with `initmem plan --calibrate --device {device}` (looked for {cached})")


# ---------------------------------------------------------------------------------------------- calibration
def calibration_keys(plans: list[SectionPlan]) -> list[tuple[str, float, int, str, str]]:
    """The distinct (arch, width, batch size, precision, optimiser) the plans need, in first-seen order."""
    return list(dict.fromkeys(tuple(p.key[k] for k in KEY_FIELDS) for s in plans for p in s.points))


def _time_eval(config: TrainConfig, images: int, reps: int = 3) -> float:
    """Seconds per image of an eval-mode forward pass (no gradients) of `config`'s network on its device."""
    import torch

    from initmem.engine import models
    dev = torch.device(config.device)
    net = models.build_model(config.arch, 1.0, config.width).to(dev).eval()
    x = torch.randn(images, 3, 32, 32, device=dev)
    if config.channels_last:
        net, x = net.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    bf16 = config.precision == "bf16" and dev.type == "cuda"
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=bf16):
        net(x)
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            net(x).float()
        sync()
    return (time.perf_counter() - t0) / (reps * images)


def calibrate(keys: list[tuple[str, float, int, str, str]], device: str = "auto", steps: int = 5,
              warmup: int = 2, members: tuple[int, ...] = (1,), say=print) -> Throughput:
    """The table of `steps` optimiser steps (after `warmup`) of each key on `device`, for one network and populations
    of `members` (`train.time_steps`), and of one network's eval forward pass (a population's: `members` times it)."""
    import torch

    from initmem.engine.trainer import time_steps
    name, kind = device_name(device)
    dev = "cuda" if device == "auto" and kind == "cuda" else "cpu" if device == "auto" else device
    entries = []
    for arch, width, batch, precision, opt in keys:
        if precision == "tf32" and kind != "cuda":
            say(f"  skip {arch} w{width:g} b{batch} tf32: CUDA only")
            continue
        config = TrainConfig(arch=arch, width=width, batch_size=batch, precision=precision, device=dev,
                             **optimizer_fields(opt))
        eval_s = _time_eval(config, config.eval_batch_size if kind == "cuda" else 256)
        for k in dict.fromkeys(members):
            step_s = time_steps(config, steps=steps, warmup=warmup, population=k)
            entries.append(Entry(arch, float(width), int(batch), precision, k, step_s, k * eval_s, opt))
            say(f"  {describe(entries[-1])}: {step_s * 1e3:.2f} ms/step, {k * eval_s * 1e6:.2f} us/eval image")
    return Throughput(name, torch.__version__, entries, kind, None,
                      datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))


def _committed(trees: list[str | Path]) -> list[tuple[TrainConfig, float]]:
    """(config, wall_time_s) of every finished run under `trees` (run.json records; relative to the repository)."""
    import json

    root, found = REFERENCE_CPU.parents[3], []
    for tree in trees:
        for rec in sorted((root / tree).glob("*/*/run.json")):
            doc = json.loads(rec.read_text())
            cfg = {k: tuple(v) if isinstance(v, list) else v for k, v in doc["config"].items()}
            found.append((TrainConfig(**cfg), float(doc["summary"]["wall_time_s"])))
    return found


def from_runs(trees: list[str | Path], base: Throughput, created: str | None = None) -> Throughput:
    """A table that times runs as the committed ones in `trees` took: per (arch, width, batch size, precision),
    `base`'s SGD entry for it (or its estimate, `plan.lookup`) scaled by one factor, so that the planned seconds of
    those runs add up to their recorded `wall_time_s` (training, evaluation and the machine's load as it was; base's
    step/eval split is kept). Every optimiser's runs are pooled into that SGD entry: the committed runs' machines
    disagree on what Muon's step costs (docs/planner.md), so the table does not time one optimiser apart."""
    by_key: dict[tuple, list[tuple[dict, float]]] = {}
    for config, wall in _committed(trees):
        by_key.setdefault(tuple(getattr(config, k) for k in KEY_FIELDS[:4]), []).append((plan.run_plan(config), wall))
    entries = []
    for key, runs in by_key.items():
        entry, _ = plan.lookup(base, TrainConfig(**dict(zip(KEY_FIELDS[:4], key, strict=True))))
        planned = sum(r["steps"] * entry.train_step_s + r["eval_images"] * entry.eval_image_s for r, _ in runs)
        f = sum(w for _, w in runs) / planned
        entries.append(Entry(*key, 1, entry.train_step_s * f, entry.eval_image_s * f))
    return Throughput("CPU, 2 cores (the committed runs)", base.torch, entries, "cpu", None,
                      created or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
