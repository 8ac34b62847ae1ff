"""A run record on disk, schema 2: what valid `run.json` (`RECORD_TYPES`: schema, run_id, section, status, config,
summary, history {sha256, rows, columns}, provenance, started_at, finished_at) and `history.csv` (`HISTORY_COLUMNS`
first; docs/results.md lists every column) hold, each check one line. Torch-free."""

import dataclasses
import hashlib
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from initmem.config import LATER_FIELDS, TrainConfig, run_id
from initmem.errors import ResultsError
from initmem.metrics import SUMMARY_KEYS, summarize_history
from initmem.store.files import atomic_write

SCHEMA = 2
FINISHED = ("complete", "diverged")
HISTORY_COLUMNS = ("epoch", "step", "lr", "train_loss", "train_acc_running", "train_acc", "val_loss", "val_acc",
                   "test_loss", "test_acc", "weight_norm", "T_SGD", "T_L2", "T_adapt", "wall_time")  # the contract's
RECORD_TYPES: dict[str, type] = {"schema": int, "run_id": str, "section": str, "status": str, "config": dict,
                                 "summary": dict, "history": dict, "provenance": dict, "started_at": str,
                                 "finished_at": str}  # run.json's keys, in order, with their JSON types
V1_KEYS = tuple(k for k in RECORD_TYPES if k != "history")
CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig))


def _jsonable(x: Any) -> Any:
    """Plain JSON values: tuples → lists, numpy scalars → Python, NaN/inf → None (strict JSON has no NaN)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    x = x.item() if hasattr(x, "item") and not isinstance(x, (str, bytes)) else x  # numpy / torch scalar
    return None if isinstance(x, float) and not math.isfinite(x) else x


def dumps_record(record: dict) -> str:
    """A record as run.json holds it: strict JSON (NaN as null), indented, one trailing newline."""
    return json.dumps(_jsonable(record), indent=2, allow_nan=False) + "\n"


def record_error(file: Path, what: str) -> ResultsError:
    """ResultsError naming `file`, on one line."""
    return ResultsError(" ".join(f"{str(file)!r} {what}".split()))  # one line, whatever the cause said


def _short(v: Any) -> str:
    return s if len(s := repr(v)) <= 40 else s[:37] + "..."


def frame_problem(h: pd.DataFrame) -> str | None:
    """Why a history frame is no run's history, or None: it needs the contract's columns, numbers only, no empty row,
    whole epochs increasing from 0, an epoch and a step on every row. Line numbers are the CSV file's."""
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


def parse_record(file: Path) -> dict:
    """run.json's JSON object; ResultsError naming the file when it is missing, unreadable or not an object."""
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise record_error(file, "does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise record_error(file, f"is corrupt or truncated: {exc}") from None
    if not isinstance(record, dict):
        raise record_error(file, f"is not a run record: it holds a JSON {type(record).__name__}")
    return record


def full_config(config: dict) -> dict:
    """A record's config with each field added since it was written at the value it trained with (`LATER_FIELDS`)."""
    return {**{k: v for k, v in LATER_FIELDS.items() if k not in config}, **config}


def check_record(record: dict, file: Path) -> None:
    """The record's own consistency: keys, types, schema, status, config (`full_config`), run id, summary, history."""
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
    config = full_config(record["config"])
    if missing := [k for k in CONFIG_FIELDS if k not in config]:
        raise record_error(file, f"has a config without the fields {missing}")
    try:
        rid = run_id(config)
    except (TypeError, ValueError) as exc:  # ConfigError is a ValueError
        raise record_error(file, f"has an invalid config: {exc}") from None
    if rid != record["run_id"]:
        raise record_error(file, f"has a config that is not its run's: it hashes to run id {rid}, the record says "
                          f"{record['run_id']} (edited after the run was written?)")
    if missing := [k for k in SUMMARY_KEYS if k not in record["summary"]]:
        raise record_error(file, f"has a summary without the keys {missing}")
    for k, v in record["summary"].items():
        if v is not None and not isinstance(v, (int, float)):
            raise record_error(file, f"has summary {k}={_short(v)}: a number, true/false or null is expected")
    h = record["history"]
    if (sorted(h) != ["columns", "rows", "sha256"] or not isinstance(h["sha256"], str)
            or not re.fullmatch(r"[0-9a-f]{64}", h["sha256"]) or type(h["rows"]) is not int
            or not isinstance(h["columns"], list) or not all(isinstance(c, str) for c in h["columns"])):
        raise record_error(file, f"has history={_short(h)}: {{sha256: 64 hex digits, rows: int, columns: [str]}} "
                          "is expected")


def read_history(folder: Path) -> tuple[bytes, pd.DataFrame]:
    """history.csv of `folder`: its bytes (for the checksum) and its frame; ResultsError naming the file."""
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


def history_meta(folder: Path, *, written: int | None = None) -> dict:
    """run.json's `history` entry of `folder`'s history.csv, which must read back as `written` valid rows if given."""
    data, h = read_history(folder)
    if written is not None and (problem := frame_problem(h) or (len(h) != written and "lost rows on the way to disk")):
        raise record_error(folder / "history.csv", f"was written but is no run's history, so no run.json was: it "
                                                   f"{problem}")
    return {"sha256": hashlib.sha256(data).hexdigest(), "rows": len(h), "columns": [str(c) for c in h.columns]}


def run_summary(history: pd.DataFrame, status: str) -> dict:
    """The summary a record holds: `summarize_history`, a diverged run's last epoch its `diverged_epoch` (the history
    sees only its train loss; an evaluation loss may go first)."""
    summary = summarize_history(history)
    if status == "diverged":
        summary["diverged_epoch"] = int(history["epoch"].iloc[-1])
    return summary


def write_record(folder: Path, record: dict, history: str | bytes, rows: int) -> None:
    """Write `history` (`rows` rows) as history.csv, then, once it reads back whole, `record` with its `history` entry
    as run.json, each atomically. A record that would not verify is a ResultsError before anything is written."""
    record = {**record, "history": {"sha256": "0" * 64, "rows": 0, "columns": []}}  # until history.csv is written
    try:
        check_record(json.loads(dumps_record(record)), folder / "run.json")
    except ResultsError as exc:
        raise ResultsError(f"not written: {exc}") from None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "run.json").unlink(missing_ok=True)  # a stale run.json must never vouch for a new history
        atomic_write(folder / "history.csv", history)
        meta = history_meta(folder, written=rows)  # ResultsError unless it reads back whole
        atomic_write(folder / "run.json", dumps_record({**record, "history": meta}))
    except OSError as exc:
        raise ResultsError(f"cannot write run folder {str(folder)!r}: {exc.strerror or exc}") from None


def verify_record(folder: Path, record: dict, *, named: bool = True) -> pd.DataFrame:
    """Check a parsed record against its folder and history; return the history frame. `named=False`: the folder's
    name is not checked (whether a misnamed folder holds a whole run, `RunFolders.tidy_copies`)."""
    file = folder / "run.json"
    check_record(record, file)
    here = folder.resolve()
    if named and here.name != record["run_id"]:
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
    if problem := frame_problem(h):
        raise record_error(hfile, problem)
    if (digest := hashlib.sha256(data).hexdigest()) != meta["sha256"]:  # the same rows and columns: line endings?
        if hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest() == meta["sha256"]:
            raise record_error(hfile, "has CRLF line endings; it was written with LF (a checkout converted them): "
                                      "clone again with `git -c core.autocrlf=false clone`")
        raise record_error(hfile, f"has sha256 {digest[:12]}..., run.json records {meta['sha256'][:12]}...: a value "
                                  "changed after it was written; restore the file from git or train the run again")
    return h
