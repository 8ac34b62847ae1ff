"""The planner: what a params file's profile costs before anything trains (`initmem plan`, docs/planner.md). Steps
are counted as `train` counts them, clocks summed exactly per step (`math.fsum`). Torch-free but for naming a CUDA
device, and `device_name("auto")` where torch is installed."""

import dataclasses
import functools
import importlib.util
import math
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from initmem.config import TrainConfig, point_configs, prefix_id, run_id
from initmem.errors import ConfigError
from initmem.metrics import lr_scale
from initmem.store.provenance import cpu_model
from initmem.study import stepmodel
from initmem.study.stepmodel import ARCH_MACS, image_flops
from initmem.study.throughput import SGD_COST, Entry, Throughput, batch_exponent, describe, step_optimizer

CIFAR_TRAIN, CIFAR_TEST = 50_000, 10_000
SYNTHETIC_TRAIN, SYNTHETIC_TEST = 2000, 500  # train.py's synthetic_sizes when n_train / n_test are None
KEY_FIELDS = ("arch", "width", "batch_size", "precision", "optimizer")  # a point's key: `plan_key`
# The roofline estimate where no GPU table is found (docs/planner.md): FLOPs per image (2 per MAC; a training
# step's forward + backward ~3 forward passes, an evaluation 1) against an H200 SXM's dense peak at the run's
# precision (NVIDIA's datasheet: FP32 67 TFLOP/s; TF32 and BF16 tensor cores half the with-sparsity 989 and 1,979) at
# an assumed fraction of it. Not a measurement: the device check's table replaces it.
ROOFLINE_GPU = "NVIDIA H200"
ROOFLINE_PEAK = {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12}
ROOFLINE_EFFICIENCY = 0.4
ROOFLINE_SOURCE = "roofline estimate"
# what `plan --calibrate` times without params: the paper profiles' networks and batch sizes
# (and Muon's step once, the one optimiser whose update costs more than SGD's by more than the noise: its extra
# cost is added to SGD's at every other configuration, `lookup`)
DEFAULT_SET = tuple(("resnet9", 1.0, b, "fp32", "sgd") for b in (16, 32, 64, 128, 256)) + (
    ("resnet56", 1.0, 128, "fp32", "sgd"), ("resnet110", 1.0, 128, "fp32", "sgd"),
    ("resnet9", 1.0, 128, "fp32", "muon"))


# The evaluations made at some epochs only, estimated (docs/planner.md): full_test evaluates the whole test set at
# the epochs a selection rule can pick, on average 29 %, 35 % and 54 % of the measured epochs of the committed
# cpu_w025, cpu and cpu_steps runs; exact_tau the whole train split at the epochs around tau_interp, 5 of 26 in
# docs/experiments/train_eval_subset (exact.jsonl).
SELECTABLE_SHARE = 0.35
EXACT_TAU_EPOCHS = 5

# --------------------------------------------------------------------------------------------- sizes and clocks
def split_sizes(config: TrainConfig) -> dict[str, int]:
    """Images in the train split, validation, test and the train-eval subset, as `train` makes them."""
    synthetic = config.data == "synthetic"
    train = config.n_train or (SYNTHETIC_TRAIN if synthetic else CIFAR_TRAIN - config.n_val)
    test = config.n_test or (SYNTHETIC_TEST if synthetic else CIFAR_TEST)
    return {"train": train, "val": config.n_val, "test": test, "train_eval": config.train_eval_size or train}


def measured_epochs(config: TrainConfig) -> int:
    """Epochs at which train/val/test are measured: 0 (initialisation), every `eval_every`-th and the last."""
    return 1 + config.epochs // config.eval_every + (config.epochs % config.eval_every != 0)


@functools.lru_cache(maxsize=256)
def _lr_sums(schedule: str, lr: float, total: int, warmup: int, milestones: tuple[float, ...],
             gamma: float) -> tuple[float, float]:
    """(fsum eta_k, fsum eta_k^2) over the `total` steps, eta_k = lr * optim.lr_factor(...) step by step."""
    if schedule == "constant" and warmup == 0:  # fsum of n equal terms is the correctly rounded n * term
        return total * lr, total * (lr * lr)
    k, f = np.arange(total, dtype=np.int64), np.ones(total)
    if schedule == "cosine":
        f = 0.5 * (1.0 + np.cos(math.pi * np.minimum(1.0, (k - warmup) / max(1, total - warmup))))
    elif schedule == "step" and milestones:
        levels = np.array([gamma ** j for j in range(len(milestones) + 1)])
        f = levels[sum((k >= m * total).astype(np.int64) for m in milestones)]
    f[:warmup] = (k[:warmup] + 1) / warmup
    eta = lr * f
    return math.fsum(eta.tolist()), math.fsum((eta * eta).tolist())


def run_plan(config: TrainConfig) -> dict[str, Any]:
    """Steps, clocks and evaluation work of one run (every run of a point has the same)."""
    sizes = split_sizes(config)
    per_epoch = (sizes["train"] // config.batch_size if config.drop_last  # as data.steps_per_epoch
                 else math.ceil(sizes["train"] / config.batch_size))
    total = per_epoch * config.epochs
    warmup = min(total, round(config.warmup_epochs * per_epoch))
    s1, s2 = _lr_sums(config.schedule, config.lr, total, warmup, config.step_milestones, config.step_gamma)
    b, l2 = config.batch_size, config.weight_decay
    c = lr_scale(config.optimizer, config.momentum)  # eta_eff = c * eta: 1 / (1 - beta) for sgd_momentum, else 1
    clocks = {"T_SGD": s2 / b, "T_L2": l2 * s1, "T_adapt": s1,  # as metrics.ClockAccumulator.totals
              "T_SGD_eff": c * c * s2 / b, "T_L2_eff": c * l2 * s1, "T_adapt_eff": c * s1}
    per_eval = sizes["train_eval"] + sizes["val"] + sizes["test"]
    sparse = sparse_eval_images(config, sizes)
    return {"split": sizes, "epochs": config.epochs, "steps_per_epoch": per_epoch, "steps": total,
            "warmup_steps": warmup, "clocks": clocks, "eval_images_per_epoch": per_eval,
            "measured_epochs": measured_epochs(config), "sparse_eval_images": sparse,
            "eval_images": per_eval * measured_epochs(config) + sparse}


def sparse_eval_images(config: TrainConfig, sizes: dict[str, int]) -> int:
    """Images full_test and exact_tau evaluate in one run, estimated (`SELECTABLE_SHARE`, `EXACT_TAU_EPOCHS`)."""
    whole_test = SYNTHETIC_TEST if config.data == "synthetic" else CIFAR_TEST
    full = SELECTABLE_SHARE * measured_epochs(config) * whole_test if config.full_test else 0
    exact = EXACT_TAU_EPOCHS * sizes["train"] if config.exact_tau and config.train_eval_size is not None else 0
    return round(full + exact)


# ---------------------------------------------------------------------------------------------- throughput
def plan_key(config: TrainConfig) -> dict[str, Any]:
    """What times `config`'s runs: arch, width, batch size, precision and the optimiser its step was timed with."""
    return {"arch": config.arch, "width": config.width, "batch_size": config.batch_size,
            "precision": config.precision, "optimizer": step_optimizer(config)}


def lookup(table: Throughput | None, config: TrainConfig, members: int = 1,
           capture: bool = False) -> tuple[Entry | None, str]:
    """`config`'s entry and its source: "measured"; else SGD's (`_nearest_sgd`: "measured" or "estimated from ..."),
    for Muon plus its own extra cost where the table timed Muon (`_optimizer_extra`), the source then saying so after
    SGD's; "roofline estimate"; or "no throughput" (None). An elementwise optimiser (`SGD_COST`) costs SGD's step.
    `capture`: the captured step's model before any of these (the table's steps are eager), where it prices one."""
    if table is None:
        return None, "no throughput"
    if table.roofline:
        return roofline_entry(config, members), ROOFLINE_SOURCE
    if capture and members == 1 and (captured := _modelled(table, config, capture)) is not None:
        return captured
    opt = step_optimizer(config)
    want = (config.arch, config.width, config.batch_size, config.precision, members, opt)
    if found := [e for e in table.entries if e.key == want]:
        return found[0], "measured"
    if members == 1 and (modelled := _modelled(table, config)) is not None:
        return modelled
    base, source = _nearest_sgd(table, config, members)
    if base is None or opt in SGD_COST:
        return base and dataclasses.replace(base, optimizer=opt), source
    extra = _optimizer_extra(table, config, opt)  # the source's first word stays SGD's: measured or estimated
    if extra is None:
        return dataclasses.replace(base, optimizer=opt), f"{source}; {opt}'s own cost not timed here: sgd's step"
    seconds, at = extra
    return (dataclasses.replace(base, train_step_s=base.train_step_s + seconds, optimizer=opt),
            f"{source}, + {opt}'s extra {seconds * 1e3:.3g} ms a step as timed at {describe(at)}")


def _modelled(table: Throughput, config: TrainConfig, capture: bool = False) -> tuple[Entry, str] | None:
    """`config`'s step by the host-floor model fitted to `table` (`stepmodel`, central per-op cost; `capture`: the
    captured step's) and its evaluated image scaled from the nearest entry (`_nearest_sgd`); None where the model
    cannot price it."""
    hf = stepmodel.fit(table) if table.kind == "cuda" else None
    steps = None if hf is None else stepmodel.step_range(hf, config, capture)
    base, _ = _nearest_sgd(table, config)
    if steps is None or base is None:
        return None
    return (dataclasses.replace(base, train_step_s=steps[1], optimizer=step_optimizer(config)),
            stepmodel.step_source(hf, config, capture))


def _nearest_sgd(table: Throughput, config: TrainConfig, members: int = 1) -> tuple[Entry | None, str]:
    """SGD's entry for `config` ("measured"), else "estimated from <entry>": the nearest members=1 SGD entry scaled
    by images per step, width^2 and the arch's MACs (on a GPU, images per step as `batch_exponent`)."""
    want = (config.arch, config.width, config.batch_size, config.precision, members, "sgd")
    if found := [e for e in table.entries if e.key == want]:
        return found[0], "measured"
    if not (singles := [e for e in table.entries if e.members == 1 and e.optimizer == "sgd"]):
        return None, "no throughput"
    near = _nearest(singles, config)
    flops = (config.width / near.width) ** 2 * ARCH_MACS[config.arch] / ARCH_MACS[near.arch]
    alpha, how = batch_exponent(singles, near, config.batch_size) if table.kind == "cuda" else (1.0, "")
    step = near.train_step_s * flops * (config.batch_size / near.batch_size) ** alpha
    return Entry(*want[:5], step, near.eval_image_s * flops), f"estimated from {describe(near)}{how}"


def _nearest(entries: list[Entry], config: TrainConfig) -> Entry:
    """The entry nearest `config`: the same arch, then the same precision, then the closest width and batch size."""
    return min(entries, key=lambda e: (e.arch != config.arch, e.precision != config.precision, abs(math.log(
        config.width / e.width)) + abs(math.log(config.batch_size / e.batch_size))))


def _optimizer_extra(table: Throughput, config: TrainConfig, opt: str) -> tuple[float, Entry] | None:
    """Seconds optimiser `opt`'s step adds to SGD's at `config`: at the nearest members=1 entry of `opt`, its step
    minus SGD's there (`_nearest_sgd`), scaled by width^2 and the arch's MACs but not by the batch size (an update
    costs the same at any batch size); at least 0 (an optimiser timed faster than SGD is planned as SGD's). None
    where `opt` has no entry or SGD none to compare with."""
    if not (mine := [e for e in table.entries if e.members == 1 and e.optimizer == opt]):
        return None
    at = _nearest(mine, config)
    sgd, _ = _nearest_sgd(table, TrainConfig(arch=at.arch, width=at.width, batch_size=at.batch_size,
                                             precision=at.precision))
    if sgd is None:
        return None
    scale = (config.width / at.width) ** 2 * ARCH_MACS[config.arch] / ARCH_MACS[at.arch]
    return max(0.0, at.train_step_s - sgd.train_step_s) * scale, at


def roofline_entry(config: TrainConfig, members: int = 1) -> Entry:
    """The `ROOFLINE_GPU` estimate of `config`'s step and evaluated image (`members` networks: that many times the
    work), at `ROOFLINE_EFFICIENCY` of the peak at its precision."""
    train, evaluate = image_flops(config.arch, config.width)
    rate = ROOFLINE_PEAK[config.precision] * ROOFLINE_EFFICIENCY
    return Entry(config.arch, config.width, config.batch_size, config.precision, members,
                 members * config.batch_size * train / rate, members * evaluate / rate, step_optimizer(config))


def roofline_table() -> Throughput:
    """The table of estimates `initmem plan` uses for a GPU when no measured table is found (docs/planner.md)."""
    return Throughput(f"{ROOFLINE_GPU} ({ROOFLINE_SOURCE})", "", [], "cuda", None, None, roofline=True)


def cuda_name(device: str = "cuda") -> str | None:
    """The name of CUDA device `device`, or None where torch is not installed or sees no GPU (never refuses)."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch
    return torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else None


def device_name(device: str = "auto") -> tuple[str, str]:
    """(name, kind) of a device ("auto" | "cpu" | "cuda" | "cuda:N"): the CUDA device's name, or "CPU <model>".
    Only "auto" and CUDA import torch ("auto" says so on stderr); where torch is not installed, "auto" is this CPU."""
    if device == "auto" and importlib.util.find_spec("torch") is None:
        print("initmem plan: torch is not installed here: --device auto is this CPU", file=sys.stderr)
        device = "cpu"
    if device != "cpu":
        import torch
        if device == "auto":
            print("initmem plan: --device auto imported torch to look for a GPU (--device cpu or --throughput FILE "
                  "need no torch)", file=sys.stderr)
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(device if device != "auto" else "cuda")), "cuda"
        if device != "auto":
            raise ConfigError(f"device={device!r} is invalid here: CUDA is not available; 'cpu' or 'auto' is accepted")
    return f"CPU {cpu_model() or platform.machine()}".strip(), "cpu"


def default_table_path(name: str) -> Path:
    """`<cache>/throughput-<device-name-slug>.json`, the cache as the data's (`imagefolder.default_cache_dir`)."""
    cache = Path(os.environ.get("INITMEM_CACHE") or Path.home() / ".cache" / "initmem").expanduser()
    return cache / f"throughput-{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}.json"


# ---------------------------------------------------------------------------------------------- planning
@dataclass
class PointPlan:
    point_id: str
    grid: dict[str, Any]
    runs: int
    run: dict[str, Any]  # run_plan of one of its runs
    key: dict[str, Any]  # arch, width, batch_size, precision
    members: int  # 1, or the runs of a population timed as one
    seconds: float | None = None
    time_source: str = "no throughput"
    done: int | None = None  # its runs complete in the results tree asked of (`plan_section(results=...)`)
    seconds_range: tuple[float, float] | None = None  # a modelled time at the fit's low and high per-op cost
    run_ids: tuple[str, ...] = ()  # its runs' ids, in (sigma_w, seed) order
    prefixes: tuple[str | None, ...] = ()  # each run's `prefix_id`
    served_by: dict[str, int] = field(default_factory=dict)  # "section/point" of an earlier section -> runs shared
    states: tuple[str, ...] = ()  # asked of a results tree: each run's `preflight.run_states` (complete, served, train)
    shared: tuple[bool, ...] = ()  # each run another point of the plan trains (`share_runs`)

    @property
    def source_kind(self) -> str:
        """"measured" (an entry of the table: SGD's step for another optimiser says so after), "modelled"
        (`stepmodel`) or "estimated" (scaled from an entry, or the roofline)."""
        first = self.time_source.split(" ")[0].rstrip(";,:")
        return first if first in ("measured", stepmodel.MODELLED) else "estimated"

    @property
    def served(self) -> int:
        """Its runs an earlier section of the plan trains (the same run id): counted once, there."""
        return sum(self.served_by.values())

    @property
    def steps(self) -> int:
        return self.runs * self.run["steps"]

    @property
    def to_serve(self) -> int:
        """Its runs the results tree holds elsewhere now: copied when the point runs, not trained (`store.serve`)."""
        return self.states.count("served")

    @property
    def left(self) -> int:
        """Its runs left to train: not complete, not served by the tree, not trained by another point of the plan."""
        if not self.states:
            return self.runs - (self.done or 0)
        return sum(s == "train" and not shared for s, shared in zip(self.states, self.shared or (False,) * self.runs,
                                                                    strict=True))

    @property
    def left_seconds(self) -> float | None:
        """The time of the runs left: the point's time in proportion (a population's runs left train as a smaller
        population, whose step is not proportionally cheaper: an upper bound there)."""
        return None if self.seconds is None else self.seconds * self.left / self.runs


@dataclass
class SectionPlan:
    section: str
    path: str
    profile: str
    points: list[PointPlan] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        """Its points' sums, each run id counted once: runs an earlier section trains (`served`) are left out."""
        pts, times = self.points, [p.seconds for p in self.points]
        own = {id(p): (p.runs - p.served) / p.runs for p in pts}  # the share of a point's runs trained here

        def fsum(f: Any, keep: Any = lambda p: True) -> float:
            return math.fsum(f(p) * own[id(p)] for p in pts if p.seconds is not None and keep(p))
        out = {"points": len(pts), "runs": sum(p.runs - p.served for p in pts),
               "steps": sum(p.run["steps"] * (p.runs - p.served) for p in pts),
               "eval_images": sum(p.run["eval_images"] * (p.runs - p.served) for p in pts),
               "served_runs": sum(p.served for p in pts),
               "seconds": fsum(lambda p: p.seconds) if times and None not in times else None,
               "seconds_known": fsum(lambda p: p.seconds), "points_without_time": sum(t is None for t in times),
               **{f"seconds_{k}": fsum(lambda p: p.seconds, lambda p, k=k: p.source_kind == k)
                  for k in ("measured", "modelled", "estimated")},
               "seconds_modelled_low": fsum(lambda p: p.seconds_range[0], lambda p: p.seconds_range is not None),
               "seconds_modelled_high": fsum(lambda p: p.seconds_range[1], lambda p: p.seconds_range is not None)}
        if any(p.done is not None for p in pts):  # asked of a results tree: what is left there
            left = [p.left_seconds for p in pts if p.left]
            out.update(done_runs=sum(p.done or 0 for p in pts), to_serve_runs=sum(p.to_serve for p in pts),
                       left_runs=sum(p.left for p in pts),
                       left_seconds=math.fsum(left) if None not in left else None)
        return out


def plan_point(point_id: str, grid: dict[str, Any], params: dict[str, Any], table: Throughput | None = None,
               states: list[str] | None = None, capture: bool = False) -> PointPlan:
    """The plan of one point from its effective parameters (`Section.effective(point)`); `states`: its runs' in a
    results tree (`preflight.run_states`); `capture`: each step priced as one captured graph
    (`stepmodel.captured_steps`), a population as its runs."""
    configs = point_configs(params)
    c, runs, members = configs[0], len(configs), len(configs)
    pop = params.get("population") and runs > 1 and not capture
    entry, source = lookup(table, c, runs) if pop else (None, "")
    if source != "measured":  # else a population of exactly this point's runs was timed: one step trains them all
        (entry, source), members = lookup(table, c, capture=capture), 1
    r = run_plan(c)

    def seconds(step_s: float) -> float:
        return (runs // members) * (r["steps"] * step_s + r["eval_images"] * entry.eval_image_s)
    span = None
    if source.startswith(stepmodel.MODELLED):
        low, _, high = stepmodel.step_range(stepmodel.fit(table), c, capture)
        span = seconds(low), seconds(high)
    return PointPlan(point_id, dict(grid), runs, r, plan_key(c), members,
                     None if entry is None else seconds(entry.train_step_s), source,
                     None if states is None else states.count("complete"), span, tuple(run_id(x) for x in configs),
                     tuple(prefix_id(x) for x in configs), states=tuple(states or ()))


def share_runs(plans: list[SectionPlan]) -> list[SectionPlan]:
    """`plans` with each point's `served_by` set, so that the totals count each run once: its runs whose id an earlier
    point holds ("section/point"), and the others that are the first epochs of a longer run of an earlier point (same
    `prefix_id`: "section/point, its first N epochs"); a sweep runs points in this order and serves a prefix only
    from a complete run (`store.serve`), so a longer run planned later does not serve it."""
    first: dict[str, str] = {}
    longest: dict[str, tuple[int, str]] = {}  # prefix_id -> (epochs, section/point) of its longest run so far
    for s in plans:
        for p in s.points:
            here, p.served_by, shared = f"{s.section}/{p.point_id}", {}, []
            for rid, pre in zip(p.run_ids, p.prefixes, strict=True):
                at = first.setdefault(rid, here)
                if at == here and pre is not None and longest.get(pre, (0, ""))[0] > p.run["epochs"]:
                    at = f"{longest[pre][1]}, its first {p.run['epochs']:,} epochs"
                if at != here:
                    p.served_by[at] = p.served_by.get(at, 0) + 1
                shared.append(at != here)
            for pre in p.prefixes:
                if pre is not None and p.run["epochs"] > longest.get(pre, (0, ""))[0]:
                    longest[pre] = p.run["epochs"], here
            p.shared = tuple(shared)
    return plans


def plan_section(path: str | Path, profile: str, table: Throughput | None = None,
                 results: str | Path | None = None, capture: bool = False) -> SectionPlan:
    """Every point of a params file's profile; SweepError/ConfigError (one line) for a bad file. `results`: a results
    tree (as `initmem sweep --results`) whose complete runs each point counts (`done`), and those it serves from
    elsewhere in the tree (`to_serve`), for the time left; `capture`: as `plan_point`."""
    from initmem.study.params import load_section
    from initmem.study.preflight import run_states
    section = load_section(path)
    return SectionPlan(section.name, str(path), profile, [
        plan_point(p.point_id, p.grid, section.effective(p), table, None if results is None else
                   run_states(section, p), capture) for p in section.points(profile, results)])


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 step', '2 steps', '1,200 steps' (`many`: the plural when it is not word + 's')."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"
