"""Damaged results, one table: a small tree is trained once per module; each case copies it, damages one run, and
then `load_runs` / `load_histories` must raise ONE ResultsError line naming the damaged file and what is wrong, the
skip mode must warn about it and list it in `df.attrs["damaged"]` (and return the other runs), `is_complete` must be
False for it, and `set_aside` must move it out of the way unchanged, after which the tree loads again.

Also here: a run in two places, a results path that does not exist, schema-1 records and `migrate` (library and
`initmem migrate`), the committed CPU study verifying, and reading results without importing torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from initmem.cli.commands import main
from initmem.config import TrainConfig, run_id
from initmem.errors import ResultsError
from initmem.store.folders import DAMAGED_DIR, RunFolders, set_aside
from initmem.store.migrate import migrate
from initmem.store.results import load_histories, load_runs, read_run, verify_run

REPO = Path(__file__).resolve().parents[1]
TINY = dict(data="synthetic", arch="resnet9", width=0.0625, n_train=64, n_val=32, n_test=32, batch_size=32, epochs=1,
            device="cpu")
SIGMAS = (0.1, 1.0, 2.0)
SECTION = "s1"
VICTIM = TrainConfig(**TINY, sigma_w=0.1)  # the run each case damages
ALL_IDS = {run_id(TrainConfig(**TINY, sigma_w=s)) for s in SIGMAS}


@pytest.fixture(scope="module")
def tree(tmp_path_factory, one_torch_thread) -> Path:
    """A results tree of three real runs (synthetic data, ResNet-9 width 1/16, one epoch)."""
    from initmem.engine.trainer import train

    root = tmp_path_factory.mktemp("results")
    for s in SIGMAS:
        train(TrainConfig(**TINY, sigma_w=s), out_dir=root, section=SECTION, progress=False)
    return root


@pytest.fixture
def copy(tree, tmp_path) -> Path:
    """A fresh copy of the module's tree, to damage."""
    return Path(shutil.copytree(tree, tmp_path / "results"))


# ------------------------------------------------------------------------------------------------ damage
def edit_json(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        rec = json.loads((folder / "run.json").read_text())
        change(rec)
        (folder / "run.json").write_text(json.dumps(rec, indent=2) + "\n")

    return damage


def edit_history(change: Callable[[list[str]], list[str]], resign: bool = False) -> Callable[[Path], None]:
    """Change history.csv's lines; with `resign`, also record the changed file's sha256 in run.json, as a writer
    that wrote a bad history would: the structural checks must then catch it without the checksum."""
    def damage(folder: Path) -> None:
        file = folder / "history.csv"
        file.write_text("".join(change(file.read_text().splitlines(keepends=True))))
        if resign:
            import hashlib

            rec = json.loads((folder / "run.json").read_text())
            rec["history"]["sha256"] = hashlib.sha256(file.read_bytes()).hexdigest()
            (folder / "run.json").write_text(json.dumps(rec, indent=2) + "\n")

    return damage


def set_config(**changes) -> Callable[[dict], None]:
    return lambda rec: rec["config"].update(changes)


def to_schema_1(rec: dict) -> None:
    """A schema-2 record as the first initmem wrote it: no history entry, `amp` for precision, no newer fields."""
    rec["schema"] = 1
    del rec["history"]
    cfg = rec["config"]
    assert cfg.pop("precision") == "fp32"
    cfg["amp"] = "off"
    for k in ("eval_every", "deterministic"):
        del cfg[k]


def cell(line: str, col: int, value: str) -> str:
    cells = line.rstrip("\n").split(",")
    cells[col] = value
    return ",".join(cells) + "\n"


def nan_row(lines: list[str]) -> list[str]:
    return [*lines[:-1], ",".join(["nan"] * lines[0].count(",")) + ",nan\n"]


def non_number(lines: list[str]) -> list[str]:
    return [*lines[:-1], cell(lines[-1], lines[0].split(",").index("val_acc"), "abc")]


def other_number(lines: list[str]) -> list[str]:
    col = lines[0].split(",").index("test_acc")
    old = lines[-1].rstrip("\n").split(",")[col]
    return [*lines[:-1], cell(lines[-1], col, str(round(float(old) + 0.25, 4)))]


def drop_column(name: str) -> Callable[[list[str]], list[str]]:
    def change(lines: list[str]) -> list[str]:
        col = lines[0].split(",").index(name)
        return [",".join(c for i, c in enumerate(ln.rstrip("\n").split(",")) if i != col) + "\n" for ln in lines]

    return change


@dataclass(frozen=True)
class Case:
    id: str
    damage: Callable[[Path], object]  # gets the victim's run folder
    named: str  # the path the error line names, relative to the victim's run folder
    what: str  # regex: what the error line says is wrong
    listed: str = "."  # the folder skip mode lists as damaged, relative to the victim's run folder
    complete: bool = False  # is_complete of the victim's config after the damage
    why: str | None = None  # regex: the reason set_aside records (default: `what`)


CASES = [
    Case("run.json-truncated", lambda f: (f / "run.json").write_text((f / "run.json").read_text()[:300]),
         "run.json", "is corrupt or truncated"),
    Case("run.json-empty", lambda f: (f / "run.json").write_text(""), "run.json", "is corrupt or truncated"),
    Case("config-edited", edit_json(set_config(sigma_w=0.7)), "run.json",
         rf"config that is not its run's: it hashes to run id {run_id(VICTIM.replace(sigma_w=0.7))}, the record "
         rf"says {run_id(VICTIM)}"),
    Case("config-field-lost", edit_json(lambda r: r["config"].pop("seed")), "run.json",
         r"config without the fields \['seed'\]"),
    Case("summary-empty", edit_json(lambda r: r.update(summary={})), "run.json",
         r"summary without the keys \['best_epoch', 'test_acc_at_best'"),
    Case("summary-not-a-number", edit_json(lambda r: r["summary"].update(test_acc_at_best="0.9")), "run.json",
         r"summary test_acc_at_best='0\.9': a number"),
    Case("history-entry-lost", edit_json(lambda r: r.pop("history")), "run.json", r"missing keys \['history'\]"),
    Case("unknown-status", edit_json(lambda r: r.update(status="running")), "run.json", "status 'running'"),
    Case("schema-1", edit_json(to_schema_1), "run.json", r"schema-1 run record .* run `initmem migrate .*` to "
                                                         "upgrade it"),
    Case("history-missing", lambda f: (f / "history.csv").unlink(), "history.csv", "is missing"),
    Case("history-empty", lambda f: (f / "history.csv").write_text(""), "history.csv", "is empty"),
    Case("history-truncated", edit_history(lambda ls: [*ls[:-1], ls[-1][: ls[-1].rindex(",", 0, len(ls[-1]) // 2)]]),
         "history.csv",
         r"has sha256 \w{12}\.\.\., run.json records \w{12}\.\.\.: a value changed after it was written; restore"),
    Case("history-row-lost", edit_history(lambda ls: ls[:-1]), "history.csv", "has 1 rows; run.json records 2"),
    Case("history-header-only", edit_history(lambda ls: ls[:1]), "history.csv", "has 0 rows; run.json records 2"),
    Case("history-row-added", edit_history(lambda ls: [*ls, ls[-1]]), "history.csv", "has 3 rows; run.json "
                                                                                     "records 2"),
    Case("history-column-lost", edit_history(drop_column("val_loss")), "history.csv",
         r"other columns than run.json records: missing \['val_loss'\], unexpected \[\]"),
    Case("history-nan-row", edit_history(nan_row), "history.csv", r"row without any value \(all missing or NaN\) "
                                                                   "on line 3"),
    Case("history-non-number", edit_history(non_number), "history.csv",
         "non-number in column 'val_acc' on line 3: 'abc'"),
    Case("history-number-changed", edit_history(other_number), "history.csv",
         r"has sha256 \w{12}\.\.\., run.json records \w{12}\.\.\.: a value changed after it was written"),
    Case("history-crlf", edit_history(lambda ls: [line.replace("\n", "\r\n") for line in ls]), "history.csv",
         r"has CRLF line endings; it was written with LF .*: clone again with `git -c core.autocrlf=false clone`"),
    # a writer that wrote a malformed history and its checksum: the structural checks alone must catch it
    Case("history-nan-row-resigned", edit_history(nan_row, resign=True), "history.csv", "row without any value"),
    Case("history-non-number-resigned", edit_history(non_number, resign=True), "history.csv",
         "non-number in column 'val_acc'"),
    Case("history-epoch-lost-resigned", edit_history(lambda ls: [*ls[:-1], cell(ls[-1], 0, "")], resign=True),
         "history.csv", "row with no epoch on line 3"),
    Case("history-epochs-out-of-order-resigned", edit_history(lambda ls: [ls[0], ls[2], ls[1]], resign=True),
         "history.csv", "epochs that are not whole numbers increasing from 0"),
    # a folder copied under a second name: the copy's folder name is not its run id, and the id is in two folders
    Case("folder-copied", lambda f: shutil.copytree(f, f.parent / "copy"), "../copy",
         r"run \w{12} of section s1 is in 2 folders: .*\(one run, one folder", listed="../copy", complete=True,
         why="lies in folder 'copy', not in its run id's"),
    Case("folder-moved-to-another-section", lambda f: shutil.move(f, f.parent.parent / "s2" / f.name),
         f"../../s2/{run_id(VICTIM)}/run.json", "lies in section folder 's2', not in its section's 's1'",
         listed=f"../../s2/{run_id(VICTIM)}"),
]


def section_folders(root: Path) -> list[Path]:
    return sorted(f for f in (root / SECTION).iterdir() if f.is_dir())  # not the runs' .lock files


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_damaged_run_is_named_listed_not_complete_and_set_aside(copy, case):
    victim = copy / SECTION / run_id(VICTIM)
    case.damage(victim)
    named, listed = (os.path.normpath(victim / p) for p in (case.named, case.listed))
    for load in (load_runs, load_histories):
        with pytest.raises(ResultsError) as err:
            load(copy)
        line = str(err.value)
        assert "\n" not in line and named in line and re.search(case.what, line), line
    with pytest.warns(UserWarning, match=re.escape(named)):
        runs = load_runs(copy, damaged="skip")
    assert list(runs.attrs["damaged"]) == [listed] and named in runs.attrs["damaged"][listed]
    others = ALL_IDS if case.complete else ALL_IDS - {run_id(VICTIM)}  # the runs that still verify
    assert set(runs["run_id"]) == others and listed not in set(runs["path"])
    with pytest.warns(UserWarning, match=re.escape(named)):
        hist = load_histories(copy, damaged="skip")
    assert set(hist["run_id"]) == others and list(hist.attrs["damaged"]) == [listed]
    assert RunFolders(copy, SECTION).run(VICTIM).is_complete() is case.complete
    with pytest.raises(ResultsError, match=re.escape(named)):
        verify_run(listed)

    before = snapshot(Path(listed))
    moved = set_aside(listed)
    assert not Path(listed).exists() and snapshot(moved) == before  # moved unchanged, nothing deleted
    assert moved.parent == Path(listed).parent / DAMAGED_DIR
    assert re.fullmatch(re.escape(Path(listed).name) + r"-\d{8}T\d{6}Z", moved.name)
    why = (moved.parent / f"{moved.name}.txt").read_text()
    assert named in why and re.search(case.why or case.what, why)
    runs = load_runs(copy)  # the set-aside folder is no longer read
    assert set(runs["run_id"]) == others and runs.attrs["damaged"] == {}


def test_the_undamaged_copy_loads_without_a_warning(copy, recwarn):
    runs, hist = load_runs(copy), load_histories(copy)
    assert len(runs) == len(SIGMAS) and len(hist) == 2 * len(SIGMAS) and not recwarn.list
    assert all(RunFolders(copy, SECTION).run(TrainConfig(**TINY, sigma_w=s)).is_complete() for s in SIGMAS)
    for folder in runs["path"]:
        assert verify_run(folder) == read_run(folder)
        with pytest.raises(ResultsError, match="holds a run that verifies"):
            set_aside(folder)


def test_the_same_run_in_two_places_is_an_error_naming_both(copy):
    victim = copy / SECTION / run_id(VICTIM)
    backup = copy / "backup" / SECTION / victim.name
    shutil.copytree(victim, backup)  # both verify on their own
    assert verify_run(backup) == verify_run(victim)
    for load in (load_runs, load_histories):
        with pytest.raises(ResultsError, match=rf"run {victim.name} of section s1 is in 2 folders") as err:
            load(copy)
        assert str(backup) in str(err.value) and str(victim) in str(err.value)
    with pytest.warns(UserWarning, match=re.escape(str(backup))):
        runs = load_runs(copy, damaged="skip")  # which copy is the run cannot be told: both are listed
    assert sorted(runs.attrs["damaged"]) == sorted([str(backup), str(victim)]) and victim.name not in set(
        runs["run_id"])
    assert len(load_runs(copy / SECTION)) == len(SIGMAS)  # a subtree holding one of them is fine


def test_one_run_in_two_sections_is_two_runs(copy):
    # By design a section is self-contained: a config two sections share (the paper profile's baselines) is trained
    # and stored once in each, so one run id in two sections is no duplicate.
    victim = copy / SECTION / run_id(VICTIM)
    shutil.copytree(victim, copy / "s2" / victim.name)
    edit_json(lambda r: r.update(section="s2"))(copy / "s2" / victim.name)
    runs = load_runs(copy)
    assert len(runs) == len(SIGMAS) + 1 and sorted(runs.loc[runs["run_id"] == victim.name, "section"]) == ["s1", "s2"]


def test_a_results_path_that_does_not_exist_is_named(tmp_path):
    missing = tmp_path / "results" / "cpuu"
    for call in (load_runs, load_histories, lambda p: load_runs(p, damaged="skip"), migrate):
        with pytest.raises(ResultsError, match=re.escape(f"results path {str(missing)!r} does not exist")):
            call(missing)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ResultsError, match="is not a folder"):
        load_runs(tmp_path / "file")


def test_set_aside_twice_in_a_second_keeps_both(copy):
    victim = copy / SECTION / run_id(VICTIM)
    (victim / "history.csv").unlink()
    first = set_aside(victim)
    shutil.copytree(first, victim)
    second = set_aside(victim)
    assert first != second and first.is_dir() and second.is_dir() and snapshot(first) == snapshot(second)


# ------------------------------------------------------------------------------------------------ migration
def test_migrate_upgrades_a_schema_1_record_to_the_bytes_write_wrote(copy):
    victim = copy / SECTION / run_id(VICTIM)
    written, history = (victim / "run.json").read_bytes(), (victim / "history.csv").read_bytes()
    edit_json(to_schema_1)(victim)
    with pytest.raises(ResultsError, match=r"schema-1 run record .* `initmem migrate "):
        load_runs(copy)
    assert not RunFolders(copy, SECTION).run(VICTIM).is_complete()
    assert migrate(copy) == [victim / "run.json"]
    assert (victim / "run.json").read_bytes() == written  # every number, key and byte as RunFolders.write wrote them
    assert (victim / "history.csv").read_bytes() == history
    assert RunFolders(copy, SECTION).run(VICTIM).is_complete() and len(load_runs(copy)) == len(SIGMAS)
    assert migrate(copy) == [] and (victim / "run.json").read_bytes() == written  # idempotent


def test_migrate_refuses_a_record_it_cannot_vouch_for_and_writes_nothing(copy):
    folders = section_folders(copy)
    for f in folders:
        edit_json(to_schema_1)(f)
    edit_json(set_config(sigma_w=0.7))(folders[-1])
    before = {f: snapshot(f) for f in folders}
    with pytest.raises(ResultsError, match=re.escape(str(folders[-1] / "run.json")) + ".* hashes to run id"):
        migrate(copy)
    assert {f: snapshot(f) for f in folders} == before  # all checked before any was written


def test_initmem_migrate_upgrades_then_verifies_and_says_what_it_did(copy, capsys):
    for f in section_folders(copy):
        edit_json(to_schema_1)(f)
    assert main(["migrate", str(copy)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:-1] == [f"upgraded {f / 'run.json'}" for f in section_folders(copy)]
    assert out[-1] == f"initmem migrate: 3 run record(s) upgraded to schema 2; all 3 runs under {copy} verify"
    assert main(["migrate", str(copy)]) == 0
    assert capsys.readouterr().out.startswith("initmem migrate: 0 run record(s) upgraded")
    (copy / SECTION / run_id(VICTIM) / "history.csv").write_text("")
    assert main(["migrate", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("initmem migrate: error: ") and "history.csv' is empty" in err


def test_the_committed_cpu_study_verifies():
    runs = load_runs(REPO / "results" / "cpu")
    assert len(runs) == 100 and (runs["status"] == "complete").all() and runs.attrs["damaged"] == {}
    assert all(Path(p).name == rid for p, rid in zip(runs["path"], runs["run_id"], strict=True))
    assert runs["precision"].eq("fp32").all() and runs["eval_every"].eq(1).all()
    rows = load_histories(REPO / "results" / "cpu").groupby("run_id").size()
    assert rows.to_dict() == (runs.set_index("run_id")["epochs_run"] + 1).to_dict()  # epochs 0 .. E of every run


def test_reading_results_does_not_import_torch(tree):
    code = ("import sys, initmem.store.results as r; from initmem.cli.commands import main\n"
            "from initmem.config import TrainConfig; from initmem.store.folders import RunFolders\n"
            "runs, hist = r.load_runs(sys.argv[1]), r.load_histories(sys.argv[1])\n"
            "rec = r.verify_run(runs['path'][0])\n"
            "assert len(runs) == 3 and len(hist) == 6\n"
            "assert RunFolders(sys.argv[1], 's1').run(TrainConfig.from_dict(rec['config'])).is_complete()\n"
            "assert main(['migrate', sys.argv[1]]) == 0\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
