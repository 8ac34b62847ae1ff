"""Run-folder locks: exclusive across processes, re-entrant within one, released when the holder dies; the sweep
skips a locked run, waits for it at the end and re-checks completion, or (a local sweep) defers its point and comes
back to it after the others; two sweeps over one folder train every run exactly once."""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter

import faults
import pytest

from initmem.config import TrainConfig
from initmem.engine.trainer import train
from initmem.errors import PointDeferred, ResultsError
from initmem.store import folders
from initmem.store.folders import RunFolders
from initmem.store.results import load_runs, read_run
from initmem.study import point

SWEEP = {**faults.TINY, "epochs": 2}
HOLD = """
import sys, time
from pathlib import Path
from initmem.store import folders
lock = folders.lock(sys.argv[1])
print("GOT" if lock else "HELD", flush=True)
if lock and len(sys.argv) > 2:
    go = Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.05)
    exec(go.read_text())
"""


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _probe(folder) -> str:
    """What another process gets when it tries the lock now: GOT or HELD."""
    rc, out = faults.run([*faults.python_cmd(HOLD), str(folder)], timeout=120)
    assert rc == 0, out
    return out.strip().splitlines()[-1]


def test_the_lock_is_exclusive_across_processes_and_reentrant_within_one(tmp_path):
    folder = tmp_path / "s" / "abc123"
    lock = folders.lock(folder)
    assert lock is not None and folders.lock_path(folder) == tmp_path / "s" / "abc123.lock"
    assert not folder.exists()  # the lock lives beside the run folder: nothing half-made inside
    assert re.fullmatch(rf".+ pid {os.getpid()} since \d{{4}}-.+", folders.holder(folder))
    inner = folders.lock(folder)  # re-entrant: train_point holds it, then train() takes it again
    assert inner is not None
    inner.release()
    assert _probe(folder) == "HELD"  # the outer hold still counts
    lock.release()
    lock.release()  # idempotent
    assert _probe(folder) == "GOT"
    with folders.lock(folder) as again:
        assert again is not None
    assert _probe(folder) == "GOT"


def test_a_lock_whose_holder_was_killed_is_acquirable(tmp_path):
    folder = tmp_path / "run"
    holder = faults.Child([*faults.python_cmd(HOLD), str(folder), str(tmp_path / "never")])
    holder.wait_for("^GOT$")
    assert folders.lock(folder) is None
    assert f"pid {holder.proc.pid} " in folders.holder(folder)
    holder.kill()  # no release, no cleanup: the kernel drops the flock with the process
    lock = folders.lock(folder)
    assert lock is not None
    lock.release()


def test_train_refuses_a_run_that_another_process_holds(tmp_path):
    cfg = TrainConfig(**SWEEP)
    folder = RunFolders(tmp_path, "s").run(cfg).folder
    holder = faults.Child([*faults.python_cmd(HOLD), str(folder), str(tmp_path / "never")])
    try:
        holder.wait_for("^GOT$")
        with pytest.raises(ResultsError, match=rf"is locked by .+ pid {holder.proc.pid} since .*training this run"):
            train(cfg, out_dir=tmp_path, section="s", progress=False)
        assert not folder.exists()
    finally:
        holder.kill()


def test_the_sweep_skips_a_locked_run_waits_for_it_and_does_not_train_it_again(tmp_path, monkeypatch, capsys):
    locked = TrainConfig(**{**SWEEP, "sigma_w": 0.5})
    other = TrainConfig(**{**SWEEP, "sigma_w": 1.0})
    go = tmp_path / "go.py"
    holder = faults.Child([*faults.python_cmd(HOLD), str(RunFolders(tmp_path, "s").run(locked).folder), str(go)])
    holder.wait_for("^GOT$")
    trained, real = [], point.train
    monkeypatch.setattr(point, "train", lambda c, **kw: (trained.append(c.sigma_w), real(c, **kw))[1])
    result = {}
    sweep = threading.Thread(target=lambda: result.update(df=faults.sweep_point(
        SWEEP, sigma_ws=[0.5, 1.0], results=tmp_path, section="s", progress=False)))
    sweep.start()
    deadline, owner = time.monotonic() + 120, RunFolders(tmp_path, "s")
    while not owner.run(other).is_complete() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert owner.run(other).is_complete() and sweep.is_alive()  # did the free run, now waits for the locked one
    go.write_text(f"from initmem.engine.trainer import TrainConfig, train\n"
                  f"train(TrainConfig(**{SWEEP | {'sigma_w': 0.5}!r}), out_dir={str(tmp_path)!r}, section='s', "
                  f"progress=False)\n")  # the holder trains it under its lock (re-entrant), then exits
    sweep.join(timeout=120)
    assert not sweep.is_alive() and holder.finish()[0] == 0
    out = capsys.readouterr().out
    assert re.search(r"\[1/2\] sigma_w=0.5 seed=0 \(\w+\): locked by .+ pid \d+ .*will wait for it", out)
    assert "waiting for" in out and "completed by another process meanwhile" in out
    assert trained == [1.0]  # the locked run was trained once, by its holder
    assert result["df"]["status"].tolist() == ["complete", "complete"]


def test_a_deferring_point_trains_its_free_runs_then_names_the_locked_one(tmp_path, monkeypatch):
    locked, free = (TrainConfig(**{**SWEEP, "sigma_w": s}) for s in (0.5, 1.0))
    owner = RunFolders(tmp_path, "s")
    holder = faults.Child([*faults.python_cmd(HOLD), str(owner.run(locked).folder), str(tmp_path / "never")])
    try:
        holder.wait_for("^GOT$")
        with pytest.raises(PointDeferred, match=rf"1 run\(s\) .*sigma_w=0.5 seed=0 .* by .+ pid {holder.proc.pid} "):
            point.train_point([locked, free], results=tmp_path, section="s", population=False, progress=False,
                              defer=True)
        assert owner.run(free).is_complete() and not owner.run(locked).is_complete()
        monkeypatch.setenv(PointDeferred.env, "1")  # what a local sweep's kernel gets: run_point defers too
        with pytest.raises(PointDeferred):
            faults.sweep_point(SWEEP, sigma_ws=[0.5, 1.0], results=tmp_path, section="s")
    finally:
        holder.kill()


DEFER_NOTEBOOK = """\
# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% tags=["parameters"]
results_dir = "results/adhoc"
section = "t"
sigma_ws = [0.5]
seeds = [0]
lr = 0.01

# %%
import os
from pathlib import Path
from initmem.errors import PointDeferred
first_pass = os.environ.get(PointDeferred.env) == "1"
with open(Path(results_dir) / "log.txt", "a") as log:
    print(lr, "first" if first_pass else "again", file=log)
if lr == 0.01 and first_pass:  # what train_point raises when another process holds the point's runs left
    raise PointDeferred("1 run(s) of this point are being trained by another process (held by the test)")
"""


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_sweep_defers_a_point_and_comes_back_to_it_after_the_others(tmp_path, capsys, jobs):
    """A point deferred in the sweep's first pass (`PointDeferred` in its kernel) is executed again, without deferring,
    after the points queued before it came back, and counted once; a Slurm task or `initmem run` never defers."""
    from initmem.study.sweep import run_sweep
    params = faults.mini_project(tmp_path, "01_optimizers.py", {k: v for k, v in SWEEP.items() if k != "lr"},
                                 {"lr": [0.01, 0.02, 0.03]})
    (tmp_path / "notebooks" / "t.py").write_text(DEFER_NOTEBOOK)
    out = tmp_path / "out"
    (out / "t").mkdir(parents=True)
    (out / "log.txt").touch()
    report = run_sweep(params, profile="smoke", results=out, jobs=jobs, progress=False)
    assert [p.status for p in report.points] == ["ran", "ran", "ran"] and report.exit_code == 0
    log = (out / "log.txt").read_text().split("\n")[:-1]
    assert sorted(log) == ["0.01 again", "0.01 first", "0.02 first", "0.03 first"]
    if jobs == 1:  # one at a time: the deferred point comes back after every other point
        assert log == ["0.01 first", "0.02 first", "0.03 first", "0.01 again"]
    else:  # the pool queues it behind the points submitted before it came back
        assert log.index("0.01 again") > max(log.index("0.01 first"), log.index("0.02 first"))
    text = capsys.readouterr().out
    assert re.search(r"^t lr-0\.01\S*: deferred after [\d.]+ s: 1 run\(s\) of this point are being trained by "
                     r"another process \(held by the test\)$", text, re.M), text
    done = re.findall(r"^\[(\d)/3 points\] ETA \S+ t (\S+): ran", text, re.M)
    assert [n for n, _ in done] == ["1", "2", "3"] and len({p for _, p in done}) == 3, text  # each point once


def test_two_concurrent_sweeps_train_every_run_exactly_once(tmp_path):
    sigma_ws = [0.25, 0.5, 1.0, 2.0]
    code = (f"from initmem.study.point import run_point\n"
            f"df = run_point({{**{SWEEP!r}, 'sigma_ws': {sigma_ws!r}, 'seeds': [0]}}, results={str(tmp_path)!r}, "
            f"section='s', population=False)\n"
            f"print('ROWS', len(df), ' '.join(df['status']))\n")
    children = [faults.Child(faults.python_cmd(code)) for _ in range(2)]
    outs = [c.finish(timeout=600) for c in children]
    for rc, out in outs:
        assert rc == 0 and "ROWS 4 complete complete complete complete" in out, out
    ids = [RunFolders(tmp_path, "s").run(TrainConfig(**{**SWEEP, "sigma_w": s})).folder.name for s in sigma_ws]
    headers = Counter(m for _, out in outs for m in re.findall(r"^run (\w{12}): sigma_w=", out, re.M))
    assert headers == Counter(ids), "\n\n".join(out for _, out in outs)  # every run trained once, by one of them
    runs = load_runs(tmp_path)
    assert sorted(runs["run_id"]) == sorted(ids) and (runs["status"] == "complete").all()
    for rid in ids:
        assert read_run(tmp_path / "s" / rid)["run_id"] == rid
        assert sorted(p.name for p in (tmp_path / "s" / rid).iterdir()) == ["history.csv", "run.json"]
