"""`initmem data` (initmem.data.fetch) and a sweep's preflight (initmem.study.preflight): CIFAR-10 put into data/ by
one command, checked by its hash, idempotent, a corrupt file named and never used; a sweep without its data prints
one line naming `initmem data` and runs no notebook."""

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import NO_ARCHIVE, REPO, cifar10_archive_path

from initmem.cli import commands
from initmem.data import fetch
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


def tree_archive(path: Path, classes=CLASSES) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for split in ("train", "test"):
            for c in classes:
                data = f"{split}{c}".encode()
                info = tarfile.TarInfo(f"{split}/{c}/0.jpg")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
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
    tgz = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        for name in fetch.TORCHVISION_FILES:
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(DataError, match="md5 .* expected c58f30108f718f92721af3b95e74349a"):
        fetch_data(tgz, tmp_path / "data")
    monkeypatch.setattr(fetch, "TORCHVISION_MD5", hashlib.md5(tgz.read_bytes()).hexdigest())
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
    assert commands.main(["data", "--from", str(archive), "--sha256", sha(archive)]) == 0
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


