"""The results tree: one folder per run, `<results>/<section>/<run_id>/{history.csv, run.json}`.

history.csv is written first and run.json last, each atomically (temp file, fsync, rename); run.json records the
history's sha256, row count and columns. A run is trusted only when it verifies as a whole (`verify_run`): the
record's keys and types, its folder is `<section>/<run_id(config)>`, the history matches the record and the summary
has every key. A run that fails is *damaged*: the loaders raise a ResultsError naming its file (or, with
`damaged="skip"`, warn, skip it and list it in `df.attrs["damaged"]`), `is_complete` is False for it and
`set_aside` moves it out of the way, deleting nothing. Schema-1 records (no checksum) are upgraded by `migrate`.
Torch-free: reading results imports neither torch nor the training stack.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import re
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from initmem.config import TrainConfig, run_id
from initmem.errors import ConfigError, ResultsError
from initmem.files import atomic_write, ensure_writable
from initmem.metrics import SUMMARY_KEYS

__all__ = ["RunResult", "run_id", "run_dir", "write_run", "read_run", "verify_run", "is_complete", "load_runs",
           "load_histories", "set_aside"]

SCHEMA = 2
FINISHED = ("complete", "diverged")
RUN_COLUMNS = ("run_id", "section", "status", "path")
# the contract's history columns, before the per-layer `norm:<layer>` ones
HISTORY_COLUMNS = (
    "epoch", "step", "lr", "train_loss", "train_acc_running", "train_acc", "val_loss", "val_acc", "test_loss",
    "test_acc", "weight_norm", "T_SGD", "T_L2", "T_adapt", "wall_time",
)  # fmt: skip
HISTORY_CONFIG_COLUMNS = ("arch", "width", "sigma_w", "optimizer", "lr", "weight_decay", "batch_size", "seed", "epochs")
RECORD_TYPES: dict[str, type] = {"schema": int, "run_id": str, "section": str, "status": str, "config": dict,
                                 "summary": dict, "history": dict, "provenance": dict, "started_at": str,
                                 "finished_at": str}  # run.json's keys, in order, with their JSON types
HISTORY_KEYS = ("sha256", "rows", "columns")
DAMAGED_DIR = ".damaged"  # <section>/.damaged/<run_id>-<UTC stamp>/: where set_aside moves a damaged run
V1_KEYS = tuple(k for k in RECORD_TYPES if k != "history")
CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig))


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


def _jsonable(x: Any) -> Any:
    """Plain JSON values: tuples → lists, numpy scalars → Python, NaN/inf → None (strict JSON has no NaN)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):  # numpy / torch scalar
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def dumps_record(record: dict) -> str:
    return json.dumps(_jsonable(record), indent=2, allow_nan=False) + "\n"


def record_error(file: Path, what: str) -> ResultsError:
    return ResultsError(" ".join(f"{str(file)!r} {what}".split()))  # one line, whatever the cause said


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _frame_problem(h: pd.DataFrame) -> str | None:
    """What makes a history frame unfit to be a run's history (None when it is fit): contract columns, numbers
    only, no empty row, epochs 0, ... increasing, a step on every row. Line numbers are the CSV file's."""
    if len(h) == 0:
        return "has no rows"
    if missing := [c for c in HISTORY_COLUMNS if c not in h.columns]:
        return f"lacks the columns {missing}"
    for c, dtype in h.dtypes.items():
        if not pd.api.types.is_numeric_dtype(dtype) and (bad := pd.to_numeric(h[c], errors="coerce").isna()
                                                         & h[c].notna()).any():
            i = int(bad.to_numpy().argmax())
            return f"holds a non-number in column {c!r} on line {i + 2}: {_short(h[c].iloc[i])}"
    a = h.to_numpy(dtype=float, na_value=np.nan)
    if (empty := np.isnan(a).all(axis=1)).any():
        return f"has a row without any value (all missing or NaN) on line {int(empty.argmax()) + 2}"
    for c in ("epoch", "step"):
        if (gap := np.isnan(a[:, h.columns.get_loc(c)])).any():
            return f"has a row with no {c} on line {int(gap.argmax()) + 2}"
    e = a[:, h.columns.get_loc("epoch")]
    if e[0] != 0 or not np.isfinite(e).all() or (e != e.round()).any() or (e[1:] <= e[:-1]).any():
        return "has epochs that are not whole numbers increasing from 0"
    return None


def history_meta(data: bytes, h: pd.DataFrame) -> dict:
    """run.json's `history` entry: the sha256 of history.csv's bytes, its rows and its columns."""
    return {"sha256": hashlib.sha256(data).hexdigest(), "rows": len(h),
            "columns": [str(c) for c in h.columns]}


def write_run(result: RunResult, results: str | Path, section: str) -> Path:
    """Write `result` to `<results>/<section>/<run_id>/`: history.csv, then run.json (which records the history's
    sha256, rows and columns), each atomically; returns the run folder. A result whose record would not verify
    (status, summary, types) is a ResultsError before anything is written, and run.json is written only once
    history.csv reads back as a valid history of `result`."""
    folder = run_dir(results, section, result.config)
    record = {"schema": SCHEMA, "run_id": result.run_id, "section": section, "status": result.status,
              "config": result.config.to_dict(), "summary": result.summary, "history": None,
              "provenance": result.provenance, "started_at": result.started_at, "finished_at": result.finished_at}
    try:
        _check_record(json.loads(dumps_record({**record, "history": {"sha256": "0" * 64, "rows": 0, "columns": []}})),
                      folder / "run.json")
    except ResultsError as exc:
        raise ResultsError(f"not written: {exc}") from None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "run.json").unlink(missing_ok=True)  # a stale run.json must never vouch for a new history
        atomic_write(folder / "history.csv", result.history.to_csv(index=False))
        data, h = read_history(folder)
        if problem := _frame_problem(h) or (len(h) != len(result.history) and "lost rows on the way to disk"):
            raise record_error(folder / "history.csv", f"was written but is no run's history, so no run.json was: it "
                                                f"{problem}")
        atomic_write(folder / "run.json", dumps_record({**record, "history": history_meta(data, h)}))
    except OSError as exc:
        raise ResultsError(f"cannot write run folder {str(folder)!r}: {exc.strerror or exc}") from None
    return folder


# ------------------------------------------------------------------------------------------------ verifying
def parse_record(file: Path) -> dict:
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise record_error(file, "does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise record_error(file, f"is corrupt or truncated: {exc}") from None
    if not isinstance(record, dict):
        raise record_error(file, f"is not a run record: it holds a JSON {type(record).__name__}")
    return record


def _check_record(record: dict, file: Path) -> None:
    """The record's own consistency: its keys and their types, its schema, its config and the run id it hashes to,
    its summary's keys and its history entry."""
    schema = record.get("schema")
    if type(schema) is int and schema == 1 and all(k in record for k in V1_KEYS):
        raise record_error(file, f"is a schema-1 run record (no history checksum): run `initmem migrate "
                          f"{file.parent.parent.parent}` to upgrade it")
    if missing := [k for k in RECORD_TYPES if k not in record]:
        raise record_error(file, f"is not a run record: missing keys {missing}")
    if unknown := [k for k in record if k not in RECORD_TYPES]:
        raise record_error(file, f"is not a run record: unknown keys {unknown}")
    for key, kind in RECORD_TYPES.items():
        if not isinstance(record[key], kind) or (kind is int and isinstance(record[key], bool)):
            raise record_error(file, f"has {key}={_short(record[key])}: a JSON {kind.__name__} is expected")
    if schema != SCHEMA:
        raise record_error(file, f"has schema {schema!r}; this initmem reads schema {SCHEMA}")
    if record["status"] not in FINISHED:
        raise record_error(file, f"has status {record['status']!r}: one of {FINISHED} is expected")
    if missing := [k for k in CONFIG_FIELDS if k not in record["config"]]:
        raise record_error(file, f"has a config without the fields {missing}")
    try:
        rid = run_id(record["config"])
    except (TypeError, ValueError) as exc:  # ConfigError is a ValueError
        raise record_error(file, f"has an invalid config: {exc}") from None
    if rid != record["run_id"]:
        raise record_error(file, f"has a config that is not its run's: it hashes to run id {rid}, the record says "
                          f"{record['run_id']} (edited after the run was written?)")
    summary = record["summary"]
    if missing := [k for k in SUMMARY_KEYS if k not in summary]:
        raise record_error(file, f"has a summary without the keys {missing}")
    for k, v in summary.items():
        if v is not None and not isinstance(v, (int, float)):
            raise record_error(file, f"has summary {k}={_short(v)}: a number, true/false or null is expected")
    h = record["history"]
    if (sorted(h) != sorted(HISTORY_KEYS) or not isinstance(h["sha256"], str)
            or not re.fullmatch(r"[0-9a-f]{64}", h["sha256"]) or type(h["rows"]) is not int
            or not isinstance(h["columns"], list) or not all(isinstance(c, str) for c in h["columns"])):
        raise record_error(file, f"has history={_short(h)}: {{sha256: 64 hex digits, rows: int, columns: [str]}} "
                          "is expected")


def read_history(folder: Path) -> tuple[bytes, pd.DataFrame]:
    file = folder / "history.csv"
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise record_error(file, "is missing") from None
    except OSError as exc:
        raise record_error(file, f"is unreadable: {exc.strerror or exc}") from None
    if not data.strip():
        raise record_error(file, "is empty")
    try:
        return data, pd.read_csv(io.BytesIO(data))  # pandas >= 3 parses floats round-trip
    except ValueError as exc:  # pandas parser errors and UnicodeDecodeError are ValueErrors
        raise record_error(file, f"is unreadable: {exc}") from None


def verify_record(folder: Path, record: dict) -> pd.DataFrame:
    """Check a parsed record against its folder and history; return the history frame."""
    file = folder / "run.json"
    _check_record(record, file)
    here = folder.resolve()
    if here.name != record["run_id"]:
        raise record_error(file, f"lies in folder {here.name!r}, not in its run id's {record['run_id']!r} (a copied or "
                          "renamed run folder?)")
    if here.parent.name != record["section"]:
        raise record_error(file, f"lies in section folder {here.parent.name!r}, not in its section's "
                          f"{record['section']!r} (a moved run folder?)")
    data, h = read_history(folder)
    meta, hfile = record["history"], folder / "history.csv"
    columns = [str(c) for c in h.columns]
    if columns != meta["columns"]:
        lost, extra = [c for c in meta["columns"] if c not in columns], [c for c in columns if c not in meta["columns"]]
        raise record_error(hfile, f"has other columns than run.json records: missing {lost}, unexpected {extra}"
                           + ("" if lost or extra else " (the same, in another order)"))
    if len(h) != meta["rows"]:
        raise record_error(hfile, f"has {len(h)} rows; run.json records {meta['rows']} (truncated or appended to?)")
    if problem := _frame_problem(h):
        raise record_error(hfile, problem)
    if hashlib.sha256(data).hexdigest() != meta["sha256"]:
        raise record_error(hfile, "does not match the sha256 run.json records: it changed after the run was written")
    return h


def _record_file(path: str | Path) -> Path:
    path = Path(path)
    return path if path.name == "run.json" and not path.is_dir() else path / "run.json"


def read_run(path: str | Path) -> dict:
    """The run.json of a run folder (or that file's path), its keys, types, config/run id and summary checked;
    ResultsError naming the file otherwise. `verify_run` also checks the folder and the history."""
    file = _record_file(path)
    record = parse_record(file)
    _check_record(record, file)
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
    every config field, every summary key, git_commit, data_source. Every run is verified (`verify_run`); a damaged
    one is a ResultsError naming its file, or with damaged="skip" a warning, and it is listed in
    `df.attrs["damaged"]` ({folder: why}). A path that does not exist is a ResultsError."""
    good, bad = _scan(path, damaged)
    rows = []
    for folder, rec, _ in good:
        row = {"run_id": rec["run_id"], "section": rec["section"], "status": rec["status"], "path": str(folder)}
        row.update({k: _cell(rec["config"].get(k)) for k in CONFIG_FIELDS})
        row.update({k: rec["summary"].get(k) for k in SUMMARY_KEYS})
        row.update({k: v for k, v in rec["summary"].items() if k not in row})  # keys added to metrics later
        prov = rec["provenance"]
        row.update(git_commit=prov.get("git_commit"), data_source=prov.get("data_source"))
        rows.append(row)
    columns = [*RUN_COLUMNS, *CONFIG_FIELDS, *SUMMARY_KEYS, "git_commit", "data_source"]
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
