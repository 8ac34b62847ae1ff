"""study.sweep and study.notebook: params files, type checks, grid expansion, papermill execution, executors.

Uses a throw-away repository (params/ + notebooks/ in tmp_path) holding a copy of the real 01_optimizers notebook
or tiny torch-free notebooks, so each kernel start stays cheap.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import nbformat
import pytest

from initmem.cli import commands
from initmem.errors import ConfigError, NotebookError, SweepError
from initmem.study.notebook import check_parameters, check_value, execute_notebook, notebook_parameters
from initmem.study.sweep import load_section, point_configs, run_sweep

REPO = Path(__file__).resolve().parent.parent
HEADER = ("# ---\n# jupyter:\n#   kernelspec:\n#     display_name: Python 3\n#     language: python\n"
          "#     name: python3\n# ---\n")


def _repo(tmp_path: Path, profiles: str, notebook: str | None = None) -> Path:
    """A repository with params/t.yaml (the given profiles) and notebooks/t.py (default: 01_optimizers)."""
    (tmp_path / "params").mkdir(exist_ok=True)
    (tmp_path / "notebooks").mkdir(exist_ok=True)
    if notebook is None:
        shutil.copy(REPO / "notebooks" / "01_optimizers.py", tmp_path / "notebooks" / "t.py")
    else:
        (tmp_path / "notebooks" / "t.py").write_text(HEADER + textwrap.dedent(notebook))
    path = tmp_path / "params" / "t.yaml"
    path.write_text("section: t\nnotebook: notebooks/t.py\ndescription: test\nprofiles:\n"
                    + textwrap.indent(textwrap.dedent(profiles), "  "))
    return path


TINY = """\
    smoke:
      fixed: {data: synthetic, width: 0.0625, epochs: 1, batch_size: 32, n_train: 64, n_val: 32, n_test: 32,
              sigma_ws: [0.5], device: cpu}
      grid:
        lr: [0.01, 1]
        weight_decay: [0.0, 1.0e-2]
"""


# --- params files ------------------------------------------------------------------------------------------
def test_points_expand_the_grid_with_fixed_values_and_stable_readable_ids(tmp_path):
    path = _repo(tmp_path, TINY)
    section = load_section(path)
    points = section.points("smoke", tmp_path / "out")
    assert len(points) == 4
    assert [p.grid for p in points] == [{"lr": 0.01, "weight_decay": 0.0}, {"lr": 0.01, "weight_decay": 0.01},
                                        {"lr": 1.0, "weight_decay": 0.0}, {"lr": 1.0, "weight_decay": 0.01}]
    assert isinstance(points[2].parameters["lr"], float)  # YAML int 1 accepted for a float, stored as float
    p = points[1].parameters
    assert p["epochs"] == 1 and p["sigma_ws"] == [0.5] and p["section"] == "t"
    assert p["results_dir"] == "out"  # inside the repo: relative to the notebooks' working folder
    ids = [pt.point_id for pt in points]
    assert len(set(ids)) == 4 and ids[1].startswith("lr-0.01_weight_decay-0.01_")
    assert ids == [pt.point_id for pt in load_section(path).points("smoke", tmp_path / "elsewhere")]
    # the default results folder is <repo>/results/<profile>
    assert section.points("smoke")[0].parameters["results_dir"] == "results/smoke"
    # the configs the notebook will train: notebook defaults overridden by the point
    configs = point_configs(section.effective(points[3]))
    assert [(c.lr, c.weight_decay, c.sigma_w, c.width, c.arch) for c in configs] == [(1.0, 0.01, 0.5, 0.0625,
                                                                                         "resnet9")]


@pytest.mark.parametrize("profile, message", [
    ("fixed: {widht: 0.1}", ["unknown parameter 'widht'", "did you mean 'width'", "t.yaml", "accepted:"]),
    ("fixed: {lr: fast}", ["lr='fast'", "str", "float | None"]),
    ("fixed: {sigma_ws: [0.1, x]}", ["sigma_ws=[0.1, 'x']", "list[float]"]),
    ("fixed: {epochs: true}", ["epochs=True", "expected int"]),
    ("grid: {n_train: [64, 6.5]}", ["n_train=6.5", "int | None"]),
    ("fixed: {eval_evry: 2}", ["unknown parameter 'eval_evry'", "did you mean 'eval_every'", "every TrainConfig"]),
    ("fixed: {deterministic: 1}", ["deterministic=1", "expected bool"]),
    ("fixed: {seed: 1}", ["unknown parameter 'seed'", "did you mean 'seeds'"]),
])
def test_a_bad_name_or_type_fails_on_load_naming_key_value_and_type(tmp_path, profile, message):
    path = _repo(tmp_path, f"smoke:\n  {profile}\n")
    with pytest.raises(ConfigError) as e:
        run_sweep(path, profile="smoke", results=tmp_path / "out")
    for m in message:
        assert m in str(e.value)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()  # failed before anything ran


def test_a_profile_sets_any_train_config_field_the_notebook_does_not_list(tmp_path):
    path = _repo(tmp_path, "paper:\n  fixed: {eval_every: 2, epochs: 4, deterministic: true, compile: true, "
                           "eval_batch_size: 256, sigma_ws: [0.5]}\n")
    section = load_section(path)
    assert not section.declared["eval_every"].in_cell and section.declared["eval_every"].type == "int"
    (c,) = point_configs(section.effective(section.points("paper")[0]))
    assert (c.eval_every, c.epochs, c.deterministic, c.compile, c.eval_batch_size) == (2, 4, True, True, 256)
    assert (c.data, c.n_train, c.schedule) == ("synthetic", 256, "constant")  # unset: notebook.SMOKE, TrainConfig's


def test_a_point_id_does_not_change_when_the_cell_lists_a_field_at_its_default(tmp_path):
    ids = [p.point_id for p in load_section(_repo(tmp_path, TINY)).points("smoke")]
    nb = tmp_path / "notebooks" / "t.py"
    nb.write_text(nb.read_text().replace('progress = True\n', 'progress = True\nschedule = "constant"\n'))
    assert load_section(tmp_path / "params" / "t.yaml").declared["schedule"].in_cell
    assert [p.point_id for p in load_section(tmp_path / "params" / "t.yaml").points("smoke")] == ids


def test_yaml_1e_3_is_the_float_it_looks_like(tmp_path):
    path = _repo(tmp_path, "smoke:\n  fixed: {lr: 1e-3, sigma_ws: [0.5]}\n  grid: {weight_decay: [5e-4, 1E-2]}\n")
    points = load_section(path).points("smoke")
    assert [(p.parameters["lr"], p.parameters["weight_decay"]) for p in points] == [(0.001, 0.0005), (0.001, 0.01)]


@pytest.mark.parametrize("profiles, profile, message", [
    ("smoke: {}\ncpu: {}\n", "gpu", "unknown profile 'gpu'; profiles: smoke, cpu"),
    ("smoke:\n  grid: {lr: []}\n", "smoke", "grid 'lr' must be a non-empty list"),
    ("smoke:\n  fixed: {results_dir: x}\n", "smoke", "'results_dir' is set by the sweep"),
    ("smoke:\n  fixed: {lr: 0.1}\n  grid: {lr: [0.2]}\n", "smoke", "both fixed and in the grid"),
    ("smoke:\n  fixd: {lr: 0.1}\n", "smoke", "a profile holds only ('fixed', 'grid', 'points')"),
])
def test_bad_profiles_raise_sweep_errors(tmp_path, profiles, profile, message):
    path = _repo(tmp_path, profiles)
    with pytest.raises(SweepError, match=None) as e:
        run_sweep(path, profile=profile, results=tmp_path / "out", dry_run=True)
    assert message in str(e.value)


def test_an_invalid_train_config_fails_before_anything_runs(tmp_path):
    path = _repo(tmp_path, "smoke:\n  fixed: {arch: resnet7, sigma_ws: [0.5]}\n")
    with pytest.raises(ConfigError, match="TrainConfig.arch='resnet7'"):
        run_sweep(path, profile="smoke", results=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_slurm_executor_without_sbatch_fails_before_anything(tmp_path, monkeypatch):
    path = _repo(tmp_path, TINY)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SweepError, match="^--executor slurm needs Slurm's sbatch on PATH; it was not found$"):
        run_sweep(path, profile="smoke", results=tmp_path / "out", executor="slurm")
    with pytest.raises(SweepError, match="unknown Slurm option 'partiton' \\(did you mean 'partition'\\?\\)"):
        run_sweep(path, profile="smoke", results=tmp_path / "out", executor="slurm", slurm={"partiton": "x"})


def test_a_section_or_run_folder_given_as_the_results_tree_is_refused_before_anything_trains(tmp_path, capsys):
    """`--results results/x/01_optimizers` would train every run again one level down: one line names the level."""
    path = _repo(tmp_path, TINY)
    run = tmp_path / "out" / "t" / "abc123def456"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    for wrong, level in ((run.parent, "is a section folder"), (run, "is a run folder")):
        with pytest.raises(SweepError, match=rf"results='.+' {level}.*\(its tree: .+out\).*nothing was run"):
            run_sweep(path, profile="smoke", results=wrong)
        assert commands.main(["sweep", str(path), "--profile", "smoke", "--results", str(wrong)]) == 2
        assert level in capsys.readouterr().err
    assert sorted(p.name for p in run.parent.iterdir()) == ["abc123def456"]  # nothing made a level down


def test_dry_run_lists_every_point_and_writes_nothing(tmp_path, capsys):
    path = _repo(tmp_path, TINY)
    report = run_sweep(path, profile="smoke", results=tmp_path / "out", dry_run=True)
    out = capsys.readouterr().out
    assert [p.status for p in report.points] == ["would-run"] * 4 and report.exit_code == 0
    for p in report.points:
        assert p.point_id in out and p.runs == "0/1"
    assert out.count("run (0/1 runs complete)") == 4
    assert not (tmp_path / "out").exists()
    # the CLI mirrors it, and expands a glob
    assert commands.main(["sweep", str(tmp_path / "params" / "*.yaml"), "--profile", "smoke", "--dry-run",
                     "--results", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.count("run (0/1 runs complete)") == 4


# --- execution ---------------------------------------------------------------------------------------------
def test_a_failing_point_is_reported_and_the_others_still_run(tmp_path, capsys):
    # a corrupt archive (no known hash, so the preflight cannot tell) raises DataError inside the notebook, after
    # planning succeeded; missing data would stop the sweep before any point (test_data_fetch)
    (tmp_path / "bad.tar.gz").write_bytes(b"not a gzip file")
    path = _repo(tmp_path, f"""\
        smoke:
          fixed: {{data_root: {tmp_path / 'bad.tar.gz'}, width: 0.0625, epochs: 1, batch_size: 32, n_train: 64,
                  n_val: 32, n_test: 32, sigma_ws: [0.5], device: cpu}}
          grid:
            data: [synthetic, imagefolder]
        """)
    out = tmp_path / "out"
    report = run_sweep(path, profile="smoke", results=out, jobs=2, progress=False)
    ok, bad = report.points
    assert (ok.status, bad.status) == ("ran", "failed") and report.exit_code == 1
    assert "DataError" in bad.message and "cell" in bad.message and "t.py" in bad.message
    failed_nb = nbformat.read(bad.notebook, as_version=4)  # written, with the traceback in it
    assert failed_nb.metadata.papermill.exception is True
    assert len(list((out / "t").glob("*/run.json"))) == 1  # the good point's run
    assert report.summary["runs"].tolist() == ["1/1", "0/1"]
    assert "1 ran, 1 failed" in capsys.readouterr().out
    assert commands.main(["sweep", str(path), "--profile", "smoke", "--results", str(out), "--quiet"]) == 1


def test_a_sweep_whose_every_point_failed_still_ends_in_its_table(tmp_path, capsys):
    """The section folder then holds no run record (load_runs: NoResults): the table counts 0 runs, no traceback."""
    (tmp_path / "bad.tar.gz").write_bytes(b"not a gzip file")
    path = _repo(tmp_path, f"""\
        smoke:
          fixed: {{data_root: {tmp_path / 'bad.tar.gz'}, data: imagefolder, width: 0.0625, epochs: 1, batch_size: 32,
                  n_train: 64, n_val: 32, n_test: 32, sigma_ws: [0.5], device: cpu}}
        """)
    report = run_sweep(path, profile="smoke", results=tmp_path / "out", progress=False)
    assert [p.status for p in report.points] == ["failed"] and report.exit_code == 1
    assert (tmp_path / "out" / "t").is_dir() and not list((tmp_path / "out" / "t").glob("*/run.json"))
    assert report.summary["runs"].tolist() == ["0/1"] and "== t [smoke]: 1 failed" in capsys.readouterr().out


def _tiny_notebook(tmp_path: Path, body: str) -> Path:
    nb = tmp_path / "nb.py"
    nb.write_text(HEADER + textwrap.dedent(body))
    return nb


def test_notebook_parameters_reads_types_and_literal_defaults(tmp_path):
    nb = _tiny_notebook(tmp_path, """\
        # %% tags=["parameters"]
        a = 1
        b: float | None = None  # annotated
        c = [0.1, 2]
        d = "x"
        e = True

        # %%
        print(a)
        """)
    p = notebook_parameters(nb)
    assert {k: (v.type, v.default) for k, v in p.items()} == {
        "a": ("int", 1), "b": ("float | None", None), "c": ("list[float]", [0.1, 2]), "d": ("str", "x"),
        "e": ("bool", True)}
    assert check_parameters({"a": 2, "b": 3, "c": [1, 2.5]}, p) == {"a": 2, "b": 3.0, "c": [1.0, 2.5]}
    assert check_value("t", [0.9, 1], "tuple[float, float]") == (0.9, 1.0)
    for value, type_ in ((True, "int"), (1, "bool"), ("1", "float"), ([1, 2, 3], "tuple[float, float]")):
        with pytest.raises(ConfigError):
            check_value("t", value, type_)
    nb.write_text(HEADER + '# %% tags=["parameters"]\nimport os\nx = os.getcwd()\n')
    with pytest.raises(NotebookError, match="only `name = literal` lines"):
        notebook_parameters(nb)


def test_execute_notebook_reports_the_failing_cell_and_still_writes_the_output(tmp_path):
    nb = _tiny_notebook(tmp_path, """\
        # %% tags=["parameters"]
        n = 1

        # %%
        import os
        print("progress mode", os.environ["INITMEM_PROGRESS"], "cwd", os.getcwd())

        # %%
        raise ValueError(f"boom {n}")
        """)
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "deep" / "folder" / "out.ipynb"  # the folder is created
    with pytest.raises(NotebookError) as e:
        execute_notebook(nb, out, {"n": 7}, cwd=work, log_output=False)
    msg = str(e.value)
    assert "nb.py" in msg and "ValueError: boom 7" in msg and "raise ValueError" in msg and str(out) in msg
    executed = nbformat.read(out, as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert f"progress mode lines cwd {work}" in text  # the kernel got INITMEM_PROGRESS and the working folder
    with pytest.raises(ConfigError, match="unknown parameter 'm'"):
        execute_notebook(nb, out, {"m": 7}, log_output=False)


def test_kernel_start_is_retried_on_a_port_clash(tmp_path, monkeypatch):
    import papermill

    nb = _tiny_notebook(tmp_path, '# %% tags=["parameters"]\nn = 1\n')
    calls = []
    real = papermill.execute_notebook

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("ZMQError: Address already in use (addr='tcp://127.0.0.1:5555')")
        return real(*args, **kwargs)

    monkeypatch.setattr(papermill, "execute_notebook", flaky)
    execute_notebook(nb, tmp_path / "o.ipynb", {}, log_output=False)
    assert len(calls) == 2 and (tmp_path / "o.ipynb").is_file()
    calls.clear()
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: (calls.append(1), 1 / 0))
    with pytest.raises(NotebookError, match="ZeroDivisionError"):  # not a start-up clash: no retry
        execute_notebook(nb, tmp_path / "o.ipynb", {}, log_output=False)
    assert len(calls) == 1


def test_cli_run_type_checks_yaml_values_and_executes(tmp_path, capsys):
    nb = _tiny_notebook(tmp_path, """\
        # %% tags=["parameters"]
        lr = 0.1
        marks = [1]

        # %%
        print("lr", lr, "marks", marks)
        """)
    assert commands.main(["run", str(nb), "-p", "lr", "fast", "--cwd", str(tmp_path)]) == 2
    assert "lr='fast'" in capsys.readouterr().err
    out = tmp_path / "o.ipynb"
    assert commands.main(["run", str(nb), "-p", "lr", "1", "-p", "marks", "[2, 3]", "--output", str(out),
                     "--cwd", str(tmp_path), "--quiet"]) == 0
    executed = nbformat.read(out, as_version=4)
    assert "lr 1.0 marks [2, 3]" in executed.cells[-1].outputs[0].text
    assert capsys.readouterr().out.splitlines()[-1] == f"executed notebook: {out}"
    assert commands.main(["run", str(nb), "-p", "lr", "1e-3", "--cwd", str(tmp_path), "--quiet"]) == 0  # YAML 1.1's str
    printed = Path(capsys.readouterr().out.splitlines()[-1].removeprefix("executed notebook: "))
    assert printed.parent == tmp_path / "results" / "notebooks" and printed.name.startswith("nb-")
    assert "lr 0.001 marks [1]" in nbformat.read(printed, as_version=4).cells[-1].outputs[0].text


def test_local_pool_gives_each_worker_one_gpu(tmp_path, monkeypatch):
    # a torch-free section notebook that only reports the GPUs its kernel sees
    path = _repo(tmp_path, "smoke:\n  grid: {tag: [a, b, c]}\n", notebook="""\
        # %% tags=["parameters"]
        results_dir = "results"
        section = "t"
        sigma_ws = [1.0]
        seeds = [0]
        tag = "a"

        # %%
        import os
        print("gpus", os.environ.get("CUDA_VISIBLE_DEVICES"))
        """)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    report = run_sweep(path, profile="smoke", results=tmp_path / "out", jobs=2, progress=False)
    assert [p.status for p in report.points] == ["ran"] * 3
    seen = {nbformat.read(p.notebook, as_version=4).cells[-1].outputs[0].text.split()[1] for p in report.points}
    assert seen <= {"3", "5"} and seen  # one GPU per worker, never both
