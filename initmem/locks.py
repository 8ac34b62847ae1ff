"""One lock per run folder, so that concurrent sweeps (two shells, a local pool and a Slurm array, a requeued job
and its stale twin) never train the same run twice or interleave writes to its files.

The lock is `fcntl.flock(LOCK_EX | LOCK_NB)` on `<run folder>.lock` (beside the folder, so that a run that fails
before it writes anything leaves no half-made run folder behind), held on an open file descriptor: the kernel
releases it when the holder's process dies however it dies (SIGKILL, OOM, node reboot), so there is no stale-lock
cleanup and no timeout to tune. The file holds the holder's host and pid, for messages only; it is never deleted
(unlinking a flock file lets two processes lock two different inodes under one name). flock works on local
filesystems and on NFSv4/Lustre mounts that support it (most clusters'); a filesystem that refuses it raises.

Locks are re-entrant within a process: `point.train_point` locks a run and then calls `train`, which
locks it again (so that a bare `initmem train` is protected too); only the outermost release unlocks.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
import socket
from pathlib import Path

from initmem.errors import ResultsError

_HELD: dict[str, list] = {}  # resolved lock path -> [fd, depth, pid]: this process's locks


def lock_path(run_folder: str | Path) -> Path:
    """`<run folder>.lock`, beside the run folder."""
    run_folder = Path(run_folder)
    return run_folder.with_name(run_folder.name + ".lock")


class RunLock:
    """A held lock on one run folder; `release()` (or leaving a `with` block) gives it back."""

    def __init__(self, run_folder: Path, key: str):
        self.run_folder, self._key, self._released = run_folder, key, False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        entry = _HELD.get(self._key)
        if entry is None or entry[2] != os.getpid():
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD[self._key]
            os.close(entry[0])  # closing the descriptor drops the flock

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def holder(run_folder: str | Path) -> str:
    """Who holds (or last held) the lock, as written in the lock file: "host pid <pid> since <time>", or "unknown"."""
    try:
        text = lock_path(run_folder).read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    return text or "unknown"


def try_lock(run_folder: str | Path) -> RunLock | None:
    """Lock `run_folder` (its parent is created if needed) without waiting; None when another process holds it.
    ResultsError when the lock file cannot be created or locked for another reason."""
    return _lock(Path(run_folder), blocking=False)


def wait_lock(run_folder: str | Path) -> RunLock:
    """Lock `run_folder`, waiting as long as another process holds it (it is training that run)."""
    lock = _lock(Path(run_folder), blocking=True)
    assert lock is not None
    return lock


def _lock(run_folder: Path, blocking: bool) -> RunLock | None:
    path = lock_path(run_folder)
    key = str(path.resolve())
    entry = _HELD.get(key)
    if entry is not None and entry[2] == os.getpid():  # re-entrant in this process
        entry[1] += 1
        return RunLock(run_folder, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ResultsError(f"cannot create the lock file {str(path)!r}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as exc:
        os.close(fd)
        raise ResultsError(f"cannot lock {str(path)!r}: {exc.strerror or exc} (does this filesystem support "
                           "flock?)") from None
    stamp = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{socket.gethostname()} pid {os.getpid()} since {stamp}\n".encode(), 0)
    _HELD[key] = [fd, 1, os.getpid()]
    return RunLock(run_folder, key)
