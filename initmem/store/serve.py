"""Each run trained once in a results tree: a run asked for in one section is served, not trained, where another
section holds its record (the same run id) or where a longer run of the tree holds its first epochs (the same
`config.prefix_id`, more epochs). Serving writes a copy into the run's own folder as `RunFolders.write` writes
(`record.write_record`), its provenance's `served_from` naming the source: "<section>/<run_id>", a prefix's
"<section>/<run_id>, its first N epochs". `origin` says where a run would come from now (the sweep's dry run and the
planner ask it), `serve` does it (the point asks it before training a run); a source another process holds locked
(being trained, or served) is none.

A prefix is served only where its record is exactly the one its own training writes: its history.csv is the longer
run's header and first rows, byte for byte (a run on a constant lr without warm-up, measured at its last epoch, has
the same rows to there); its status and summary follow from those rows by `record.run_summary`, as the engine's; and
with full_test, the longer run evaluated the whole test set at that last epoch too (the run alone always does).
Torch-free."""

import contextlib
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from initmem.checks import RECORD
from initmem.config import TrainConfig, prefix_id, run_id
from initmem.errors import ConfigError, ResultsError
from initmem.metrics import FULL_TEST_COLUMNS
from initmem.store.folders import Run, clear_checkpoints, held_elsewhere, lock
from initmem.store.record import full_config, parse_record, read_history, run_summary, verify_record, write_record

_PREFIXES: dict[Path, tuple[int, int, str | None, int]] = {}  # run.json -> (mtime_ns, size, prefix id, epochs)


@dataclass(frozen=True)
class Origin:
    """Where a run is served from: a complete run folder, whole (`epochs` None) or its first `epochs` epochs."""

    folder: Path  # <results>/<section>/<run_id>
    epochs: int | None = None

    @property
    def name(self) -> str:
        """What `served_from` says: "<section>/<run_id>", a prefix's with ", its first N epochs"."""
        where = f"{self.folder.parent.name}/{self.folder.name}"
        return where if self.epochs is None else f"{where}, its first {self.epochs} epoch" + "s" * (self.epochs > 1)


def origin(run: Run) -> Origin | None:
    """Where `run` would be served from now, or None (it trains): its record in another section, else a longer run
    of the tree whose first epochs are exactly its record; none another process holds locked."""
    return next((o for o in _candidates(run) if not held_elsewhere(o.folder) and _derive(o, run) is not None), None)


def serve(run: Run) -> Origin | None:
    """Serve `run` into its folder from the first source that `origin` would name, under the run's lock (taken here,
    re-entrant) and the source's; where it came from, or None: not served (complete already, or to train)."""
    if (own := None if run.folder is None else lock(run.folder)) is None:
        return None
    with own:
        if run.is_complete():
            return None
        for o in _candidates(run):
            if (held := lock(o.folder)) is None:  # another process trains or serves it: not half-made
                continue
            with held:
                if (made := _derive(o, run)) is not None:
                    write_record(run.folder, {**made[0], "section": run.section}, *made[1:])
                    clear_checkpoints(run.checkpoints)  # of an attempt cut short: nothing resumes from them now
                    run.clear_failed()
                    return o
    return None


def _sections(root: Path) -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    return []


def _candidates(run: Run) -> Iterator[Origin]:
    """The sources to try, in order: its run id in the other sections, then its longer runs, shortest first."""
    if run.folder is None:
        return
    root = run.folder.parent.parent
    for section in _sections(root):
        if section != run.section and (root / section / run.run_id / RECORD).is_file():
            yield Origin(root / section / run.run_id)
    if (pre := prefix_id(run.config)) is not None:
        longer = sorted((e, str(f)) for f, (p, e) in _prefixes(root).items() if p == pre and e > run.config.epochs)
        yield from (Origin(Path(f), run.config.epochs) for _, f in longer)


def _prefixes(root: Path) -> dict[Path, tuple[str | None, int]]:
    """Every run folder of the tree with its record's (prefix id, epochs); each record read once while unchanged."""
    out = {}
    for section in _sections(root):
        for file in (root / section).glob(f"*/{RECORD}"):
            try:
                st = os.stat(file)
            except OSError:
                continue
            seen = _PREFIXES.get(file)
            if seen is None or seen[:2] != (st.st_mtime_ns, st.st_size):
                try:
                    config = TrainConfig.from_dict(full_config(parse_record(file)["config"]))
                    seen = (st.st_mtime_ns, st.st_size, prefix_id(config), config.epochs)
                except (ResultsError, ConfigError, KeyError, TypeError, ValueError):
                    seen = (st.st_mtime_ns, st.st_size, None, 0)  # no config: no run's prefix
                _PREFIXES[file] = seen
            out[file.parent] = seen[2:]
    return out


def _derive(o: Origin, run: Run) -> tuple[dict, bytes, int] | None:
    """The record `run` would be served (its section still the source's), its history.csv and rows; None where the
    source does not verify or its first epochs are not exactly `run`'s record."""
    try:
        record = parse_record(o.folder / RECORD)
        h = verify_record(o.folder, record)
        data, _ = read_history(o.folder)
    except ResultsError:
        return None
    prov = {**record["provenance"], "served_from": o.name}
    if o.epochs is None:
        return {**record, "provenance": prov}, data, len(h)  # verified: in the folder its run id names
    config = {**record["config"], "epochs": o.epochs}
    lines = data.splitlines(keepends=True)
    rows = int((h["epoch"] <= o.epochs).sum())
    last = int(h["epoch"].iloc[-1])
    status = "diverged" if record["status"] == "diverged" and last <= o.epochs else "complete"
    if (run_id(full_config(config)) != run.run_id or len(lines) != len(h) + 1
            or (status == "complete" and int(h["epoch"].iloc[rows - 1]) != o.epochs)):
        return None
    head = b"".join(lines[:rows + 1])
    kept = pd.read_csv(io.BytesIO(head))  # as the served record's reader parses it
    if status == "complete" and any(c in kept and pd.isna(kept[c].iloc[-1]) for c in FULL_TEST_COLUMNS):
        return None  # the run alone evaluates the whole test set at its last epoch; the longer run did not there
    return {**record, "run_id": run.run_id, "status": status, "config": config, "summary": run_summary(kept, status),
            "provenance": prov}, head, rows
