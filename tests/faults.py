"""Helpers for fault-injection tests: run initmem in a subprocess, watch its output, SIGKILL it at a chosen moment.

Subprocesses run single-threaded (so that two runs of one config are bit-for-bit comparable and the shared cores
stay free) with `INITMEM_PROGRESS=lines` (one line per epoch, which is what the tests wait for). The in-code fault
hook is `INITMEM_FAULT=kill_during_checkpoint_write[@EPOCH]` (see initmem/engine/checkpoint.py).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# resnet9 at 1/16 width on 200 synthetic images: a few tenths of a second per epoch on one core
TINY = dict(arch="resnet9", width=0.0625, optimizer="sgd_momentum", batch_size=50, data="synthetic", n_train=200,
            n_val=50, n_test=50, device="cpu", channels_last=False)


def env(**extra: str) -> dict[str, str]:
    """The environment of a child: this repository importable, one thread, per-epoch progress lines."""
    e = {k: v for k, v in os.environ.items() if k != "INITMEM_FAULT"}
    e.update(PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), INITMEM_PROGRESS="lines",
             OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    e.update(extra)
    return e


def cli_flags(config: dict) -> list[str]:
    """`initmem train` flags for a dict of TrainConfig fields."""
    flags = []
    for k, v in config.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            flags.append(flag if v else "--no-" + k.replace("_", "-"))
        else:
            flags += [flag, *map(str, v)] if isinstance(v, (list, tuple)) else [flag, str(v)]
    return flags


def train_cmd(config: dict, out: Path, section: str = "s") -> list[str]:
    return [PYTHON, "-m", "initmem.cli", "train", *cli_flags(config), "--out", str(out), "--section", section]


def python_cmd(code: str) -> list[str]:
    """A child that runs `code` (torch, if it imports it, takes one thread from OMP_NUM_THREADS)."""
    return [PYTHON, "-c", code]


class Child:
    """A subprocess whose merged stdout/stderr is collected line by line in the background."""

    def __init__(self, cmd: list[str], cwd: Path = REPO, **extra_env: str):
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env(**extra_env), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def wait_for(self, pattern: str, timeout: float = 120) -> str:
        """Block until a line matches `pattern` (regex search); AssertionError with the output so far if the
        child exits or the time runs out first."""
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if re.search(pattern, line):
                return line
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                self._q.put(None)
                break
            self.lines.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r}; output:\n" + "\n".join(self.lines))

    def kill(self) -> int:
        """SIGKILL: no handler, no cleanup, no flush; what the OOM killer or a node failure does."""
        os.kill(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(timeout=60)

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        """Wait for exit; (return code, whole output)."""
        rc = self.proc.wait(timeout=timeout)
        while (line := self._q.get(timeout=10)) is not None:
            self.lines.append(line)
        self._q.put(None)
        return rc, "\n".join(self.lines)


def run(cmd: list[str], timeout: float = 300, **extra_env: str) -> tuple[int, str]:
    """Run to completion; (return code, merged output)."""
    return Child(cmd, **extra_env).finish(timeout)


def history(run_folder: Path) -> pd.DataFrame:
    """A run's history.csv without wall_time, the one column an interruption may change."""
    return pd.read_csv(Path(run_folder) / "history.csv").drop(columns="wall_time")


def mini_project(root: Path, notebook: str, fixed: dict, grid: dict | None = None) -> Path:
    """A one-section project under `root` (params/t.yaml with one `smoke` profile of `fixed` and `grid`, and
    notebooks/t.py, a copy of the repo's `notebook`) for sweeps run against a real Slurm; returns the params file."""
    (root / "params").mkdir()
    (root / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / notebook, root / "notebooks" / "t.py")
    params = root / "params" / "t.yaml"
    doc = {"section": "t", "notebook": "notebooks/t.py", "profiles": {"smoke": {"fixed": fixed, "grid": grid or {}}}}
    params.write_text(yaml.safe_dump(doc, sort_keys=False))
    return params


def sweep_point(base: dict, sigma_ws: list[float], results, section: str, seeds=(0,), progress: bool = False):
    """Train a point's runs one by one through `initmem.study.point.run_point` (what a notebook calls)."""
    from initmem.study.point import run_point

    return run_point({**base, "sigma_ws": list(sigma_ws), "seeds": list(seeds)}, results=results, section=section,
                     population=False, progress=progress)
