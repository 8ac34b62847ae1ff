"""`initmem data`: CIFAR-10 into the repository's git-ignored `data/` folder, where every profile's `data_root` looks.
From an archive or folder the user names (the study's JPEG archive, a `train/`+`test/` tree of class folders, or
torchvision's `cifar-10-python.tar.gz`), or downloaded (`initmem.data.download`). Every file is checked by its hash and
installed by a rename, one `initmem data` at a time per folder; a second run finds the data and does nothing; a corrupt
or partial file is named and never used. `data_problem` is the same check without writing, for a sweep's preflight."""

import contextlib
import dataclasses
import errno
import fcntl
import gzip
import hashlib
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from initmem.checks import REPOSITORY, resolve
from initmem.config import NUM_CLASSES
from initmem.data.download import (
    FIX,
    TORCHVISION_FOLDER,
    TORCHVISION_TGZ,
    TORCHVISION_URL,
    download,
    file_digest,
    is_torchvision_tgz,
    torchvision_problem,
    unpack_torchvision,
)
from initmem.errors import DataError, invalid
from initmem.store.files import atomic_write

# The study's CIFAR-10: its 50,000 train and 10,000 test images as JPEGs in train/<class>/NNNN.jpg, test/<class>/...
JPEG_ARCHIVE = "cifar10-jpeg.tar.gz"
JPEG_SHA256 = "d1398c01889fdedbaa41b19ed8e77f6bc04894d0f43d201c4d219fda8f0a04a9"
DATA_FOLDER = REPOSITORY / "data"  # what every profile's `data_root: data` names (relative to the repository)


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


class _Hashing:
    """A binary file that hashes (sha256) what is written to it: the hash is of the bytes written, not of a file
    another process could change between the write and a later read."""

    def __init__(self, f: IO[bytes]):
        self.f, self.sha = f, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def _write_archive(dest: Path, write: Callable[[_Hashing], object], expect: str | None = None) -> str:
    """`dest/cifar10-jpeg.tar.gz` written by `write` into a temporary file of its own, its sidecar written, then renamed
    into place (`store.files.atomic_write`): returns the sha256 of the bytes written; DataError, nothing installed,
    when `expect` is given and they differ from it."""
    final, got = dest / JPEG_ARCHIVE, ""

    def body(f: IO[bytes]) -> None:
        nonlocal got
        write(hashing := _Hashing(f))
        got = hashing.sha.hexdigest()
        if expect is not None and got != expect:
            raise DataError(f"the copy into {dest} has sha256 {got}, not its source's {expect} (changed while being "
                            "copied?); nothing was installed")
        atomic_write(sidecar(final), f"{got}  {JPEG_ARCHIVE}\n")  # before the archive: never an archive without it

    atomic_write(final, body)
    return got


def _copy_archive(src: Path, dest: Path, sha256: str | None) -> DataStatus:
    got = file_digest(src)
    if got != (want := sha256 or JPEG_SHA256):
        raise DataError(_mismatch(src, got, want, sha256 is not None))
    if sha256 and sha256 != JPEG_SHA256:
        _image_tree_members(_tar_names(src), str(src))

    def copy(out: _Hashing) -> None:
        with open(src, "rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)

    _write_archive(dest, copy, expect=got)
    note = "" if got == JPEG_SHA256 else "not the study's archive: runs record its hash"
    return DataStatus(dest / JPEG_ARCHIVE, "copied", f"sha256:{got}", note)


def _mismatch(src: Path, got: str, want: str, given: bool) -> str:
    """Why an archive whose sha256 is not `want` is refused, with the advice that fits what the file is."""
    if given:
        return f"{src} has sha256 {got}, expected {want} (--sha256); nothing was installed"
    with open(src, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return (f"{src} is not a .tar.gz (no gzip header): a damaged file or another format, not the study's "
                    f"{JPEG_ARCHIVE}; nothing was installed")
    try:
        _image_tree_members(_tar_names(src), str(src))
    except DataError as exc:
        return f"{exc}; not the study's {JPEG_ARCHIVE} (sha256 {want}): nothing was installed"
    return (f"{src} has sha256 {got}, not the study's {JPEG_ARCHIVE} ({want}): another CIFAR-10 JPEG archive of "
            f"train/<class>/ and test/<class>/ (then pass --sha256 {got}) or a damaged copy; nothing was installed")


def _pack_folder(src: Path, dest: Path) -> DataStatus:
    """A train/+test/ image tree packed into `dest/cifar10-jpeg.tar.gz` (sorted, zero times: the same tree packs to
    the same bytes)."""
    files = sorted(p for split in ("train", "test") for p in (src / split).rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(src).parts))
    _image_tree_members([p.relative_to(src).as_posix() for p in files], str(src))

    def pack(out: _Hashing) -> None:
        # the gzip header names the file this packer first wrote to: kept, so that a tree packs to the bytes it did
        with gzip.GzipFile(f".{JPEG_ARCHIVE}.partial", mode="wb", fileobj=out, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for p in files:
                info = tarfile.TarInfo(p.relative_to(src).as_posix())
                info.size, info.mode = p.stat().st_size, 0o644
                with open(p, "rb") as f:
                    tf.addfile(info, f)

    got = _write_archive(dest, pack)
    note = "the study's archive" if got == JPEG_SHA256 else "packed from your folder, so not byte-identical to the " \
        "study's archive: runs record its hash"
    return DataStatus(dest / JPEG_ARCHIVE, "packed", f"sha256:{got}", note)


def _install_folder(make: Callable[[Path], Path], dest: Path) -> Path:
    """The folder `make(work)` builds inside a temporary folder of this run's own, renamed to `dest/<its name>`."""
    work = Path(tempfile.mkdtemp(dir=dest, prefix=".install-"))
    try:
        built = make(work)
        os.replace(built, final := dest / built.name)  # same folder: atomic; a partial folder never has the name
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _extract_torchvision(tgz: Path, dest: Path, action: str = "extracted") -> DataStatus:
    folder = _install_folder(lambda work: unpack_torchvision(tgz, work), dest)
    return DataStatus(folder, action, f"md5:{file_digest(tgz, 'md5')}", "torchvision's original CIFAR-10, not the "
                      "study's JPEG archive: runs record its source")


def _download(dest: Path, progress: bool) -> DataStatus:
    work = Path(tempfile.mkdtemp(dir=dest, prefix=".download-"))
    try:
        with open(tgz := work / TORCHVISION_TGZ, "wb") as f:
            download(TORCHVISION_URL, f, "check the network and the proxy variables (https_proxy, no_proxy), or "
                     f"`initmem data --from PATH` imports a copy ({JPEG_ARCHIVE} or {TORCHVISION_TGZ})", progress)
        return _extract_torchvision(tgz, dest, "downloaded")
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


def data_folder(dest: str | Path | None = None) -> Path:
    """Where `initmem data` installs: the repository's `data/` (`DATA_FOLDER`) by default, whatever the working
    folder; a folder outside the repository as given (absolute); another folder inside it is refused (no profile
    reads it, and git would list it)."""
    if dest is None:
        return DATA_FOLDER
    path = resolve("--dest", dest, "a folder")  # '' and a symlink loop: one line
    if path == DATA_FOLDER.resolve() or not path.is_relative_to(REPOSITORY.resolve()):
        return path
    raise DataError(f"--dest {dest} is inside the repository but is not {DATA_FOLDER}, the folder every profile reads "
                    "(data_root: data): leave --dest out, or name a folder outside the repository (then "
                    "INITMEM_DATA=<that folder> lets `data: auto` find it)")


@contextlib.contextmanager
def _installing(dest: Path) -> Iterator[None]:
    """This run alone installs into `dest` for the block: an exclusive `flock` on the folder itself (released by the
    kernel if the run dies; nothing is left in the folder); another run at work there is one line."""
    fd = os.open(dest, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataError(f"another `initmem data` is installing CIFAR-10 into {dest} now: let it finish, then run "
                            "this again (it will find the data there)") from None
        yield
    finally:
        os.close(fd)


def _os_error(exc: OSError, dest: Path) -> DataError:
    """An OSError as one line naming the path and the errno, and what to do."""
    code = errno.errorcode.get(exc.errno or 0, "")
    fix = {"ENOSPC": "free space there or pass another --dest", "EDQUOT": "free space there or pass another --dest",
           "EFBIG": "the file system (or `ulimit -f`) refuses a file this large: pass another --dest",
           "EROFS": "a writable --dest is accepted", "EACCES": "a writable --dest is accepted",
           "EPERM": "a writable --dest is accepted", "ELOOP": "a path without a symlink loop is accepted"}
    where = (f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "")) if exc.filename else f"{dest}/"
    return DataError(f"{where}: {exc.strerror or exc} ({code or type(exc).__name__}); nothing was installed into "
                     f"{dest}" + (f": {fix[code]}" if code in fix else ""))


def fetch_data(source: str | Path | None = None, dest: str | Path | None = None, download: bool = False,
               sha256: str | None = None, progress: bool = True) -> DataStatus:
    """CIFAR-10 into `dest` (default: the repository's `data/`, what every profile reads; `data_folder`), unless it is
    there already. `source`: the study's `cifar10-jpeg.tar.gz` (checked against `JPEG_SHA256`, or `sha256` for another
    JPEG archive), a `train/`+`test/` folder (packed into one), torchvision's `cifar-10-python.tar.gz` or
    `cifar-10-batches-py/`; `download`: fetch torchvision's over the internet (`progress` on stderr). DataError in one
    line for anything missing, corrupt or refused by the OS."""
    if sha256 is not None and (len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256)):
        raise invalid("sha256", sha256, "64 lowercase hex digits")
    if source is not None and download:
        raise DataError("--from and --download exclude each other: one source is accepted")
    dest = data_folder(dest)
    if dest.exists() and not dest.is_dir():
        raise DataError(f"{dest} is a file, not a folder: a data folder is accepted")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        with _installing(dest):
            return _fetch_locked(dest, source, download, sha256, progress)
    except OSError as exc:
        raise _os_error(exc, dest) from None


def _fetch_locked(dest: Path, source: str | Path | None, download: bool, sha256: str | None,
                  progress: bool) -> DataStatus:
    """`fetch_data`'s work, `dest` held by this run."""
    try:
        if (found := present(dest)) is not None:
            return found
        replaced = ""
    except DataError:  # a corrupt or partial file: named, and replaced only from a source given now
        if source is None and not download:
            raise
        replaced = f"replaced {_remove_damaged(dest)}, which was corrupt or partial"
    status = _fetch_new(dest, source, download, sha256, progress)
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


def _fetch_new(dest: Path, source: str | Path | None, download: bool, sha256: str | None,
               progress: bool) -> DataStatus:
    """`fetch_data`'s work when `dest` holds no data yet."""
    if download:
        return _download(dest, progress)
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
        copied = _install_folder(lambda work: Path(shutil.copytree(folder, work / TORCHVISION_FOLDER)), dest)
        return DataStatus(copied, "copied", "", "torchvision's original CIFAR-10")
    if src.is_file() and src.stat().st_size == 0:
        raise DataError(f"--from {src} is an empty file (0 bytes): an interrupted download or copy? Copy it again; "
                        "nothing was installed")
    if src.is_file() and src.name.endswith((".tar.gz", ".tgz")):
        if src.name == TORCHVISION_TGZ or is_torchvision_tgz(src):  # checked by torchvision's md5, as torchvision does
            return _extract_torchvision(src, dest)
        return _copy_archive(src, dest, sha256)
    raise DataError(f"--from {src} is not CIFAR-10 as initmem reads it: {JPEG_ARCHIVE} (or another .tar.gz of "
                    f"train/<class>/ and test/<class>/), such a folder, {TORCHVISION_TGZ} or {TORCHVISION_FOLDER}/ "
                    "is accepted")
