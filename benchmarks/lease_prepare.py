"""Prepare the next GPU lease (`make gpu-lease ARCHIVE=...`): lay the CIFAR-10 archive (`gpu_prepare.sh`), collect
the notebook stack's wheels for the GPU image's Python into `.lease/wheels`, check that what travels fits, and print
the one command to run there with its carry list (docs/gpu/lease.md).

    python -m benchmarks.lease_prepare [ARCHIVE]     # needs PyPI here; the GPU box needs nothing from outside

The wheels: papermill, jupytext, nbclient, nbformat, ipykernel and submitit (`initmem sweep` imports it) with their
dependencies as installed in this venv, at this venv's versions, for CPython `PYTHON` on x86-64 Linux (the compiled
ones, pyzmq, tornado, rpds-py, as that Python's builds), less what a PyTorch GPU image already holds (`ON_IMAGE`) and
debugpy (ipykernel runs without it).
"""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

from benchmarks import lease

REPO = lease.REPO
WHEELS = ".lease/wheels"  # git-ignored (.gitignore: .lease/), so it can travel in `carry`
ARCHIVE = "data/cifar10-jpeg.tar.gz"
ROOTS = ("papermill", "jupytext", "nbclient", "nbformat", "ipykernel", "submitit")
# in the GPU image already (docs/gpu/lease.md): its own builds stay; debugpy: optional to ipykernel, 4 MB
ON_IMAGE = {"attrs", "certifi", "charset-normalizer", "click", "cloudpickle", "idna", "jinja2", "markupsafe",
            "markdown-it-py", "mdurl", "packaging", "psutil", "pygments", "python-dateutil", "pyyaml", "requests",
            "six", "tqdm", "typing-extensions", "tzdata", "urllib3", "debugpy"}
PYTHON = "3.12"  # the GPU image's python3
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
CARRY_MIB = 64  # what travels: the working tree and the carried paths
TIMEOUT_S = int(lease.BUDGET_S) + 60  # the interpreter, the wheels' install, the report, the transfer


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots=ROOTS, skip=ON_IMAGE) -> dict[str, str]:
    """{distribution: version} of `roots` and everything they require here (markers evaluated for this Python,
    extras left out), less `skip`."""
    from packaging.requirements import Requirement

    found, todo = {}, list(roots)
    while todo:
        name = _norm(todo.pop())
        if name in found or name in skip:
            continue
        dist = md.distribution(name)
        found[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return dict(sorted(found.items()))


def download(pins: dict[str, str], dest: Path) -> None:
    """The wheels of `pins` for CPython `PYTHON` on x86-64 Linux into `dest` (pip skips what is there); any other
    wheel there is removed (two versions of one package stop the install on the box)."""
    dest.mkdir(parents=True, exist_ok=True)
    for whl in dest.glob("*.whl"):
        name, version = whl.name.split("-")[:2]
        if pins.get(_norm(name)) != version:
            whl.unlink()
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", PYTHON, "--implementation", "cp", *plat, "-d", str(dest),
                    *(f"{n}=={v}" for n, v in pins.items())], check=True)


def travelling_bytes(carry: list[str]) -> int:
    """The bytes that travel: the tracked and untracked-not-ignored files, and the carried paths."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    files = [REPO / f for f in listed if f] + [p for c in carry for p in (REPO / c).rglob("*")] + [
        REPO / c for c in carry if (REPO / c).is_file()]
    return sum(p.stat().st_size for p in files if p.is_file())


def command(budget_s: float = lease.BUDGET_S) -> str:
    """The one command to run on the GPU machine, in the repository root."""
    return (f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "
            f"{WHEELS}/*.whl && export PYTHONPATH=/tmp/site INITMEM_CACHE=$(mktemp -d) && python3 -m benchmarks.lease "
            f"--device cuda --archive {ARCHIVE} --out \"$OUT\" --budget-s {budget_s:g}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prep = subprocess.run([str(REPO / "benchmarks" / "gpu_prepare.sh"), *argv[:1]], cwd=REPO, capture_output=True,
                          text=True)
    if prep.returncode:
        print(prep.stderr.strip(), file=sys.stderr)
        return prep.returncode
    print(prep.stdout.splitlines()[0])  # ready: the archive, its size and hash
    pins = closure()
    download(pins, REPO / WHEELS)
    carry = [ARCHIVE, WHEELS]
    size = travelling_bytes(carry)
    if size > CARRY_MIB * 2**20:
        print(f"lease_prepare: {size / 2**20:.1f} MiB would travel, over the {CARRY_MIB} MiB a device call takes: "
              f"remove untracked files or stale wheels from {WHEELS}", file=sys.stderr)
        return 2
    print(f"wheels: {len(pins)} in {WHEELS} for CPython {PYTHON}; {size / 2**20:.1f} MiB travel in all")
    print(f"on the GPU machine, in the repository root (timeout {TIMEOUT_S} s; $OUT: the folder that comes back):")
    print(f"  {command()}")
    print(f"carry: {' '.join(carry)}")
    print("then: copy $OUT to docs/gpu/<date>-<gpu>-lease/ (not runs.tar.gz nor logs.tar.gz: docs/gpu/lease.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
