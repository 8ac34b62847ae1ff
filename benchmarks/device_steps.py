"""The steps of `benchmarks.device_check`, each run in its own process by `python -m benchmarks.device_check --worker
NAME` (`worker_command`).

A step function takes a `Ctx` (the settings, its deadline, `put`/`add` to record results as it goes: a step killed
at its limit keeps what it had recorded) and returns a verdict: True / False (a check passed or not) or None (a
pure measurement). It raises `Skip` when it does not apply here (tf32 on a CPU) and anything else when it fails.
Imports only the training stack (`initmem.engine.trainer`, `.config`, `.plan`, `.checkpoint`, `.metrics`): no papermill,
jupytext or submitit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks import parity
from initmem.store.files import atomic_write

ROOT = Path(__file__).resolve().parents[1]  # the repository: its root on a worker's PYTHONPATH
# the population check's max relative loss difference after 2 epochs: a member and its separate run sum in other
# orders, and at sigma_w 2 two epochs amplify that to ~4e-3 (measured on the CPU stand-in); a member fed another's data
# or state differs by order 1. The device-vs-CPU checks: benchmarks.parity (epoch 0 tight, trained from the spread)
POPULATION_TOL = 5e-2
LOSSES = ("train_loss", "val_loss", "test_loss")
ABSOLUTE = ("train_acc", "val_acc", "test_acc", "angle")  # compared as absolute differences (fractions, degrees)
SIZES = {  # per mode: the parity runs, the speed runs' split, batch sizes, population size, timed steps
    "full": {"parity": parity.RUN,
             "split": dict(width=1.0, n_train=None, n_val=5000, n_test=None, train_eval_size=None, epochs=2),
             "batches": (128, 512), "deep": "resnet56", "pop_batches": (32, 128, 512), "members": 7,
             "steps": 20, "warmup": 5, "paper_cap_s": None},
    "tiny": {"parity": dict(arch="resnet9", width=0.0625, n_train=256, n_val=100, n_test=100, train_eval_size=100,
                            batch_size=64, epochs=2),
             "split": dict(width=0.0625, n_train=512, n_val=100, n_test=100, train_eval_size=200, epochs=2),
             "batches": (64, 256), "deep": "resnet20", "pop_batches": (16, 64), "members": 3,
             "steps": 3, "warmup": 1, "paper_cap_s": 10.0},
}


class Skip(Exception):
    """The step does not apply on this device (recorded as skipped, with the reason)."""


class Ctx:
    """A worker's view: settings `s`, its wall-clock deadline, and the results file it keeps up to date."""

    def __init__(self, path: str | Path):
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        self.s: dict[str, Any] = doc["settings"]
        self.args: dict[str, Any] = doc.get("args", {})
        self.deadline: float = doc["deadline"]
        self.path = Path(doc["result"])
        self.res: dict[str, Any] = {}

    @property
    def cuda(self) -> bool:
        return self.s["device"] == "cuda"

    @property
    def work(self) -> Path:
        """The check's work folder (contexts, results, logs, cached references)."""
        return self.path.parent

    def left(self) -> float:
        return self.deadline - time.time()

    def put(self, key: str, value: Any) -> None:
        self.res[key] = value
        self.write()

    def add(self, key: str, item: Any) -> None:
        self.res.setdefault(key, []).append(item)
        self.write()

    def write(self, **extra: Any) -> None:
        atomic_write(self.path, json.dumps({"results": self.res, **extra}, default=_plain))


def _plain(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else str(x)


def _num(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


# ------------------------------------------------------------------------------------------------ configs
def config(ctx: Ctx, kind: str, **changes: Any):
    """The TrainConfig of a step: `kind` "parity" (short deterministic run) or "split" (the full split)."""
    from initmem.config import TrainConfig

    s, size = ctx.s, dict(SIZES[ctx.s["mode"]][kind])
    data = dict(data=s["data"], data_root=s["data_root"])
    if kind == "split" and s["data"] == "synthetic" and s["mode"] == "full":  # no archive: synthetic of full size
        size.update(n_train=45000, n_test=10000)
    return TrainConfig(**{"arch": "resnet9", "device": s["device"], **data, **size, **changes})


def worker_command(name: str, ctxfile: Path,
                   module: str = "benchmarks.device_check") -> tuple[list[str], dict[str, str]]:
    """The command and environment of a worker process running the step or helper `name` of `module` (`ROOT` first
    on its PYTHONPATH: `benchmarks` and `initmem` import from the checkout, installed or not)."""
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    return ([sys.executable, "-m", module, "--worker", name, "--ctx", str(ctxfile)],
            {**os.environ, "PYTHONPATH": path})


def spawn(ctx: Ctx, worker: str, args: dict, log: Path, env: dict | None = None) -> subprocess.Popen:
    """Start the helper `worker` (a process of this step) with `args`."""
    ctxfile = log.with_suffix(".ctx.json")
    ctxfile.write_text(json.dumps({"settings": ctx.s, "args": args, "deadline": ctx.deadline,
                                   "result": str(log.with_suffix(".result.json"))}), encoding="utf-8")
    cmd, base = worker_command(worker, ctxfile)
    with open(log, "w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**base, **(env or {})})


# ------------------------------------------------------------------------------------------------ comparisons
def compare(ref: pd.DataFrame, got: pd.DataFrame) -> dict[str, Any]:
    """Max difference per column over the measured epochs: relative for losses and the weight norm, absolute for
    accuracies and the angle; `loss_rel_max` over the three losses."""
    out: dict[str, Any] = {"nonfinite_mismatch": []}  # columns finite in one history and not in the other
    for col in (*LOSSES, "weight_norm", *ABSOLUTE):
        a, b = ref[col].to_numpy(float), got[col].to_numpy(float)
        both = np.isfinite(a) & np.isfinite(b)
        if (np.isfinite(a) != np.isfinite(b)).any():
            out[col] = None
            out["nonfinite_mismatch"].append(col)
            continue
        d = np.abs(a - b)[both] if col in ABSOLUTE else (np.abs(a - b) / np.maximum(np.abs(a), 1e-12))[both]
        out[col] = float(d.max()) if len(d) else 0.0
    losses = [out[c] for c in LOSSES]
    out["loss_rel_max"] = None if None in losses else max(losses)
    return out


def identical(a: pd.DataFrame, b: pd.DataFrame) -> dict[str, Any]:
    """Whether two histories are bitwise equal in every column but wall_time, and which columns differ."""
    cols = [c for c in a.columns if c != "wall_time"]
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return {"identical": False, "differing": ["<shape>"], "max_abs_diff": None}
    diff = [c for c in cols if not np.array_equal(a[c].to_numpy(float), b[c].to_numpy(float), equal_nan=True)]
    gap = max((float(np.nanmax(np.abs(a[c].to_numpy(float) - b[c].to_numpy(float)))) for c in diff), default=0.0)
    return {"identical": not diff, "differing": diff, "max_abs_diff": gap, "columns": len(cols), "rows": len(a)}


# ------------------------------------------------------------------------------------------------ steps
def step_env(ctx: Ctx) -> bool:
    """Versions, the device, the modules present, and the data loaded once (warming the decoded cache)."""
    import importlib.util
    import platform

    import torch

    from initmem.study.plan import device_name

    info = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda_build": torch.version.cuda,
            "cuda_available": torch.cuda.is_available(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "modules": {m: importlib.util.find_spec(m) is not None for m in
                        ("numpy", "pandas", "yaml", "tqdm", "PIL", "papermill", "jupytext", "submitit")}}
    ctx.put("env", info)
    ctx.put("device_ok", not ctx.cuda or torch.cuda.is_available())
    if ctx.cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch.cuda.is_available() is False")
    if ctx.cuda:
        p = torch.cuda.get_device_properties(0)
        ctx.put("gpu", {"name": p.name, "capability": f"{p.major}.{p.minor}", "memory_gib": p.total_memory / 2**30,
                        "multiprocessors": p.multi_processor_count, "cudnn": torch.backends.cudnn.version(),
                        "bf16_supported": torch.cuda.is_bf16_supported()})
    name, kind = device_name(ctx.s["device"])
    ctx.put("device_name", name)
    ctx.put("kind", kind)
    from initmem.data.splits import load_cifar10

    t0 = time.perf_counter()
    try:
        data = load_cifar10(ctx.s["data_root"], "synthetic" if ctx.s["data"] == "synthetic" else "auto")
        ctx.put("data", {"source": data.source, "hash": data.content_hash, "train": len(data.train_y),
                         "test": len(data.test_y), "load_s": time.perf_counter() - t0})
    except Exception as exc:  # noqa: BLE001 - the later steps fall back to synthetic data, and say so
        ctx.put("data_error", f"{type(exc).__name__}: {exc}")
        return False
    return True


def step_parity(ctx: Ctx, precision: str, optimizer: str = "sgd") -> bool:
    """The same short deterministic run on the CPU in fp32 (the reference) and on the device at `precision`; the
    verdict of `parity.verdict`: epoch 0 (forward only) tight, the trained epochs within the measured spread's
    tolerance (Muon: bf16's, its Newton-Schulz iterations run in bfloat16 on both devices)."""
    from initmem.config import run_id
    from initmem.engine.trainer import train

    if precision == "tf32" and not ctx.cuda:
        raise Skip("tf32 is CUDA only: a CPU has no TF32 to compare")
    cfg = config(ctx, "parity", optimizer=optimizer, deterministic=True)
    trained_as = "bf16" if optimizer == "muon" else precision
    ref_cfg = cfg.replace(device="cpu", precision="fp32")
    cached = ctx.work / f"reference-{run_id(ref_cfg)}.pkl"  # the parity steps of one optimiser share it
    ctx.put("setup", {"reference": "cpu fp32", "target": f"{ctx.s['device']} {precision}", "optimizer": optimizer,
                      "tolerance_epoch0": parity.EPOCH0[precision],
                      "tolerance_loss_rel": parity.TRAINED[trained_as], "config": cfg.to_dict(),
                      "reference_cached": cached.is_file(), "planted": ctx.s.get("plant"),
                      "stand_in": None if ctx.cuda else "CPU stands in for CUDA: CPU against CPU"})
    if cached.is_file():
        ref, ref_states = pd.read_pickle(cached)
    else:
        with parity.record() as rec:
            ref = train(ref_cfg, progress=False).history
        ref_states = rec.members()
        pd.to_pickle((ref, ref_states), cached)
    with parity.plant(ctx.s.get("plant"), cfg.replace(precision=precision)) as target, parity.record() as rec:
        got = train(target, progress=False).history
    ctx.put("differences", compare(ref, got))
    v = parity.verdict(ref, got, precision, trained_as, parity.state_differences(ref_states[0], rec.members()[0]))
    ctx.put("verdict", v)
    ctx.put("final", {"reference_train_loss": _num(ref["train_loss"].iloc[-1]),
                      "target_train_loss": _num(got["train_loss"].iloc[-1])})
    return v["pass"]


def step_population_vs_separate(ctx: Ctx) -> bool:
    """A 2-member population (sigma_w 0.5 and 2.0, seeds 0 and 1: each member its own minibatches and augmentation,
    the grouped stem) against the same two runs trained separately, both on the device: every member within
    POPULATION_TOL, with the same status. The path every GPU sweep point takes (population=True)."""
    from initmem.engine.trainer import train

    cfg = config(ctx, "parity", deterministic=True, augment=True)
    configs = [cfg.replace(sigma_w=0.5, seed=0), cfg.replace(sigma_w=2.0, seed=1)]
    tol = POPULATION_TOL
    ctx.put("setup", {"members": [{"sigma_w": c.sigma_w, "seed": c.seed} for c in configs], "tolerance_loss_rel": tol,
                      "config": cfg.to_dict(), "planted": ctx.s.get("plant")})
    with parity.plant(ctx.s.get("plant"), cfg) as target, parity.record() as rec:  # a planted bug: the population's
        pop = train([target.replace(sigma_w=c.sigma_w, seed=c.seed) for c in configs], progress=False)
    ctx.put("population_provenance", pop[0].provenance.get("population"))
    pop_states = rec.members()
    with parity.record() as rec:
        seps = [train(c, progress=False) for c in configs]
    rows = [{"sigma_w": c.sigma_w, "status": [p.status, s.status], **compare(s.history, p.history),
             **parity.state_differences(ss, ps)}
            for c, p, s, ps, ss in zip(configs, pop, seps, pop_states, rec.members(), strict=True)]
    ctx.put("members", rows)
    return all(r["loss_rel_max"] is not None and r["loss_rel_max"] <= tol and r["status"][0] == r["status"][1]
               and r["weights_init_rel"] <= parity.INIT_TOL and r["buffers_rel"] <= parity.BUFFERS_TOL["population"]
               for r in rows)


def step_rerun(ctx: Ctx) -> bool:
    """Two identical device runs under deterministic=True: bitwise equal histories; the same for a 2-member
    population (grouped convolutions); and, for the record, two runs with deterministic=False."""
    from initmem.engine.trainer import train

    cfg = config(ctx, "parity", deterministic=True)
    ctx.put("deterministic", identical(train(cfg, progress=False).history, train(cfg, progress=False).history))
    pop = [cfg.replace(sigma_w=s) for s in (0.5, 2.0)]
    try:
        a, b = train(pop, progress=False), train(pop, progress=False)
        ctx.put("population_deterministic", {"members": [identical(x.history, y.history) for x, y in zip(a, b,
                                                                                                       strict=True)]})
        ctx.res["population_deterministic"]["identical"] = all(m["identical"] for m in ctx.res[
            "population_deterministic"]["members"])
    except Exception as exc:  # noqa: BLE001 - recorded: a population under deterministic=True that cannot run
        ctx.put("population_deterministic", {"identical": False, "error": f"{type(exc).__name__}: {exc}"})
    loose = cfg.replace(deterministic=False)
    ctx.put("nondeterministic", identical(train(loose, progress=False).history, train(loose, progress=False).history))
    return ctx.res["deterministic"]["identical"] and ctx.res["population_deterministic"]["identical"]


def step_resume(ctx: Ctx) -> bool:
    """A run killed (SIGKILL, in a helper process) while writing epoch 2's checkpoint, then resumed in the same
    out_dir, against the uninterrupted run: bitwise equal histories (deterministic=True, checkpoint_every=1)."""
    from initmem.engine import checkpoint
    from initmem.engine.trainer import train
    from initmem.store.folders import RunFolders

    cfg = config(ctx, "parity", deterministic=True, epochs=3, checkpoint_every=1)
    tmp = Path(tempfile.mkdtemp(prefix="device-check-resume-"))
    straight = train(cfg, out_dir=tmp / "straight", progress=False)
    child = spawn(ctx, "_train_child", {"configs": [cfg.to_dict()], "out_dir": str(tmp / "killed")},
                  ctx.work / "resume.killed.log", env={checkpoint.FAULT_ENV: "kill_during_checkpoint_write@2"})
    try:
        rc = child.wait(timeout=max(1.0, ctx.left() - 10))
    except subprocess.TimeoutExpired:
        child.kill()
        raise TimeoutError("the run meant to be killed at epoch 2's checkpoint was still running") from None
    folder = RunFolders(tmp / "killed", "adhoc").checkpoint_folder([cfg])
    left = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    ctx.put("killed", {"returncode": rc, "sigkill": rc == -signal.SIGKILL, "left_behind": left})
    resumed = train(cfg, out_dir=tmp / "killed", progress=False)
    ctx.put("resumed_vs_straight", identical(straight.history, resumed.history))
    return rc == -signal.SIGKILL and "epoch-000001.ckpt" in left and ctx.res["resumed_vs_straight"]["identical"]


GRAPH_MARKS = {0: "before step 0: data, build, the eval graph's compile and the first evaluation",
               1: "step 0: the train graph's compile (forward and backward) and its run",
               2: "step 1 (CUDA graphs: warm-up)", 3: "step 2 (CUDA graphs: recorded)"}


def _timed_epochs(cfg, ctx: Ctx | None = None, members: int = 1, histories: list | None = None) -> dict[str, Any]:
    """Two epochs of `cfg` through the engine's loop, with a synchronised mark at steps 0-3, P and 2P-1 (P steps an
    epoch; the steps between run unsynchronised, as in a real run): step time from epoch 2's steps, eval time from the
    end of epoch 2's measurement, epoch time from the history's wall_time (train + eval). With `ctx` (compiled runs),
    each of steps 0-3 is recorded as `graphs` the moment it ends, so a step killed mid-compile keeps every graph
    compiled so far. `members` > 1: a population at sigma_w 0.1, 1.1, ... (seeds 0, 1, ...); `histories` gets each
    member's history."""
    import resource

    import torch

    from initmem.engine.runtime import run_device
    from initmem.engine.trainer import train
    from initmem.study.plan import split_sizes

    dev, sizes = run_device(cfg), split_sizes(cfg)
    p = math.ceil(sizes["train"] / cfg.batch_size)
    if p < 2:
        raise ValueError(f"{p} step per epoch: at least 2 are needed to time a step")
    marks: dict[int, float] = {}
    t_call = time.perf_counter()

    def mark(step: int) -> None:
        if step in (0, p, 2 * p - 1) or (ctx is not None and step in GRAPH_MARKS):
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            marks[step] = time.perf_counter()
            if ctx is not None and step in GRAPH_MARKS:
                ctx.add("graphs", {"arch": cfg.arch, "batch_size": cfg.batch_size, "precision": cfg.precision,
                                   "what": GRAPH_MARKS[step], "seconds": marks[step] - marks.get(step - 1, t_call)})

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    pop = [cfg] if members == 1 else [cfg.replace(sigma_w=0.1 + i, seed=i) for i in range(members)]
    runs = train(pop, progress=False, on_step=mark)
    hist = runs[0].history.set_index("epoch")["wall_time"]
    if histories is not None:
        histories.extend(r.history for r in runs)
    step_s = (marks[2 * p - 1] - marks[p]) / (p - 1)
    t0 = marks[0] - hist[0]  # the loop's clock starts just before the epoch-0 measurement that precedes step 0
    eval_s = t0 + hist[2] - marks[2 * p - 1] - step_s  # epoch 2's measurement, by subtraction
    if eval_s <= 0:  # a tiny, fast run: the subtraction is within the clocks' noise; epoch 0 measures evals only
        eval_s = float(hist[0])
    evals = sizes["train_eval"] + sizes["val"] + sizes["test"]
    peak = (torch.cuda.max_memory_allocated(dev) if dev.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"arch": cfg.arch, "width": cfg.width, "batch_size": cfg.batch_size, "precision": cfg.precision,
            "compile": cfg.compile, "members": members, "optimizer": cfg.optimizer, "steps_per_epoch": p,
            "step_s": step_s, "train_epoch_s": p * step_s,
            "train_images_per_s": sizes["train"] / (p * step_s), "eval_s": eval_s, "eval_images": evals,
            "eval_image_s": eval_s / evals, "epoch_s": float(hist[2] - hist[1]),
            "first_epoch_s": float(hist[1] - hist[0]), "init_eval_s": float(hist[0]),
            "peak_memory_bytes": peak, "peak_memory_kind": "cuda max_memory_allocated" if dev.type == "cuda"
            else "process max RSS (CPU)"}


class Overrun(BaseException):
    """Raised by `guard` when its time is up: a BaseException, so that no `except Exception` in torch.compile's stack
    turns it into a compile error."""


@contextlib.contextmanager
def guard(seconds: float):
    """Raise `Overrun` in this thread after `seconds` (SIGALRM): a cold compile that would outlast the step's limit
    is stopped by the step itself, which then reports what it had, instead of being killed with nothing."""
    def ring(signum, frame):
        raise Overrun

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(0.05, seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class _CudagraphSkips(logging.Handler):
    """Collects torch's "skipping cudagraphs due to ..." lines (logged, not raised, when inductor falls back)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "skipping cudagraph" in msg.lower():
            self.messages.append(msg[:300])


def _cudagraph_skips() -> int:
    from torch._dynamo.utils import counters

    return int(counters["inductor"].get("cudagraph_skips", 0))


def compile_backend(ctx: Ctx) -> None:
    """torch.compile's backend for this step, recorded: inductor, or with --tiny dynamo alone (inductor takes 15-40 s
    a graph on a CPU)."""
    import torch

    if ctx.s["mode"] == "tiny":
        real = torch.compile
        torch.compile = lambda model, **kw: real(model, **{**kw, "backend": "eager"})
        ctx.put("compile_backend", "eager (--tiny: inductor would take minutes on a CPU)")
    else:
        ctx.put("compile_backend", "inductor (default)")


def step_epochs(ctx: Ctx, compile: bool) -> None:
    """Epoch times on the full split, in priority order, until the step's deadline. Compiled: each configuration
    compiled from scratch (`runtime.reset_compiled`), on a split of whole batches (one train graph, not a second for a
    partial last batch), each graph's time recorded as it finishes, and whether CUDA graphs were really used (mode
    "reduce-overhead" on CUDA, and torch logged no "skipping cudagraphs")."""
    import torch

    from initmem.engine import runtime
    from initmem.study.plan import split_sizes

    size = SIZES[ctx.s["mode"]]
    skips = _CudagraphSkips()
    if compile:
        compile_backend(ctx)
        logging.getLogger("torch").addHandler(skips)
        with contextlib.suppress(Exception):  # an artifact log: off unless asked for
            torch._logging.set_logs(cudagraphs=True)
    grid = [("resnet9", b, p) for b in size["batches"] for p in ("fp32", "tf32", "bf16")]
    grid += [(size["deep"], size["batches"][0], p) for p in ("fp32", "tf32", "bf16")]
    if compile:  # the study's fp32, then bf16, at the first batch size: a cold compile takes a minute or more
        grid = [("resnet9", size["batches"][0], "fp32"), ("resnet9", size["batches"][0], "bf16")]
    last: dict[str, float] = {}
    for arch, b, precision in grid:
        key = {"arch": arch, "batch_size": b, "precision": precision}
        if precision == "tf32" and not ctx.cuda:
            ctx.add("skipped", {**key, "reason": "tf32 is CUDA only"})
            continue
        # an arch not timed yet costs at least the slowest timed so far (the deep network is the slower one): a
        # first guess of 0 s started ResNet-56 with 15 s left on the H200, and the step was killed with it
        if ctx.left() < 1.3 * last.get(arch, max(last.values(), default=0.0)) + 3:
            ctx.add("not_reached", {**key, "reason": f"{ctx.left():.0f} s left in the step"})
            continue
        cfg = config(ctx, "split", arch=arch, batch_size=b, precision=precision, compile=compile)
        if compile:
            runtime.reset_compiled()  # every entry pays (and reports) its own compilation, with no model kept
            cfg = cfg.replace(n_train=split_sizes(cfg)["train"] // b * b)
            before, seen = _cudagraph_skips(), len(skips.messages)
        t0 = time.perf_counter()
        try:  # guarded: a configuration (a cold compile, a first CUDA warm-up) slower than the step's time left
            with guard(ctx.left() - 1):  # ends the step with what it has, instead of its being killed
                run = _timed_epochs(cfg, ctx if compile else None)
        except Overrun:
            kept = " (the graphs compiled so far are in `graphs`)" if compile else ""
            ctx.add("not_reached", {**key, "reason": f"guard: not finished {time.perf_counter() - t0:.0f} s after it "
                                                     f"started, at the step's deadline{kept}"})
            break
        if compile:
            n = _cudagraph_skips() - before
            mode = "reduce-overhead" if ctx.cuda else "default"
            run.update(compile_mode=mode, cudagraph_skips=n, cudagraph_skip_messages=skips.messages[seen:],
                       cuda_graphs_used=ctx.cuda and ctx.s["mode"] != "tiny" and n == 0 and not skips.messages[seen:])
        ctx.add("runs", run)
        last[arch] = time.perf_counter() - t0


def step_population(ctx: Ctx) -> None:
    """K sigma_w members as one population, K separate runs one after another, and K concurrent processes on the
    one device, at each batch size: member-steps per second (K per population step)."""
    from initmem.engine.trainer import time_steps

    size = SIZES[ctx.s["mode"]]
    k, steps, warmup, prec = size["members"], size["steps"], size["warmup"], ctx.s["precision"]
    ctx.put("setup", {"members": k, "steps": steps, "warmup": warmup, "precision": prec,
                      "width": size["split"]["width"], "arch": "resnet9"})
    barrier = Path(tempfile.mkdtemp(prefix="device-check-barrier-"))  # the K processes start now (importing
    kids = [spawn(ctx, "_steps_child", {"batches": list(size["pop_batches"]), "barrier": str(barrier), "index": i,
                                        "threads": max(1, (os.cpu_count() or 1) // k)},
                  ctx.work / f"population.child{i}.log")
            for i in range(k)]  # torch while the population is timed) and wait at the barrier
    rows, spent = {}, 0.0  # the seconds a batch size's timing takes, scaled by the batch size: the H200's check was
    try:  # killed in b = 512 twice, losing the concurrent measurements, the second time with the guard below armed
        for b in size["pop_batches"]:  # (SIGALRM waits for a C call to return; likely cuDNN autotuning grouped convs)
            if ctx.left() < 1.3 * spent * b + 3:
                ctx.add("not_reached", {"batch_size": b, "what": "population and separate",
                                        "reason": f"{ctx.left():.0f} s left in the step"})
                continue
            cfg, t0 = config(ctx, "split", batch_size=b, precision=prec), time.perf_counter()
            try:
                with guard(ctx.left() - 1):
                    pop, one = (time_steps(cfg, steps, warmup, population=k),
                                time_steps(cfg, steps, warmup, population=1))
            except Overrun:
                ctx.add("not_reached", {"batch_size": b, "what": "population and separate",
                                        "reason": "guard: not finished at the step's deadline"})
                break
            took = time.perf_counter() - t0
            spent = max(spent, took / b)
            rows[b] = {"batch_size": b, "seconds": took, "population_step_s": pop, "single_step_s": one,
                       "population_member_steps_per_s": k / pop, "separate_member_steps_per_s": 1 / one,
                       "population_vs_separate": k * one / pop}
            ctx.put("rows", list(rows.values()))
        if ctx.cuda:
            import torch

            torch.cuda.empty_cache()  # this process's cached blocks, for the K processes
        for b in size["pop_batches"]:  # every child times every batch size, in order
            if b not in rows:  # nothing to compare its concurrent rate with
                break
            try:
                _wait_files([barrier / f"ready-{b}-{i}" for i in range(k)], ctx, kids)
                (barrier / f"go-{b}").touch()
                got = [json.loads(p.read_text())
                       for p in _wait_files([barrier / f"res-{b}-{i}.json" for i in range(k)], ctx, kids)]
            except TimeoutError as e:  # what was measured stays; the step ends ok
                ctx.add("not_reached", {"batch_size": b, "what": "concurrent", "reason": str(e)})
                break
            span = max(g["end"] for g in got) - min(g["start"] for g in got)
            overlap = max(0.0, min(g["end"] for g in got) - max(g["start"] for g in got)) / span if span else 1.0
            rate = sum(1 / g["step_s"] for g in got)
            rows[b].update(concurrent_member_steps_per_s=rate, concurrent_vs_separate=rate * rows[b]["single_step_s"],
                           concurrent_overlap=overlap, concurrent_step_s=[g["step_s"] for g in got])
            ctx.put("rows", list(rows.values()))
    finally:
        for p in kids:
            if p.poll() is None:
                p.kill()


def _wait_files(paths: list[Path], ctx: Ctx, kids: list[subprocess.Popen]) -> list[Path]:
    while not all(p.is_file() for p in paths):
        if dead := [p.args[-1] for p in kids if p.poll() not in (None, 0)]:
            raise RuntimeError(f"a concurrent process failed: {dead[0]} (its log: logs/population.child*.log)")
        if ctx.left() < 2:
            raise TimeoutError(f"the concurrent processes did not finish before the step's deadline ({paths[0].name})")
        time.sleep(0.01)
    return paths


class _Deadline(Exception):
    """Raised at a step boundary when a paper population's share of the time is up."""


def step_paper(ctx: Ctx) -> bool:
    """The paper's setting in the minutes left: full split, width 1, b = 128, SGD and Adam each as a population
    of sigma_w 0.1 and 2.5, as many epochs as fit: each trains (checkpointed every epoch) until its share of the
    time is up, then its measured epochs are read from its newest checkpoint. The time: what the step's limit leaves,
    at most `paper_cap_s` of training (--tiny: 10 s; none under `--limit paper=S`), counted once the training stack is
    imported (a fresh interpreter on a loaded machine takes seconds)."""
    import initmem.engine.trainer  # noqa: F401 - before the clock starts
    import initmem.metrics  # noqa: F401

    opts, tmp = ("sgd", "adam"), Path(tempfile.mkdtemp(prefix="device-check-paper-"))
    cap = ctx.s.get("paper_cap_s", SIZES[ctx.s["mode"]]["paper_cap_s"])
    end = time.time() + min(ctx.left() - 2, cap or math.inf)
    for i, opt in enumerate(opts):
        configs = [config(ctx, "split", batch_size=128, optimizer=opt, sigma_w=s, precision=ctx.s["precision"],
                          epochs=ctx.s["paper_epochs"], checkpoint_every=1) for s in (0.1, 2.5)]
        ctx.add("populations", _paper_population(configs, tmp / opt, time.time() + (end - time.time()) / (2 - i),
                                                 ctx.deadline - 1))
    return all(p["epochs"] >= 1 for p in ctx.res["populations"])


def _paper_population(configs: list, out: Path, end: float, hard_end: float | None = None) -> dict[str, Any]:
    """Train `configs` as one population until a step past `end` (its share of the time), or until `hard_end` (the
    step's deadline, default `end`) wherever it is: its measured epochs, read from its newest checkpoint."""
    import gc

    import torch

    from initmem import metrics
    from initmem.engine import checkpoint
    from initmem.engine.trainer import train
    from initmem.store.folders import RunFolders, checkpoints

    def stop_at_end(step: int) -> None:
        if time.time() > end:
            raise _Deadline

    t0 = time.time()
    try:  # stopped at a step past `end`, or by the guard in what comes between steps (on the H200 the first
        with guard((hard_end or end) - time.time()):  # evaluation took 19 s, and the step was killed there)
            done = [r.history.to_dict("records")
                    for r in train(configs, out_dir=out, progress=False, on_step=stop_at_end)]
        stopped = "finished"
    except (_Deadline, Overrun) as why:
        done, stopped = [], ("stopped at its share of the time" if isinstance(why, _Deadline)
                             else "stopped by the guard at the step's deadline")
        for path in checkpoints(RunFolders(out, "adhoc").checkpoint_folder(configs)):
            done = checkpoint.load(path)["state"]["histories"]
            break
    gc.collect()  # the interrupted loop's tensors, before the next population
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    members = []
    for c, rows in zip(configs, done or [[] for _ in configs], strict=True):
        h = pd.DataFrame(rows)
        s = metrics.summarize_history(h) if len(h) > 1 else {}
        last = h.iloc[-1] if len(h) else {}
        members.append({"sigma_w": c.sigma_w, "epochs": int(h["epoch"].max()) if len(h) else 0,
                        "test_acc_at_best": s.get("test_acc_at_best"), "best_epoch": s.get("best_epoch"),
                        "final_test_acc": s.get("final_test_acc"), "final_train_acc": s.get("final_train_acc"),
                        "norm_ratio": s.get("norm_ratio"), "angle": _num(last["angle"]) if len(h) else None,
                        "wall_time_s": _num(last["wall_time"]) if len(h) else None})
    best = [m["test_acc_at_best"] for m in members if m["test_acc_at_best"] is not None]
    final = [m["final_test_acc"] for m in members if m["final_test_acc"] is not None]
    return {"optimizer": configs[0].optimizer, "lr": configs[0].lr, "seconds": time.time() - t0, "stopped": stopped,
            "epochs": min(m["epochs"] for m in members), "members": members,
            "spread_pp_at_best": 100 * (max(best) - min(best)) if len(best) == len(members) else None,
            "spread_pp_final": 100 * (max(final) - min(final)) if len(final) == len(members) else None,
            "angle_gap_deg": (max(m["angle"] for m in members) - min(m["angle"] for m in members))
            if all(m["angle"] is not None for m in members) else None}


# ------------------------------------------------------------------------------------------------ helper processes
def child_train(ctx: Ctx) -> None:
    """Train `args.configs` (one run or a population) into `args.out_dir` (the resume step's victim)."""
    from initmem.config import TrainConfig
    from initmem.engine.trainer import train

    configs = [TrainConfig.from_dict(d) for d in ctx.args["configs"]]
    train(configs, out_dir=ctx.args["out_dir"], progress=False)


def child_steps(ctx: Ctx) -> None:
    """One of the K concurrent processes: at each batch size, signal ready, wait for go, time one run's steps."""
    import torch

    from initmem.engine.trainer import time_steps

    torch.set_num_threads(ctx.args["threads"])
    barrier, i, size = Path(ctx.args["barrier"]), ctx.args["index"], SIZES[ctx.s["mode"]]
    for b in ctx.args["batches"]:
        cfg = config(ctx, "split", batch_size=b, precision=ctx.s["precision"])
        (barrier / f"ready-{b}-{i}").touch()
        while not (barrier / f"go-{b}").exists():
            time.sleep(0.005)
        start = time.time()
        step_s = time_steps(cfg, size["steps"], size["warmup"], population=1)
        atomic_write(barrier / f"res-{b}-{i}.json", json.dumps({"step_s": step_s, "start": start, "end": time.time()}))


STEPS = {  # name -> (title, function); the order is the run order: correctness first, the optional steps last
    "env": ("environment, device and data", step_env),
    "parity_fp32": ("device vs CPU, fp32", lambda c: step_parity(c, "fp32")),
    "population_vs_separate": ("a population vs its separate runs, on the device", step_population_vs_separate),
    "resume": ("killed and resumed run identical", step_resume),
    "rerun": ("two deterministic runs bit-identical", step_rerun),
    "parity_bf16": ("device vs CPU, bf16", lambda c: step_parity(c, "bf16")),
    "parity_muon": ("device vs CPU, Muon (fp32)", lambda c: step_parity(c, "fp32", "muon")),
    "parity_tf32": ("device vs CPU, tf32", lambda c: step_parity(c, "tf32")),
    "epoch_eager": ("epoch times, eager", lambda c: step_epochs(c, False)),
    "population": ("population vs separate vs concurrent", step_population),
    "epoch_compile": ("epoch times, torch.compile", lambda c: step_epochs(c, True)),
    "paper": ("paper-scale point", step_paper),
}
HELPERS = {"_train_child": child_train, "_steps_child": child_steps}
