"""`initmem figures` never destroys: a results tree without runs, or a path at another level than a tree's root, is an
error before anything is written, a committed figure set is written only from its own results tree, any other tree
writes `<results>/figures` by default, a folder holding other files is refused unless asked (the repository or a
README.md even then), a set is one tree's (another's is refused or, asked, replaced whole), an interrupted run's
folder is its own, and relative paths mean the folder the user stands in."""

from __future__ import annotations

import json
import os
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
    with pytest.raises(ConfigError, match="the index would replace it"):  # --overwrite never replaces a README
        artefacts.check_out(tree, project, overwrite=True)
    artefacts.check_out(tree, tmp_path / "notes", overwrite=True)  # other files: the figures go beside them


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
    assert handed == [("03_lr_l2_figures", {"results_dir": str(tmp_path / "smoke"),
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


def _fake_notebook(calls: list | None = None, interrupt_at: str | None = None):
    """An `execute_notebook` that writes one artefact per notebook (its png and sidecar, as `save_figure` does) and
    raises KeyboardInterrupt (Ctrl-C) after the png of `interrupt_at`, before its sidecar."""
    def run(nb, output, params, **kw):
        out, stem = Path(params["out_dir"]), Path(nb).stem.removesuffix("_figures")  # the section
        (out / f"{stem}.png").write_bytes(b"png")
        if stem == interrupt_at:
            raise KeyboardInterrupt
        sidecar = {"name": stem, "kind": "figure", "title": stem, "caption": "c", "files": [f"{stem}.png"],
                   "results_dir": artefacts.display_path(params["results_dir"])}
        (out / f"{stem}.json").write_text(json.dumps(sidecar))
        if calls is not None:
            calls.append(stem)
    return run


def _index_names(out: Path) -> set[str]:
    text = (out / "README.md").read_text()
    return {r["name"] for r in artefacts.sidecars(out) if f"**{r['name']}**" in text}


def test_an_interrupted_run_is_finished_by_the_next_and_the_marker_goes_with_the_index(tmp_path, monkeypatch, capsys):
    import initmem.study.notebook

    tree, out = write_fake_results(tmp_path / "smoke", sections=("03_lr_l2",)), tmp_path / "figs"
    argv = ["figures", "--results", str(tree), "--out", str(out), "--notebooks", "01_optimizers", "03_lr_l2",
            "--no-progress"]
    monkeypatch.setattr(initmem.study.notebook, "execute_notebook", _fake_notebook(interrupt_at="03_lr_l2"))
    assert main(argv) == 130  # Ctrl-C: the first notebook's artefact is written, no index (as after a SIGKILL)
    assert (out / artefacts.MARKER).read_text() == f"{tree}\n" and not (out / "README.md").exists()
    assert {p.name for p in out.iterdir()} >= {"01_optimizers.png", "01_optimizers.json", "03_lr_l2.png"}
    monkeypatch.setattr(initmem.study.notebook, "execute_notebook", _fake_notebook())
    assert main(argv) == 0, capsys.readouterr().err  # the folder is known as this tree's own: the rerun finishes
    assert _index_names(out) == {"01_optimizers", "03_lr_l2"} and not (out / artefacts.MARKER).exists()
    # another tree's interrupted folder (its marker) is refused, never mixed into
    other = write_fake_results(tmp_path / "other", sections=("03_lr_l2",))
    (out / artefacts.MARKER).write_text(f"{tree}\n")
    capsys.readouterr()
    assert main(["figures", "--results", str(other), "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys)
    assert f"holds the figures of another results tree, {tree}" in err and "--overwrite replaces that set" in err


def test_a_set_is_one_trees_another_is_refused_or_replaced_whole(tmp_path, monkeypatch, capsys):
    import initmem.study.notebook

    a, b = (write_fake_results(tmp_path / n, sections=("03_lr_l2",)) for n in ("a", "b"))
    out = tmp_path / "figs"
    monkeypatch.setattr(initmem.study.notebook, "execute_notebook", _fake_notebook())
    assert main(["figures", "--results", str(a), "--out", str(out), "--notebooks", "01_optimizers", "03_lr_l2",
                 "--no-progress"]) == 0
    before = _snapshot(out)
    subset = ["figures", "--results", str(b), "--out", str(out), "--notebooks", "01_optimizers", "--no-progress"]
    capsys.readouterr()
    assert main(subset) == 2  # a subset of notebooks from another tree would leave a mixed set
    err = _one_line_error(capsys)
    assert f"another results tree, {a} (01_optimizers, 03_lr_l2)" in err and str(out) in err
    assert _snapshot(out) == before
    assert main([*subset, "--overwrite"]) == 0  # asked: the whole set is replaced, the index lists one tree's
    assert _index_names(out) == {"01_optimizers"} and not (out / "03_lr_l2.png").exists()
    assert {r["results_dir"] for r in artefacts.sidecars(out)} == {str(b)}


@pytest.mark.parametrize("level", ["candidates", "section", "run", "empty string"])
def test_a_results_path_at_another_level_than_a_trees_root_is_one_line_before_any_figure(tmp_path, monkeypatch,
                                                                                         capsys, level):
    import initmem.study.notebook

    for name in ("w0125", "w0125_rot"):
        write_fake_results(tmp_path / "hypotheses" / name, sections=("03_lr_l2",))
    section = tmp_path / "hypotheses" / "w0125" / "03_lr_l2"
    path = {"candidates": str(tmp_path / "hypotheses"), "section": str(section), "empty string": "",
            "run": str(next(p for p in section.iterdir() if p.is_dir()))}[level]
    monkeypatch.setattr(initmem.study.notebook, "execute_notebook", lambda *a, **k: pytest.fail("a figure was drawn"))
    assert main(["figures", "--results", path, "--out", str(tmp_path / "figs"), "--no-progress"]) == 2
    err = _one_line_error(capsys)
    assert f"results={path!r}" in err and "a results tree root (the folder holding section folders NN_name/" in err
    said = {"candidates": "holds results trees (w0125/, w0125_rot/)", "section": "is a section folder",
            "run": "is a run folder", "empty string": "is invalid"}[level]
    assert said in err and not (tmp_path / "figs").exists()
    with pytest.raises(ConfigError, match="results tree root"):  # a figure notebook run directly checks it too
        artefacts.FigureBook(path or "", tmp_path / "figs")


def test_the_repository_a_folder_of_code_and_a_symlink_loop_are_refused_even_with_overwrite(tmp_path, monkeypatch,
                                                                                             capsys):
    tree = write_fake_results(tmp_path / "smoke", sections=("03_lr_l2",))
    before = _snapshot(ROOT / "initmem")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    monkeypatch.chdir(ROOT)
    for out, said in ((".", "is the repository root"), ("initmem", "holds code (__init__.py)"),
                      (str(ROOT.parent), "holds the repository"), (str(tmp_path / "loop"), "is a symlink loop")):
        assert main(["figures", "--results", str(tree), "--out", out, "--overwrite", "--no-progress"]) == 2
        err = _one_line_error(capsys)
        assert f"out={out!r} {said}" in err and "a folder of its own" in err, err
    assert main(["figures", "--results", str(tmp_path / "loop"), "--no-progress"]) == 2
    assert f"results={str(tmp_path / 'loop')!r} is a symlink loop" in _one_line_error(capsys)
    assert _snapshot(ROOT / "initmem") == before and not (ROOT / "tables").exists()
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "ro").mkdir(mode=0o500)
        assert main(["figures", "--results", str(tree), "--out", str(tmp_path / "ro" / "f"), "--no-progress"]) == 2
        assert "cannot be written" in _one_line_error(capsys)
