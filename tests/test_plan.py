"""The planner (`initmem plan`, study/plan.py): steps, clocks and evaluation work against hand computations on real
profiles, schedules against `lr_factor` summed step by step, throughput tables (calibrated, named, estimated), the
one-line errors, and the sizes `initmem sweep --dry-run` prints."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from initmem.cli.commands import main
from initmem.config import TrainConfig
from initmem.engine.optim import lr_factor
from initmem.metrics import forgetting_clocks
from initmem.study import calibrate, plan, plan_report, throughput
from initmem.study.params import load_section

REPO = Path(__file__).resolve().parent.parent
OPT = str(REPO / "params" / "01_optimizers.yaml")
LONG = str(REPO / "params" / "02_long_training.yaml")


def _table(path, entries, device="NVIDIA Test GPU", kind="cuda"):
    doc = {"device": device, "kind": kind, "torch": "x", "entries": [
        dict(zip(("arch", "width", "batch_size", "precision", "members", "train_step_s", "eval_image_s"), e,
                 strict=True)) for e in entries]}
    path.write_text(json.dumps(doc))
    return str(path)


# ------------------------------------------------------------------------------------------- steps and clocks
def test_long_training_paper_5000_epochs_by_hand():
    plan._lr_sums.cache_clear()
    t0 = time.perf_counter()
    (p,) = plan.plan_section(LONG, "paper").points
    assert time.perf_counter() - t0 < 20  # a 1.76 M-step run is planned without looping in Python
    r = p.run
    assert p.runs == 7 and r["epochs"] == 5000
    assert r["split"] == {"train": 45_000, "val": 5000, "test": 10_000, "train_eval": 5000}  # a fixed subset
    assert r["steps_per_epoch"] == math.ceil(45_000 / 128) == 352
    assert r["steps"] == 352 * 5000 == 1_760_000 and p.steps == 7 * 1_760_000
    c = r["clocks"]
    assert c["T_SGD"] == pytest.approx(1_760_000 * 0.01**2 / 128, rel=1e-15)  # 1.375
    assert c["T_adapt"] == pytest.approx(1_760_000 * 0.01, rel=1e-15) and c["T_L2"] == 0.0
    assert (c["T_SGD_eff"], c["T_adapt_eff"]) == (c["T_SGD"], c["T_adapt"])  # plain sgd: no momentum
    assert r["measured_epochs"] == 5001
    # exact_tau (paper profile): the whole 45,000-image train split at EXACT_TAU_EPOCHS epochs, on top of the
    # 20,000 images (5,000 train-eval + 5,000 val + 10,000 test) every measured epoch evaluates
    assert r["sparse_eval_images"] == plan.EXACT_TAU_EPOCHS * 45_000
    assert r["eval_images"] == 20_000 * 5001 + plan.EXACT_TAU_EPOCHS * 45_000


def test_long_training_5000_epochs_cosine_warmup_matches_stepwise_sum():
    # the paper's 5,000-epoch run with a schedule: no closed form; the planner's numpy path against lr_factor
    c = TrainConfig(epochs=5000, schedule="cosine", warmup_epochs=2.5, lr=0.01)
    plan._lr_sums.cache_clear()
    t0 = time.perf_counter()
    got = plan.run_plan(c)
    assert time.perf_counter() - t0 < 20
    total, warm = 1_760_000, round(2.5 * 352)
    assert got["warmup_steps"] == warm == 880
    lrs = [c.lr * lr_factor("cosine", k, total, warm) for k in range(0, total, 1)]
    want = forgetting_clocks(lrs, 128)
    assert got["clocks"]["T_SGD"] == pytest.approx(want["T_SGD"], rel=1e-12)
    assert got["clocks"]["T_adapt"] == pytest.approx(want["T_adapt"], rel=1e-12)
    assert got["clocks"]["T_adapt"] < 0.51 * total * c.lr  # cosine halves the constant-lr sum, about


@pytest.mark.parametrize("opt, lr, wd", [("sgd", 0.01, 0.0), ("adam", 1e-3, 0.0), ("muon", 0.02, 0.0),
                                         ("sgd_momentum", 0.01, 0.0), ("adamw", 1e-3, 1e-2)])
def test_optimizers_cpu_by_hand(opt, lr, wd):
    plans = {p.grid["optimizer"]: p for p in plan.plan_section(OPT, "cpu").points}
    assert sorted(plans) == sorted(["sgd", "adam", "muon", "sgd_momentum", "adamw"])
    p = plans[opt]
    r, c = p.run, p.run["clocks"]
    assert p.runs == 4 * 2  # 4 sigma_w x 2 seeds
    assert r["steps_per_epoch"] == math.ceil(1500 / 128) == 12 and r["steps"] == 960 and p.steps == 8 * 960
    assert c["T_SGD"] == pytest.approx(960 * lr**2 / 128, rel=1e-14)
    assert c["T_adapt"] == pytest.approx(960 * lr, rel=1e-14)
    assert c["T_L2"] == pytest.approx(wd * 960 * lr, rel=1e-14, abs=0)
    scale = 1 / (1 - 0.9) if opt == "sgd_momentum" else 1.0  # muon's momentum is not folded in
    assert c["T_SGD_eff"] == pytest.approx(960 * (lr * scale) ** 2 / 128, rel=1e-12)
    assert c["T_adapt_eff"] == pytest.approx(960 * lr * scale, rel=1e-12)
    assert r["eval_images_per_epoch"] == 1000 + 1000 + 2000 and r["eval_images"] == 4000 * 81
    assert p.key == {"arch": "resnet9", "width": 0.125, "batch_size": 128, "precision": "fp32", "optimizer": opt}


@pytest.mark.parametrize("kw", [dict(schedule="cosine", warmup_epochs=1.5),
                                dict(schedule="step", step_milestones=(0.3, 0.6, 0.9), step_gamma=0.5),
                                dict(schedule="step", warmup_epochs=4),
                                dict(schedule="constant", warmup_epochs=0.25)])
def test_schedules_match_lr_factor_step_by_step(kw):
    c = TrainConfig(data="synthetic", n_train=1500, n_val=100, n_test=100, batch_size=128, epochs=30, lr=0.05,
                    weight_decay=1e-3, eval_every=7, **kw)
    got = plan.run_plan(c)
    total, warm = 12 * 30, min(360, round(c.warmup_epochs * 12))
    assert got["steps"] == total and got["warmup_steps"] == warm
    lrs = [c.lr * lr_factor(c.schedule, k, total, warm, c.step_milestones, c.step_gamma) for k in range(total)]
    want = forgetting_clocks(lrs, 128, 1e-3)
    for k in ("T_SGD", "T_L2", "T_adapt"):
        assert got["clocks"][k] == pytest.approx(want[k], rel=1e-13), k
    assert got["clocks"]["T_adapt"] < total * c.lr  # the schedule is not the constant lr
    assert got["measured_epochs"] == 6  # epochs 0, 7, 14, 21, 28 and the last, 30
    assert got["split"] == {"train": 1500, "val": 100, "test": 100, "train_eval": 1500}


def test_synthetic_defaults_follow_train():
    s = plan.split_sizes(TrainConfig(data="synthetic", n_val=64))
    assert s == {"train": 2000, "val": 64, "test": 500, "train_eval": 2000}


# ------------------------------------------------------------------------------------------- throughput tables
def test_throughput_file_gives_wall_time(tmp_path, capsys):
    f = _table(tmp_path / "t.json", [("resnet9", 0.125, 128, "fp32", 1, 0.01, 1e-5)])
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    per_run = 960 * 0.01 + 4000 * 81 * 1e-5  # 9.6 s of steps + 3.24 s of evaluation
    for p in doc["sections"][0]["points"]:  # Muon's point says that its own cost is not in the table
        assert p["time_source"] == ("measured" if p["grid"]["optimizer"] != "muon" else
                                    "measured; muon's own cost not timed here: sgd's step")
        assert p["members"] == 1  # cpu profile: ensemble false
        assert p["seconds"] == pytest.approx(8 * per_run)
        assert (p["steps_per_run"], p["steps"], p["eval_images_per_run"]) == (960, 8 * 960, 324_000)
    assert doc["totals"]["seconds"] == pytest.approx(40 * per_run)
    assert doc["totals"]["gpu_hours"] == pytest.approx(40 * per_run / 3600)
    assert doc["totals"]["runs"] == 40 and doc["totals"]["steps"] == 40 * 960
    assert doc["throughput"]["device"] == "NVIDIA Test GPU"
    assert main(["plan", OPT, LONG, "--profile", "cpu", "--throughput", f]) == 0
    out = capsys.readouterr().out
    assert "01_optimizers total: 40 runs, 38,400 steps" in out and "GPU-hours" in out and "estimated" not in out


def test_missing_entry_is_estimated_and_flagged(tmp_path, capsys):
    f = _table(tmp_path / "t.json", [("resnet9", 0.25, 256, "fp32", 1, 0.08, 4e-5),
                                      ("resnet56", 0.125, 128, "bf16", 1, 1.0, 1.0)])
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f, "--json"]) == 0
    p = json.loads(capsys.readouterr().out)["sections"][0]["points"][0]
    assert p["time_source"] == "estimated from resnet9 w0.25 b256 fp32"  # same arch and precision beat same width
    step, ev = 0.08 * 0.5**2 * (128 / 256), 4e-5 * 0.5**2  # width^2 and images per step
    assert p["seconds"] == pytest.approx(8 * (960 * step + 324_000 * ev))
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f]) == 0
    assert "(estimated from resnet9 w0.25 b256 fp32)" in capsys.readouterr().out
    # another arch only: scaled by the arch's multiply-accumulates too
    e, src = plan.lookup(throughput.load_throughput(f), TrainConfig(arch="resnet110", width=0.125, precision="bf16"))
    assert src == "estimated from resnet56 w0.125 b128 bf16" and e.train_step_s == pytest.approx(253 / 125)


def test_no_usable_entry_prints_no_throughput(tmp_path, capsys):
    f = _table(tmp_path / "t.json", [("resnet9", 0.125, 128, "fp32", 8, 0.01, 1e-5)])  # an 8-member ensemble only
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {p["time_source"] for p in doc["sections"][0]["points"]} == {"no throughput"}
    assert doc["totals"]["seconds"] is None and doc["totals"]["points_without_time"] == 5
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f]) == 0
    assert "time no throughput" in capsys.readouterr().out


def test_ensemble_entry_times_the_point_as_one(tmp_path):
    # the smoke profile leaves `ensemble` at the notebook's default (true): 3 runs trained as one network
    t = throughput.load_throughput(_table(tmp_path / "t.json", [("resnet9", 0.0625, 128, "fp32", 3, 0.03, 3e-6),
                                                          ("resnet9", 0.0625, 128, "fp32", 1, 0.02, 2e-6)]))
    p = plan.plan_section(OPT, "smoke", t).points[0]
    assert p.runs == 3 and p.members == 3 and p.time_source == "measured"
    assert p.seconds == pytest.approx(2 * 0.03 + 3 * 256 * 3e-6)  # 2 steps; 128 + 64 + 64 images at epochs 0-2


def test_calibrate_round_trip(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path / "cache"))
    assert main(["plan", "--calibrate", "--device", "cpu", "--steps", "2", OPT, "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    (path,) = (tmp_path / "cache").glob("throughput-*.json")
    assert path == plan.default_table_path(plan.device_name("cpu")[0]) and str(path) in out
    t = throughput.load_throughput(path)
    assert t.kind == "cpu" and t.device.startswith("CPU")
    # the smoke profile needs one (arch, width, batch size, precision), timed with each of its five optimisers
    assert [e.optimizer for e in t.entries] == ["sgd", "sgd_momentum", "adam", "adamw", "muon"]
    assert {(e.arch, e.width, e.batch_size, e.precision, e.members) for e in t.entries} == {
        ("resnet9", 0.0625, 128, "fp32", 1)}
    assert all(0 < e.train_step_s < 60 and 0 < e.eval_image_s < e.train_step_s for e in t.entries)
    e = t.entries[0]
    # the cached table is found by device, with no --throughput
    assert main(["plan", OPT, "--profile", "smoke", "--device", "cpu", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["throughput"]["path"] == str(path) and "gpu_hours" not in doc["totals"]
    points = doc["sections"][0]["points"]
    assert [p["time_source"] for p in points] == ["measured"] * 5 and points[0]["key"]["optimizer"] == "sgd"
    p = points[0]
    assert p["seconds"] == pytest.approx(3 * (2 * e.train_step_s + 768 * e.eval_image_s))  # 3 runs, one by one


def test_a_fresh_clone_plans_every_cpu_point_with_the_reference_cpu_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path / "empty-cache"))  # no calibration on this machine yet
    table, note = calibrate.choose_table("cpu")
    assert table is not None and table.path == str(calibrate.REFERENCE_CPU) and table.kind == "cpu"
    assert "reference CPU" in note and "initmem/study/throughput/reference-cpu.json" in note and "--calibrate" in note
    for params in sorted((REPO / "params").glob("*.yaml")):  # the shipped table times every cpu-scale point
        for profile in ("cpu", "cpu_steps", "cpu_w025") if params.name == "01_optimizers.yaml" else ("cpu",):
            points = plan.plan_section(params, profile, table).points
            assert {p.time_source.split(";")[0] for p in points} == {"measured"}, (params.name, profile)
            assert all(p.seconds > 0 for p in points)
    assert main(["plan", OPT, "--profile", "cpu", "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == note and out[1] == plan_report.LEGEND
    assert all(w in out[1] for w in ("T_SGD =", "T_L2 =", "T_adapt =", "eval img/run ="))
    rows = [ln for ln in out if ln.startswith("  optimizer-")]
    assert len(rows) == 5 and not [r for r in rows if "no throughput" in r or "estimated" in r]
    assert "== 01_optimizers [cpu] 5 points, 40 runs" in out


def test_plan_with_results_counts_the_runs_done_there_and_times_those_left(tmp_path, monkeypatch, capsys):
    """The 5-seed cpu_w025 profile against the committed two-seed tree: its 30 runs are seeds 0 and 1 of the same run
    ids (full_test is not in the run id), so 6 of each point's 15 are done and 9/15 of its time is left."""
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path / "empty-cache"))  # the reference CPU table
    table, _ = calibrate.choose_table("cpu")
    whole = plan.plan_section(OPT, "cpu_w025", table)
    asked = plan.plan_section(OPT, "cpu_w025", table, results=REPO / "results" / "cpu_w025_pilot")
    assert all(p.done is None for p in whole.points) and "left_runs" not in whole.totals()
    assert [(p.done, p.left) for p in asked.points] == [(6, 9)] * 5
    for p, q in zip(whole.points, asked.points, strict=True):
        assert q.seconds == p.seconds and q.left_seconds == pytest.approx(p.seconds * 9 / 15)
    t = asked.totals()
    assert (t["done_runs"], t["left_runs"]) == (30, 45) and t["left_seconds"] == pytest.approx(0.6 * t["seconds"])
    empty = plan.plan_section(OPT, "cpu_w025", table, results=tmp_path / "nothing-yet")
    assert empty.totals()["left_seconds"] == pytest.approx(t["seconds"])
    assert main(["plan", OPT, "--profile", "cpu_w025", "--device", "cpu", "--results",
                 str(REPO / "results" / "cpu_w025_pilot")]) == 0
    out = capsys.readouterr().out
    assert out.count("; done 6/15, left ") == 5 and "30 complete, 45 runs left: " in out
    assert main(["plan", OPT, "--profile", "cpu_w025", "--device", "cpu", "--json", "--results",
                 str(REPO / "results" / "cpu_w025_pilot")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["left_runs"] == 45 and [p["done"] for p in doc["sections"][0]["points"]] == [6] * 5
    for wrong, what in ((OPT, "a folder, not a file"), (REPO / "results" / "cpu_w025_pilot" / "01_optimizers",
                                                        "is a section folder")):
        assert main(["plan", OPT, "--profile", "cpu_w025", "--results", str(wrong)]) == 2  # not a silent 0 done
        assert what in capsys.readouterr().err


def test_a_gpu_without_a_table_gets_the_h200s_labelled_as_another_gpus(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(plan, "cuda_name", lambda device="cuda": "NVIDIA H100")  # a GPU here, never calibrated
    table, note = calibrate.choose_table("cuda")
    assert not table.roofline and table.kind == "cuda" and table.device == "NVIDIA H200" and table.entries
    assert note.startswith("throughput: the reference GPU table (") and ", not on this NVIDIA H100;" in note
    assert "--calibrate --device cuda" in note
    assert main(["plan", OPT, "--profile", "paper", "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(note) and "no throughput" not in out and "roofline" not in out
    rows = [ln for ln in out.splitlines() if ln.startswith("  optimizer-")]
    assert len(rows) == 5 and rows[0].endswith(" min") and all("(modelled: max(GPU " in r for r in rows[1:])
    assert "== 01_optimizers [paper] 5 points, 35 runs" in out


def test_plural():
    assert [plan.plural(n, "step") for n in (0, 1, 2, 1200)] == ["0 steps", "1 step", "2 steps", "1,200 steps"]
    assert plan.plural(1, "point") == "1 point" and plan.plural(3, "entry", "entries") == "3 entries"


# ------------------------------------------------------------------------------------------- errors and the sweep
def _bad_params(tmp_path, text):
    (tmp_path / "params").mkdir()
    f = tmp_path / "params" / "bad.yaml"
    f.write_text(text)
    return str(f)


@pytest.mark.parametrize("text", ["section: [\n", "section: x\nnotebook: nope.py\nprofiles: {cpu: {}}\n"])
def test_bad_params_file_one_line_like_sweep(tmp_path, capsys, text):
    f = _bad_params(tmp_path, text)
    assert main(["plan", f, "--profile", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("initmem plan: error: ") and str(f) in err
    assert main(["sweep", f, "--profile", "cpu", "--dry-run"]) == 2
    assert capsys.readouterr().err.replace("initmem sweep:", "initmem plan:") == err


def test_bad_profile_and_bad_table_one_line(tmp_path, capsys):
    assert main(["plan", OPT, "--profile", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
    (tmp_path / "t.json").write_text('{"device": "x", "entries": [{"arch": "resnet9"}]}')
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is invalid" in err
    assert main(["plan", OPT]) == 2 and "--profile" in capsys.readouterr().err


def test_sweep_dry_run_prints_sizes(tmp_path, capsys, monkeypatch):
    from initmem.data import fetch
    monkeypatch.setattr(fetch, "data_problem", lambda *a: None)  # as if data/ held CIFAR-10 (test_data_fetch: without)
    assert main(["sweep", OPT, "--profile", "cpu", "--dry-run", "--results", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.count("8 runs x 80 epochs x 12 steps = 7,680 steps") == 5
    assert "total: 40 runs, 3,200 epochs, 38,400 steps; to run: 40 runs, 38,400 steps" in out
    assert main(["sweep", OPT, "--profile", "smoke", "--dry-run", "--results", str(tmp_path), "--quiet"]) == 0
    assert capsys.readouterr().out.count("3 runs x 2 epochs x 1 step = 6 steps") == 5  # one step an epoch: "1 step"
    assert "slurm" not in out
    assert main(["sweep", OPT, "--profile", "cpu", "--dry-run", "--results", str(tmp_path), "--executor", "slurm",
                 "--partition", "gpu", "--gpus", "1", "--time", "90", "--mem", "32"]) == 0
    out = capsys.readouterr().out
    assert "slurm: an array of 5 task(s)" in out
    for s in ("slurm_partition=gpu", "gpus_per_node=1", "timeout_min=90", "mem_gb=32.0", "cpus_per_task left"):
        assert s in out, s


@pytest.mark.parametrize("profile", calibrate.COMMITTED_CPU)
def test_the_reference_table_plans_each_committed_cpu_profile_within_35_percent_of_its_runs(profile):
    """`initmem plan` of every section of a committed CPU profile against the sum of its runs' own wall_time_s."""
    table = throughput.load_throughput(calibrate.REFERENCE_CPU)
    name = profile.split("/")[1]
    plans = [plan.plan_section(p, name, table) for p in sorted((REPO / "params").glob("*.yaml"))
             if name in load_section(p).profiles]
    committed = calibrate._committed([profile])
    planned_runs = sum(pt.runs for s in plans for pt in s.points)
    # per run where the profile asks more seeds than are committed (cpu_w025: five asked, two committed so far), and
    # less the evaluations its committed runs did not make (cpu_w025 asks full_test now; they were trained without)
    assert not any(c.full_test or c.exact_tau for c, _ in committed)
    sparse = sum(pt.runs * pt.run["sparse_eval_images"] * plan.lookup(table, TrainConfig(**pt.key))[0].eval_image_s
                 for s in plans for pt in s.points)
    assert (sparse > 0) == (name == "cpu_w025")
    planned = (sum(pt.seconds for s in plans for pt in s.points) - sparse) * len(committed) / planned_runs
    measured = sum(w for _, w in committed)
    assert len(committed) <= planned_runs and measured > 3600 and 0.65 <= planned / measured <= 1.35, (
        profile, planned / 3600, measured / 3600)


def test_the_reference_table_is_what_the_committed_runs_derive():
    """The shipped table is `from_runs` of the committed CPU trees over the shipped calibration (docs/planner.md):
    a committed run added or changed without regenerating it fails here."""
    base = throughput.load_throughput(calibrate.REFERENCE_CPU.with_name("calibrated-cpu.json"))
    derived = calibrate.from_runs(list(calibrate.COMMITTED_CPU), base)
    shipped = throughput.load_throughput(calibrate.REFERENCE_CPU)
    key = lambda e: (e.arch, e.width, e.batch_size)  # noqa: E731
    assert [key(e) for e in sorted(derived.entries, key=key)] == [key(e) for e in shipped.entries]
    for d, s in zip(sorted(derived.entries, key=key), shipped.entries, strict=True):
        assert d.train_step_s == pytest.approx(s.train_step_s, rel=1e-9)
        assert d.eval_image_s == pytest.approx(s.eval_image_s, rel=1e-9)


@pytest.mark.parametrize("params, profile", [
    ("01_optimizers", "cpu"), ("01_optimizers", "cpu_steps"), ("01_optimizers", "cpu_w025"),
    ("01_optimizers", "cpu_w025_pilot"), ("01_optimizers", "cpu_w025_lr"), ("01_optimizers", "cpu_w025_eps"),
    ("01_optimizers", "cpu_w025_ams"), ("02_long_training", "cpu"), ("03_lr_l2", "cpu"), ("04_batch_size", "cpu"),
    ("05_depth", "cpu")])
def test_every_committed_profile_finds_its_runs_where_its_command_points(params, profile, tmp_path, monkeypatch):
    """A finished profile's default tree, results/<profile>, holds every run it asks for: its command resumes
    nothing (the headline grid included), and a refactor of params/ that changed a run id fails here."""
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path / "empty-cache"))
    table, _ = calibrate.choose_table("cpu")
    got = plan.plan_section(REPO / "params" / f"{params}.yaml", profile, table, results=REPO / "results" / profile)
    assert got.totals()["left_runs"] == 0 and got.totals()["done_runs"] == got.totals()["runs"]
