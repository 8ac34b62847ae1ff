"""CIFAR-10 as the engine trains on it: `make_splits` → `Splits` (stratified, normalised device tensors; with
`full_test`, every test image of the source too), `augment_batch`, `batches` (the one place a minibatch order is
decided), `steps_per_epoch`; `load_cifar10` (`initmem.data.sources`) is re-exported."""

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from initmem.checks import check_int
from initmem.data.cifar10 import CIFAR10_CLASSES, Cifar10
from initmem.data.device import resolve_device
from initmem.data.imagefolder import default_cache_dir
from initmem.data.sources import load_cifar10, make_synthetic
from initmem.errors import ConfigError

__all__ = ["CIFAR10_CLASSES", "Cifar10", "Splits", "augment_batch", "batches", "channel_stats", "default_cache_dir",
           "load_cifar10", "make_splits", "make_synthetic", "steps_per_epoch", "stratified_indices"]


@dataclass(frozen=True, repr=False)
class Splits:
    """Train/validation/test tensors ready for training: float32, normalised by the train split's statistics."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    train_eval_idx: torch.Tensor | None  # positions in train_x of the fixed clean-train-accuracy subset; None: all
    mean: torch.Tensor  # per-channel mean of the train split, float32 [3] on the CPU, in [0, 1] pixel units
    std: torch.Tensor  # per-channel std (population) of the train split, same units
    source: str
    classes: tuple[str, ...] = CIFAR10_CLASSES
    full_test_x: torch.Tensor | None = None  # every test image of the source (make_splits' full_test), else None
    full_test_y: torch.Tensor | None = None

    def __repr__(self) -> str:
        n_eval = "all" if self.train_eval_idx is None else len(self.train_eval_idx)
        return (f"Splits(train={len(self.train_y)}, val={len(self.val_y)}, test={len(self.test_y)}, "
                f"train_eval={n_eval}, device={self.train_x.device}, source={self.source!r})")


def _allocate(counts: torch.Tensor, n: int) -> torch.Tensor:
    """Per-class sizes summing to n, proportional to `counts` by largest remainder (ties to the lower class)."""
    quota = counts.double() * n / counts.sum()
    k = quota.floor().long()
    order = torch.sort(-(quota - k), stable=True).indices
    k[order[: n - int(k.sum())]] += 1
    return k


def stratified_indices(labels: torch.Tensor, n: int, generator: torch.Generator | None) -> torch.Tensor:
    """`n` positions in `labels` drawn without replacement by `generator`, each class's share as in `labels`
    (`_allocate`), sorted ascending (CPU). ConfigError unless classes present <= n <= len(labels)."""
    labels = labels.cpu()
    counts = torch.bincount(labels)
    present = int((counts > 0).sum())
    check_int("n", n, present, len(labels), f" (stratified over {present} classes of {len(labels)} items)")
    k = _allocate(counts, n)
    perm = torch.randperm(len(labels), generator=generator)
    lab, order = torch.sort(labels[perm], stable=True)  # grouped by class, random order within a class
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(len(labels), device=labels.device) - starts[lab]
    return perm[order][rank < k[lab]].sort().values


def _generator(split_seed: int, stream: int) -> torch.Generator:
    # One independent stream per draw, so e.g. the validation split does not depend on n_train or n_test.
    digest = hashlib.sha256(f"initmem-split:{split_seed}:{stream}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def make_splits(data: Cifar10, n_val: int = 5000, n_train: int | None = None, n_test: int | None = None,
                split_seed: int = 0, device: str | torch.device = "cpu",
                train_eval_size: int | None = None, full_test: bool = False) -> Splits:
    """Stratified train/validation split by `split_seed`, stratified subsets (`n_train`, `n_test`, `train_eval_size` of
    the train split for clean train accuracy), all normalised by the train split's channel mean/std, on `device`;
    with `full_test`, every test image too (`full_test_x`/`_y`: the test tensors themselves when n_test is None)."""
    if not isinstance(data, Cifar10):
        raise ConfigError(f"data={type(data).__name__} is invalid: a Cifar10 from load_cifar10 is accepted")
    check_int("split_seed", split_seed, -(2**63), 2**63 - 1)
    c, n_all, n_test_all = data.num_classes, len(data.train_y), len(data.test_y)
    check_int("n_val", n_val, c, n_all - c, f" ({n_all} training images, {c} classes, >= {c} left to train)")
    val_idx = stratified_indices(data.train_y, n_val, _generator(split_seed, 0))
    keep = torch.ones(n_all, dtype=torch.bool, device=data.train_y.device)
    keep[val_idx] = False
    train_idx = keep.nonzero().squeeze(1)
    if n_train is not None:
        check_int("n_train", n_train, c, len(train_idx), f" (n_val + n_train <= {n_all} training images)")
        train_idx = train_idx[stratified_indices(data.train_y[train_idx], n_train, _generator(split_seed, 1))]
    test_idx = torch.arange(n_test_all, device=data.test_y.device)
    if n_test is not None:
        check_int("n_test", n_test, c, n_test_all, f" ({n_test_all} test images)")
        test_idx = stratified_indices(data.test_y, n_test, _generator(split_seed, 2))
    eval_idx = None
    if train_eval_size is not None:
        check_int("train_eval_size", train_eval_size, c, len(train_idx), f" (the train split has {len(train_idx)})")
        eval_idx = stratified_indices(data.train_y[train_idx], train_eval_size, _generator(split_seed, 3))
    dev = resolve_device(device)
    train_u8 = data.train_x[train_idx]
    mean, std = channel_stats(train_u8)
    m, s = (255 * mean).view(1, -1, 1, 1).to(dev), (255 * std).view(1, -1, 1, 1).to(dev)

    def prep(x: torch.Tensor) -> torch.Tensor:  # move as uint8 (4x less traffic), normalise on the device
        return x.to(dev).float().sub_(m).div_(s)

    test_x, test_y = prep(data.test_x[test_idx]), data.test_y[test_idx].to(dev)
    full_x, full_y = (None, None) if not full_test else (test_x, test_y) if n_test is None else (
        prep(data.test_x), data.test_y.to(dev))
    return Splits(
        train_x=prep(train_u8), train_y=data.train_y[train_idx].to(dev),
        val_x=prep(data.train_x[val_idx]), val_y=data.train_y[val_idx].to(dev), test_x=test_x, test_y=test_y,
        train_eval_idx=None if eval_idx is None else eval_idx.to(dev),
        mean=mean, std=std, source=data.source, classes=data.classes,
        full_test_x=full_x, full_test_y=full_y)


def channel_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and population std of uint8 images [N, C, H, W] in [0, 1] units, float32 [C] on the CPU:
    from a 256-bin histogram per channel in float64 (exact, faster than std_mean, the same on every device)."""
    hist = torch.stack([torch.bincount(x[:, c].reshape(-1), minlength=256) for c in range(x.shape[1])]).cpu().double()
    v = torch.arange(256, dtype=torch.float64, device=hist.device) / 255
    n = hist.sum(1)
    mean = (hist * v).sum(1) / n
    var = ((hist * (v - mean[:, None]) ** 2).sum(1) / n).clamp_min(0)
    return mean.float(), var.sqrt().float()


def augment_batch(x: torch.Tensor, generator: torch.Generator | None, crop_pad: int = 4,
                  flip: bool = True) -> torch.Tensor:
    """Random crop after `crop_pad` zero pixels (the mean colour) and random flip per image of a normalised [B, C, H, W]
    batch, as two gathers; random numbers drawn on the generator's device in a fixed order (offsets, flips)."""
    if not isinstance(x, torch.Tensor) or x.ndim != 4:
        raise ConfigError(f"x={getattr(x, 'shape', type(x).__name__)} is invalid: a [B, C, H, W] tensor is accepted")
    check_int("crop_pad", crop_pad, 0, min(x.shape[2], x.shape[3]))
    b, c, h, w = x.shape
    gdev = generator.device if generator is not None else torch.device("cpu")
    shift = torch.randint(0, 2 * crop_pad + 1, (2, b), generator=generator, device=gdev).to(x.device)
    rows = torch.arange(h, device=x.device) + shift[0, :, None]  # [B, H] rows of the padded image
    cols = torch.arange(w, device=x.device).expand(b, w)
    if flip:
        flips = (torch.rand(b, generator=generator, device=gdev) < 0.5).to(x.device)
        cols = torch.where(flips[:, None], w - 1 - cols, cols)
    cols = cols + shift[1, :, None]
    xp = F.pad(x, (crop_pad,) * 4) if crop_pad else x
    xp = xp.gather(2, rows[:, None, :, None].expand(b, c, h, xp.shape[3]))
    return xp.gather(3, cols[:, None, None, :].expand(b, c, h, w))


def batches(n: int, batch_size: int, generator: torch.Generator | None, drop_last: bool = False,
            device: str | torch.device | None = None) -> Iterator[torch.Tensor]:
    """One epoch's minibatch indices over `n` items from `torch.randperm(n, generator=generator)`, the one place the
    order is decided; the last partial batch kept unless `drop_last`. `device`: theirs (default: the generator's)."""
    check_int("n", n, 1, 2**62)
    check_int("batch_size", batch_size, 1, 2**62)
    gdev = generator.device if generator is not None else torch.device("cpu")
    perm = torch.randperm(n, generator=generator, device=gdev)
    if device is not None:
        perm = perm.to(resolve_device(device))
    return (perm[i : i + batch_size] for i in range(0, n - n % batch_size if drop_last else n, batch_size))


def steps_per_epoch(n: int, batch_size: int, drop_last: bool = False) -> int:
    """Number of batches `batches(n, batch_size, ..., drop_last)` yields."""
    return n // batch_size if drop_last else math.ceil(n / batch_size)
