"""`initmem data`: CIFAR-10 into the repository's git-ignored `data/` folder, where every profile's `data_root` looks.
From an archive or folder the user names (the study's JPEG archive, a `train/`+`test/` tree of class folders, or
torchvision's `cifar-10-python.tar.gz`), or downloaded by torchvision. Every file is checked by its hash; a second run
finds the data and does nothing; a corrupt or partial file is named and never used. `data_problem` is the same check
without writing, for a sweep's preflight."""

import contextlib
import dataclasses
import gzip
import hashlib
import os
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from initmem.config import NUM_CLASSES
from initmem.errors import DataError, invalid

# The study's CIFAR-10: its 50,000 train and 10,000 test images as JPEGs in train/<class>/NNNN.jpg, test/<class>/...
JPEG_ARCHIVE = "cifar10-jpeg.tar.gz"
JPEG_SHA256 = "d1398c01889fdedbaa41b19ed8e77f6bc04894d0f43d201c4d219fda8f0a04a9"
# torchvision's CIFAR-10 (the original python batches) and the md5 torchvision itself checks it by
TORCHVISION_TGZ = "cifar-10-python.tar.gz"
TORCHVISION_MD5 = "c58f30108f718f92721af3b95e74349a"
TORCHVISION_FOLDER = "cifar-10-batches-py"
TORCHVISION_FILES = ("batches.meta", *(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
FIX = "`initmem data --from PATH` (PATH: cifar10-jpeg.tar.gz, a train/+test/ folder or cifar-10-python.tar.gz) or " \
      "`initmem data --download` puts it there"


@dataclass(frozen=True)
class DataStatus:
    """What `fetch_data` found or did: `path` the data, `action` present | copied | packed | extracted | downloaded."""

    path: Path
    action: str
    digest: str  # "sha256:<hex>" of an archive, "md5:<hex>" of torchvision's download, or "" for its folder
    note: str = ""

    def line(self) -> str:
        what = "is already there, nothing done" if self.action == "present" else f"{self.action}"
        return f"CIFAR-10 {self.path} {what}" + (f" ({self.digest})" if self.digest else "") + (
            f"; {self.note}" if self.note else "")


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()


def sidecar(archive: Path) -> Path:
    """`<archive>.sha256`: the hash an imported archive was checked against (`sha256sum -c` reads it)."""
    return archive.with_name(archive.name + ".sha256")


def expected_sha256(archive: Path) -> str | None:
    """The hash `archive` must have: its sidecar's, else the study's for the study's file name, else None."""
    if (side := sidecar(archive)).is_file():
        return (side.read_text().split() or [""])[0]
    return JPEG_SHA256 if archive.name == JPEG_ARCHIVE else None


def archive_problem(archive: Path) -> str | None:
    """Why `archive` must not be used (unreadable, or not the hash it is known by), or None."""
    try:
        got = file_digest(archive)
    except OSError as exc:
        return f"CIFAR-10 archive {archive} is unreadable ({exc.strerror or exc})"
    if (want := expected_sha256(archive)) and got != want:
        return (f"CIFAR-10 archive {archive} is corrupt or partial (sha256 {got[:12]}..., expected {want[:12]}...): "
                f"delete it; {FIX}")
    return None


def torchvision_problem(folder: Path) -> str | None:
    """Why a `cifar-10-batches-py` folder must not be used (a missing batch file), or None."""
    missing = [n for n in TORCHVISION_FILES if not (folder / n).is_file()]
    return f"CIFAR-10 folder {folder} lacks {', '.join(missing)}: delete it; {FIX}" if missing else None


def data_problem(root: str | Path, source: str = "auto") -> str | None:
    """Why `load_cifar10(root, source)` would fail for want of data, in one line naming `initmem data`; None when the
    data is there and passes its hash check (nothing is decoded)."""
    if source == "synthetic":
        return None
    from initmem.data.sources import find_source  # the loader's own search order

    root = Path(root).expanduser()
    env = os.environ.get("INITMEM_DATA")
    tried: list[str] = []
    for base in ([root] if source != "auto" else [root] + ([Path(env).expanduser()] if env else [])):
        try:
            hit = find_source(base, tried)
        except DataError as exc:
            return str(exc)
        if hit is None or (source not in ("auto", hit[0])):
            continue
        kind, path = hit
        if kind == "torchvision":
            return torchvision_problem(path if path.name == TORCHVISION_FOLDER else path / TORCHVISION_FOLDER)
        return archive_problem(path) if path.is_file() else None
    return f"no CIFAR-10 data at {root} (looked for {'; '.join(tried)}): {FIX}"


def _image_tree_members(names: list[str], origin: str) -> None:
    """DataError unless `names` (archive or folder entries) form train/<class>/ and test/<class>/ of 10 classes."""
    classes: dict[str, set[str]] = {"train": set(), "test": set()}
    for name in names:
        parts = PurePosixPath(name).parts
        parts = parts[1:] if len(parts) == 4 else parts  # one top folder is allowed, as the loader allows
        if len(parts) == 3 and parts[0] in classes:
            classes[parts[0]].add(parts[1])
    if classes["train"] != classes["test"] or len(classes["train"]) != NUM_CLASSES:
        raise DataError(f"{origin} is not CIFAR-10 as train/<class>/* and test/<class>/*: train classes "
                        f"{sorted(classes['train'])}, test classes {sorted(classes['test'])}, expected {NUM_CLASSES}")


def _tar_names(path: Path) -> list[str]:
    """Every file name in a .tar.gz, read to its end (so a truncated archive is named here, never imported)."""
    try:
        with gzip.open(path) as gz, tarfile.open(fileobj=gz, mode="r|") as tf:
            names = [m.name for m in tf if m.isfile()]
            while gz.read(1 << 20):
                pass
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise DataError(f"archive {path} is corrupt or truncated: {type(exc).__name__}: {exc}") from None
    return names


def _install(tmp: Path, final: Path) -> Path:
    """`tmp` renamed to `final` (same folder: atomic), so a partial copy never carries the final name."""
    os.replace(tmp, final)
    return final


def _copy_archive(src: Path, dest: Path, sha256: str | None) -> DataStatus:
    got = file_digest(src)
    want = sha256 or JPEG_SHA256
    if got != want:
        raise DataError(f"{src} has sha256 {got}, expected {want} (--sha256)" if sha256 else
                        f"{src} has sha256 {got}, not the study's {JPEG_ARCHIVE} ({want}): corrupt or partial, or "
                        f"another CIFAR-10 JPEG archive (then pass --sha256 {got}); nothing was installed")
    if sha256 and sha256 != JPEG_SHA256:
        _image_tree_members(_tar_names(src), str(src))
    final = dest / JPEG_ARCHIVE
    with tempfile.NamedTemporaryFile(dir=dest, prefix=f".{JPEG_ARCHIVE}.", suffix=".partial", delete=False) as f:
        tmp = Path(f.name)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)
        if file_digest(tmp) != got:
            raise DataError(f"copying {src} to {dest} changed its bytes (disk full?); nothing was installed")
        sidecar(final).write_text(f"{got}  {JPEG_ARCHIVE}\n")
        _install(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    note = "" if got == JPEG_SHA256 else "not the study's archive: runs record its hash"
    return DataStatus(final, "copied", f"sha256:{got}", note)


def _pack_folder(src: Path, dest: Path) -> DataStatus:
    """A train/+test/ image tree packed into `dest/cifar10-jpeg.tar.gz` (sorted, zero times: the same tree packs to
    the same bytes)."""
    files = sorted(p for split in ("train", "test") for p in (src / split).rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(src).parts))
    _image_tree_members([p.relative_to(src).as_posix() for p in files], str(src))
    final = dest / JPEG_ARCHIVE
    tmp = dest / f".{JPEG_ARCHIVE}.partial"
    try:
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for p in files:
                info = tarfile.TarInfo(p.relative_to(src).as_posix())
                info.size, info.mode = p.stat().st_size, 0o644
                with open(p, "rb") as f:
                    tf.addfile(info, f)
        got = file_digest(tmp)
        sidecar(final).write_text(f"{got}  {JPEG_ARCHIVE}\n")
        _install(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    note = "the study's archive" if got == JPEG_SHA256 else "packed from your folder, so not byte-identical to the " \
        "study's archive: runs record its hash"
    return DataStatus(final, "packed", f"sha256:{got}", note)


def _extract_torchvision(tgz: Path, dest: Path, md5: str | None, action: str = "extracted") -> DataStatus:
    got = file_digest(tgz, "md5")
    if got != (want := md5 or TORCHVISION_MD5):
        raise DataError(f"{tgz} has md5 {got}, expected {want} (torchvision's {TORCHVISION_TGZ}); it is corrupt, "
                        "partial or another file: nothing was installed")
    work = Path(tempfile.mkdtemp(dir=dest, prefix=".extract-"))
    try:
        try:
            with tarfile.open(tgz, "r:gz") as tf:
                tf.extractall(work, filter="data")
        except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
            raise DataError(f"archive {tgz} is corrupt or truncated: {type(exc).__name__}: {exc}") from None
        if problem := torchvision_problem(work / TORCHVISION_FOLDER):
            raise DataError(f"{tgz} is not torchvision's CIFAR-10: {problem.split(':')[0]}")
        final = _install(work / TORCHVISION_FOLDER, dest / TORCHVISION_FOLDER)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return DataStatus(final, action, f"md5:{got}", "torchvision's original CIFAR-10, not the study's JPEG archive: "
                      "runs record its source")


def _download(dest: Path) -> DataStatus:
    try:
        from torchvision.datasets.utils import download_url
    except ImportError:
        raise DataError("--download needs torchvision (pip install torchvision); or --from PATH") from None
    work = Path(tempfile.mkdtemp(dir=dest, prefix=".download-"))
    try:
        try:
            download_url(f"https://www.cs.toronto.edu/~kriz/{TORCHVISION_TGZ}", str(work), TORCHVISION_TGZ,
                         TORCHVISION_MD5)
        except Exception as exc:  # network, proxy, checksum: all mean "could not get it"
            raise DataError(f"downloading {TORCHVISION_TGZ} failed: {type(exc).__name__}: {exc}; no internet here? "
                            "`initmem data --from PATH` imports a copy") from None
        return _extract_torchvision(work / TORCHVISION_TGZ, dest, None, "downloaded")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def present(dest: Path) -> DataStatus | None:
    """The data already in `dest` (checked; DataError naming a corrupt or partial file), or None."""
    archive, folder = dest / JPEG_ARCHIVE, dest / TORCHVISION_FOLDER
    if archive.exists():
        if problem := archive_problem(archive):
            raise DataError(problem)
        return DataStatus(archive, "present", f"sha256:{file_digest(archive)}")
    if folder.exists():
        if problem := torchvision_problem(folder):
            raise DataError(problem)
        return DataStatus(folder, "present", "")
    return None


def _is_torchvision_tgz(path: Path) -> bool:
    with contextlib.suppress(tarfile.TarError, EOFError, zlib.error, OSError), tarfile.open(path, "r:gz") as tf:
        first = tf.next()
        return first is not None and PurePosixPath(first.name).parts[0] == TORCHVISION_FOLDER
    return False


def fetch_data(source: str | Path | None = None, dest: str | Path = "data", download: bool = False,
               sha256: str | None = None) -> DataStatus:
    """CIFAR-10 into `dest` (default `data/`, what every profile reads), unless it is there already. `source`: the
    study's `cifar10-jpeg.tar.gz` (checked against `JPEG_SHA256`, or `sha256` for another JPEG archive), a
    `train/`+`test/` folder (packed into one), torchvision's `cifar-10-python.tar.gz` or `cifar-10-batches-py/`;
    `download`: fetch torchvision's over the internet. DataError in one line for anything missing or corrupt."""
    if sha256 is not None and (len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256)):
        raise invalid("sha256", sha256, "64 lowercase hex digits")
    if source is not None and download:
        raise DataError("--from and --download exclude each other: one source is accepted")
    dest = Path(dest).expanduser()
    if dest.exists() and not dest.is_dir():
        raise DataError(f"{dest} is a file, not a folder: a data folder is accepted")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if (found := present(dest)) is not None:
            return found
        replaced = ""
    except DataError:  # a corrupt or partial file: named, and replaced only from a source given now
        if source is None and not download:
            raise
        replaced = f"replaced {_remove_damaged(dest)}, which was corrupt or partial"
    status = _fetch_new(dest, source, download, sha256)
    return dataclasses.replace(status, note="; ".join(n for n in (status.note, replaced) if n))


def _remove_damaged(dest: Path) -> Path:
    """The damaged data `present` named, deleted (it lives in the data folder this module manages)."""
    archive, folder = dest / JPEG_ARCHIVE, dest / TORCHVISION_FOLDER
    if archive.exists():
        archive.unlink()
        sidecar(archive).unlink(missing_ok=True)
        return archive
    shutil.rmtree(folder)
    return folder


def _fetch_new(dest: Path, source: str | Path | None, download: bool, sha256: str | None) -> DataStatus:
    """`fetch_data`'s work when `dest` holds no data yet."""
    if download:
        return _download(dest)
    if source is None:
        raise DataError(f"no CIFAR-10 in {dest}: {FIX}")
    src = Path(source).expanduser()
    if not src.exists():
        raise DataError(f"--from {src}: no such file or folder")
    if src.is_dir() and (src / "train").is_dir() and (src / "test").is_dir():
        return _pack_folder(src, dest)
    if src.is_dir() and (src.name == TORCHVISION_FOLDER or (src / TORCHVISION_FOLDER).is_dir()):
        folder = src if src.name == TORCHVISION_FOLDER else src / TORCHVISION_FOLDER
        if problem := torchvision_problem(folder):
            raise DataError(problem)
        shutil.copytree(folder, tmp := dest / f".{TORCHVISION_FOLDER}.partial", dirs_exist_ok=True)
        return DataStatus(_install(tmp, dest / TORCHVISION_FOLDER), "copied", "", "torchvision's original CIFAR-10")
    if src.is_file() and src.name.endswith((".tar.gz", ".tgz")):
        if _is_torchvision_tgz(src):
            return _extract_torchvision(src, dest, None)
        return _copy_archive(src, dest, sha256)
    raise DataError(f"--from {src} is not CIFAR-10 as initmem reads it: {JPEG_ARCHIVE} (or another .tar.gz of "
                    f"train/<class>/ and test/<class>/), such a folder, {TORCHVISION_TGZ} or {TORCHVISION_FOLDER}/ "
                    "is accepted")
