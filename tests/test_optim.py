"""Optimisers (Muon against torch.optim.Muon, the AdamW part against torch.optim.AdamW) and schedules."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from initmem.engine.models import build_model
from initmem.engine.optim import (
    OPTIMIZER_DEFAULTS,
    OPTIMIZERS,
    Muon,
    MuonWithAuxAdam,
    build_optimizer,
    lr_factor,
    muon_update,
    newton_schulz,
    set_lr_factor,
)
from initmem.errors import ConfigError


def _run_pair(ours, theirs, p, q, shape, steps=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        grad = torch.randn(shape, generator=g)
        p.grad, q.grad = grad.clone(), grad.clone()
        ours.step()
        theirs.step()


@pytest.mark.parametrize("shape,nesterov,wd", [((32, 48), True, 0.1), ((64, 16), False, 0.0), ((40, 40), True, 0.0)])
def test_muon_matches_torch_muon_on_2d(shape, nesterov, wd):
    torch.manual_seed(0)
    w = torch.randn(shape)
    p, q = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    ours = Muon([p], lr=0.02, momentum=0.95, nesterov=nesterov, ns_steps=5, weight_decay=wd)
    theirs = torch.optim.Muon([q], lr=0.02, momentum=0.95, nesterov=nesterov, ns_steps=5, weight_decay=wd,
                              adjust_lr_fn="original")
    _run_pair(ours, theirs, p, q, shape)
    assert not torch.equal(p, w)
    torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def test_aux_adamw_matches_torch_adamw():
    torch.manual_seed(0)
    w = torch.randn(100)
    p, q = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    ours = MuonWithAuxAdam([dict(params=[p], use_muon=False, lr=1e-2, betas=(0.8, 0.99), weight_decay=0.1)])
    theirs = torch.optim.AdamW([q], lr=1e-2, betas=(0.8, 0.99), weight_decay=0.1)
    _run_pair(ours, theirs, p, q, (100,), steps=6)
    assert not torch.equal(p, w)
    torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def _spread_matrix(rows, cols, seed=0):
    """A matrix whose singular values span two decades, like a real gradient."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(rows, rows, generator=g))
    v, _ = torch.linalg.qr(torch.randn(cols, cols, generator=g))
    k = min(rows, cols)
    return u[:, :k] @ torch.diag(torch.logspace(0, -2, k)) @ v[:, :k].T


def test_muon_update_on_conv_is_near_orthogonal():
    grad = _spread_matrix(16, 72).reshape(16, 8, 3, 3) * 5
    u = muon_update(grad, torch.zeros_like(grad), beta=0.95, nesterov=True, ns_steps=5)
    assert u.shape == grad.shape and u.dtype == grad.dtype
    s = torch.linalg.svdvals(u.reshape(16, -1).float())
    s_grad = torch.linalg.svdvals(grad.reshape(16, -1))
    assert s.min() > 0.5 and s.max() < 1.5
    assert s_grad.max() > 1.5 and s_grad.min() < 0.5  # the un-orthogonalised gradient is far outside the band
    assert s_grad.min() / s_grad.max() < 0.02 and s.min() / s.max() > 0.3  # and its spectrum is far from flat


def test_muon_update_on_tall_conv():
    # the stem conv of a ResNet is tall once flattened (64 x 27): NS runs on the transpose
    grad = _spread_matrix(64, 27, seed=2).reshape(64, 3, 3, 3)
    u = muon_update(grad, torch.zeros_like(grad), beta=0.95, nesterov=False, ns_steps=5)
    s = torch.linalg.svdvals(u.reshape(64, 27))
    assert u.shape == grad.shape and s.min() > 0.5 and s.max() < 1.5


def test_muon_update_is_nesterov_ns_of_flattened_buffer():
    g = torch.Generator().manual_seed(1)
    buf0, grad = torch.randn(8, 4, 3, 3, generator=g), torch.randn(8, 4, 3, 3, generator=g)
    buf = buf0.clone()
    u = muon_update(grad, buf, beta=0.9, nesterov=True, ns_steps=5)
    want_buf = 0.9 * buf0 + 0.1 * grad
    torch.testing.assert_close(buf, want_buf)
    want = newton_schulz((0.1 * grad + 0.9 * want_buf).reshape(8, 36)).float().reshape(8, 4, 3, 3)
    torch.testing.assert_close(u, want, rtol=0, atol=2e-2)  # bf16 rounding of the nesterov mix may differ


def test_muon_update_of_a_population_parameter_is_each_members_update_bitwise():
    # a grouped conv [K*out, in, k, k] holds member j's kernel in rows j*out...(j+1)*out: each orthogonalised alone
    g = torch.Generator().manual_seed(3)
    grads, bufs = torch.randn(3, 8, 4, 3, 3, generator=g), torch.randn(3, 8, 4, 3, 3, generator=g)
    buf = bufs.reshape(24, 4, 3, 3).clone()
    u = muon_update(grads.reshape(24, 4, 3, 3), buf, beta=0.95, nesterov=True, ns_steps=5, members=3)
    for j in range(3):
        own = bufs[j].clone()
        assert torch.equal(u[8 * j:8 * (j + 1)], muon_update(grads[j], own, 0.95, True, 5)), j
        assert torch.equal(buf[8 * j:8 * (j + 1)], own), j
    whole = muon_update(grads.reshape(24, 4, 3, 3), bufs.reshape(24, 4, 3, 3).clone(), 0.95, True, 5)
    assert not torch.allclose(whole, u, atol=1e-3)  # one [24, 36] matrix is another update


def test_newton_schulz_transposes_tall_batches_leading_dims_and_checks_rank():
    G = torch.randn(48, 12)
    torch.testing.assert_close(newton_schulz(G), newton_schulz(G.T).T)
    assert newton_schulz(G).dtype == torch.bfloat16
    stack = torch.randn(2, 3, 4)  # a stack of matrices is a batch (tests/test_population.py checks it bitwise)
    assert newton_schulz(stack).shape == (2, 3, 4)
    for bad in (torch.randn(5), torch.tensor(1.0)):
        with pytest.raises(ConfigError, match=r"newton_schulz got a tensor of shape .*\[\.\.\., m, n\] stack"):
            newton_schulz(bad)


def test_muon_decoupled_weight_decay_and_rejects_vectors():
    w = torch.randn(6, 5)
    p = torch.nn.Parameter(w.clone())
    p.grad = torch.zeros_like(w)  # NS of zero is zero: only the decay acts
    Muon([p], lr=0.1, weight_decay=0.5).step()
    torch.testing.assert_close(p.detach(), w * (1 - 0.1 * 0.5))
    with pytest.raises(ConfigError, match=r"shape \(5,\)"):
        Muon([torch.nn.Parameter(torch.randn(5))])
    with pytest.raises(ConfigError, match="use_muon"):
        MuonWithAuxAdam([{"params": [p]}])
    with pytest.raises(ConfigError, match="betas_typo"):
        MuonWithAuxAdam([{"params": [p], "use_muon": False, "betas_typo": 1}])


def _batch():
    g = torch.Generator().manual_seed(0)
    return torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g)


def _train(name, steps=8, seed=0, **kw):
    torch.manual_seed(seed)
    model = build_model("resnet9", width=1 / 16)
    opt = build_optimizer(name, model, **kw)
    x, y = _batch()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, opt, losses


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_lowers_the_loss(name):
    _, _, losses = _train(name)
    assert losses[-1] < 0.7 * losses[0], losses


def test_muon_groups_and_determinism():
    model, opt, _ = _train("muon", steps=2)
    hidden, aux = opt.param_groups
    assert hidden["use_muon"] and not aux["use_muon"]
    assert {id(p) for p in hidden["params"]} == {id(m.weight) for m in model.modules()
                                                 if isinstance(m, torch.nn.Conv2d)}
    assert id(model.head.weight) in {id(p) for p in aux["params"]} and len(aux["params"]) == 2 * 8 + 2
    assert (hidden["lr"], aux["lr"], hidden["momentum"], hidden["ns_steps"]) == (0.02, 1e-3, 0.95, 5)
    again, _, _ = _train("muon", steps=2)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters(), strict=True))


def test_state_dict_round_trip():
    model, opt, _ = _train("muon", steps=3)
    clone = copy.deepcopy(model)
    opt2 = build_optimizer("muon", clone)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    x, y = _batch()
    for m, o in ((model, opt), (clone, opt2)):
        o.zero_grad()
        F.cross_entropy(m(x), y).backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), clone.parameters(), strict=True))


def test_defaults_and_coupling():
    model = build_model("resnet20", width=0.25)
    sgd = build_optimizer("sgd_momentum", model)
    assert isinstance(sgd, torch.optim.SGD)
    assert (sgd.param_groups[0]["lr"], sgd.param_groups[0]["momentum"]) == (0.01, 0.9)
    adam = build_optimizer("adam", model, weight_decay=1e-4)
    assert type(adam) is torch.optim.Adam and adam.param_groups[0]["weight_decay"] == 1e-4  # coupled L2
    adamw = build_optimizer("adamw", model)
    assert type(adamw) is torch.optim.AdamW and adamw.param_groups[0]["weight_decay"] == 1e-2
    assert build_optimizer("sgd", model, lr=0.5).param_groups[0]["lr"] == 0.5
    assert OPTIMIZER_DEFAULTS["muon"]["lr"] == 0.02 and OPTIMIZER_DEFAULTS["muon"]["muon_aux_lr"] == 1e-3
    # neutral values of inapplicable hyper-parameters are accepted (TrainConfig passes every field)
    build_optimizer("adam", model, momentum=0.0, ns_steps=5, nesterov=False, muon_aux_lr=1e-3, betas=[0.9, 0.999])
    assert not adam.param_groups[0]["amsgrad"]
    assert build_optimizer("adamw", model, amsgrad=True).param_groups[0]["amsgrad"] is True


def test_amsgrad_keeps_the_largest_second_moment_so_the_step_shrinks_with_the_gradient():
    """AMSGrad's denominator never decays: after large gradients, a 100x smaller one moves a weight tens of times
    less than under plain Adam (whose second moment decays toward the small gradients), at the same lr."""
    moved = {}
    for amsgrad in (False, True):
        net = torch.nn.Linear(4, 1, bias=False)
        # no momentum and a fast-decaying v: the contrast within a few steps
        opt = build_optimizer("adam", net, amsgrad=amsgrad, betas=(0.0, 0.9))
        for g in [1.0] * 5 + [0.01] * 200:
            net.weight.grad = torch.full_like(net.weight, g)
            before = net.weight.detach().clone()
            opt.step()
        moved[amsgrad] = (net.weight.detach() - before).abs().max().item()
    assert moved[False] > 0.5e-3  # plain Adam: back to ~lr per coordinate once v has decayed to the small gradients
    assert moved[False] > 30 * moved[True]


@pytest.mark.parametrize("name,kw,match", [
    ("rmsprop", {}, "optimizer='rmsprop'.*sgd, sgd_momentum, adam, adamw, muon"),
    ("sgd", {"mom": 0.9}, r"\['mom'\]"),
    ("sgd", {"momentum": 0.9}, "momentum=0.9.*optimizer='sgd'"),
    ("adam", {"ns_steps": 3}, "ns_steps=3.*optimizer='adam'"),
    ("adamw", {"nesterov": True}, "nesterov=True"),
    ("sgd_momentum", {"muon_aux_lr": 0.1}, "muon_aux_lr=0.1"),
    ("sgd", {"lr": -1.0}, "lr=-1.0"),
    ("sgd", {"lr": float("nan")}, "lr=nan"),
    ("sgd", {"lr": True}, "lr=True"),
    ("muon", {"momentum": 1.0}, "momentum=1.0"),
    ("adam", {"betas": (0.9,)}, "betas"),
    ("adam", {"eps": 0.0}, "eps=0.0"),
    ("adam", {"amsgrad": 1}, "amsgrad=1"),
    ("sgd_momentum", {"amsgrad": True}, "amsgrad=True.*optimizer='sgd_momentum'"),
    ("muon", {"ns_steps": 0}, "ns_steps=0"),
    ("sgd_momentum", {"momentum": 0.0, "nesterov": True}, "nesterov"),
])
def test_bad_optimizer_config(name, kw, match):
    with pytest.raises(ConfigError, match=match):
        build_optimizer(name, build_model("resnet20", width=0.25), **kw)


@pytest.mark.parametrize("name, kw, line", [
    ("muon", {"momentum": 1.0}, "momentum=1.0 is invalid: a finite number in [0, 1) is accepted"),
    ("adam", {"betas": (0.9, 1.0)}, "betas[1]=1.0 is invalid: a finite number in [0, 1) is accepted"),
    ("adam", {"betas": "ab"}, "betas='ab' is invalid: a sequence of 2 numbers, each a finite number in [0, 1) is "
                              "accepted"),
    ("adamw", {"weight_decay": -0.1}, "weight_decay=-0.1 is invalid: a finite number >= 0 is accepted"),
    ("sgd", {"lr": 0.0}, "lr=0.0 is invalid: a finite positive number is accepted"),
    ("adam", {"amsgrad": "yes"}, "amsgrad='yes' is invalid: true or false is accepted"),
])
def test_a_bad_hyper_parameter_is_the_one_line_of_initmem_checks(name, kw, line):
    """The optimiser's inputs are checked by `initmem.checks`, as every other input: one line, the value, the range."""
    with pytest.raises(ConfigError) as err:
        build_optimizer(name, build_model("resnet20", width=0.25), **kw)
    assert str(err.value) == line
    p = torch.nn.Parameter(torch.randn(4, 6))
    with pytest.raises(ConfigError, match=r"^momentum=1\.0 is invalid: a finite number in \[0, 1\) is accepted$"):
        Muon([p], momentum=1.0)
    with pytest.raises(ConfigError, match=r"^eps=0 is invalid: a finite positive number is accepted$"):
        MuonWithAuxAdam([{"params": [p], "use_muon": False, "eps": 0}])


def test_set_lr_factor_keeps_group_ratio():
    opt = build_optimizer("muon", build_model("resnet20", width=0.25))
    set_lr_factor(opt, 0.5)
    assert [g["lr"] for g in opt.param_groups] == [0.01, 5e-4]
    set_lr_factor(opt, 1.0)
    assert [g["lr"] for g in opt.param_groups] == [0.02, 1e-3]


def test_schedules_closed_forms():
    T = 100
    assert [lr_factor("constant", s, T) for s in (0, 50, 99)] == [1.0, 1.0, 1.0]
    for s in (0, 10, 37, 99):
        assert lr_factor("cosine", s, T) == pytest.approx(0.5 * (1 + math.cos(math.pi * s / T)))
    assert lr_factor("cosine", 50, T) == pytest.approx(0.5)
    # warm-up 1/W ... 1, then cosine over the remaining T - W steps
    assert [lr_factor("cosine", s, T, warmup_steps=4) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor("cosine", 4, T, warmup_steps=4) == 1.0
    assert lr_factor("cosine", 52, T, warmup_steps=4) == pytest.approx(0.5)
    assert lr_factor("constant", 1, T, warmup_steps=4) == 0.5
    assert [lr_factor("step", s, T) for s in (0, 49, 50, 74, 75, 99)] == pytest.approx(
        [1, 1, 0.1, 0.1, 0.01, 0.01])
    assert lr_factor("step", 30, T, milestones=(0.3,), gamma=0.5) == 0.5
    assert 0.02 * lr_factor("cosine", 50, T) == pytest.approx(0.01)  # the lr a run uses: base lr x factor
    with pytest.raises(ConfigError, match="schedule='linear'"):
        lr_factor("linear", 0, T)
    with pytest.raises(ConfigError, match="warmup_steps=200"):
        lr_factor("constant", 0, T, warmup_steps=200)
    with pytest.raises(ConfigError, match="step=-1"):
        lr_factor("constant", -1, T)


def test_newton_schulz_in_float32_is_the_same_iteration_without_bfloat16s_rounding():
    """`ns_dtype`: float32 returns float32, orthogonalises as well, and differs from the recipe's bfloat16 only by
    bfloat16's rounding (a few per cent of an entry), so it is a faster arithmetic, not another update."""
    grad = _spread_matrix(16, 72).reshape(16, 8, 3, 3) * 5
    assert newton_schulz(grad.reshape(16, -1)).dtype == torch.bfloat16  # the default: the recipe's
    x32 = newton_schulz(grad.reshape(16, -1), dtype="float32")
    assert x32.dtype == torch.float32
    s = torch.linalg.svdvals(x32)
    assert s.min() > 0.5 and s.max() < 1.5
    u16 = muon_update(grad, torch.zeros_like(grad))
    u32 = muon_update(grad, torch.zeros_like(grad), ns_dtype="float32")
    assert u32.dtype == grad.dtype and not torch.equal(u16, u32)
    assert (u16 - u32).norm() / u32.norm() < 0.05


def test_muon_takes_ns_dtype_and_refuses_another_in_one_line():
    model = build_model("resnet9", 1.0, 0.125)
    opt = build_optimizer("muon", model, ns_dtype="float32")
    assert [g["ns_dtype"] for g in opt.param_groups if g["use_muon"]] == ["float32"]
    assert [g.get("ns_dtype") for g in build_optimizer("muon", model).param_groups if g["use_muon"]] == ["bfloat16"]
    with pytest.raises(ConfigError, match=r"^ns_dtype='float16' is invalid: one of bfloat16, float32 is accepted$"):
        build_optimizer("muon", model, ns_dtype="float16")
    with pytest.raises(ConfigError, match="ns_dtype='float32' invalid for optimizer='adam'"):
        build_optimizer("adam", model, ns_dtype="float32")
    p = torch.nn.Parameter(torch.randn(4, 6))
    with pytest.raises(ConfigError, match="ns_dtype='half'"):
        Muon([p], ns_dtype="half")


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_is_fused_on_cuda_only_and_keeps_the_multi_tensor_kernel_elsewhere(name):
    devices = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        opt = build_optimizer(name, torch.nn.Linear(3, 2, device=dev))
        fused = dev == "cuda"
        assert bool(opt.defaults["fused"]) is fused and bool(opt.defaults["foreach"]) is not fused, dev
