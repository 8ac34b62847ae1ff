"""Reading a results tree: a run is trusted only when it verifies as a whole (`verify_run`: the record's keys and
types, its folder named by its config's run id in its section, the history against its checksum, rows and columns);
one that fails is *damaged*, a ResultsError naming its file (`damaged="skip"`: a warning, listed in
`df.attrs["damaged"]`); the same run twice in one section is an error naming both folders; a path that does not
exist, or holds no run record (`no_runs`: NoResults), is a ResultsError too. Torch-free."""

import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from initmem.checks import run_folders
from initmem.config import TrainConfig, run_id
from initmem.errors import ConfigError, NoResults, ResultsError
from initmem.metrics import SUMMARY_KEYS
from initmem.store.record import CONFIG_FIELDS, HISTORY_COLUMNS, check_record, full_config, parse_record, verify_record

__all__ = ["RunResult", "run_id", "read_run", "verify_run", "find_runs", "no_runs", "load_runs", "load_histories"]

RUN_COLUMNS = ("run_id", "section", "status", "path")
PROVENANCE_COLUMNS = ("git_commit", "git_dirty", "data_source", "data_hash")  # load_runs' columns from provenance
HISTORY_CONFIG_COLUMNS = ("arch", "width", "sigma_w", "optimizer", "lr", "weight_decay", "batch_size", "seed", "epochs")


@dataclass
class RunResult:
    """One run as training returns it and `RunFolders.write` writes it (`path`: None when nothing was written)."""

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
    return p if (p := Path(path)).name == "run.json" and not p.is_dir() else p / "run.json"


def read_run(path: str | Path) -> dict:
    """The run.json of a run folder (or that file's path), the record itself checked (`verify_run`: the whole run)."""
    file = _record_file(path)
    check_record(record := parse_record(file), file)
    return record


def verify_run(folder: str | Path) -> dict:
    """The record of a run folder (or its run.json) once the record, its folder and its history verify."""
    file = _record_file(folder)
    verify_record(file.parent, record := parse_record(file))
    return record


def find_runs(path: str | Path) -> list[Path]:
    """The folders at or under the folder `path` (else a ResultsError) holding a run.json, hidden ones left out."""
    if not (root := Path(path)).is_dir():
        raise ResultsError(f"results path {str(root)!r} " + ("is not a folder" if root.exists() else "does not exist"))
    return run_folders(root)


def no_runs(root: Path, accepted: str = "a results tree, a section or a run folder") -> NoResults:
    """NoResults: `root` holds no run record, with what it holds instead (its first entries) and what is accepted."""
    held = sorted(f"{p.name}/" if p.is_dir() else p.name for p in root.iterdir() if not p.name.startswith("."))
    what = f"it holds {', '.join(held[:5])}{' ...' if len(held) > 5 else ''}" if held else "it is empty"
    return NoResults(f"results folder {str(root)!r} holds no runs (no <run_id>/run.json under it; {what}): {accepted} "
                     "is accepted")


def _scan(path: str | Path, damaged: str) -> tuple[list[tuple[Path, dict, pd.DataFrame]], dict[str, str]]:
    """(folder, record, history) of each run under `path` that verifies, {folder: why} of the others (or copies)."""
    if damaged not in ("raise", "skip"):
        raise ConfigError(f"damaged={damaged!r} is invalid: 'raise' or 'skip' is accepted")
    if not (folders := find_runs(path)):
        raise no_runs(Path(path))
    good, bad, holders = [], {}, defaultdict(list)
    for folder in folders:
        record = None
        try:
            good.append((folder, record := parse_record(folder / "run.json"), verify_record(folder, record)))
        except ResultsError as exc:
            bad[str(folder)] = str(exc)
        if record is not None:  # a run's address is <section>/<run_id>: one section may not hold it twice
            holders[(str(record.get("section")), str(record.get("run_id")))].append(folder)
    for (section, rid), folders in ((k, f) for k, f in holders.items() if len(f) > 1):
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


def load_runs(path: str | Path, *, damaged: str = "raise") -> pd.DataFrame:
    """One row per run under `path`: its folder, config, summary, provenance columns and git_diff_known (False: a
    modified tree, its change unrecorded); `df.attrs["damaged"]`: {folder: why}."""
    good, bad = _scan(path, damaged)
    rows = []
    for folder, rec, _ in good:
        config, prov = full_config(rec["config"]), rec["provenance"]
        row = {"run_id": rec["run_id"], "section": rec["section"], "status": rec["status"], "path": str(folder),
               **{k: tuple(v) if isinstance(v := config.get(k), list) else v for k in CONFIG_FIELDS},  # groupby-able
               **{k: rec["summary"].get(k) for k in SUMMARY_KEYS}}
        row.update({k: v for k, v in rec["summary"].items() if k not in row})  # keys added to metrics later
        row.update({k: prov.get(k) for k in PROVENANCE_COLUMNS})
        row["git_diff_known"] = isinstance(prov.get("git_diff"), dict) or row["git_dirty"] is False
        row.update({k: prov[k] for k in ("population_fallback", "served_from") if prov.get(k)})  # point, store.serve
        rows.append(row)
    columns = [*RUN_COLUMNS, *CONFIG_FIELDS, *SUMMARY_KEYS, *PROVENANCE_COLUMNS, "git_diff_known"]
    extra = sorted({k for r in rows for k in r} - set(columns))
    df = pd.DataFrame(rows, columns=[*columns, *extra])
    df.attrs["damaged"] = bad
    return df


def load_histories(path: str | Path, *, damaged: str = "raise") -> pd.DataFrame:
    """Every history row under `path` with run_id, section and `HISTORY_CONFIG_COLUMNS`; the history's own `lr` is
    `lr_epoch`, so that `lr` is the configured rate here as in `load_runs` and can be grouped on."""
    good, bad = _scan(path, damaged)
    frames = []
    for _, rec, h in good:
        h = h.rename(columns={"lr": "lr_epoch"})
        meta = {"run_id": rec["run_id"], "section": rec["section"]}
        meta.update({k: rec["config"].get(k) for k in HISTORY_CONFIG_COLUMNS})
        frames.append(pd.concat([pd.DataFrame(meta, index=h.index), h], axis=1))  # one insert, not one per column
    # consolidated (copy): hundreds of per-layer columns must not leave one block each, or every later column
    # added (by the analysis) warns that the frame is fragmented
    df = pd.concat(frames, ignore_index=True).copy() if frames else pd.DataFrame(columns=[
        "run_id", "section", *HISTORY_CONFIG_COLUMNS, *("lr_epoch" if c == "lr" else c for c in HISTORY_COLUMNS)])
    df.attrs["damaged"] = bad
    return df
