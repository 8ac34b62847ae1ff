"""The results tree (write, read, completeness, loaders), point_summary and provenance, on hand-made runs (no
training). The damaged-results cases, set_aside and migrate are in test_damaged_results.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from initmem import metrics
from initmem.engine.trainer import RunResult, TrainConfig
from initmem.errors import ConfigError, NoResults, ResultsError
from initmem.metrics import point_summary
from initmem.store.folders import RunFolders
from initmem.store.provenance import cpu_bf16, provenance
from initmem.store.record import HISTORY_COLUMNS
from initmem.store.results import (
    HISTORY_CONFIG_COLUMNS,
    RUN_COLUMNS,
    SUMMARY_KEYS,
    load_histories,
    load_runs,
    read_run,
    run_id,
    verify_run,
)

CONFIG_FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]


def fake_result(sigma_w: float = 1.0, seed: int = 0, status: str = "complete", epochs: int = 3) -> RunResult:
    """A run as train() would return it, without training: a made-up history that interpolates at epoch 2."""
    cfg = TrainConfig(sigma_w=sigma_w, seed=seed, epochs=epochs, data="synthetic")
    e = np.arange(epochs + 1)
    h = pd.DataFrame({
        "epoch": e, "step": e * 10, "lr": [math.nan] + [cfg.lr] * epochs,
        "train_loss": [math.nan] + [1.0 / (k + 1) for k in range(epochs)],
        "train_acc_running": [math.nan] + [0.5] * epochs, "train_acc": np.minimum(1.0, 0.5 * e),
        "val_loss": [2.3, 1.0, 0.9, 1.1][: epochs + 1], "val_acc": [0.1, 0.5, 0.6, 0.62][: epochs + 1],
        "test_loss": 2.0 - 0.1 * e, "test_acc": 0.1 + 0.1 * e + sigma_w / 100, "weight_norm": 10.0 + e / 3,
        "T_SGD": cfg.lr**2 * e * 10 / cfg.batch_size, "T_L2": 0.0 * e, "T_adapt": cfg.lr * e * 10,
        "wall_time": 0.1 + e, "norm:prep.conv": 1.0 + e / 7,
    })  # fmt: skip
    return RunResult(cfg, run_id(cfg), status, h, metrics.summarize_history(h), None,
                     {"git_commit": "abc123", "data_source": "synthetic:test"}, "2026-01-01T00:00:00+00:00",
                     "2026-01-01T00:01:00+00:00")


# ------------------------------------------------------------------------------------------------ writing, reading
def test_write_writes_history_and_a_strict_json_record(tmp_path):
    result = fake_result()
    folder = RunFolders(tmp_path, "sec").write(result)
    assert folder == tmp_path / "sec" / result.run_id == RunFolders(tmp_path, "sec").run(result.config).folder
    assert sorted(p.name for p in folder.iterdir()) == ["history.csv", "run.json"]  # no temp files left behind
    text = (folder / "run.json").read_text()
    rec = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert list(rec) == ["schema", "run_id", "section", "status", "config", "summary", "history", "provenance",
                         "started_at", "finished_at"]
    assert rec["schema"] == 2 and rec["section"] == "sec" and rec["status"] == "complete"
    assert TrainConfig.from_dict(rec["config"]) == result.config
    assert rec["summary"]["tau_interp"] == 2 and rec["summary"]["best_epoch"] == 2
    data = (folder / "history.csv").read_bytes()
    assert rec["history"] == {"sha256": hashlib.sha256(data).hexdigest(), "rows": 4,
                              "columns": list(result.history.columns)}
    assert read_run(folder) == read_run(folder / "run.json") == verify_run(folder) == rec


def test_write_refuses_a_result_that_would_not_verify(tmp_path):
    result = fake_result()
    for bad, what in [(dataclasses.replace(result, status="running"), "status 'running'"),
                      (dataclasses.replace(result, summary={"best_epoch": 2}), "summary without the keys"),
                      (dataclasses.replace(result, provenance=None), "provenance=None"),
                      (dataclasses.replace(result, run_id="0123456789ab"), "hashes to run id")]:
        with pytest.raises(ResultsError, match=re.escape(what)):
            RunFolders(tmp_path, "sec").write(bad)
    assert not (tmp_path / "sec").exists()  # refused before anything was created
    h = result.history
    nan_epoch = h.assign(epoch=h["epoch"].where(h["epoch"] != 2))
    for history, what in [(h.iloc[:0], "has no rows"), (h.drop(columns="val_loss"), "lacks the columns ['val_loss']"),
                          (nan_epoch, "has a row with no epoch on line 4"),
                          (h.assign(val_acc=["0.1", "x", "0.2", "0.3"]), "non-number in column 'val_acc' on line 3"),
                          (h.iloc[::-1], "epochs that are not whole numbers increasing from 0")]:
        with pytest.raises(ResultsError, match=re.escape(what)):
            RunFolders(tmp_path, "sec").write(dataclasses.replace(result, history=history))
        assert not (RunFolders(tmp_path, "sec").run(result.config).folder / "run.json").exists()
        assert not RunFolders(tmp_path, "sec").run(result.config).is_complete()


def test_non_finite_numbers_are_written_as_null(tmp_path):
    result = fake_result()
    result.summary["repair_gap"] = float("nan")
    result.summary["norm_ratio"] = np.float64("inf")
    rec = read_run(RunFolders(tmp_path, "sec").write(result))
    assert rec["summary"]["repair_gap"] is None and rec["summary"]["norm_ratio"] is None


def test_is_complete_needs_a_valid_finished_record_and_the_history(tmp_path):
    result = fake_result()
    assert not RunFolders(tmp_path, "sec").run(result.config).is_complete()
    folder = RunFolders(tmp_path, "sec").write(result)
    assert RunFolders(tmp_path, "sec").run(result.config).is_complete()
    assert not RunFolders(tmp_path, "other").run(result.config).is_complete()
    (folder / "history.csv").unlink()
    assert not RunFolders(tmp_path, "sec").run(result.config).is_complete()
    RunFolders(tmp_path, "sec").write(dataclasses.replace(result, status="diverged"))
    assert RunFolders(tmp_path, "sec").run(result.config).is_complete()
    rec = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**rec, "status": "running"}))
    assert not RunFolders(tmp_path, "sec").run(result.config).is_complete()


@pytest.mark.parametrize("content", ['{"schema": 2, "run_id": "x", "sect', "", "[1, 2]", '{"schema": 2}',
                                     "\x00\xff garbage"])
def test_a_corrupt_run_json_is_named_by_read_run_and_the_loaders(tmp_path, content):
    good = RunFolders(tmp_path, "sec").write(fake_result(sigma_w=0.5))
    bad = RunFolders(tmp_path, "sec").write(fake_result(sigma_w=2.0))
    (bad / "run.json").write_text(content, encoding="latin-1")
    named = re.escape(str(bad / "run.json"))
    with pytest.raises(ResultsError, match=named):
        read_run(bad)
    assert not RunFolders(tmp_path, "sec").run(fake_result(sigma_w=2.0).config).is_complete()
    for load in (load_runs, load_histories):
        with pytest.raises(ResultsError, match=named):
            load(tmp_path)
    with pytest.warns(UserWarning, match=named):
        runs = load_runs(tmp_path, damaged="skip")
    assert runs["path"].tolist() == [str(good)] and list(runs.attrs["damaged"]) == [str(bad)]
    with pytest.warns(UserWarning, match=named):
        assert set(load_histories(tmp_path, damaged="skip")["run_id"]) == {good.name}


def test_read_run_names_a_missing_file_and_a_wrong_schema(tmp_path):
    with pytest.raises(ResultsError, match="does not exist"):
        read_run(tmp_path / "nope")
    folder = RunFolders(tmp_path, "sec").write(fake_result())
    rec = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**rec, "schema": 99}))
    with pytest.raises(ResultsError, match="schema 99"):
        read_run(folder)
    with pytest.raises(ConfigError, match="damaged='ignore' is invalid"):
        load_runs(tmp_path, damaged="ignore")


def test_writable_refuses_a_path_under_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ResultsError, match=re.escape(str(tmp_path / "f" / "sec"))):
        RunFolders(tmp_path / "f", "sec").writable()
    assert RunFolders(tmp_path / "a", "b").writable().is_dir()


# ------------------------------------------------------------------------------------------------ loaders
def test_load_runs_reads_a_tree_of_any_depth_with_the_contract_columns(tmp_path):
    a, b = fake_result(sigma_w=0.5), fake_result(sigma_w=2.0, status="diverged")
    RunFolders(tmp_path / "cpu", "s1").write(a)
    RunFolders(tmp_path / "paper" / "deeper", "s2").write(b)
    runs = load_runs(tmp_path)
    assert list(runs.columns[:4]) == list(RUN_COLUMNS)
    assert set(CONFIG_FIELDS) | set(SUMMARY_KEYS) | {"git_commit", "data_source"} <= set(runs.columns)
    runs = runs.set_index("run_id")
    assert runs.loc[a.run_id, "section"] == "s1" and runs.loc[b.run_id, "status"] == "diverged"
    assert runs.loc[b.run_id, "sigma_w"] == 2.0 and runs.loc[a.run_id, "betas"] == (0.9, 0.999)
    assert runs.loc[a.run_id, "tau_interp"] == 2 and runs.loc[a.run_id, "git_commit"] == "abc123"
    assert runs.loc[a.run_id, "data_source"] == "synthetic:test"
    assert Path(runs.loc[b.run_id, "path"]) == tmp_path / "paper" / "deeper" / "s2" / b.run_id
    assert load_runs(tmp_path / "cpu")["run_id"].tolist() == [a.run_id]  # a subtree
    assert load_runs(tmp_path / "cpu" / "s1" / a.run_id)["run_id"].tolist() == [a.run_id]  # one run folder


def test_load_histories_adds_run_and_config_columns_and_keeps_values(tmp_path):
    a, b = fake_result(sigma_w=0.5, epochs=2), fake_result(sigma_w=2.0, seed=3)
    RunFolders(tmp_path, "s").write(a)
    RunFolders(tmp_path, "s").write(b)
    h = load_histories(tmp_path)
    assert list(h.columns[:2 + len(HISTORY_CONFIG_COLUMNS)]) == ["run_id", "section", *HISTORY_CONFIG_COLUMNS]
    assert len(h) == 3 + 4 and set(h["run_id"]) == {a.run_id, b.run_id}
    hb = h[h["run_id"] == b.run_id]
    assert (hb["seed"] == 3).all() and (hb["sigma_w"] == 2.0).all() and (hb["lr"] == 0.01).all()
    back = hb.drop(columns=["run_id", "section", *HISTORY_CONFIG_COLUMNS]).rename(columns={"lr_epoch": "lr"})
    pd.testing.assert_frame_equal(back.reset_index(drop=True), b.history, check_dtype=False, check_exact=True)


def test_a_folder_without_run_records_is_said_in_one_line_as_a_missing_path_is(tmp_path):
    """A folder of unrelated files (or an empty one) holds no run: NoResults naming it and what it holds, not an
    empty frame that looks like a result; a missing path is a ResultsError too (NoResults is one)."""
    for load in (load_runs, load_histories):
        with pytest.raises(NoResults, match=rf"^results folder {re.escape(repr(str(tmp_path)))} holds no runs .*it is "
                                            "empty\\): a results tree, a section or a run folder is accepted$"):
            load(tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "images" / "cat").mkdir(parents=True)
    (tmp_path / "images" / "cat" / "run.jsonl").write_text("{}")
    for damaged in ("raise", "skip"):
        with pytest.raises(NoResults, match=r"holds no runs \(no <run_id>/run.json under it; it holds images/, "
                                            r"notes.txt\)"):
            load_runs(tmp_path, damaged=damaged)
    with pytest.raises(ResultsError, match="does not exist"):
        load_runs(tmp_path / "nope")


def test_a_tree_whose_runs_are_all_skipped_gives_empty_frames_with_the_columns(tmp_path):
    (RunFolders(tmp_path, "sec").write(fake_result()) / "history.csv").write_text("epoch\n0\n")  # damaged
    with pytest.warns(UserWarning, match="skipping a damaged run"):
        runs, hist = load_runs(tmp_path, damaged="skip"), load_histories(tmp_path, damaged="skip")
    assert runs.empty and hist.empty and len(runs.attrs["damaged"]) == len(hist.attrs["damaged"]) == 1
    assert set(RUN_COLUMNS) | set(CONFIG_FIELDS) | set(SUMMARY_KEYS) <= set(runs.columns)
    assert {"run_id", "section", *HISTORY_CONFIG_COLUMNS, "epoch", "lr_epoch", "val_loss"} <= set(hist.columns)
    assert "lr" in HISTORY_COLUMNS


def test_run_id_is_stable_across_sessions():
    # Pinned: a changed id orphans every stored result. Change it only with a deliberate migration.
    assert run_id(TrainConfig()) == run_id(TrainConfig().to_dict()) == "cec40c3ebfe8"


# ------------------------------------------------------------------------------------------------ a point
def test_point_summary_averages_seeds_before_the_spread():
    df = pd.DataFrame({
        "sigma_w": [0.5, 0.5, 1.0, 1.0, 2.0, 2.0], "seed": [0, 1, 0, 1, 0, 1],
        "status": ["complete"] * 5 + ["diverged"], "interpolated": [True, True, True, False, None, False],
        "test_acc_at_best": [0.80, 0.70, 0.60, 0.60, 0.50, None],
    })  # fmt: skip
    s = point_summary(df)
    # per-sigma means 0.75, 0.60, 0.50 -> 25 pp; per seed: seed 0 0.80-0.50 = 30 pp, seed 1 0.70-0.60 = 10 pp
    assert s["spread_pp"] == pytest.approx(25.0)
    assert s["spread_seed_std_pp"] == pytest.approx(np.std([30.0, 10.0], ddof=1))
    assert (s["best_sigma_w"], s["worst_sigma_w"]) == (0.5, 2.0)
    assert (s["n_runs"], s["n_interpolated"], s["n_diverged"], s["n_complete"]) == (6, 3, 1, 5)
    assert s["test_acc_by_sigma_w"] == pytest.approx({0.5: 0.75, 1.0: 0.60, 2.0: 0.50})
    one_seed = point_summary(df[df["seed"] == 0])
    assert one_seed["spread_pp"] == pytest.approx(30.0) and one_seed["spread_seed_std_pp"] is None
    # one sigma_w with accuracy (a sweep under way, or the others diverged) is no spread: None, not 0 pp
    partial = point_summary(df[df["sigma_w"] != 1.0].assign(test_acc_at_best=[0.80, 0.70, None, None]))
    assert partial["spread_pp"] is None and partial["sigma_ws_missing"] == [2.0]
    assert partial["test_acc_by_sigma_w"] == pytest.approx({0.5: 0.75})
    with pytest.raises(ConfigError, match="test_acc_at_best"):
        point_summary(df.drop(columns="test_acc_at_best"))


def test_a_point_asks_the_store_by_run_each_id_hashed_once(tmp_path, monkeypatch, capsys):
    """`train_point` names each run once (`RunFolders.run`): whether it is damaged, complete, locked or failed is asked
    of its handle, never of a config hashed again (a complete point: one run id per run in the store)."""
    from initmem.store import folders
    from initmem.study.point import train_point
    results = [fake_result(sigma_w=s) for s in (0.5, 2.0)]
    for r in results:
        RunFolders(tmp_path, "sec").write(r)
    calls = []
    monkeypatch.setattr(folders, "run_id", lambda c: calls.append(c) or run_id(c))
    runs = train_point([r.config for r in results], results=tmp_path, section="sec")
    assert calls == [r.config for r in results] and runs["run_id"].tolist() == [r.run_id for r in results]
    assert "skipping 2 complete run(s)" in capsys.readouterr().out
    run = RunFolders(tmp_path, "sec").run(results[0].config)
    assert (run.run_id, run.folder, run.checkpoints) == (results[0].run_id, tmp_path / "sec" / results[0].run_id,
                                                          tmp_path / "sec" / results[0].run_id / "checkpoints")
    assert RunFolders(None, "sec").run(results[0].config).folder is None  # a tree that keeps nothing
    assert not RunFolders(None, "sec").run(results[0].config).is_complete()


def test_loading_warns_only_for_corrupt_files(tmp_path):
    RunFolders(tmp_path, "s").write(fake_result())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_runs(tmp_path)) == 1 and len(load_histories(tmp_path)) == 4


# ------------------------------------------------------------------------------------------------ provenance
PROVENANCE_KEYS = {"git_commit", "git_dirty", "git_diff", "python", "torch", "torchvision", "numpy", "pandas",
                   "initmem", "cuda", "torch_threads", "cpu_capability", "platform", "hostname", "device",
                   "device_name", "cpu_count", "cpu_bf16", "timestamp_utc"}


def test_provenance_names_the_code_the_software_and_the_machine():
    p = provenance("cpu")
    assert set(p) == PROVENANCE_KEYS and json.loads(json.dumps(p)) == p
    assert p["torch"] and p["numpy"] and p["device"] == "cpu" and p["cpu_count"] >= 1
    import torch  # loaded (the engine's tests import it): the vector ISA its CPU kernels dispatch to is named
    assert p["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and p["cpu_capability"]
    assert p["cpu_bf16"] is cpu_bf16()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", p["timestamp_utc"])
    if (Path(__file__).resolve().parents[1] / ".git").exists() and p["git_commit"] is not None:
        assert re.fullmatch(r"[0-9a-f]{40}", p["git_commit"]) and isinstance(p["git_dirty"], bool)
        assert (p["git_diff"] is None) is (not p["git_dirty"])  # a modified tree records its modification


@pytest.mark.parametrize("text, want", [("flags\t\t: fpu avx2 avx512f\n", False),
                                        ("model name: x\nflags\t: fpu avx512_bf16 avx2\n", True),
                                        ("flags\t: sse amx_bf16\n", True),
                                        ("Features\t: fp asimd bf16 i8mm\n", True),  # Arm
                                        ("Features\t: fp asimd\n", False),
                                        ("processor\t: 0\n", None), (None, None)])
def test_cpu_bf16_reads_the_cpus_flags(tmp_path, text, want):
    path = tmp_path / "cpuinfo"
    if text is not None:
        path.write_text(text)
    assert cpu_bf16(path) is want


def test_provenance_without_git_gives_none_and_does_not_raise(monkeypatch):
    monkeypatch.setenv("PATH", "")  # no git executable to be found
    p = provenance(None)
    assert p["git_commit"] is None and p["git_dirty"] is None and p["python"]
