"""Provenance a reader can follow: run records name the data by its path relative to the repository (or its file
name; `data_hash` is its content), never by a path of the machine that trained it; a run from a modified working
tree records what the modification was; `initmem migrate` relabels older records (every number kept, the history
untouched); and no committed file holds this checkout's absolute path."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from initmem.figures.artefacts import Stamp
from initmem.store import provenance
from initmem.store.migrate import migrate
from initmem.store.results import load_runs

ROOT = Path(__file__).resolve().parents[1]
HAS_GIT = shutil.which("git") is not None


@pytest.mark.parametrize("given, stored", [
    (f"imagefolder-tar:{ROOT.parent}/datasets/cifar10-jpeg.tar.gz", "imagefolder-tar:cifar10-jpeg.tar.gz"),
    ("imagefolder-tar:../elsewhere/data/cifar10-jpeg.tar.gz", "imagefolder-tar:cifar10-jpeg.tar.gz"),
    (f"imagefolder-tar:{ROOT}/../sweep/data/c.tar.gz", "imagefolder-tar:c.tar.gz"),
    (f"imagefolder-tar:{ROOT}/data/../data/c.tar.gz", "imagefolder-tar:data/c.tar.gz"),
    (f"imagefolder:{ROOT}/data/cifar10", "imagefolder:data/cifar10"),
    ("torchvision:/mnt/some/machine/datasets/cifar-10-batches-py", "torchvision:cifar-10-batches-py"),
    ("imagefolder-tar:data/x.tar.gz", "imagefolder-tar:data/x.tar.gz"),
    ("synthetic:2050+500:seed0", "synthetic:2050+500:seed0"),
])
def test_a_data_source_is_stored_without_the_machines_path(given, stored):
    assert provenance.portable_source(given) == stored
    assert provenance.portable({"git_dirty": False, "data_source": given})["data_source"] == stored


@pytest.mark.parametrize("given, stored", [("data", "data"), ("../elsewhere/data/c.tar.gz", "c.tar.gz"),
                                           (f"{ROOT}/data/x.tar.gz", "data/x.tar.gz"), ("/mnt/d/x.tar.gz", "x.tar.gz")])
def test_a_records_data_root_names_no_place_outside_the_repository(given, stored):
    assert provenance.portable_config({"data_root": given, "lr": 0.1}) == {"data_root": stored, "lr": 0.1}


@pytest.mark.skipif(not HAS_GIT, reason="needs git")
def test_a_modified_tree_records_its_diff_and_the_training_paths_diff(tmp_path):
    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@invalid", *args], cwd=tmp_path,
                              check=True, capture_output=True).stdout

    (tmp_path / "initmem").mkdir()
    (tmp_path / "initmem" / "train.py").write_text("lr = 0.1\n")
    (tmp_path / "notes.md").write_text("a\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "x")
    assert provenance.git_diff(tmp_path) is None  # clean
    (tmp_path / "initmem" / "train.py").write_text("lr = 0.2\n")
    (tmp_path / "notes.md").write_text("b\n")
    d = provenance.git_diff(tmp_path)
    assert d["sha256"] == hashlib.sha256(git("diff", "HEAD", "--no-color", "--no-ext-diff")).hexdigest()
    assert d["files"] == ["initmem/train.py", "notes.md"]
    assert "-lr = 0.1" in d["training_path"] and "+lr = 0.2" in d["training_path"] and "notes" not in d[
        "training_path"]
    assert d["training_path_sha256"] == hashlib.sha256(d["training_path"].encode()).hexdigest()


def test_migrate_relabels_an_older_record_keeping_every_number(tmp_path):
    """A committed run as it was (absolute data path, a modified tree and no diff): migrate names the data by its
    relative path, marks the diff unknown, leaves every other value and history.csv as they were."""
    src = next((ROOT / "results" / "cpu" / "01_optimizers").iterdir())
    run = tmp_path / "cpu" / "01_optimizers" / src.name
    shutil.copytree(src, run)
    rec = json.loads((run / "run.json").read_text())
    prov = {k: v for k, v in rec["provenance"].items() if k != "git_diff"}
    prov.update(git_dirty=True, data_source=f"imagefolder-tar:{ROOT.parent}/datasets/cifar10-jpeg.tar.gz")
    config = {**rec["config"], "data_root": f"{ROOT.parent}/datasets/cifar10-jpeg.tar.gz"}
    (run / "run.json").write_text(json.dumps({**rec, "config": config, "provenance": prov}, indent=2) + "\n")
    history = (run / "history.csv").read_bytes()
    assert migrate(tmp_path) == [run / "run.json"] and migrate(tmp_path) == []
    new = json.loads((run / "run.json").read_text())
    assert new["provenance"]["data_source"] == "imagefolder-tar:cifar10-jpeg.tar.gz"
    assert new["config"] == {**rec["config"], "data_root": "cifar10-jpeg.tar.gz"}
    assert new["provenance"]["git_diff"] == provenance.UNKNOWN_DIFF and str(ROOT.parent) not in (run / "run.json"
                                                                                                 ).read_text()
    keep = {"provenance", "config"}
    assert {k: v for k, v in new.items() if k not in keep} == {k: v for k, v in rec.items() if k not in keep}
    assert (run / "history.csv").read_bytes() == history
    runs = load_runs(tmp_path)
    assert not runs["git_diff_known"].iloc[0] and runs["data_hash"].iloc[0] == rec["provenance"]["data_hash"]
    caption = Stamp.of(runs, tmp_path / "cpu", ["01_optimizers"]).caption()
    assert "1 of 1 runs trained with uncommitted changes that were not recorded" in caption
    assert f"CIFAR-10 (JPEG archive) sha256:{rec['provenance']['data_hash'][:12]}" in caption


@pytest.mark.skipif(not HAS_GIT or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_no_committed_file_holds_the_absolute_path_of_this_checkout():
    found = subprocess.run(["git", "grep", "-l", "-F", str(ROOT.parent) + "/", "--", ".", ":!tests/test_provenance.py"],
                           cwd=ROOT, capture_output=True, text=True)
    assert found.returncode == 1 and found.stdout == "", found.stdout  # 1: nothing found
    for rec in (ROOT / "results").rglob("run.json"):  # nor a place outside it: a path inside, or a file name
        record = json.loads(rec.read_text())
        for path in (record["provenance"]["data_source"].split(":", 1)[1], record["config"]["data_root"]):
            assert not path.startswith("/") and ".." not in Path(path).parts, (rec, path)
