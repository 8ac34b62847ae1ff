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
import datetime as _dt
import hashlib
import math
import os
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
from initmem.config import RUN_ID_EXCLUDE, TrainConfig, _bad
from initmem.errors import CheckpointError, ConfigError, ResultsError
from initmem.provenance import provenance


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
    if config.precision == "tf32" and dev.type != "cuda":
        raise _bad("precision", config.precision, f"'tf32' is CUDA only (device resolved to {dev.type}); 'fp32' or "
                                                  "'bf16' is accepted")
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
    amp = config.precision == "bf16"

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
