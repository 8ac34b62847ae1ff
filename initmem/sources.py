"""CIFAR-10 from disk: every source `load_cifar10` reads, as uint8 tensors on the CPU (`initmem.data` splits them).

Sources (`load_cifar10(source=...)`):
- `torchvision`: `root/cifar-10-batches-py` (the official pickled batches), read directly with numpy; with
  `download=True` a missing copy is fetched through `torchvision.datasets.CIFAR10`.
- `imagefolder`: `root/{train,test}/<class>/*.{png,jpg,jpeg}`, or a `.tar.gz` of such a tree (`root` itself or the
  one archive inside `root`; the tree may sit under one top-level folder). Sorted class folders give the label
  order. Decoded once and cached as a tensor file keyed by the content hash, so later loads take about a second.
- `synthetic`: small, deterministic, class-structured images made in code; for tests and smoke runs only.
- `auto`: the first real source that exists under `root`, then under `$INITMEM_DATA`; never `synthetic`.
The first load of an archive decodes it and writes the cache; later loads read the cache (timings:
docs/performance.md).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import pickle
import tarfile
import time
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import torch
import torch.nn.functional as F

from .config import NUM_CLASSES, SOURCES
from .errors import ConfigError, DataError
from .files import ensure_writable

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
IMAGE_SHAPE = (3, 32, 32)
IMAGE_EXTS = (".png", ".jpg", ".jpeg")
ARCHIVE_EXTS = (".tar.gz", ".tgz")
_CACHE_VERSION = 1  # bump when the decoded layout changes: old cache files are then simply not found


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


# ------------------------------------------------------------------------------------------------------ checks
def _check_dataset(d: Cifar10, where: str) -> Cifar10:
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


def _check_int(name: str, value: object, lo: int, hi: int, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{name}={value!r} is invalid: an int in [{lo}, {hi}] is accepted{why}")
    return value


# --------------------------------------------------------------------------------------------------- torchvision
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
    if not folder.is_dir():
        if not download:
            raise DataError(f"torchvision CIFAR-10 folder {folder} not found: download it once with `python -c "
                            f"\"from initmem.data import load_cifar10; load_cifar10('{folder.parent}', "
                            f"download=True)\"` (README), or use an image archive: --data auto --data-root "
                            f"<cifar10 .tar.gz> (library: download=True)")
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
    return _check_dataset(Cifar10(train_x, train_y, test_x, test_y, classes, f"torchvision:{folder}"), str(folder))


# --------------------------------------------------------------------------------------------------- imagefolder
# An entry is (split, class, file name, bytes); `origin` names the file in error messages.
def _decode_into(out: np.ndarray, data: bytes, origin: str) -> None:
    """One image file → `out` (uint8 [32, 32, 3]) with PIL, in this process: paid once per archive (cached). A fork
    pool gained nothing on 2 shared cores and forking a process that holds torch's thread pools is unsafe;
    torchvision.io's decoders are deprecated since 0.29."""
    try:  # only image folders need Pillow: a stock PyTorch image may lack it
        from PIL import Image
    except ImportError:
        raise DataError("reading an image-folder source needs Pillow (pip install pillow); torchvision's "
                        "cifar-10-batches-py folder needs only numpy") from None
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.size != (32, 32):  # (W, H) from the header, before the pixels are decoded
                raise DataError(f"image {origin} is {im.size[0]}x{im.size[1]} (WxH), expected 32x32 RGB")
            out[...] = np.asarray(im if im.mode == "RGB" else im.convert("RGB"))
    except DataError:
        raise
    except Exception as exc:  # PIL raises many types for broken files
        raise DataError(f"image {origin} is unreadable: {type(exc).__name__}: {exc}") from exc


def _assemble(entries: list[tuple[str, str, str, bytes]], origin: str, progress: bool) -> dict:
    """Sorted class folders → labels; images in (class, file name) order so the dataset order is canonical."""
    by_split: dict[str, list[tuple[str, str, bytes]]] = {"train": [], "test": []}
    for split, cls, name, data in entries:
        by_split[split].append((cls, name, data))
    classes = {s: sorted({c for c, _, _ in v}) for s, v in by_split.items()}
    if not classes["train"] or not classes["test"]:
        raise DataError(f"{origin}: no images under train/<class>/ and test/<class>/ "
                        f"(found {len(by_split['train'])} train, {len(by_split['test'])} test images)")
    if classes["train"] != classes["test"]:
        raise DataError(f"{origin}: train classes {classes['train']} differ from test classes {classes['test']}")
    if len(classes["train"]) != NUM_CLASSES:
        raise DataError(f"{origin}: {len(classes['train'])} class folders {classes['train']}, "
                        f"expected {NUM_CLASSES} (CIFAR-10)")
    label = {c: i for i, c in enumerate(classes["train"])}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(entries), desc=f"decoding {Path(origin).name}", unit="img", mininterval=1.0)
    out: dict = {"classes": classes["train"]}
    for split, items in by_split.items():
        items.sort(key=lambda t: (label[t[0]], t[1]))
        x = np.empty((len(items), 32, 32, 3), dtype=np.uint8)
        for i, (cls, name, data) in enumerate(items):
            _decode_into(x[i], data, f"{split}/{cls}/{name} in {origin}")
            if bar is not None and i % 1000 == 999:
                bar.update(1000)
        out[f"{split}_x"] = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
        out[f"{split}_y"] = torch.tensor([label[c] for c, _, _ in items], dtype=torch.int64)
    if bar is not None:
        bar.close()
    return out


def _entry_key(parts: tuple[str, ...]) -> tuple[str, str, str, str] | None:
    """(top, split, class, file) for an image at `[top/]split/class/file`, else None."""
    if any(p.startswith(".") for p in parts) or not parts[-1].lower().endswith(IMAGE_EXTS):
        return None
    if len(parts) == 3 and parts[0] in ("train", "test"):
        return ("", *parts)
    if len(parts) == 4 and parts[1] in ("train", "test"):
        return parts  # type: ignore[return-value]
    return None


def _read_tar(path: Path) -> list[tuple[str, str, str, bytes]]:
    found: dict[str, list[tuple[str, str, str, bytes]]] = {}
    try:
        # Streaming: one pass over the gzip, no random access needed. tarfile's own "r|gz" never reads the gzip
        # trailer, so an archive cut inside its last bytes would load as if whole: drain the stream to make gzip
        # check its length and CRC.
        with gzip.open(path) as gz, tarfile.open(fileobj=gz, mode="r|") as tf:
            for m in tf:
                key = _entry_key(PurePosixPath(m.name).parts) if m.isfile() else None
                if key is not None:
                    found.setdefault(key[0], []).append((key[1], key[2], key[3], tf.extractfile(m).read()))
            while gz.read(1 << 20):
                pass
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise DataError(f"archive {path} is corrupt or truncated: {type(exc).__name__}: {exc}") from exc
    if len(found) > 1:
        raise DataError(f"archive {path} holds several image trees (top-level folders {sorted(found)}); expected one")
    return next(iter(found.values()), [])


def _scan_folder(root: Path) -> list[tuple[str, str, str, Path]]:
    files = []
    for split in ("train", "test"):
        for cdir in sorted((root / split).iterdir()):
            if cdir.is_dir() and not cdir.name.startswith("."):
                files += [(split, cdir.name, f.name, f) for f in sorted(cdir.iterdir())
                          if f.is_file() and _entry_key((split, cdir.name, f.name)) is not None]
    return files


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def default_cache_dir() -> Path:
    """`$INITMEM_CACHE`, else `~/.cache/initmem`."""
    return Path(os.environ.get("INITMEM_CACHE") or Path.home() / ".cache" / "initmem").expanduser()


def _load_cache(path: Path, key: str) -> Cifar10 | None:
    if not path.is_file():
        return None
    try:
        d = torch.load(path, map_location="cpu", weights_only=True)
        if d.get("version") != _CACHE_VERSION or d.get("key") != key:
            raise DataError(f"version/key {d.get('version')}/{d.get('key')} do not match")
        data = Cifar10(d["train_x"], d["train_y"], d["test_x"], d["test_y"], tuple(d["classes"]), d["source"], key)
        return _check_dataset(data, str(path))
    except Exception as exc:  # torch.load raises many types on a damaged file; all mean "rebuild"
        warnings.warn(f"CIFAR-10 cache {path} is corrupt ({type(exc).__name__}: {exc}); rebuilding it", stacklevel=3)
        return None


def _save_cache(path: Path, key: str, data: Cifar10) -> None:
    d = {"version": _CACHE_VERSION, "key": key, "classes": list(data.classes), "source": data.source,
         "train_x": data.train_x, "train_y": data.train_y, "test_x": data.test_x, "test_y": data.test_y}
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(d, tmp)
        os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one, never half
    except (OSError, RuntimeError) as exc:  # e.g. the disk filled up after the check: only costs the decode next time
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        warnings.warn(f"could not write the CIFAR-10 cache {path}: {exc}", stacklevel=3)


def _check_cache_dir(cache: Path, from_env: bool) -> None:
    """DataError (one line) unless `cache` is a folder this process can write, checked before decoding: a cache
    that is a file or read-only is a mistake of the setup, better fixed once than paid for on every load."""
    what = f"INITMEM_CACHE={str(cache)!r}" if from_env else f"cache_dir={str(cache)!r}"
    fix = "set INITMEM_CACHE to a writable folder, or unset it for ~/.cache/initmem" if from_env else \
        "a writable folder is accepted"
    if cache.exists() and not cache.is_dir():
        raise DataError(f"{what} is a file, not a folder: {fix}")
    try:
        ensure_writable(cache)
    except OSError as exc:
        raise DataError(f"{what} is not a writable folder ({exc.strerror or exc}): {fix}") from None


def _load_imagefolder(root: Path, cache_dir: Path | None, progress: bool) -> Cifar10:
    """`root`: a tree with train/ and test/, a .tar.gz, or a folder with exactly one .tar.gz."""
    if root.is_dir() and (root / "train").is_dir() and (root / "test").is_dir():
        kind, path = "imagefolder", root
    elif root.is_file() and root.name.endswith(ARCHIVE_EXTS):
        kind, path = "imagefolder-tar", root
    elif root.is_dir() and len(archives := _archives(root)) == 1:
        kind, path = "imagefolder-tar", archives[0]
    else:
        n = len(_archives(root)) if root.is_dir() else 0
        raise DataError(f"image-folder data not found at {root}: expected {root}/train + {root}/test, a .tar.gz "
                        f"file, or a folder with exactly one .tar.gz (found {n})")
    path = path.resolve()
    source = f"{kind}:{path}"
    if kind == "imagefolder":
        files = _scan_folder(path)
        listing = "\n".join(f"{s}/{c}/{n}\t{(st := f.stat()).st_size}\t{st.st_mtime_ns}" for s, c, n, f in files)
        key = hashlib.sha256(listing.encode()).hexdigest()
    else:
        key = _sha256_file(path)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cache_file = cache / f"cifar10-{kind}-{key[:24]}-v{_CACHE_VERSION}.pt"
    if (hit := _load_cache(cache_file, key)) is not None:
        return Cifar10(hit.train_x, hit.train_y, hit.test_x, hit.test_y, hit.classes, source, key)
    _check_cache_dir(cache, from_env=cache_dir is None and bool(os.environ.get("INITMEM_CACHE")))
    t0 = time.perf_counter()
    entries = ([(s, c, n, f.read_bytes()) for s, c, n, f in files] if kind == "imagefolder" else _read_tar(path))
    d = _assemble(entries, str(path), progress)
    data = _check_dataset(Cifar10(d["train_x"], d["train_y"], d["test_x"], d["test_y"], tuple(d["classes"]),
                                  source, key), str(path))
    if progress:
        print(f"decoded {len(entries)} images from {path} in {time.perf_counter() - t0:.1f} s; caching to {cache_file}")
    _save_cache(cache_file, key, data)
    return data


def _archives(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(ARCHIVE_EXTS))


# ----------------------------------------------------------------------------------------------------- synthetic
def make_synthetic(n_train: int = 2000, n_test: int = 500, seed: int = 0) -> Cifar10:
    """Deterministic class-structured 32x32 images for tests: each class is a fixed random low-frequency colour
    pattern (a 4x4 grid upsampled) at a random contrast, plus a per-image low-frequency distractor, pixel noise and
    a random circular shift of up to 3 pixels. Labels cycle 0..9, so classes are balanced. Measured: a
    nearest-class-mean classifier scores ~98 % on the test part; a ResNet-9 of width 0.125 trained 2 epochs with
    SGD (lr 0.01, batch 64) reaches ~50-70 % test accuracy depending on sigma_w (chance: 10 %)."""
    _check_int("n_train", n_train, NUM_CLASSES, 10**6, " (synthetic train size)")
    _check_int("n_test", n_test, NUM_CLASSES, 10**6, " (synthetic test size)")
    g = torch.Generator().manual_seed(seed)

    def lowfreq(n: int) -> torch.Tensor:  # unit-variance smooth colour fields [n, 3, 32, 32]
        f = F.interpolate(torch.randn(n, 3, 4, 4, generator=g), size=(32, 32), mode="bicubic", align_corners=False)
        return f / f.std(dim=(1, 2, 3), keepdim=True)

    protos = lowfreq(NUM_CLASSES)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % NUM_CLASSES
        contrast = torch.empty(n, 1, 1, 1).uniform_(0.6, 1.4, generator=g)
        x = 128 + 35 * contrast * protos[y] + 40 * lowfreq(n) + 30 * torch.randn(n, 3, 32, 32, generator=g)
        shift = torch.randint(-3, 4, (2, n, 1), generator=g)  # circular shift: the pattern's position varies
        x = x.gather(2, ((torch.arange(32) - shift[0]) % 32)[:, None, :, None].expand(n, 3, 32, 32))
        x = x.gather(3, ((torch.arange(32) - shift[1]) % 32)[:, None, None, :].expand(n, 3, 32, 32))
        return x.round().clamp_(0, 255).to(torch.uint8), y

    train_x, train_y = draw(n_train)
    test_x, test_y = draw(n_test)
    return Cifar10(train_x, train_y, test_x, test_y, CIFAR10_CLASSES, f"synthetic:{n_train}+{n_test}:seed{seed}")


# ------------------------------------------------------------------------------------------------------- loading
def _find(base: Path, tried: list[str]) -> tuple[str, Path] | None:
    """The first real source under `base`, in the documented order; appends every path looked at to `tried`."""
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
    if base.is_dir() and (archives := _archives(base)):
        if len(archives) > 1:
            raise DataError(f"several archives in {base}: {[a.name for a in archives]}; pass the one to use as root")
        return "imagefolder", archives[0]
    return None


def load_cifar10(root: str | Path = "data", source: str = "auto", download: bool = False,
                 cache_dir: str | Path | None = None, progress: bool = False,
                 synthetic_sizes: tuple[int, int] = (2000, 500)) -> Cifar10:
    """Load CIFAR-10 as CPU uint8 tensors from `source` (one of SOURCES; see the module docstring).

    `auto` tries, in order, under `root` and then under `$INITMEM_DATA`: `cifar-10-batches-py/`, `train/`+`test/`,
    the path itself as a .tar.gz, `*.tar.gz` inside it; with `download=True` it finally downloads into
    `root/cifar-10-batches-py`. `cache_dir` (image folders only): default `$INITMEM_CACHE` or `~/.cache/initmem`.
    `synthetic_sizes`: (train, test) sizes of the synthetic source. Raises DataError when nothing usable is found.
    """
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
        return _load_imagefolder(root, cache_dir, progress)
    tried: list[str] = []
    env = os.environ.get("INITMEM_DATA")
    for base in [root] + ([Path(env).expanduser()] if env else []):
        if (hit := _find(base, tried)) is not None:
            kind, path = hit
            return _load_torchvision(path, False) if kind == "torchvision" else _load_imagefolder(path, cache_dir,
                                                                                                 progress)
    if download:
        return _load_torchvision(root, True)
    raise DataError(f"no CIFAR-10 data found; tried: {'; '.join(tried)}"
                    f"{'' if env else ' (INITMEM_DATA is unset)'}. Put the data there, set INITMEM_DATA, pass "
                    f"download=True to fetch it with torchvision, or use source='synthetic' (tests only)")
