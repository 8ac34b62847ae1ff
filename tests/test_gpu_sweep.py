"""benchmarks.gpu_sweep, the grid without notebooks for a bare GPU image, run here on the CPU: a point's runs
trained as one population into the run folders a sweep writes (their device the one asked), resumed as complete, a
tree of another device and an unknown point refused in one line before anything trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SGD = "optimizer-sgd_8de5ef"  # the smoke profile's plain-SGD point


def _sweep(results: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu_sweep", "params/01_optimizers.yaml", "--profile",
                           "smoke", "--results", str(results), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})


def test_a_point_trains_as_a_population_into_a_sweeps_run_folders_and_resumes(tmp_path):
    results = tmp_path / "tree"
    proc = _sweep(results, "--device", "cpu", "--population", "--point", SGD)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{SGD}: ok (3 runs" in proc.stdout and "1 of 1 point(s) ok" in proc.stdout
    runs = [json.loads(p.read_text()) for p in sorted((results / "01_optimizers").glob("*/run.json"))]
    assert len(runs) == 3 and {r["config"]["optimizer"] for r in runs} == {"sgd"}
    assert {r["config"]["device"] for r in runs} == {"cpu"} and {r["config"]["sigma_w"] for r in runs} == {0.1, 1.0,
                                                                                                           2.5}
    assert {r["provenance"]["population"] for r in runs} == {3}  # one population of the 3 runs
    log = results / "01_optimizers" / "notebooks" / f"{SGD}.log"
    again = _sweep(results, "--device", "cpu", "--point", SGD)
    assert again.returncode == 0 and "skipping 3 complete run(s)" in log.read_text()
    refused = _sweep(results, "--device", "cuda")  # these runs were trained on the CPU: not mixed with a GPU's
    assert refused.returncode == 2 and "holds runs trained on another device" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_an_unknown_point_or_device_is_refused_before_anything_trains(tmp_path):
    proc = _sweep(tmp_path / "tree", "--device", "cpu", "--point", "optimizer-lion_000000")
    assert proc.returncode == 2 and "--point='optimizer-lion_000000' is not a point of smoke" in proc.stderr
    proc = _sweep(tmp_path / "tree", "--device", "gpu")
    assert proc.returncode == 2 and proc.stderr.startswith("gpu_sweep.py: --device='gpu': ")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "tree").exists()


def test_what_a_worker_imports_runs_on_a_bare_gpu_image():
    """The GPU box has torch, numpy, pandas, yaml and tqdm, and none of the notebook stack: a worker's imports and a
    point's configs need none of it."""
    code = ("import sys\nfor m in ['jupytext', 'papermill', 'nbformat', 'nbclient', 'matplotlib', 'submitit', "
            "'IPython', 'ipykernel', 'scipy']:\n    sys.modules[m] = None\n"
            "import initmem.study.point\nfrom initmem.config import point_configs\n"
            "from initmem.study.params import load_section\n"
            "s = load_section('params/01_optimizers.yaml')\n"
            "print(sum(len(point_configs(s.effective(p))) for p in s.points('cpu_w025', 'results/h200_w025')))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["75"]  # the five-seed grid: 5 optimisers x 3 sigma_w x 5 seeds
