"""Batched sigma_w ensembles: each member's history equals its separate `train()` run; the grouped network, its
optimisers and Newton-Schulz match the separate ones; a diverging member is isolated; bad member sets are refused.

Tolerances. The grouped convs and the batched head sum in a different order from the separate model's kernels, so
gradients differ from the separate run's by ~1e-6 relative, and training amplifies such rounding: at the default
SGD lr (0.01) the same 8 steps end 1e-7 apart with two threads and 4e-4 apart with one, as toggling channels_last
does between two separate runs. The history tests therefore run where the trajectory is not chaotic (SGD lr 1e-3,
Adam's default, Muon lr 2e-3: measured <= 2e-6, 1e-7 and 2e-4 with one and two threads) and compare at rtol 1e-4
(Muon 2e-3: its Newton-Schulz rounds to bfloat16, so a 1e-6 gradient difference can flip an update element by one
bfloat16 ulp). The optimisers' arithmetic is checked exactly, chaos-free, by the one-step test at default lrs.
Accuracies may flip an example whose two top logits are within rounding: at most 2 of n.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from initmem import checkpoint as ckpt
from initmem import data as data_mod
from initmem import ensemble as ensemble_mod
from initmem import experiment, models, optim
from initmem.ensemble import (
    build_grouped,
    check_members,
    ensemble_dir,
    ensemble_optimizer,
    member_state_dict,
    newton_schulz_batched,
    train_ensemble,
)
from initmem.errors import ConfigError, ResultsError
from initmem.experiment import run_sigma_sweep
from initmem.locks import lock_path
from initmem.results import HISTORY_COLUMNS, is_complete, load_runs, read_run, run_dir
from initmem.train import TrainConfig, train

TINY = TrainConfig(arch="resnet9", width=1 / 16, optimizer="sgd_momentum", data="synthetic", n_train=256, n_val=100,
                   n_test=100, batch_size=64, epochs=2, device="cpu")
REPO = Path(__file__).resolve().parents[1]
MEMBERS = ((0.5, 0), (1.0, 0), (2.5, 1))  # seeds 0, 0, 1: a shared batch for two members, its own for the third
EXACT = ("epoch", "step", "lr", "T_SGD", "T_L2", "T_adapt")
ACCS = ("train_acc_running", "train_acc", "val_acc", "test_acc")


@pytest.fixture(autouse=True, scope="module")
def one_thread():  # the cores are shared: one thread is faster under load, and gentler on the neighbours
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _members(base: TrainConfig, members=MEMBERS) -> list[TrainConfig]:
    return [base.replace(sigma_w=s, seed=seed) for s, seed in members]


def _assert_same_run(ens, sep, rtol: float, n_flip: int = 2) -> None:
    """`ens` (from the ensemble) equals `sep` (from train) within rtol; accuracies within n_flip examples."""
    assert (ens.config, ens.run_id, ens.status) == (sep.config, sep.run_id, sep.status)
    h, g = ens.history, sep.history
    assert list(h.columns) == list(g.columns) == [*HISTORY_COLUMNS, *[c for c in g.columns if c.startswith("norm:")]]
    assert len(h) == len(g) and (h["wall_time"].diff().dropna() > 0).all()
    pd.testing.assert_frame_equal(h[list(EXACT)], g[list(EXACT)], check_exact=False, rtol=1e-12)
    n = {"train_acc_running": ens.config.n_train, "train_acc": ens.config.n_train, "val_acc": ens.config.n_val,
         "test_acc": ens.config.n_test}
    for col in g.columns:
        if col in EXACT or col == "wall_time":
            continue
        atol = n_flip / n[col] + 1e-9 if col in ACCS else 1e-5
        np.testing.assert_allclose(h[col], g[col], rtol=0 if col in ACCS else rtol, atol=atol, err_msg=col)
    for key, v in sep.summary.items():
        if key == "wall_time_s":
            continue
        if isinstance(v, float) and ("acc" in key or key == "repair_gap"):
            assert ens.summary[key] == pytest.approx(v, abs=n_flip / ens.config.n_val + 1e-9), key
        elif isinstance(v, float):
            assert ens.summary[key] == pytest.approx(v, rel=rtol, abs=1e-5), key
        else:  # epochs, steps, flags, None
            assert ens.summary[key] == v, key


# ---------------------------------------------------------------------------------------------------- histories
@pytest.mark.parametrize("optimizer, lr, rtol", [("sgd_momentum", 1e-3, 1e-4), ("adam", None, 1e-4),
                                                 ("muon", 2e-3, 2e-3)])
def test_each_member_equals_its_separate_run(optimizer, lr, rtol):
    configs = _members(TINY.replace(optimizer=optimizer, lr=lr))
    ens = train_ensemble(configs, progress=False)
    assert [r.config for r in ens] == configs
    for e, c in zip(ens, configs, strict=True):
        _assert_same_run(e, train(c, progress=False), rtol)
    assert ens[0].history["val_loss"].iloc[-1] != ens[1].history["val_loss"].iloc[-1]  # members really differ


def test_resnet20_with_grouped_shortcuts_and_augmentation_equals_separate_runs():
    # width 1/8: 2/4/8 channels, so the option-A shortcuts pad 2 -> 4 -> 8 inside every member's channel group
    configs = _members(TINY.replace(arch="resnet20", width=0.125, optimizer="adam", augment=True))
    for e, c in zip(train_ensemble(configs, progress=False), configs, strict=True):
        _assert_same_run(e, train(c, progress=False), 1e-4)


# ---------------------------------------------------------------------------------------------------- building blocks
@pytest.mark.parametrize("arch, width", [("resnet9", 1 / 16), ("resnet20", 0.125)])
def test_grouped_network_holds_each_member_and_computes_its_outputs(arch, width):
    nets = []
    for sigma_w, seed in MEMBERS:
        torch.manual_seed(seed)
        nets.append(models.build_model(arch, sigma_w, width))
    grouped = build_grouped(nets, arch)
    assert [n for n, _ in grouped.named_modules()] == [n for n, _ in nets[0].named_modules()]  # history columns
    for k, net in enumerate(nets):  # weights, biases and BatchNorm buffers copied in exactly
        mine = member_state_dict(grouped, net, k)
        assert all(torch.equal(mine[key], v) for key, v in net.state_dict().items())
    x = torch.randn(8, 3, 32, 32)
    xs = torch.randn(len(nets), 8, 3, 32, 32)
    for mode in ("train", "eval"):
        grouped.train(mode == "train")
        for net in nets:
            net.train(mode == "train")
        shared, own = grouped(x), grouped(torch.cat(list(xs), 1))  # one batch for all / member k's batch k
        assert shared.shape == (8, len(nets), 10)
        for k, net in enumerate(nets):
            torch.testing.assert_close(shared[:, k], net(x), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(own[:, k], net(xs[k]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer, hparams", [("sgd", dict(weight_decay=1e-2)), ("sgd_momentum", {}),
                                                ("adam", dict(weight_decay=1e-3)), ("adamw", {}),
                                                ("muon", dict(weight_decay=1e-2))])
def test_ensemble_optimiser_gives_each_member_its_separate_update(optimizer, hparams):
    """Same gradients in, same parameters out, over three steps (momentum and Adam state included): chaos-free."""
    config = TINY.replace(optimizer=optimizer, **hparams)
    nets = []
    for sigma_w, seed in MEMBERS:
        torch.manual_seed(seed)
        nets.append(models.build_model("resnet9", sigma_w, 1 / 16))
    grouped = build_grouped(nets, "resnet9")
    opts = [optim.build_optimizer(optimizer, net, lr=config.lr, momentum=config.momentum,
                                  weight_decay=config.weight_decay) for net in nets]
    opt = ensemble_optimizer(config, grouped, len(nets))
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        for net in nets:
            for p in net.parameters():
                p.grad = torch.randn(p.shape, generator=g)
        for name, p in grouped.named_parameters():
            parts = [net.get_parameter(name).grad for net in nets]
            p.grad = torch.stack(parts).reshape(p.shape)
        for o in (*opts, opt):
            o.step()
    for k, net in enumerate(nets):
        mine = member_state_dict(grouped, net, k)
        for name, p in net.named_parameters():
            torch.testing.assert_close(mine[name], p.detach(), rtol=1e-6, atol=1e-7, msg=f"member {k} {name}")


@pytest.mark.parametrize("shape", [(3, 8, 27), (3, 40, 12), (2, 16, 16)])
def test_batched_newton_schulz_equals_the_per_matrix_one_bitwise(shape):
    G = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    out = newton_schulz_batched(G)
    assert out.shape == shape and out.dtype == torch.bfloat16
    for k in range(shape[0]):
        assert torch.equal(out[k], optim.newton_schulz(G[k]))
    with pytest.raises(ConfigError, match=r"\[K, m, n\]"):
        newton_schulz_batched(G[0])


# ---------------------------------------------------------------------------------------------------- divergence
@pytest.mark.parametrize("optimizer", ["sgd_momentum", "muon"])
def test_a_diverging_member_stops_alone_and_touches_no_other(optimizer):
    base = TINY.replace(optimizer=optimizer)
    wild = _members(base, ((0.5, 0), (1e36, 0), (2.5, 1)))  # sigma_w 1e36: conv outputs overflow, loss NaN
    tame = _members(base, ((0.5, 0), (1.0, 0), (2.5, 1)))
    a, b = train_ensemble(wild, progress=False), train_ensemble(tame, progress=False)
    alone = train(wild[1], progress=False)
    assert (a[1].status, a[1].summary["diverged_epoch"], len(a[1].history)) == ("diverged", 1, 2)
    assert (alone.status, alone.summary["diverged_epoch"], len(alone.history)) == ("diverged", 1, 2)
    assert math.isnan(a[1].history["train_loss"].iloc[-1])
    for k in (0, 2):  # the other members are bit-for-bit what they are next to a healthy member
        cols = [c for c in a[k].history.columns if c != "wall_time"]
        assert a[k].status == "complete" and len(a[k].history) == base.epochs + 1
        np.testing.assert_array_equal(a[k].history[cols].to_numpy(), b[k].history[cols].to_numpy())


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("change, field", [(dict(optimizer="adam"), "optimizer"), (dict(lr=0.1), "lr"),
                                           (dict(width=0.125), "width"), (dict(batch_size=32), "batch_size"),
                                           (dict(epochs=3), "epochs"), (dict(augment=True), "augment"),
                                           (dict(channels_last=False), "channels_last")])
def test_members_may_differ_only_in_sigma_w_and_seed(change, field):
    configs = _members(TINY)
    configs[2] = configs[2].replace(**change)
    with pytest.raises(ConfigError, match=rf"^TrainConfig\.{field}=.*differs.*sigma_w and seed$"):
        train_ensemble(configs, progress=False)


@pytest.mark.parametrize("configs, match", [
    ([], "non-empty list"), (TINY, "non-empty list"), ([TINY, "resnet9"], "non-empty list"),
    ([TINY, TINY.replace(width=1 / 16)], "repeat a"),
])
def test_bad_member_sets_are_config_errors(configs, match):
    with pytest.raises(ConfigError, match=match) as info:
        check_members(configs)
    assert "\n" not in str(info.value)


def test_a_network_without_a_grouped_form_is_a_config_error():
    net = models.build_model("resnet9", 1.0, 1 / 16)
    net.layer2.pool = nn.Dropout()  # not channel-wise per member in general: the builder must refuse it
    with pytest.raises(ConfigError, match=r"arch='custom'.*layer2\.pool \(Dropout\).*separately"):
        build_grouped([net, net], "custom")


def test_member_losses_are_independent_of_one_another():
    """The summed loss's gradient reaches each member only through its own logits."""
    nets = [models.build_model("resnet9", s, 1 / 16) for s in (0.5, 2.0)]
    grouped = build_grouped(nets, "resnet9")
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    out = grouped(x)
    F.cross_entropy(out[:, 0], y).backward()
    assert all(p.grad.reshape(2, -1)[1].abs().max() == 0 for p in grouped.parameters())
    assert any(p.grad.reshape(2, -1)[0].abs().max() > 0 for p in grouped.parameters())


# ---------------------------------------------------------------------------------------------------- run folders
def test_run_folders_are_written_like_train_writes_them(tmp_path):
    configs = _members(TINY.replace(epochs=1))
    ens = train_ensemble(configs, out_dir=tmp_path, section="s", progress=False)
    sep = train(configs[1], out_dir=tmp_path / "sep", section="s", progress=False)
    for r, c in zip(ens, configs, strict=True):
        assert r.path == run_dir(tmp_path, "s", c) and is_complete(tmp_path, "s", c)
        rec = read_run(r.path)
        assert rec["config"] == c.to_dict() and rec["status"] == "complete"
        assert rec["provenance"]["ensemble_members"] == 3
        assert set(rec["summary"]) == set(sep.summary)
        csv = pd.read_csv(r.path / "history.csv")
        assert list(csv.columns) == list(sep.history.columns) and len(csv) == 2
    assert set(read_run(sep.path)["provenance"]) <= set(read_run(ens[1].path)["provenance"])


def test_a_member_locked_by_another_process_is_refused_before_training(tmp_path):
    configs = _members(TINY.replace(epochs=1))
    held = run_dir(tmp_path, "s", configs[1])
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('GOT', flush=True); time.sleep(60)")
    lock_path(held).parent.mkdir(parents=True)
    child = subprocess.Popen([sys.executable, "-c", code, str(lock_path(held))], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "GOT"
        t0 = time.perf_counter()
        with pytest.raises(ResultsError, match=f"{held.name}.*locked"):
            train_ensemble(configs, out_dir=tmp_path, section="s", progress=False)
        assert time.perf_counter() - t0 < 10
        assert not any(is_complete(tmp_path, "s", c) for c in configs)
    finally:
        child.kill()
        child.wait()


def test_tune_malloc_is_on_for_glibc_and_off_on_request():
    code = "from initmem.ensemble import tune_malloc; print(tune_malloc(), tune_malloc())"
    glibc = platform.libc_ver()[0] == "glibc"
    for env, want in (("default", "False False"), ("", "True True" if glibc else "False False")):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "INITMEM_MALLOC": env}, cwd=REPO,
                             capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == want, out.stderr


# ---------------------------------------------------------------------------------------------------- checkpoints
class _Stop(Exception):
    pass


def _stop_at_epoch(monkeypatch, epoch: int) -> None:
    """Raise when the ensemble starts epoch `epoch` + 1 (after `epoch` epochs, before its own checkpoint if any)."""
    real, calls = data_mod.batches, []

    def batches(n, batch_size, gen, device=None):
        calls.append(1)
        if len(calls) > epoch:  # one call per epoch: all members share seed 0 here
            raise _Stop
        return real(n, batch_size, gen, device=device)

    monkeypatch.setattr(data_mod, "batches", batches)


def test_an_interrupted_checkpointed_ensemble_resumes_to_the_uninterrupted_histories(tmp_path, monkeypatch, capsys):
    configs = _members(TINY.replace(epochs=4, checkpoint_every=2, augment=True), ((0.5, 0), (2.0, 0)))
    whole = train_ensemble(configs, out_dir=tmp_path / "whole", section="s", progress=False)
    assert not (tmp_path / "whole" / "s" / "ensembles").exists()  # cleared once run.json is written
    with monkeypatch.context() as m:
        _stop_at_epoch(m, 3)  # checkpoints of epochs 2 (used) exist; epoch 3 is lost
        with pytest.raises(_Stop):
            train_ensemble(configs, out_dir=tmp_path, section="s", progress=False)
    folder = ckpt.folder_of(ensemble_dir(tmp_path, "s", configs))
    assert [p.name for p in ckpt.checkpoints(folder)] == ["epoch-000002.ckpt"]
    assert not any(is_complete(tmp_path, "s", c) for c in configs)
    capsys.readouterr()
    resumed = train_ensemble(configs, out_dir=tmp_path, section="s", progress=False)
    assert "resumed from" in capsys.readouterr().out and not folder.exists()
    for a, b in zip(resumed, whole, strict=True):
        pd.testing.assert_frame_equal(a.history.drop(columns="wall_time"), b.history.drop(columns="wall_time"))
        assert a.history["wall_time"].is_monotonic_increasing
        assert is_complete(tmp_path, "s", a.config)


def test_a_checkpoint_of_another_member_set_is_not_resumed(tmp_path, monkeypatch):
    configs = _members(TINY.replace(epochs=2, checkpoint_every=1), ((0.5, 0), (2.0, 0)))
    with monkeypatch.context() as m:
        _stop_at_epoch(m, 1)
        with pytest.raises(_Stop):
            train_ensemble(configs, out_dir=tmp_path, section="s", progress=False)
    theirs = ckpt.folder_of(ensemble_dir(tmp_path, "s", configs))
    other = [configs[0], configs[0].replace(sigma_w=1.0)]
    mine = ckpt.folder_of(ensemble_dir(tmp_path, "s", other))
    assert theirs != mine and ckpt.checkpoints(theirs)
    mine.mkdir(parents=True)
    shutil.copy(ckpt.checkpoints(theirs)[0], mine / "epoch-000001.ckpt")  # a foreign checkpoint in its folder
    with pytest.warns(UserWarning, match="does not belong to ensemble"):
        out = train_ensemble(other, out_dir=tmp_path, section="s", progress=False)
    assert [len(r.history) for r in out] == [3, 3] and not mine.exists()


# ---------------------------------------------------------------------------------------------------- the sweep
def test_the_sweep_trains_its_missing_runs_as_one_ensemble(tmp_path, monkeypatch, capsys):
    base = TINY.replace(epochs=1)
    done = train(base.replace(sigma_w=0.5), out_dir=tmp_path, section="s", progress=False)  # complete already
    cut = base.replace(sigma_w=1.0, epochs=1)
    ckpt.save(ckpt.folder_of(run_dir(tmp_path, "s", cut)), 0, {"epoch": 0})  # a separate run cut short

    separate = []

    def counting_train(c, **k):
        separate.append(c.sigma_w)
        return train(c, **k)

    monkeypatch.setattr(experiment, "train", counting_train)
    capsys.readouterr()
    with pytest.warns(UserWarning, match="does not belong to run"):  # the cut run's (dummy) checkpoint
        df = run_sigma_sweep(base, sigma_ws=[0.5, 1.0, 1.5, 2.5], results=tmp_path, section="s", ensemble=True,
                             progress=False)
    out = capsys.readouterr().out
    assert "training 2 runs as one ensemble" in out and separate == [1.0]
    assert df["sigma_w"].tolist() == [0.5, 1.0, 1.5, 2.5] and (df["status"] == "complete").all()
    members = {float(r["sigma_w"]): read_run(r["path"])["provenance"].get("ensemble_members")
               for _, r in df.iterrows()}
    assert members == {0.5: None, 1.0: None, 1.5: 2, 2.5: 2}
    assert read_run(df.loc[0, "path"])["finished_at"] == read_run(done.path)["finished_at"]  # not retrained
    assert len(load_runs(tmp_path)) == 4


def test_a_failing_ensemble_falls_back_to_separate_runs(tmp_path, monkeypatch, capsys):
    def broken(*a, **k):
        raise RuntimeError("out of memory\nsecond line")

    monkeypatch.setattr(ensemble_mod, "train_ensemble", broken)
    df = run_sigma_sweep(TINY.replace(epochs=1), sigma_ws=[0.5, 2.0], results=tmp_path, section="s",
                         ensemble=True, progress=False)
    assert "the ensemble failed (RuntimeError: out of memory); training its runs one after the other" in (
        capsys.readouterr().out)
    assert (df["status"] == "complete").all()
    assert all("ensemble_members" not in read_run(p)["provenance"] for p in df["path"])
