"""The run folders of a results tree, owned here and nowhere else: `RunFolders(results, section)` names, locks,
writes (`write`: history.csv, then run.json once it reads back whole, each atomic), sets aside, tidies and clears
them; `RunFolders.run(config)` is one run's handle (`Run`: its id, hashed once, folder, lock, checkpoints, failure
marker), so the point and the engine ask the store by run, not by re-hashed config. Torch-free.

Layout: `<section>/<run_id>/` (run.json, history.csv; while training `checkpoints/epoch-NNNNNN.ckpt`, after a failure
`failed.json`), a population's checkpoints in `<section>/populations/<population_id>/checkpoints/`, a damaged run
moved to `<section>/.damaged/<run_id>-<stamp>/` (never deleted; `set_aside`), a renamed or copied run folder put
back or set aside by `tidy_copies`. A lock is `flock` on `<run folder>.lock` (beside it: a run that fails early
leaves no half-made folder), re-entrant in a process, which the kernel drops however its holder dies; the file is
never deleted (two processes would lock two inodes under one name)."""

import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import os
import re
import socket
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from initmem.checks import RECORD
from initmem.config import TrainConfig, run_id
from initmem.errors import ConfigError, ResultsError
from initmem.store.files import atomic_write, ensure_writable
from initmem.store.provenance import portable, portable_config, utcnow
from initmem.store.record import SCHEMA, full_config, parse_record, verify_record, write_record
from initmem.store.results import RunResult, find_runs, load_runs, verify_run

DAMAGED_DIR = ".damaged"  # <section>/.damaged/<run_id>-<UTC stamp>/: where set_aside moves a damaged run
FAILED = "failed.json"  # in a run folder: the last attempt raised; removed when the run completes
POPULATIONS = "populations"  # <section>/populations/<population_id>/checkpoints/: an unfinished population (K > 1)
_CHECKPOINT = re.compile(r"epoch-(\d{6,})\.ckpt")  # a checkpoint file's name (`checkpoint_file`)
_HELD: dict[str, list] = {}  # resolved lock path -> [fd, depth, pid]: this process's locks


def lock_path(run_folder: str | Path) -> Path:
    """`<run folder>.lock`, beside the run folder."""
    return (folder := Path(run_folder)).with_name(folder.name + ".lock")


class RunLock(contextlib.AbstractContextManager):
    """One hold of a run folder's lock: `release()` or leaving a `with` block gives it back once (outermost unlocks)."""

    def __init__(self, key: str):
        self._key: str | None = key  # None once released

    def release(self) -> None:
        key, self._key = self._key, None
        if (entry := _HELD.get(key)) is not None and entry[2] == os.getpid():  # not released, nor inherited by a fork
            entry[1] -= 1
            if entry[1] == 0:
                os.close(_HELD.pop(key)[0])  # closing the descriptor drops the flock

    def __exit__(self, *exc) -> None:
        self.release()


def holder(run_folder: str | Path) -> str:
    """Who holds (or last held) the lock, as written in the lock file: "host pid <pid> since <time>", or "unknown"."""
    with contextlib.suppress(OSError):
        return lock_path(run_folder).read_text(encoding="utf-8").strip() or "unknown"
    return "unknown"


def lock(run_folder: str | Path, *, wait: bool = False) -> RunLock | None:
    """Lock `run_folder`, re-entrant in a process; None while another process holds it (`wait`: wait), else a
    ResultsError when the lock file cannot be made or locked (a filesystem without flock)."""
    key = str((path := lock_path(run_folder)).resolve())
    if (entry := _HELD.get(key)) is not None and entry[2] == os.getpid():  # re-entrant in this process
        entry[1] += 1
        return RunLock(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ResultsError(f"cannot create the lock file {str(path)!r}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, BlockingIOError):  # another process holds it
            return None
        raise ResultsError(f"cannot lock {str(path)!r}: {exc.strerror or exc} (does this filesystem support "
                           "flock?)") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{socket.gethostname()} pid {os.getpid()} since {utcnow()}\n".encode(), 0)
    _HELD[key] = [fd, 1, os.getpid()]
    return RunLock(key)


def held_elsewhere(run_folder: str | Path) -> bool:
    """Whether another process holds `run_folder`'s lock now; nothing is created (a tree only read is asked too)."""
    path = lock_path(run_folder)
    if (entry := _HELD.get(str(path.resolve()))) is not None and entry[2] == os.getpid():
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # no lock file: never locked
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # dropped as the descriptor closes
    except OSError as exc:
        return isinstance(exc, BlockingIOError)
    finally:
        os.close(fd)
    return False


def checkpoint_file(folder: str | Path, epoch: int) -> Path:
    """`<folder>/epoch-NNNNNN.ckpt`: the checkpoint of `epoch` (its format: `initmem.engine.checkpoint`)."""
    return Path(folder) / f"epoch-{epoch:06d}.ckpt"


def checkpoints(folder: str | Path) -> list[Path]:
    """The checkpoint files in `folder`, newest (highest epoch) first; temp files and strangers are ignored."""
    found = [(int(m.group(1)), p) for p in Path(folder).glob("epoch-*.ckpt")
             if (m := _CHECKPOINT.fullmatch(p.name)) and p.is_file()]
    return [p for _, p in sorted(found, reverse=True)]


def clear_checkpoints(folder: str | Path) -> None:
    """Delete a checkpoints folder (its runs' run.json files are written: nothing will resume from it)."""
    for p in [*checkpoints(folder), *(t for t in Path(folder).glob("*.tmp") if t.is_file())]:
        p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # something else lives there (or nothing does): leave it
        Path(folder).rmdir()


def population_id(members: Sequence[TrainConfig | str]) -> str:
    """12 hex digits naming a member set (order-free; its configs or their run ids); a single run's is its run id."""
    ids = sorted(m if isinstance(m, str) else run_id(m) for m in members)
    return ids[0] if len(ids) == 1 else hashlib.sha256(" ".join(ids).encode()).hexdigest()[:12]


def set_aside(folder: str | Path) -> Path:
    """Move a damaged run folder, unchanged, to `<section>/.damaged/<run_id>-<UTC stamp>/`, why in the `.txt` beside;
    its new path. A run that verifies is a ResultsError."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"{str(folder)!r} is not a run folder: only an existing run folder is set aside")
    try:
        verify_run(folder)
    except ResultsError as exc:
        why = str(exc)
    else:
        raise ResultsError(f"{str(folder)!r} holds a run that verifies: only a damaged run is set aside")
    base = f"{folder.name}-{(now := _dt.datetime.now(_dt.UTC)):%Y%m%dT%H%M%SZ}"
    dest, n = folder.parent / DAMAGED_DIR / base, 1
    while dest.exists() or (dest.parent / f"{dest.name}.txt").exists():
        n += 1
        dest = dest.with_name(f"{base}-{n}")
    try:
        dest.parent.mkdir(exist_ok=True)
        os.rename(folder, dest)
        atomic_write(dest.parent / f"{dest.name}.txt", f"set aside {now.isoformat()} from {folder}: {why}\n")
    except OSError as exc:
        raise ResultsError(f"cannot set aside {str(folder)!r}: {exc.strerror or exc}") from None
    return dest


def other_schema(folder: str | Path) -> int | None:
    """A readable record's schema when not this initmem's (no damage: never set aside nor trained again), else None."""
    with contextlib.suppress(ResultsError):
        if type(schema := parse_record(Path(folder) / "run.json").get("schema")) is int and schema != SCHEMA:
            return schema
    return None


@dataclass(frozen=True)
class Run:
    """One run of a section, its run id computed once (`RunFolders.run`): what the store knows of it is asked here,
    by its folder (`folder` None: a tree that keeps nothing, where nothing is complete, checkpointed or failed)."""

    config: TrainConfig
    run_id: str
    section: str
    folder: Path | None  # <results>/<section>/<run_id>

    @property
    def checkpoints(self) -> Path | None:
        """Where this run checkpoints when it trains alone (a population's: `RunFolders.checkpoint_folder`)."""
        return None if self.folder is None else self.folder / "checkpoints"

    def is_complete(self) -> bool:
        """Whether the folder holds a finished run that verifies (a damaged run is not complete)."""
        with contextlib.suppress(ResultsError):
            return self.folder is not None and bool(verify_run(self.folder))  # its record: never empty
        return False

    def has_checkpoints(self) -> bool:
        """Whether the run was cut short with checkpoints of its own (its own resume is exact)."""
        return self.checkpoints is not None and bool(checkpoints(self.checkpoints))

    def lock(self, *, wait: bool = False) -> RunLock | None:
        """The run folder's lock (`lock`): None while another process holds it, unless `wait`."""
        return lock(self.folder, wait=wait)

    def holder(self) -> str:
        """Who holds (or last held) the run's lock (`holder`)."""
        return holder(self.folder)

    def failed(self) -> dict | None:
        """The marker of the run's failed last attempt (`failed.json`: error, attempts, host, traceback), or None."""
        with contextlib.suppress(OSError, ValueError):
            if self.folder is not None and isinstance(record := json.loads((self.folder / FAILED).read_text(
                    encoding="utf-8")), dict):
                return record if isinstance(record.get("attempts"), int) else None
        return None

    def mark_failed(self, exc: BaseException, message: str, attempts: int) -> Path:
        """Record, best effort, that attempt `attempts` raised `exc` (`message`: its line); the marker's path."""
        c, file = self.config, self.folder / FAILED
        record = {"run_id": self.run_id, "section": self.section, "sigma_w": c.sigma_w, "seed": c.seed,
                  "error": message, "attempts": attempts, "host": socket.gethostname(), "pid": os.getpid(),
                  "failed_at": utcnow(), "traceback": traceback.format_exception(exc)}
        with contextlib.suppress(OSError):
            file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(file, json.dumps(record, indent=2, default=str) + "\n")
        return file

    def clear_failed(self) -> None:
        (self.folder / FAILED).unlink(missing_ok=True)


class RunFolders:
    """The run folders of one section, `<results>/<section>/<run_id>/`; `results=None` keeps nothing. A run is asked
    about through its handle (`run`); a member set (`lock_all`, `checkpoint_folder`, `finish`) is given as handles or
    configs."""

    def __init__(self, results: str | Path | None, section: str):
        if not isinstance(section, str) or not section or section != Path(section).name or section.startswith("."):
            raise ConfigError(f"section={section!r} is invalid: a plain folder name is accepted")
        self.results, self.section = results, section
        self.path = None if results is None else Path(results) / section  # <results>/<section>

    def run(self, c: TrainConfig) -> Run:
        """The handle of `c`'s run: its id hashed here, once."""
        rid = run_id(c)
        return Run(c, rid, self.section, None if self.path is None else self.path / rid)

    def _runs(self, members: Sequence[Run | TrainConfig]) -> list[Run]:
        return [m if isinstance(m, Run) else self.run(m) for m in members]

    def writable(self) -> Path:
        """The section's folder, created and proved writable (before training: a bad --out fails in a second)."""
        try:
            return ensure_writable(self.path)
        except OSError as exc:
            raise ResultsError(f"results folder {str(self.path)!r} is not writable: {exc.strerror or exc}") from None

    def set_aside_damaged(self, runs: list[Run]) -> Iterator[tuple[Run, str]]:
        """Set aside each damaged run folder of `runs` (it would pass for one in progress), yielding (run, why and
        where to); an older schema is no damage but a ResultsError naming `initmem migrate`."""
        for r in runs:
            if (r.folder / "run.json").exists():
                try:
                    verify_run(r.folder)
                except ResultsError as exc:
                    if other_schema(r.folder) is not None:
                        raise
                    yield r, f"{exc}; moved aside to {set_aside(r.folder)}"

    def older_records(self) -> list[Path]:
        """The section's run.json files whose schema is not this initmem's."""
        return [f / "run.json" for f in (find_runs(self.path) if self.path.is_dir() else [])
                if other_schema(f) is not None]

    def tidy_copies(self, dry_run: bool = False) -> list[str]:
        """A line per run folder not named by its record, so that the tree loads and no readable run is trained again
        (`dry_run`: said, not done): a renamed run moved back (swapped ones swapped back), a copy set aside, a record
        whose run id is not its config's set aside; where a run's own folder is damaged and a copy verifies, the copy
        is the run. A run that verifies in its own folder is never moved, whatever lies beside it."""
        if self.path is None or not self.path.is_dir():
            return []
        aside, moves = self._tidy_plan()
        lines = []
        for rid, folder, what in aside:
            lines.append(f"run {rid}: {folder} would be set aside ({what})" if dry_run else
                         f"run {rid}: {folder} is {what}; set aside to {set_aside(folder)}")
        if dry_run:
            return lines + [f"run {dst.name}: {src} would be moved back to {dst} (a renamed run folder)"
                            for src, dst in moves]
        staged = []  # two steps, so that swapped folders can pass; a kill between them leaves renamed run folders
        for src, dst in moves:
            staged.append((src, self.path / f"{dst.name}-moving-{os.getpid()}", dst))
            self._rename(src, staged[-1][1])
        for src, tmp, dst in staged:
            self._rename(tmp, dst)
            lines.append(f"run {dst.name}: {src} is a renamed run folder; moved back to {dst}")
        return lines

    def _tidy_plan(self) -> tuple[list[tuple[str, Path, str]], list[tuple[Path, Path]]]:
        """What `tidy_copies` does: [(run id, folder, why)] to set aside, [(folder, its run's folder)] to move."""
        aside, moves, groups = [], [], {}
        for folder in sorted(p.parent for p in self.path.glob(f"*/{RECORD}") if not p.parent.name.startswith(".")):
            try:
                cid = run_id(full_config((record := parse_record(folder / RECORD))["config"]))
            except (ResultsError, KeyError, TypeError, ValueError, AttributeError):
                continue  # unreadable, or no config: the point that owns this folder sets it aside
            if (rid := record.get("run_id")) != cid:
                if folder.name != cid:  # in its config's folder, its point sets it aside (and trains it again)
                    aside.append((cid, folder, f"a record edited after it was written (run id {rid!r}, but its "
                                               "config is this run's)"))
                continue
            try:
                ok = verify_record(folder, record, named=False) is not None
            except ResultsError:
                ok = False
            groups.setdefault(cid, []).append((folder, ok))
        for cid, group in groups.items():
            own, good = self.path / cid, [f for f, ok in group if ok]
            keep = own if own in good else good[0] if good else own if own in (f for f, _ in group) else None
            aside += [(cid, f, f"a copy of {keep}" if ok else f"damaged, and {keep} is a copy of its run that verifies"
                       if f == own else f"a damaged copy of run {cid}") for f, ok in group if f != keep]
            if keep is not None and keep != own:
                moves.append((keep, own))
        sources = {src for src, _ in moves}
        aside += [(dst.name, dst, f"damaged, and {src} is a copy of its run that verifies") for src, dst in moves
                  if dst.exists() and dst not in sources and dst not in (f for _, f, _ in aside)]
        return aside, moves

    @staticmethod
    def _rename(src: Path, dst: Path) -> None:
        if dst.exists():
            raise ResultsError(f"cannot move {str(src)!r} to {str(dst)!r}: it exists (another process tidying?)")
        try:
            os.rename(src, dst)
        except OSError as exc:
            raise ResultsError(f"cannot move {str(src)!r} to {str(dst)!r}: {exc.strerror or exc}") from None

    @contextlib.contextmanager
    def lock_all(self, members: Sequence[Run | TrainConfig]) -> Iterator[None]:
        """Every run's lock held for the block; ResultsError naming the holder of one another process holds."""
        with contextlib.ExitStack() as held:
            for r in self._runs(members):
                if (held_one := r.lock()) is None:
                    raise ResultsError(f"run folder {str(r.folder)!r} is locked by {r.holder()}: that process is "
                                       "training this run; wait for it (or train the others without it)")
                held.enter_context(held_one)
            yield

    def checkpoint_folder(self, members: Sequence[Run | TrainConfig]) -> Path | None:
        """Where a member set checkpoints (None: nowhere): `<run>/` or `<section>/populations/<id>/`, `checkpoints/`."""
        if self.results is None:
            return None
        runs = self._runs(members)
        return runs[0].checkpoints if len(runs) == 1 else self.path / POPULATIONS / population_id(
            [r.run_id for r in runs]) / "checkpoints"

    def finish(self, members: Sequence[Run | TrainConfig]) -> None:
        """Every member's run.json is written: the set's checkpoints go, with a population's emptied folders."""
        if (folder := self.checkpoint_folder(members)) is None:
            return
        clear_checkpoints(folder)
        if len(members) > 1:
            with contextlib.suppress(OSError):
                folder.parent.rmdir()
                folder.parent.parent.rmdir()

    def write(self, result: RunResult) -> Path | None:
        """Write history.csv, then (once it reads back whole) run.json, atomically; the folder (None: nothing kept). A
        record that would not verify is a ResultsError before anything is written."""
        if self.results is None:
            return None
        folder = self.path / str(result.run_id)  # check_record: the id of its config
        write_record(folder, {"schema": SCHEMA, "run_id": result.run_id, "section": self.section,
                              "status": result.status, "config": portable_config(result.config.to_dict()),
                              "summary": result.summary, "history": {}, "provenance": portable(result.provenance),
                              "started_at": result.started_at, "finished_at": result.finished_at},
                     result.history.to_csv(index=False), len(result.history))
        return folder

    def load(self, runs: list[Run]) -> pd.DataFrame:
        """The `load_runs` rows of exactly these runs, in their order."""
        return pd.concat([load_runs(r.folder) for r in runs], ignore_index=True)
