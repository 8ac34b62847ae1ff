"""torchvision's CIFAR-10 for `initmem data`: its archive downloaded without ever waiting forever (the name lookup,
the connection, a proxy's answer and every read each wait at most `TIMEOUT_S`; progress on stderr while bytes arrive;
a failure is one DataError line naming the URL, the route (the proxy, or none) and what to do instead), checked by
the md5 torchvision checks it by, and unpacked."""

import contextlib
import hashlib
import http.client
import socket
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path, PurePosixPath
from typing import IO
from urllib.parse import urlsplit

from initmem.errors import DataError

# torchvision's CIFAR-10 (the original python batches), where torchvision downloads it and the md5 it checks it by
TORCHVISION_TGZ = "cifar-10-python.tar.gz"
TORCHVISION_MD5 = "c58f30108f718f92721af3b95e74349a"
TORCHVISION_URL = f"https://www.cs.toronto.edu/~kriz/{TORCHVISION_TGZ}"
TORCHVISION_FOLDER = "cifar-10-batches-py"
TORCHVISION_FILES = ("batches.meta", *(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
TIMEOUT_S = 30.0  # the longest wait for any one network step (lookup, connect, an answer, a read) before giving up
CHUNK = 1 << 16
FIX = "`initmem data --from PATH` (PATH: cifar10-jpeg.tar.gz, a train/+test/ folder or cifar-10-python.tar.gz) or " \
      "`initmem data --download` puts it there"


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """The hex digest of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()


def torchvision_problem(folder: Path) -> str | None:
    """Why a `cifar-10-batches-py` folder must not be used (a missing batch file), or None."""
    missing = [n for n in TORCHVISION_FILES if not (folder / n).is_file()]
    return f"CIFAR-10 folder {folder} lacks {', '.join(missing)}: delete it; {FIX}" if missing else None


def is_torchvision_tgz(path: Path) -> bool:
    """Whether `path` is a .tar.gz whose first member is under `cifar-10-batches-py/`."""
    with contextlib.suppress(tarfile.TarError, EOFError, zlib.error, OSError), tarfile.open(path, "r:gz") as tf:
        first = tf.next()
        return first is not None and PurePosixPath(first.name).parts[0] == TORCHVISION_FOLDER
    return False


def unpack_torchvision(tgz: Path, work: Path) -> Path:
    """`work/cifar-10-batches-py`, unpacked from `tgz` once its md5 is torchvision's; DataError naming what is wrong."""
    if (got := file_digest(tgz, "md5")) != TORCHVISION_MD5:
        empty = " (an empty file)" if tgz.stat().st_size == 0 else ""
        raise DataError(f"{tgz} has md5 {got}{empty}, expected {TORCHVISION_MD5} (torchvision's {TORCHVISION_TGZ}): "
                        "it is corrupt, partial or another file; nothing was installed")
    try:
        with tarfile.open(tgz, "r:gz") as tf:
            tf.extractall(work, filter="data")
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise DataError(f"archive {tgz} is corrupt or truncated: {type(exc).__name__}: {exc}") from None
    if problem := torchvision_problem(work / TORCHVISION_FOLDER):
        raise DataError(f"{tgz} is not torchvision's CIFAR-10: {problem.split(':')[0]}")
    return work / TORCHVISION_FOLDER


def _proxy(url: str) -> str | None:
    """The proxy urllib sends a request for `url` through (`<scheme>_proxy`, unless `no_proxy` names the host)."""
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    return proxy if proxy and not urllib.request.proxy_bypass(parts.hostname or "") else None


def route(url: str) -> str:
    """How `url` is reached, in words: through which proxy (and the variable naming it), or directly."""
    scheme = urlsplit(url).scheme
    if proxy := _proxy(url):
        return f"through the proxy {proxy} ({scheme}_proxy)"
    return f"directly (no_proxy names {urlsplit(url).hostname})" if urllib.request.getproxies().get(scheme) else \
        "directly (no proxy set)"


def _lookup(url: str, timeout: float) -> None:
    """The host a request to `url` connects to first (its proxy, else its own) looked up within `timeout` (the socket
    timeout does not bound a name lookup); OSError when it fails or takes longer."""
    proxy = _proxy(url)
    parts = urlsplit(url if proxy is None else proxy if "://" in proxy else f"http://{proxy}")
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    answer: list = []
    done = threading.Event()

    def ask() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            answer.append(exc)
        done.set()

    threading.Thread(target=ask, daemon=True).start()  # a daemon: a lookup that never returns cannot hold the exit
    if not done.wait(timeout):
        raise TimeoutError(f"looking up {host} took over {timeout:g} s")
    if isinstance(answer[0], OSError):
        raise answer[0]


class _WriteError(Exception):
    """Writing the download failed: the disk's OSError (its `__cause__`), not the network's."""


class _Progress:
    """Progress on stderr: rewritten in place on a terminal (erased before the next line), else a line every 10 %."""

    def __init__(self, name: str, enabled: bool):
        self.name, self.enabled, self.tty = name, enabled, enabled and sys.stderr.isatty()
        self.shown, self.last, self.start = 0, 0.0, time.monotonic()

    def update(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now, pct = time.monotonic(), 100 * done // total if total else None
        if self.tty:
            due = now - self.last >= 0.5 or done == total
        else:  # each further 10 %, or every 5 s when the size is unknown
            due = pct // 10 > self.shown // 10 if pct is not None else now - self.last >= 5
        if not due:
            return
        rate = done / max(now - self.start, 1e-9) / 1e6
        size = f"{done / 1e6:.1f} of {total / 1e6:.1f} MB ({pct} %)" if total else f"{done / 1e6:.1f} MB"
        line = f"downloading {self.name}: {size}, {rate:.1f} MB/s"
        print(f"\r\033[K{line}" if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)
        self.shown, self.last = pct or 0, now

    def clear(self) -> None:
        if self.tty and self.last:
            print("\r\033[K", end="", file=sys.stderr, flush=True)


def _why(exc: BaseException, timeout: float) -> str:
    """What went wrong, in a few words: the innermost reason of a URLError, a timeout said as one."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) and not isinstance(
        exc, urllib.error.HTTPError) else exc
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout:g} s ({reason})"
    return f"{type(reason).__name__}: {reason}"


def download(url: str, out: IO[bytes], fix: str, progress: bool = True, timeout: float | None = None) -> int:
    """`url`'s bytes written to `out` (its number of bytes returned); DataError in one line naming the route and `fix`
    when any step waits over `timeout` s (default `TIMEOUT_S`) or fails."""
    timeout = TIMEOUT_S if timeout is None else timeout
    shown = _Progress(Path(urlsplit(url).path).name, progress)
    try:
        _lookup(url, timeout)
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # the timeout bounds the connect and every read
            total, done = int(resp.headers.get("Content-Length") or 0), 0
            while chunk := resp.read1(CHUNK):  # what has arrived, at most CHUNK: progress as it comes
                try:
                    out.write(chunk)
                except OSError as exc:
                    raise _WriteError from exc
                done += len(chunk)
                shown.update(done, total)
        if total and done != total:
            raise http.client.IncompleteRead(b"", total - done)
    except _WriteError as exc:  # a full disk, say: the caller names it as the OS error it is
        shown.clear()
        raise exc.__cause__ from None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError, timeouts, refused, reset, TLS
        shown.clear()
        raise DataError(f"downloading {url} {route(url)} failed: {_why(exc, timeout)}; {fix}") from None
    shown.clear()
    return done
