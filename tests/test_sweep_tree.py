"""A sweep never retrains a run that can be read: records of an older schema stop it before anything trains (naming
`initmem migrate`), a renamed run folder is moved back (swapped ones swapped back), a copy is set aside with one line
(so the tree stays loadable), a record whose run id is not its config's is set aside, a valid run is never set aside
because of a neighbour, and a point two params files share is listed once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_damaged_results import to_schema_1
from test_sweep import _repo

from initmem.cli import commands
from initmem.config import point_configs
from initmem.errors import ResultsError
from initmem.store.folders import DAMAGED_DIR
from initmem.store.results import load_runs, verify_run
from initmem.study.point import train_point
from initmem.study.sweep import load_section, run_sweep

ONE = """\
    smoke:
      fixed: {data: synthetic, width: 0.0625, epochs: 1, batch_size: 32, n_train: 64, n_val: 32, n_test: 32,
              sigma_ws: [0.5], device: cpu}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_torch_thread) -> tuple[Path, Path]:
    """A params file of one point with one run, and a results tree where that run is complete."""
    from initmem.engine.trainer import train

    root = tmp_path_factory.mktemp("repo")
    path = _repo(root, ONE)
    section = load_section(path)
    (config,) = point_configs(section.effective(section.points("smoke", root / "out")[0]))
    train(config, out_dir=root / "out", section="t", progress=False)
    return path, root / "out"


@pytest.fixture
def tree(trained, tmp_path) -> tuple[Path, Path, Path]:
    path, out = trained
    out = Path(shutil.copytree(out, tmp_path / "out"))
    (run,) = [p for p in (out / "t").iterdir() if p.is_dir()]
    return path, out, run


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix != ".lock"}


def test_a_sweep_over_schema_1_records_trains_nothing_and_names_migrate(tree, capsys):
    path, out, run = tree
    rec = json.loads((run / "run.json").read_text())
    to_schema_1(rec)
    (run / "run.json").write_text(json.dumps(rec, indent=2) + "\n")
    before = _files(out)
    assert commands.main(["sweep", str(path), "--profile", "smoke", "--results", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "older schema" in err and f"initmem migrate {out}" in err
    assert str(run / "run.json") in err and "nothing was trained" in err
    assert _files(out) == before and not (out / "t" / DAMAGED_DIR).exists()
    # a notebook run directly (train_point) stops too, instead of setting the run aside and retraining it
    section = load_section(path)
    configs = point_configs(section.effective(section.points("smoke", out)[0]))
    with pytest.raises(ResultsError, match="initmem migrate"):
        train_point(configs, results=out, section="t", progress=False)
    assert _files(out) == before
    assert commands.main(["migrate", str(out)]) == 0  # what it names works, and then the point is complete
    report = run_sweep(path, profile="smoke", results=out, progress=False)
    assert [p.status for p in report.points] == ["skipped"]


def test_a_copy_of_a_run_folder_is_set_aside_in_one_line_and_the_tree_loads(tree, capsys):
    path, out, run = tree
    copy = run.with_name(run.name + " (copy)")
    shutil.copytree(run, copy)
    with pytest.raises(ResultsError, match="2 folders"):
        load_runs(out)
    report = run_sweep(path, profile="smoke", results=out, dry_run=True)
    assert f"run {run.name}: {copy} would be set aside" in capsys.readouterr().out and copy.is_dir()
    report = run_sweep(path, profile="smoke", results=out, progress=False)
    text = capsys.readouterr().out
    assert [p.status for p in report.points] == ["skipped"]  # the run itself is complete: nothing trains
    lines = [line for line in text.splitlines() if copy.name in line]
    assert len(lines) == 1 and "is a copy of" in lines[0] and "set aside to" in lines[0]
    assert not copy.exists() and len(list((out / "t" / DAMAGED_DIR).iterdir())) == 2  # the folder and its note
    assert list(load_runs(out)["run_id"]) == [run.name]


def test_a_renamed_run_folder_is_moved_back_not_retrained(tree, capsys):
    path, out, run = tree
    before = _files(run)
    renamed = run.rename(run.with_name("backup-of-my-run"))
    report = run_sweep(path, profile="smoke", results=out, progress=False)
    assert [p.status for p in report.points] == ["skipped"]
    assert f"{renamed} is a renamed run folder; moved back to {run}" in capsys.readouterr().out
    assert verify_run(run)["run_id"] == run.name and not renamed.exists()
    assert {Path(k).name: v for k, v in _files(run).items()} == {Path(k).name: v for k, v in before.items()}


def test_a_point_two_params_files_share_is_listed_and_counted_once(tmp_path, capsys):
    path = _repo(tmp_path, ONE)
    twin = path.with_name("t_again.yaml")
    twin.write_text(path.read_text())
    argv = ["sweep", str(path), str(path), str(twin), "--profile", "smoke", "--dry-run", "--results",
            str(tmp_path / "out")]
    assert commands.main(argv) == 0
    out = capsys.readouterr().out
    (point,) = load_section(path).points("smoke", tmp_path / "out")
    assert out.count(point.point_id) == 1 and out.count("already listed by an earlier params file") == 2
    assert "total: 1 run," in out and out.count("total: 0 runs") == 2


ONE_TWO = ONE.replace("sigma_ws: [0.5]", "sigma_ws: [0.5, 2.0]")


@pytest.fixture(scope="module")
def trained_two(tmp_path_factory, one_torch_thread) -> tuple[Path, Path]:
    """A params file of one point with two runs, both complete in a results tree."""
    from initmem.engine.trainer import train

    root = tmp_path_factory.mktemp("repo2")
    path = _repo(root, ONE_TWO)
    section = load_section(path)
    for config in point_configs(section.effective(section.points("smoke", root / "out")[0])):
        train(config, out_dir=root / "out", section="t", progress=False)
    return path, root / "out"


def _sweep_lines(path: Path, out: Path, capsys) -> tuple[list[str], str]:
    report = run_sweep(path, profile="smoke", results=out, progress=False)
    cap = capsys.readouterr()
    assert "Warning" not in cap.out + cap.err, cap.out + cap.err  # one line each, no warning with its source line
    return [p.status for p in report.points], cap.out


def test_two_swapped_run_folders_are_swapped_back_and_nothing_is_set_aside_or_trained(trained_two, tmp_path, capsys):
    path, out = trained_two
    out = Path(shutil.copytree(out, tmp_path / "out"))
    a, b = sorted(p for p in (out / "t").iterdir() if p.is_dir())
    before = {a.name: _files(a), b.name: _files(b)}
    a.rename(out / "t" / "tmp")
    b.rename(a)
    (out / "t" / "tmp").rename(b)  # a holds b's run, b holds a's
    statuses, text = _sweep_lines(path, out, capsys)
    assert statuses == ["skipped"] and "set aside" not in text
    assert f"run {a.name}: {b} is a renamed run folder; moved back to {a}" in text
    assert f"run {b.name}: {a} is a renamed run folder; moved back to {b}" in text
    assert not (out / "t" / DAMAGED_DIR).exists() and sorted(load_runs(out)["run_id"]) == [a.name, b.name]
    for run in (a, b):
        assert {Path(k).name: v for k, v in _files(run).items()} == {
            Path(k).name: v for k, v in before[run.name].items()}


def test_a_damaged_run_beside_its_valid_copy_is_set_aside_and_the_copy_is_the_run(tree, capsys):
    path, out, run = tree
    copy = Path(shutil.copytree(run, run.with_name("my backup")))
    good = _files(copy)
    history = run / "history.csv"
    history.write_text(history.read_text().replace("0.", "9.", 1))  # the run's own folder is damaged
    statuses, text = _sweep_lines(path, out, capsys)
    assert statuses == ["skipped"]  # its valid copy is the run: nothing trains
    (line,) = [x for x in text.splitlines() if f"{run}" in x and "set aside" in x]
    assert "is damaged, and" in line and f"{copy} is a copy of its run that verifies" in line
    assert f"{copy} is a renamed run folder; moved back to {run}" in text
    assert verify_run(run)["run_id"] == run.name and not copy.exists()
    assert [Path(k).name for k in _files(run)] == [Path(k).name for k in good]
    # the other way round: a damaged copy beside the valid run is the one set aside, the run stays
    bad = Path(shutil.copytree(run, run.with_name("old")))
    (bad / "history.csv").write_text("epoch\n")
    statuses, text = _sweep_lines(path, out, capsys)
    assert statuses == ["skipped"] and f"run {run.name}: {bad} is a damaged copy of run {run.name}" in text
    assert verify_run(run) and not bad.exists()


def test_a_renamed_folder_whose_run_id_was_edited_to_match_is_set_aside_once_and_its_run_trained_once(tree, capsys):
    path, out, run = tree
    mine = run.rename(run.with_name("mine"))
    rec = json.loads((mine / "run.json").read_text())
    rec["run_id"] = "mine"
    (mine / "run.json").write_text(json.dumps(rec, indent=2) + "\n")
    statuses, text = _sweep_lines(path, out, capsys)
    (line,) = [x for x in text.splitlines() if str(mine) in x]
    assert line.startswith(f"run {run.name}: {mine} is a record edited after it was written (run id 'mine'")
    assert "set aside to" in line and not mine.exists()
    assert statuses == ["ran"] and list(load_runs(out)["run_id"]) == [run.name]  # one run, no duplicate
    statuses, text = _sweep_lines(path, out, capsys)
    assert statuses == ["skipped"] and "set aside" not in text


def test_a_results_symlink_loop_or_empty_path_is_one_line_before_any_point(tmp_path, capsys):
    path = _repo(tmp_path, ONE)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for results, said in ((str(tmp_path / "loop"), "is a symlink loop"), ("", "is invalid")):
        assert commands.main(["sweep", str(path), "--profile", "smoke", "--results", results, "--dry-run"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"results={results!r} {said}: a results folder is accepted" in err, err
