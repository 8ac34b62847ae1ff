"""Loud failures that are not one `initmem` error line (those are rows of test_bad_input.py's table): strict YAML,
params files checked in full when they load, notebooks that refuse what papermill injects but they do not declare,
quiet kernels, executed notebooks named by point, overall sweep progress, pool workers that die with their sweep,
and a full disk while a checkpoint is written.

Notebooks here are tiny copies in tmp_path (torch-free where the case allows), so each kernel start stays cheap.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import faults
import nbformat
import pytest
import yaml

from initmem.cli import commands
from initmem.engine import checkpoint
from initmem.errors import CheckpointError, ConfigError
from initmem.store.folders import checkpoints
from initmem.study.notebook import SMOKE, checked_parameters
from initmem.study.params import load_section, load_yaml, yaml_error_line

HEADER = ("# ---\n# jupyter:\n#   kernelspec:\n#     display_name: Python 3\n#     language: python\n"
          "#     name: python3\n# ---\n")
PARAMS_CELL = 'lr: float | None = None\noptimizer = "sgd"\nepochs = 2\nmarks = [1]\n'
CHECK_CELL = "from initmem.study.notebook import checked_parameters\nchecked_parameters(globals())\n"
TINY = f"""\
# %% tags=["parameters"]
{PARAMS_CELL}
# %%
{CHECK_CELL}print("lr", lr, "optimizer", optimizer, "epochs", epochs)
"""
SLEEPER = """\
# %% tags=["parameters"]
results_dir = "results"
section = "t"
sigma_ws = [1.0]
seeds = [0]
tag = "a"

# %%
import os, time
print("PIDS", os.getpid(), os.getppid(), flush=True)
time.sleep({sleep})
"""


def _notebook(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def _params(root: Path, name: str, section: str, profiles: str, notebook: str = "notebooks/t.py") -> Path:
    (root / "params").mkdir(parents=True, exist_ok=True)
    path = root / "params" / f"{name}.yaml"
    path.write_text(f"section: {section}\nnotebook: {notebook}\nprofiles:\n" + textwrap.indent(profiles, "  "))
    return path


# --- strict YAML ---------------------------------------------------------------------------------------------
def test_yaml_refuses_a_repeated_key_naming_it_and_both_lines():
    with pytest.raises(yaml.YAMLError) as exc:
        load_yaml("a: 1\nb:\n  c: 1\n  d: 2\n  c: 3\n")
    line = yaml_error_line(exc.value)
    assert "key 'c' is repeated (first at line 3)" in line and "at line 5, column 3" in line and "\n" not in line
    assert load_yaml("base: &b {x: 1}\nother:\n  <<: *b\n  x: 2\n")["other"] == {"x": 2}  # a merge is no repeat


def test_yaml_reads_1e_3_as_the_float_it_looks_like_and_leaves_safe_load_alone():
    doc = load_yaml("a: 1e-3\nb: 5E+4\nc: 2.5e-1\nd: 1_000\ne: e5\nf: '1e-3'\ng: 1.0\nh: 10\n")
    assert doc == {"a": 0.001, "b": 50000.0, "c": 0.25, "d": 1000, "e": "e5", "f": "1e-3", "g": 1.0, "h": 10}
    assert yaml.safe_load("a: 1e-3") == {"a": "1e-3"}  # PyYAML's own loader is not changed


# --- params files: every point of every profile checked on load ----------------------------------------------
@pytest.mark.parametrize("profile, needle", [
    ("fixed: {sigma_ws: [0.5, 0.5]}", "sigma_ws=[0.5, 0.5] is invalid: it repeats a value"),
    ("grid: {width: [0.125, 0.001]}", "width=0.001 is invalid: arch='resnet9' needs width > 0.007812"),
    ("fixed: {sigma_ws: [1, 1.0]}", "sigma_ws=[1.0, 1.0] is invalid: it repeats a value"),
])  # fmt: skip
def test_a_bad_run_in_any_profile_fails_when_the_file_loads(tmp_path, profile, needle):
    nb = tmp_path / "notebooks" / "t.py"
    nb.parent.mkdir()
    nb.write_text((faults.REPO / "notebooks" / "01_optimizers.py").read_text())
    path = _params(tmp_path, "t", "t", f"smoke: {{}}\npaper:\n  {profile}\n")
    with pytest.raises(ConfigError) as exc:
        load_section(path)  # the bad profile is not even the one a sweep would ask for
    assert needle in str(exc.value) and "t.yaml profile 'paper' point " in str(exc.value)


# --- notebooks refuse what they do not accept ------------------------------------------------------------------
def _namespace(injected: str | None, **values) -> dict:
    cells = ["", PARAMS_CELL, *([injected] if injected is not None else []), CHECK_CELL]
    return {"In": cells, "lr": None, "optimizer": "sgd", "epochs": 2, "marks": [1], **values}


SECTION_CELL = 'results_dir = "r"\nsection = "s"\nsigma_ws = [0.5]\nseeds = [0]\noptimizer = "sgd"\n'


def _section(injected: str, **values) -> dict:
    return {"In": ["", SECTION_CELL, injected, CHECK_CELL], "results_dir": "r", "section": "s", "sigma_ws": [0.5],
            "seeds": [0], "optimizer": "sgd", **values}


def test_checked_parameters_names_the_unknown_parameter_and_the_closest_declared_one():
    ns = _namespace('# Parameters\noptimiser = "adam"\n', optimiser="adam")
    with pytest.raises(ConfigError, match=r"unknown parameter 'optimiser' \(did you mean 'optimizer'\?\); "
                                          r"accepted: lr, optimizer, epochs, marks$"):
        checked_parameters(ns)


def test_checked_parameters_converts_and_type_checks_what_was_injected():
    ns = _namespace('# Parameters\nlr = "1e-3"\nepochs = 3\nmarks = [2, 3]\n', lr="1e-3", epochs=3, marks=[2, 3])
    assert checked_parameters(ns) is ns
    assert ns["lr"] == 0.001 and isinstance(ns["lr"], float) and ns["epochs"] == 3
    ns = _namespace('# Parameters\nepochs = "many"\n', epochs="many")
    with pytest.raises(ConfigError, match=r"parameter epochs='many' has type str; expected int"):
        checked_parameters(ns)


def test_checked_parameters_checks_nothing_where_nothing_was_injected():
    checked_parameters(_namespace(None, stray=1))  # JupyterLab: the cells the user ran, no papermill cell
    checked_parameters({"lr": None, "stray": 1})  # a script: no IPython `In`
    checked_parameters({"In": [""], "stray": 1})


def test_checked_parameters_builds_a_section_notebooks_runs():
    with pytest.raises(ConfigError, match="TrainConfig.optimizer='adagrad' is invalid"):
        checked_parameters(_section('# Parameters\noptimizer = "adagrad"\n', optimizer="adagrad"))


def test_a_section_notebook_accepts_every_train_config_field_typed_and_checked_by_train_config(capsys):
    injected = '# Parameters\neval_every = 2\nwarmup_epochs = "1e-1"\nepochs = 4\n'  # none of them in the cell
    ns = checked_parameters(_section(injected, eval_every=2, warmup_epochs="1e-1", epochs=4))
    assert ns["eval_every"] == 2 and ns["warmup_epochs"] == 0.1 and isinstance(ns["warmup_epochs"], float)
    unset = {k: v for k, v in SMOKE.items() if k != "epochs"}
    assert {k: ns[k] for k in unset} == unset  # what nothing set runs at the smoke scale, and says so
    assert capsys.readouterr().out == ("at the smoke scale (initmem.study.notebook.SMOKE; set them in the parameters "
                                       "cell or with -p): " + ", ".join(f"{k}={v!r}" for k, v in unset.items()) + "\n")
    for injected, value, needle in [
            ("eval_evry = 2", 2, r"unknown parameter 'eval_evry' \(did you mean 'eval_every'\?\); accepted: "
                                 r"results_dir, section, sigma_ws, seeds, optimizer and every TrainConfig field but "
                                 r"sigma_w, seed \(docs/fields.md\)$"),
            ("eval_every = 'x'", "x", r"parameter eval_every='x' has type str; expected int$"),
            ("eval_every = 9", 9, r"TrainConfig.eval_every=9 is invalid: an integer in \[1, 2\]$"),
            ("sigma_w = 2", 2, r"unknown parameter 'sigma_w' \(did you mean 'sigma_ws'\?\)")]:
        name = injected.split(" ")[0]
        with pytest.raises(ConfigError, match=needle):
            checked_parameters(_section(f"# Parameters\n{injected}\n", **{name: value}))


SECTION_TINY = f"""\
# %% tags=["parameters"]
{SECTION_CELL}lr = None

# %%
{CHECK_CELL}print("lr", lr, "eval_every", eval_every, "data", data)
"""


def _papermill(nb: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    jupytext = subprocess.run([sys.executable, "-m", "jupytext", "--to", "ipynb", str(nb), "-o", "-"],
                              capture_output=True, text=True, check=True, env=faults.env())
    return subprocess.run([sys.executable, "-m", "papermill", "-", str(out), *args], input=jupytext.stdout,
                          capture_output=True, text=True, env=faults.env(), cwd=nb.parent, timeout=300)


def test_plain_papermill_refuses_in_one_line_and_keeps_a_bugs_traceback(tmp_path):
    nb = _notebook(tmp_path / "nb.py", SECTION_TINY)
    proc = _papermill(nb, tmp_path / "bad.ipynb", "-p", "lr", "0.1", "-p", "eval_evry", "2")
    assert proc.returncode == 1
    # initmem's papermill.engine entry point (study/papermill_hook.py): no traceback of papermill's frames
    assert "Traceback" not in proc.stderr and "PapermillExecutionError" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"ConfigError: papermill parameters: unknown parameter 'eval_evry' \(did you mean "
                        r"'eval_every'\?\); accepted: [^\n]+ and every TrainConfig field but sigma_w, seed "
                        r"\(docs/fields\.md\) \(papermill: the notebook stopped at In \[\d+\]; the executed notebook "
                        r"holds its cells\)", last), last
    (error,) = [o for c in nbformat.read(tmp_path / "bad.ipynb", as_version=4).cells if c.cell_type == "code"
                for o in c.get("outputs", []) if o.output_type == "error"]
    assert error.ename == "ConfigError" and last.startswith(error.traceback[0])  # the notebook shows that one line
    # YAML 1.1 injects "1e-3", a str; eval_every is no line of the cell: the notebook accepts it, and papermill's
    # "Passed unknown parameter" warning is dropped, as under `initmem run`
    proc = _papermill(nb, tmp_path / "ok.ipynb", "-y", "lr: 1e-3\neval_every: 2\nepochs: 3")
    assert proc.returncode == 0, proc.stderr
    assert "Passed unknown parameter" not in proc.stderr
    text = "".join(o.get("text", "") for c in nbformat.read(tmp_path / "ok.ipynb", as_version=4).cells
                   if c.cell_type == "code" for o in c.get("outputs", []))
    assert "lr 0.001 eval_every 2 data synthetic" in text
    # an error that is not initmem's is a bug: its reader gets papermill's whole traceback, as before
    bug = _notebook(tmp_path / "bug.py", "# %%\nraise RuntimeError('a bug in a cell')\n")
    proc = _papermill(bug, tmp_path / "bug.ipynb")
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "RuntimeError: a bug in a cell"


@pytest.mark.parametrize("args, line", [
    (["-p", "eval_evry", "5"], r"unknown parameter 'eval_evry' \(did you mean 'eval_every'\?\); accepted: results_dir, "
                               r"section, sigma_ws, seeds, population, progress, optimizer, lr, momentum, weight_decay "
                               r"and every TrainConfig field but sigma_w, seed \(docs/fields.md\)"),
    (["-p", "eval_every", "five"], r"parameter eval_every='five' has type str; expected int"),
    (["-p", "eval_every", "5", "-p", "epochs", "2"], r"TrainConfig.eval_every=5 is invalid: an integer in \[1, 2\]"),
])  # fmt: skip
def test_initmem_run_answers_a_bad_field_of_a_section_notebook_in_one_line_before_any_kernel(tmp_path, capsys, args,
                                                                                            line):
    notebook = str(faults.REPO / "notebooks" / "01_optimizers.py")
    assert commands.main(["run", notebook, *args, "--cwd", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and re.fullmatch(rf"initmem run: error: (\S+01_optimizers\.py: )?{line}\n", err), err
    assert not (tmp_path / "results").exists()


# --- quiet kernels, executed notebooks named by point ----------------------------------------------------------
def test_a_normal_run_prints_nothing_alarming(tmp_path):
    nb = _notebook(tmp_path / "nb.py", TINY)
    proc = subprocess.run([sys.executable, "-m", "initmem.cli", "run", str(nb), "--cwd", str(tmp_path)],
                          capture_output=True, text=True, env=faults.env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no "[IPKernelApp] WARNING | Kernel is running over TCP without encryption"
    assert "lr None optimizer sgd epochs 2" in proc.stdout


SECTION_NB = """\
# %% tags=["parameters"]
results_dir = "results/adhoc"
section = "t"
sigma_ws = [0.5]
seeds = [0]
lr = None
arch = "resnet9"
width = 0.0625
data = "synthetic"
n_train = 64
n_val = 32
n_test = 32
batch_size = 32
epochs = 1
device = "cpu"
channels_last = False
progress = False

# %%
from initmem.study.notebook import checked_parameters
checked_parameters(globals())

# %%
from initmem.study.point import run_point
runs = run_point(globals())
"""


def test_initmem_run_names_the_executed_copy_by_point_and_prints_it_with_the_points_summary(tmp_path, capsys):
    nb = _notebook(tmp_path / "sec.py", SECTION_NB)
    printed = []
    for lr in ("0.01", "0.02", "0.01"):
        # eval_every is no line of the cell: accepted, and papermill's "Passed unknown parameter" is not printed
        assert commands.main(["run", str(nb), "-p", "lr", lr, "-p", "eval_every", "1", "--cwd", str(tmp_path),
                         "--quiet"]) == 0
        out, err = capsys.readouterr()
        assert "unknown parameter" not in err, err
        lines = out.splitlines()
        assert re.fullmatch(r"point sec-[0-9a-f]{6}: runs=1/1 acc@0\.5=[\d.]+ spread_pp=\S+ .*", lines[-2]), lines
        assert lines[-1].startswith("executed notebook: ")
        printed.append(Path(lines[-1].removeprefix("executed notebook: ")))
    assert printed[0] != printed[1] and printed[0] == printed[2]  # one file per point, stable
    assert all(p.parent == tmp_path / "results" / "notebooks" and p.is_file() for p in printed)
    assert lines[-2].startswith(f"point {printed[2].stem}:")


# --- sweeps: help, overall progress ------------------------------------------------------------------------------
def test_sweep_help_documents_every_flag_with_its_default(capsys):
    parser = commands.build_parser()
    sweep = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["sweep"]
    for action in sweep._actions:
        if not isinstance(action, argparse._HelpAction):
            assert action.help and "default" in action.help, action.option_strings or action.dest
    with pytest.raises(SystemExit):
        parser.parse_args(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 1)" in text and "(default: local)" in text and "(default: 1440)" in text


def test_a_sweep_over_several_files_shows_overall_progress_and_an_eta(tmp_path, capsys):
    _notebook(tmp_path / "notebooks" / "t.py", SLEEPER.format(sleep=0))
    a = _params(tmp_path, "a", "ta", "smoke:\n  grid: {tag: [a, b]}\n")
    b = _params(tmp_path, "b", "tb", "smoke:\n  grid: {tag: [c]}\n")
    assert commands.main(["sweep", str(a), str(b), "--profile", "smoke", "--results", str(tmp_path / "out"),
                     "--quiet"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if " points] ETA " in ln]
    assert [ln.split(" ETA ")[0] for ln in lines] == ["[1/3 points]", "[2/3 points]", "[3/3 points]"], lines
    assert all(re.match(r"\[\d/3 points\] ETA \d\d:\d\d:\d\d t[ab] tag-\w+_[0-9a-f]{6}: ran in ", ln) for ln in lines)
    assert lines[-1].startswith("[3/3 points] ETA 00:00:00 tb ")


# --- faults ------------------------------------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, only not yet reaped
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_pool_workers_and_their_kernels_die_with_a_killed_sweep(tmp_path):
    _notebook(tmp_path / "notebooks" / "t.py", SLEEPER.format(sleep=300))
    params = _params(tmp_path, "t", "t", "smoke:\n  grid: {tag: [a, b]}\n")
    child = faults.Child([faults.PYTHON, "-m", "initmem.cli", "sweep", str(params), "--profile", "smoke", "--jobs",
                          "2", "--results", str(tmp_path / "out")], cwd=tmp_path)
    pids: set[int] = set()
    try:
        first = child.wait_for(r"^PIDS \d+ \d+$")
        second = child.wait_for(rf"^PIDS (?!{first.split()[1]} )\d+ \d+$")
        pids.update(int(x) for line in (first, second) for x in line.split()[1:])
        kernels_and_workers = pids - {child.proc.pid}
        assert len(kernels_and_workers) == 4, pids  # two kernels, each the child of its own worker
        child.kill()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(map(_alive, kernels_and_workers)):
            time.sleep(0.5)
        assert not [p for p in kernels_and_workers if _alive(p)], "survived their sweep"
    finally:
        for pid in pids:
            if pid != child.proc.pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if child.proc.poll() is None:
            child.kill()


def _full_disk_at(name: str, monkeypatch):
    """The package's one atomic write (`store.files`) fails as on a full disk when it writes `name`'s temp file."""
    from initmem.store import files

    real = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 3])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, attr):
            return getattr(self.f, attr)

    def fake(fd, *args, **kwargs):
        f = real(fd, *args, **kwargs)
        return Full(f) if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(f".{name}.") else f

    monkeypatch.setattr(files.os, "fdopen", fake)


def test_a_full_disk_while_writing_a_checkpoint_is_one_line_and_keeps_the_previous_one(tmp_path, monkeypatch):
    folder = tmp_path / "checkpoints"
    checkpoint.save(folder, 1, {"epoch": 1, "x": [1.0]})
    _full_disk_at("epoch-000002.ckpt", monkeypatch)
    with pytest.raises(CheckpointError) as exc:
        checkpoint.save(folder, 2, {"epoch": 2, "x": [2.0]})
    msg = str(exc.value)
    assert "\n" not in msg and str(folder / "epoch-000002.ckpt") in msg and "No space left on device" in msg
    assert "resumes from the newest of them" in msg
    assert sorted(p.name for p in folder.iterdir()) == ["epoch-000001.ckpt"]  # no temp file, the old one intact
    assert checkpoint.load_latest(folder, lambda payload: None)[0] == 1


def test_a_run_whose_checkpoint_hits_a_full_disk_resumes_after_it(tmp_path, monkeypatch, one_torch_thread):
    from initmem.config import TrainConfig
    from initmem.engine.trainer import train

    config = TrainConfig(**faults.TINY, epochs=3, checkpoint_every=1)
    _full_disk_at("epoch-000002.ckpt", monkeypatch)
    with pytest.raises(CheckpointError, match="epoch-000002.ckpt' could not be written: No space left on device"):
        train(config, out_dir=tmp_path, section="s", progress=False)
    (folder,) = [p for p in (tmp_path / "s").iterdir() if p.is_dir()]
    assert [p.name for p in checkpoints(folder / "checkpoints")] == ["epoch-000001.ckpt"]
    monkeypatch.undo()
    result = train(config, out_dir=tmp_path, section="s", progress=False)
    assert result.status == "complete" and result.summary["epochs_run"] == 3
    reference = train(config, out_dir=tmp_path / "reference", section="s", progress=False)
    assert faults.history(result.path).equals(faults.history(reference.path))  # the resume is exact


@pytest.mark.parametrize("orig_argv, papermill", [
    (["python", "/venv/bin/papermill", "in.ipynb", "out.ipynb"], True),  # the console script
    (["python", "-X", "dev", "-m", "papermill", "in.ipynb"], True),
    (["python", "-m", "initmem.cli", "run", "nb.py"], False),  # initmem's own commands print their own line
    (["python", "job.py", "-m", "papermill"], False),  # a program that imports papermill keeps its traceback
    (["python", "-c", "import papermill"], False),
])  # fmt: skip
def test_the_one_line_hook_is_installed_in_the_papermill_program_only(orig_argv, papermill):
    from initmem.study.papermill_hook import is_papermill_program
    assert is_papermill_program(orig_argv) is papermill
