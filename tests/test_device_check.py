"""benchmarks/device_check.py on the CPU, as CI runs it: `--device cpu --tiny` in a subprocess with PYTHONPATH=repo
(the CPU stands in for CUDA), then its JSON, Markdown, throughput table and logs archive (the only four files it
leaves in --out); a failing and a hanging step are recorded while the others run, and the check exits non-zero;
an exhausted budget skips the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
STATUSES = {"ok", "failed", "skipped", "timed_out"}
STEPS = ("env", "parity_fp32", "population_vs_separate", "resume", "rerun", "parity_bf16", "parity_muon", "parity_tf32",
         "epoch_eager", "population", "epoch_compile", "paper")  # correctness first, the optional steps last
OUTPUTS = {"device_check.json", "device_check.md", "throughput.json", "logs.tar.gz"}


def _check(out: Path, *args: str, timeout: float = 800, rc: int = 0) -> tuple[dict, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "benchmarks/device_check.py", "--device", "cpu", "--tiny", "--out",
                           str(out), *args], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == rc, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "device_check.json").read_text())
    assert doc["exit_code"] == rc and f"exit code {rc}" in proc.stdout
    return doc, time.perf_counter() - t0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, float]:
    out = tmp_path_factory.mktemp("device-check")
    doc, seconds = _check(out)
    return doc, out, seconds


def _steps(doc: dict) -> dict[str, dict]:
    return {s["name"]: s for s in doc["steps"]}


def test_every_step_is_recorded_with_its_status_and_numbers(tiny):
    doc, out, seconds = tiny
    steps = _steps(doc)
    assert list(steps) == list(STEPS)
    assert all(s["status"] in STATUSES and s["seconds"] >= 0 for s in steps.values())
    print(f"tiny device check: {seconds:.0f} s; " + ", ".join(f"{n} {s['seconds']:.0f} s" for n, s in steps.items()))
    assert {n for n, s in steps.items() if s["status"] != "ok"} == {"parity_tf32"}, {
        n: s["error"] for n, s in steps.items() if s["status"] != "ok"}
    assert "CUDA only" in steps["parity_tf32"]["reason"]
    assert doc["stand_in"] and "CPU stands in for CUDA" in doc["stand_in"] and doc["kind"] == "cpu"
    assert doc["counts"] == {"ok": 11, "failed": 0, "timed_out": 0, "skipped": 1}
    assert doc["seconds"] <= doc["args"]["budget_s"]
    for name in ("parity_fp32", "parity_bf16", "parity_muon"):
        r = steps[name]["results"]
        assert steps[name]["pass"] is True and r["setup"]["reference"] == "cpu fp32"
        assert r["setup"]["stand_in"] and set(r["differences"]) >= {"train_loss", "val_loss", "test_loss",
                                                                     "weight_norm", "loss_rel_max"}
    assert steps["parity_fp32"]["results"]["differences"]["loss_rel_max"] == 0.0  # CPU against CPU: the same run
    assert 0 < steps["parity_bf16"]["results"]["differences"]["loss_rel_max"] < 5e-2  # bf16 autocast on the CPU
    pvs = steps["population_vs_separate"]["results"]
    assert steps["population_vs_separate"]["pass"] is True and pvs["population_provenance"] == 2
    assert [m["status"] for m in pvs["members"]] == [["complete", "complete"]] * 2
    assert all(0 <= m["loss_rel_max"] <= pvs["setup"]["tolerance_loss_rel"] for m in pvs["members"])
    assert steps["parity_bf16"]["results"]["setup"]["reference_cached"] is True  # parity_fp32's CPU run, reused
    rerun = steps["rerun"]["results"]
    assert rerun["deterministic"]["identical"] and rerun["population_deterministic"]["identical"]
    resume = steps["resume"]["results"]
    assert resume["killed"]["sigkill"] and "epoch-000001.ckpt" in resume["killed"]["left_behind"]
    assert resume["resumed_vs_straight"]["identical"] and steps["resume"]["pass"] is True
    for name, compiled in (("epoch_eager", False), ("epoch_compile", True)):
        runs = steps[name]["results"]["runs"]
        assert runs and all(r["compile"] is compiled and r["step_s"] > 0 and r["eval_s"] >= 0 and r["epoch_s"] > 0
                            and r["peak_memory_bytes"] > 0 for r in runs)
    assert {r["arch"] for r in steps["epoch_eager"]["results"]["runs"]} == {"resnet9", "resnet56"}
    assert {r["precision"] for r in steps["epoch_eager"]["results"]["runs"]} == {"fp32", "bf16"}
    rows = steps["population"]["results"]["rows"]
    assert [r["batch_size"] for r in rows] == [16, 32, 64]
    assert all(r["population_member_steps_per_s"] > 0 and r["concurrent_member_steps_per_s"] > 0 for r in rows)
    pops = steps["paper"]["results"]["populations"]
    assert [p["optimizer"] for p in pops] == ["sgd", "adam"] and all(p["epochs"] >= 1 for p in pops)
    assert all(p["spread_pp_at_best"] is not None and p["angle_gap_deg"] is not None for p in pops)
    assert all(p["stopped"] == "stopped at its share of the time" for p in pops)  # 200 epochs never fit
    comp = steps["epoch_compile"]["results"]
    assert [g["what"].split(":")[0] for g in comp["graphs"][:4]] == ["before step 0", "step 0", "step 1 (CUDA graphs",
                                                                       "step 2 (CUDA graphs"]
    assert all(g["seconds"] > 0 for g in comp["graphs"]) and len(comp["graphs"]) == 4 * len(comp["runs"])
    assert all(r["cuda_graphs_used"] is False and r["cudagraph_skips"] == 0 for r in comp["runs"])  # no CUDA here
    assert all(r["steps_per_epoch"] * r["batch_size"] == 1024 for r in comp["runs"])  # whole batches: one graph


def test_the_check_leaves_four_files_and_its_logs_in_one_archive(tiny):
    doc, out, _ = tiny
    assert {p.name for p in out.iterdir()} == OUTPUTS and all(p.is_file() for p in out.iterdir())
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert sorted(names) == sorted(f"logs/{s['name']}.log" for s in doc["steps"] if s["status"] != "skipped" or
                                   s["name"] == "parity_tf32")  # a step that ran (tf32 skips itself) left its log


def test_markdown_summarises_every_step(tiny):
    doc, out, _ = tiny
    md = (out / "device_check.md").read_text()
    assert md.startswith("# Device check: CPU")
    assert "CPU stands in for CUDA" in md
    for name in STEPS:
        assert f"| {name} | " in md
    for heading in ("## Epoch times (full split)", "## K = 3: member-steps per second", "## Paper-scale point"):
        assert heading in md


def test_throughput_table_loads_in_the_planner(tiny):
    from initmem.study.plan import load_throughput, lookup

    doc, out, _ = tiny
    table = load_throughput(out / "throughput.json")
    assert table.kind == "cpu" and table.device.startswith("CPU") and table.entries
    assert doc["throughput"]["entries"] == len(table.entries)
    assert {e.members for e in table.entries} == {1, 3}
    assert all(e.train_step_s > 0 and e.eval_image_s >= 0 for e in table.entries)
    from initmem.config import TrainConfig

    entry, source = lookup(table, TrainConfig(width=0.0625, batch_size=64, device="cpu"))
    assert source == "measured" and entry.train_step_s > 0


def test_a_failed_step_makes_the_check_exit_non_zero(tmp_path):
    doc, _ = _check(tmp_path, "--fail", "rerun", "--only", "rerun", rc=1, timeout=300)
    assert _steps(doc)["rerun"]["status"] == "failed" and doc["counts"]["failed"] == 1


def test_a_failing_step_and_a_hanging_step_are_recorded_while_the_others_run(tmp_path):
    doc, _ = _check(tmp_path, "--only", "parity_fp32", "--only", "rerun", "--only", "paper", "--fail", "parity_fp32",
                    "--hang", "rerun", "--limit", "rerun=4", "--paper-epochs", "1", "--launch", "exec", rc=1)
    steps = _steps(doc)
    assert list(steps) == list(STEPS)
    assert steps["parity_fp32"]["status"] == "failed" and "injected failure" in steps["parity_fp32"]["error"]
    assert steps["rerun"]["status"] == "timed_out" and "limit of 4 s" in steps["rerun"]["error"]
    assert steps["rerun"]["seconds"] < 30
    assert steps["env"]["status"] == "ok" and steps["paper"]["status"] == "ok"
    assert all(p["stopped"] == "finished" and p["epochs"] == 1 for p in steps["paper"]["results"]["populations"])
    assert steps["resume"]["status"] == "skipped" and "--only" in steps["resume"]["reason"]
    assert doc["counts"]["failed"] == 1 and doc["counts"]["timed_out"] == 1
    md = (tmp_path / "device_check.md").read_text()
    assert "| parity_fp32 | failed |" in md and "| rerun | timed_out |" in md


def test_an_exhausted_budget_skips_the_steps_and_still_writes_the_report(tmp_path):
    doc, _ = _check(tmp_path, "--budget-s", "10", timeout=120)
    assert all(s["status"] == "skipped" and "no time left" in s["reason"] for s in doc["steps"])
    # an empty table (the planner refuses one: nothing to time with), written all the same
    assert json.loads((tmp_path / "throughput.json").read_text())["entries"] == []
    assert (tmp_path / "device_check.md").is_file()


def test_histories_compare_bitwise_and_relatively():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import device_steps as ds

    a = pd.DataFrame({"epoch": [0, 1], "train_loss": [float("nan"), 2.0], "val_loss": [2.3, 2.0],
                      "test_loss": [2.3, 2.1], "weight_norm": [10.0, 10.5], "train_acc": [0.1, 0.2],
                      "val_acc": [0.1, 0.2], "test_acc": [0.1, 0.3], "angle": [0.0, 3.0], "wall_time": [0.1, 1.0]})
    b = a.assign(wall_time=[0.2, 2.0])
    assert ds.identical(a, b)["identical"]  # wall_time is not compared
    c = b.assign(val_loss=[2.3, 2.0 * (1 + 1e-3)])
    assert ds.identical(a, c) == {"identical": False, "differing": ["val_loss"], "max_abs_diff": pytest.approx(2e-3),
                                  "columns": 9, "rows": 2}
    d = ds.compare(a, c)
    assert d["loss_rel_max"] == pytest.approx(1e-3) and d["train_loss"] == 0.0 and d["nonfinite_mismatch"] == []
    assert ds.compare(a, b.assign(test_loss=[2.3, float("inf")]))["nonfinite_mismatch"] == ["test_loss"]
