"""Where a run came from: code version, software versions, machine. Stored in every run.json.

`provenance()` never raises: a missing git, a source tree that is not a checkout, or an unknown CPU model just give
`None` fields, because a run must not fail for want of bookkeeping.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path

_PACKAGES = ("torch", "torchvision", "numpy", "pandas", "initmem")


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout holding the initmem package, else of the working directory; (None, None)."""
    for where in (Path(__file__).resolve().parent, Path.cwd()):
        commit = _git(["rev-parse", "HEAD"], where)
        if commit:
            status = _git(["status", "--porcelain", "--untracked-files=no"], where)
            return commit, (None if status is None else bool(status))
    return None, None


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        try:  # an uninstalled source tree (PYTHONPATH) still has __version__
            return getattr(__import__(name), "__version__", None)
        except Exception:
            return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _device_name(device: str | None) -> str | None:
    try:
        import torch

        if device and device.startswith("cuda") and torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(device))
    except Exception:
        return None
    return _cpu_model()


def provenance(device: str | None = None) -> dict:
    """Code version, software versions, machine and UTC time, as a JSON-ready dict. Never raises."""
    commit, dirty = git_state()
    info: dict = {"git_commit": commit, "git_dirty": dirty, "python": platform.python_version()}
    info.update({name: _version(name) for name in _PACKAGES})
    try:
        import torch

        info["cuda"], info["torch_threads"] = torch.version.cuda, torch.get_num_threads()
    except Exception:
        info["cuda"], info["torch_threads"] = None, None
    info.update(
        platform=platform.platform(),
        hostname=socket.gethostname(),
        device=device,
        device_name=_device_name(device),
        cpu_count=os.cpu_count(),
        timestamp_utc=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
    return info
