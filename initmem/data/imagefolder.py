"""CIFAR-10 as image files: `root/{train,test}/<class>/*.{png,jpg,jpeg}` or a `.tar.gz` of it (maybe under one
top folder); sorted class folders give the labels. Decoded once with PIL and cached by content hash (later loads
take about a second); a corrupt cache is named and rebuilt, a corrupt archive named and refused."""

import contextlib
import gzip
import hashlib
import io
import os
import tarfile
import time
import warnings
import zlib
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from initmem.config import NUM_CLASSES
from initmem.data.cifar10 import Cifar10, check_dataset
from initmem.errors import DataError
from initmem.store.files import ensure_writable

IMAGE_EXTS = (".png", ".jpg", ".jpeg")
ARCHIVE_EXTS = (".tar.gz", ".tgz")
_CACHE_VERSION = 1  # bump when the decoded layout changes: old cache files are then simply not found


# An entry is (split, class, file name, bytes); `origin` names the file in error messages.
def _decode_into(out: np.ndarray, data: bytes, origin: str) -> None:
    """One image file → `out` (uint8 [32, 32, 3]) with PIL, in this process (paid once per archive: a fork pool
    gained nothing on 2 cores and is unsafe under torch's thread pools; torchvision.io's decoders are deprecated)."""
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
        out[f"{split}_y"] = torch.tensor([label[c] for c, _, _ in items], dtype=torch.int64)  # cpu: a dataset
    if bar is not None:
        bar.close()
    return out


def _entry_key(parts: tuple[str, ...]) -> tuple[str, str, str, str] | None:
    """(top, split, class, file) for an image at `[top/]split/class/file`, else None."""
    if any(p.startswith(".") for p in parts) or not parts[-1].lower().endswith(IMAGE_EXTS):
        return None
    parts = ("", *parts) if len(parts) == 3 else parts
    return parts if len(parts) == 4 and parts[1] in ("train", "test") else None  # type: ignore[return-value]


def _read_tar(path: Path) -> list[tuple[str, str, str, bytes]]:
    found: dict[str, list[tuple[str, str, str, bytes]]] = {}
    try:
        # One streaming pass. tarfile's own "r|gz" never reads the gzip trailer (an archive cut in its last bytes
        # would load as if whole): the stream is drained so that gzip checks its length and CRC.
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
        return check_dataset(data, str(path))
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
    """DataError unless `cache` is a writable folder, checked before decoding (a setup mistake, fixed once)."""
    what = f"INITMEM_CACHE={str(cache)!r}" if from_env else f"cache_dir={str(cache)!r}"
    fix = "set INITMEM_CACHE to a writable folder, or unset it for ~/.cache/initmem" if from_env else \
        "a writable folder is accepted"
    if cache.exists() and not cache.is_dir():
        raise DataError(f"{what} is a file, not a folder: {fix}")
    try:
        ensure_writable(cache)
    except OSError as exc:
        raise DataError(f"{what} is not a writable folder ({exc.strerror or exc}): {fix}") from None


def load_imagefolder(root: Path, cache_dir: Path | None, progress: bool) -> Cifar10:
    """CIFAR-10 from a train/+test/ tree, a .tar.gz or a folder with one; from the cache when its hash is there."""
    if root.is_dir() and (root / "train").is_dir() and (root / "test").is_dir():
        kind, path = "imagefolder", root
    elif root.is_file() and root.name.endswith(ARCHIVE_EXTS):
        kind, path = "imagefolder-tar", root
    elif root.is_dir() and len(found := archives(root)) == 1:
        kind, path = "imagefolder-tar", found[0]
    else:
        n = len(archives(root)) if root.is_dir() else 0
        raise DataError(f"image-folder data not found at {root}: expected {root}/train + {root}/test, a .tar.gz "
                        f"file, or a folder with exactly one .tar.gz (found {n})")
    path = path.resolve()
    source = f"{kind}:{path}"
    if kind == "imagefolder":
        files = _scan_folder(path)
        listing = "\n".join(f"{s}/{c}/{n}\t{(st := f.stat()).st_size}\t{st.st_mtime_ns}" for s, c, n, f in files)
        key = hashlib.sha256(listing.encode()).hexdigest()
    else:
        with open(path, "rb") as f:
            key = hashlib.file_digest(f, "sha256").hexdigest()
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cache_file = cache / f"cifar10-{kind}-{key[:24]}-v{_CACHE_VERSION}.pt"
    if (hit := _load_cache(cache_file, key)) is not None:
        return Cifar10(hit.train_x, hit.train_y, hit.test_x, hit.test_y, hit.classes, source, key)
    _check_cache_dir(cache, from_env=cache_dir is None and bool(os.environ.get("INITMEM_CACHE")))
    t0 = time.perf_counter()
    entries = ([(s, c, n, f.read_bytes()) for s, c, n, f in files] if kind == "imagefolder" else _read_tar(path))
    d = _assemble(entries, str(path), progress)
    data = check_dataset(Cifar10(d["train_x"], d["train_y"], d["test_x"], d["test_y"], tuple(d["classes"]),
                                  source, key), str(path))
    if progress:
        print(f"decoded {len(entries)} images from {path} in {time.perf_counter() - t0:.1f} s; caching to {cache_file}")
    _save_cache(cache_file, key, data)
    return data


def archives(folder: Path) -> list[Path]:
    """The .tar.gz / .tgz files directly inside `folder`, sorted."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(ARCHIVE_EXTS))
