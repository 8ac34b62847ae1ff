"""CIFAR-10 from disk as uint8 CPU tensors, every source `load_cifar10` reads: `torchvision`
(`cifar-10-batches-py`, read with numpy), `imagefolder` (`initmem.data.imagefolder`), `synthetic` (tests, smoke
runs), `auto` (the first real)."""

import os
import pickle
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from initmem.checks import check_int
from initmem.config import NUM_CLASSES, SOURCES
from initmem.data.cifar10 import CIFAR10_CLASSES, IMAGE_SHAPE, Cifar10, check_dataset
from initmem.data.imagefolder import ARCHIVE_EXTS, archives, load_imagefolder
from initmem.errors import ConfigError, DataError


def _unpickle(path: Path) -> dict:
    if not path.is_file():
        raise DataError(f"CIFAR-10 batch file {path} is missing")
    try:
        with open(path, "rb") as f:
            d = pickle.load(f, encoding="bytes")  # the official python batches (trusted input, as torchvision does)
    except Exception as exc:  # any unpickling failure means a corrupt file
        raise DataError(f"CIFAR-10 batch file {path} is unreadable: {type(exc).__name__}: {exc}") from exc
    if not isinstance(d, dict):
        raise DataError(f"CIFAR-10 batch file {path} holds a {type(d).__name__}, expected a dict")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in d.items()}


def _read_batches(folder: Path, names: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for name in names:
        d = _unpickle(folder / name)
        if "data" not in d or "labels" not in d:
            raise DataError(f"CIFAR-10 batch file {folder / name} lacks 'data' or 'labels' (keys: {sorted(d)})")
        x, y = np.asarray(d["data"]), np.asarray(d["labels"])
        if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072 or y.shape != (len(x),):
            raise DataError(f"CIFAR-10 batch file {folder / name}: data {x.dtype} {x.shape} and labels {y.shape}, "
                            f"expected uint8 [N, 3072] and [N]")
        xs.append(torch.from_numpy(x.reshape(-1, *IMAGE_SHAPE).copy()))
        ys.append(torch.from_numpy(y.astype(np.int64)))
    return torch.cat(xs), torch.cat(ys)


def _load_torchvision(root: Path, download: bool) -> Cifar10:
    folder = root if root.name == "cifar-10-batches-py" else root / "cifar-10-batches-py"
    if root.name.endswith(ARCHIVE_EXTS):  # an image archive is read by the imagefolder source, never downloaded
        raise DataError(f"{root} is " + ("an image archive" if root.is_file() else "an archive path that does not "
                        "exist") + ", not a torchvision cifar-10-batches-py folder: --data auto (or imagefolder) "
                        "--data-root <an existing cifar10 .tar.gz> reads an archive")
    if not folder.is_dir():
        if not download:
            raise DataError(f"torchvision CIFAR-10 folder {folder} not found: `initmem data --download` puts it into "
                            f"data/ (library: download=True), or use an image archive: --data auto --data-root "
                            f"<cifar10 .tar.gz>")
        try:
            import torchvision

            torchvision.datasets.CIFAR10(str(folder.parent), train=True, download=True)
        except Exception as exc:  # network, checksum, disk: all mean "could not get the data"
            raise DataError(f"downloading CIFAR-10 into {folder.parent} failed: {type(exc).__name__}: {exc}") from exc
    meta = _unpickle(folder / "batches.meta")
    names = meta.get("label_names")
    if not isinstance(names, list | tuple):
        raise DataError(f"CIFAR-10 meta file {folder / 'batches.meta'} lacks 'label_names'")
    classes = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)
    train_x, train_y = _read_batches(folder, [f"data_batch_{i}" for i in range(1, 6)])
    test_x, test_y = _read_batches(folder, ["test_batch"])
    return check_dataset(Cifar10(train_x, train_y, test_x, test_y, classes, f"torchvision:{folder}"), str(folder))


def make_synthetic(n_train: int = 2000, n_test: int = 500, seed: int = 0) -> Cifar10:
    """Deterministic class-structured 32x32 images for tests (per class a low-frequency colour pattern, plus contrast,
    distractor, noise, shift; balanced labels): a ResNet-9 of width 0.125 reaches ~50-70 % in 2 epochs."""
    if isinstance(n_train, bool) or not isinstance(n_train, int) or not NUM_CLASSES <= n_train <= 10**6:
        raise ConfigError(f"synthetic data of {n_train!r} training images (TrainConfig's n_train + n_val) is invalid: "
                          f"an integer in [{NUM_CLASSES}, {10**6}] is accepted (n_train + n_val <= {10**6})")
    check_int("n_test", n_test, NUM_CLASSES, 10**6, " (synthetic test size)")
    g = torch.Generator().manual_seed(seed)

    def lowfreq(n: int) -> torch.Tensor:  # unit-variance smooth colour fields [n, 3, 32, 32]
        noise = torch.randn(n, 3, 4, 4, generator=g)  # cpu: a dataset is uint8 CPU tensors; make_splits moves it
        f = F.interpolate(noise, size=(32, 32), mode="bicubic", align_corners=False)
        return f / f.std(dim=(1, 2, 3), keepdim=True)

    protos = lowfreq(NUM_CLASSES)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % NUM_CLASSES  # cpu: a dataset is uint8 CPU tensors; make_splits moves it
        contrast = torch.empty(n, 1, 1, 1).uniform_(0.6, 1.4, generator=g)  # cpu
        x = 128 + 35 * contrast * protos[y] + 40 * lowfreq(n) + 30 * torch.randn(n, 3, 32, 32, generator=g)  # cpu
        shift = torch.randint(-3, 4, (2, n, 1), generator=g)  # cpu; circular shift: the pattern's position varies
        x = x.gather(2, ((torch.arange(32) - shift[0]) % 32)[:, None, :, None].expand(n, 3, 32, 32))  # cpu
        x = x.gather(3, ((torch.arange(32) - shift[1]) % 32)[:, None, None, :].expand(n, 3, 32, 32))  # cpu
        return x.round().clamp_(0, 255).to(torch.uint8), y

    train_x, train_y = draw(n_train)
    test_x, test_y = draw(n_test)
    return Cifar10(train_x, train_y, test_x, test_y, CIFAR10_CLASSES, f"synthetic:{n_train}+{n_test}:seed{seed}")


def find_source(base: Path, tried: list[str]) -> tuple[str, Path] | None:
    """The first real source under `base` (`cifar-10-batches-py/`, `train/`+`test/`, `base` as a .tar.gz, one
    `*.tar.gz` in it); every path looked at is appended to `tried`."""
    tried.append(str(base / "cifar-10-batches-py"))
    if (base / "cifar-10-batches-py").is_dir():
        return "torchvision", base
    tried.append(f"{base / 'train'} + {base / 'test'}")
    if (base / "train").is_dir() and (base / "test").is_dir():
        return "imagefolder", base
    tried.append(f"{base} (as .tar.gz)")
    if base.is_file() and base.name.endswith(ARCHIVE_EXTS):
        return "imagefolder", base
    tried.append(str(base / "*.tar.gz"))
    if base.is_dir() and (found := archives(base)):
        if len(found) > 1:
            raise DataError(f"several archives in {base}: {[a.name for a in found]}; pass the one to use as root")
        return "imagefolder", found[0]
    return None


def load_cifar10(root: str | Path = "data", source: str = "auto", download: bool = False,
                 cache_dir: str | Path | None = None, progress: bool = False,
                 synthetic_sizes: tuple[int, int] = (2000, 500)) -> Cifar10:
    """CIFAR-10 from `source` (SOURCES); `auto` looks under `root`, then `$INITMEM_DATA` (`find_source`), then
    downloads if `download`; DataError when nothing is found. `synthetic_sizes`: the synthetic source's (train,
    test) sizes."""
    if source not in SOURCES:
        raise ConfigError(f"source={source!r} is invalid: one of {SOURCES} is accepted")
    if source == "synthetic":
        if not isinstance(synthetic_sizes, tuple | list) or len(synthetic_sizes) != 2:
            raise ConfigError(f"synthetic_sizes={synthetic_sizes!r} is invalid: a pair (n_train, n_test) is accepted")
        return make_synthetic(*synthetic_sizes)
    root = Path(root).expanduser()
    if source == "torchvision":
        return _load_torchvision(root, download)
    if source == "imagefolder":
        return load_imagefolder(root, cache_dir, progress)
    tried: list[str] = []
    env = os.environ.get("INITMEM_DATA")
    for base in [root] + ([Path(env).expanduser()] if env else []):
        if (hit := find_source(base, tried)) is not None:
            kind, path = hit
            return _load_torchvision(path, False) if kind == "torchvision" else load_imagefolder(path, cache_dir,
                                                                                                 progress)
    if root.name.endswith(ARCHIVE_EXTS) and not root.exists():  # an archive was meant: say that first
        raise DataError(f"CIFAR-10 archive {root} does not exist: --data-root <an existing .tar.gz of train/<class>/* "
                        "and test/<class>/*> (or a folder holding one) is accepted; `initmem data --from PATH` puts "
                        "the study's archive into data/")
    if download:
        return _load_torchvision(root, True)
    raise DataError(f"no CIFAR-10 data found; tried: {'; '.join(tried)}"
                    f"{'' if env else ' (INITMEM_DATA is unset)'}. `initmem data` puts it into data/ (--from PATH "
                    f"or --download), or set INITMEM_DATA, or use source='synthetic' (tests only)")
