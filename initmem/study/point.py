"""Training a point (`run_point`): its missing runs, those the tree already holds elsewhere served (`store.serve`),
the others as one population or one by one under their locks; a run that raises is recorded and retried later, a
user error stops at once, a failed population falls back to one by one (`population_fallback` in each run's
provenance). A run another process trains is waited for after the others, or, in a local sweep's kernel
(`PointDeferred.env`), the point is deferred so that the sweep trains other points meanwhile."""

import contextlib
import os
from pathlib import Path
from typing import Any

import pandas as pd

from initmem.config import TrainConfig, check_members, point_configs
from initmem.engine.trainer import train
from initmem.errors import ConfigError, InitmemError, PointDeferred, SweepError
from initmem.store.folders import FAILED, Run, RunFolders
from initmem.store.serve import serve


def run_point(params: dict[str, Any], *, results: str | Path | None = None, section: str | None = None,
              population: bool | None = None, progress: bool | None = None) -> pd.DataFrame:
    """Train the missing sigma_w x seed runs of the point `params` describes (a notebook's `globals()`; the keywords
    override its `results_dir`, `section`, `population`, `progress`); its runs' `load_runs` rows, diverged ones too."""
    if not isinstance(params, dict):
        raise ConfigError(f"params={type(params).__name__} is invalid: a mapping of parameters is accepted")
    return train_point(point_configs(params),
                       results=params.get("results_dir", "results/adhoc") if results is None else results,
                       section=params.get("section", "adhoc") if section is None else section,
                       population=bool(params.get("population", True)) if population is None else population,
                       progress=bool(params.get("progress", True)) if progress is None else progress)


def train_point(configs: list[TrainConfig], *, results: str | Path, section: str, population: bool = True,
                progress: bool = True, defer: bool | None = None) -> pd.DataFrame:
    """`run_point` for an explicit list of configs (one point: they differ only in sigma_w and seed). Runs another
    process holds are waited for once the others are trained; with `defer` (default: `PointDeferred.env` is "1")
    the point raises PointDeferred instead, its free runs trained, so that a sweep can train other points meanwhile."""
    configs = check_members(configs)
    defer = os.environ.get(PointDeferred.env) == "1" if defer is None else defer
    owner = RunFolders(results, section)
    runs = [owner.run(c) for c in configs]  # each run's id, once
    for r, why in owner.set_aside_damaged(runs):
        print(f"{_name(r)}: {why} and trained again", flush=True)
    todo = [r for r in runs if not r.is_complete()]
    if done := [r for r in runs if r not in todo]:
        print(f"skipping {len(done)} complete run(s): " + ", ".join(map(_name, done)), flush=True)
    todo = [r for r in todo if not _served(r)]  # trained once in the tree: copied, not trained again
    fallback: dict[str, str] = {}  # run id -> why its population failed: kept in the run's provenance
    if population and len(todo) > 1:
        todo = _train_population(todo, owner, progress, fallback)
    waiting, failed = [], []
    for i, r in enumerate(todo, 1):
        tag = f"[{i}/{len(todo)}]"
        if (lock := r.lock()) is None:  # another process is training it: do the others first, then wait for it
            then = "the point is deferred after" if defer else "will wait for it after"
            print(f"{tag} {_name(r)}: locked by {r.holder()} (training it); {then} the other runs", flush=True)
            waiting.append((tag, r))
            continue
        with lock:
            _train_locked(r, owner, progress, tag, failed, fallback.get(r.run_id))
    held = [f"{_name(r)} by {r.holder()}" for _, r in waiting if not r.is_complete()] if defer else []
    if held and not failed:  # the ones finished meanwhile are not named
        raise PointDeferred(f"{len(held)} run(s) of this point are being trained by another process ("
                            + "; ".join(held[:2]) + (f"; and {len(held) - 2} more" if len(held) > 2 else "")
                            + "): deferred, so that the sweep trains its other points first and then waits for them")
    for tag, r in waiting:
        print(f"{tag} {_name(r)}: waiting for {r.holder()} to finish it", flush=True)
        with r.lock(wait=True):
            _train_locked(r, owner, progress, tag, failed, fallback.get(r.run_id))
    if failed:
        raise SweepError(f"{len(failed)} of {len(configs)} run(s) of section {section!r} failed: "
                         + "; ".join(f"{_name(r)}: {e}" for r, e in failed)
                         + f"; each is recorded in its run folder's {FAILED} and retried by the next call")
    return owner.load(runs)


def _train_population(todo: list[Run], owner: RunFolders, progress: bool, fallback: dict[str, str]) -> list[Run]:
    """Train what of `todo` one population can take; the runs left for one by one (`fallback`: run id -> its error)."""
    rest, members = [], []
    with contextlib.ExitStack() as held:
        for r in todo:
            # a single run cut short resumes exactly on its own; one another process trains is waited for
            if r.has_checkpoints() or (lock := r.lock()) is None:
                rest.append(r)
                continue
            held.enter_context(lock)
            if not r.is_complete():
                members.append(r)
        left = [r for r in todo if r in rest or r in members]  # for the one-by-one path, unless a population trains
        if len(members) < 2:
            return left
        print(f"training {len(members)} runs as one population: " + ", ".join(map(_name, members)), flush=True)
        try:
            train([r.config for r in members], out_dir=owner.results, section=owner.section, progress=progress,
                  locked=True)
        except InitmemError:
            raise  # a user error is the same for every run: the one-by-one path would only repeat it
        except Exception as exc:  # noqa: BLE001 - the one-by-one path trains them, recording what fails
            print(f"the population failed ({_line(exc)}); training its runs one after the other", flush=True)
            fallback.update({r.run_id: _line(exc) for r in members})
            return left
    for r in members:
        r.clear_failed()
    return [r for r in todo if r in rest]


def _served(r: Run, tag: str = "") -> bool:
    """Whether `r` was served from another section's run or a longer run's first epochs (`store.serve`), said so."""
    if (came := serve(r)) is not None:
        print(f"{tag}{' ' if tag else ''}{_name(r)}: served from {came.name} (trained once, not again)", flush=True)
    return came is not None


def _name(r: Run) -> str:
    return f"sigma_w={r.config.sigma_w:g} seed={r.config.seed} ({r.run_id})"


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: " + (str(exc).strip().splitlines() or [""])[0]


def _train_locked(r: Run, owner: RunFolders, progress: bool, tag: str, failed: list,
                  fallback: str | None = None) -> None:
    """Train one run whose lock this process holds, unless done meanwhile (`fallback`: why its population failed)."""
    if r.is_complete():
        print(f"{tag} {_name(r)}: completed by another process meanwhile", flush=True)
        return
    if _served(r, tag):
        return
    before = r.failed()
    if progress or before:
        again = f" (retrying: attempt {before['attempts']} failed with {before['error']})" if before else ""
        print(f"{tag} {_name(r)}{again}", flush=True)
    try:
        train(r.config, out_dir=owner.results, section=owner.section, progress=progress, locked=True,
              notes={"population_fallback": fallback} if fallback else None)
    except Exception as exc:  # noqa: BLE001 - recorded; a user error stops the point, anything else is retried later
        marker = r.mark_failed(exc, _line(exc), (before or {}).get("attempts", 0) + 1)
        if isinstance(exc, InitmemError):
            raise
        print(f"{tag} {_name(r)}: failed with {_line(exc)}; recorded in {marker}", flush=True)
        failed.append((r, _line(exc)))
        return
    r.clear_failed()
