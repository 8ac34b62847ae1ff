"""The five section notebooks and their params files: structure, and every smoke profile end to end.

The smoke sweeps of all five sections run once (module-scoped, two points at a time) through `run_sweep`, the
same path as `initmem sweep --profile smoke`; the tests then assert on the results they wrote.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
import shutil
from pathlib import Path

import jupytext
import nbformat
import pandas as pd
import pytest
import yaml

from initmem import metrics
from initmem.analysis.display import display_frame
from initmem.analysis.point_report import interpolation_rows
from initmem.analysis.tables import long_training_table
from initmem.config import TrainConfig, point_configs
from initmem.store import results
from initmem.store.folders import RunFolders
from initmem.store.results import load_runs, run_id
from initmem.study.params import load_section
from initmem.study.sweep import run_sweep

REPO = Path(__file__).resolve().parent.parent
SECTIONS = ("01_optimizers", "02_long_training", "03_lr_l2", "04_batch_size", "05_depth")
FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}
SIGMA_GRID = [0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5]
SECTION_FIELDS = {  # what each section is about: the TrainConfig fields its parameters cell may list
    "01_optimizers": {"optimizer", "lr", "momentum", "weight_decay"},
    "02_long_training": {"optimizer", "lr", "epochs", "checkpoint_every"},
    "03_lr_l2": {"optimizer", "lr", "weight_decay"},
    "04_batch_size": {"optimizer", "lr", "batch_size"},
    "05_depth": {"arch", "width", "optimizer"}}


# --- structure (no execution) ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SECTIONS)
def test_notebook_structure(name):
    nb = jupytext.read(REPO / "notebooks" / f"{name}.py")
    assert nb.metadata["kernelspec"] == {"display_name": "Python 3 (ipykernel)", "language": "python",
                                        "name": "python3"}
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "finding" in first.source.lower()
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert tagged == [1]  # one parameters cell, right after the markdown that says what is tested
    accepted = load_section(REPO / "params" / f"{name}.yaml").declared
    cell = [k for k, p in accepted.items() if p.in_cell]
    assert accepted["section"].default == name
    # the notebook's runs come from its checked namespace through config.point_configs, the function the sweep
    # uses: one call, no hand-written TrainConfig(...) to keep in step with the parameters cell
    code = [c.source for c in nb.cells if c.cell_type == "code"][1:]
    calls = [n for src in code for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)]
    names = [getattr(n.func, "id", None) or getattr(n.func, "attr", None) for n in calls]  # initmem.run_point(...)
    assert names.count("run_point") == 1 and names.count("checked_parameters") == 1 and "TrainConfig" not in names
    (run,) = [n for n in calls if getattr(n.func, "attr", None) == "run_point"]
    assert ast.unparse(run) == "initmem.run_point(initmem.checked_parameters(globals()))"  # the top-level API
    # the cell: the notebook-level names, then the TrainConfig fields this section's narrative discusses (each one
    # named in its markdown), nothing else; every other field is accepted from papermill without a line here
    notebook_level = ["results_dir", "section", "sigma_ws", "seeds", "population", "progress"]
    assert cell[:6] == notebook_level and set(cell[6:]) - FIELDS <= {"epoch_marks"}
    prose = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert [k for k in cell[6:] if f"`{k}`" not in prose] == []
    assert set(cell[6:]) & FIELDS <= SECTION_FIELDS[name]
    assert accepted.keys() - cell == FIELDS - {"sigma_w", "seed"} - set(cell)  # swept through sigma_ws / seeds
    assert accepted["sigma_ws"].type == "list[float]" and accepted["lr"].type == "float | None"  # the dataclass type


@pytest.mark.parametrize("name", SECTIONS)
def test_params_profiles(name):
    path = REPO / "params" / f"{name}.yaml"
    section = load_section(path)  # type-checks every profile against the notebook
    doc = yaml.safe_load(path.read_text())
    assert doc["notebook"] == f"notebooks/{name}.py" and section.name == name and section.description
    assert set(section.profiles) >= {"smoke", "cpu", "paper"}
    for profile in ("smoke", "cpu", "paper"):
        for point in section.points(profile):
            eff = section.effective(point)
            configs = point_configs(eff)  # every point of every profile is a valid set of TrainConfigs
            c = configs[0]
            if profile == "smoke":
                assert c.data == "synthetic" and c.epochs <= 2 and len(eff["sigma_ws"]) <= 3
                assert c.width <= (0.0625 if c.arch == "resnet9" else 0.25)
            elif profile == "cpu":
                assert c.data == "auto" and c.data_root == "data"  # where `initmem data` puts it
                assert c.n_train is not None and c.n_train <= 5000 and c.device == "cpu"
                assert (c.arch == "resnet9" and c.width <= 0.25) or c.arch in ("resnet20", "resnet56")
            else:
                assert c.width == 1.0 and c.n_train is None and c.n_val == 5000 and c.n_test is None
                assert eff["sigma_ws"] == SIGMA_GRID and c.data == "auto"
                assert c.epochs == (5000 if name == "02_long_training" else 200)
    for profile in section.profiles:  # every profile reads the repository's data/, none a path outside it
        assert {c.data_root for p in section.points(profile) for c in point_configs(section.effective(p))
                if c.data != "synthetic"} <= {"data"}, profile
    paper = [section.effective(p) for p in section.points("paper")]
    grid = {k: sorted({str(p[k]) for p in paper}) for k in ("optimizer", "batch_size", "arch", "lr", "weight_decay")}
    expected = {"01_optimizers": {"optimizer": ["adam", "adamw", "muon", "sgd", "sgd_momentum"]},
                "02_long_training": {"optimizer": ["sgd"], "lr": ["0.01"]},
                "03_lr_l2": {"optimizer": ["sgd"]},
                "04_batch_size": {"batch_size": ["128", "16", "256", "32", "64"], "optimizer": ["adam", "sgd"]},
                "05_depth": {"arch": ["resnet110", "resnet56", "resnet9"], "optimizer": ["adam", "sgd"]}}[name]
    for k, v in expected.items():
        assert grid[k] == v, k
    if name == "03_lr_l2":
        assert "0.01" in grid["weight_decay"] and "0.0" in grid["weight_decay"]


# --- every smoke profile, executed ------------------------------------------------------------------------
def _mtimes(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def smoke(smoke_study):
    out, reports = smoke_study.results, smoke_study.reports
    before = _mtimes(out)
    again = {name: run_sweep(REPO / "params" / f"{name}.yaml", profile="smoke", results=out, jobs=2,
                             progress=False) for name in SECTIONS}
    return out, reports, again, before, _mtimes(out)


@pytest.mark.parametrize("name", SECTIONS)
def test_smoke_section_writes_every_run(smoke, name):
    out, reports, _, _, _ = smoke
    report = reports[name]
    assert report.exit_code == 0, [p.message for p in report.points]
    assert all(p.status == "ran" for p in report.points)
    section = load_section(REPO / "params" / f"{name}.yaml")
    points = section.points("smoke", out)
    expected = {run_id(c) for p in points for c in point_configs(section.effective(p))}
    spec = section.profiles["smoke"]
    n_grid = math.prod(len(v) for v in spec["grid"].values())
    assert len(expected) == n_grid * len(spec["fixed"]["sigma_ws"]) * len(spec["fixed"]["seeds"])
    runs = load_runs(out / name)
    assert set(runs["run_id"]) == expected  # the notebook trained exactly the configs the sweep predicts
    assert (runs["status"] == "complete").all() and (runs["section"] == name).all()
    for col in ("test_acc_at_best", "final_train_acc", "final_test_acc", "val_acc_at_best"):
        assert runs[col].between(0, 1).all(), col
    for col in ("T_SGD", "T_L2", "T_adapt", "init_weight_norm", "final_weight_norm", "norm_ratio"):
        assert runs[col].notna().all() and (runs[col] >= 0).all(), col
    assert (runs["T_SGD"] > 0).all() and (runs["init_weight_norm"] > 0).all()
    assert (runs["T_L2"] > 0).eq(runs["weight_decay"] > 0).all()  # the L2 clock runs exactly when there is L2
    for p in report.points:
        nb = nbformat.read(p.notebook, as_version=4)
        assert Path(p.notebook) == out / name / "notebooks" / f"{p.point_id}.ipynb"
        assert nb.metadata.papermill.parameters["section"] == name
        assert not nb.metadata.papermill.get("exception")  # None or False when no cell raised
        last = nb.cells[-3].outputs[0]["data"]["text/plain"]  # before the closing "What we found" cells
        assert last  # the final table was displayed
        found = nb.cells[-1].outputs[0]["data"]["text/markdown"]
        assert found.startswith("**What we found.** This point: a spread of ") and "docs/findings.md" in found
    assert list(report.summary["point"]) == [p.point_id for p in points]
    assert (report.summary["runs"] == f"{len(spec['fixed']['sigma_ws'])}/{len(spec['fixed']['sigma_ws'])}").all()
    assert report.summary["spread_pp"].between(0, 100).all()


def test_a_second_sweep_executes_nothing(smoke):
    _, _, again, before, after = smoke
    for report in again.values():
        assert {p.status for p in report.points} == {"skipped"} and report.exit_code == 0
    assert before == after  # not one file was written or touched


def test_notebook_tables_match_the_results(smoke):
    out, reports, _, _, _ = smoke
    # 02: the spread at each epoch mark, displayed by the notebook, equals the library's on the same runs
    p = reports["02_long_training"].points[0]
    nb = nbformat.read(p.notebook, as_version=4)
    shown = nb.cells[-3].outputs[0]["data"]["text/plain"]  # the table before "What we found"
    marks = nb.metadata.papermill.parameters["epoch_marks"]
    table = long_training_table(load_runs(out / "02_long_training"), marks=marks)
    with pd.option_context("display.max_columns", 20, "display.width", 80):  # a kernel's (not a terminal's) defaults
        assert table["epoch"].tolist() == marks and shown == repr(display_frame(table))  # T2 as figures/ writes it
    # 05: one row per run of the point, with the failed-to-interpolate flag
    p = reports["05_depth"].points[0]
    nb = nbformat.read(p.notebook, as_version=4)
    assert "failed to interpolate" in nb.cells[-3].outputs[0]["data"]["text/plain"]
    runs = load_runs(out / "05_depth")
    t = interpolation_rows(runs)
    assert len(t) == len(runs) and t["failed_to_interpolate"].eq(~t["interpolated"].astype(bool)).all()


# --- the section helpers on hand-made runs -----------------------------------------------------------------
def _fake_run(results_dir: Path, sigma_w: float, val_loss: list[float], test_acc: list[float], t_sgd: list[float]):
    config = TrainConfig(data="synthetic", sigma_w=sigma_w, epochs=len(val_loss) - 1)
    n = len(val_loss)
    h = pd.DataFrame({"epoch": range(n), "step": range(n), "lr": 0.01, "train_loss": 1.0, "train_acc_running": 0.5,
                      "train_acc": [0.1] + [1.0] * (n - 1), "val_loss": val_loss, "val_acc": 0.5, "test_loss": 1.0,
                      "test_acc": test_acc, "weight_norm": 1.0, "T_SGD": t_sgd, "T_L2": 0.0, "T_adapt": 0.0,
                      "wall_time": 0.0})
    RunFolders(results_dir, "s").write(results.RunResult(
        config, run_id(config), "complete", h, metrics.summarize_history(h), None, {}, "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:00:01+00:00"))


def test_long_training_table_reads_each_run_at_its_best_validation_epoch_so_far(tmp_path):
    # sigma 0.1: best val at epoch 1 (acc 0.6) until epoch 3 improves it (acc 0.9)
    _fake_run(tmp_path, 0.1, [9, 1.0, 2.0, 0.5], [0.0, 0.6, 0.7, 0.9], [0, 1, 2, 3])
    # sigma 2.5: best val at epoch 2 (acc 0.3) throughout
    _fake_run(tmp_path, 2.5, [9, 3.0, 1.0, 2.0], [0.0, 0.2, 0.3, 0.8], [0, 1, 2, 3])
    runs = load_runs(tmp_path)
    t = long_training_table(runs, marks=[3, 1, 2])
    assert t["epoch"].tolist() == [1, 2, 3]
    assert t["spread_pp"].round(6).tolist() == [40.0, 30.0, 60.0]  # |0.6-0.2|, |0.6-0.3|, |0.9-0.3|
    assert t["T_SGD"].tolist() == [1.0, 2.0, 3.0]
    assert t["sigma_w=0.1"].round(6).tolist() == [60.0, 60.0, 90.0]
    with pytest.raises(ValueError, match="epoch_marks=\\[4\\] is invalid: the runs trained 3 epochs"):
        long_training_table(runs, marks=[4])
    with pytest.raises(ValueError, match="epoch_marks=\\[\\] is invalid"):
        long_training_table(runs, marks=[])


def test_the_kernel_environment_is_set_for_the_start_and_only_its_own_keys_restored(monkeypatch):
    """execute_notebook's environment for a kernel: set inside the block; afterwards the keys it set are as they were
    (absent again, or their old value), and a variable something else set meanwhile is kept."""
    from initmem.study.notebook import _environ

    monkeypatch.setenv("INITMEM_PROGRESS", "bar")
    monkeypatch.delenv("INITMEM_TEST_NEW", raising=False)
    monkeypatch.delenv("INITMEM_TEST_OTHER", raising=False)
    with _environ({"INITMEM_PROGRESS": "lines", "INITMEM_TEST_NEW": "1"}):
        assert (os.environ["INITMEM_PROGRESS"], os.environ["INITMEM_TEST_NEW"]) == ("lines", "1")
        os.environ["INITMEM_TEST_OTHER"] = "kept"
    assert os.environ["INITMEM_PROGRESS"] == "bar" and "INITMEM_TEST_NEW" not in os.environ
    assert os.environ.pop("INITMEM_TEST_OTHER") == "kept"


_IRI_PROBE = """
import importlib.util, sys
installed = importlib.util.find_spec("rfc3987_syntax") is not None
if {first}:
    import rfc3987_syntax
import initmem.study.notebook as nbm
import nbformat
nb = nbm._read("notebooks/01_optimizers.py")
nbformat.validate(nb)  # the schema check papermill runs still works
print(installed, sys.modules.get("rfc3987_syntax") is not None)
"""


@pytest.mark.parametrize("first", [False, True])
def test_reading_a_notebook_skips_the_iri_grammar_unless_it_was_imported_first(first):
    """jsonschema's optional rfc3987_syntax compiles a grammar at import (1.3-2.5 s a process, every sweep worker);
    initmem.study.notebook marks it absent, so a notebook is read and validated without it, and a process that
    imported it first keeps it."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _IRI_PROBE.format(first=first)], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    installed, loaded = out.stdout.split()
    if installed != "True":
        pytest.skip("rfc3987_syntax is not installed: nothing to skip")
    assert loaded == str(first)


# --- the paired .ipynb, and JupyterLab's save round-trip ----------------------------------------------------------
NOTEBOOKS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "notebooks").rglob("*.py"))


def _paired(rel: str, root: Path) -> Path:
    """The .ipynb jupytext pairs with `rel` (notebooks/jupytext.toml: ipynb,py:percent), written into `root`."""
    out = root / Path(rel).with_suffix(".ipynb").name
    jupytext.write(jupytext.read(REPO / rel), out)
    return out


@pytest.mark.parametrize("rel", NOTEBOOKS)
def test_the_paired_ipynb_declares_what_the_py_does(rel, tmp_path):
    from initmem.study.notebook import notebook_parameters, tagged_cells

    ipynb = _paired(rel, tmp_path)
    assert tagged_cells(ipynb, "parameters") == tagged_cells(REPO / rel, "parameters") != []
    assert notebook_parameters(ipynb) == notebook_parameters(REPO / rel)


def test_initmem_run_executes_the_paired_ipynb(tmp_path, capsys):
    from initmem.cli import commands

    (nb := tmp_path / "nb").mkdir()
    ipynb = _paired("notebooks/01_optimizers.py", nb)
    assert commands.main(["run", str(ipynb), "-p", "sigma_ws", "[0.5]", "-p", "epochs", "1", "--cwd", str(tmp_path),
                          "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "point 01_optimizers-" in out and "executed notebook:" in out
    assert len(load_runs(tmp_path / "results" / "adhoc" / "01_optimizers")) == 1
    (nb / "broken.ipynb").write_text("{not json")
    assert commands.main(["run", str(nb / "broken.ipynb"), "--cwd", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "is not an nbformat 4 .ipynb" in err[0], err


@pytest.mark.parametrize("rel", NOTEBOOKS)
def test_a_jupyterlab_save_changes_no_notebook(rel, tmp_path):
    """What JupyterLab does to a .py notebook, on the server's side: jupytext's contents manager serves it (with
    notebooks/jupytext.toml), the kernel's connection sets the notebook's kernelspec and language_info (JupyterLab's
    NotebookPanel), and a save writes it back: the .py is byte-identical, the first time (no .ipynb yet) and again
    with the paired .ipynb beside it. (The language_info, which names the Python patch version, is kept out of the
    .py by jupytext's default filter, so on a fresh clone JupyterLab marks a notebook modified once its kernel starts:
    saving then writes only the ignored .ipynb.)"""
    from ipykernel.ipkernel import IPythonKernel
    from jupytext import TextFileContentsManager

    shutil.copytree(REPO / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("*.ipynb"))
    cm = TextFileContentsManager(root_dir=str(tmp_path))
    for _ in range(2):
        nb = nbformat.from_dict(cm.get(rel, type="notebook", content=True)["content"])
        nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        nb.metadata.language_info = dict(IPythonKernel.language_info)
        cm.save({"type": "notebook", "format": "json", "content": json.loads(json.dumps(nb))}, rel)  # as Lab sends it
        assert (tmp_path / rel).read_bytes() == (REPO / rel).read_bytes(), rel
        assert (tmp_path / rel).with_suffix(".ipynb").is_file()
    text = jupytext.writes(jupytext.read(tmp_path / rel), fmt="py:percent")  # `jupytext --to py:percent` of it
    assert text == (REPO / rel).read_text(encoding="utf-8")
