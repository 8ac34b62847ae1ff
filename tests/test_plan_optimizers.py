"""The planner times each optimiser's own step (study/plan.py `lookup`, study/throughput.py): an entry of that
optimiser where the table has one; else SGD's, plus Muon's extra cost where the table timed Muon elsewhere (not
scaled by the batch size); else SGD's, said on the point. Muon at ns_dtype float32 is its own step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from initmem.cli.commands import main
from initmem.config import TrainConfig
from initmem.errors import ConfigError
from initmem.study import calibrate, plan, throughput

OPT = str(Path(__file__).resolve().parent.parent / "params" / "01_optimizers.yaml")

KEYS = ("arch", "width", "batch_size", "precision", "members", "train_step_s", "eval_image_s", "optimizer")


def _table(path, entries, kind="cpu"):
    doc = {"device": "CPU Test" if kind == "cpu" else "NVIDIA Test", "kind": kind, "torch": "x",
           "entries": [dict(zip(KEYS, e, strict=False)) for e in entries]}
    path.write_text(json.dumps(doc))
    return throughput.load_throughput(path)


def test_step_optimizer_names_muon_float32_apart():
    assert throughput.step_optimizer(TrainConfig(optimizer="adam")) == "adam"
    assert throughput.step_optimizer(TrainConfig(optimizer="muon")) == "muon"
    assert throughput.step_optimizer(TrainConfig(optimizer="muon", ns_dtype="float32")) == "muon/float32"
    assert throughput.optimizer_fields("muon/float32") == {"optimizer": "muon", "ns_dtype": "float32"}
    assert throughput.optimizer_fields("adamw") == {"optimizer": "adamw"}


def test_muon_adds_its_measured_extra_to_sgds_step_not_scaled_by_the_batch(tmp_path):
    t = _table(tmp_path / "t.json", [("resnet9", 0.25, 32, "fp32", 1, 0.1, 1e-3, "sgd"),
                                     ("resnet9", 0.25, 32, "fp32", 1, 0.5, 1e-3, "muon"),
                                     ("resnet9", 0.25, 128, "fp32", 1, 0.3, 1e-3, "sgd")])
    e, src = plan.lookup(t, TrainConfig(width=0.25, batch_size=32, optimizer="muon"))
    assert (src, e.train_step_s, e.optimizer) == ("measured", 0.5, "muon")
    e, src = plan.lookup(t, TrainConfig(width=0.25, batch_size=128, optimizer="muon"))
    assert e.train_step_s == pytest.approx(0.3 + 0.4) and e.optimizer == "muon"  # SGD's b128 + Muon's 0.4 s
    assert src == "measured, + muon's extra 400 ms a step as timed at resnet9 w0.25 b32 fp32 muon"
    e, src = plan.lookup(t, TrainConfig(width=0.5, batch_size=128, optimizer="muon"))  # width^2 scales both parts
    assert e.train_step_s == pytest.approx(0.3 * 4 + 0.4 * 4)
    assert src.startswith("estimated from resnet9 w0.25 b128 fp32, + muon's extra 1.6e+03 ms")


def test_without_a_muon_entry_muon_is_planned_as_sgd_and_says_so(tmp_path, capsys):
    path = tmp_path / "t.json"
    t = _table(path, [("resnet9", 0.125, 128, "fp32", 1, 0.01, 1e-5)])  # written before optimisers were keyed
    assert t.entries[0].optimizer == "sgd"
    e, src = plan.lookup(t, TrainConfig(width=0.125, optimizer="muon"))
    assert e.train_step_s == 0.01 and src == "measured; muon's own cost not timed here: sgd's step"
    # a Muon entry in bfloat16 does not time Muon in float32: another step
    t = _table(path, [("resnet9", 0.125, 128, "fp32", 1, 0.01, 1e-5), ("resnet9", 0.125, 128, "fp32", 1, 0.04, 1e-5,
                                                                       "muon")])
    e, src = plan.lookup(t, TrainConfig(width=0.125, optimizer="muon", ns_dtype="float32"))
    assert e.train_step_s == 0.01 and e.optimizer == "muon/float32" and "muon/float32's own cost not timed" in src
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", str(path), "--json"]) == 0
    points = {p["grid"]["optimizer"]: p for p in json.loads(capsys.readouterr().out)["sections"][0]["points"]}
    assert points["muon"]["time_source"] == "measured" and points["muon"]["key"]["optimizer"] == "muon"
    assert points["muon"]["seconds"] == pytest.approx(8 * (960 * 0.04 + 324_000 * 1e-5))
    for name in ("sgd_momentum", "adam", "adamw"):  # elementwise updates: SGD's step, no remark
        assert points[name]["time_source"] == "measured"
        assert points[name]["seconds"] == pytest.approx(8 * (960 * 0.01 + 324_000 * 1e-5))


def test_an_adaptive_optimisers_own_entry_is_used_where_the_table_has_it(tmp_path):
    t = _table(tmp_path / "t.json", [("resnet9", 0.125, 128, "fp32", 1, 0.01, 1e-5),
                                     ("resnet9", 0.125, 128, "fp32", 1, 0.02, 1e-5, "adam")])
    assert plan.lookup(t, TrainConfig(width=0.125, optimizer="adam"))[0].train_step_s == 0.02
    assert plan.lookup(t, TrainConfig(width=0.125, optimizer="adamw"))[0].train_step_s == 0.01


def test_the_table_refuses_an_unknown_optimiser_and_keys_entries_by_optimiser(tmp_path):
    with pytest.raises(ConfigError, match=r"entry 1 has optimizer='lion': one of sgd, .*muon/float32 is accepted"):
        _table(tmp_path / "t.json", [("resnet9", 0.125, 128, "fp32", 1, 0.01, 1e-5, "lion")])
    t = _table(tmp_path / "t.json", [("resnet9", 0.125, 128, "fp32", 1, 0.01, 1e-5, "sgd"),
                                     ("resnet9", 0.125, 128, "fp32", 1, 0.04, 1e-5, "muon")])
    assert len(t.entries) == 2  # one configuration, two optimisers: not a duplicate
    with pytest.raises(ConfigError, match="two entries for resnet9 w0.125 b128 fp32 muon"):
        _table(tmp_path / "t.json", [("resnet9", 0.125, 128, "fp32", 1, 0.01, 1e-5, "muon"),
                                     ("resnet9", 0.125, 128, "fp32", 1, 0.04, 1e-5, "muon")])
    throughput.save_throughput(t, tmp_path / "u.json")
    assert throughput.load_throughput(tmp_path / "u.json").entries == t.entries  # the optimiser round-trips


def test_calibration_keys_and_the_default_set_carry_the_optimiser():
    plans = [plan.plan_section(OPT, "cpu_w025")]
    assert calibrate.calibration_keys(plans) == [("resnet9", 0.25, 32, "fp32", o) for o in
                                                 ("sgd", "adam", "muon", "sgd_momentum", "adamw")]
    assert {k[4] for k in plan.DEFAULT_SET} == {"sgd", "muon"} and all(len(k) == 5 for k in plan.DEFAULT_SET)


def test_calibrate_times_muon_at_float32_as_its_own_entry():
    t = calibrate.calibrate([("resnet9", 0.0625, 32, "fp32", "muon/float32")], device="cpu", steps=1, warmup=1,
                            say=lambda s: None)
    (e,) = t.entries
    assert e.optimizer == "muon/float32" and e.train_step_s > 0
