"""Each run trained once in a results tree (`store.serve`): a run another section holds is served, not trained, its
provenance naming where it came from; a locked source is not served; the sweep's dry run and the planner count it;
a run that is the first epochs of a longer one is served as exactly the record its own training writes, and only
then."""

from __future__ import annotations

import io
import math
import subprocess
from pathlib import Path

import faults
import pandas as pd
import pytest
from test_locks import HOLD
from test_results import fake_result
from test_sweep import _repo

from initmem.config import TrainConfig, point_configs, run_id
from initmem.metrics import FULL_TEST_COLUMNS
from initmem.store.folders import RunFolders
from initmem.store.record import run_summary
from initmem.store.results import load_runs, read_run, verify_run
from initmem.store.serve import origin, serve
from initmem.study import plan, point
from initmem.study.params import load_section
from initmem.study.sweep import run_sweep

pytestmark = pytest.mark.usefixtures("one_torch_thread")
RUNS = [TrainConfig(**faults.TINY, epochs=1, sigma_w=s) for s in (0.5, 2.0)]
PROFILE = """\
    smoke:
      fixed: {data: synthetic, width: 0.0625, epochs: 1, batch_size: 32, n_train: 64, n_val: 32, n_test: 32,
              sigma_ws: [0.5, 2.0], device: cpu}
"""


@pytest.fixture
def trained(monkeypatch) -> list[TrainConfig]:
    """The configs `point.train` trains from now on (a population's members each)."""
    calls, train = [], point.train

    def counted(configs, **kw):
        calls.extend([configs] if isinstance(configs, TrainConfig) else configs)
        return train(configs, **kw)
    monkeypatch.setattr(point, "train", counted)
    return calls


def _record(folder: Path) -> tuple[dict, bytes]:
    return read_run(folder), (folder / "history.csv").read_bytes()


def test_a_run_two_sections_ask_for_is_trained_once_and_served_to_the_second(tmp_path, trained, capsys):
    point.train_point(RUNS, results=tmp_path, section="a", progress=False)
    assert len(trained) == 2
    b = point.train_point(RUNS, results=tmp_path, section="b", progress=False)
    assert len(trained) == 2 and capsys.readouterr().out.count("served from a/") == 2  # nothing trained again
    for c in RUNS:
        (a_rec, a_csv), (b_rec, b_csv) = _record(tmp_path / "a" / run_id(c)), _record(tmp_path / "b" / run_id(c))
        assert b_csv == a_csv and b_rec["section"] == "b" and verify_run(tmp_path / "b" / run_id(c))
        assert b_rec["provenance"] == {**a_rec["provenance"], "served_from": f"a/{run_id(c)}"}
        assert {k: v for k, v in b_rec.items() if k not in ("section", "provenance")} == {
            k: v for k, v in a_rec.items() if k not in ("section", "provenance")}
    assert list(b["served_from"]) == [f"a/{run_id(c)}" for c in RUNS]
    both = load_runs(tmp_path)  # the tree loads: one run, one folder per section
    assert sorted(both["section"]) == ["a", "a", "b", "b"] and both["served_from"].isna().sum() == 2
    assert origin(RunFolders(tmp_path, "c").run(RUNS[0])).name == f"a/{run_id(RUNS[0])}"  # the trained one first


def test_a_run_another_process_holds_locked_is_not_served(tmp_path, trained):
    point.train_point(RUNS[:1], results=tmp_path, section="a", progress=False)
    source, run = tmp_path / "a" / run_id(RUNS[0]), RunFolders(tmp_path, "b").run(RUNS[0])
    go = tmp_path / "go"
    child = subprocess.Popen([*faults.python_cmd(HOLD), str(source), str(go)], env=faults.env(),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "GOT"
        assert origin(run) is None and serve(run) is None and not run.folder.exists()
    finally:
        go.write_text("pass\n")
        child.wait(timeout=120)
    assert origin(run) is not None and serve(run).folder == source and run.is_complete()
    assert len(trained) == 1


def test_the_dry_run_and_the_planner_count_a_served_run_and_the_point_serves_it(tmp_path, trained, capsys):
    path = _repo(tmp_path, PROFILE)
    section, out = load_section(path), tmp_path / "out"
    (pt,) = section.points("smoke", out)
    configs = point_configs(section.effective(pt))
    point.train_point(configs[:1], results=out, section="elsewhere", progress=False)
    capsys.readouterr()
    report = run_sweep(path, profile="smoke", results=out, dry_run=True)
    text = capsys.readouterr().out
    assert (report.points[0].runs, report.points[0].served) == ("0/2", 1)
    assert "run (0/2 runs complete, 1 served)" in text and "to run: 1 run, 2 steps; served: 1 run" in text
    (p,) = plan.plan_section(path, "smoke", results=out).points
    assert (p.done, p.to_serve, p.left) == (0, 1, 1)
    point.train_point(configs, results=out, section="t", progress=False)
    assert [run_id(c) for c in trained] == [run_id(c) for c in configs]  # the served one is not trained again
    (p,) = plan.plan_section(path, "smoke", results=out).points
    assert (p.done, p.to_serve, p.left) == (2, 0, 0)


def test_the_planner_leaves_a_run_an_earlier_section_trains_out_of_what_is_left(tmp_path):
    path = _repo(tmp_path, PROFILE)
    other = path.with_name("u.yaml")
    other.write_text(path.read_text().replace("section: t", "section: u"))
    first, second = plan.share_runs([plan.plan_section(p, "smoke", results=tmp_path / "out") for p in (path, other)])
    assert (first.points[0].left, second.points[0].left) == (2, 0)
    assert second.totals()["left_runs"] == 0 and second.totals()["runs"] == 0


def test_a_prefix_is_served_exactly_as_its_own_training_writes_it(tmp_path, trained):
    """The first 1 and 2 epochs of 4-epoch runs (one population, full_test) against the same runs trained directly:
    every summary field but the wall time and every history value but wall_time are equal. The 1-epoch prefix is
    always served (a selection rule picks epoch 1, so the longer run evaluated the whole test set there); the 2-epoch
    one where the longer run evaluated it at epoch 2 too, and else trained."""
    long = [c.replace(epochs=4, full_test=True) for c in RUNS]
    point.train_point(long, results=tmp_path / "tree", section="long", progress=False)
    h4 = [pd.read_csv(tmp_path / "tree" / "long" / run_id(c) / "history.csv") for c in long]
    assert len(trained) == 2
    for epochs in (1, 2):
        short, before = [c.replace(epochs=epochs) for c in long], len(trained)
        served = point.train_point(short, results=tmp_path / "tree", section=f"short{epochs}", progress=False)
        exact = [h.loc[h["epoch"] == epochs, FULL_TEST_COLUMNS[1]].notna().item() for h in h4]
        assert exact == [True, True] or epochs == 2
        assert list(served["served_from"].notna()) == exact and len(trained) == before + exact.count(False)
        point.train_point(short, results=tmp_path / "direct", section=f"short{epochs}", progress=False)
        for c, row, ok in zip(short, served.itertuples(), exact, strict=True):
            if not ok:
                continue
            (got, got_csv), (want, want_csv) = (_record(tmp_path / t / f"short{epochs}" / run_id(c))
                                                for t in ("tree", "direct"))
            assert row.served_from == f"long/{run_id(c.replace(epochs=4))}, its first {epochs} epoch" + "s" * (
                epochs > 1)
            assert {k: got[k] for k in ("run_id", "status", "config")} == {k: want[k] for k in ("run_id", "status",
                                                                                                 "config")}
            assert {**got["summary"], "wall_time_s": 0} == {**want["summary"], "wall_time_s": 0}
            h, d = (pd.read_csv(io.BytesIO(x)) for x in (got_csv, want_csv))
            assert list(h.columns) == list(d.columns) and set(FULL_TEST_COLUMNS) <= set(h.columns)
            pd.testing.assert_frame_equal(h.drop(columns="wall_time"), d.drop(columns="wall_time"), check_exact=True)


def _write(tmp_path: Path, section: str, result) -> Path:
    return RunFolders(tmp_path, section).write(result)


def test_a_prefix_is_not_served_where_its_record_cannot_be_derived_exactly(tmp_path):
    """Made-up records (no training): the longer run's row at the prefix's last epoch lacks the whole-test-set
    evaluation the run alone makes there; a longer run that no longer verifies; a schedule that is not constant."""
    long = fake_result(epochs=3)
    long.config = long.config.replace(full_test=True)
    long.history[list(FULL_TEST_COLUMNS)] = math.nan
    long.history.loc[1, list(FULL_TEST_COLUMNS)] = [1.5, 0.4]  # evaluated at epoch 1, not at epoch 2
    _write(tmp_path, "long", long)
    assert origin(RunFolders(tmp_path, "s").run(long.config.replace(epochs=2))) is None
    at_one = RunFolders(tmp_path, "s").run(long.config.replace(epochs=1))
    csv = (tmp_path / "long" / long.run_id / "history.csv").read_bytes()
    (tmp_path / "long" / long.run_id / "history.csv").write_bytes(csv.replace(b"0.4", b"0.5"))  # damaged: no source
    assert origin(at_one) is None
    (tmp_path / "long" / long.run_id / "history.csv").write_bytes(csv)
    assert origin(at_one).name == f"long/{long.run_id}, its first 1 epoch" and serve(at_one) is not None
    cosine = fake_result(epochs=3)
    cosine.config = cosine.config.replace(schedule="cosine")
    cosine.run_id = run_id(cosine.config)
    _write(tmp_path, "long", cosine)
    assert origin(RunFolders(tmp_path, "s").run(cosine.config.replace(epochs=2))) is None


def test_a_prefix_of_a_run_that_diverged_within_it_is_served_as_that_diverged_run(tmp_path):
    """A longer run that diverged at epoch 2 of 3: its 2- and 3-epoch prefixes diverged there too (the whole history,
    `run_summary` of a diverged run); its 1-epoch prefix is complete."""
    long = fake_result(epochs=3)
    long.config, long.status = long.config.replace(epochs=4), "diverged"
    long.run_id = run_id(long.config)
    long.history.loc[2:, "train_loss"] = math.inf
    long.history = long.history.iloc[:3]
    _write(tmp_path, "long", long)
    for epochs, status, rows in ((3, "diverged", 3), (2, "diverged", 3), (1, "complete", 2)):
        run = RunFolders(tmp_path, "s").run(long.config.replace(epochs=epochs))
        assert serve(run) is not None
        rec = read_run(run.folder)
        h = pd.read_csv(run.folder / "history.csv")
        assert (rec["status"], len(h)) == (status, rows) and rec["summary"] == run_summary(h, status)
