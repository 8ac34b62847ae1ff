"""Reading a results tree: one folder per run, `<results>/<section>/<run_id>/{history.csv, run.json}` (written by
`initmem.run_folders`). A run is trusted only when it verifies as a whole (`verify_run`): the record's keys and
types, its folder is `<section>/<run_id(config)>`, the history matches the record's sha256, row count and columns
and the summary has every key. A run that fails is *damaged*: the loaders raise a ResultsError naming its file (or,
with `damaged="skip"`, warn, skip it and list it in `df.attrs["damaged"]`). What a valid record is:
`initmem.record`. Schema-1 records (no checksum) are upgraded by `migrate`.
Torch-free: reading results imports neither torch nor the training stack.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from initmem.config import TrainConfig, run_id
from initmem.errors import ConfigError, ResultsError
from initmem.metrics import SUMMARY_KEYS
from initmem.record import CONFIG_FIELDS, HISTORY_COLUMNS, check_record, full_config, parse_record, verify_record

__all__ = ["RunResult", "run_id", "read_run", "verify_run", "find_runs", "load_runs", "load_histories"]

RUN_COLUMNS = ("run_id", "section", "status", "path")
PROVENANCE_COLUMNS = ("git_commit", "git_dirty", "data_source", "data_hash")  # load_runs' columns from provenance
HISTORY_CONFIG_COLUMNS = ("arch", "width", "sigma_w", "optimizer", "lr", "weight_decay", "batch_size", "seed", "epochs")


@dataclass
class RunResult:
    """What training returns per run (and `RunFolders.write` writes): the config, its run id, `status` ("complete" |
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


# ------------------------------------------------------------------------------------------------ loaders
def find_runs(path: str | Path) -> list[Path]:
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
    for folder in find_runs(path):
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
