"""Models: parameter counts, the sigma_w initialisation, norms, scale invariance, errors."""

import math
import pickle

import pytest
import torch
from torch import nn

from initmem.engine.models import (
    ARCHS,
    ShortcutA,
    SpatialMax,
    SpatialMean,
    build_model,
    head_parameters,
    init_weights,
    layer_names,
)
from initmem.errors import ConfigError

# exact counts measured at width 1, num_classes 10; docs/study.md / He et al. figures beside them
COUNTS = {"resnet9": (6_573_130, 6.57e6), "resnet20": (269_722, 0.27e6), "resnet56": (853_018, 0.85e6),
          "resnet110": (1_727_962, 1.7e6)}


@pytest.mark.parametrize("arch", ARCHS)
def test_parameter_counts(arch):
    exact, study = COUNTS[arch]
    n = sum(p.numel() for p in build_model(arch).parameters())
    assert n == exact
    assert abs(n - study) / study < 0.02


@pytest.mark.parametrize("arch,n_layers", [("resnet9", 9), ("resnet20", 20), ("resnet56", 56)])
def test_layer_names_and_forward(arch, n_layers):
    model = build_model(arch, width=1 / 16, num_classes=7)
    names = layer_names(model)
    assert len(names) == n_layers and names[-1] == "head" and len(set(names)) == n_layers
    assert names[0] == ("prep.conv" if arch == "resnet9" else "conv1")
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    assert head_parameters(model) == [model.head.weight, model.head.bias]


def test_width_multiplies_channels():
    model = build_model("resnet9", width=0.5)
    assert [model.prep.conv.out_channels, model.layer1.conv.out_channels, model.layer2.conv.out_channels,
            model.layer3.conv.out_channels, model.head.in_features] == [32, 64, 128, 256, 256]
    he = build_model("resnet20", width=0.25)
    assert [he.conv1.out_channels, he.layer2[0].conv1.out_channels, he.head.in_features] == [4, 8, 16]


@pytest.mark.parametrize("sigma_w", [0.1, 1.0, 2.5])
def test_init_std_matches_sigma_over_sqrt_fan_in(sigma_w):
    torch.manual_seed(0)
    model = build_model("resnet9", sigma_w=sigma_w, width=0.5)
    checked = 0
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            fan_in = m.weight[0].numel()
            want = sigma_w / math.sqrt(fan_in)
            w = m.weight.detach().double()
            # the std estimate's relative error is ~1/sqrt(2n): 2% is > 4 of those for n >= 10^4
            tol = 0.02 if w.numel() >= 10_000 else 0.08
            assert abs(w.std().item() / want - 1) < tol, (m, w.std().item(), want)
            assert abs(w.mean().item()) < 5 * want / math.sqrt(w.numel())
            checked += 1
    assert checked == 9


def test_bn_and_biases_reset():
    model = build_model("resnet20", width=0.25)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    init_weights(model, 1.0)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == 19
    for bn in bns:
        assert torch.equal(bn.weight, torch.ones_like(bn.weight)) and torch.equal(bn.bias, torch.zeros_like(bn.bias))
    assert torch.equal(model.head.bias, torch.zeros_like(model.head.bias))


def test_init_is_linear_in_sigma_and_seeded():
    norms = []
    for s in (1.0, 2.0, 1.0):
        torch.manual_seed(3)
        model = build_model("resnet20", sigma_w=s, width=0.5)
        norms.append(math.sqrt(sum(model.get_submodule(n).weight.double().square().sum().item()
                                   for n in layer_names(model))))
    assert norms[0] == norms[2]  # same seed, same weights
    assert norms[1] == pytest.approx(2 * norms[0], rel=1e-6)


def test_layer_names_are_the_conv_and_linear_layers_in_module_order():
    model = build_model("resnet9", width=0.25)
    names = layer_names(model)
    assert names == [n for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert names[0] == "prep.conv" and names[-1] == "head" and len(names) == 9


def test_batchnorm_scale_invariance():
    torch.manual_seed(0)
    model = build_model("resnet20", width=0.5).train()
    x = torch.randn(16, 3, 32, 32)
    before = model(x)
    with torch.no_grad():
        model.layer2[1].conv1.weight.mul_(7.0)  # feeds bn1: invariant
        model.conv1.weight.mul_(0.2)
    assert torch.allclose(model(x), before, rtol=1e-3, atol=1e-4)
    with torch.no_grad():
        model.head.weight.mul_(7.0)  # no BatchNorm after the head: not invariant
    assert not torch.allclose(model(x), before, rtol=1e-2, atol=1e-2)


def test_shortcut_a_pads_and_subsamples():
    x = torch.randn(2, 4, 8, 8)
    y = ShortcutA(4, 8, 2)(x)
    assert y.shape == (2, 8, 4, 4)
    assert torch.equal(y[:, 2:6], x[:, :, ::2, ::2])
    assert y[:, :2].abs().sum() == 0 and y[:, 6:].abs().sum() == 0


def test_resnet20_pickles():
    torch.manual_seed(0)
    model = build_model("resnet20", width=0.25).eval()
    clone = pickle.loads(pickle.dumps(model))
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(clone(x), model(x))


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "1", None])
def test_bad_sigma_w(bad):
    with pytest.raises(ConfigError, match="sigma_w"):
        build_model("resnet20", sigma_w=bad, width=0.25)
    with pytest.raises(ConfigError, match="sigma_w="):
        init_weights(nn.Linear(2, 2), bad)


def test_bad_arch_and_width():
    with pytest.raises(ConfigError, match="resnet18.*resnet9, resnet20, resnet56, resnet110"):
        build_model("resnet18")
    for bad in (0, -0.5, float("nan"), True, "1", 1e-3):
        with pytest.raises(ConfigError, match="width"):
            build_model("resnet9", width=bad)
    with pytest.raises(ConfigError, match="width"):
        build_model("resnet20", width=0.02)  # 16 * 0.02 rounds to 0 channels
    with pytest.raises(ConfigError, match="num_classes"):
        build_model("resnet20", width=0.25, num_classes=0)


@pytest.mark.parametrize("pool, reference", [(SpatialMax, lambda x: torch.amax(x, dim=(2, 3))),
                                             (SpatialMean, lambda x: x.sum(dim=(2, 3)) / (x.shape[2] * x.shape[3]))])
def test_global_pools_are_the_adaptive_pools_forward_and_backward(pool, reference):
    """SpatialMax / SpatialMean replace AdaptiveMaxPool2d(1) / adaptive_avg_pool2d(1) (whose CUDA backward is not
    deterministic): the same function and the same gradient."""
    adaptive = nn.AdaptiveMaxPool2d(1) if pool is SpatialMax else nn.AdaptiveAvgPool2d(1)
    x = torch.randn(4, 6, 5, 7, generator=torch.Generator().manual_seed(0), requires_grad=True)
    ours = pool()(x)
    assert ours.shape == (4, 6)
    torch.testing.assert_close(ours, adaptive(x).flatten(1), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours, reference(x), rtol=1e-6, atol=1e-7)
    g = torch.randn(4, 6)
    (ours_grad,) = torch.autograd.grad(ours, x, g)
    (theirs_grad,) = torch.autograd.grad(adaptive(x).flatten(1), x, g)
    torch.testing.assert_close(ours_grad, theirs_grad, rtol=1e-6, atol=1e-7)


def test_the_networks_use_the_deterministic_global_pools():
    assert isinstance(build_model("resnet9", width=1 / 16).pool, SpatialMax)
    for arch in ("resnet20", "resnet56", "resnet110"):
        net = build_model(arch, width=0.25)
        assert isinstance(net.pool, SpatialMean), arch
        assert not any(isinstance(m, (nn.AdaptiveMaxPool2d, nn.AdaptiveAvgPool2d)) for m in net.modules()), arch
