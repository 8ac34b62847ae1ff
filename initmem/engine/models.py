"""BatchNorm ResNets for CIFAR-10 with an initialisation scale sigma_w. Every conv is bias-free before a BatchNorm, so
the loss is invariant to each filter's scale (sigma_w changes only the effective step size); the head is not.
resnet9: Page's DAWNBench layout (no 0.125 logit scale; a head bias: 6,573,130 parameters); resnet20/56/110: He et
al.'s, option-A shortcuts (269,722 / 853,018 / 1,727,962). `width` multiplies every channel count (rounded)."""

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from initmem.checks import check_int, check_real
from initmem.config import ARCHS
from initmem.errors import ConfigError


def _channels(base: int, width: float) -> int:
    c = int(round(base * width))
    if c < 1:
        raise ConfigError(f"width={width!r} is invalid: it gives {base}*width < 1 channel; "
                          f"width >= {0.5 / base:.4g} (roughly) is accepted")
    return c


class SpatialMax(nn.Module):
    """Global max-pool as amax over the spatial dimensions: AdaptiveMaxPool2d(1)'s function, whose CUDA backward is not
    deterministic (amax splits the gradient between exact ties, which ReLU leaves only at 0, where it is 0)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(dim=(2, 3))


class SpatialMean(nn.Module):
    """Global average pool as a mean (adaptive_avg_pool2d's CUDA backward is not deterministic; the mean's is)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


class ConvBN(nn.Module):
    """3x3 bias-free conv -> BatchNorm -> ReLU."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class PageLayer(ConvBN):
    """conv-BN-ReLU, max-pool 2, then optionally x + res2(res1(x))."""

    def __init__(self, c_in: int, c_out: int, residual: bool):
        super().__init__(c_in, c_out)
        self.pool = nn.MaxPool2d(2)
        self.residual = residual
        if residual:
            self.res1, self.res2 = ConvBN(c_out, c_out), ConvBN(c_out, c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(super().forward(x))
        return x + self.res2(self.res1(x)) if self.residual else x


class ResNet9(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 10):
        super().__init__()
        c = [_channels(b, width) for b in (64, 128, 256, 512)]
        self.prep = ConvBN(3, c[0])
        self.layer1 = PageLayer(c[0], c[1], residual=True)
        self.layer2 = PageLayer(c[1], c[2], residual=False)
        self.layer3 = PageLayer(c[2], c[3], residual=True)
        self.pool = SpatialMax()
        self.head = nn.Linear(c[3], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.layer3(self.layer2(self.layer1(self.prep(x))))))


class ShortcutA(nn.Module):
    """Option-A shortcut: subsample, zero-pad c_in to c_out channels (a module, not a lambda: models pickle)."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.stride, self.pad_lo, self.pad_hi = stride, (c_out - c_in) // 2, c_out - c_in - (c_out - c_in) // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, self.pad_lo, self.pad_hi))


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = ShortcutA(c_in, c_out, stride) if stride != 1 or c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, n: int, width: float = 1.0, num_classes: int = 10):
        super().__init__()
        c = [_channels(b, width) for b in (16, 32, 64)]
        self.conv1 = nn.Conv2d(3, c[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c[0])
        self.layer1, self.layer2, self.layer3 = (  # each stage's first block changes the width and stride
            nn.Sequential(BasicBlock(c_in, c_out, stride), *(BasicBlock(c_out, c_out) for _ in range(n - 1)))
            for c_in, c_out, stride in zip((c[0], c[0], c[1]), c, (1, 2, 2), strict=True))
        self.pool = SpatialMean()
        self.head = nn.Linear(c[2], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.layer3(self.layer2(self.layer1(F.relu(self.bn1(self.conv1(x))))))))


_FACTORIES = {"resnet9": ResNet9, "resnet20": functools.partial(CifarResNet, 3),
              "resnet56": functools.partial(CifarResNet, 9), "resnet110": functools.partial(CifarResNet, 18)}


def build_model(arch: str, sigma_w: float = 1.0, width: float = 1.0, num_classes: int = 10) -> nn.Module:
    """The network `arch` at channel multiplier `width`, initialised by `init_weights(model, sigma_w)`."""
    if arch not in _FACTORIES:
        raise ConfigError(f"arch={arch!r} is invalid: one of {', '.join(ARCHS)} is accepted")
    sigma_w = check_real("sigma_w", sigma_w, 0, above=True)  # before building: not after a 6.6 M-parameter init
    model = _FACTORIES[arch](check_real("width", width, 0, above=True), check_int("num_classes", num_classes, 1, 2**31))
    init_weights(model, sigma_w)
    return model


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "_orig_mod", model)  # torch.compile wrapper: keep the plain layer names


@torch.no_grad()
def init_weights(model: nn.Module, sigma_w: float) -> None:
    """W ~ N(0, sigma_w^2 / fan_in) for every conv (fan_in = c_in*k*k) and linear (fan_in = in_features) weight;
    BatchNorm weight 1, bias 0; every bias 0. Draws from torch's global RNG (the caller seeds)."""
    sigma_w = check_real("sigma_w", sigma_w, 0, above=True)
    for m in _unwrap(model).modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            m.weight.normal_(0.0, sigma_w / math.sqrt(m.weight[0].numel()))  # fan_in: c_in/groups*k*k, in_features
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            if m.affine:
                m.weight.fill_(1.0)
                m.bias.zero_()


def layer_names(model: nn.Module) -> list[str]:
    """Module names of the conv and linear layers, in module order (e.g. "prep.conv", ..., "head")."""
    return [n for n, m in _unwrap(model).named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def head_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The classifier head's weight and bias (not scale-invariant: no BatchNorm after it)."""
    head = _unwrap(model).head
    return [p for p in (head.weight, head.bias) if p is not None]
