"""The training engine: one loop for a run and for a population of K runs differing only in sigma_w and seed, each
member equal to its separate run (its own initialisation, data order, augmentation stream, BatchNorm statistics,
optimiser state, clocks and divergence). Airbench-style: the splits live on the device, minibatches are index
gathers, and an epoch reads nothing back to the host but its one measurement. The state is
`initmem.engine.loop.Loop`; here, the steps (`_build`, `_resume`, `_epoch`, `_finish`).

`train` asks the section's `RunFolders` everything about folders: the members' locks, where the member set
checkpoints, writing each run, clearing the checkpoints once every run.json is written. Checkpoints (every
`checkpoint_every` epochs, one format for K = 1 and K > 1) resume exactly from the newest valid one of the same member
set; one whose generators were written on another device type is refused in one line before any step, its files
kept. `time_steps`: the median seconds per step the planner's throughput tables hold."""

import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from initmem.config import TrainConfig, check_members, field_error, shared_fields
from initmem.data import splits as _data
from initmem.engine import checkpoint as _ckpt
from initmem.engine import members, runtime
from initmem.engine.loop import Loop
from initmem.engine.loop import generator_device as _gen_device
from initmem.errors import CheckpointError
from initmem.store.folders import Run, RunFolders, population_id
from initmem.store.provenance import provenance, utcnow
from initmem.store.record import run_summary
from initmem.store.results import RunResult


def _progress_mode(progress: bool) -> str | None:
    """None, "bar" (tqdm: a terminal or a Jupyter kernel) or "lines" (papermill and logs, where a bar does not
    advance); `INITMEM_PROGRESS=lines|bar|off` decides first (initmem's notebook runner sets lines)."""
    env = os.environ.get("INITMEM_PROGRESS", "").strip().lower()
    if not progress or env in ("off", "0", "none"):
        return None
    if env in ("lines", "bar"):
        return env
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)
    # a running Jupyter kernel (where tqdm.auto renders a bar), not merely an imported IPython
    return "bar" if sys.stderr.isatty() or type(shell()).__name__ == "ZMQInteractiveShell" else "lines"


def _label(c: TrainConfig) -> str:
    return f"sigma_w={c.sigma_w:g} seed={c.seed}"


def train(configs: TrainConfig | list[TrainConfig], *, out_dir: str | Path | None = None, section: str = "adhoc",
          progress: bool = True, locked: bool = False, on_step=None,
          notes: dict | None = None) -> RunResult | list[RunResult]:
    """Train one run, or a population (configs differing only in sigma_w and seed) as one computation: its RunResult,
    or one per member; a member whose row is not finite is "diverged" there, the others go on. With `out_dir`, member j
    is written to `out_dir/section/run_id_j/` under its lock (`locked`: the caller holds it), checkpointed, resumed.
    `on_step(step)` runs before every optimiser step (`time_steps`); `notes`: extra provenance of every member."""
    single = isinstance(configs, TrainConfig)
    configs = check_members([configs] if single else configs)
    owner = RunFolders(out_dir, section)  # out_dir None: an owner that keeps nothing
    runs = [owner.run(c) for c in configs]  # each member's run id, once
    runtime.run_device(configs[0])  # a bad device fails before anything is created on disk
    if out_dir is not None:
        owner.writable()
    with owner.lock_all([] if locked or out_dir is None else runs):
        out = _train(runs, owner, progress, on_step, notes)
    return out[0] if single else out


@dataclass
class _Run:
    """What the loop of one call does not change: who trains, where it is recorded, how it reports."""

    runs: list[Run]
    configs: list[TrainConfig]
    rids: list[str]
    pid: str  # the population's id (a single run's too)
    dev: torch.device
    prov: dict
    started_at: str
    owner: RunFolders
    folder: Path | None  # of the checkpoints
    mode: str | None  # progress: None, "bar" or "lines"

    def say(self, line: str) -> None:
        if self.mode is not None:
            print(line, flush=True)


def _train(runs: list[Run], owner: RunFolders, progress: bool, on_step=None,
           notes: dict | None = None) -> list[RunResult]:
    run, loop = _build(runs, owner, progress, notes)
    configs = run.configs
    k, cfg = len(configs), configs[0]
    what = _label(cfg) if k == 1 else f"population of {k}: " + ", ".join(map(_label, configs))
    run.say(f"run {run.pid}: {what}; {cfg.arch} width={cfg.width:g} {cfg.optimizer} lr={cfg.lr:g} "
            f"b={cfg.batch_size}, {cfg.epochs} epochs x {loop.steps_per_epoch} steps on "
            f"{run.dev} ({run.prov['data_source']}, {cfg.precision})")
    loop.t0 = time.perf_counter()  # wall_time counts training and evaluation, not data loading or set-up
    if not _resume(run, loop):
        for history, row in zip(loop.histories, loop.measure(None, math.nan), strict=True):
            history.append(row)  # epoch 0: at initialisation, before any step (no train loss yet)
    bar = None
    if run.mode == "bar":
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.epochs, initial=loop.epoch, desc=what if k == 1 else f"{k} runs", unit="epoch",
                   dynamic_ncols=True)
    try:
        while loop.epoch < cfg.epochs and loop.alive:
            _epoch(run, loop, on_step, bar)
    finally:
        if bar is not None:
            bar.close()
    return _finish(run, loop)


def _build(runs: list[Run], owner: RunFolders, progress: bool, notes: dict | None) -> tuple[_Run, Loop]:
    """Settings, data and the loop at epoch 0, every tensor of it checked to be on the run's device."""
    configs, rids = [r.config for r in runs], [r.run_id for r in runs]
    cfg, k = configs[0], len(configs)
    dev = runtime.run_device(cfg)
    if dev.type == "cpu" and k > 1:
        members.tune_malloc()
    started_at = utcnow()
    synthetic_sizes = (cfg.n_val + (cfg.n_train or 2000), cfg.n_test or 500)  # synthetic data: as the splits ask
    data = _data.load_cifar10(cfg.data_root, cfg.data, progress=progress, synthetic_sizes=synthetic_sizes)
    splits = _data.make_splits(data, cfg.n_val, cfg.n_train, cfg.n_test, cfg.split_seed, dev, cfg.train_eval_size,
                               cfg.full_test)
    n = len(splits.train_y)
    if cfg.batch_size > n:  # TrainConfig cannot know the data size: caught here, before any step
        raise field_error("batch_size", cfg.batch_size, f"at most the training split's size {n} (n_train) is accepted")
    # the numerics after the data's checks: torch.use_deterministic_algorithms imports inductor (~3 s), which a
    # refused archive need not wait for
    prov = {**provenance(str(dev)), **runtime.engine_settings(cfg, dev), "data_source": data.source,
            "data_hash": data.content_hash, **({"population": k} if k > 1 else {}), **(notes or {})}
    loop = Loop.build(configs, dev, splits)
    loop.check_device()
    return _Run(runs, configs, rids, population_id(rids), dev, prov, started_at, owner, owner.checkpoint_folder(runs),
                _progress_mode(progress)), loop


def _resume(run: _Run, loop: Loop) -> bool:
    """Continue from the newest usable checkpoint of this member set (all or nothing); whether one was used."""
    if run.folder is None:
        return False
    pid, rids, shared, k = run.pid, run.rids, shared_fields(run.configs[0]), len(run.configs)

    def restore(payload: dict) -> None:
        theirs = payload.get("config") if isinstance(payload.get("config"), dict) else {}
        if payload.get("population") != pid or payload.get("run_ids") != rids or theirs != shared:
            diff = sorted(key for key in {*shared, *theirs} if theirs.get(key) != shared.get(key))
            what = "run" if k == 1 else "population"
            raise CheckpointError(f"checkpoint of {what} {payload.get('population')!r} does not belong to {what} "
                                  f"{pid} (" + (f"config differs in {diff})" if diff else "its members differ)"))
        _same_generators(payload, run, loop)
        try:
            loop.load_state_dict(payload["state"], payload["rng"])
        except Exception as exc:  # noqa: BLE001 - shapes, devices, missing keys: this checkpoint is unusable here
            raise CheckpointError(f"checkpoint of epoch {payload.get('epoch')!r} cannot be restored: "
                                  f"{type(exc).__name__}: {exc}") from None
        run.started_at = str(payload.get("started_at") or run.started_at)

    hit = _ckpt.load_latest(run.folder, restore, report=run.say)
    if hit is not None:
        loop.check_device()
        run.say(f"run {pid}: resumed from {hit[1]} (epoch {hit[0]}/{run.configs[0].epochs})")
    return hit is not None


def written_on(payload: dict) -> str | None:
    """The device type whose generators a checkpoint holds: its "generator_device", or, in a checkpoint written before
    that key, what its augmentation generator states are (16 bytes: CUDA's Philox seed and offset; the CPU's: 5,056)."""
    if isinstance(payload.get("generator_device"), str):
        return torch.device(payload["generator_device"]).type
    states = (payload.get("state") or {}).get("aug_gen") or {}
    sizes = {t.numel() for t in states.values() if isinstance(t, torch.Tensor)}
    return "cuda" if sizes == {16} else "cpu" if sizes else None


def _same_generators(payload: dict, run: _Run, loop: Loop) -> None:
    """ConfigError (one line, before any step) when the checkpoint's generators cannot continue on this device: a
    CUDA generator's state does not load into a CPU one nor back, and re-seeding them would not resume exactly."""
    theirs, ours = written_on(payload), _gen_device(run.dev).type
    if theirs is not None and theirs != ours:
        raise field_error("device", run.configs[0].device, f"this run's checkpoint {str(run.folder)!r} (epoch "
                          f"{payload.get('epoch')!r}) was written on {theirs}, and its augmentation generators "
                          f"cannot continue on {run.dev}: a device of type {theirs} resumes it exactly; or remove that "
                          "folder to train the run again from epoch 0 here")


def _epoch(run: _Run, loop: Loop, on_step, bar) -> None:
    """One epoch; at a measured one (eval_every, the last, a non-finite loss) its rows, progress and checkpoint."""
    cfg, k = loop.cfg, loop.k
    sums, lr = loop.run_epoch(on_step)
    if not loop.epoch % cfg.eval_every or loop.epoch >= cfg.epochs or not torch.isfinite(sums).all():
        rows = loop.measure(sums, lr)
        for j in loop.record(rows):
            if run.mode == "lines":
                r, c = rows[j], run.configs[j]
                print(f"run {run.rids[j]}" + (f" ({_label(c)})" if k > 1 else "") + f" epoch {r['epoch']}/{c.epochs} "
                      f"loss {r['train_loss']:.4g} train {r['train_acc']:.4f} val {r['val_acc']:.4f} test "
                      f"{r['test_acc']:.4f} norm {r['weight_norm']:.4g} angle {r['angle']:.1f} {r['wall_time']:.1f}s"
                      + ("  DIVERGED" if loop.status[j] == "diverged" else ""), flush=True)
        if run.folder is not None and cfg.checkpoint_every and loop.epoch % cfg.checkpoint_every == 0 and loop.alive:
            _ckpt.save(run.folder, loop.epoch, {
                "population": run.pid, "run_ids": run.rids, "config": shared_fields(cfg), "epoch": loop.epoch,
                "generator_device": str(_gen_device(run.dev)),
                "rng": _ckpt.rng_state(), "state": loop.state_dict(), "started_at": run.started_at,
                "saved_at": utcnow()})
        if bar is not None:
            r = rows[0]  # the postfix says what its numbers are: test accuracy in percent
            bar.set_postfix_str(f"test acc {100 * r['test_acc']:.1f} %, train acc {100 * r['train_acc']:.1f} %, "
                                f"loss {r['train_loss']:.3g}" if k == 1 else "test acc: " + ", ".join(
                                    f"{_label(c)} {100 * x['test_acc']:.1f} %" for c, x in
                                    zip(run.configs, rows, strict=True)) + f"; {len(loop.alive)}/{k} alive",
                                refresh=False)
    if bar is not None:
        bar.update(1)


def _finish(run: _Run, loop: Loop) -> list[RunResult]:
    finished_at, out, columns = utcnow(), [], loop.columns()
    for j, c in enumerate(run.configs):
        history = pd.DataFrame(loop.histories[j], columns=columns)
        result = RunResult(c, run.rids[j], loop.status[j], history, run_summary(history, loop.status[j]), None,
                           dict(run.prov), run.started_at, finished_at)
        result.path = run.owner.write(result)
        out.append(result)
    run.owner.finish(run.runs)
    return out


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
