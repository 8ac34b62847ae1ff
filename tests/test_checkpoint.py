"""Checkpoints and resume: atomic checksummed files, bit-for-bit resume after SIGKILL (mid-epoch and mid-write),
detection of and fallback from damaged checkpoints and run.json files, failed runs recorded and retried, divergence
as a result, and the Slurm requeue hook.

Subprocess tests use a 1/16-width ResNet-9 on 200 synthetic images (a few seconds per child, see tests/faults.py).
"""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import signal

import faults
import pandas as pd
import pytest
import torch

import initmem.engine.trainer as train_mod
from initmem.config import TrainConfig
from initmem.engine import checkpoint as ckpt
from initmem.engine.trainer import train
from initmem.errors import CheckpointError, ConfigError, SweepError
from initmem.store.folders import FAILED, RunFolders, checkpoints, clear_checkpoints
from initmem.store.results import read_run
from initmem.study import point

CFG = {**faults.TINY, "epochs": 6, "checkpoint_every": 1}
LOCAL = {**faults.TINY, "epochs": 4, "checkpoint_every": 1, "augment": True}  # in-process runs


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------------------------- the file format
def test_save_is_atomic_rotated_and_load_verifies_the_checksum(tmp_path):
    payload = {"epoch": 3, "w": torch.arange(1000, dtype=torch.float32), "history": [{"a": 1.5, "b": float("nan")}]}
    for e in (1, 2, 3):
        ckpt.save(tmp_path, e, {**payload, "epoch": e})
    assert [p.name for p in checkpoints(tmp_path)] == ["epoch-000003.ckpt", "epoch-000002.ckpt"]  # keep 2
    got = ckpt.load(tmp_path / "epoch-000003.ckpt")
    assert torch.equal(got["w"], payload["w"]) and got["history"][0]["a"] == 1.5
    (tmp_path / ".epoch-000004.ckpt.999.tmp").write_bytes(b"half a file")  # a killed writer's leftover
    ckpt.save(tmp_path, 4, payload)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-000003.ckpt", "epoch-000004.ckpt"]

    path = tmp_path / "epoch-000004.ckpt"
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[-100] ^= 0xFF
    for damaged, reason in ((good[: len(good) - 10], "truncated"), (bytes(flipped), "sha256 mismatch"),
                            (b"PK\x03\x04" + good[4:], "does not start with"), (good[:30], "unreadable header")):
        path.write_bytes(damaged)
        with pytest.raises(CheckpointError, match=reason):
            ckpt.load(path)
    clear_checkpoints(tmp_path)
    assert not tmp_path.exists()


def test_rng_state_round_trips_every_global_generator():
    import random

    import numpy as np

    state = ckpt.rng_state()
    a = (torch.rand(3), random.random(), np.random.rand())
    ckpt.set_rng_state(state)
    b = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(a[0], b[0]) and a[1:] == b[1:]


# ------------------------------------------------------------------------------------- resume in this process
class _Stop(Exception):
    pass


def _interrupt_at(monkeypatch, epoch: int) -> None:
    """Make train() raise right after measuring `epoch` (as it saves that epoch's checkpoint, before writing it)."""
    save = train_mod._ckpt.save

    def boom(folder, at, payload, **kw):
        if at == epoch:
            raise _Stop
        return save(folder, at, payload, **kw)

    monkeypatch.setattr(train_mod._ckpt, "save", boom)


@pytest.fixture(scope="module")
def reference():
    """The uninterrupted run (augmentation on: the aug generator must be restored too), in this process."""
    return train(TrainConfig(**LOCAL), progress=False).history.drop(columns="wall_time")


def _interrupted(tmp_path, monkeypatch, epoch: int) -> tuple[TrainConfig, object]:
    cfg = TrainConfig(**LOCAL)
    with monkeypatch.context() as m:
        _interrupt_at(m, epoch)
        with pytest.raises(_Stop):
            train(cfg, out_dir=tmp_path, section="s", progress=False)
    return cfg, RunFolders(tmp_path, "s").run(cfg).folder


def test_damaged_checkpoints_are_reported_and_an_older_one_or_a_fresh_start_is_used(tmp_path, monkeypatch, capsys,
                                                                                      reference):
    cfg, folder = _interrupted(tmp_path, monkeypatch, 4)  # checkpoints of epochs 2 and 3 kept
    files = checkpoints(folder / "checkpoints")
    assert [p.name for p in files] == ["epoch-000003.ckpt", "epoch-000002.ckpt"] and not (folder / "run.json").exists()
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the newest
    files[0].write_bytes(bytes(data))
    capsys.readouterr()
    with pytest.warns(UserWarning, match="epoch-000003.ckpt.*sha256 mismatch"):
        res = train(cfg, out_dir=tmp_path, section="s", progress=True)
    out = capsys.readouterr().out
    assert "sha256 mismatch; falling back" in out and "resumed from" in out and "(epoch 2/4)" in out
    pd.testing.assert_frame_equal(res.history.drop(columns="wall_time"), reference, check_exact=True)
    assert not (folder / "checkpoints").exists() and RunFolders(tmp_path, "s").run(cfg).is_complete()

    # every checkpoint damaged: both reported, the run starts afresh and still gives the same history
    cfg, folder = _interrupted(tmp_path / "b", monkeypatch, 4)
    for p in checkpoints(folder / "checkpoints"):
        p.write_bytes(p.read_bytes()[:1000])
    with pytest.warns(UserWarning, match="truncated") as caught:
        res = train(cfg, out_dir=tmp_path / "b", section="s", progress=True)
    assert sum("truncated" in str(w.message) for w in caught) == 2
    assert "resumed from" not in capsys.readouterr().out
    pd.testing.assert_frame_equal(res.history.drop(columns="wall_time"), reference, check_exact=True)


def test_a_checkpoint_of_another_config_is_refused(tmp_path, monkeypatch, reference):
    cfg, folder = _interrupted(tmp_path, monkeypatch, 3)
    other = cfg.replace(lr=0.02)
    other_ckpts = RunFolders(tmp_path, "s").run(other).folder / "checkpoints"
    other_ckpts.mkdir(parents=True)
    for p in checkpoints(folder / "checkpoints"):
        p.rename(other_ckpts / p.name)
    with pytest.warns(UserWarning, match=r"does not belong to run .*config differs in \['lr'\]"):
        res = train(other, out_dir=tmp_path, section="s", progress=False)
    assert res.history["epoch"].tolist() == list(range(5))  # trained from scratch, all 4 epochs


def test_a_checkpoint_that_fails_late_in_its_restore_leaves_a_fresh_start_untouched(tmp_path, monkeypatch, reference):
    """The live mask is applied after the model, optimiser, generators, clocks and instruments: a checkpoint whose
    mask does not fit must leave none of them behind, so the fresh start is the uninterrupted run bit for bit (it
    once kept the damaged checkpoint's clock sums and generator states)."""
    cfg, folder = _interrupted(tmp_path, monkeypatch, 3)  # checkpoints of epochs 1 and 2
    files = checkpoints(folder / "checkpoints")
    for p in files:
        payload = ckpt.load(p)
        payload["state"]["live"] = torch.ones(5)  # K = 1: shape [1]
        ckpt.save(p.parent, payload["epoch"], payload)
    with pytest.warns(UserWarning, match=r"cannot be restored: RuntimeError: .*shape") as caught:
        res = train(cfg, out_dir=tmp_path, section="s", progress=False)
    assert sum("cannot be restored" in str(w.message) for w in caught) == 2
    pd.testing.assert_frame_equal(res.history.drop(columns="wall_time"), reference, check_exact=True)


def _loop_state(loop) -> dict:
    """Everything a Loop holds, deep-copied: its state_dict but the wall clock, and the process-wide generators."""
    return copy.deepcopy({**{k: v for k, v in loop.state_dict().items() if k != "wall_time"},
                          "wall_time": loop.wall_time, "t0": loop.t0, "rng": ckpt.rng_state()})


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and (torch.equal(a, b) or (
            a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


@pytest.mark.parametrize("damage", ["live", "instruments", "clocks", "rng"])
def test_a_failed_loop_restore_changes_nothing(damage):
    """Loop.load_state_dict is all or nothing: a state that fails at any item leaves model, optimiser, instruments,
    generators, clocks, live mask, history, counters, wall clock and the global generators exactly as before."""
    from initmem.data import splits
    from initmem.engine.loop import Loop

    cfg = TrainConfig(**{**LOCAL, "optimizer": "adam", "n_train": 128})
    configs = [cfg.replace(sigma_w=s, seed=seed) for s, seed in ((0.5, 0), (2.0, 1))]
    data = splits.make_splits(splits.make_synthetic(cfg.n_train + cfg.n_val, cfg.n_test), cfg.n_val, cfg.n_train,
                              cfg.n_test, 0, "cpu")
    donor = Loop.build(configs, torch.device("cpu"), data)
    for _ in range(2):
        donor.record(donor.measure(*donor.run_epoch()))
    theirs, rng = copy.deepcopy(donor.state_dict()), ckpt.rng_state()
    loop = Loop.build(configs, torch.device("cpu"), data)
    loop.record(loop.measure(*loop.run_epoch()))  # a loop with state of its own, different from the donor's
    torch.manual_seed(123)
    before = _loop_state(loop)
    assert not _equal(before["model"], theirs["model"]) and not _equal(before["clocks"], theirs["clocks"])
    if damage == "live":
        theirs["live"] = torch.ones(3)
    elif damage == "instruments":
        theirs["instruments"]["theta"] = torch.zeros(7, dtype=torch.float64)
    elif damage == "clocks":
        theirs["clocks"] = theirs["clocks"][:1]
    else:
        rng = {**rng, "numpy": {**rng["numpy"], "kind": "no such generator"}}
    with pytest.raises((RuntimeError, ValueError, TypeError, KeyError)):
        loop.load_state_dict(theirs, rng)
    after = _loop_state(loop)
    for key in before:
        assert _equal(before[key], after[key]), key
    assert loop.opt.state and all(s["exp_avg"].abs().sum() > 0 for s in loop.opt.state.values())
    loop.load_state_dict(copy.deepcopy(donor.state_dict()))  # the loop is still usable, and a good state loads
    assert _equal(loop.state_dict()["clocks"], donor.state_dict()["clocks"])


def test_checkpoint_every_n_epochs_and_only_without_divergence(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(ckpt, "save", lambda folder, epoch, payload, **k: saved.append((epoch, copy.deepcopy(payload))))
    train(TrainConfig(**{**LOCAL, "checkpoint_every": 2}), out_dir=tmp_path, section="s", progress=False)
    assert [e for e, _ in saved] == [2, 4]
    payload = saved[0][1]
    assert set(payload) >= {"population", "run_ids", "config", "epoch", "rng", "state", "started_at"}
    assert set(payload["state"]) == {"model", "optimizer", "order_gen", "aug_gen", "clocks", "instruments", "live",
                                     "alive", "status", "histories", "epoch", "step", "wall_time"}
    assert len(payload["state"]["histories"][0]) == 3 and payload["state"]["clocks"][0]["steps"] == 8
    saved.clear()
    train(TrainConfig(**{**LOCAL, "lr": 1e20}), out_dir=tmp_path, section="s", progress=False)
    assert saved == []  # diverged at epoch 1: nothing worth resuming from


# ------------------------------------------------------------------------------------- SIGKILL, subprocesses
@pytest.fixture(scope="module")
def reference_cli(tmp_path_factory):
    """The uninterrupted run through the CLI, in a child like the interrupted ones (same threads, same code)."""
    out = tmp_path_factory.mktemp("ref")
    rc, text = faults.run(faults.train_cmd(CFG, out))
    assert rc == 0, text
    return faults.history(RunFolders(out, "s").run(TrainConfig(**CFG)).folder)


def test_sigkill_mid_epoch_then_restart_gives_the_uninterrupted_history(tmp_path, reference_cli):
    child = faults.Child(faults.train_cmd(CFG, tmp_path))
    child.wait_for(r"epoch 3/6")  # then it is saving epoch 3's checkpoint or training epoch 4
    assert child.kill() == -signal.SIGKILL
    folder = RunFolders(tmp_path, "s").run(TrainConfig(**CFG)).folder
    assert not (folder / "run.json").exists() and checkpoints(folder / "checkpoints")
    rc, text = faults.run(faults.train_cmd(CFG, tmp_path))
    assert rc == 0 and "resumed from" in text, text
    pd.testing.assert_frame_equal(faults.history(folder), reference_cli, check_exact=True)
    assert read_run(folder)["status"] == "complete" and not (folder / "checkpoints").exists()


def test_sigkill_while_writing_a_checkpoint_falls_back_to_the_previous_one(tmp_path, reference_cli):
    rc, text = faults.run(faults.train_cmd(CFG, tmp_path), INITMEM_FAULT="kill_during_checkpoint_write@3")
    assert rc == -signal.SIGKILL, text
    folder = RunFolders(tmp_path, "s").run(TrainConfig(**CFG)).folder
    names = sorted(p.name for p in (folder / "checkpoints").iterdir())
    assert len(names) == 3 and names[1:] == ["epoch-000001.ckpt", "epoch-000002.ckpt"]
    assert names[0].startswith(".epoch-000003.ckpt.") and names[0].endswith(".tmp")  # the half-written file
    rc, text = faults.run(faults.train_cmd(CFG, tmp_path))
    assert rc == 0 and "(epoch 2/6)" in text, text
    pd.testing.assert_frame_equal(faults.history(folder), reference_cli, check_exact=True)
    assert not (folder / "checkpoints").exists()


# ---------------------------------------------------------------------------------- results and the sweep
SWEEP = {**faults.TINY, "epochs": 2}


def test_a_corrupt_run_json_is_not_complete_and_the_run_is_trained_again(tmp_path, capsys):
    df = faults.sweep_point(SWEEP, sigma_ws=[0.5], results=tmp_path, section="s", progress=False)
    folder = df["path"].iloc[0]
    cfg = TrainConfig(**{**SWEEP, "sigma_w": 0.5})
    before = faults.history(folder)
    text = (tmp_path / "s" / df["run_id"].iloc[0] / "run.json").read_text()
    (tmp_path / "s" / df["run_id"].iloc[0] / "run.json").write_text(text[: len(text) // 2])
    assert not RunFolders(tmp_path, "s").run(cfg).is_complete()
    capsys.readouterr()
    again = faults.sweep_point(SWEEP, sigma_ws=[0.5], results=tmp_path, section="s", progress=False)
    assert "moved aside" in capsys.readouterr().out and RunFolders(tmp_path, "s").run(cfg).is_complete()
    aside = list((tmp_path / "s" / ".damaged").iterdir())  # the damaged folder was kept, not deleted
    assert any((d / "run.json").read_text() == text[: len(text) // 2] for d in aside if d.is_dir())
    assert again["status"].tolist() == ["complete"]
    pd.testing.assert_frame_equal(faults.history(folder), before, check_exact=True)


def test_a_failed_run_is_recorded_and_retried_by_the_next_call(tmp_path, monkeypatch, capsys):
    real = point.train

    def flaky(c, **kw):
        if c.sigma_w == 1.0:
            raise RuntimeError("CUDA out of memory (simulated)\nsecond line")
        return real(c, **kw)

    monkeypatch.setattr(point, "train", flaky)
    with pytest.raises(SweepError, match=r"^1 of 3 run\(s\) of section 's' failed: sigma_w=1 seed=0 .*RuntimeError: "
                                         r"CUDA out of memory \(simulated\); each is recorded"):
        faults.sweep_point(SWEEP, sigma_ws=[0.5, 1.0, 2.0], results=tmp_path, section="s", progress=False)
    ok = [TrainConfig(**{**SWEEP, "sigma_w": s}) for s in (0.5, 2.0)]
    bad = TrainConfig(**{**SWEEP, "sigma_w": 1.0})
    owner = RunFolders(tmp_path, "s")
    assert all(owner.run(c).is_complete() for c in ok) and not owner.run(bad).is_complete()  # went on
    record = json.loads((owner.run(bad).folder / FAILED).read_text())
    assert record["attempts"] == 1 and record["error"] == "RuntimeError: CUDA out of memory (simulated)"
    assert "Traceback" in record["traceback"][0] and record["sigma_w"] == 1.0

    monkeypatch.setattr(point, "train", real)
    capsys.readouterr()
    df = faults.sweep_point(SWEEP, sigma_ws=[0.5, 1.0, 2.0], results=tmp_path, section="s", progress=False)
    out = capsys.readouterr().out
    assert "skipping 2 complete run(s)" in out and "retrying: attempt 1 failed with RuntimeError" in out
    assert df["status"].tolist() == ["complete"] * 3 and not (owner.run(bad).folder / FAILED).exists()


def test_the_sweep_goes_on_after_a_diverged_run(tmp_path, monkeypatch):
    real = point.train
    seen = []

    def diverge_small(c, **kw):  # sigma_w=0.25 diverges at epoch 1 (a huge lr), the others train normally
        seen.append(c.sigma_w)
        if c.sigma_w == 0.25:
            with monkeypatch.context() as m:
                m.setattr("initmem.engine.optim.lr_factor", lambda *a: 1e30)
                return real(c, **kw)
        return real(c, **kw)

    monkeypatch.setattr(point, "train", diverge_small)
    df = faults.sweep_point(SWEEP, sigma_ws=[0.25, 1.0], results=tmp_path, section="s", progress=False)
    assert seen == [0.25, 1.0]
    assert df["status"].tolist() == ["diverged", "complete"] and df["diverged_epoch"].iloc[0] == 1
    assert pd.isna(df["diverged_epoch"].iloc[1]) and df["epochs_run"].tolist() == [1, 2]


# ---------------------------------------------------------------------------------------------- Slurm requeue
def test_the_slurm_job_callable_is_checkpointable_and_resubmits_the_same_point():
    pytest.importorskip("submitit")
    from submitit.core.utils import DelayedSubmission
    from submitit.helpers import Checkpointable

    from initmem.study import sweep

    job = sweep.PointJob()
    assert isinstance(job, Checkpointable)
    args = ("point", "nb.py", "/repo", "/out/nb.ipynb", {"sigma_ws": [0.5], "seeds": [0]}, False)
    again = job.checkpoint(*args)
    assert isinstance(again, DelayedSubmission) and again.function is job
    assert again.args == args and again.kwargs == {}
    pickle.loads(pickle.dumps(again))  # submitit pickles it for the requeued job
    assert os.environ.get("INITMEM_FAULT") is None


@pytest.mark.slurm
def test_a_slurm_job_signalled_for_timeout_is_requeued_and_resumes_its_run(tmp_path, monkeypatch):
    """Real Slurm (skips without it): SIGUSR2 — what Slurm sends before a time limit or a preemption — makes
    submitit call PointJob.checkpoint and requeue the job; the requeued job resumes the run from its checkpoint."""
    import subprocess
    import threading
    import time

    from slurm_cluster import SlurmCluster, missing_binaries

    from initmem.study.sweep import load_section, point_configs, run_sweep

    if missing := missing_binaries():
        pytest.skip(f"needs Slurm, munge and MariaDB binaries {missing} (install with .ci/install-slurm.sh)")
    if os.geteuid() != 0:
        pytest.skip("needs root: slurmd runs jobs as their user and munged runs as user munge")
    with SlurmCluster(cpus=2) as cluster:
        monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
        params = faults.mini_project(
            tmp_path, "02_long_training.py",
            fixed=dict(width=0.0625, epochs=16, epoch_marks=[8, 16], batch_size=32, n_train=128, n_val=32, n_test=32,
                       sigma_ws=[1.0], data="synthetic", device="cpu", checkpoint_every=1))
        out = tmp_path / "results"
        section = load_section(params)
        (cfg,) = point_configs(section.effective(section.points("smoke", out)[0]))
        folder = RunFolders(out, "t").run(cfg).folder
        report = {}
        sweep = threading.Thread(target=lambda: report.update(r=run_sweep(
            params, profile="smoke", results=out, executor="slurm", progress=False,
            slurm={"time": 10, "cpus_per_task": 1, "mem_gb": 2})))
        sweep.start()

        def slurm(*cmd: str) -> str:
            return subprocess.run(cmd, capture_output=True, text=True, check=True,
                                  env={**os.environ, **cluster.env}).stdout.strip()

        deadline = time.monotonic() + 300
        while not list((folder / "checkpoints").glob("epoch-00000[3-9].ckpt")) and time.monotonic() < deadline:
            time.sleep(0.2)
        job = slurm("squeue", "-h", "-o", "%i").split()[0]
        signalled = time.time()
        slurm("scancel", "--signal=USR2", job)
        while "PENDING" not in slurm("squeue", "-h", "-o", "%T") and time.monotonic() < deadline:
            time.sleep(0.2)
        slurm("scontrol", "update", f"JobId={job}", "StartTime=now")  # skip Slurm's requeue back-off
        sweep.join(timeout=300)
        assert not sweep.is_alive() and report["r"].points[0].status == "ran", report
        log = "".join(p.read_text() for p in (out / ".submitit").rglob("*_log.out"))
        assert "Calling checkpoint method" in log and "Requeued job" in log and "Job completed successfully" in log
        record = read_run(folder)
        started = pd.Timestamp(record["started_at"]).timestamp()
        assert started < signalled - 1  # the run was resumed from its checkpoint, not started again
        h = faults.history(folder)
        assert h["epoch"].tolist() == list(range(17)) and h["step"].tolist() == [4 * e for e in range(17)]
        assert not (folder / "checkpoints").exists()



# ------------------------------------------------------------------------------------- resume on another device
@pytest.mark.parametrize("keyed", [True, False])  # with the writer's generator device, or one from before that key
def test_a_checkpoint_written_on_cuda_is_refused_in_one_line_before_any_step_and_kept(tmp_path, monkeypatch, keyed):
    """A CUDA generator's state is 16 bytes (Philox seed and offset) and does not load into a CPU generator: the
    resume must not fall back to a fresh start in the same folder (the device is not part of the run id)."""
    cfg, folder = _interrupted(tmp_path, monkeypatch, 3)
    newest = checkpoints(folder / "checkpoints")[0]
    payload = ckpt.load(newest)
    assert payload["generator_device"] == "cpu" and train_mod.written_on(payload) == "cpu"
    payload["state"]["aug_gen"] = {s: torch.zeros(16, dtype=torch.uint8) for s in payload["state"]["aug_gen"]}
    if keyed:
        payload["generator_device"] = "cuda:0"
    else:
        del payload["generator_device"]
    assert train_mod.written_on(payload) == "cuda"
    with pytest.raises(RuntimeError):  # what the loop would meet: torch cannot load it
        torch.Generator().set_state(payload["state"]["aug_gen"][0])
    ckpt.save(folder / "checkpoints", int(payload["epoch"]), payload)
    before = {p.name: p.read_bytes() for p in checkpoints(folder / "checkpoints")}
    steps = []
    with pytest.raises(ConfigError, match=r"^TrainConfig\.device='cpu' is invalid: .*was written on cuda.* cannot "
                                          r"continue on cpu") as e:
        train(cfg, out_dir=tmp_path, section="s", progress=False, on_step=steps.append)
    assert "\n" not in str(e.value) and steps == []  # refused before any step
    assert {p.name: p.read_bytes() for p in checkpoints(folder / "checkpoints")} == before
    assert not (folder / "run.json").exists()


def test_a_checkpoint_written_here_names_its_generator_device_and_resumes(tmp_path, monkeypatch, reference):
    cfg, folder = _interrupted(tmp_path, monkeypatch, 3)
    assert ckpt.load(checkpoints(folder / "checkpoints")[0])["generator_device"] == "cpu"
    res = train(cfg, out_dir=tmp_path, section="s", progress=False)
    pd.testing.assert_frame_equal(res.history.drop(columns="wall_time"), reference, check_exact=True)
