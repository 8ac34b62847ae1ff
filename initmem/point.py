"""Training a point: one configuration trained across sigma_w x seeds. This is what a section notebook calls.

A *point* is exactly what a spread is computed over, so the notebook trains it in one call (`run_point`), the results
tree makes the call idempotent (complete runs are skipped: a re-executed notebook only trains what is missing), and
`metrics.point_summary` turns its rows into the section's numbers. Its runs come from `config.point_configs`, the
function the sweep uses too, so run ids here and there agree.

Reliability: each run is trained under its run-folder lock (`initmem.locks`), so several processes can work on one
results tree at once (two sweeps, a local pool next to a Slurm array, a requeued job): a run locked by another
process is skipped at first and waited for at the end, and completion is re-checked once the lock is held. A damaged
run folder (one that fails `results.verify_run`) is moved aside, never deleted, and trained again; a record of an
older schema is not damaged: it stops the point with a ResultsError naming `initmem migrate`. A run that raises
is recorded in `<run folder>/failed.json`, the point goes on with the next run and raises a SweepError at the end;
the next call retries it (resuming from its checkpoints, if any). A user error (InitmemError: bad data, unwritable
folder) is the same for every run and stops at once.

Populations (`population=True`): the runs still to train are trained as one population (`train(list)`: one process,
one set of kernels per step), except a run another process holds (waited for as above) or one with checkpoints of
its own (resumed exactly by a single `train`). If the population raises, its runs fall back to the one-by-one path,
which records and retries failures as above: a population never loses a run. The fallback stays visible: each such
run's provenance holds `population_fallback` (the error), and the sweep's line for the point says so.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
import traceback
from pathlib import Path
from typing import Any

import pandas as pd

from initmem import checkpoint as _ckpt
from initmem import locks
from initmem import results as _results
from initmem.config import TrainConfig, check_members, point_configs, run_id
from initmem.errors import ConfigError, InitmemError, ResultsError, SweepError
from initmem.files import atomic_write
from initmem.train import train

FAILED = "failed.json"  # in a run folder: the last attempt raised; removed when the run completes


def run_point(params: dict[str, Any], *, results: str | Path | None = None, section: str | None = None,
              population: bool | None = None, progress: bool | None = None) -> pd.DataFrame:
    """Train every sigma_w x seed run of the point `params` describes (a notebook's `globals()`, or any mapping with
    `sigma_ws`, `seeds`, TrainConfig fields and optionally `results_dir`, `section`, `population`, `progress`; the
    keyword arguments win) that is not already complete under `results/section`; return the `load_runs` rows of
    exactly these runs, in (sigma_w, seed) order. A diverged run is a result (its row says so)."""
    if not isinstance(params, dict):
        raise ConfigError(f"params={type(params).__name__} is invalid: a mapping of parameters is accepted")
    configs = point_configs(params)
    results = params.get("results_dir", "results/adhoc") if results is None else results
    section = params.get("section", "adhoc") if section is None else section
    population = bool(params.get("population", True)) if population is None else population
    progress = bool(params.get("progress", True)) if progress is None else progress
    return train_point(configs, results=results, section=section, population=population, progress=progress)


def train_point(configs: list[TrainConfig], *, results: str | Path, section: str, population: bool = True,
                progress: bool = True) -> pd.DataFrame:
    """`run_point` for an explicit list of configs (one point: they differ only in sigma_w and seed)."""
    configs = check_members(configs)
    if not isinstance(section, str) or not section or section != Path(section).name or section.startswith("."):
        raise ConfigError(f"section={section!r} is invalid: a plain folder name is accepted")
    for c in configs:  # a damaged folder would pass for a run in progress: move it aside, then train it again
        folder = _results.run_dir(results, section, c)
        if (folder / "run.json").exists():
            try:
                _results.verify_run(folder)
            except ResultsError as exc:
                if _results.other_schema(folder) is not None:
                    raise  # readable, only older: `initmem migrate` upgrades it; never retrained
                print(f"{_name(c)}: {exc}; moved aside to {_results.set_aside(folder)} and trained again", flush=True)
    todo = [c for c in configs if not _results.is_complete(results, section, c)]
    done = [c for c in configs if c not in todo]
    if done:
        print(f"skipping {len(done)} complete run(s): " + ", ".join(map(_name, done)), flush=True)
    fallback: dict[str, str] = {}  # run id -> why its population failed: kept in the run's provenance
    if population and len(todo) > 1:
        todo = _train_population(todo, results, section, progress, fallback)
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
            _train_locked(c, results, section, progress, f"[{i}/{len(todo)}]", failed, fallback.get(run_id(c)))
    for i, c in waiting:
        folder = _results.run_dir(results, section, c)
        print(f"[{i}/{len(todo)}] {_name(c)}: waiting for {locks.holder(folder)} to finish it", flush=True)
        with locks.wait_lock(folder):
            _train_locked(c, results, section, progress, f"[{i}/{len(todo)}]", failed, fallback.get(run_id(c)))
    if failed:
        raise SweepError(f"{len(failed)} of {len(configs)} run(s) of section {section!r} failed: "
                         + "; ".join(f"{_name(c)}: {e}" for c, e in failed)
                         + f"; each is recorded in its run folder's {FAILED} and retried by the next call")
    return pd.concat([_results.load_runs(_results.run_dir(results, section, c)) for c in configs], ignore_index=True)


def _train_population(todo: list[TrainConfig], results: str | Path, section: str, progress: bool,
                      fallback: dict[str, str]) -> list[TrainConfig]:
    """Train what of `todo` one population can take; return the runs left for the one-by-one path (all of `todo`
    when no population of two or more members is possible, or when it raised: then `fallback` maps each member's
    run id to the error, which the one-by-one path records in the run's provenance)."""
    rest, members = [], []
    with contextlib.ExitStack() as held:
        for c in todo:
            folder = _results.run_dir(results, section, c)
            if _ckpt.checkpoints(_ckpt.folder_of(folder)):  # a single run cut short: its own resume is exact
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
        print(f"training {len(members)} runs as one population: " + ", ".join(map(_name, members)), flush=True)
        try:
            train(members, out_dir=results, section=section, progress=progress, locked=True)
        except InitmemError:
            raise  # a user error is the same for every run: the one-by-one path would only repeat it
        except Exception as exc:  # noqa: BLE001 - the one-by-one path trains them, recording what fails
            message = f"{type(exc).__name__}: " + (str(exc).strip().splitlines() or [""])[0]
            print(f"the population failed ({message}); training its runs one after the other", flush=True)
            fallback.update({run_id(c): message for c in members})
            return [c for c in todo if c in rest or c in members]
    for c in members:
        (_results.run_dir(results, section, c) / FAILED).unlink(missing_ok=True)
    return [c for c in todo if c in rest]


def _name(c: TrainConfig) -> str:
    return f"sigma_w={c.sigma_w:g} seed={c.seed} ({run_id(c)})"


def _train_locked(c: TrainConfig, results: str | Path, section: str, progress: bool, tag: str,
                  failed: list, fallback: str | None = None) -> None:
    """Train one run whose lock this process holds, unless another process completed it meanwhile; `fallback`: why
    its population failed (recorded in its provenance as `population_fallback`)."""
    folder = _results.run_dir(results, section, c)
    if _results.is_complete(results, section, c):
        print(f"{tag} {_name(c)}: completed by another process meanwhile", flush=True)
        return
    before = _read_failed(folder)
    if progress or before:
        again = f" (retrying: attempt {before['attempts']} failed with {before['error']})" if before else ""
        print(f"{tag} {_name(c)}{again}", flush=True)
    try:
        train(c, out_dir=results, section=section, progress=progress, locked=True,
              notes={"population_fallback": fallback} if fallback else None)
    except Exception as exc:  # noqa: BLE001 - recorded; a user error stops the point, anything else is retried later
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
    record = {"run_id": run_id(c), "section": section, "sigma_w": c.sigma_w, "seed": c.seed, "error": message,
              "attempts": attempts, "host": socket.gethostname(), "pid": os.getpid(),
              "failed_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
              "traceback": traceback.format_exception(exc)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / FAILED, json.dumps(record, indent=2, default=str) + "\n")
    except OSError:
        pass
