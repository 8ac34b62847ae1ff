"""The results tree: one folder per run, `<results>/<section>/<run_id>/{history.csv, run.json}`.

history.csv is written first and run.json last, each atomically (temp file, fsync, rename): a folder holds a
valid run.json only once its history is complete, so `is_complete` can trust run.json alone and an interrupted
sweep resumes by re-running exactly the folders without one. The loaders read any depth of tree, skip corrupt
files with a warning (one bad file must not hide a thousand good ones) and return empty frames with the right
columns for an empty tree.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from initmem.config import TrainConfig, run_id
from initmem.errors import ResultsError
from initmem.metrics import SUMMARY_KEYS

if TYPE_CHECKING:
    from initmem.train import RunResult

__all__ = ["run_id", "run_dir", "write_run", "read_run", "is_complete", "load_runs", "load_histories"]

SCHEMA = 1
FINISHED = ("complete", "diverged")
RUN_COLUMNS = ("run_id", "section", "status", "path")
# the contract's history columns, before the per-layer `norm:<layer>` ones
HISTORY_COLUMNS = (
    "epoch", "step", "lr", "train_loss", "train_acc_running", "train_acc", "val_loss", "val_acc", "test_loss",
    "test_acc", "weight_norm", "T_SGD", "T_L2", "T_adapt", "wall_time",
)  # fmt: skip
HISTORY_CONFIG_COLUMNS = ("arch", "width", "sigma_w", "optimizer", "lr", "weight_decay", "batch_size", "seed", "epochs")
_REQUIRED = ("schema", "run_id", "section", "status", "config", "summary")


def run_dir(results: str | Path, section: str, config: TrainConfig | dict) -> Path:
    """The folder of one run: `<results>/<section>/<run_id>`."""
    return Path(results) / section / run_id(config)


def check_writable(folder: str | Path) -> Path:
    """Create `folder` if needed and prove we can write into it; ResultsError naming it otherwise.
    Called before training so that a bad --out fails in a second, not after hours of training."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise ResultsError(f"results folder {str(folder)!r} is not writable: {exc.strerror or exc}") from None
    return folder


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


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


def write_run(result: RunResult, results: str | Path, section: str) -> Path:
    """Write `result` to `<results>/<section>/<run_id>/`: history.csv, then run.json, each atomically. Returns the
    run folder."""
    folder = run_dir(results, section, result.config)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "run.json").unlink(missing_ok=True)  # a stale run.json must never vouch for a new history
        _atomic_write(folder / "history.csv", result.history.to_csv(index=False))
        record = {
            "schema": SCHEMA,
            "run_id": result.run_id,
            "section": section,
            "status": result.status,
            "config": result.config.to_dict(),
            "summary": result.summary,
            "provenance": result.provenance,
            "started_at": result.started_at,
            "finished_at": result.finished_at,
        }
        _atomic_write(folder / "run.json", json.dumps(_jsonable(record), indent=2, allow_nan=False) + "\n")
    except OSError as exc:
        raise ResultsError(f"cannot write run folder {str(folder)!r}: {exc.strerror or exc}") from None
    return folder


def read_run(path: str | Path) -> dict:
    """The parsed run.json of a run folder (or of the run.json path itself); ResultsError naming the file when it
    is missing, truncated or not a run record."""
    path = Path(path)
    if path.is_dir():
        path = path / "run.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{str(path)!r} is corrupt or truncated: {exc}") from None
    missing = [k for k in _REQUIRED if not isinstance(record, dict) or k not in record]
    if missing:
        raise ResultsError(f"{str(path)!r} is not a run record: missing keys {missing}")
    if record["schema"] != SCHEMA:
        raise ResultsError(f"{str(path)!r} has schema {record['schema']!r}; this initmem reads schema {SCHEMA}")
    return record


def is_complete(results: str | Path, section: str, config: TrainConfig | dict) -> bool:
    """True when the run's folder holds a valid run.json with a finished status and its history.csv."""
    folder = run_dir(results, section, config)
    try:
        record = read_run(folder)
    except ResultsError:
        return False
    return record["status"] in FINISHED and record["run_id"] == folder.name and (folder / "history.csv").is_file()


def _records(path: str | Path):
    """(folder, record) for every readable run.json under `path` (any depth); warns about and skips the rest."""
    for file in sorted(Path(path).rglob("run.json")):
        try:
            yield file.parent, read_run(file)
        except ResultsError as exc:
            warnings.warn(f"skipping run: {exc}", stacklevel=3)


def _cell(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v  # tuples stay hashable for groupby


def load_runs(path: str | Path) -> pd.DataFrame:
    """One row per run under `path`: run_id, section, status, path, every config field, every summary key,
    git_commit, data_source."""
    config_fields = [f.name for f in dataclasses.fields(TrainConfig)]
    rows = []
    for folder, rec in _records(path):
        row = {"run_id": rec["run_id"], "section": rec["section"], "status": rec["status"], "path": str(folder)}
        row.update({k: _cell(rec["config"].get(k)) for k in config_fields})
        row.update({k: rec["summary"].get(k) for k in SUMMARY_KEYS})
        row.update({k: v for k, v in rec["summary"].items() if k not in row})  # keys added to metrics later
        prov = rec.get("provenance") or {}
        row.update(git_commit=prov.get("git_commit"), data_source=prov.get("data_source"))
        rows.append(row)
    columns = [*RUN_COLUMNS, *config_fields, *SUMMARY_KEYS, "git_commit", "data_source"]
    extra = sorted({k for r in rows for k in r} - set(columns))
    return pd.DataFrame(rows, columns=[*columns, *extra])


def load_histories(path: str | Path) -> pd.DataFrame:
    """Every history row under `path` plus run_id, section and the config columns `HISTORY_CONFIG_COLUMNS`.

    The history's own per-epoch `lr` column (the scheduled lr of the epoch's last step) is renamed `lr_epoch`,
    so that `lr` means the configured learning rate here as in `load_runs` and can be grouped on."""
    frames = []
    for folder, rec in _records(path):
        try:
            h = pd.read_csv(folder / "history.csv")  # pandas >= 3 parses floats round-trip
        except (OSError, ValueError) as exc:  # pandas parser errors are ValueErrors
            warnings.warn(f"skipping run: {str(folder / 'history.csv')!r} is unreadable: {exc}", stacklevel=2)
            continue
        h = h.rename(columns={"lr": "lr_epoch"})
        meta = {"run_id": rec["run_id"], "section": rec["section"]}
        meta.update({k: rec["config"].get(k) for k in HISTORY_CONFIG_COLUMNS})
        frames.append(h.assign(**meta)[[*meta, *h.columns]])
    if not frames:
        own = ["lr_epoch" if c == "lr" else c for c in HISTORY_COLUMNS]
        return pd.DataFrame(columns=["run_id", "section", *HISTORY_CONFIG_COLUMNS, *own])
    return pd.concat(frames, ignore_index=True)
