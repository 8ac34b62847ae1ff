"""The results tree: one folder per run, `<results>/<section>/<run_id>/{history.csv, run.json}`.

history.csv is written first and run.json last, each atomically (temp file, fsync, rename); run.json records the
history's sha256, row count and columns. A run is trusted only when it verifies as a whole (`verify_run`): the
record's keys and types, its folder is `<section>/<run_id(config)>`, the history matches the record and the summary
has every key. A run that fails is *damaged*: the loaders raise a ResultsError naming its file (or, with
`damaged="skip"`, warn, skip it and list it in `df.attrs["damaged"]`), `is_complete` is False for it and
`set_aside` moves it out of the way, deleting nothing. What a valid record is: `initmem.record`. Schema-1 records
(no checksum) are upgraded by `migrate`.
Torch-free: reading results imports neither torch nor the training stack.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from initmem.config import TrainConfig, run_id
from initmem.errors import ConfigError, ResultsError
from initmem.files import atomic_write, ensure_writable
from initmem.metrics import SUMMARY_KEYS
from initmem.provenance import portable
from initmem.record import (
    CONFIG_FIELDS,
    HISTORY_COLUMNS,
    SCHEMA,
    check_record,
    dumps_record,
    frame_problem,
    full_config,
    history_meta,
    parse_record,
    read_history,
    record_error,
    verify_record,
)

__all__ = ["RunResult", "run_id", "run_dir", "write_run", "read_run", "verify_run", "is_complete", "load_runs",
           "load_histories", "set_aside", "other_schema", "older_records", "tidy_copies"]

RUN_COLUMNS = ("run_id", "section", "status", "path")
PROVENANCE_COLUMNS = ("git_commit", "git_dirty", "data_source", "data_hash")  # load_runs' columns from provenance
HISTORY_CONFIG_COLUMNS = ("arch", "width", "sigma_w", "optimizer", "lr", "weight_decay", "batch_size", "seed", "epochs")
DAMAGED_DIR = ".damaged"  # <section>/.damaged/<run_id>-<UTC stamp>/: where set_aside moves a damaged run
@dataclass
class RunResult:
    """What training returns per run (and `write_run` writes): the config, its run id, `status` ("complete" |
    "diverged"), the history (one row per measured epoch), the summary (metrics.summarize_history), the run folder
    (None when nothing was written), provenance and UTC times."""

    config: TrainConfig
    run_id: str
    status: str
    history: pd.DataFrame
    summary: dict
    path: Path | None = None
    provenance: dict = field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None


def run_dir(results: str | Path, section: str, config: TrainConfig | dict) -> Path:
    """The folder of one run: `<results>/<section>/<run_id>`."""
    return Path(results) / section / run_id(config)


def check_writable(folder: str | Path) -> Path:
    """Create `folder` if needed and prove we can write into it; ResultsError naming it otherwise.
    Called before training so that a bad --out fails in a second, not after hours of training."""
    try:
        return ensure_writable(folder)
    except OSError as exc:
        raise ResultsError(f"results folder {str(folder)!r} is not writable: {exc.strerror or exc}") from None


def write_run(result: RunResult, results: str | Path, section: str) -> Path:
    """Write `result` to `<results>/<section>/<run_id>/`: history.csv, then run.json (which records the history's
    sha256, rows and columns), each atomically; returns the run folder. A result whose record would not verify
    (status, summary, types) is a ResultsError before anything is written, and run.json is written only once
    history.csv reads back as a valid history of `result`."""
    folder = run_dir(results, section, result.config)
    record = {"schema": SCHEMA, "run_id": result.run_id, "section": section, "status": result.status,
              "config": result.config.to_dict(), "summary": result.summary, "history": None,
              "provenance": portable(result.provenance) if isinstance(result.provenance, dict) else result.provenance,
              "started_at": result.started_at,
              "finished_at": result.finished_at}
    try:
        check_record(json.loads(dumps_record({**record, "history": {"sha256": "0" * 64, "rows": 0, "columns": []}})),
                      folder / "run.json")
    except ResultsError as exc:
        raise ResultsError(f"not written: {exc}") from None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "run.json").unlink(missing_ok=True)  # a stale run.json must never vouch for a new history
        atomic_write(folder / "history.csv", result.history.to_csv(index=False))
        data, h = read_history(folder)
        if problem := frame_problem(h) or (len(h) != len(result.history) and "lost rows on the way to disk"):
            raise record_error(folder / "history.csv", f"was written but is no run's history, so no run.json was: it "
                                                f"{problem}")
        atomic_write(folder / "run.json", dumps_record({**record, "history": history_meta(data, h)}))
    except OSError as exc:
        raise ResultsError(f"cannot write run folder {str(folder)!r}: {exc.strerror or exc}") from None
    return folder


def _record_file(path: str | Path) -> Path:
    path = Path(path)
    return path if path.name == "run.json" and not path.is_dir() else path / "run.json"


def read_run(path: str | Path) -> dict:
    """The run.json of a run folder (or that file's path), its keys, types, config/run id and summary checked;
    ResultsError naming the file otherwise. `verify_run` also checks the folder and the history."""
    file = _record_file(path)
    record = parse_record(file)
    check_record(record, file)
    return record


def verify_run(folder: str | Path) -> dict:
    """The record of a run folder (or of its run.json path) once the whole run verifies: the record's keys and
    types, `<section>/<run_id(config)>` as its folder, the history against its sha256, rows and columns (numbers,
    an epoch and a step on every row), every summary key. ResultsError naming the file and what is wrong."""
    file = _record_file(folder)
    record = parse_record(file)
    verify_record(file.parent, record)
    return record


def is_complete(results: str | Path, section: str, config: TrainConfig | dict) -> bool:
    """True when the run's folder holds a finished run that verifies (a damaged run is not complete)."""
    try:
        verify_run(run_dir(results, section, config))
    except ResultsError:
        return False
    return True


def set_aside(folder: str | Path) -> Path:
    """Move a damaged run folder to `<section>/.damaged/<run_id>-<UTC stamp>/` (unchanged; why it was damaged goes
    to the `.txt` beside it) and return its new path; nothing is deleted. A run that verifies is a ResultsError."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"{str(folder)!r} is not a run folder: only an existing run folder is set aside")
    try:
        verify_run(folder)
    except ResultsError as exc:
        why = str(exc)
    else:
        raise ResultsError(f"{str(folder)!r} holds a run that verifies: only a damaged run is set aside")
    base = f"{folder.name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    dest, n = folder.parent / DAMAGED_DIR / base, 1
    while dest.exists() or (dest.parent / f"{dest.name}.txt").exists():
        n += 1
        dest = dest.with_name(f"{base}-{n}")
    try:
        dest.parent.mkdir(exist_ok=True)
        os.rename(folder, dest)
        atomic_write(dest.parent / f"{dest.name}.txt", f"set aside {datetime.now(UTC).isoformat()} from "
                                                         f"{folder}: {why}\n")
    except OSError as exc:
        raise ResultsError(f"cannot set aside {str(folder)!r}: {exc.strerror or exc}") from None
    return dest


def other_schema(folder: str | Path) -> int | None:
    """The schema of a run folder's record when it is readable but not this initmem's (1: `initmem migrate`
    upgrades it), else None. Such a run is not damaged: it is never set aside nor trained again."""
    try:
        schema = parse_record(_record_file(folder)).get("schema")
    except ResultsError:
        return None
    return schema if type(schema) is int and schema != SCHEMA else None


def older_records(path: str | Path) -> list[Path]:
    """The run.json files under `path` (none when it does not exist) whose schema is not this initmem's."""
    return [f / "run.json" for f in (run_folders(path) if Path(path).is_dir() else []) if other_schema(f) is not None]


def tidy_copies(section_dir: str | Path, dry_run: bool = False) -> list[str]:
    """Run folders of `section_dir` that are not named by their record's run id (a copy or a renamed run): a renamed
    run whose own folder is missing is moved back to it; a copy of a run that has its folder is set aside
    (`set_aside`, nothing deleted). Returns one line per folder (`dry_run`: what would be done, nothing moved), so
    that the tree stays loadable and no readable run is trained again."""
    section_dir, lines = Path(section_dir), []
    for folder in sorted(p for p in section_dir.glob("*/run.json") if not p.parent.name.startswith(".")):
        folder = folder.parent
        try:
            rid = parse_record(folder / "run.json").get("run_id")
        except ResultsError:
            continue  # damaged: the point that owns it sets it aside
        if not isinstance(rid, str) or rid == folder.name or Path(rid).name != rid or rid.startswith("."):
            continue
        own = section_dir / rid
        if dry_run:
            lines.append(f"run {rid}: {folder} would be " + (f"set aside (a copy of {own})" if own.exists() else
                                                             f"moved back to {own} (a renamed run folder)"))
        elif own.exists():
            lines.append(f"run {rid}: {folder} is a copy of {own}; set aside to {set_aside(folder)}")
        else:
            try:
                os.rename(folder, own)
            except OSError as exc:
                raise ResultsError(f"cannot move {str(folder)!r} back to {str(own)!r}: {exc.strerror or exc}") from None
            lines.append(f"run {rid}: {folder} is a renamed run folder; moved back to {own}")
    return lines


# ------------------------------------------------------------------------------------------------ loaders
def run_folders(path: str | Path) -> list[Path]:
    """Every folder under `path` (any depth, `path` included) holding a run.json, hidden folders (.damaged, ...)
    left out; ResultsError when `path` is not an existing folder."""
    if not (root := Path(path)).is_dir():
        raise ResultsError(f"results path {str(root)!r} " + ("is not a folder" if root.exists() else "does not exist"))
    return [f.parent for f in sorted(root.rglob("run.json"))
            if not any(p.startswith(".") for p in f.relative_to(root).parts[:-1])]


def _scan(path: str | Path, damaged: str) -> tuple[list[tuple[Path, dict, pd.DataFrame]], dict[str, str]]:
    """(folder, record, history) of every run under `path` that verifies, and {folder: why} of the damaged ones;
    with damaged="raise" the first damaged run (or a section's run held by two folders) is a ResultsError."""
    if damaged not in ("raise", "skip"):
        raise ConfigError(f"damaged={damaged!r} is invalid: 'raise' or 'skip' is accepted")
    good, bad, holders = [], {}, defaultdict(list)
    for folder in run_folders(path):
        record = None
        try:
            record = parse_record(folder / "run.json")
            good.append((folder, record, verify_record(folder, record)))
        except ResultsError as exc:
            bad[str(folder)] = str(exc)
        if record is not None:  # a run's address is <section>/<run_id>: one section may not hold it twice
            holders[(str(record.get("section")), str(record.get("run_id")))].append(folder)
    for (section, rid), folders in holders.items():
        if len(folders) < 2:
            continue
        why = (f"run {rid} of section {section} is in {len(folders)} folders: " + ", ".join(repr(str(f)) for f in
               folders) + " (one run, one folder: set aside or remove the copies)")
        if damaged == "raise":
            raise ResultsError(why)
        if sum(g[0] in folders for g in good) > 1:  # two that verify: which one is the run cannot be told
            bad.update({str(g[0]): why for g in good if g[0] in folders})
            good = [g for g in good if g[0] not in folders]
    if bad and damaged == "raise":
        more = f" (and {len(bad) - 1} more damaged runs; damaged='skip' lists them)" if len(bad) > 1 else ""
        raise ResultsError(next(iter(bad.values())) + more)
    for why in bad.values():
        warnings.warn(f"skipping a damaged run: {why}", stacklevel=3)
    return good, bad


def _cell(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v  # tuples stay hashable for groupby


def load_runs(path: str | Path, *, damaged: str = "raise") -> pd.DataFrame:
    """One row per run under `path` (any depth: a tree, a section, one run folder): run_id, section, status, path,
    every config field, every summary key, git_commit, git_dirty, data_source, data_hash and git_diff_known (False
    for a run from a modified tree whose modification was not recorded). Every run is verified (`verify_run`); a damaged
    one is a ResultsError naming its file, or with damaged="skip" a warning, and it is listed in
    `df.attrs["damaged"]` ({folder: why}). A path that does not exist is a ResultsError."""
    good, bad = _scan(path, damaged)
    rows = []
    for folder, rec, _ in good:
        row = {"run_id": rec["run_id"], "section": rec["section"], "status": rec["status"], "path": str(folder)}
        row.update({k: _cell(full_config(rec["config"]).get(k)) for k in CONFIG_FIELDS})
        row.update({k: rec["summary"].get(k) for k in SUMMARY_KEYS})
        row.update({k: v for k, v in rec["summary"].items() if k not in row})  # keys added to metrics later
        prov = rec["provenance"]
        row.update({k: prov.get(k) for k in PROVENANCE_COLUMNS})
        row["git_diff_known"] = isinstance(prov.get("git_diff"), dict) or row["git_dirty"] is False
        if prov.get("population_fallback"):  # trained one by one because its population failed (point.py)
            row["population_fallback"] = prov["population_fallback"]
        rows.append(row)
    columns = [*RUN_COLUMNS, *CONFIG_FIELDS, *SUMMARY_KEYS, *PROVENANCE_COLUMNS, "git_diff_known"]
    extra = sorted({k for r in rows for k in r} - set(columns))
    df = pd.DataFrame(rows, columns=[*columns, *extra])
    df.attrs["damaged"] = bad
    return df


def load_histories(path: str | Path, *, damaged: str = "raise") -> pd.DataFrame:
    """Every history row under `path` plus run_id, section and the config columns `HISTORY_CONFIG_COLUMNS`;
    runs verified and `damaged` handled as in `load_runs`.

    The history's own per-epoch `lr` column (the scheduled lr of the epoch's last step) is renamed `lr_epoch`,
    so that `lr` means the configured learning rate here as in `load_runs` and can be grouped on."""
    good, bad = _scan(path, damaged)
    frames = []
    for _, rec, h in good:
        h = h.rename(columns={"lr": "lr_epoch"})
        meta = {"run_id": rec["run_id"], "section": rec["section"]}
        meta.update({k: rec["config"].get(k) for k in HISTORY_CONFIG_COLUMNS})
        frames.append(h.assign(**meta)[[*meta, *h.columns]])
    if frames:
        df = pd.concat(frames, ignore_index=True)
    else:
        own = ["lr_epoch" if c == "lr" else c for c in HISTORY_COLUMNS]
        df = pd.DataFrame(columns=["run_id", "section", *HISTORY_CONFIG_COLUMNS, *own])
    df.attrs["damaged"] = bad
    return df
