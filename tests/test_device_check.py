"""benchmarks.device_check on the CPU, as CI runs it: `python -m benchmarks.device_check --device cpu --tiny` from
the repository root (the CPU stands in for CUDA), then its JSON, Markdown, throughput table and logs archive (the only
four files it leaves in --out); a failing and a hanging step are recorded while the others run, and the check exits
non-zero with its reason on screen; an exhausted budget skips the rest."""

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
from conftest import cifar10_archive_path

from benchmarks import device_check as dc
from benchmarks import device_steps as ds
from benchmarks import parity

REPO = Path(__file__).resolve().parents[1]
STATUSES = {"ok", "failed", "skipped", "timed_out"}
STEPS = ("env", "parity_fp32", "population_vs_separate", "resume", "rerun", "parity_bf16", "parity_muon", "parity_tf32",
         "epoch_eager", "population", "epoch_compile", "paper")  # correctness first, the optional steps last
OUTPUTS = {"device_check.json", "device_check.md", "throughput.json", "logs.tar.gz"}


def _run(*args: str, timeout: float = 800) -> subprocess.CompletedProcess:
    """`python -m benchmarks.device_check ARGS` from the repository root, as the docs give it (no PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "benchmarks.device_check", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _check(out: Path, *args: str, timeout: float = 800, rc: int = 0, tiny: bool = True) -> tuple[dict, str]:
    """Run the check into `out` on the CPU; its JSON document (its exit code `rc`, said on screen) and its stdout."""
    proc = _run("--device", "cpu", *(["--tiny"] if tiny else []), "--out", str(out), *args, timeout=timeout)
    assert proc.returncode == rc, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "device_check.json").read_text())
    assert doc["exit_code"] == rc and f"exit code {rc}" in proc.stdout
    return doc, proc.stdout


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, float]:
    out, t0 = tmp_path_factory.mktemp("device-check"), time.perf_counter()
    doc, _ = _check(out, "--budget-s", "1200", "--limit", "epoch_eager=240")  # the default (285 s) is a GPU's;
    # 136 s on 2 cores beside two training processes (185 s before --tiny's deep network became ResNet-20, its
    # population step two batch sizes and its paper step 10 s: docs/experiments/performance/README.md)
    return doc, out, time.perf_counter() - t0


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
    assert {r["arch"] for r in steps["epoch_eager"]["results"]["runs"]} == {"resnet9", "resnet20"}
    assert {r["precision"] for r in steps["epoch_eager"]["results"]["runs"]} == {"fp32", "bf16"}
    rows = steps["population"]["results"]["rows"]
    assert [r["batch_size"] for r in rows] == [16, 64]
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
    assert all(r["steps_per_epoch"] * r["batch_size"] == 512 for r in comp["runs"])  # whole batches: one graph


def test_the_check_leaves_four_files_and_its_logs_in_one_archive(tiny):
    doc, out, _ = tiny
    assert {p.name for p in out.iterdir()} == OUTPUTS and all(p.is_file() for p in out.iterdir())
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    steps = [f"logs/{s['name']}.log" for s in doc["steps"] if s["status"] != "skipped" or s["name"] == "parity_tf32"]
    helpers = ["logs/resume.killed.log", *(f"logs/population.child{i}.log" for i in range(3))]  # their processes'
    assert sorted(names) == sorted(steps + helpers)  # a step that ran (tf32 skips itself) left its log


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
    from initmem.study.plan import lookup
    from initmem.study.throughput import load_throughput

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
    """No margin here is a quiet machine's: the hang is killed at the limit it is given (4 s), and the paper step has
    all of its 300 s (`--limit paper=`, no --tiny cap) for one epoch a population, which takes seconds even at load
    8 on 2 cores (its import time is not counted against it). Each step a fresh interpreter (`--launch exec`)."""
    doc, stdout = _check(tmp_path, "--only", "parity_fp32", "--only", "rerun", "--only", "paper", "--fail",
                         "parity_fp32", "--hang", "rerun", "--limit", "rerun=4", "--limit", "paper=300", "--budget-s",
                         "900", "--paper-epochs", "1", "--launch", "exec", rc=1)
    steps = _steps(doc)
    assert list(steps) == list(STEPS)
    assert steps["parity_fp32"]["status"] == "failed" and "injected failure" in steps["parity_fp32"]["error"]
    assert steps["rerun"]["status"] == "timed_out" and "limit of 4 s" in steps["rerun"]["error"]
    assert steps["rerun"]["seconds"] < 30  # killed at its limit, not left to sleep
    assert steps["env"]["status"] == "ok" and steps["paper"]["status"] == "ok"
    assert all(p["stopped"] == "finished" and p["epochs"] == 1 for p in steps["paper"]["results"]["populations"])
    assert steps["resume"]["status"] == "skipped" and "--only" in steps["resume"]["reason"]
    assert doc["counts"]["failed"] == 1 and doc["counts"]["timed_out"] == 1
    md = (tmp_path / "device_check.md").read_text()
    assert "| parity_fp32 | failed |" in md and "| rerun | timed_out |" in md
    reason = stdout.strip().splitlines()[-1].split("exit code 1: ", 1)[1]  # the reason, on screen
    assert "parity_fp32 failed: RuntimeError: injected failure" in reason and "rerun timed_out" in reason


def test_a_check_of_the_environment_alone_says_why_it_exits_1(tmp_path):
    _, stdout = _check(tmp_path, "--only", "env", rc=1, timeout=300)
    assert "exit code 1: no check of the engine ran (--only env selects none" in stdout


def test_an_archive_that_does_not_load_is_shown_on_screen(tmp_path):
    import gzip

    archive = tmp_path / "cifar10-jpeg.tar.gz"
    archive.write_bytes(gzip.compress(bytes(100_000))[:60])  # a gzip stream cut short
    doc, stdout = _check(tmp_path / "out", "--archive", str(archive), "--only", "env", rc=1, timeout=300, tiny=False)
    assert doc["checks"]["failed"] == ["env"] and "data_error" in _steps(doc)["env"]["results"]
    env_line = next(line for line in stdout.splitlines() if "] env: " in line)
    assert "pass=False" in env_line and "DataError" in env_line and "truncated" in env_line
    assert "exit code 1: env failed its check: " in stdout and "DataError" in stdout.strip().splitlines()[-1]


def test_an_exhausted_budget_skips_the_steps_and_still_writes_the_report_and_fails(tmp_path):
    doc, _ = _check(tmp_path, "--budget-s", "10", timeout=120, rc=1)  # a check that checked nothing did not pass
    assert all(s["status"] == "skipped" and "no time left" in s["reason"] for s in doc["steps"])
    assert doc["checks"] == {"passed": [], "failed": []}
    assert "No check of the engine ran: exit code 1" in (tmp_path / "device_check.md").read_text()


def test_a_check_where_only_the_environment_was_checked_fails(tmp_path):
    doc, _ = _check(tmp_path, "--budget-s", "5", "--limit", "env=4", timeout=120, rc=1)
    assert doc["checks"]["passed"] in ([], ["env"]) and all(s["status"] == "skipped" for s in doc["steps"][1:])
    # an empty table (the planner refuses one: nothing to time with), written all the same
    assert json.loads((tmp_path / "throughput.json").read_text())["entries"] == []
    assert (tmp_path / "device_check.md").is_file()


def test_histories_compare_bitwise_and_relatively():
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


def _refused(*args: str, tiny: bool = True) -> str:
    """Run the check with `args`: it must exit 2 before any step, with one line on stderr; that line."""
    proc = _run("--device", "cpu", *(["--tiny"] if tiny else []), *args, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize("args, named", [
    (("--budget-s", "0"), "--budget-s='0'"), (("--budget-s", "-1"), "--budget-s='-1'"),
    (("--budget-s", "nan"), "--budget-s='nan'"), (("--budget-s", "inf"), "--budget-s='inf'"),
    (("--threads", "0"), "--threads='0'"), (("--limit", "env"), "--limit='env'"),
    (("--limit", "env=soon"), "--limit env=='soon'"), (("--limit", "nosuch=5"), "--limit='nosuch=5'")])
def test_bad_flags_are_one_line_errors_before_any_step(tmp_path, args, named):
    line = _refused("--out", str(tmp_path / "out"), *args)
    assert named in line and "is accepted" in line
    assert not (tmp_path / "out").exists()  # refused before anything was made


def test_an_out_that_is_a_file_or_not_writable_is_refused_before_any_step(tmp_path):
    (tmp_path / "file").write_text("x")
    assert "is a file" in _refused("--out", str(tmp_path / "file"))
    assert (tmp_path / "file").read_text() == "x"
    assert "is not a writable folder" in _refused("--out", str(tmp_path / "file" / "below"))
    assert "is not a writable folder" in _refused("--out", "/proc/self")  # read-only even for root
    if os.geteuid() != 0:  # root writes into a mode-0555 folder
        (tmp_path / "ro").mkdir(mode=0o555)
        assert "is not a writable folder" in _refused("--out", str(tmp_path / "ro"))


def test_an_empty_out_or_one_in_the_repository_outside_docs_gpu_is_refused_before_any_step(tmp_path):
    line = _refused("--out", "")  # `--out "$OUT"` with OUT unset
    assert "--out='' is empty" in line and "a folder is accepted" in line
    for inside in ("results/device-check", str(REPO / "dc"), "docs/gpu"):
        line = _refused("--out", inside)
        assert f"--out={inside!r} is inside the repository but not a folder under docs/gpu/" in line
        assert not (REPO / inside).exists() or inside == "docs/gpu"


def test_a_missing_archive_is_an_error_unless_synthetic_is_asked(tmp_path):
    line = _refused("--archive", str(tmp_path / "none.tar.gz"), "--out", str(tmp_path / "out"), tiny=False)
    assert "none.tar.gz" in line and "does not exist" in line and "--synthetic" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("plant, passes", [("threads", True), ("bn", False)])  # the other plants: in-process below
def test_a_planted_bug_fails_the_parity_check_and_a_rounding_change_does_not(tmp_path, plant, passes):
    doc, _ = _check(tmp_path, "--only", "parity_fp32", "--plant", plant, "--limit", "parity_fp32=240",
                    rc=0 if passes else 1, timeout=400)  # 2 threads on oversubscribed cores: minutes
    step = _steps(doc)["parity_fp32"]
    assert step["status"] == "ok" and step["pass"] is passes and step["results"]["setup"]["planted"] == plant
    v = step["results"]["verdict"]
    assert v["epoch0"]["pass"] and v["epoch0"]["max"] == 0.0  # nothing trained yet: the same forward pass
    assert v["trained"]["pass"] is passes


def test_the_parity_verdict_separates_rounding_from_bugs_on_real_data():
    """The full-mode parity run on CIFAR-10 with channels_last on and off (the pair passes), and
    with a wrong lr, another seed's minibatches and a skipped BatchNorm update (each fails): docs/gpu/README.md."""
    archive = str(cifar10_archive_path() or "")  # data/, then $INITMEM_TEST_ARCHIVE
    if not archive:
        pytest.skip("real CIFAR-10 not found: `initmem data --from <cifar10-jpeg.tar.gz>` puts it into data/ (or set "
                    "INITMEM_TEST_ARCHIVE)")
    import torch

    from initmem.config import TrainConfig

    threads = torch.get_num_threads()
    try:
        got = parity.spread(TrainConfig(data="auto", data_root=archive, device="cpu", deterministic=True,
                                        **ds.SIZES["full"]["parity"]), layouts=((True, 1), (False, 1)))
        # the pair with the largest rounding spread measured (parity_spread.json: 1.96e-3); all six pairs take 2
        # more runs, ~20 s of CI: `python -m benchmarks.parity ARCHIVE` measures them
    finally:
        torch.set_num_threads(threads)
    print(json.dumps({k: v for k, v in got.items() if k != "config"}, indent=1))
    assert len(got["rounding"]) == 1 and all(p["pass"] for p in got["rounding"].values()), got["rounding"]
    assert all(p["epoch0_max"] <= 1e-6 for p in got["rounding"].values())
    assert [got[bug]["pass"] for bug in parity.BUGS] == [False, False, False], got


def test_histories_compare_by_the_verdict_epoch_zero_tight():
    a = pd.DataFrame({"epoch": [0, 1, 2], "train_loss": [float("nan"), 2.0, 1.8], "val_loss": [2.3, 2.0, 1.9],
                      "test_loss": [2.3, 2.1, 2.0], "weight_norm": [10.0, 10.5, 10.7]})
    assert parity.verdict(a, a.copy(), "fp32")["pass"]
    after = a.assign(val_loss=[2.3, 2.0, 1.9 * (1 + 0.5 * parity.TRAINED["fp32"])])  # rounding-sized, after training
    assert parity.verdict(a, after, "fp32")["pass"]
    early = a.assign(val_loss=[2.3 * (1 + 1e-4), 2.0, 1.9])  # 1e-4 at epoch 0: the forward pass itself differs
    v = parity.verdict(a, early, "fp32")
    assert not v["pass"] and not v["epoch0"]["pass"] and v["trained"]["pass"]
    assert parity.verdict(a, early, "bf16")["pass"]  # bf16 rounds its forward pass: 1e-4 is within it
    far = a.assign(train_loss=[float("nan"), 2.0, 1.8 * (1 + 2 * parity.TRAINED["fp32"])])
    assert not parity.verdict(a, far, "fp32")["trained"]["pass"]
    skipped_bn = {"weights_init_rel": 0.0, "weights_rel": 0.0, "buffers_rel": 1.0}
    assert not parity.verdict(a, a.copy(), "fp32", states=skipped_bn)["pass"]
    other_init = {"weights_init_rel": 1e-3, "weights_rel": 0.0, "buffers_rel": 0.0}
    assert not parity.verdict(a, a.copy(), "fp32", states=other_init)["epoch0"]["pass"]


def test_the_compile_guard_stops_a_slow_configuration_and_keeps_the_step(tmp_path, monkeypatch):
    """A compiled configuration still running at the step's deadline is stopped by the step (`guard`) and listed as
    not reached; the step returns normally instead of being killed at its limit with nothing."""
    assert not issubclass(ds.Overrun, Exception)  # no `except Exception` in torch.compile's stack swallows it
    import torch._dynamo  # noqa: F401 - what the step imports, before its clock starts

    import initmem.engine.runtime  # noqa: F401
    import initmem.engine.trainer  # noqa: F401

    ctxfile = tmp_path / "epoch_compile.ctx.json"
    ctxfile.write_text(json.dumps({"settings": {"device": "cpu", "mode": "tiny", "data": "synthetic",
                                                "data_root": "data", "precision": "fp32"},
                                   "deadline": time.time() + 6.0, "result": str(tmp_path / "r.json")}))
    ctx = ds.Ctx(ctxfile)
    monkeypatch.setattr(ds, "_timed_epochs", lambda cfg, ctx=None: time.sleep(120))  # a compile that never ends
    import torch

    # --tiny's step swaps torch.compile for an eager-backend one (a step is its own process); restored after this
    # test, else a later test in this worker compiling with its own backend gets eager's (test_train's counter: 0)
    monkeypatch.setattr(torch, "compile", torch.compile)
    t0 = time.perf_counter()
    ds.step_epochs(ctx, True)
    assert time.perf_counter() - t0 < 60
    assert "guard: not finished" in ctx.res["not_reached"][0]["reason"] and "runs" not in ctx.res


def _ctx(tmp_path: Path, name: str, seconds: float):
    import initmem.engine.runtime  # noqa: F401 - what the steps import, before their clock starts
    import initmem.engine.trainer  # noqa: F401
    import initmem.study.plan  # noqa: F401

    ctxfile = tmp_path / f"{name}.ctx.json"
    ctxfile.write_text(json.dumps({"settings": {"device": "cpu", "mode": "tiny", "data": "synthetic",
                                                "data_root": "data", "precision": "fp32"},
                                   "deadline": time.time() + seconds, "result": str(tmp_path / "r.json")}))
    return ds, ds.Ctx(ctxfile)


def test_the_guard_stops_a_slow_eager_configuration_too(tmp_path, monkeypatch):
    """On the H200 an eager configuration's first CUDA warm-up (19 s of evaluation, 32 s of a first epoch at b = 512)
    outlasted the step's limit and the step was killed with its results unwritten: eager runs are guarded too."""
    ds, ctx = _ctx(tmp_path, "epoch_eager", 6.0)
    monkeypatch.setattr(ds, "_timed_epochs", lambda cfg, ctx=None: time.sleep(120))
    t0 = time.perf_counter()
    ds.step_epochs(ctx, False)
    assert time.perf_counter() - t0 < 60
    reason = ctx.res["not_reached"][0]["reason"]
    assert "guard: not finished" in reason and "graphs" not in reason and "runs" not in ctx.res


def test_an_arch_not_timed_yet_is_not_started_without_the_time_the_slowest_took(tmp_path, monkeypatch):
    """The deep network's first guess was 0 s: with 15 s left the H200's check started ResNet-56 and was killed. An
    arch not yet timed now counts at least what the slowest configuration so far took."""
    ds, ctx = _ctx(tmp_path, "epoch_eager", 5.5)

    def timed(cfg, ctx=None):
        time.sleep(1.5)
        return {"arch": cfg.arch, "batch_size": cfg.batch_size, "precision": cfg.precision}

    monkeypatch.setattr(ds, "_timed_epochs", timed)
    ds.step_epochs(ctx, False)
    deep = ds.SIZES["tiny"]["deep"]
    assert [r["arch"] for r in ctx.res["runs"]] == ["resnet9"]
    assert deep in {x["arch"] for x in ctx.res["not_reached"]}
    assert all("s left in the step" in x["reason"] for x in ctx.res["not_reached"])  # none started and stopped


def test_a_paper_population_slower_than_its_share_is_stopped_by_the_guard(tmp_path, monkeypatch):
    """The H200's paper step was killed in its first evaluation (before any step, where `on_step` cannot stop it):
    the guard ends the population at its share of the time, with 0 epochs recorded, and the step goes on."""
    ds, ctx = _ctx(tmp_path, "paper", 30.0)
    import initmem.engine.trainer as trainer

    monkeypatch.setattr(trainer, "train", lambda *a, **k: time.sleep(120))  # an evaluation that never ends
    configs = [ds.config(ctx, "split", batch_size=64, sigma_w=s) for s in (0.1, 2.5)]
    t0 = time.perf_counter()
    got = ds._paper_population(configs, tmp_path / "sgd", time.time() + 1.5)
    assert time.perf_counter() - t0 < 20
    assert got["stopped"] == "stopped by the guard at the step's deadline" and got["epochs"] == 0


class _Idle:
    """A concurrent process of the population step that never gets ready (`spawn` replaced)."""

    args = ["_steps_child"]

    def poll(self) -> None:
        return None

    def kill(self) -> None:
        pass


def test_a_population_step_at_its_deadline_stops_itself_and_keeps_what_it_measured(tmp_path, monkeypatch):
    """The H200's population step was killed in b = 512, losing what came after: a batch size still timing at the
    step's deadline is stopped by the guard and listed as not reached, the rows before it are kept, the concurrent
    processes that never got ready are named, and the step returns (ok) instead of being killed."""
    ds, ctx = _ctx(tmp_path, "population", 8.0)
    import initmem.engine.trainer as trainer

    monkeypatch.setattr(ds, "spawn", lambda *a, **k: _Idle())

    def time_steps(cfg, steps, warmup, population):  # b = 16 at once; b = 64 never ends (a C call that returns)
        time.sleep(0 if cfg.batch_size == 16 else 120)
        return 0.01

    monkeypatch.setattr(trainer, "time_steps", time_steps)
    t0 = time.perf_counter()
    ds.step_population(ctx)
    assert time.perf_counter() - t0 < 60
    assert [r["batch_size"] for r in ctx.res["rows"]] == [16]
    stopped = {(x["batch_size"], x["what"]): x["reason"] for x in ctx.res["not_reached"]}
    assert "guard: not finished" in stopped[(64, "population and separate")]
    assert (16, "concurrent") in stopped  # the processes never got ready: said, not waited for past the deadline


def test_the_report_names_no_path_of_the_machine_it_ran_on(tmp_path, tiny):
    root = Path("/srv/box/initmem")
    doc = {"args": {"out": "/root/out", "archive": "data/a.tar.gz"},
           "steps": [{"results": {"source": f"imagefolder-tar:{root}/data/a.tar.gz", "n": 3,
                                  "config": [{"data_root": f"{root}/data/a.tar.gz"}]}}]}
    got = dc.portable(doc, root)
    assert got["args"] == {"out": "out", "archive": "data/a.tar.gz"}
    assert got["steps"][0]["results"] == {"source": "imagefolder-tar:data/a.tar.gz", "n": 3,
                                          "config": [{"data_root": "data/a.tar.gz"}]}
    assert dc.portable({"p": f"{REPO}/data/x", "out": str(tmp_path / "dc")}) == {"p": "data/x", "out": "dc"}
    _, out, _ = tiny  # the check itself: its --out was an absolute path outside the repository
    assert all(str(REPO) not in (out / f).read_text() and str(out) not in (out / f).read_text()
               for f in ("device_check.json", "device_check.md"))


def test_gpu_prepare_lays_the_archive_and_prints_the_command_with_what_to_carry(tmp_path):
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("data/\n")
    for name in ("gpu_prepare.sh", "device_check.py"):
        (repo / "benchmarks" / name).write_bytes((REPO / "benchmarks" / name).read_bytes())
    script = ["bash", str(repo / "benchmarks" / "gpu_prepare.sh")]
    proc = subprocess.run(script, capture_output=True, text=True)
    assert proc.returncode == 2 and "data/cifar10-jpeg.tar.gz is missing" in proc.stderr
    (tmp_path / "a.tar.gz").write_bytes(b"not cifar")
    proc = subprocess.run([*script, str(tmp_path / "a.tar.gz")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (repo / "data" / "cifar10-jpeg.tar.gz").read_bytes() == b"not cifar"
    assert "warning" in proc.stderr and "sha256" in proc.stderr  # not the committed results' archive: said
    budget = f"{dc.BUDGET_S:g}"
    assert (f"python3 -m benchmarks.device_check --device cuda --archive data/cifar10-jpeg.tar.gz --out \"$OUT\" "
            f"--budget-s {budget}" in proc.stdout)
    assert "carry: data/cifar10-jpeg.tar.gz" in proc.stdout and f"timeout {int(budget) + 60} s" in proc.stdout
