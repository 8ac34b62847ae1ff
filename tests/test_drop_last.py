"""`drop_last`: each epoch's partial last minibatch is dropped (the tau_interp measurement artefact of
docs/findings.md); the default keeps it, and committed run ids do not change."""

from __future__ import annotations

from initmem.config import TrainConfig, run_id
from initmem.engine.trainer import train
from initmem.study import plan

BASE = dict(data="synthetic", arch="resnet9", width=0.0625, n_train=50, n_val=20, n_test=20, batch_size=16,
            epochs=2, device="cpu")


def test_default_keeps_the_run_id_and_the_partial_batch():
    c = TrainConfig(**BASE)
    assert run_id(c) == run_id(c.replace(drop_last=False))
    assert run_id(c) != run_id(c.replace(drop_last=True))
    assert plan.run_plan(c)["steps_per_epoch"] == 4  # 16 + 16 + 16 + 2


def test_engine_and_planner_count_the_same_steps_with_drop_last():
    c = TrainConfig(**BASE, drop_last=True)
    seen: list[int] = []
    (r,) = train([c], progress=False, on_step=seen.append)
    assert plan.run_plan(c)["steps"] == 6 == len(seen)  # 50 // 16 = 3 full batches an epoch
    assert list(r.history["step"]) == [0, 3, 6]
    assert r.summary["steps"] == 6


def test_drop_last_is_a_flag():
    import pytest

    from initmem.errors import ConfigError

    with pytest.raises(ConfigError, match=r"drop_last=1 is invalid"):
        TrainConfig(**BASE, drop_last=1)


def test_records_written_before_the_field_read_as_the_old_behaviour(tmp_path):
    """A committed run.json has no drop_last: it is read as drop_last=False (how it was trained), not as damaged."""
    import json
    import shutil
    from pathlib import Path

    from initmem.store.results import load_runs

    src = next((Path(__file__).resolve().parent.parent / "results" / "cpu" / "01_optimizers").glob("*/run.json"))
    dst = tmp_path / "01_optimizers" / src.parent.name
    shutil.copytree(src.parent, dst)
    config = json.loads((dst / "run.json").read_text())["config"]
    assert "drop_last" not in config
    runs = load_runs(tmp_path)
    assert len(runs) == 1 and runs.drop_last.tolist() == [False]
