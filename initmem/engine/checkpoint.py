"""Checkpoint files (atomic, checksummed, rotated) and the process-wide RNG states a resume restores. A file is MAGIC,
a JSON header `{"format", "sha256", "size"}` checked before the `torch.save` payload is read (`weights_only`): a
damaged file is a `CheckpointError`, never a wrong resume. Test-only: `INITMEM_FAULT=kill_during_checkpoint_write[@E]`
SIGKILLs `save` with half the file written and synced (a power cut)."""

import errno
import hashlib
import io
import json
import os
import random
import signal
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from initmem.errors import CheckpointError
from initmem.store import folders as _folders
from initmem.store.files import atomic_write

MAGIC = b"INITMEM-CHECKPOINT\n"
FORMAT = 1
KEEP = 2  # newest checkpoints kept: the previous one is the fallback when the newest turns out to be damaged
FAULT_ENV = "INITMEM_FAULT"


def _fault(epoch: int) -> bool:
    name, _, at = os.environ.get(FAULT_ENV, "").partition("@")
    return name == "kill_during_checkpoint_write" and (not at or int(at) == epoch)


def save(folder: str | Path, epoch: int, payload: dict[str, Any], *, keep: int = KEEP) -> Path:
    """Write `payload` as `folder/epoch-<epoch>.ckpt`; delete all but the `keep` newest and a killed writer's temp."""
    folder = Path(folder)
    path = _folders.checkpoint_file(folder, epoch)
    buf = io.BytesIO()
    torch.save(payload, buf)
    body = buf.getvalue()
    header = json.dumps({"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest(), "size": len(body)})
    data = MAGIC + header.encode() + b"\n" + body
    def write(f) -> None:
        if _fault(epoch):  # test-only: die with half a file on disk
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        f.write(data)

    try:
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob(".epoch-*.tmp"):  # a writer killed mid-write (we hold the run lock: not a live one)
            stale.unlink(missing_ok=True)
        atomic_write(path, write)
    except OSError as exc:  # a full disk, a quota, a folder gone read-only: the older checkpoints stay
        fix = "free disk space" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "make the folder writable"
        raise CheckpointError(f"checkpoint {str(path)!r} could not be written: {exc.strerror or exc}; the earlier "
                              f"checkpoints are kept and the run resumes from the newest of them: {fix} and run it "
                              "again") from None
    for old in _folders.checkpoints(folder)[keep:]:
        old.unlink(missing_ok=True)
    return path


def load(path: str | Path) -> dict[str, Any]:
    """The verified payload of one checkpoint (tensors on the CPU); else CheckpointError naming the file and why."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} is unreadable: {exc.strerror or exc}") from None
    if not data.startswith(MAGIC):
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt: it does not start with {MAGIC[:-1].decode()!r}")
    end = data.find(b"\n", len(MAGIC))
    try:
        header = json.loads(data[len(MAGIC) : end]) if end > 0 else None
        size, digest, fmt = int(header["size"]), str(header["sha256"]), header["format"]
    except (ValueError, TypeError, KeyError):
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt: unreadable header") from None
    if fmt != FORMAT:
        raise CheckpointError(f"checkpoint {str(path)!r} has format {fmt!r}; this initmem reads format {FORMAT}")
    body = data[end + 1 :]
    if len(body) != size:
        raise CheckpointError(f"checkpoint {str(path)!r} is truncated: {len(body)} of {size} payload bytes")
    if hashlib.sha256(body).hexdigest() != digest:
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt: sha256 mismatch")
    try:
        payload = torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a checksummed file that torch cannot read: a writer bug, still unusable
        raise CheckpointError(f"checkpoint {str(path)!r} is unreadable: {type(exc).__name__}: {exc}") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"checkpoint {str(path)!r} holds a {type(payload).__name__}, expected a dict")
    return payload


def load_latest(folder: str | Path, use: Callable[[dict[str, Any]], None],
                report: Callable[[str], None] | None = None) -> tuple[int, Path] | None:
    """`use(payload)` of the newest checkpoint in `folder` that loads and that `use` accepts (it raises
    CheckpointError for a foreign one; each refused one is warned and `report`ed): its (epoch, path), or None."""
    for path in _folders.checkpoints(folder):
        try:
            use(payload := load(path))
            return int(payload["epoch"]), path
        except CheckpointError as exc:
            line = f"{exc}; falling back to an earlier checkpoint or a fresh start"
            warnings.warn(line, stacklevel=2)
            if report is not None:
                report(line)
    return None


def rng_state() -> dict[str, Any]:
    """Every global generator's state (torch CPU and initialised CUDA, `random`, numpy): a resume restores them all."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `rng_state`; CUDA states are restored when there are as many devices as were saved."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)
