"""Forgetting instruments (`engine.instruments`): angles from initialisation, relative displacements and per-step
angles on hand-made weights with known answers, then in real runs: a population's diagnostics equal its separate
runs', a resumed run's equal the uninterrupted run's, and the columns agree with one another.

Hand-made weights: a layer is rotated by a known angle theta in the plane of its weights W and a unit vector u
orthogonal to them (W' = cos(theta) W + sin(theta) |W| u: |W'| = |W|, angle theta, displacement 2 sin(theta / 2)),
or rescaled (W' = s W: angle 0, displacement |s - 1|). In float64 the answers hold to rounding; in float32 the stored
W' is W' rounded, which moves the true angle of a 1e-4 rad rotation by ~1e-4 relative, so float32 readings are
compared with the exact float64 angle of the stored tensors (and with the nominal angle at the looser tolerance).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from initmem.config import TrainConfig
from initmem.data import splits as data_mod
from initmem.engine import instruments
from initmem.engine.trainer import train
from initmem.store.folders import RunFolders, checkpoints

U32 = 2.0**-24  # float32 unit roundoff
TINY = TrainConfig(arch="resnet9", width=1 / 16, data="synthetic", n_train=256, n_val=100, n_test=100, batch_size=64,
                   epochs=2, device="cpu")
DEG = math.degrees


# ---------------------------------------------------------------------------------------------------- helpers
def _unit(shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    """A random tensor of norm 1."""
    t = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (t / t.norm()).to(dtype)


def _orthogonal(w: torch.Tensor, seed: int) -> torch.Tensor:
    """A unit float64 tensor orthogonal to w (as flat vectors)."""
    v, r = w.double().reshape(-1), _unit(w.shape, seed).reshape(-1)
    r = r - (r @ v) / (v @ v) * v
    return (r / r.norm()).reshape(w.shape)


def _turned(w0: torch.Tensor, u: torch.Tensor, theta: float) -> torch.Tensor:
    """w0 rotated by theta (radians) towards u (unit, orthogonal to w0), in float64, cast to w0's dtype."""
    w = w0.double()
    return (math.cos(theta) * w + math.sin(theta) * w.norm() * u).to(w0.dtype)


def _exact(a: torch.Tensor, b: torch.Tensor) -> float:
    """The angle (radians) between the stored tensors a and b, in float64 by another robust formula:
    2 atan2(|a^ - b^|, |a^ + b^|) with x^ = x / |x|."""
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    a, b = a / a.norm(), b / b.norm()
    return 2 * math.atan2(float((a - b).norm()), float((a + b).norm()))


def _read(inst: instruments.Instruments) -> dict[str, np.ndarray]:
    """Instruments.read() as {column: [K] values}."""
    values = inst.read().cpu().numpy()
    assert values.shape == (inst.k, len(inst.columns())) and values.dtype == np.float64
    return dict(zip(inst.columns(), values.T, strict=True))


# ---------------------------------------------------------------------------------------------------- angle_between
@pytest.mark.parametrize("theta", [1e-4, 1e-2, math.pi / 3, 2 * math.pi / 3, 3.0])
def test_angle_between_a_rotation_and_its_start_is_the_rotation_angle(theta):
    w = _unit((4, 3, 3, 3), 0) * 7.0  # float64: the answer to rounding
    a = _turned(w, _orthogonal(w, 1), theta)
    assert instruments.angle_between(a, w) == pytest.approx(DEG(theta), rel=1e-12)
    w32 = w.float()
    a32 = _turned(w32, _orthogonal(w32, 1), theta)
    assert instruments.angle_between(a32, w32) == pytest.approx(DEG(_exact(a32, w32)), rel=1e-6)  # the stored tensors
    assert instruments.angle_between(a32, w32) == pytest.approx(DEG(theta), rel=2e-4 if theta < 1e-3 else 1e-6)


def test_angle_between_is_symmetric_and_scale_free():
    w = _unit((50,), 2)
    a = _turned(w, _orthogonal(w, 3), 0.7)
    assert instruments.angle_between(a, w) == pytest.approx(instruments.angle_between(w, a), rel=1e-12)
    assert instruments.angle_between(4 * a, w) == pytest.approx(DEG(0.7), rel=1e-12)
    assert instruments.angle_between(-w, w) == pytest.approx(180.0, rel=1e-12)


# ---------------------------------------------------------------------------------------------------- instruments
def test_the_instruments_read_known_rotations_per_layer_and_for_the_whole_network():
    # two unit-norm layers turned by 60 and 120 degrees: as one vector, cos = (cos 60 + cos 120) / 2 = 0, 90 degrees;
    # displacements 2 sin(30) = 1 and 2 sin(60) = sqrt(3), together sqrt((1 + 3) / 2) = sqrt(2)
    ws = [_unit((4, 3, 3, 3), 0, torch.float32), _unit((10, 4), 1, torch.float32)]
    inst = instruments.Instruments(ws, 1, ["conv", "head"])
    assert inst.columns() == ["angle", "angle:conv", "angle:head", "disp", "disp:conv", "disp:head", "step_angle",
                              "step_angle:conv", "step_angle:head", "Theta"]
    r = _read(inst)  # nothing moved yet
    assert all(r[c][0] == 0 for c in ("angle", "angle:conv", "angle:head", "disp", "disp:conv", "disp:head", "Theta"))
    assert all(np.isnan(r[c][0]) for c in ("step_angle", "step_angle:conv", "step_angle:head"))  # no step taken
    with torch.no_grad():
        ws[0].copy_(_turned(ws[0], _orthogonal(ws[0], 5), math.pi / 3))
        ws[1].copy_(_turned(ws[1], _orthogonal(ws[1], 6), 2 * math.pi / 3))
    r = _read(inst)
    np.testing.assert_allclose([r["angle:conv"][0], r["angle:head"][0], r["angle"][0]], [60, 120, 90], rtol=1e-6)
    np.testing.assert_allclose([r["disp:conv"][0], r["disp:head"][0], r["disp"][0]], [1, math.sqrt(3), math.sqrt(2)],
                               rtol=1e-6)
    assert r["Theta"][0] == 0 and np.isnan(r["step_angle"][0])  # weights changed outside any step: no step angle


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_rotation_by_1e_4_rad_reads_1e_4_rad(dtype):
    # cos(1e-4) = 1 - 5e-9 is below float32 resolution: an arccos of the cosine would read 0 here
    ws = [_unit((8, 4, 3, 3), 0, dtype), _unit((10, 8), 1, dtype)]
    w0 = [w.clone() for w in ws]
    inst = instruments.Instruments(ws, 1, ["conv", "head"])
    with torch.no_grad():
        ws[0].copy_(_turned(ws[0], _orthogonal(ws[0], 5), 1e-4))
        ws[1].copy_(_turned(ws[1], _orthogonal(ws[1], 6), 2e-4))
    r = _read(inst)
    for col, w, a, theta in (("angle:conv", w0[0], ws[0], 1e-4), ("angle:head", w0[1], ws[1], 2e-4)):
        assert r[col][0] == pytest.approx(DEG(_exact(a, w)), rel=1e-6 if dtype == torch.float32 else 1e-12), col
        assert r[col][0] == pytest.approx(DEG(theta), rel=2e-4 if dtype == torch.float32 else 1e-12), col
    assert r["disp:conv"][0] == pytest.approx(2 * math.sin(0.5e-4), rel=2e-4 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("s", [2.0, 0.5, 3.0, 0.3, 1.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_pure_rescaling_has_angle_0_and_displacement_s_minus_1(s, dtype):
    ws = [_unit((6, 4, 3, 3), 0, dtype) * 3, _unit((10, 6), 1, dtype)]
    inst = instruments.Instruments(ws, 1, ["conv", "head"])
    with torch.no_grad():
        for w in ws:
            w.mul_(s)
    r = _read(inst)
    for col in ("disp", "disp:conv", "disp:head"):
        assert r[col][0] == pytest.approx(abs(s - 1), rel=1e-6), col
    # The angle is atan2(|t|, |b| + rho) with |t|^2 = |d|^2 - rho^2, rho = <d, b> / |b|: for a purely radial d that
    # difference cancels, and the products d_i b_i, d_i^2 are rounded in the weights' dtype before the float64 sums
    # (relative error <= u each, u the unit roundoff), so |t|^2 is off by up to 4 u |d|^2 and the reading is not 0
    # but up to 2 sqrt(u) |s - 1| / s rad: 0.065 degrees for s = 0.3 in float32, ~1e-6 degrees in float64. A
    # power-of-two s rescales exactly and reads 0 to float64 rounding.
    if s in (2.0, 0.5):
        floor = 1e-5
    else:
        floor = DEG(2 * math.sqrt(U32) * abs(s - 1) / s) if dtype == torch.float32 else 1e-5
    for col in ("angle", "angle:conv", "angle:head"):
        assert 0 <= r[col][0] <= floor, (col, r[col][0], floor)


def test_each_member_is_read_in_its_own_row():
    # K = 2: a grouped conv [K*out, ...] holds member j's kernels in rows j*out..., a grouped head [K, out, in] member
    # j in [j]; every member's part of every layer has norm 1
    def member_units(shape, k, seed):
        return torch.stack([_unit(shape, seed + j, torch.float32) for j in range(k)])

    conv = member_units((3, 2, 3, 3), 2, 0).reshape(6, 2, 3, 3)
    head = member_units((4, 5), 2, 10)
    inst = instruments.Instruments([conv, head], 2, ["conv", "head"])
    c, h = conv.reshape(2, 3, 2, 3, 3), head  # views: member j is c[j], h[j]
    with torch.no_grad():
        c[0].copy_(_turned(c[0], _orthogonal(c[0], 20), math.pi / 3))  # member 0: conv turned 60, head halved
        h[0].mul_(0.5)
        c[1].mul_(2.0)  # member 1: conv doubled, head turned 120
        h[1].copy_(_turned(h[1], _orthogonal(h[1], 21), 2 * math.pi / 3))
    r = _read(inst)
    np.testing.assert_allclose(r["angle:conv"], [60, 0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(r["angle:head"], [0, 120], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(r["disp:conv"], [1, 1], rtol=1e-6)
    np.testing.assert_allclose(r["disp:head"], [0.5, math.sqrt(3)], rtol=1e-6)
    # the whole network by hand: cos = sum <W'_l, W_l> / (|W'| |W|), |W|^2 = 2 for each member
    cos0 = (math.cos(math.pi / 3) + 0.5) / (math.sqrt(1 + 0.25) * math.sqrt(2))
    cos1 = (2 + math.cos(2 * math.pi / 3)) / (math.sqrt(4 + 1) * math.sqrt(2))
    np.testing.assert_allclose(r["angle"], [DEG(math.acos(cos0)), DEG(math.acos(cos1))], rtol=1e-6)
    np.testing.assert_allclose(r["disp"], [math.sqrt((1 + 0.25) / 2), math.sqrt((1 + 3) / 2)], rtol=1e-6)


@pytest.mark.parametrize("dtype, alphas, rtol", [
    (torch.float64, (0.1, 0.3), 1e-13), (torch.float64, (1e-4, 3e-4), 1e-11),
    (torch.float32, (0.1, 0.3), 1e-6), (torch.float32, (1e-4, 3e-4), 2e-4)])
def test_the_per_step_angle_of_two_known_steps(dtype, alphas, rtol):
    """Two optimiser steps turn layer `conv` by a1, a2 and layer `head` by 2 a1, 2 a2 (each in one plane, so from
    init they have turned by a1 + a2 and 2 (a1 + a2)). step_angle = the mean of the steps' angles, Theta = the sum of
    the whole network's per-step angles b_k, where for two unit-norm layers cos b_k = (cos a_k + cos 2 a_k) / 2."""
    ws = [_unit((4, 3, 3, 3), 0, dtype), _unit((10, 4), 1, dtype)]
    w0 = [w.clone() for w in ws]
    dirs = [_orthogonal(w, 7 + i) for i, w in enumerate(ws)]
    inst = instruments.Instruments(ws, 1, ["conv", "head"])
    total = 0.0
    for a in alphas:
        inst.before_step()
        total += a
        with torch.no_grad():  # the step: both layers on along their planes
            ws[0].copy_(_turned(w0[0], dirs[0], total))
            ws[1].copy_(_turned(w0[1], dirs[1], 2 * total))
        inst.after_step()
    r = _read(inst)

    def whole(a):  # the whole network's angle for layer turns a and 2a, by hand (robust for small a)
        return 2 * math.asin(math.sqrt((math.sin(a / 2) ** 2 + math.sin(a) ** 2) / 2))

    betas = [whole(a) for a in alphas]
    assert math.acos((math.cos(0.1) + math.cos(0.2)) / 2) == pytest.approx(whole(0.1), rel=1e-12)  # same formula
    assert r["step_angle:conv"][0] == pytest.approx(sum(alphas) / 2, rel=rtol)
    assert r["step_angle:head"][0] == pytest.approx(2 * sum(alphas) / 2, rel=rtol)
    assert r["step_angle"][0] == pytest.approx(sum(betas) / 2, rel=rtol)
    assert r["Theta"][0] == pytest.approx(sum(betas), rel=rtol)
    assert r["angle:conv"][0] == pytest.approx(DEG(sum(alphas)), rel=rtol)
    assert r["angle:head"][0] == pytest.approx(DEG(2 * sum(alphas)), rel=rtol)
    assert r["angle"][0] == pytest.approx(DEG(whole(sum(alphas))), rel=rtol)
    # one more step of a3: step_angle is that step's alone (read() restarts the epoch's mean), Theta keeps counting
    a3 = alphas[0]
    inst.before_step()
    with torch.no_grad():
        ws[0].copy_(_turned(w0[0], dirs[0], total + a3))
        ws[1].copy_(_turned(w0[1], dirs[1], 2 * (total + a3)))
    inst.after_step()
    r = _read(inst)
    assert r["step_angle:conv"][0] == pytest.approx(a3, rel=rtol)
    assert r["step_angle"][0] == pytest.approx(whole(a3), rel=rtol)
    assert r["Theta"][0] == pytest.approx(sum(betas) + whole(a3), rel=rtol)
    r = _read(inst)  # no step since the last read: no step angle; Theta unchanged
    assert np.isnan(r["step_angle"][0]) and r["Theta"][0] == pytest.approx(sum(betas) + whole(a3), rel=rtol)


def test_the_instruments_state_round_trips():
    """Instruments restored from a mid-epoch state_dict (W_0, the epoch's step sums, Theta) read what the original
    reads after the same further step, bit for bit."""
    ws = [_unit((4, 3, 3, 3), 0, torch.float32), _unit((10, 4), 1, torch.float32)]
    w0 = [w.clone() for w in ws]
    dirs = [_orthogonal(w, 3 + i) for i, w in enumerate(ws)]

    def step(instruments, theta):
        for inst in instruments:
            inst.before_step()
        with torch.no_grad():
            for w, w_init, u in zip(ws, w0, dirs, strict=True):
                w.copy_(_turned(w_init, u, theta))
        for inst in instruments:
            inst.after_step()

    inst = instruments.Instruments(ws, 1, ["conv", "head"])
    step([inst], 0.1)
    _read(inst)
    step([inst], 0.2)  # mid-epoch: one step in the epoch's accumulators
    fresh = instruments.Instruments(ws, 1, ["conv", "head"])  # its W_0 would be the current weights...
    fresh.load_state_dict(inst.state_dict())  # ...until the state restores the real one
    step([inst, fresh], 0.3)
    a, b = _read(inst), _read(fresh)
    assert a.keys() == b.keys() and all(np.array_equal(a[c], b[c]) for c in a)
    assert b["angle:conv"][0] == pytest.approx(DEG(0.3), rel=1e-6) and b["step_angle:conv"][0] == pytest.approx(
        0.1, rel=1e-6)  # the mean of the two steps of this epoch (0.1 each)
    assert b["Theta"][0] == pytest.approx(0.3, rel=1e-6)


# ---------------------------------------------------------------------------------------------------- real runs
DIAGNOSTIC_KINDS = ("angle", "disp", "step_angle", "Theta")


def _diagnostics(history: pd.DataFrame) -> list[str]:
    return [c for c in history.columns if c.split(":")[0] in DIAGNOSTIC_KINDS]


@pytest.mark.usefixtures("one_torch_thread")
def test_a_populations_diagnostics_equal_its_separate_runs_and_agree_with_one_another():
    # SGD + momentum at lr 1e-3 (not chaotic over two epochs). Measured on one thread, population against separate:
    # the whole-network columns within 2.3e-5, the per-layer ones within 5.4e-4 (step_angle:prep.conv: the stem's
    # gradient sums 64 x 32 x 32 terms per weight, and its displacement from init is what the angle measures, so
    # the summation-order difference shows there first; losses agree to 1.7e-6, norms to 1e-7)
    configs = [TINY.replace(optimizer="sgd_momentum", lr=1e-3, sigma_w=s, seed=seed)
               for s, seed in ((0.5, 0), (1.0, 0), (2.5, 1))]
    pop = train(configs, progress=False)
    per_epoch = 256 // 64
    for p, c in zip(pop, configs, strict=True):
        sep = train(c, progress=False).history
        cols = _diagnostics(sep)
        assert cols == _diagnostics(p.history) and len(cols) == 3 * (1 + 9) + 1  # 9 layers + the whole network
        for col in cols:
            rtol = 1e-4 if ":" not in col else 2e-3
            np.testing.assert_allclose(p.history[col], sep[col], rtol=rtol, atol=0, err_msg=col)
        # Theta is the running sum of the whole network's per-step angles: the epoch means times the steps
        h = sep.iloc[1:]
        np.testing.assert_allclose(h["Theta"], np.cumsum(h["step_angle"] * per_epoch), rtol=1e-12)
        # on the sphere the angle from init is at most the path's length (the sum of the per-step angles)
        assert (np.radians(h["angle"]) <= h["Theta"] * (1 + 1e-9)).all()
        for layer in (col.split(":", 1)[1] for col in cols if col.startswith("angle:")):
            path = np.cumsum(h[f"step_angle:{layer}"] * per_epoch)
            assert (np.radians(h[f"angle:{layer}"]) <= path * (1 + 1e-9)).all(), layer
        # |W_t - W_0| >= |W_0| sin(angle) for angles below 90 degrees (the nearest point of the ray of W_t)
        for suffix in ("", *(col[len("angle"):] for col in cols if col.startswith("angle:"))):
            angle = np.radians(h[f"angle{suffix}"])
            assert (angle > 0).all() and (angle < math.pi / 2).all()
            assert (h[f"disp{suffix}"] >= np.sin(angle) * (1 - 1e-9)).all(), suffix


class _Stop(Exception):
    pass


@pytest.mark.usefixtures("one_torch_thread")
def test_a_resumed_run_has_the_diagnostics_of_the_uninterrupted_run(tmp_path, monkeypatch):
    config = TINY.replace(optimizer="adam", epochs=4, checkpoint_every=2, augment=True)
    whole = train(config, out_dir=tmp_path / "whole", section="s", progress=False)
    real, calls = data_mod.batches, []

    def batches(*args, **kwargs):  # one call per epoch: stop when epoch 4 starts (epoch 3 is lost, 2 checkpointed)
        calls.append(1)
        if len(calls) > 3:
            raise _Stop
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(data_mod, "batches", batches)
        with pytest.raises(_Stop):
            train(config, out_dir=tmp_path, section="s", progress=False)
    folder = RunFolders(tmp_path, "s").checkpoint_folder([config])
    assert [p.name for p in checkpoints(folder)] == ["epoch-000002.ckpt"]
    resumed = train(config, out_dir=tmp_path, section="s", progress=False)
    cols = _diagnostics(whole.history)
    assert len(cols) == 31 and not folder.exists()
    pd.testing.assert_frame_equal(resumed.history[cols], whole.history[cols], check_exact=True)
    assert {k: resumed.summary[k] for k in ("angle_at_best", "angle_final", "Theta_final")} == {
        k: whole.summary[k] for k in ("angle_at_best", "angle_final", "Theta_final")}
