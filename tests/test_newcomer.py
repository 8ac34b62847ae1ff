"""The last rough edges of a newcomer's path: `make report` on a fresh clone says what it needs and the exact command
that makes it, and the smaller one-line errors name what was given (a folder for a notebook, an archive path, a
synthetic size)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from initmem.cli.commands import main
from initmem.errors import ConfigError, DataError, ResultsError
from initmem.figures.report import find_notebooks

ROOT = Path(__file__).resolve().parents[1]


def test_make_report_reads_where_make_smoke_writes_and_says_how_to_make_it(tmp_path):
    proc = subprocess.run(["make", "-n", "-o", ".venv/.installed", "report", "VENV=.venv"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert "initmem report --results results/smoke --out reports" in proc.stdout
    with pytest.raises(ResultsError) as err:
        find_notebooks(tmp_path / "results" / "smoke")  # a fresh clone: no results/smoke yet
    assert "does not exist" in str(err.value) and "`make smoke`" in str(err.value) and "\n" not in str(err.value)
    if (ROOT / "results" / "cpu").is_dir() and not list((ROOT / "results" / "cpu").glob("**/notebooks/*.ipynb")):
        with pytest.raises(ResultsError, match=r"it holds \d+ runs\): executed notebooks are build products .* "
                                               r"--profile smoke --results results/smoke"):
            find_notebooks(ROOT / "results" / "cpu")


def test_a_folder_given_as_the_notebook_is_named_a_folder(capsys):
    assert main(["run", str(ROOT / "notebooks")]) == 2
    err = capsys.readouterr().err
    assert "is a folder" in err and "does not exist" not in err and err.count("\n") == 1


def test_an_archive_path_is_answered_as_an_archive_not_with_download(tmp_path):
    from initmem.data.sources import load_cifar10

    missing = tmp_path / "cifar10-jpeg.tar.gz"
    for source in ("auto", "imagefolder", "torchvision"):
        with pytest.raises(DataError) as err:
            load_cifar10(missing, source=source)
        first = str(err.value).split(":")[0] + str(err.value).split(":")[1]
        assert str(missing) in str(err.value) and "download" not in first, (source, str(err.value))


def test_the_synthetic_size_names_what_it_is_made_of():
    from initmem.data.sources import make_synthetic

    with pytest.raises(ConfigError, match=r"synthetic data of 2000050 training images \(TrainConfig's n_train \+ "
                                          r"n_val\) is invalid: .*n_train \+ n_val <= 1000000"):
        make_synthetic(2_000_050, 100)
