"""benchmarks.lease, the next GPU lease as one command, run here as CI runs it: the command `make gpu-lease` prints,
with `--device cpu --tiny`, end to end (the measurements, then section 01's smoke profile through `initmem sweep`
and papermill), leaving its five files; a sweep past its time limit is killed with every process under it; the
histories of runs cut short are salvaged from their checkpoints, which never come back; the wheels to carry are the
notebook stack's closure, not what the GPU image holds."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import lease
from benchmarks import lease_prepare as lp

REPO = Path(__file__).resolve().parents[1]


def tiny_command(out: Path) -> list[str]:
    """The printed command's `python3 -m benchmarks.lease ...` with the CPU stand-in's flags (no archive, $OUT)."""
    words = shlex.split(lp.command().split("&& python3 ")[-1])
    words[words.index("--device") + 1] = "cpu"
    i = words.index("--archive")
    del words[i:i + 2]
    words[words.index("--out") + 1] = str(out)
    words[words.index("--budget-s") + 1] = "1500"  # a loaded CPU: the smoke sweep alone takes minutes
    return [sys.executable, *words, "--tiny"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("lease") / "out"
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(tiny_command(out), cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    return proc, out, json.loads((out / "lease.json").read_text())


def test_the_lease_command_runs_on_a_cpu_end_to_end_and_leaves_five_files(tiny):
    proc, out, doc = tiny
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(lease.OUTPUTS) and len(lease.OUTPUTS) <= 8
    assert [s["name"] for s in doc["steps"]] == ["env", "eager", "population", "compiled", "trace"]
    assert {s["status"] for s in doc["steps"]} == {"ok"} and doc["exit_code"] == 0
    assert doc["sweep"]["stopped"] == "finished" and doc["sweep"]["returncode"] == 0
    assert "/tmp" not in (out / "lease.json").read_text()  # no path of this machine
    assert "exit code 0" in proc.stdout


def test_every_measurement_is_there_and_the_planner_reads_its_table(tiny):
    _, out, doc = tiny
    from initmem.study.throughput import load_throughput

    runs = doc["results"]["eager"]["runs"] + doc["results"]["population"]["runs"]
    keys = {(r["arch"], r["batch_size"], r["optimizer"], r["members"]) for r in runs}
    assert {("resnet9", 16, "sgd", 1), ("resnet20", 32, "sgd", 1), ("resnet9", 32, "muon", 1),
            ("resnet9", 16, "sgd", 3), ("resnet9", 32, "sgd", 3)} <= keys
    table = load_throughput(out / "throughput.json")
    assert {(e.arch, e.batch_size, e.optimizer, e.members) for e in table.entries} == keys
    compiled = doc["results"]["compiled"]["runs"]
    assert [r["members"] for r in compiled] == [1, 3] and all(r["compile"] and r["parity_pass"] for r in compiled)
    trace = doc["results"]["trace"]["summary"]
    assert trace["aten_ops_per_step"] > 50 and trace["gpu_busy_fraction"] is None  # no GPU on a CPU
    md = (out / "lease.md").read_text()
    assert "| resnet110 |" not in md and "| resnet20 | 32 | sgd | 1 |" in md and "Sweep `initmem sweep" in md


def test_the_sweeps_runs_come_back_without_checkpoints(tiny):
    _, out, doc = tiny
    with tarfile.open(out / "runs.tar.gz") as t:
        names = t.getnames()
    assert sum(n.endswith("/run.json") for n in names) == 15 == len(doc["runs"]["complete"])  # 5 points x 3 sigma_w
    assert not any("checkpoints" in n or n.endswith(".lock") for n in names)
    assert any(n.startswith("01_optimizers/notebooks/") and n.endswith(".ipynb") for n in names)
    with tarfile.open(out / "logs.tar.gz") as t:
        assert {"sweep.log", "env.log", "trace.log"} <= set(t.getnames())


def test_a_sweep_past_its_time_limit_is_killed_with_every_process_under_it(tmp_path):
    args = argparse.Namespace(profile="smoke", jobs=1)
    t0 = time.time()
    rec = lease.sweep(args, tmp_path / "results", 3, tmp_path / "sweep.log")
    assert rec["stopped"].startswith("killed at its time limit") and rec["returncode"] == -9
    assert time.time() - t0 < 60 and "<work>/results" in rec["command"]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in ps  # neither the sweep nor a kernel of it runs on


def test_runs_cut_short_are_salvaged_from_their_newest_checkpoint(tmp_path):
    """A population killed in its third epoch: its two checkpointed epochs come back as partial histories."""
    from initmem.config import TrainConfig
    from initmem.engine.trainer import train

    cfg = TrainConfig(data="synthetic", width=0.0625, n_train=128, n_val=32, n_test=32, train_eval_size=32,
                      batch_size=64, epochs=5, checkpoint_every=1, device="cpu")
    members = [cfg.replace(sigma_w=s) for s in (0.5, 2.0)]

    def stop(step: int) -> None:  # 2 steps an epoch: step 4 is the third epoch's first
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(members, out_dir=tmp_path, section="01_optimizers", progress=False, on_step=stop)
    found = lease.salvage(tmp_path, "01_optimizers")
    assert len(found) == 2 and {f["epoch"] for f in found} == {2}
    for f in found:
        history = pd.read_csv(tmp_path / "salvaged" / "01_optimizers" / f["run_id"] / "history.csv")
        assert list(history["epoch"]) == [0, 1, 2] and "checkpoints" in f["checkpoint"]
    assert not lease.brought_back(Path(found[0]["checkpoint"]))
    assert lease.brought_back(Path("salvaged/01_optimizers") / found[0]["run_id"] / "history.csv")


def test_the_wheels_are_the_notebook_stacks_closure_less_the_gpu_images_packages():
    pins = lp.closure()
    assert {"papermill", "jupytext", "nbclient", "nbformat", "ipykernel", "submitit", "pyzmq", "tornado"} <= set(pins)
    assert not {"torch", "numpy", "pandas", "pyyaml", "debugpy", "psutil"} & set(pins)
    cmd = lp.command()
    assert cmd.startswith("python3 -m pip install") and f"{lp.WHEELS}/*.whl" in cmd and "--no-index" in cmd
    assert '--out "$OUT"' in cmd and "--device cuda" in cmd and f"--budget-s {lease.BUDGET_S:g}" in cmd
    assert lp.TIMEOUT_S * 2 + 180 <= 900  # start + two runs fit 15 minutes of device time


def test_bad_flags_are_one_line_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.lease", "--device", "cpu", "--tiny", "--out", ""],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--out='' is empty" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "benchmarks.lease", "--device", "cpu", "--out", str(tmp_path),
                           "--archive", str(tmp_path / "none.tar.gz")], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
