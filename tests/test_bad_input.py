"""Bad input, one table: every case goes through the real `initmem` command in a subprocess (or the library where no
command applies) and must end with ONE clear line on stderr — exit code non-zero, no traceback, the bad value named,
a hint of what is accepted — and leave the results already on disk untouched (bytes and mtimes).

Subprocesses cost 2-4 s each here (torch and papermill imports), so the table runs two at a time in a module fixture
and each case's test then checks its outcome. Data cases use tiny archives made in tmp_path.
"""

from __future__ import annotations

import concurrent.futures as cf
import io
import json
import os
import pickle
import resource
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import faults
import numpy as np
import pytest
import torch
from PIL import Image

from initmem.data.splits import CIFAR10_CLASSES
from initmem.engine.trainer import TrainConfig, train
from initmem.errors import InitmemError
from initmem.study.point import run_point

NB = str(faults.REPO / "notebooks" / "01_optimizers.py")
TRAIN = ["train", "--arch", "resnet9", "--width", "0.0625", "--data", "synthetic", "--n-train", "200", "--n-val", "50",
         "--n-test", "50", "--device", "cpu", "--epochs", "1", "--batch-size", "50", "--out", "{res}", "--no-progress"]
DATA = [a for a in TRAIN if a != "synthetic" and a != "--data"]  # the data flags come from the case


def flags(base: list[str], *more: str) -> list[str]:
    """`base` with each flag of `more` replacing its own value there (the CLI refuses a flag given twice)."""
    out, i = list(base), 0
    while i < len(more):
        j = i + 1
        while j < len(more) and not more[j].startswith("--"):
            j += 1
        if more[i] in out:
            k = out.index(more[i])
            end = k + 1
            while end < len(out) and not out[end].startswith("--"):
                end += 1
            out[k:end] = more[i:j]
        else:
            out += more[i:j]
        i = j
    return out


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]  # after `initmem`; {res}, {tmp}, {data}, {params} are filled in
    value: str  # the bad value, as the error line must name it
    hint: str  # what is accepted (or expected), as the error line must say it
    env: dict[str, str] = field(default_factory=dict)
    memory_gb: int | None = None  # an address-space limit: a case that must fail to allocate, not eat the machine


def sweep(params: str, *more: str) -> list[str]:
    return ["sweep", f"{{params}}/{params}.yaml", "--profile", "smoke", "--results", "{res}", *more]


READONLY = "/sys" if os.geteuid() == 0 else "{tmp}/readonly"  # root writes into a mode-555 folder; not into /sys
TV = "{tmp}/nothing/cifar-10-batches-py"

CASES = [
    # initmem train: parameters
    Case("unknown-flag", [*TRAIN, "--sigmaw", "1"], "--sigmaw", "did you mean --sigma-w"),
    Case("wrong-type", [*TRAIN, "--lr", "fast"], "'fast'", "a real number"),
    Case("sigma_w-zero", [*TRAIN, "--sigma-w", "0"], "sigma_w=0.0", "a finite real > 0"),
    Case("sigma_w-nan", [*TRAIN, "--sigma-w", "nan"], "sigma_w=nan", "a finite real > 0"),
    Case("unknown-arch", flags(TRAIN, "--arch", "resnet7"), "'resnet7'", "'resnet9', 'resnet20'"),
    Case("unknown-optimizer", [*TRAIN, "--optimizer", "adagrad"], "'adagrad'", "'sgd', 'sgd_momentum'"),
    Case("unknown-schedule", [*TRAIN, "--schedule", "linear"], "'linear'", "'constant', 'cosine'"),
    Case("negative-lr", [*TRAIN, "--lr", "-0.1"], "lr=-0.1", "a finite real > 0"),
    Case("batch-size-zero", flags(TRAIN, "--batch-size", "0"), "batch_size=0", "an integer in [1, "),
    Case("batch-larger-than-data", flags(TRAIN, "--batch-size", "500"), "batch_size=500", "at most the training split"),
    Case("epochs-zero", flags(TRAIN, "--epochs", "0"), "epochs=0", "an integer in [1, "),
    Case("width-too-small", flags(TRAIN, "--width", "0.001"), "width=0.001", "needs width > "),
    Case("unused-hyperparameter", [*TRAIN, "--optimizer", "adam", "--momentum", "0.9"], "momentum=0.9",
         "only its default 0.0"),
    Case("n-train-below-classes", flags(TRAIN, "--n-train", "5"), "n_train=5", "an integer in [10, "),
    Case("train-eval-size-too-big", [*TRAIN, "--train-eval-size", "500"], "train_eval_size=500", "[10, 200]"),
    Case("section-path", [*TRAIN, "--section", "../x"], "'../x'", "a plain folder name"),
    Case("repeated-flag", [*TRAIN, "--lr", "0.1", "--lr", "0.2"], "--lr 0.1, then --lr 0.2", "each flag once"),
    Case("repeated-bool-flag", [*TRAIN, "--augment", "--no-augment"], "--augment, then --no-augment",
         "each flag once"),
    Case("seed-too-big", [*TRAIN, "--seed", "18446744073709551616"], "seed=18446744073709551616",
         "an integer in [0, 9223372036854775807]"),
    Case("width-does-not-fit", flags(TRAIN, "--width", "64", "--arch", "resnet9"), "width=64", "a smaller width",
         memory_gb=8),
    # initmem train: data and folders
    Case("missing-data-folder", [*DATA, "--data", "imagefolder", "--data-root", "{tmp}/nope"], "/nope",
         "expected {tmp}/nope/train + {tmp}/nope/test"),
    Case("no-data-anywhere", [*DATA, "--data", "auto", "--data-root", "{tmp}/nothing"], "/nothing",
         "set INITMEM_DATA"),
    Case("torchvision-not-downloaded", [*DATA, "--data", "torchvision", "--data-root", "{tmp}/nothing"], TV,
         "`initmem data --download` puts it into data/ (library: download=True), or use an image archive"),
    Case("cache-is-a-file", [*DATA, "--data", "imagefolder", "--data-root", "{data}/good.tar.gz"],
         "INITMEM_CACHE='{tmp}/a-file'", "is a file, not a folder: set INITMEM_CACHE to a writable folder",
         env={"INITMEM_CACHE": "{tmp}/a-file"}),
    Case("cache-read-only", [*DATA, "--data", "imagefolder", "--data-root", "{data}/good.tar.gz"],
         f"INITMEM_CACHE='{READONLY}'", "is not a writable folder", env={"INITMEM_CACHE": READONLY}),
    Case("corrupt-archive", [*DATA, "--data", "imagefolder", "--data-root", "{data}/corrupt.tar.gz"],
         "corrupt.tar.gz", "is corrupt or truncated"),
    Case("truncated-archive", [*DATA, "--data", "imagefolder", "--data-root", "{data}/truncated.tar.gz"],
         "truncated.tar.gz", "is corrupt or truncated"),
    Case("wrong-image-size", [*DATA, "--data", "imagefolder", "--data-root", "{data}/small.tar.gz"], "is 16x16",
         "expected 32x32 RGB"),
    Case("wrong-class-count", [*DATA, "--data", "imagefolder", "--data-root", "{data}/nine.tar.gz"],
         "9 class folders", "expected 10 (CIFAR-10)"),
    Case("labels-out-of-range", flags(DATA, "--data", "torchvision", "--data-root", "{data}/tv", "--n-train", "20",
                                      "--n-val", "20", "--n-test", "10", "--batch-size", "10"), "[0, 12]",
         "outside [0, 9] for 10 classes"),
    Case("unwritable-results", [*TRAIN[:-3], "--out", "{tmp}/a-file/results", "--no-progress"], "a-file/results",
         "is not writable"),
    # initmem sweep
    Case("sweep-unknown-profile", ["sweep", "{params}/ok.yaml", "--profile", "gpu", "--results", "{res}"], "'gpu'",
         "profiles: smoke"),
    Case("sweep-misspelled-parameter", sweep("misspelled"), "'sigma_wss'", "did you mean 'sigma_ws'"),
    Case("sweep-duplicate-grid-value", sweep("dupgrid"), "repeats 'sgd' (in ['sgd', 'sgd'])",
         "distinct values are accepted"),
    Case("sweep-duplicate-key", sweep("dupkey"), "key 'epochs' is repeated (first at line 6)",
         "at line 7, column 7"),
    Case("sweep-repeated-sigma-w", sweep("repsigma"), "sigma_ws=[0.5, 0.5]", "distinct values are accepted"),
    Case("sweep-section-escapes", sweep("escape"), "section='../escape'", "a plain folder name is accepted"),
    Case("sweep-no-file-matches", ["sweep", "{params}/nomatch*.yaml", "--profile", "smoke", "--results", "{res}"],
         "'{params}/nomatch*.yaml' matches no file", "a params file or a glob pattern"),
    Case("sweep-params-is-a-folder", ["sweep", "{params}", "--profile", "smoke", "--results", "{res}"],
         "'{params}' is a folder", "a YAML file is accepted"),
    Case("sweep-params-not-utf8", sweep("latin1"), "latin1.yaml' is not UTF-8 text", "a UTF-8 YAML file is accepted"),
    Case("sweep-second-file-typo", ["sweep", "{params}/ok.yaml", "{params}/misspelled.yaml", "--profile", "smoke",
                                    "--results", "{res}"], "'sigma_wss'", "did you mean 'sigma_ws'"),
    Case("sweep-sigma-w-negative", sweep("negsigma"), "sigma_w=-1.0", "a finite real > 0"),
    Case("sweep-empty-grid", sweep("emptygrid"), "got []", "a non-empty list of values"),
    Case("sweep-invalid-yaml", sweep("badyaml"), "badyaml.yaml", "not valid YAML at line 3, column 35: expected"),
    Case("sweep-no-slurm", sweep("ok", "--executor", "slurm"), "--executor slurm", "needs Slurm's sbatch on PATH",
         env={"PATH": "{tmp}/empty-bin"}),
    Case("sweep-unknown-executor", sweep("ok", "--executor", "pbs"), "'pbs'", "'local', 'slurm'"),
    Case("sweep-jobs-zero", sweep("ok", "--jobs", "0"), "jobs=0", "a positive integer"),
    Case("sweep-unwritable-results", ["sweep", "{params}/ok.yaml", "--profile", "smoke", "--results",
                                      "{tmp}/a-file/results"], "a-file/results", "not writable"),
    # initmem run
    Case("run-missing-notebook", ["run", "{tmp}/missing.py"], "missing.py", "does not exist"),
    Case("run-unknown-parameter", ["run", NB, "-p", "lrr", "0.1", "--cwd", "{tmp}"], "'lrr'", "did you mean 'lr'"),
    Case("run-not-yaml", ["run", NB, "-p", "sigma_ws", "[0.5, ", "--cwd", "{tmp}"], "'[0.5, '",
         "is not a YAML value"),
    Case("run-sigma-w-nan", ["run", NB, "-p", "sigma_ws", "[0.5, .nan]", "--cwd", "{tmp}", "-p", "results_dir",
                             "{res}"], "sigma_w=nan", "a finite real > 0"),
    Case("run-unknown-optimizer", ["run", NB, "-p", "optimizer", "adagrad", "--cwd", "{tmp}"], "'adagrad'",
         "'sgd', 'sgd_momentum'"),
    Case("run-section-escapes", ["run", NB, "-p", "section", "../x", "--cwd", "{tmp}"], "section='../x'",
         "a plain folder name"),
    Case("run-repeated-parameter", ["run", NB, "-p", "lr", "0.1", "-p", "lr", "0.2", "--cwd", "{tmp}"],
         "-p lr is given twice ('0.1', then '0.2')", "each parameter once"),
    Case("run-parameters-cell-syntax", ["run", "{tmp}/syntax.py", "--cwd", "{tmp}"], "syntax.py",
         "the parameters cell is not valid Python: line 2"),
    Case("run-output-under-a-file", ["run", NB, "--output", "{tmp}/a-file/x.ipynb", "--cwd", "{tmp}"],
         "'{tmp}/a-file/x.ipynb' is under '{tmp}/a-file', which is a file", "a path under a folder is accepted"),
    Case("run-cwd-missing", ["run", NB, "--cwd", "{tmp}/missing-cwd"], "'{tmp}/missing-cwd'",
         "an existing folder is accepted"),
    # initmem figures and plan: paths of the kind expected, tables of the types expected
    Case("figures-results-section-folder", ["figures", "--results", "{res}/adhoc", "--out", "{tmp}/figs",
                                            "--no-progress"], "results='{res}/adhoc' is a section folder",
         "a results tree root (the folder holding section folders NN_name/"),
    Case("figures-results-empty", ["figures", "--results", "", "--out", "{tmp}/figs", "--no-progress"], "results=''",
         "a results tree root (the folder holding section folders NN_name/"),
    Case("figures-results-symlink-loop", ["figures", "--results", "{tmp}/loop", "--no-progress"],
         "results='{tmp}/loop' is a symlink loop", "a results tree root"),
    Case("figures-out-repository", ["figures", "--results", "{res}", "--out", str(faults.REPO), "--overwrite",
                                    "--no-progress"], f"out='{faults.REPO}' is the repository root",
         "a folder of its own"),
    Case("plan-table-bool-width", ["plan", "{params}/ok.yaml", "--profile", "smoke", "--device", "cpu",
                                   "--throughput", "{tmp}/bool-width.json"], "width=True is invalid",
         "a finite positive number up to 64 is accepted"),
]

LIBRARY = [  # (id, call, value, hint): no command takes these arguments
    ("library-empty-sigma-grid", lambda res: run_point({"sigma_ws": []}, results=res, section="adhoc"),
     "sigma_ws=[]", "a non-empty list"),
    ("library-unknown-config-key", lambda res: TrainConfig.from_dict({"sigmaw": 1.0}), "'sigmaw'",
     "did you mean 'sigma_w'"),
]


# ------------------------------------------------------------------------------------------------- the world
def _png(size: int) -> bytes:
    b = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), 128, np.uint8)).save(b, "PNG")
    return b.getvalue()


def _archive(path: Path, classes=CIFAR10_CLASSES, size: int = 32) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for split, n in (("train", 3), ("test", 1)):
            for c in classes:
                for i in range(n):
                    data = _png(size)
                    info = tarfile.TarInfo(f"{split}/{c}/{i:04d}.png")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))


def _make_data(d: Path) -> None:
    d.mkdir()
    _archive(d / "good.tar.gz")
    raw = (d / "good.tar.gz").read_bytes()
    (d / "truncated.tar.gz").write_bytes(raw[: len(raw) // 2])
    (d / "truncated-tail.tar.gz").write_bytes(raw[:-8])  # only the gzip trailer (CRC, length) is missing
    (d / "corrupt.tar.gz").write_bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    _archive(d / "small.tar.gz", size=16)
    _archive(d / "nine.tar.gz", classes=CIFAR10_CLASSES[:9])
    tv = d / "tv" / "cifar-10-batches-py"
    tv.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = [i % 10 for i in range(20)]
        labels[3] = 12
        with open(tv / name, "wb") as f:
            pickle.dump({b"data": np.zeros((20, 3072), np.uint8), b"labels": labels}, f)
    with open(tv / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [c.encode() for c in CIFAR10_CLASSES]}, f)


def _make_params(d: Path) -> None:
    d.mkdir(parents=True)
    bodies = {
        "ok": "    fixed: {sigma_ws: [0.5]}",
        "misspelled": "    fixed: {sigma_wss: [0.5]}",
        "yamlstr": "    fixed: {lr: 1e-3}",
        "negsigma": "    fixed: {sigma_ws: [0.5, -1.0]}",
        "emptygrid": "    grid: {optimizer: []}",
        "dupgrid": "    grid: {optimizer: [sgd, sgd]}",
        "dupkey": "    fixed:\n      epochs: 1\n      epochs: 2",  # lines 6 and 7
        "repsigma": "    fixed: {sigma_ws: [0.5, 0.5]}",
    }
    for name, body in bodies.items():
        (d / f"{name}.yaml").write_text(f"section: 01_optimizers\nnotebook: {NB}\nprofiles:\n  smoke:\n{body}\n")
    (d / "escape.yaml").write_text(f"section: ../escape\nnotebook: {NB}\nprofiles:\n  smoke: {{}}\n")
    (d / "latin1.yaml").write_bytes(f"section: 01_optimizers\nnotebook: {NB}\ndescription: caf\xe9\n"
                                    "profiles:\n  smoke: {}\n".encode("latin-1"))
    (d / "badyaml.yaml").write_text(f"section: x\nnotebook: {NB}\nprofiles: {{smoke: {{fixed: {{a: [1, }}}}\n")


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and mtime; lock files (`<run>.lock`, holder notes, not results) aside."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """tmp/ with data/, proj/params/, a results folder holding one complete run, a regular file a-file, an empty
    bin/ (a PATH without sbatch), a symlink loop and a throughput table whose width is a bool."""
    tmp = tmp_path_factory.mktemp("bad-input")
    _make_data(tmp / "data")
    _make_params(tmp / "proj" / "params")
    (tmp / "a-file").write_text("not a folder\n")
    (tmp / "empty-bin").mkdir()
    (tmp / "readonly").mkdir(mode=0o555)
    (tmp / "loop").symlink_to(tmp / "loop")
    (tmp / "bool-width.json").write_text(json.dumps({"device": "CPU x", "kind": "cpu", "torch": "x", "entries": [
        {"arch": "resnet9", "width": True, "batch_size": 128, "precision": "fp32", "members": 1,
         "train_step_s": 0.1, "eval_image_s": 1e-4}]}))
    (tmp / "syntax.py").write_text('# %% tags=["parameters"]\nlr = 0.1\noptimizer = "sgd\n\n# %%\nprint(lr)\n')
    res = tmp / "results"
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(TrainConfig(arch="resnet9", width=0.0625, data="synthetic", n_train=200, n_val=50, n_test=50,
                          device="cpu", epochs=1, batch_size=50, checkpoint_every=1), out_dir=res, progress=False)
    finally:
        torch.set_num_threads(n)
    return {"tmp": str(tmp), "res": str(res), "data": str(tmp / "data"), "params": str(tmp / "proj" / "params")}


def _fill(s: str, w: dict) -> str:
    return s.format(**w)


@pytest.fixture(scope="module")
def outcomes(world):
    """Every CLI case run once, two at a time; after each, whether the results on disk are still untouched."""
    res = Path(world["res"])
    before = _snapshot(res)
    assert before, "the prepared results folder is empty"
    cache = Path(world["tmp"]) / "cache"

    def one(i: int, case: Case) -> tuple[str, subprocess.CompletedProcess]:
        env = faults.env(**{"INITMEM_CACHE": str(cache), "INITMEM_DATA": "",
                            **{k: _fill(v, world) for k, v in case.env.items()}})
        # Each train case gets its own seed, hence its own run folder: two valid configs that differ only in
        # --data-root share a run id, and two at a time they would race for its lock (the loser's one line would
        # rightly name the lock, not the bad archive).
        seed = ["--seed", str(1000 + i)] if case.argv[0] == "train" and "--seed" not in case.argv else []
        cmd = [sys.executable, "-m", "initmem.cli", *(_fill(a, world) for a in case.argv), *seed]
        limit = None if case.memory_gb is None else (lambda: resource.setrlimit(
            resource.RLIMIT_AS, (case.memory_gb << 30, case.memory_gb << 30)))
        return case.id, subprocess.run(cmd, cwd=world["tmp"], env=env, capture_output=True, text=True, timeout=300,
                                       preexec_fn=limit)

    out = {}
    with cf.ThreadPoolExecutor(2) as pool:
        for fut in cf.as_completed([pool.submit(one, i, c) for i, c in enumerate(CASES)]):
            cid, proc = fut.result()
            after = _snapshot(res)
            out[cid] = (proc, sorted(k for k in before if after.get(k) != before[k]), sorted(set(after) - set(before)))
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_error_line_and_leaves_results_untouched(case, outcomes, world):
    proc, changed, added = outcomes[case.id]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0 and len(lines) == 1, f"exit {proc.returncode}, stderr:\n{proc.stderr}"
    line = lines[0]
    assert "Traceback" not in line and line.startswith("initmem")
    assert _fill(case.value, world) in line, line
    assert _fill(case.hint, world) in line, line
    assert changed == [] and added == [], (changed, added)


@pytest.mark.parametrize("cid,call,value,hint", LIBRARY, ids=[c[0] for c in LIBRARY])
def test_bad_library_arguments_are_one_line_errors(cid, call, value, hint, world):
    before = _snapshot(Path(world["res"]))
    with pytest.raises(InitmemError) as exc:
        call(world["res"])
    msg = str(exc.value)
    assert "\n" not in msg and value in msg and hint in msg, msg
    assert _snapshot(Path(world["res"])) == before


def test_a_refused_cwd_is_not_created(outcomes, world):
    assert outcomes["run-cwd-missing"][0].returncode == 2
    assert not (Path(world["tmp"]) / "missing-cwd").exists()


def test_the_table_is_big_enough():
    assert len(CASES) + len(LIBRARY) >= 30 and len({c.id for c in CASES}) == len(CASES)


def test_an_archive_missing_its_gzip_trailer_is_refused(world):
    from initmem.data.splits import load_cifar10
    from initmem.errors import DataError

    with pytest.raises(DataError, match="truncated"):
        load_cifar10(Path(world["data"]) / "truncated-tail.tar.gz", "imagefolder",
                     cache_dir=Path(world["tmp"]) / "cache-tail")
    assert os.path.exists(Path(world["data"]) / "good.tar.gz")


def test_a_refused_archive_does_not_wait_for_the_compiler_imports(world):
    """The data is checked before the numerics are set: torch.use_deterministic_algorithms imports inductor and
    dynamo (~3 s), which a run refused for its archive never reaches."""
    code = ("import sys\nfrom initmem.engine.trainer import TrainConfig, train\nfrom initmem.errors import DataError\n"
            f"cfg = TrainConfig(data='imagefolder', data_root={str(Path(world['data']) / 'corrupt.tar.gz')!r}, "
            "width=0.0625, n_train=200, n_val=50, n_test=50, epochs=1, batch_size=50, device='cpu')\n"
            "try:\n    train(cfg, progress=False)\nexcept DataError as e:\n    print('refused:', e)\n"
            "print('inductor' if 'torch._inductor.config' in sys.modules else 'no inductor')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=faults.env(INITMEM_CACHE=str(Path(world["tmp"]) / "cache-inductor")))
    assert "refused:" in proc.stdout and "corrupt" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("no inductor"), proc.stdout
