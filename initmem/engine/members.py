"""A population's members: K networks differing only in sigma_w and seed, trained by one step. `population(nets)` is
a `PlainPopulation` (K = 1) or a `GroupedPopulation`: member 0's network by module surgery (layer names kept), every
conv with groups=K, BatchNorm K*C channels, the head a batched matmul; members share no arithmetic, so a NaN stays
in its member. Not torch.func's vmap: slower here (docs/experiments/performance/, docs/performance.md)."""

import contextlib
import copy
import ctypes
import functools
import os
import platform

import torch
import torch.nn.functional as F
from torch import nn

from initmem.engine import models
from initmem.errors import ConfigError

_CHANNELWISE = (nn.MaxPool2d, nn.Identity, nn.ReLU, models.SpatialMax, models.SpatialMean)


class StemConv(nn.Conv2d):
    """The first conv, weight [K*c_out, 3, k, k]: groups=1 on a shared 3-channel input, groups=K on 3K channels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups = x.shape[1] // self.weight.shape[1]
        return F.conv2d(x, self.weight, None, self.stride, self.padding, self.dilation, groups)


class GroupedHead(nn.Module):
    """K linear heads: [b, K*C] -> [b, K, out] with weight [K, out, C] and bias [K, out]."""

    def __init__(self, members: int, in_features: int, out_features: int, device: torch.device | None = None):
        super().__init__()
        self.members = members
        self.weight = nn.Parameter(torch.empty(members, out_features, in_features, device=device))
        self.bias = nn.Parameter(torch.empty(members, out_features, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bkc,koc->bko", x.reshape(len(x), self.members, -1), self.weight) + self.bias


class GroupedShortcutA(nn.Module):
    """Option-A shortcut per member: subsample, zero-pad each member's channel group from c_in to c_out."""

    def __init__(self, members: int, stride: int, pad_lo: int, pad_hi: int):
        super().__init__()
        self.members, self.stride, self.pad_lo, self.pad_hi = members, stride, pad_lo, pad_hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, ::self.stride, ::self.stride]
        b, _, h, w = x.shape
        return F.pad(x.reshape(b, self.members, -1, h, w), (0, 0, 0, 0, self.pad_lo, self.pad_hi)).reshape(b, -1, h, w)


def _grouped_leaf(m: nn.Module, k: int, arch: str, name: str, stem: bool, dev: torch.device) -> nn.Module:
    """The grouped form of leaf `m` (K members), allocated on `dev` (the members' device)."""
    if isinstance(m, nn.Conv2d):
        if m.groups != 1 or m.bias is not None:
            raise ConfigError(f"arch={arch!r} is not supported by grouped populations: layer {name} is a grouped or "
                              "biased conv; train its runs one by one")
        cls = StemConv if stem else nn.Conv2d
        return torch.nn.utils.skip_init(cls, m.in_channels * k, m.out_channels * k, m.kernel_size, device=dev,
                                        stride=m.stride, padding=m.padding, dilation=m.dilation, groups=k, bias=False)
    if isinstance(m, nn.BatchNorm2d):
        return torch.nn.utils.skip_init(nn.BatchNorm2d, m.num_features * k, device=dev, eps=m.eps,
                                        momentum=m.momentum, affine=m.affine,
                                        track_running_stats=m.track_running_stats)
    if isinstance(m, nn.Linear) and name == "head":
        return GroupedHead(k, m.in_features, m.out_features, device=dev)
    if isinstance(m, models.ShortcutA):
        return GroupedShortcutA(k, m.stride, m.pad_lo, m.pad_hi)
    if isinstance(m, _CHANNELWISE):
        return copy.deepcopy(m)
    raise ConfigError(f"arch={arch!r} is not supported by grouped populations: layer {name} "
                      f"({type(m).__name__}) has no grouped form; train its runs one by one")


@torch.no_grad()
def build_grouped(members: list[nn.Module], arch: str = "?") -> nn.Module:
    """`members` (one architecture) as channel groups of one network, weights and buffers copied; layer names kept."""
    k, template = len(members), members[0]
    dev = next(template.parameters()).device  # every grouped tensor is made where the members live
    grouped = copy.deepcopy(template)  # keeps the container classes, so their forward() runs unchanged
    first = models.layer_names(template)[0]
    for name, m in template.named_modules():
        if name and not list(m.children()):
            parent, _, child = name.rpartition(".")
            setattr(grouped.get_submodule(parent), child, _grouped_leaf(m, k, arch, name, name == first, dev))
    sources = [dict(m.state_dict()) for m in members]
    for key, target in grouped.state_dict().items():
        parts = [s[key] for s in sources]  # a scalar buffer (num_batches_tracked) is the same in every member
        target.copy_(torch.stack(parts).reshape(target.shape) if target.numel() == k * parts[0].numel() else parts[0])
    return grouped


def member_state_dict(grouped: nn.Module, template: nn.Module, member: int) -> dict[str, torch.Tensor]:
    """Member `member` of `grouped` as a state_dict of the plain network `template`."""
    shapes = {key: t.shape for key, t in template.state_dict().items()}
    return {key: (t.reshape(-1, *shapes[key])[member] if t.ndim else t).clone()
            for key, t in grouped.state_dict().items()}


class PlainPopulation:
    """One member: the plain network. Outputs [b, C]; per-member quantities are length-1 tensors."""

    k = 1

    def __init__(self, model: nn.Module, layers: list[str] | None = None):
        self.model = model
        self.layers = layers or models.layer_names(model)  # conv/linear layers, in module order
        self.weights = [model.get_submodule(n).weight for n in self.layers]

    def inputs(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return xs[0]

    def losses(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        return F.cross_entropy(out, y, reduction=reduction)[None]

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (out.argmax(1) == y).sum()[None]

    def silence(self, optimizer: torch.optim.Optimizer, member: int) -> None:
        """Nothing to do: a diverged single run stops."""


class GroupedPopulation(PlainPopulation):
    """K members as channel groups of one network (see the module docstring). Outputs [b, K, C]."""

    def __init__(self, nets: list[nn.Module], same_input: bool):
        super().__init__(build_grouped(nets), models.layer_names(nets[0]))  # GroupedHead is the member's Linear
        self.k, self.same_input = len(nets), same_input

    def inputs(self, xs: list[torch.Tensor]) -> torch.Tensor:
        # one shared batch: the stem runs with groups=1; otherwise member j's images in channels 3j..3j+2
        return xs[0] if self.same_input else torch.cat(xs, 1)

    def _labels(self, y: torch.Tensor) -> torch.Tensor:
        return y[:, None].expand(-1, self.k) if y.ndim == 1 else y

    def losses(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        losses = F.cross_entropy(out.transpose(1, 2), self._labels(y), reduction="none")  # [b, K]
        return losses.mean(0) if reduction == "mean" else losses.sum(0)

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (out.argmax(2) == self._labels(y)).sum(0)

    @torch.no_grad()
    def silence(self, optimizer: torch.optim.Optimizer, member: int) -> None:
        """Zero `member`'s slice of every parameter, BatchNorm stat and optimiser state: finite, inert."""
        for key, t in self.model.state_dict().items():
            if t.ndim:
                t.unflatten(0, (self.k, -1))[member] = 1.0 if key.endswith("running_var") else 0.0
        for p, state in optimizer.state.items():
            for v in state.values():
                if isinstance(v, torch.Tensor) and v.shape == p.shape:
                    v.unflatten(0, (self.k, -1))[member] = 0.0


def member_view(t: torch.Tensor, k: int) -> torch.Tensor:
    """[K, -1]: member j's part of a (grouped) parameter in row j (grouped convs split output channels in order)."""
    return t.reshape(k, -1)


def population(nets: list[nn.Module], same_input: bool = True) -> PlainPopulation:
    """The population of `nets` (same architecture, already initialised): plain for one, grouped for several."""
    return PlainPopulation(nets[0]) if len(nets) == 1 else GroupedPopulation(nets, same_input)


@functools.cache
def tune_malloc() -> bool:
    """Make glibc keep freed memory (M_MMAP_MAX=0, M_TRIM_THRESHOLD 2 GiB), else a population's large activations are
    mapped anew every step (docs/performance.md); once, off under `INITMEM_MALLOC=default` or off glibc. Whether on."""
    ok = False
    if os.environ.get("INITMEM_MALLOC", "") != "default" and platform.libc_ver()[0] == "glibc":
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6")
            ok = libc.mallopt(-4, 0) == 1 and libc.mallopt(-1, 2**31 - 1) == 1  # M_MMAP_MAX, M_TRIM_THRESHOLD
    return ok


