"""`initmem figures` never destroys: a results tree without runs is an error before anything is written, a committed
figure set is written only from its own results tree, any other tree writes `<results>/figures` by default, a folder
holding other files is refused unless asked, and relative paths mean the folder the user stands in."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_figures import write_fake_results

from initmem.cli.commands import main
from initmem.errors import ConfigError
from initmem.figures import artefacts

ROOT = artefacts.ROOT


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_results_tree_without_runs_is_named_with_what_it_holds_and_nothing_is_written(tmp_path, capsys):
    images = tmp_path / "cifar"
    for d in ("train/cat", "test/cat"):
        (images / d).mkdir(parents=True)
    out = tmp_path / "out"
    assert main(["figures", "--results", str(images), "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys)
    assert str(images) in err and "holds no runs" in err and "test/, train/" in err
    (tmp_path / "empty").mkdir()
    assert main(["figures", "--results", str(tmp_path / "empty"), "--no-progress"]) == 2
    assert "it is empty" in _one_line_error(capsys)
    assert not out.exists() and not (tmp_path / "empty" / "figures").exists()


@pytest.mark.parametrize("target", ["figures", "figures/cpu_steps", "figures/cpu_w025", "figures/tables"])
def test_a_committed_set_is_written_only_from_its_own_tree(tmp_path, capsys, target):
    tree = write_fake_results(tmp_path / "smoke", sections=("03_lr_l2",))
    before = _snapshot(ROOT / "figures")
    assert main(["figures", "--results", str(tree), "--out", str(ROOT / target), "--no-progress"]) == 2
    err = _one_line_error(capsys)
    assert "committed figure set" in err and str(tree / "figures") in err and "--overwrite" in err
    assert _snapshot(ROOT / "figures") == before
    # the committed trees' own sets are theirs to write (nothing is written by the check itself)
    for results, out, _ in artefacts.COMMITTED_SETS:
        artefacts.check_out(ROOT / results, ROOT / out)
    with pytest.raises(ConfigError, match="made from results/cpu_steps only"):
        artefacts.check_out(ROOT / "results" / "cpu", ROOT / "figures" / "cpu_steps")
    artefacts.check_out(tree, ROOT / target, overwrite=True)  # asked explicitly


def test_a_folder_holding_other_files_is_refused_unless_asked(tmp_path, capsys):
    tree = write_fake_results(tmp_path / "smoke", sections=("03_lr_l2",))
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# my project\n")
    assert main(["figures", "--results", str(tree), "--out", str(project), "--no-progress"]) == 2
    assert "no figures index" in _one_line_error(capsys)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    assert main(["figures", "--results", str(tree), "--out", str(tmp_path / "notes"), "--no-progress"]) == 2
    assert "holds other files (a.txt)" in _one_line_error(capsys)
    assert [p.name for p in project.iterdir()] == ["README.md"]
    assert (project / "README.md").read_text() == "# my project\n"
    artefacts.check_out(tree, project, overwrite=True)


def test_relative_paths_are_the_shells_and_another_tree_writes_beside_its_results(tmp_path, monkeypatch, capsys):
    """From another folder, `--results smoke` is ./smoke and its figures go to ./smoke/figures (the notebooks are
    handed those absolute paths; running them is test_figures' part); the committed figures/ are not touched, and
    a second run into that folder (an earlier output) is accepted."""
    import initmem.study.notebook

    write_fake_results(tmp_path / "smoke", sections=("03_lr_l2",))
    before, handed = _snapshot(ROOT / "figures"), []
    monkeypatch.setattr(initmem.study.notebook, "execute_notebook", lambda nb, output, params, **kw: handed.append(
        (Path(nb).stem, params)))
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert main(["figures", "--results", "smoke", "--notebooks", "03_lr_l2", "--no-progress"]) == 0
    assert handed == [("03_lr_l2", {"results_dir": str(tmp_path / "smoke"),
                                    "out_dir": str(tmp_path / "smoke" / "figures")})] * 2
    assert f"index: {tmp_path / 'smoke' / 'figures' / 'README.md'}" in capsys.readouterr().out
    assert (tmp_path / "smoke" / "figures" / "README.md").read_text().startswith(artefacts.INDEX_HEAD)
    assert _snapshot(ROOT / "figures") == before


def test_make_figures_passes_only_what_the_user_gave():
    """`make figures RESULTS=tree` runs `initmem figures --results tree` (the command's default folder, never the
    committed figures/), `make figures` every committed set; `make reproduce` leaves the folder to the command."""
    def dry(*args: str, target: str = "figures") -> str:
        # --no-print-directory: under `make test` (CI) this make is a sub-make, which would print its directory
        proc = subprocess.run(["make", "-n", "--no-print-directory", "-o", ".venv/.installed", target, "VENV=.venv",
                               *args], cwd=ROOT, capture_output=True, text=True, check=True)
        return " ".join(proc.stdout.split())

    assert dry("RESULTS=some/tree") == ".venv/bin/initmem figures --results some/tree"
    assert dry() == ".venv/bin/initmem figures"
    assert dry("RESULTS=t", "OUT=o") == ".venv/bin/initmem figures --results t --out o"
    # make reproduce PROFILE=paper draws results/paper's figures beside them, not into the committed figures/
    assert dry("PROFILE=paper", target="reproduce").endswith(".venv/bin/initmem figures --results results/paper")


def test_a_figure_notebook_refuses_a_committed_set_of_another_tree_too(tmp_path, monkeypatch):
    """JupyterLab: a notebook whose results_dir was changed but whose out_dir is still the committed figures."""
    tree = write_fake_results(tmp_path / "smoke", sections=("03_lr_l2",))
    with pytest.raises(ConfigError, match="committed figure set figures/"):
        artefacts.FigureBook(tree, "figures", "03_lr_l2")
    artefacts.FigureBook(tree, tmp_path / "mine", "03_lr_l2")  # any other folder: the notebook fills it as it runs
    monkeypatch.setenv(artefacts.OVERWRITE_ENV, "1")  # what make_figures(overwrite=True) sets for its notebooks
    assert artefacts.FigureBook(tree, "figures", "03_lr_l2").out_dir == ROOT / "figures"
