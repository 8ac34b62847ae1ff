"""One sweep point: a configuration trained across sigma_w × seeds. This is what a section notebook calls.

A point is exactly what a spread is computed over, so the notebook trains it in one call, the results tree makes
the call idempotent (complete runs are skipped: a re-executed notebook only trains what is missing), and
`point_summary` turns its rows into the numbers the section reports.

Reliability: each run is trained under its run-folder lock (`initmem.locks`), so several processes can work on one
results tree at once (two sweeps, a local pool next to a Slurm array, a requeued job): a run locked by another
process is skipped at first and waited for at the end, and completion is re-checked once the lock is held. A run
that raises is recorded in `<run folder>/failed.json`, the sweep goes on with the next run and raises a SweepError
at the end; the next call retries it (resuming from its checkpoints, if any) and removes the record once it
completes. A user error (InitmemError: bad data, unwritable folder) is the same for every run and stops the sweep
at once.

Ensembles (`ensemble=True`): the runs still to train are trained as one batched `initmem.ensemble` (one process,
one set of kernels per step; each member's history equals its separate run's within float rounding), except a run
another process holds (waited for as above) or one with checkpoints of its own (resumed by `train`, which is
exact). If the ensemble cannot be built or raises, its runs fall back to the one-by-one path, which records and
retries failures as above: an ensemble never loses a run.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
import traceback
import warnings
from pathlib import Path

import pandas as pd

from initmem import checkpoint as _ckpt
from initmem import ensemble as _ensemble
from initmem import locks
from initmem import results as _results
from initmem.errors import ConfigError, InitmemError, ResultsError, SweepError
from initmem.train import TrainConfig, train

FAILED = "failed.json"  # in a run folder: the last attempt raised; removed when the run completes


def _configs(base: TrainConfig, sigma_ws: list[float], seeds: list[int]) -> list[TrainConfig]:
    if isinstance(sigma_ws, (str, bytes)) or not isinstance(sigma_ws, (list, tuple)) or not sigma_ws:
        raise ConfigError(f"sigma_ws={sigma_ws!r} is invalid: a non-empty list of positive reals is accepted")
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, (list, tuple)) or not seeds:
        raise ConfigError(f"seeds={seeds!r} is invalid: a non-empty list of integers >= 0 is accepted")
    configs = [base.replace(sigma_w=s, seed=seed) for s in sigma_ws for seed in seeds]  # each one validated
    ids = [_results.run_id(c) for c in configs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"sigma_ws={list(sigma_ws)!r}, seeds={list(seeds)!r} are invalid: they repeat a run; "
                          "distinct values are accepted")
    return configs


def run_sigma_sweep(base: TrainConfig | dict, *, sigma_ws: list[float], seeds: list[int] = (0,),
                    results: str | Path, section: str, ensemble: bool = False, progress: bool = True) -> pd.DataFrame:
    """Train `base` at every sigma_w × seed that is not already complete under `results/section`, each under its
    run lock, sequentially or (`ensemble=True`) as one batched ensemble; return the `load_runs` rows of exactly
    these runs (in sigma_w, seed order). A diverged run is a result (its row says so) and the sweep goes on; a run
    that raises is recorded (failed.json), the others still run, and a SweepError naming the failures is raised at
    the end (see the module docstring)."""
    base = TrainConfig.from_dict(base) if isinstance(base, dict) else base
    if not isinstance(base, TrainConfig):
        raise ConfigError(f"base={type(base).__name__} is invalid: a TrainConfig or a dict of its fields is accepted")
    configs = _configs(base, sigma_ws, seeds)
    todo = [c for c in configs if not _results.is_complete(results, section, c)]
    done = [c for c in configs if c not in todo]
    if done:
        print(f"skipping {len(done)} complete run(s): "
              + ", ".join(f"sigma_w={c.sigma_w:g} seed={c.seed} ({_results.run_id(c)})" for c in done), flush=True)
    if ensemble and len(todo) > 1:
        todo = _train_as_ensemble(todo, results, section, progress)
    waiting, failed = [], []
    for i, c in enumerate(todo, 1):
        folder = _results.run_dir(results, section, c)
        lock = locks.try_lock(folder)
        if lock is None:  # another process is training it: do the others first, then wait for it
            print(f"[{i}/{len(todo)}] {_name(c)}: locked by {locks.holder(folder)} (training it); "
                  "will wait for it after the other runs", flush=True)
            waiting.append((i, c))
            continue
        with lock:
            _train_locked(c, results, section, progress, f"[{i}/{len(todo)}]", failed)
    for i, c in waiting:
        folder = _results.run_dir(results, section, c)
        print(f"[{i}/{len(todo)}] {_name(c)}: waiting for {locks.holder(folder)} to finish it", flush=True)
        with locks.wait_lock(folder):
            _train_locked(c, results, section, progress, f"[{i}/{len(todo)}]", failed)
    if failed:
        raise SweepError(f"{len(failed)} of {len(configs)} run(s) of section {section!r} failed: "
                         + "; ".join(f"{_name(c)}: {e}" for c, e in failed)
                         + f"; each is recorded in its run folder's {FAILED} and retried by the next call")
    frames = [_results.load_runs(_results.run_dir(results, section, c)) for c in configs]
    return pd.concat(frames, ignore_index=True)


def _train_as_ensemble(todo: list[TrainConfig], results: str | Path, section: str,
                       progress: bool) -> list[TrainConfig]:
    """Train what of `todo` one ensemble can take; return the runs left for the one-by-one path (all of `todo`
    when no ensemble of two or more members is possible, or when the ensemble raised)."""
    try:
        _ensemble.check_members(todo)
    except ConfigError as exc:  # not expected within a point (its runs differ only in sigma_w and seed)
        print(f"no ensemble: {exc}; training the runs one after the other", flush=True)
        return todo
    rest, members = [], []
    with contextlib.ExitStack() as held:
        for c in todo:
            folder = _results.run_dir(results, section, c)
            if _ckpt.checkpoints(_ckpt.folder_of(folder)):  # a separate run cut short: its resume is exact
                rest.append(c)
                continue
            lock = locks.try_lock(folder)
            if lock is None:  # another process trains it: the one-by-one path waits for it
                rest.append(c)
                continue
            held.enter_context(lock)
            if not _results.is_complete(results, section, c):
                members.append(c)
        if len(members) < 2:
            return [c for c in todo if c in rest or c in members]
        print(f"training {len(members)} runs as one ensemble: " + ", ".join(map(_name, members)), flush=True)
        try:
            _ensemble.train_ensemble(members, out_dir=results, section=section, progress=progress, locked=True)
        except Exception as exc:  # noqa: BLE001 - the one-by-one path trains them, recording what fails
            message = f"{type(exc).__name__}: " + (str(exc).strip().splitlines() or [""])[0]
            print(f"the ensemble failed ({message}); training its runs one after the other", flush=True)
            return [c for c in todo if c in rest or c in members]
    for c in members:
        (_results.run_dir(results, section, c) / FAILED).unlink(missing_ok=True)
    return [c for c in todo if c in rest]


def _name(c: TrainConfig) -> str:
    return f"sigma_w={c.sigma_w:g} seed={c.seed} ({_results.run_id(c)})"


def _train_locked(c: TrainConfig, results: str | Path, section: str, progress: bool, tag: str,
                  failed: list) -> None:
    """Train one run whose lock this process holds, unless another process completed it meanwhile."""
    folder = _results.run_dir(results, section, c)
    if _results.is_complete(results, section, c):
        print(f"{tag} {_name(c)}: completed by another process meanwhile", flush=True)
        return
    if (folder / "run.json").exists():  # present but not valid: say so, then train it again
        try:
            _results.read_run(folder)
        except ResultsError as exc:
            warnings.warn(f"{exc}; training the run again", stacklevel=3)
            print(f"{tag} {_name(c)}: {exc}; training the run again", flush=True)
    before = _read_failed(folder)
    if progress or before:
        again = f" (retrying: attempt {before['attempts']} failed with {before['error']})" if before else ""
        print(f"{tag} {_name(c)}{again}", flush=True)
    try:
        train(c, out_dir=results, section=section, progress=progress)
    except Exception as exc:  # noqa: BLE001 - recorded; a user error stops the sweep, anything else is retried later
        message = f"{type(exc).__name__}: " + (str(exc).strip().splitlines() or [""])[0]
        _write_failed(folder, c, section, exc, message, (before or {}).get("attempts", 0) + 1)
        if isinstance(exc, InitmemError):
            raise
        print(f"{tag} {_name(c)}: failed with {message}; recorded in {folder / FAILED}", flush=True)
        failed.append((c, message))
        return
    (folder / FAILED).unlink(missing_ok=True)


def _read_failed(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / FAILED).read_text(encoding="utf-8"))
        return record if isinstance(record, dict) and isinstance(record.get("attempts"), int) else None
    except (OSError, ValueError):
        return None


def _write_failed(folder: Path, c: TrainConfig, section: str, exc: BaseException, message: str,
                  attempts: int) -> None:
    """Best effort: a folder that cannot take the record must not hide the original error."""
    record = {"run_id": _results.run_id(c), "section": section, "sigma_w": c.sigma_w, "seed": c.seed,
              "error": message, "attempts": attempts, "host": socket.gethostname(), "pid": os.getpid(),
              "failed_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
              "traceback": traceback.format_exception(exc)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _results._atomic_write(folder / FAILED, json.dumps(record, indent=2, default=str) + "\n")
    except OSError:
        pass
