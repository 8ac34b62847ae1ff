"""The training engine: one loop for a single run and for a population of K runs that differ only in sigma_w and
seed. `train(config)` returns a `RunResult`; `train([c1, ..., cK])` returns one per member, each equal (to float
rounding) to what `train(c)` returns, from one set of kernels per step (`initmem.members`).

The loop is airbench-style: the whole split lives on the device as one normalised tensor, minibatches are index
gathers, and nothing is read back to the host inside an epoch (running loss and correct counts, the per-step
angles of `initmem.forgetting`, accumulate as device tensors; the lr and the clocks are Python floats from the
schedule). A measured epoch ends with one host sync that reads every member's row. Per member: its initialisation
(from its seed), data order and augmentation stream (the streams a separate run with that seed uses), BatchNorm
statistics, optimiser state, clocks, history and divergence (a diverged member stops, the others go on unchanged).
With `out_dir`, the members' run folders are locked, the population is checkpointed every `checkpoint_every`
epochs (one format for K = 1 and K > 1: a single run's checkpoints live in its run folder, a population's in
`<out>/<section>/populations/<id>/`) and resumed exactly from the newest valid checkpoint of the same member set.
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
from pathlib import Path

import pandas as pd
import torch

from initmem import checkpoint as _ckpt
from initmem import data as _data
from initmem import forgetting, locks, members, metrics, optim, record, runtime
from initmem import results as _results
from initmem.config import TrainConfig, _bad, check_members, run_id, shared_fields
from initmem.errors import CheckpointError, ConfigError, ResultsError
from initmem.provenance import provenance
from initmem.results import RunResult

POPULATIONS = "populations"  # <out>/<section>/populations/<id>/checkpoints/: an unfinished population (K > 1)
_FINITE = ("train_loss", "val_loss", "test_loss", "weight_norm")  # a row with any of these non-finite: diverged


def _utcnow() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _stream_seed(seed: int, stream: str) -> int:
    # Independent generators for independent choices: the minibatch order must not share draws with augmentation.
    return int.from_bytes(hashlib.sha256(f"initmem-train:{seed}:{stream}".encode()).digest()[:8], "little") >> 1


def _progress_mode(progress: bool) -> str | None:
    """None, "bar" (tqdm: a terminal, or a Jupyter kernel not run by initmem) or "lines" (one plain line per epoch
    and member: papermill and logs, where a bar does not advance). `INITMEM_PROGRESS=lines|bar|off` decides first
    (initmem's notebook runner sets lines)."""
    env = os.environ.get("INITMEM_PROGRESS", "").strip().lower()
    if not progress or env in ("off", "0", "none"):
        return None
    if env in ("lines", "bar"):
        return env
    return "bar" if sys.stderr.isatty() or _in_jupyter() else "lines"


def _in_jupyter() -> bool:
    """True inside a running Jupyter kernel (JupyterLab, where tqdm.auto renders a bar), not merely after an import."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def _label(c: TrainConfig) -> str:
    return f"sigma_w={c.sigma_w:g} seed={c.seed}"


def train(configs: TrainConfig | list[TrainConfig], *, out_dir: str | Path | None = None, section: str = "adhoc",
          progress: bool = True, locked: bool = False, on_step=None) -> RunResult | list[RunResult]:
    """Train one run, or a population (a list of configs that differ only in sigma_w and seed) as one computation;
    return its RunResult, or one per member in order. A non-finite row marks a member "diverged" at that epoch: its
    history up to and including it is kept and the others go on. With `out_dir`, member j is written to
    `out_dir/section/run_id_j/` (writability checked before anything is trained) under its run lock (ResultsError if
    another process holds one; `locked=True`: the caller holds them all), checkpointed every `checkpoint_every`
    epochs and resumed from the newest valid checkpoint of the same member set. `on_step(step)` is called before
    every optimiser step (timing and deadlines: `time_steps`, benchmarks/device_check.py)."""
    single = isinstance(configs, TrainConfig)
    configs = check_members([configs] if single else configs)
    if not isinstance(section, str) or not section or section != Path(section).name or section.startswith("."):
        raise ConfigError(f"section={section!r} is invalid: a plain folder name is accepted")
    runtime.run_device(configs[0])  # a bad device fails before anything is created on disk
    if out_dir is None:
        out = _train(configs, None, section, progress, on_step)
    else:
        _results.check_writable(Path(out_dir) / section)
        with contextlib.ExitStack() as held:
            for c in [] if locked else configs:
                folder = _results.run_dir(out_dir, section, c)
                lock = locks.try_lock(folder)
                if lock is None:
                    raise ResultsError(f"run folder {str(folder)!r} is locked by {locks.holder(folder)}: that process "
                                       "is training this run; wait for it (or train the others without it)")
                held.enter_context(lock)
            out = _train(configs, out_dir, section, progress, on_step)
    return out[0] if single else out


def population_id(configs: list[TrainConfig]) -> str:
    """12 hex digits naming a member set (order-free); a single run is named by its run id."""
    ids = sorted(run_id(c) for c in configs)
    return ids[0] if len(ids) == 1 else hashlib.sha256(" ".join(ids).encode()).hexdigest()[:12]


def checkpoint_folder(out_dir: str | Path, section: str, configs: list[TrainConfig]) -> Path:
    """Where a member set's checkpoints live: a single run's in its run folder, a population's beside the runs."""
    if len(configs) == 1:
        return _ckpt.folder_of(_results.run_dir(out_dir, section, configs[0]))
    return _ckpt.folder_of(Path(out_dir) / section / POPULATIONS / population_id(configs))


def _train(configs: list[TrainConfig], out_dir: str | Path | None, section: str, progress: bool,
           on_step=None) -> list[RunResult]:
    cfg, k = configs[0], len(configs)
    dev = runtime.run_device(cfg)
    if dev.type == "cpu" and k > 1:
        members.tune_malloc()
    rids, started_at, prov = [run_id(c) for c in configs], _utcnow(), provenance(str(dev))
    prov.update(runtime.engine_settings(cfg, dev))

    # data: synthetic data is made exactly as large as the splits ask (its default sizes suit no particular split)
    synthetic_sizes = (cfg.n_val + (cfg.n_train or 2000), cfg.n_test or 500)
    data = _data.load_cifar10(cfg.data_root, cfg.data, progress=progress, synthetic_sizes=synthetic_sizes)
    splits = _data.make_splits(data, cfg.n_val, cfg.n_train, cfg.n_test, cfg.split_seed, dev, cfg.train_eval_size)
    prov.update(data_source=data.source, data_hash=data.content_hash, **({"population": k} if k > 1 else {}))
    evals = [(splits.train_x, splits.train_y) if splits.train_eval_idx is None else (
        splits.train_x[splits.train_eval_idx], splits.train_y[splits.train_eval_idx]),
        (splits.val_x, splits.val_y), (splits.test_x, splits.test_y)]
    n = len(splits.train_y)
    if cfg.batch_size > n:  # TrainConfig cannot know the data size: caught here, before any step
        raise _bad("batch_size", cfg.batch_size, f"at most the training split's size {n} (n_train) is accepted")
    per_epoch = _data.steps_per_epoch(n, cfg.batch_size)
    total_steps = per_epoch * cfg.epochs
    warmup_steps = min(total_steps, round(cfg.warmup_epochs * per_epoch))

    pop, net = runtime.network(configs, dev)
    # CUDA graphs reuse their output buffers: a new step must say so, or the last step's outputs would be overwritten
    step_begin = (torch.compiler.cudagraph_mark_step_begin if cfg.compile and dev.type == "cuda"
                  and hasattr(torch.compiler, "cudagraph_mark_step_begin") else lambda: None)
    opt = optim.build_optimizer(cfg.optimizer, pop.model, lr=cfg.lr, members=k, momentum=cfg.momentum,
                                weight_decay=cfg.weight_decay, betas=cfg.betas, eps=cfg.eps, ns_steps=cfg.ns_steps,
                                muon_aux_lr=cfg.muon_aux_lr)
    seeds = sorted({c.seed for c in configs})  # members with equal seeds draw the same minibatches
    order_gen = {s: torch.Generator().manual_seed(_stream_seed(s, "order")) for s in seeds}
    aug_gen = {s: torch.Generator(device=dev).manual_seed(_stream_seed(s, "augment")) for s in seeds}
    clocks = [metrics.ClockAccumulator(c.batch_size, c.weight_decay, metrics.lr_scale(c.optimizer, c.momentum))
              for c in configs]
    instruments = forgetting.Instruments(pop.weights, k, pop.layers)
    columns = [*record.HISTORY_COLUMNS, *metrics.EXTRA_CLOCKS, *(f"norm:{n}" for n in pop.layers),
               *instruments.columns()]
    live = torch.ones(k, device=dev)  # loss mask: 0 for diverged members
    st = {"alive": list(range(k)), "status": ["complete"] * k, "histories": [[] for _ in range(k)], "epoch": 0,
          "step": 0, "wall_time": 0.0}  # what the loop mutates besides tensors; wall_time: before this process
    folder = None if out_dir is None else checkpoint_folder(out_dir, section, configs)
    pid, shared = population_id(configs), shared_fields(cfg)

    def state() -> dict:
        return {"model": pop.model.state_dict(), "optimizer": opt.state_dict(),
                "order_gen": {s: g.get_state() for s, g in order_gen.items()},
                "aug_gen": {s: g.get_state() for s, g in aug_gen.items()},
                "clocks": [c.state_dict() for c in clocks], "instruments": instruments.state_dict(),
                "live": live.clone(), **st, "wall_time": st["wall_time"] + time.perf_counter() - t0}

    def restore(payload: dict) -> None:
        nonlocal started_at
        theirs = payload.get("config") if isinstance(payload.get("config"), dict) else {}
        if payload.get("population") != pid or payload.get("run_ids") != rids or theirs != shared:
            diff = sorted(k for k in {*shared, *theirs} if theirs.get(k) != shared.get(k))
            what = "run" if k == 1 else "population"
            raise CheckpointError(f"checkpoint of {what} {payload.get('population')!r} does not belong to {what} "
                                  f"{pid} (" + (f"config differs in {diff})" if diff else "its members differ)"))
        s = payload["state"]
        fresh, rng = copy.deepcopy((pop.model.state_dict(), opt.state_dict(), instruments.state_dict())), \
            _ckpt.rng_state()
        try:
            pop.model.load_state_dict(s["model"])
            opt.load_state_dict(s["optimizer"])
            for seed in seeds:
                order_gen[seed].set_state(s["order_gen"][seed])
                aug_gen[seed].set_state(s["aug_gen"][seed])
            for c, cs in zip(clocks, s["clocks"], strict=True):
                c.load_state_dict(cs)
            instruments.load_state_dict(s["instruments"])
            live.copy_(s["live"])
            _ckpt.set_rng_state(payload["rng"])
        except Exception as exc:  # noqa: BLE001 - shapes, devices, missing keys: this checkpoint is unusable here
            pop.model.load_state_dict(fresh[0])
            opt.load_state_dict(fresh[1])
            instruments.load_state_dict(fresh[2])
            _ckpt.set_rng_state(rng)
            raise CheckpointError(f"checkpoint of epoch {payload.get('epoch')!r} cannot be restored: "
                                  f"{type(exc).__name__}: {exc}") from None
        st.update({key: copy.deepcopy(s[key]) for key in ("alive", "status", "histories", "epoch", "step")})
        st["wall_time"] = float(s["wall_time"])
        started_at = str(payload.get("started_at") or started_at)

    @torch.no_grad()
    def measure(sums: torch.Tensor | None, lr: float) -> list[dict]:
        """Every member's row, read from the device in one sync."""
        pop.model.eval()
        parts = [torch.full((k, 2), math.nan, dtype=torch.float64, device=dev) if sums is None else sums / n]
        for x, y in evals:
            total = torch.zeros(k, 2, dtype=torch.float64, device=dev)
            for i in range(0, len(x), cfg.eval_batch_size):
                xb, yb = x[i:i + cfg.eval_batch_size], y[i:i + cfg.eval_batch_size]
                if cfg.compile and len(xb) < cfg.eval_batch_size:  # the tail padded to the compiled shape: in eval
                    xb = torch.cat([xb, xb.new_zeros(cfg.eval_batch_size - len(xb), *xb.shape[1:])])  # mode the
                if cfg.channels_last:  # rows are independent (BatchNorm uses its running stats), so padding is inert
                    xb = xb.contiguous(memory_format=torch.channels_last)
                step_begin()
                with runtime.autocast(cfg, dev):
                    out = net(xb)[:len(yb)].float()  # evaluation shares one 3-channel input across members
                total += torch.stack([pop.losses(out, yb, "sum"), pop.correct(out, yb)], 1).double()
            parts.append(total / len(x))
        norms = torch.stack([members.member_view(w, k).norm(dim=1) for w in pop.weights], 1).double()  # [K, L]
        parts += [norms.square().sum(1, keepdim=True).sqrt(), norms, instruments.read()]
        wall = st["wall_time"] + time.perf_counter() - t0
        rows = []
        for i, v in enumerate(torch.cat(parts, 1).tolist()):
            row = dict(epoch=st["epoch"], step=st["step"], lr=lr, train_loss=v[0], train_acc_running=v[1],
                       train_acc=v[3], val_loss=v[4], val_acc=v[5], test_loss=v[6], test_acc=v[7],
                       weight_norm=v[8], **clocks[i].totals(), wall_time=wall)
            row.update(zip(columns[len(row):], v[9:], strict=True))
            rows.append(row)
        return rows

    mode = _progress_mode(progress)
    say = (lambda line: print(line, flush=True)) if mode is not None else (lambda line: None)
    what = _label(cfg) if k == 1 else f"population of {k}: " + ", ".join(map(_label, configs))
    say(f"run {pid}: {what}; {cfg.arch} width={cfg.width:g} {cfg.optimizer} lr={cfg.lr:g} b={cfg.batch_size}, "
        f"{cfg.epochs} epochs x {per_epoch} steps on {dev} ({data.source}, {cfg.precision})")
    t0 = time.perf_counter()  # wall_time counts training and evaluation, not data loading or set-up
    hit = None
    if folder is not None and _ckpt.checkpoints(folder):
        hit = _ckpt.load_latest(folder, restore, report=say)
    if hit is None:
        for i, row in enumerate(measure(None, math.nan)):  # epoch 0: at initialisation, before any step
            st["histories"][i].append(row)
    else:
        t0 = time.perf_counter()
        say(f"run {pid}: resumed from {hit[1]} (epoch {hit[0]}/{cfg.epochs})")
    bar = None
    if mode == "bar":
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.epochs, initial=st["epoch"], desc=what if k == 1 else f"{k} runs", unit="epoch",
                   dynamic_ncols=True)
    try:
        while st["epoch"] < cfg.epochs and st["alive"]:
            pop.model.train()
            sums = torch.zeros(k, 2, dtype=torch.float64, device=dev)  # per member [loss * batch, correct]
            lr = math.nan
            for idxs in zip(*(_data.batches(n, cfg.batch_size, order_gen[s], device=dev) for s in seeds),
                            strict=True):
                if on_step is not None:
                    on_step(st["step"])
                factor = optim.lr_factor(cfg.schedule, st["step"], total_steps, warmup_steps, cfg.step_milestones,
                                         cfg.step_gamma)
                optim.set_lr_factor(opt, factor)
                lr = cfg.lr * factor  # the clocks run on the main lr (muon's aux AdamW lr is not a clock)
                xs = {}
                for s, idx in zip(seeds, idxs, strict=True):
                    xs[s] = splits.train_x[idx]
                    if cfg.augment:
                        xs[s] = _data.augment_batch(xs[s], aug_gen[s])
                x = pop.inputs([xs[c.seed] for c in configs] if len(seeds) > 1 else [xs[seeds[0]]])
                y = splits.train_y[idxs[0]] if len(seeds) == 1 else torch.stack(
                    [splits.train_y[idxs[seeds.index(c.seed)]] for c in configs], 1)
                if cfg.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                step_begin()
                with runtime.autocast(cfg, dev):
                    out = net(x).float()
                losses = pop.losses(out, y)
                opt.zero_grad(set_to_none=True)
                (losses * live).sum().backward()  # member j's gradient = its own mean loss's gradient
                instruments.before_step()
                opt.step()
                instruments.after_step()
                sums[:, 0] += losses.detach() * len(out)
                sums[:, 1] += pop.correct(out.detach(), y)
                for j in st["alive"]:
                    clocks[j].update(lr)
                st["step"] += 1
            st["epoch"] += 1
            if st["epoch"] % cfg.eval_every and st["epoch"] < cfg.epochs and torch.isfinite(sums).all():
                if bar is not None:
                    bar.update(1)
                continue  # not a measured epoch (a non-finite loss is measured at once)
            rows = measure(sums, lr)
            for j in list(st["alive"]):
                st["histories"][j].append(rows[j])
                if not all(math.isfinite(rows[j][c]) for c in _FINITE):
                    st["status"][j] = "diverged"
                    st["alive"].remove(j)
                    live[j] = 0.0
                    pop.silence(opt, j)
                if mode == "lines":
                    _report_line(rows[j], configs[j], st["status"][j], k)
            if folder is not None and cfg.checkpoint_every and st["epoch"] % cfg.checkpoint_every == 0 and st["alive"]:
                _ckpt.save(folder, st["epoch"], {"population": pid, "run_ids": rids, "config": shared,
                                                 "epoch": st["epoch"], "rng": _ckpt.rng_state(), "state": state(),
                                                 "started_at": started_at, "saved_at": _utcnow()})
            if bar is not None:
                r = rows[0]  # the postfix says what its numbers are: test accuracy in percent
                post = (f"test acc {100 * r['test_acc']:.1f} %, train acc {100 * r['train_acc']:.1f} %, loss "
                        f"{r['train_loss']:.3g}" if k == 1 else "test acc: " + ", ".join(
                            f"{_label(c)} {100 * x['test_acc']:.1f} %" for c, x in zip(configs, rows, strict=True))
                        + f"; {len(st['alive'])}/{k} alive")
                bar.set_postfix_str(post, refresh=False)
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return _finish(configs, rids, st, columns, prov, started_at, out_dir, section, folder)


def _finish(configs, rids, st, columns, prov, started_at, out_dir, section, folder) -> list[RunResult]:
    finished_at, out = _utcnow(), []
    for j, c in enumerate(configs):
        history = pd.DataFrame(st["histories"][j], columns=columns)
        summary = metrics.summarize_history(history)
        if st["status"][j] == "diverged":  # summarize_history sees only the train loss; an eval loss may go first
            summary["diverged_epoch"] = int(history["epoch"].iloc[-1])
        result = RunResult(c, rids[j], st["status"][j], history, summary, None, dict(prov), started_at, finished_at)
        if out_dir is not None:
            result.path = _results.write_run(result, out_dir, section)
        out.append(result)
    if folder is not None:  # every member's run.json is written: the member set never resumes
        _ckpt.clear(folder)
        if len(configs) > 1:
            with contextlib.suppress(OSError):
                folder.parent.rmdir()
                folder.parent.parent.rmdir()  # populations/, when no other population is unfinished
    return out


def _stats(row: dict) -> dict:
    return dict(loss=f"{row['train_loss']:.4g}", train=f"{row['train_acc']:.4f}", val=f"{row['val_acc']:.4f}",
                test=f"{row['test_acc']:.4f}", norm=f"{row['weight_norm']:.4g}", angle=f"{row['angle']:.1f}")


def _report_line(row: dict, config: TrainConfig, status: str, k: int) -> None:
    tail = "  DIVERGED" if status == "diverged" else ""
    who = f"run {run_id(config)}" + (f" ({_label(config)})" if k > 1 else "")
    print(f"{who} epoch {row['epoch']}/{config.epochs} " + " ".join(f"{a} {b}" for a, b in _stats(row).items())
          + f" {row['wall_time']:.1f}s{tail}", flush=True)


def time_steps(config: TrainConfig, steps: int = 5, warmup: int = 2, population: int = 1) -> float:
    """Median seconds per optimiser step of `config` (a population of `population` members at spread sigma_w),
    measured by this engine on synthetic data of the right shape: what the planner's throughput table holds."""
    dev = runtime.run_device(config)
    configs = [config.replace(sigma_w=0.1 + i, seed=0, data="synthetic", epochs=1, checkpoint_every=0, eval_every=1,
                              n_train=config.batch_size * (steps + warmup + 1), n_val=10, n_test=10,
                              train_eval_size=10, schedule="constant", warmup_epochs=0.0,
                              step_milestones=(0.5, 0.75), step_gamma=0.1) for i in range(population)]
    marks: list[float] = []

    def mark(step: int) -> None:  # at the start of every step: the gaps between marks are step times
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        marks.append(time.perf_counter())

    train(configs, progress=False, on_step=mark)
    gaps = sorted(b - a for a, b in zip(marks[warmup:], marks[warmup + 1:], strict=False))
    return gaps[len(gaps) // 2] if gaps else math.nan
