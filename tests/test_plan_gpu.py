"""The planner on a GPU it has no table for, and from a machine without one: the reference GPU table (an H200's,
measured) and, without it, the roofline estimate from the FLOP count (labelled, never passed off as a measurement);
the paper profile's cost by each, and calibration on a bare image (torch, numpy, pandas, yaml and tqdm only: no
jupytext, papermill or matplotlib)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from initmem.cli.commands import main
from initmem.config import TrainConfig
from initmem.study import calibrate, plan, stepmodel, throughput

REPO = Path(__file__).resolve().parents[1]
PARAMS = sorted(str(p.relative_to(REPO)) for p in (REPO / "params").glob("*.yaml"))


def test_the_roofline_is_the_flop_count_over_the_peak_at_the_runs_precision():
    c = TrainConfig(arch="resnet9", width=0.5, batch_size=128, precision="tf32", device="cuda")
    rate = plan.ROOFLINE_PEAK["tf32"] * plan.ROOFLINE_EFFICIENCY
    forward = 2 * plan.ARCH_MACS["resnet9"] * 0.25  # 2 FLOPs a MAC, width^2
    e = plan.roofline_entry(c)
    assert e.train_step_s == pytest.approx(128 * 3 * forward / rate) and e.eval_image_s == pytest.approx(forward / rate)
    k7 = plan.roofline_entry(c, 7)
    assert (k7.members, k7.train_step_s, k7.eval_image_s) == (7, pytest.approx(7 * e.train_step_s),
                                                               pytest.approx(7 * e.eval_image_s))
    fp32 = plan.roofline_entry(c.replace(precision="fp32"))
    assert fp32.train_step_s / e.train_step_s == pytest.approx(494.5 / 67)  # tensor cores against CUDA cores


def test_plan_device_cuda_without_a_gpu_plans_by_the_h200_measured_table(tmp_path, monkeypatch, capsys):
    """A user plans the cluster's cost from a laptop: `initmem plan params/*.yaml --profile paper --device cuda`
    times it by the reference GPU table, the H200's measured by the device check, and says so."""
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(plan, "cuda_name", lambda device="cuda": None)  # as here: no GPU (torch may be absent too)
    assert main(["plan", *PARAMS, "--profile", "paper", "--device", "cuda", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["throughput"]["estimate"] is None and doc["throughput"]["device"] == "NVIDIA H200"
    points = [p for s in doc["sections"] for p in s["points"]]
    assert len(points) == 34 and {p["key"]["precision"] for p in points} == {"tf32"}  # the paper profiles' (study.md)
    assert {re.split(r" from |:", p["time_source"])[0] for p in points} == {"measured", "modelled"}
    table = throughput.load_throughput(calibrate.REFERENCE_GPU)
    want = sum(s.totals()["seconds"] for s in plan.share_runs([plan.plan_section(p, "paper", table)
                                                               for p in PARAMS])) / 3600
    assert doc["totals"]["points_without_time"] == 0 and doc["totals"]["gpu_hours"] == pytest.approx(want)
    assert "gpu_hours_source" not in doc["totals"]  # a measurement, not the roofline's estimate
    assert main(["plan", *PARAMS, "--profile", "paper", "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("throughput: the reference GPU table (initmem/study/throughput/reference-h200.json, "
                          "2026-12-04): measured on an NVIDIA H200 by the device check (torch 2.11.0+cu130), no GPU "
                          "here;")
    assert out.splitlines()[-1].endswith(f"{want:.1f} GPU-hours")


def test_without_the_reference_gpu_table_the_roofline_estimate_is_labelled_as_such(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(plan, "cuda_name", lambda device="cuda": None)
    monkeypatch.setattr(calibrate, "REFERENCE_GPU", tmp_path / "missing.json")
    assert main(["plan", *PARAMS, "--profile", "paper", "--device", "cuda", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["throughput"]["estimate"] == "roofline estimate" and doc["throughput"]["kind"] == "cuda"
    points = [p for s in doc["sections"] for p in s["points"]]
    assert len(points) == 34 and {p["time_source"] for p in points} == {"roofline estimate"}
    total = doc["totals"]
    assert total["points_without_time"] == 0 and total["gpu_hours_source"].startswith("roofline estimate: NVIDIA H200")
    flops = sum((p["steps"] * p["key"]["batch_size"] * plan.image_flops(p["key"]["arch"], p["key"]["width"])[0] +
                 p["eval_images"] * plan.image_flops(p["key"]["arch"], p["key"]["width"])[1])
                * (1 - sum(p["served_by"].values()) / p["runs"]) for p in points)  # each run id once
    peak = plan.ROOFLINE_PEAK["tf32"] * plan.ROOFLINE_EFFICIENCY
    assert total["gpu_hours"] == pytest.approx(flops / peak / 3600)  # the FLOP count, nothing else
    assert main(["plan", *PARAMS, "--profile", "paper", "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("throughput: ESTIMATE, not a measurement (no GPU here: --device cuda)")
    assert f"{total['gpu_hours']:.1f} GPU-hours (roofline estimate" in out.splitlines()[-1]


def test_evaluating_a_train_subset_is_what_brings_the_paper_profile_under_15_hours(tmp_path, monkeypatch):
    """The paper profiles evaluate train accuracy on 5,000 images: on all 45,000, the same estimate is over 15 h."""
    table = plan.roofline_table()
    now = sum(s.totals()["seconds"] for s in (plan.plan_section(p, "paper", table) for p in PARAMS))
    full = 0.0
    for path in PARAMS:
        for p in plan.plan_section(path, "paper", table).points:
            r, c = p.run, TrainConfig(**p.key, device="cuda")
            extra = (45_000 - r["split"]["train_eval"]) * r["measured_epochs"] * plan.roofline_entry(c).eval_image_s
            full += p.seconds + p.runs * extra
    assert now / 3600 <= 15 < full / 3600


@pytest.mark.parametrize("blocked", [("jupytext", "papermill", "nbformat", "nbclient", "matplotlib", "submitit",
                                      "IPython", "ipykernel", "PIL", "scipy")])
def test_calibrate_runs_on_a_bare_image(tmp_path, blocked):
    """`initmem plan --calibrate` with params (it reads the notebooks' parameters cells) where only torch, numpy,
    pandas, yaml and tqdm are installed: the rest cannot be imported in the child."""
    out = tmp_path / "table.json"
    code = (f"import sys\nfor m in {list(blocked)!r}:\n    sys.modules[m] = None\n"
            "from initmem.cli.commands import main\n"
            f"rc = main(['plan', '--calibrate', 'params/01_optimizers.yaml', '--profile', 'smoke', '--device', 'cpu', "
            f"'--steps', '1', '--throughput', {str(out)!r}])\n"
            "rc = rc or main(['plan', 'params/01_optimizers.yaml', '--profile', 'smoke', '--throughput', "
            f"{str(out)!r}])\nsys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO), "INITMEM_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    table = throughput.load_throughput(out)
    assert table.kind == "cpu" and {(e.arch, e.width, e.batch_size) for e in table.entries} == {("resnet9", 0.0625,
                                                                                                 128)}
    assert len(table.entries) == 5  # one per optimiser of the smoke profile
    assert "01_optimizers" in proc.stdout and "no throughput" not in proc.stdout


def test_a_cuda_table_on_this_machine_is_used_before_the_estimate(tmp_path, monkeypatch):
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path))
    monkeypatch.setattr(plan, "cuda_name", lambda device="cuda": "NVIDIA H200")
    entry = throughput.Entry("resnet9", 1.0, 128, "tf32", 1, 0.01, 1e-5)
    path = plan.default_table_path("NVIDIA H200")
    throughput.save_throughput(throughput.Throughput("NVIDIA H200", "2.14", [entry], "cuda"), path)
    table, note = calibrate.choose_table("cuda")
    assert not table.roofline and table.entries == [entry] and "calibrated on this machine" in note


def test_a_gpu_tables_missing_batch_size_follows_the_step_time_it_measured(monkeypatch):
    """Where the host-floor model cannot price a step (here: no op counts), small batches are still launch-bound: b =
    16 at tf32, from the H200's b = 128 tf32 entry, scales by the exponent its fp32 entries measured between b = 32
    and 128, not by the images per step; a CPU table keeps them."""
    monkeypatch.setattr(stepmodel, "STEP_OPS", {})
    table = throughput.load_throughput(calibrate.REFERENCE_GPU)
    by = {(e.batch_size, e.precision): e for e in table.entries if e.members == 1}
    alpha = math.log(by[(128, "fp32")].train_step_s / by[(32, "fp32")].train_step_s) / math.log(4)
    assert 0 < alpha < 1
    c = TrainConfig(arch="resnet9", width=1.0, batch_size=16, precision="tf32", device="cuda")
    e, src = plan.lookup(table, c)
    assert e.train_step_s == pytest.approx(by[(128, "tf32")].train_step_s * (16 / 128) ** alpha)
    assert src == f"estimated from resnet9 w1 b128 tf32, step ~ b^{alpha:.2f} as fp32 b32-128"
    e256, src256 = plan.lookup(table, c.replace(batch_size=256))  # the closest measured batch size: 512
    assert src256.endswith("as fp32 b128-512") and e256.train_step_s > 2 * e.train_step_s
    cpu = throughput.Throughput("CPU", "", [throughput.Entry("resnet9", 1.0, 128, "fp32", 1, 1.0, 1e-3),
                                      throughput.Entry("resnet9", 1.0, 32, "fp32", 1, 0.5, 1e-3)], "cpu")
    e, src = plan.lookup(cpu, c.replace(batch_size=64, precision="fp32"))  # on a CPU: the images per step
    assert e.train_step_s == pytest.approx(1.0 / 2) and src == "estimated from resnet9 w1 b128 fp32"
    odd = throughput.Throughput("GPU", "", [throughput.Entry("resnet9", 1.0, 128, "fp32", 1, 1.0, 1e-3),
                                      throughput.Entry("resnet9", 1.0, 32, "fp32", 1, 2.0, 1e-3)], "cuda")
    assert throughput.batch_exponent(odd.entries, odd.entries[0], 64)[0] == 0.0  # a noisy table: clamped to [0, 1]
