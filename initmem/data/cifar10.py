"""CIFAR-10 as the readers in `initmem.data.sources` and `initmem.data.imagefolder` return it: `Cifar10` (uint8 CPU
tensors and the class names) and `check_dataset`, the one check every source's output passes before it is used."""

from dataclasses import dataclass

import torch

from initmem.config import NUM_CLASSES
from initmem.errors import DataError

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
IMAGE_SHAPE = (3, 32, 32)


@dataclass(frozen=True, repr=False)
class Cifar10:
    """The whole dataset on the CPU: images uint8 [N, 3, 32, 32], labels int64 [N]."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    classes: tuple[str, ...]
    source: str  # which source was used, e.g. "imagefolder-tar:/path/cifar10-jpeg.tar.gz"
    content_hash: str | None = None  # sha256 of the archive (or of a folder's listing); None for other sources

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __repr__(self) -> str:
        return (f"Cifar10(train={len(self.train_y)}, test={len(self.test_y)}, classes={len(self.classes)}, "
                f"source={self.source!r})")


def check_dataset(d: Cifar10, where: str) -> Cifar10:
    """Shapes, dtypes and label ranges; DataError naming `where` on the first problem."""
    if not d.classes:
        raise DataError(f"{where}: no classes")
    for split, x, y in (("train", d.train_x, d.train_y), ("test", d.test_x, d.test_y)):
        if not (isinstance(x, torch.Tensor) and x.dtype == torch.uint8 and tuple(x.shape[1:]) == IMAGE_SHAPE):
            got = f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise DataError(f"{where}: {split} images are {got}, expected uint8 [N, 3, 32, 32]")
        if not isinstance(y, torch.Tensor) or y.dtype != torch.int64 or y.shape != (len(x),):
            got = f"{y.dtype} {tuple(y.shape)}" if isinstance(y, torch.Tensor) else type(y).__name__
            raise DataError(f"{where}: {split} labels are {got}, expected int64 [{len(x)}]")
        if len(y) == 0:
            raise DataError(f"{where}: the {split} split is empty")
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi >= len(d.classes):
            raise DataError(f"{where}: {split} labels span [{lo}, {hi}], outside [0, {len(d.classes) - 1}] "
                            f"for {len(d.classes)} classes")
    if len(d.classes) != NUM_CLASSES:
        raise DataError(f"{where}: {len(d.classes)} classes {list(d.classes)}, expected {NUM_CLASSES} (CIFAR-10)")
    return d
