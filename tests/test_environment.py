"""The repository's environment files agree with each other: environment.yml pins what pyproject.toml pins, no
notebook with outputs is tracked by git, and jupytext pairs the percent-format sources with .ipynb.

conda cannot run here, so environment.yml is checked by parsing it, not by solving it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
NOT_PACKAGES = {"python", "pip"}  # conda entries that are not pyproject dependencies


def _pyproject() -> tuple[dict[str, str], dict[str, str]]:
    """(runtime pins, extra pins) from pyproject.toml, as {canonical name: version}."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def pins(reqs: list[str]) -> dict[str, str]:
        out = {}
        for line in reqs:
            req = Requirement(line)
            spec = list(req.specifier)
            assert len(spec) == 1 and spec[0].operator == "==", f"pyproject.toml: {line!r} is not pinned with =="
            out[canonicalize_name(req.name)] = spec[0].version
        return out

    extras = {k: v for reqs in project.get("optional-dependencies", {}).values() for k, v in pins(reqs).items()}
    return pins(project["dependencies"]), extras


def _environment() -> tuple[dict, dict[str, str | None], list[str]]:
    """(parsed yaml, {canonical name: pinned version or None} over conda and pip entries, pip's other lines)."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pinned: dict[str, str | None] = {}
    pip_other: list[str] = []
    for dep in env["dependencies"]:
        entries = dep["pip"] if isinstance(dep, dict) else [dep]
        for entry in entries:
            entry = entry.strip()
            if entry.startswith("-"):  # -e ., --extra-index-url ...
                pip_other.append(entry)
                continue
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(?:(==?)\s*([^\s=]+))?", entry)
            assert m, f"environment.yml: cannot parse dependency {entry!r}"
            name = canonicalize_name(m.group(1))
            assert name not in pinned, f"environment.yml lists {name!r} twice"
            # a +local tag (torch==2.14.1+cu126, a CUDA build from PyTorch's index) is the same release
            pinned[name] = m.group(3).split("+")[0] if m.group(3) else None
    return env, pinned, pip_other


def test_environment_yml_uses_conda_forge_and_python_311():
    env, pinned, _ = _environment()
    assert env["channels"][0] == "conda-forge"
    python = [d for d in env["dependencies"] if isinstance(d, str) and re.match(r"python\b", d)]
    assert python == ["python=3.11"], f"environment.yml must pin python=3.11, has {python}"


def test_environment_yml_pins_every_pyproject_dependency():
    runtime, extras = _pyproject()
    _, pinned, pip_other = _environment()
    for name, version in {**extras, **runtime}.items():  # dev tools too: `make test` must work in the conda env
        assert name in pinned, f"environment.yml lacks {name}=={version} (pinned in pyproject.toml)"
        assert pinned[name] == version, f"environment.yml pins {name}=={pinned[name]}; pyproject.toml {version}"
    strays = sorted(set(pinned) - set(runtime) - set(extras) - NOT_PACKAGES)
    assert not strays, f"environment.yml lists {strays}, which pyproject.toml does not pin"
    assert "-e ." in pip_other, "environment.yml's pip: section must install the project itself with `-e .`"


def test_no_tracked_notebook_has_outputs():
    """The .py sources are the truth; an .ipynb with outputs in git is a diff nobody can review."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "*.ipynb"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    dirty = []
    for rel in filter(None, tracked):
        nb = nbformat.read(ROOT / rel, as_version=4)
        if any(c.cell_type == "code" and (c.outputs or c.execution_count) for c in nb.cells):
            dirty.append(rel)
    assert not dirty, f"tracked notebooks with outputs (clear them or untrack them): {dirty}"


def test_jupytext_pairs_percent_scripts_with_ipynb():
    from jupytext.config import find_jupytext_configuration_file, load_jupytext_configuration_file
    from jupytext.formats import long_form_multiple_formats

    # only the repository's own config counts, not a user's global one
    found = [find_jupytext_configuration_file(d, search_parent_dirs=False) for d in (ROOT / "notebooks", ROOT)]
    found = [f for f in found if f]
    if not found:
        pytest.skip("no jupytext configuration in notebooks/ or the repository root yet")
    config = load_jupytext_configuration_file(found[0])
    for path in (ROOT / "notebooks" / "01_optimizers.py", ROOT / "notebooks" / "figures" / "fig1.py"):
        formats = config.default_formats(str(path))
        assert formats, f"{found[0]}: no pairing applies to {path.relative_to(ROOT)}"
        kinds = {(f["extension"], f.get("format_name")) for f in long_form_multiple_formats(formats)}
        assert (".py", "percent") in kinds and any(ext == ".ipynb" for ext, _ in kinds), (
            f"{found[0]}: {path.relative_to(ROOT)} is paired as {formats!r}; expected py:percent with ipynb"
        )


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("uid", ["0", "1000"])
def test_make_lab_passes_allow_root_only_as_root(tmp_path, uid):
    """`make lab` starts JupyterLab as root too (containers, cloud boxes), which refuses root without --allow-root;
    a user's JupyterLab gets no --allow-root. `id` is stubbed to be either; `make -n` prints the command only."""
    stub = tmp_path / "id"
    stub.write_text(f"#!/bin/sh\necho {uid}\n")
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "lab"], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    command = [ln.strip() for ln in out.splitlines() if "jupyter lab" in ln]
    assert command == [".venv/bin/jupyter lab" + (" --allow-root" if uid == "0" else "")]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_venv_names_a_full_disk_before_pip_starts(tmp_path):
    """A disk too small for torch's wheels fails in one line naming the free space and the fix, and creates nothing
    (pip would fail minutes later with 'No space left on device', leaving a half-built .venv)."""
    venv = tmp_path / "venv"
    proc = subprocess.run(["make", "--no-print-directory", f"VENV={venv}", "NEED_GB=1000000", "venv"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("initmem:"))
    assert "needs about 1000000 GB of disk" in line and f"is free in {tmp_path}" in line and "NEED_GB=0" in line
    assert not venv.exists()
