"""The package's one atomic write: a killed writer leaves the old file (or none) and at most a `.<name>.*.tmp`."""

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def fsync_dir(folder: str | Path) -> None:
    """Make a rename in `folder` durable (a no-op where the filesystem refuses fsync on a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str | Path, data: bytes | str | Callable[[IO[bytes]], object]) -> Path:
    """Write `data` (bytes, UTF-8 text, a callable writing a binary file) to `path` atomically, or OSError: `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; these are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def ensure_writable(folder: str | Path) -> Path:
    """`folder`, created and proved writable (else OSError) before work whose result goes there: fails in a second."""
    (folder := Path(folder)).mkdir(parents=True, exist_ok=True)
    tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-").close()  # deleted on close
    return folder
