"""One training run: `TrainConfig` → `train()` → `RunResult` (history, summary), optionally written to a run folder.

The loop is airbench-style: the whole split lives on the device as one normalised tensor, minibatches are index
gathers, and nothing is read back to the host inside an epoch (running loss and correct count accumulate as device
tensors; the lr and the forgetting clocks are Python floats computed from the schedule). Each epoch ends with one
host sync that reads the epoch's row: running train loss/accuracy, clean eval-mode train/val/test loss and
accuracy, and the per-layer weight norms.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as _dt
import difflib
import hashlib
import math
import numbers
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from initmem import checkpoint as _ckpt
from initmem import data as _data
from initmem import locks as _locks
from initmem import metrics, models, optim
from initmem import results as _results
from initmem.errors import CheckpointError, ConfigError, ResultsError
from initmem.provenance import provenance

# Fields that cannot change the result (where it runs, how it is batched for evaluation or checkpointed, where the
# data is read from, memory layout, compilation): not part of the run id, so a rerun elsewhere is the same run.
RUN_ID_EXCLUDE = frozenset({"device", "eval_batch_size", "checkpoint_every", "data_root", "channels_last", "compile"})
_OPT_FIELDS = ("lr", "momentum", "weight_decay")  # None → the optimiser's STUDY.md default
_DEVICE_RE = re.compile(r"auto|cpu|cuda(:\d+)?")

# One line per field: the CLI's --help and the docs read these.
FIELD_HELP: dict[str, str] = {
    "arch": "network: " + " | ".join(models.ARCHS),
    "width": "channel multiplier of the network",
    "sigma_w": "init scale: every conv/linear weight ~ N(0, sigma_w^2 / fan_in)",
    "optimizer": "optimiser: " + " | ".join(optim.OPTIMIZERS),
    "lr": "learning rate; default per optimiser: sgd/sgd_momentum 0.01, adam/adamw 1e-3, muon 0.02",
    "momentum": "momentum; default sgd_momentum 0.9, muon 0.95, others 0 (unused)",
    "weight_decay": "L2: coupled for sgd*/adam, decoupled for adamw (default 1e-2) and muon; default 0",
    "betas": "Adam betas (adam/adamw and muon's AdamW part)",
    "eps": "Adam epsilon (adam/adamw and muon's AdamW part)",
    "muon_aux_lr": "AdamW lr for BatchNorm params, biases and the head under muon",
    "ns_steps": "Newton-Schulz iterations (muon)",
    "schedule": "lr schedule: " + " | ".join(optim.SCHEDULES),
    "warmup_epochs": "linear lr warm-up length in epochs (may be fractional)",
    "step_milestones": "fractions of training at which the step schedule multiplies the lr by step_gamma",
    "step_gamma": "lr multiplier at each step-schedule milestone",
    "data": "data source: " + " | ".join(_data.SOURCES) + " (synthetic: tests and smoke runs only)",
    "data_root": "CIFAR-10 folder or .tar.gz (see data.load_cifar10)",
    "n_train": "training images (stratified subset); None: all 45,000 left after the validation split",
    "n_val": "validation images split off the training set (stratified, by split_seed)",
    "n_test": "test images (stratified subset); None: all 10,000",
    "split_seed": "seed of the train/validation split and of the subsets",
    "augment": "random crop (pad 4) and horizontal flip",
    "train_eval_size": "clean eval-mode train accuracy on a fixed subset of this size; None: the whole split",
    "batch_size": "minibatch size b (enters T_SGD)",
    "epochs": "training epochs",
    "seed": "seed of the initialisation, minibatch order and augmentation",
    "device": "auto | cpu | cuda | cuda:N",
    "eval_batch_size": "batch size for evaluation (no effect on results)",
    "checkpoint_every": "epochs between checkpoints; 0: none",
    "channels_last": "channels-last memory format (speed only)",
    "amp": "off | bf16 (bfloat16 autocast, CUDA only)",
    "compile": "torch.compile the model (speed only; compiled once per process and network shape)",
}


def _bad(name: str, value: Any, accepted: str) -> ConfigError:
    return ConfigError(f"TrainConfig.{name}={value!r} is invalid: {accepted}")


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _unknown_keys(keys: list[str]) -> ConfigError:
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, names, 1)) else repr(k)
             for k in keys]
    return ConfigError(f"TrainConfig has no field {', '.join(hints)}: accepted fields are {', '.join(names)}")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines one run (see docs/architecture.md). Validated on construction; `None` optimiser
    hyper-parameters are resolved to the optimiser's STUDY.md default, so a stored config is always concrete."""

    # model
    arch: str = "resnet9"
    width: float = 1.0
    sigma_w: float = 1.0
    # optimiser
    optimizer: str = "sgd"
    lr: float | None = None
    momentum: float | None = None
    weight_decay: float | None = None
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    muon_aux_lr: float = 1e-3
    ns_steps: int = 5
    # schedule
    schedule: str = "constant"
    warmup_epochs: float = 0.0
    step_milestones: tuple[float, ...] = (0.5, 0.75)
    step_gamma: float = 0.1
    # data
    data: str = "auto"
    data_root: str = "data"
    n_train: int | None = None
    n_val: int = 5000
    n_test: int | None = None
    split_seed: int = 0
    augment: bool = False
    train_eval_size: int | None = None
    # run
    batch_size: int = 128
    epochs: int = 200
    seed: int = 0
    device: str = "auto"
    eval_batch_size: int = 1024
    checkpoint_every: int = 0
    # engine (no effect on the recipe's maths)
    channels_last: bool = True
    amp: str = "off"
    compile: bool = False

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        def choice(name: str, options: tuple[str, ...]) -> None:
            v = getattr(self, name)
            if not isinstance(v, str) or v not in options:
                raise _bad(name, v, "one of " + ", ".join(repr(o) for o in options))

        def real(name: str, ok, accepted: str) -> None:  # ints are accepted and stored as floats
            v = getattr(self, name)
            if not _is_real(v) or not ok(float(v)):
                raise _bad(name, v, accepted)
            put(name, float(v))

        def integer(name: str, lo: int, optional: bool = False) -> None:
            v = getattr(self, name)
            if v is None and optional:
                return
            if not _is_int(v) or v < lo:
                raise _bad(name, v, f"an integer >= {lo}" + (" or None" if optional else ""))
            put(name, int(v))

        def flag(name: str) -> None:
            if not isinstance(getattr(self, name), bool):
                raise _bad(name, getattr(self, name), "True or False")

        choice("arch", models.ARCHS)
        real("width", lambda v: v > 0, "a finite real > 0")
        real("sigma_w", lambda v: v > 0, "a finite real > 0")
        choice("optimizer", optim.OPTIMIZERS)
        defaults = optim.OPTIMIZER_DEFAULTS[self.optimizer]
        for name in _OPT_FIELDS:
            if getattr(self, name) is None:
                put(name, defaults[name])
        real("lr", lambda v: v > 0, "a finite real > 0 (or None: the optimiser's default)")
        real("momentum", lambda v: 0 <= v < 1, "a real in [0, 1) (or None: the optimiser's default)")
        real("weight_decay", lambda v: v >= 0, "a finite real >= 0 (or None: the optimiser's default)")
        b = self.betas
        if isinstance(b, (str, bytes)) or not isinstance(b, (tuple, list)) or len(b) != 2 or not all(
                _is_real(x) and 0 <= x < 1 for x in b):
            raise _bad("betas", b, "a pair of reals in [0, 1)")
        put("betas", tuple(float(x) for x in b))
        real("eps", lambda v: v > 0, "a finite real > 0")
        real("muon_aux_lr", lambda v: v > 0, "a finite real > 0")
        integer("ns_steps", 1)
        # A hyper-parameter the optimiser does not use must stay neutral: a silently ignored value would be a lie
        # in every table that lists it.
        used = optim.OPTIMIZER_HPARAMS[self.optimizer]
        for name in ("momentum", "weight_decay", "betas", "eps", "muon_aux_lr", "ns_steps"):
            if name not in used and getattr(self, name) != defaults[name]:
                raise _bad(name, getattr(self, name), f"optimizer={self.optimizer!r} does not use it; only its "
                                                      f"default {defaults[name]!r} is accepted")
        choice("schedule", optim.SCHEDULES)
        integer("epochs", 1)
        real("warmup_epochs", lambda v: 0 <= v <= self.epochs, f"a real in [0, epochs={self.epochs}]")
        m = self.step_milestones
        if isinstance(m, (str, bytes)) or not isinstance(m, (tuple, list)) or not all(
                _is_real(x) and 0 < x <= 1 for x in m) or list(m) != sorted(m):
            raise _bad("step_milestones", m, "a non-decreasing sequence of fractions in (0, 1]")
        put("step_milestones", tuple(float(x) for x in m))
        real("step_gamma", lambda v: v > 0, "a finite real > 0")
        choice("data", _data.SOURCES)
        if not isinstance(self.data_root, str) or not self.data_root:
            raise _bad("data_root", self.data_root, "a non-empty path string")
        # the splits are stratified: at least one image per class, or make_splits fails on a *different* field
        integer("n_train", _data.NUM_CLASSES, optional=True)
        integer("n_val", _data.NUM_CLASSES)
        integer("n_test", _data.NUM_CLASSES, optional=True)
        integer("split_seed", 0)
        flag("augment")
        integer("train_eval_size", _data.NUM_CLASSES, optional=True)
        integer("batch_size", 1)
        integer("seed", 0)
        if not isinstance(self.device, str) or not _DEVICE_RE.fullmatch(self.device):
            raise _bad("device", self.device, "'auto', 'cpu', 'cuda' or 'cuda:N'")
        integer("eval_batch_size", 1)
        integer("checkpoint_every", 0)
        flag("channels_last")
        choice("amp", ("off", "bf16"))
        if self.amp == "bf16" and self.device == "cpu":
            raise _bad("amp", self.amp, "'bf16' is CUDA only; 'off' is accepted with device='cpu'")
        flag("compile")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples → lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Inverse of `to_dict`; unknown keys are a ConfigError naming them (and the closest field)."""
        if not isinstance(d, dict):
            raise ConfigError(f"TrainConfig.from_dict got {type(d).__name__}: a dict of fields is accepted")
        names = {f.name for f in dataclasses.fields(cls)}
        if unknown := [k for k in d if k not in names]:
            raise _unknown_keys(unknown)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with `changes`. When the optimiser changes, lr/momentum/weight_decay that still hold the old
        optimiser's defaults (and are not in `changes`) follow the new optimiser's defaults: the adam copy of an sgd
        config gets adam's lr 1e-3, not sgd's 0.01."""
        names = {f.name for f in dataclasses.fields(self)}
        if unknown := [k for k in changes if k not in names]:
            raise _unknown_keys(unknown)
        new = changes.get("optimizer", self.optimizer)
        if new != self.optimizer and self.optimizer in optim.OPTIMIZER_DEFAULTS:
            old = optim.OPTIMIZER_DEFAULTS[self.optimizer]
            changes = {**{k: None for k in _OPT_FIELDS if getattr(self, k) == old[k]}, **changes}
            if new in optim.OPTIMIZER_DEFAULTS:  # other unused hyper-parameters back to neutral too
                for k in ("betas", "eps", "muon_aux_lr", "ns_steps"):
                    if k not in changes and k not in optim.OPTIMIZER_HPARAMS[new]:
                        changes[k] = optim.OPTIMIZER_DEFAULTS[new][k]
        return dataclasses.replace(self, **changes)


@dataclass
class RunResult:
    """What `train` returns: the config, its run id, `status` ("complete" | "diverged"), the per-epoch history, the
    summary (metrics.SUMMARY_KEYS), the run folder (None when nothing was written), provenance and UTC times."""

    config: TrainConfig
    run_id: str
    status: str
    history: pd.DataFrame
    summary: dict
    path: Path | None = None
    provenance: dict = field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None


@dataclass
class TrainState:
    """Everything the loop mutates, in one place: what a checkpoint saves and a resume restores."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    order_gen: torch.Generator  # minibatch order (CPU, so the order is the same on every device)
    aug_gen: torch.Generator  # augmentation draws (on the training device)
    clocks: metrics.ClockAccumulator
    history: list[dict] = field(default_factory=list)
    epoch: int = 0  # epochs completed
    step: int = 0  # optimiser steps taken
    wall_time: float = 0.0  # seconds trained before the current process took over (a resume)

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "order_gen": self.order_gen.get_state(), "aug_gen": self.aug_gen.get_state(),
                "clocks": self.clocks.state_dict(), "history": self.history, "epoch": self.epoch,
                "step": self.step, "wall_time": self.wall_time}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.order_gen.set_state(state["order_gen"])
        self.aug_gen.set_state(state["aug_gen"])
        self.clocks.load_state_dict(state["clocks"])
        self.history = list(state["history"])
        self.epoch, self.step, self.wall_time = int(state["epoch"]), int(state["step"]), float(state["wall_time"])


def _maybe_checkpoint(state: TrainState, config: TrainConfig, run_folder: Path | None, rid: str,
                      started_at: str, wall_time: float) -> None:
    """Hook called after every (finite) epoch: save `state` every `config.checkpoint_every` epochs, at the epoch
    boundary, so a resume starts a fresh epoch whose permutation comes from the restored order generator."""
    if run_folder is None or not config.checkpoint_every or state.epoch % config.checkpoint_every:
        return
    payload = {"run_id": rid, "config": config.to_dict(), "epoch": state.epoch, "rng": _ckpt.rng_state(),
               "state": {**state.state_dict(), "wall_time": wall_time}, "started_at": started_at,
               "saved_at": _utcnow()}
    _ckpt.save(_ckpt.folder_of(run_folder), state.epoch, payload)


def _resume(state: TrainState, config: TrainConfig, run_folder: Path, rid: str, say) -> str | None:
    """Restore `state` and the global RNGs from the run's newest valid checkpoint; return the run's original
    `started_at`, or None when no checkpoint is usable (`state` is then left as built). A checkpoint of another
    run or config is refused like a damaged one."""
    if not _ckpt.checkpoints(_ckpt.folder_of(run_folder)):
        return None
    fresh, rng = copy.deepcopy(state.state_dict()), _ckpt.rng_state()  # a failed restore must leave no trace
    mine = {k: v for k, v in config.to_dict().items() if k not in RUN_ID_EXCLUDE}
    started: list[str] = []

    def use(payload: dict) -> None:
        theirs = payload.get("config")
        theirs = {k: v for k, v in theirs.items() if k not in RUN_ID_EXCLUDE} if isinstance(theirs, dict) else {}
        if payload.get("run_id") != rid or theirs != mine:
            diff = sorted(k for k in mine if theirs.get(k) != mine[k])
            raise CheckpointError(f"checkpoint of run {payload.get('run_id')!r} does not belong to run {rid} "
                                  f"(config differs in {diff})")
        try:
            state.load_state_dict(payload["state"])
            _ckpt.set_rng_state(payload["rng"])
        except Exception as exc:  # noqa: BLE001 - shapes, devices, missing keys: this checkpoint is unusable here
            state.load_state_dict(fresh)
            _ckpt.set_rng_state(rng)
            raise CheckpointError(f"checkpoint of epoch {payload.get('epoch')!r} cannot be restored: "
                                  f"{type(exc).__name__}: {exc}") from None
        started.append(str(payload.get("started_at") or _utcnow()))

    hit = _ckpt.load_latest(_ckpt.folder_of(run_folder), use, report=say)
    if hit is None:
        return None
    say(f"run {rid}: resumed from {hit[1]} (epoch {hit[0]}/{config.epochs})")
    return started[-1]


_COMPILED: dict[tuple, tuple[nn.Module, Any]] = {}  # (arch, width, device, layout) -> (model, its compiled form)


def _model(config: TrainConfig, dev: torch.device) -> tuple[nn.Module, Any]:
    """The run's freshly initialised model and what the loop calls (the model, or with `compile` its compiled form).

    With `compile`, a process compiles a network shape once: the next run of the same arch, width, device and layout
    (the other runs of a sweep point) gets the same module re-initialised in place — its state loaded from a freshly
    built model, so the weights are bitwise those of an uncompiled run — and the same compiled callable, whose
    guards still hold, so it is not compiled again. One shape is kept (a sweep point has one)."""
    torch.manual_seed(config.seed)  # the initialisation draws from the global generator
    fresh = models.build_model(config.arch, config.sigma_w, config.width).to(dev)
    if config.channels_last:
        fresh = fresh.to(memory_format=torch.channels_last)
    if not config.compile:
        return fresh, fresh
    key = (config.arch, config.width, str(dev), config.channels_last)
    if key not in _COMPILED:
        _COMPILED.clear()
        _COMPILED[key] = (fresh, torch.compile(fresh))
        return _COMPILED[key]
    model, net = _COMPILED[key]
    with torch.no_grad():
        model.load_state_dict(fresh.state_dict())  # weights, BatchNorm running stats and counters
    for p in model.parameters():
        p.grad = None
    model.train()
    return model, net


def _stream_seed(seed: int, stream: str) -> int:
    # Independent generators for independent choices: the minibatch order must not share draws with augmentation.
    return int.from_bytes(hashlib.sha256(f"initmem-train:{seed}:{stream}".encode()).digest()[:8], "little") >> 1


def _utcnow() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _resolve_device(config: TrainConfig) -> torch.device:
    dev = _data.resolve_device(config.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise _bad("device", config.device, "CUDA is not available here; 'cpu' or 'auto' is accepted")
    if config.amp == "bf16" and dev.type != "cuda":
        raise _bad("amp", config.amp, f"'bf16' is CUDA only (device resolved to {dev.type}); 'off' is accepted")
    return dev


@torch.no_grad()
def _evaluate(net: nn.Module, x: torch.Tensor, y: torch.Tensor, config: TrainConfig, autocast) -> torch.Tensor:
    """[mean loss, accuracy] as a float64 device tensor (no host sync), in eval mode."""
    net.eval()
    total = torch.zeros(2, dtype=torch.float64, device=x.device)
    for i in range(0, len(x), config.eval_batch_size):
        xb, yb = x[i : i + config.eval_batch_size], y[i : i + config.eval_batch_size]
        if config.channels_last:
            xb = xb.contiguous(memory_format=torch.channels_last)
        with autocast():
            out = net(xb).float()
        total[0] += F.cross_entropy(out, yb, reduction="sum")
        total[1] += (out.argmax(1) == yb).sum()
    return total / len(x)


def _progress_mode(progress: bool) -> str | None:
    """None, "bar" (tqdm) or "lines" (one plain line per epoch: papermill and logs, where a bar does not advance).
    `INITMEM_PROGRESS=lines|bar|off` overrides the TTY test."""
    env = os.environ.get("INITMEM_PROGRESS", "").strip().lower()
    if not progress or env in ("off", "0", "none"):
        return None
    if env in ("lines", "bar"):
        return env
    return "bar" if sys.stderr.isatty() else "lines"


def train(config: TrainConfig, *, out_dir: str | Path | None = None, section: str = "adhoc",
          progress: bool = True) -> RunResult:
    """Train one run. A non-finite loss marks it "diverged" at that epoch: its history up to and including that epoch
    is kept and the function returns normally. With `out_dir`, the run is written to `out_dir/section/run_id/`
    (writability is checked before anything is trained) under the run's lock (ResultsError if another process
    holds it), saves a checkpoint every `config.checkpoint_every` epochs, and resumes from the newest valid
    checkpoint of the same run when its folder has one; the checkpoints are deleted once run.json is written."""
    if not isinstance(config, TrainConfig):
        raise ConfigError(f"config={type(config).__name__} is invalid: a TrainConfig is accepted")
    if not isinstance(section, str) or not section or section != Path(section).name or section.startswith("."):
        raise ConfigError(f"section={section!r} is invalid: a plain folder name is accepted")
    if out_dir is None:
        return _train(config, None, section, progress)
    _resolve_device(config)  # a bad device fails before anything is created on disk
    _results.check_writable(Path(out_dir) / section)
    folder = _results.run_dir(out_dir, section, config)
    lock = _locks.try_lock(folder)
    if lock is None:
        raise ResultsError(f"run folder {str(folder)!r} is locked by {_locks.holder(folder)}: that process is "
                           "training this run; wait for it (or run another config)")
    with lock:
        return _train(config, out_dir, section, progress)


def _train(config: TrainConfig, out_dir: str | Path | None, section: str, progress: bool) -> RunResult:
    dev = _resolve_device(config)
    rid, started_at = _results.run_id(config), _utcnow()
    prov = provenance(str(dev))

    # data: synthetic data is made exactly as large as the splits ask (its default sizes suit no particular split)
    synthetic_sizes = (config.n_val + (config.n_train or 2000), config.n_test or 500)
    data = _data.load_cifar10(config.data_root, config.data, progress=progress, synthetic_sizes=synthetic_sizes)
    splits = _data.make_splits(data, config.n_val, config.n_train, config.n_test, config.split_seed, dev,
                               config.train_eval_size)
    prov.update(data_source=data.source, data_hash=data.content_hash)
    train_eval = (splits.train_x, splits.train_y) if splits.train_eval_idx is None else (
        splits.train_x[splits.train_eval_idx], splits.train_y[splits.train_eval_idx])

    model, net = _model(config, dev)
    opt = optim.build_optimizer(config.optimizer, model, lr=config.lr, momentum=config.momentum,
                                weight_decay=config.weight_decay, betas=config.betas, eps=config.eps,
                                ns_steps=config.ns_steps, muon_aux_lr=config.muon_aux_lr)
    state = TrainState(
        model, opt,
        order_gen=torch.Generator().manual_seed(_stream_seed(config.seed, "order")),
        aug_gen=torch.Generator(device=dev).manual_seed(_stream_seed(config.seed, "augment")),
        clocks=metrics.ClockAccumulator(config.batch_size, config.weight_decay))
    amp = config.amp == "bf16"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if amp else contextlib.nullcontext()

    layers = [f"norm:{name}" for name in models.layer_names(model)]
    n = len(splits.train_y)
    if config.batch_size > n:  # TrainConfig cannot know the data size: caught here, before any step
        raise _bad("batch_size", config.batch_size, f"at most the training split's size {n} (n_train) is accepted")
    per_epoch = _data.steps_per_epoch(n, config.batch_size)
    total_steps = per_epoch * config.epochs
    warmup_steps = min(total_steps, round(config.warmup_epochs * per_epoch))
    run_folder = None if out_dir is None else _results.run_dir(out_dir, section, config)

    def measure(train_sums: torch.Tensor | None, lr: float) -> dict:
        """The epoch's row, read from the device in one sync."""
        nan2 = torch.full((2,), math.nan, dtype=torch.float64, device=dev)
        running = nan2 if train_sums is None else train_sums / n
        evals = [_evaluate(net, x, y, config, autocast)
                 for x, y in (train_eval, (splits.val_x, splits.val_y), (splits.test_x, splits.test_y))]
        norms = models.weight_norms_tensor(model).double()
        v = torch.cat([running, *evals, norms.square().sum().sqrt()[None], norms]).tolist()
        row = dict(epoch=state.epoch, step=state.step, lr=lr, train_loss=v[0], train_acc_running=v[1],
                   train_acc=v[3], val_loss=v[4], val_acc=v[5], test_loss=v[6], test_acc=v[7], weight_norm=v[8],
                   **state.clocks.totals(), wall_time=state.wall_time + time.perf_counter() - t0)
        row.update(zip(layers, v[9:], strict=True))
        return row

    mode = _progress_mode(progress)

    def say(line: str) -> None:  # checkpoint news: in the progress output (papermill, logs, terminal)
        if mode is not None:
            print(line, flush=True)

    if mode == "lines":
        print(f"run {rid}: {config.arch} width={config.width:g} sigma_w={config.sigma_w:g} {config.optimizer} "
              f"lr={config.lr:g} b={config.batch_size} seed={config.seed}, {config.epochs} epochs x {per_epoch} "
              f"steps on {dev} ({data.source})", flush=True)
    resumed = None if run_folder is None else _resume(state, config, run_folder, rid, say)
    started_at = resumed or started_at
    t0 = time.perf_counter()  # wall_time counts training and evaluation, not data loading or set-up
    if resumed is None:
        state.history.append(measure(None, math.nan))  # epoch 0: at initialisation, before any step
    status = "complete"
    bar = None
    if mode == "bar":
        from tqdm import tqdm  # a terminal: papermill and logs get "lines"

        bar = tqdm(total=config.epochs, initial=state.epoch, desc=f"run {rid}", unit="epoch", dynamic_ncols=True)
    try:
        while state.epoch < config.epochs:
            net.train()
            sums = torch.zeros(2, dtype=torch.float64, device=dev)  # [loss * batch, correct] summed over the epoch
            lr = math.nan
            for idx in _data.batches(n, config.batch_size, state.order_gen, device=dev):
                factor = optim.lr_factor(config.schedule, state.step, total_steps, warmup_steps,
                                         config.step_milestones, config.step_gamma)
                optim.set_lr_factor(opt, factor)
                lr = config.lr * factor  # the clocks run on the main lr (muon's aux AdamW lr is not a clock)
                x, y = splits.train_x[idx], splits.train_y[idx]
                if config.augment:
                    x = _data.augment_batch(x, state.aug_gen)
                if config.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                with autocast():
                    out = net(x).float()
                loss = F.cross_entropy(out, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sums[0] += loss.detach() * len(idx)
                sums[1] += (out.detach().argmax(1) == y).sum()
                state.clocks.update(lr)
                state.step += 1
            state.epoch += 1
            row = measure(sums, lr)
            state.history.append(row)
            if not all(math.isfinite(row[k]) for k in ("train_loss", "val_loss", "test_loss", "weight_norm")):
                status = "diverged"
            _report(mode, bar, row, config, rid, status)
            if status == "diverged":
                break
            _maybe_checkpoint(state, config, run_folder, rid, started_at,
                              state.wall_time + time.perf_counter() - t0)
    finally:
        if bar is not None:
            bar.close()

    history = pd.DataFrame(state.history, columns=[*_results.HISTORY_COLUMNS, *layers])
    summary = metrics.summarize_history(history)
    if status == "diverged":  # summarize_history sees only the train loss; an eval loss may have gone first
        summary["diverged_epoch"] = state.epoch
    result = RunResult(config, rid, status, history, summary, None, prov, started_at, _utcnow())
    if out_dir is not None:
        result.path = _results.write_run(result, out_dir, section)
        _ckpt.clear(_ckpt.folder_of(result.path))  # a finished run never resumes
    return result


def _report(mode: str | None, bar, row: dict, config: TrainConfig, rid: str, status: str) -> None:
    stats = dict(loss=f"{row['train_loss']:.4g}", train=f"{row['train_acc']:.4f}", val=f"{row['val_acc']:.4f}",
                 test=f"{row['test_acc']:.4f}", norm=f"{row['weight_norm']:.4g}")
    if mode == "bar":
        bar.set_postfix(stats, refresh=False)
        bar.update(1)
    elif mode == "lines":
        tail = "  DIVERGED" if status == "diverged" else ""
        print(f"run {rid} epoch {row['epoch']}/{config.epochs} " + " ".join(f"{k} {v}" for k, v in stats.items())
              + f" {row['wall_time']:.1f}s{tail}", flush=True)
