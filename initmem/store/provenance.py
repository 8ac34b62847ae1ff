"""Where a run came from (in every run.json). Nothing raises: no git, no checkout, an unknown CPU give `None`."""

import contextlib
import datetime as _dt
import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from initmem.checks import REPOSITORY

_PACKAGES = ("torch", "torchvision", "numpy", "pandas", "initmem")
ROOT = REPOSITORY  # the checkout holding the package
TRAINING_PATH, MAX_DIFF = "initmem", 200_000  # what trains a run: its diff is kept whole up to MAX_DIFF characters
UNKNOWN_DIFF = ("unknown: trained from a modified working tree of git_commit before initmem recorded the "
                "modification; only the commit and that the tree was modified are known")


def utcnow() -> str:
    """Now in UTC to the second, as run records, lock files, failure markers and provenance stamp it."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _git(args: list[str], cwd: Path) -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else None
    return None


def checkout() -> Path | None:
    """The git checkout holding the initmem package, else the one holding the working directory; None."""
    return next((Path(top) for where in (Path(__file__).resolve().parent, Path.cwd())
                 if (top := _git(["rev-parse", "--show-toplevel"], where))), None)


def git_diff(where: Path | None = None) -> dict | None:
    """A modified tree's `git diff HEAD` (sha256, files) and its `initmem/` part (text, sha256); None if clean."""
    if (where := where or checkout()) is None:
        return None
    try:
        full, training = (subprocess.run(["git", "diff", "HEAD", "--no-color", "--no-ext-diff", *only], cwd=where,
                                         capture_output=True, timeout=20) for only in ([], ["--", TRAINING_PATH]))
    except (OSError, subprocess.SubprocessError):
        return None
    if full.returncode != 0 or not full.stdout:
        return None
    files = sorted({line.rsplit(" b/", 1)[-1] for line in full.stdout.decode("utf-8", "replace").splitlines()
                    if line.startswith("diff --git a/")})
    text = training.stdout.decode("utf-8", "replace") if training.returncode == 0 else None
    return {"sha256": hashlib.sha256(full.stdout).hexdigest(), "files": files,
            "training_path_sha256": hashlib.sha256(training.stdout).hexdigest() if text is not None else None,
            "training_path": text if text is not None and len(text) <= MAX_DIFF else None}


def portable_path(path: str) -> str:
    """A path as a record stores it: relative to the repository when inside it (`data/cifar10-jpeg.tar.gz`), else
    only its file name (`data_hash` names the content): no record names a place on the machine that wrote it."""
    full = os.path.expanduser(path)
    full = full if os.path.isabs(full) else os.path.join(ROOT, full)
    same_drive = os.path.splitdrive(full)[0] == os.path.splitdrive(str(ROOT))[0]
    rel = os.path.normpath(os.path.relpath(full, ROOT)) if same_drive else full
    inside = not os.path.isabs(rel) and rel != ".." and not rel.startswith(".." + os.sep)
    return Path(rel).as_posix() if inside else Path(path).name


def portable_source(source: str | None) -> str | None:
    """A data source `<kind>:<path>` with its path `portable_path`; one without a path (`synthetic:…`) is kept."""
    if not isinstance(source, str) or ":" not in source:
        return source
    kind, path = source.split(":", 1)
    return f"{kind}:{portable_path(path)}" if "/" in path or os.sep in path else source


def portable_config(config: dict) -> dict:
    """A run's config as a record stores it: `data_root` `portable_path` (it is no part of the run id)."""
    root = config.get("data_root")
    return {**config, "data_root": portable_path(root)} if isinstance(root, str) and root else config


def portable(prov: Any) -> Any:
    """A provenance dict as a record stores it: `portable_source`, and an older record's `git_diff` (`UNKNOWN_DIFF`)."""
    if not isinstance(prov, dict):
        return prov
    out = {}
    for k, v in prov.items():
        out[k] = portable_source(v) if k == "data_source" else v
        if k == "git_dirty" and "git_diff" not in prov:
            out["git_diff"] = UNKNOWN_DIFF if v else None
    return out


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        with contextlib.suppress(Exception):  # an uninstalled source tree (PYTHONPATH) still has __version__
            return getattr(__import__(name), "__version__", None)
        return None


def cpu_model() -> str | None:
    """This CPU's model name (/proc/cpuinfo, else `platform.processor()`), or None."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def cpu_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU computes bfloat16 natively (x86: AVX512-BF16 or AMX-BF16 in /proc/cpuinfo's `flags`; Arm: BF16
    in its `Features`), or None where neither line is readable. Without it Muon's bfloat16 Newton-Schulz costs 20-30x
    float32's (performance.md)."""
    with contextlib.suppress(OSError):
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return bool({"avx512_bf16", "amx_bf16", "bf16"} & set(line.split(":", 1)[1].split()))
    return None


def _device_name(device: str | None) -> str | None:
    try:
        torch = sys.modules.get("torch")  # the store never imports torch: a training process has it loaded
        if torch is not None and device and device.startswith("cuda") and torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(device))
    except Exception:
        return None
    return cpu_model()


def provenance(device: str | None = None) -> dict:
    """Code version, software versions, machine and UTC time, as a JSON-ready dict. Never raises."""
    commit = (_git(["rev-parse", "HEAD"], where) if (where := checkout()) else None) or None
    status = _git(["status", "--porcelain", "--untracked-files=no"], where) if commit else None  # None: unknown
    info: dict = {"git_commit": commit, "git_dirty": None if status is None else bool(status),
                  "git_diff": git_diff(where) if status else None, "python": platform.python_version()}
    info.update({name: _version(name) for name in _PACKAGES})
    info["cuda"], info["torch_threads"], info["cpu_capability"] = None, None, None
    if (torch := sys.modules.get("torch")) is not None:  # loaded where a run trains; never imported here
        with contextlib.suppress(Exception):
            info["cuda"], info["torch_threads"] = torch.version.cuda, torch.get_num_threads()
            info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()  # the vector ISA its kernels use
    info.update(platform=platform.platform(), hostname=socket.gethostname(), device=device,
                device_name=_device_name(device), cpu_count=os.cpu_count(), cpu_bf16=cpu_bf16(),
                timestamp_utc=utcnow())
    return info
