"""`initmem data` (initmem.data.fetch) and a sweep's preflight (initmem.study.preflight): CIFAR-10 put into data/ by
one command, checked by its hash, idempotent, a corrupt file named and never used; a sweep without its data prints
one line naming `initmem data` and runs no notebook."""

import contextlib
import errno
import hashlib
import io
import os
import resource
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from conftest import NO_ARCHIVE, REPO, cifar10_archive_path

from initmem.cli import commands
from initmem.data import download, fetch
from initmem.data.fetch import JPEG_ARCHIVE, JPEG_SHA256, data_problem, fetch_data
from initmem.errors import DataError

CLASSES = [f"c{i}" for i in range(10)]


@pytest.fixture(autouse=True)
def no_env_data(monkeypatch):
    monkeypatch.delenv("INITMEM_DATA", raising=False)


def image_tree(root: Path) -> Path:
    """train/<class>/0.jpg and test/<class>/0.jpg for 10 classes (the bytes are never decoded here)."""
    for split in ("train", "test"):
        for c in CLASSES:
            (root / split / c).mkdir(parents=True)
            (root / split / c / "0.jpg").write_bytes(f"{split}{c}".encode())
    return root


def tree_archive(path: Path, classes=CLASSES, size: int = 0) -> Path:
    """train/<class>/0.jpg and test/<class>/0.jpg as a .tar.gz; `size` random bytes each, else a short text."""
    with tarfile.open(path, "w:gz") as tf:
        for split in ("train", "test"):
            for c in classes:
                data = os.urandom(size) if size else f"{split}{c}".encode()
                info = tarfile.TarInfo(f"{split}/{c}/0.jpg")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def torchvision_tgz(path: Path, size: int = 1) -> Path:
    """A .tar.gz shaped like torchvision's: cifar-10-batches-py/<each batch file> of `size` random bytes."""
    with tarfile.open(path, "w:gz") as tf:
        for name in download.TORCHVISION_FILES:
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = size
            tf.addfile(info, io.BytesIO(os.urandom(size)))
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_archive_is_checked_copied_once_and_named_when_corrupt(tmp_path):
    src = tree_archive(tmp_path / "mine.tar.gz")
    dest = tmp_path / "data"
    with pytest.raises(DataError, match=f"not the study's {JPEG_ARCHIVE}.*--sha256 {sha(src)}"):
        fetch_data(src, dest)  # another archive than the study's: refused unless its hash is given
    assert not (dest / JPEG_ARCHIVE).exists()
    got = fetch_data(src, dest, sha256=sha(src))
    assert got.action == "copied" and sha(dest / JPEG_ARCHIVE) == sha(src) and "not the study's" in got.note
    assert (dest / f"{JPEG_ARCHIVE}.sha256").read_text().split()[0] == sha(src)
    again = fetch_data(src, dest, sha256=sha(src))
    assert again.action == "present" and "nothing done" in again.line()
    assert data_problem(dest) is None
    (dest / JPEG_ARCHIVE).write_bytes(src.read_bytes()[:100])  # a partial file where the archive was
    for problem in (data_problem(dest), ):
        assert "corrupt or partial" in problem and "initmem data" in problem
    with pytest.raises(DataError, match="corrupt or partial"):
        fetch_data(None, dest)  # never used, named
    fixed = fetch_data(src, dest, sha256=sha(src))
    assert fixed.action == "copied" and "replaced" in fixed.note and sha(dest / JPEG_ARCHIVE) == sha(src)


def test_a_truncated_or_wrong_tree_archive_is_refused(tmp_path):
    nine = tree_archive(tmp_path / "nine.tar.gz", CLASSES[:9])
    with pytest.raises(DataError, match="expected 10"):
        fetch_data(nine, tmp_path / "data", sha256=sha(nine))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(tree_archive(tmp_path / "whole.tar.gz").read_bytes()[:-30])
    with pytest.raises(DataError, match="corrupt or truncated"):
        fetch_data(cut, tmp_path / "data", sha256=sha(cut))
    assert list((tmp_path / "data").iterdir()) == []  # nothing installed, no partial file left


def test_a_folder_packs_to_the_same_bytes_every_time(tmp_path):
    tree = image_tree(tmp_path / "cifar")
    a, b = fetch_data(tree, tmp_path / "a"), fetch_data(tree, tmp_path / "b")
    assert a.action == "packed" and a.digest == b.digest == f"sha256:{sha(tmp_path / 'a' / JPEG_ARCHIVE)}"
    with tarfile.open(tmp_path / "a" / JPEG_ARCHIVE) as tf:
        assert sorted(tf.getnames()) == sorted(f"{s}/{c}/0.jpg" for s in ("train", "test") for c in CLASSES)
    assert data_problem(tmp_path / "a") is None


def test_torchvision_archive_is_checked_by_md5(tmp_path, monkeypatch):
    tgz = torchvision_tgz(tmp_path / "cifar-10-python.tar.gz")
    with pytest.raises(DataError, match="md5 .* expected c58f30108f718f92721af3b95e74349a"):
        fetch_data(tgz, tmp_path / "data")
    monkeypatch.setattr(download, "TORCHVISION_MD5", hashlib.md5(tgz.read_bytes()).hexdigest())
    got = fetch_data(tgz, tmp_path / "data")
    assert got.action == "extracted" and (tmp_path / "data" / "cifar-10-batches-py" / "test_batch").is_file()
    assert fetch_data(tgz, tmp_path / "data").action == "present" and data_problem(tmp_path / "data") is None
    (tmp_path / "data" / "cifar-10-batches-py" / "test_batch").unlink()
    assert "lacks test_batch" in data_problem(tmp_path / "data")


def test_the_command_says_in_one_line_how_to_get_the_data(tmp_path, capsys):
    assert commands.main(["data", "--dest", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "initmem data --from PATH" in err and "--download" in err
    assert commands.main(["data", "--from", str(tmp_path / "nowhere.tar.gz"), "--dest", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_real_archive_is_the_study_s(tmp_path):
    archive = cifar10_archive_path()
    if archive is None:
        pytest.skip(NO_ARCHIVE)
    got = fetch_data(archive, tmp_path / "data")
    assert got.digest == f"sha256:{JPEG_SHA256}" and got.note == ""


def study_copy(tmp_path: Path) -> Path:
    """A clone's params/ and notebooks/ for section 01, with no data beside it."""
    (tmp_path / "params").mkdir()
    shutil.copy(REPO / "params" / "01_optimizers.yaml", tmp_path / "params")
    shutil.copytree(REPO / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("*.ipynb"))
    return tmp_path / "params" / "01_optimizers.yaml"


def test_a_sweep_without_data_stops_before_any_point(tmp_path, capsys, monkeypatch):
    from initmem.study import sweep
    from initmem.study.preflight import preflight

    params = study_copy(tmp_path)
    monkeypatch.setattr(sweep, "execute_notebook", lambda *a, **k: pytest.fail("a notebook was executed"))
    monkeypatch.chdir(tmp_path)
    assert commands.main(["sweep", str(params), "--profile", "cpu_w025"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no CIFAR-10 data at" in err[0] and "`initmem data" in err[0]
    assert not (tmp_path / "results").exists()
    assert commands.main(["sweep", str(params), "--profile", "cpu_w025", "--dry-run"]) == 2
    out = capsys.readouterr()
    assert "5 would-run" in out.out and "no CIFAR-10 data at" in out.err  # the dry run says the data is missing
    archive = tree_archive(tmp_path / "cifar.tar.gz")
    assert commands.main(["data", "--from", str(archive), "--sha256", sha(archive), "--dest", "data"]) == 0
    assert preflight([sweep.load_section(params)], "cpu_w025", None) == []
    assert commands.main(["sweep", str(params), "--profile", "cpu_w025", "--dry-run"]) == 0
    assert capsys.readouterr().err == ""


def test_preflight_names_an_unwritable_results_folder_and_a_missing_device(tmp_path):
    from initmem.study.preflight import _device_problem, _writable_problem

    (tmp_path / "a-file").write_text("")
    assert "is a file" in _writable_problem(tmp_path / "a-file" / "results")
    assert _writable_problem(tmp_path / "new" / "deeper") is None and not (tmp_path / "new").exists()
    assert _device_problem("cpu") is None
    import torch
    if not torch.cuda.is_available():
        assert "CUDA is not available" in _device_problem("cuda")




# --- downloads: every network wait bounded, progress, one line naming the route ----------------------------------
@pytest.fixture
def no_proxy_env(monkeypatch):
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)


@contextlib.contextmanager
def listening(serve):
    """A socket on 127.0.0.1 whose every connection is handed to `serve(conn)` in a thread; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def handle(conn):
        with contextlib.suppress(OSError):  # a client that hangs up mid-answer (a test's point, or its end)
            serve(conn)

    def accept():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                held.append(conn)
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone would leave it listening)
        server.close()
        for conn in held:
            conn.close()


def closed_port() -> int:
    """A port of 127.0.0.1 where nothing listens: connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def silent(conn):
    """Accepts and never answers."""


def test_a_silent_proxy_is_given_up_on_in_one_line_leaving_nothing(tmp_path, capsys, monkeypatch, no_proxy_env):
    monkeypatch.setattr(download, "TIMEOUT_S", 1.0)  # the default (30 s) bounds it the same way, slower
    with listening(silent) as port:
        monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{port}")
        t0 = time.monotonic()
        assert commands.main(["data", "--download", "--dest", str(tmp_path / "data")]) == 2
        seconds = time.monotonic() - t0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"through the proxy http://127.0.0.1:{port} (https_proxy)" in err[0], err
    assert "--from PATH" in err[0]  # why it gave up (no answer, a slow lookup) depends on the machine's load
    assert seconds < 30 and list((tmp_path / "data").iterdir()) == []  # bounded: 1 s per wait, not forever


def test_a_download_that_stalls_or_is_refused_ends_in_one_line(tmp_path, capsys, monkeypatch, no_proxy_env):
    def stall(conn):  # answers, sends a tenth of the body, then nothing
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 10_000)

    monkeypatch.setattr(download, "TIMEOUT_S", 1.0)
    with listening(stall) as port:
        monkeypatch.setattr(fetch, "TORCHVISION_URL", f"http://127.0.0.1:{port}/cifar-10-python.tar.gz")
        assert commands.main(["data", "--download", "--dest", str(tmp_path / "data")]) == 2
    *progress, err = capsys.readouterr().err.splitlines()
    assert progress == ["downloading cifar-10-python.tar.gz: 0.0 of 0.1 MB (10 %), " + progress[0].split(", ")[-1]]
    assert "directly (no proxy set)" in err and "no answer within 1 s" in err, err
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{closed_port()}")
    assert commands.main(["data", "--download", "--dest", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "through the proxy" in err[0] and "ConnectionRefusedError" in err[0], err
    assert list((tmp_path / "data").iterdir()) == []


def test_a_download_shows_its_progress_and_is_checked_by_md5(tmp_path, capsys, monkeypatch, no_proxy_env):
    body = torchvision_tgz(tmp_path / "served.tar.gz", size=300_000).read_bytes()

    def serve(conn):
        conn.recv(65536)
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        conn.close()

    with listening(serve) as port:
        monkeypatch.setattr(fetch, "TORCHVISION_URL", f"http://127.0.0.1:{port}/cifar-10-python.tar.gz")
        with pytest.raises(DataError, match="md5 .* expected c58f30108f718f92721af3b95e74349a"):
            fetch_data(dest=tmp_path / "data", download=True)  # not torchvision's bytes: never installed
        assert list((tmp_path / "data").iterdir()) == []
        monkeypatch.setattr(download, "TORCHVISION_MD5", hashlib.md5(body).hexdigest())
        got = fetch_data(dest=tmp_path / "data", download=True)
        class Full(io.BytesIO):
            def write(self, data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        with pytest.raises(OSError) as full:  # the disk's error, for fetch_data to name as one: no network advice
            download.download(fetch.TORCHVISION_URL, Full(), fix="unused", progress=False)
        assert full.value.errno == errno.ENOSPC
    assert got.action == "downloaded" and (tmp_path / "data" / "cifar-10-batches-py" / "test_batch").is_file()
    progress = capsys.readouterr().err.splitlines()
    assert progress[-1].startswith("downloading cifar-10-python.tar.gz: ") and "(100 %)" in progress[-1], progress
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["cifar-10-batches-py"]  # no temporary left


# --- one run at a time, each installing what it hashed -----------------------------------------------------------
def test_a_second_run_during_an_install_is_refused_and_the_first_installs_what_it_hashed(tmp_path, monkeypatch):
    """Run B starts while run A has packed and hashed its archive and not yet installed it (the moment A writes its
    sidecar): B is one line, A installs the bytes it hashed, and nothing else is left in data/."""
    a_tree, b_tree, dest = image_tree(tmp_path / "a"), image_tree(tmp_path / "b"), tmp_path / "data"
    (b_tree / "test" / "c0" / "0.jpg").write_bytes(b"other bytes")  # B would pack another archive
    real, refused = fetch.atomic_write, []

    def write_then_b(path, data):
        if path.name.endswith(".sha256") and not refused:  # A, between its hash and its install
            with pytest.raises(DataError) as b:
                fetch_data(b_tree, dest)
            refused.append(str(b.value))
        return real(path, data)

    monkeypatch.setattr(fetch, "atomic_write", write_then_b)
    a = fetch_data(a_tree, dest)
    assert refused and f"another `initmem data` is installing CIFAR-10 into {dest}" in refused[0]
    assert a.digest == f"sha256:{sha(dest / JPEG_ARCHIVE)}" and data_problem(dest) is None
    assert sorted(p.name for p in dest.iterdir()) == [JPEG_ARCHIVE, f"{JPEG_ARCHIVE}.sha256"]
    assert fetch_data(b_tree, dest).action == "present"  # once A is done, B finds its data


# --- where: the repository's data/, whatever the working folder ---------------------------------------------------
def test_data_goes_to_the_repository_s_data_folder_from_any_folder_in_it(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(REPO / ".gitignore", repo / ".gitignore")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.setattr(fetch, "REPOSITORY", repo)
    monkeypatch.setattr(fetch, "DATA_FOLDER", repo / "data")
    monkeypatch.chdir(repo / "notebooks")
    archive = tree_archive(tmp_path / "cifar.tar.gz")
    assert commands.main(["data", "--from", str(archive), "--sha256", sha(archive), "--dest", "data"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"is not {repo / 'data'}, the folder every profile reads" in err[0], err
    assert commands.main(["data", "--from", str(archive), "--sha256", sha(archive)]) == 0
    assert (repo / "data" / JPEG_ARCHIVE).is_file() and not (repo / "notebooks" / "data").exists()
    assert commands.main(["data", "--dest", "../data"]) == 0 and "nothing done" in capsys.readouterr().out
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout.split() == ["??", ".gitignore"]  # data/ is ignored


# --- the OS's refusals and what a file looks like: one line each ------------------------------------------------
def test_os_errors_are_one_line_naming_the_path_and_errno(tmp_path, capsys, monkeypatch):
    archive = tree_archive(tmp_path / "cifar.tar.gz")
    (loop := tmp_path / "loop").symlink_to(loop)
    assert commands.main(["data", "--from", str(archive), "--dest", str(loop)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "symlink loop" in err[0], err
    for code, where in ((errno.ENOSPC, None), (errno.EROFS, "somewhere")):
        def refuse(*a, code=code, where=where):
            raise OSError(code, os.strerror(code), *([where] if where else []))

        with monkeypatch.context() as m:
            m.setattr(fetch.shutil, "copyfileobj", refuse)
            assert commands.main(["data", "--from", str(archive), "--sha256", sha(archive), "--dest",
                                  str(tmp_path / "data")]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and f"({errno.errorcode[code]})" in err[0] and (where or str(tmp_path / "data")) in err[0]
        assert list((tmp_path / "data").iterdir()) == []  # its temporary file removed


def test_a_file_too_large_for_the_file_system_is_one_line(tmp_path):
    """A real EFBIG: the CLI under `ulimit -f` of 4 KiB copies a larger archive."""
    archive = tree_archive(tmp_path / "big.tar.gz", size=1000)  # 20 kB
    proc = subprocess.run([sys.executable, "-m", "initmem.cli", "data", "--from", str(archive), "--sha256",
                           sha(archive), "--dest", str(tmp_path / "data")], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)), timeout=120)
    err = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "(EFBIG)" in err[0] and "ulimit -f" in err[0], proc.stderr
    assert list((tmp_path / "data").iterdir()) == []


def test_the_advice_fits_what_the_file_is(tmp_path):
    dest = tmp_path / "data"
    (fake := tmp_path / "cifar-10-python.tar.gz").write_bytes(os.urandom(1000))
    with pytest.raises(DataError, match=r"md5 \w+, expected c58f30108f718f92721af3b95e74349a \(torchvision's"):
        fetch_data(fake, dest)  # torchvision's name: its md5, never --sha256
    (empty := tmp_path / JPEG_ARCHIVE).write_bytes(b"")
    with pytest.raises(DataError, match="is an empty file") as exc:
        fetch_data(empty, dest)
    assert "e3b0c442" not in str(exc.value)  # the empty file's hash is no fix
    (noise := tmp_path / "mine.tar.gz").write_bytes(os.urandom(1000))
    with pytest.raises(DataError, match=r"not a \.tar\.gz \(no gzip header\)") as exc:
        fetch_data(noise, dest)
    assert "--sha256" not in str(exc.value)
    (cut := tmp_path / "cut.tar.gz").write_bytes(tree_archive(tmp_path / "whole.tar.gz").read_bytes()[:-30])
    with pytest.raises(DataError, match="corrupt or truncated") as exc:
        fetch_data(cut, dest)
    assert "--sha256" not in str(exc.value) and list(dest.iterdir()) == []
