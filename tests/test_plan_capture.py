"""The captured step's price (`initmem plan --capture`, `stepmodel.captured_steps`): its compiled GPU work plus one
CUDA-graph replay, from the H200's committed compiled steps; below the eager host floor where the host bounds a step;
modelled, never measured; evaluation as eager; refused where no GPU table can price it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from initmem.cli.commands import main
from initmem.config import TrainConfig
from initmem.study import calibrate, plan, stepmodel, throughput
from initmem.study.plan_report import plan_json

REPO = Path(__file__).resolve().parents[1]
PARAMS = sorted(str(p) for p in (REPO / "params").glob("*.yaml"))
SPEEDS = REPO / "docs" / "gpu" / "2026-12-04-h200-speeds" / "device_check.json"


def _fit() -> tuple[throughput.Throughput, stepmodel.HostFit]:
    table = throughput.load_throughput(calibrate.REFERENCE_GPU, "cuda")
    return table, stepmodel.fit(table)


def test_the_compiled_steps_are_the_h200_records():
    steps = {s["name"]: s for s in json.loads(SPEEDS.read_text(encoding="utf-8"))["steps"]}
    runs = {(r["precision"], r["compile"]): r for n in ("epoch_eager", "epoch_compile")
            for r in steps[n]["results"]["runs"] if (r["arch"], r["width"], r["batch_size"]) == ("resnet9", 1.0, 128)}
    for precision, (eager, compiled, eval_image) in stepmodel.H200_COMPILED.items():
        assert (eager, eval_image) == (runs[(precision, False)]["step_s"], runs[(precision, False)]["eval_image_s"])
        assert compiled == runs[(precision, True)]["step_s"] and runs[(precision, True)]["cuda_graphs_used"]
    assert 0.9 < stepmodel.COMPILE_GAIN < 0.92 and 1.0e-3 < stepmodel.REPLAY_MAX_S < 1.2e-3


def test_a_captured_step_is_its_compiled_gpu_work_plus_one_replay():
    _, hf = _fit()
    low, mid, high = hf.replay
    assert (low, high) == (hf.per_op[0], stepmodel.REPLAY_MAX_S) and mid == pytest.approx(math.sqrt(low * high))
    for arch, b, precision, opt in (("resnet9", 128, "tf32", "sgd"), ("resnet9", 16, "tf32", "adam"),
                                    ("resnet56", 128, "tf32", "muon"), ("resnet110", 128, "fp32", "sgd")):
        c = TrainConfig(arch=arch, batch_size=b, precision=precision, optimizer=opt)
        work = stepmodel.COMPILE_GAIN * hf.gpu_work(c)
        assert stepmodel.captured_steps(hf, c) == pytest.approx([work + r for r in hf.replay], rel=1e-12)
    # at the compiled bf16 step measured (two replays and the eager rest), the captured step costs at most that
    bf16 = stepmodel.captured_steps(hf, TrainConfig(arch="resnet9", batch_size=128, precision="bf16"))
    assert bf16[1] < bf16[2] == pytest.approx(stepmodel.H200_COMPILED["bf16"][1], rel=1e-9)


def test_captured_is_below_the_eager_price_where_the_host_bounds_a_step():
    table, hf = _fit()
    measured = next(e for e in table.entries if (e.batch_size, e.precision, e.members) == (128, "tf32", 1))
    r9 = TrainConfig(arch="resnet9", batch_size=128, precision="tf32")
    assert stepmodel.captured_steps(hf, r9)[2] < measured.train_step_s  # the measured eager step: host-bound
    bound = 0
    for arch in ("resnet9", "resnet56", "resnet110"):
        for b in (16, 32, 64, 128, 256):
            for opt in ("sgd", "adam", "muon"):
                c = TrainConfig(arch=arch, batch_size=b, precision="tf32", optimizer=opt)
                eager = stepmodel.modelled_steps(hf, c)
                if stepmodel.step_ops(c) * hf.per_op[1] > hf.gpu_work(c):  # host-bound eager
                    bound += 1
                    assert stepmodel.captured_steps(hf, c)[1] < eager[1], c
    assert bound >= 40


def _captured_plans(table: throughput.Throughput) -> list[plan.SectionPlan]:
    return plan.share_runs([plan.plan_section(p, "paper", table, capture=True) for p in PARAMS])


def test_the_plan_prices_every_captured_step_as_modelled_and_evaluation_as_eager():
    table, hf = _fit()
    for s in _captured_plans(table):
        for p in s.points:
            c = TrainConfig(**p.key)
            low, mid, high = stepmodel.captured_steps(hf, c)
            eval_s = plan.lookup(table, c)[0].eval_image_s  # the eager plan's evaluated image
            seconds = [p.runs * (p.run["steps"] * step + p.run["eval_images"] * eval_s) for step in (low, mid, high)]
            assert [p.seconds_range[0], p.seconds, p.seconds_range[1]] == pytest.approx(seconds, rel=1e-12)
            assert p.source_kind == "modelled" and p.time_source.startswith("modelled: captured, GPU")


def test_the_paper_profiles_captured_plan_counts_each_run_once_and_none_measured(capsys):
    table, _ = _fit()
    eager = plan_json(plan.share_runs([plan.plan_section(p, "paper", table) for p in PARAMS]), table)["totals"]
    assert main(["plan", *PARAMS, "--profile", "paper", "--device", "cuda", "--capture", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    t = doc["totals"]
    assert (t["runs"], t["served_runs"], t["steps"]) == (eager["runs"], eager["served_runs"], eager["steps"])
    assert t["seconds_measured"] == t["seconds_estimated"] == 0 and t["seconds"] == t["seconds_modelled"]
    assert t["seconds_modelled_low"] < t["seconds"] < t["seconds_modelled_high"] and t["seconds"] < eager["seconds"]
    assert doc["throughput"]["model"]["captured"] is True
    assert main(["plan", *PARAMS, "--profile", "paper", "--device", "cuda", "--capture"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("modelled, captured (--capture): a step costs its compiled GPU work")
    h = [t[k] / 3600 for k in ("seconds", "seconds_modelled_low", "seconds_modelled_high")]
    assert f"time {h[0]:.1f} h (modelled {h[0]:.1f} h [{h[1]:.1f} h-{h[2]:.1f} h])" in out[-1], out[-1]


def test_capture_is_refused_without_a_gpu_table_it_can_price(capsys):
    assert main(["plan", PARAMS[0], "--profile", "cpu", "--device", "cpu", "--capture"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--capture needs a GPU table" in err and "--device cuda" in err
    assert main(["plan", "--calibrate", "--capture"]) == 2
    assert "give one of them" in capsys.readouterr().err


def test_the_planners_doc_quotes_the_models_numbers():
    doc = " ".join((REPO / "docs" / "planner.md").read_text(encoding="utf-8").split())
    gain, most, bf16 = stepmodel.COMPILE_GAIN, stepmodel.REPLAY_MAX_S * 1e3, stepmodel.H200_COMPILED["bf16"][1] * 1e3
    assert (f"compiled GPU work (× {gain:.3f}, the H200's compiled fp32 step against its eager one) + one replay, "
            f"from the lowest per-op cost to {most:.2f} ms (the compiled bf16 step, {bf16:.2f} ms, less its GPU "
            "work)") in doc
