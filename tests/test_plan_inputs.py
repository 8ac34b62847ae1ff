"""The planner's inputs are checked before they are used: a throughput table with a time that is not a finite positive
number, an unknown configuration or entry key, no entries or a device of another kind is one line; calibration
checks where it will write before it measures anything; the flags that only `--calibrate` reads are refused without
it."""

from __future__ import annotations

import json
import math

import pytest
from test_plan import OPT, _table

from initmem.cli.commands import main
from initmem.study import calibrate

GOOD = ("resnet9", 0.125, 128, "fp32", 1, 0.01, 1e-5)


def _err(capsys) -> str:
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and cap.err.startswith("initmem plan: error: "), cap.err
    return cap.err


@pytest.mark.parametrize("column, value", [(5, -0.05), (5, math.nan), (5, 0.0), (5, math.inf), (6, -1e-5),
                                           (6, math.nan), (1, 0.0), (2, 0)])
def test_a_time_or_size_that_is_not_finite_and_positive_is_refused(tmp_path, capsys, column, value):
    entry = list(GOOD)
    entry[column] = value
    f = _table(tmp_path / "t.json", [GOOD, tuple(entry)])
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f]) == 2
    err = _err(capsys)
    name = {1: "width", 2: "batch_size", 5: "train_step_s", 6: "eval_image_s"}[column]
    assert f"{name}={value!r}" in err and f in err
    assert ("an integer in [1," if column == 2 else "finite positive") in err
    assert "entry 2 (resnet9 fp32)" in err and "time" not in capsys.readouterr().out


@pytest.mark.parametrize("column, value, accepted", [
    (4, 2.7, "an integer in [1, "), (2, 127.9, "an integer in [1, "), (2, 128.0, "an integer in [1, "),
    (1, True, "a finite positive number up to 64"), (4, True, "an integer in [1, "), (2, "128", "an integer"),
    (5, 1e306, "a finite positive number up to 86400 (seconds)"), (6, False, "a finite positive number"),
    (5, "0.05", "a finite positive number"),
])  # fmt: skip
def test_a_field_of_another_type_or_an_absurd_time_is_refused_not_converted(tmp_path, capsys, column, value, accepted):
    """members 2.7 is no 2, batch_size 127.9 no 127, width true no 1, and 1e306 s is refused, not printed as inf h."""
    entry = list(GOOD)
    entry[column] = value
    f = _table(tmp_path / "t.json", [GOOD, tuple(entry)])
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f]) == 2
    err = _err(capsys)
    name = {1: "width", 2: "batch_size", 4: "members", 5: "train_step_s", 6: "eval_image_s"}[column]
    assert f"{name}={value!r} is invalid: {accepted}" in err and "entry 2" in err and f in err
    assert "inf" not in capsys.readouterr().out


def test_two_entries_for_one_configuration_are_refused_naming_both(tmp_path, capsys):
    slow = (*GOOD[:5], 5.0, GOOD[6])
    f = _table(tmp_path / "t.json", [GOOD, (*GOOD[:4], 2, 0.02, 1e-5), slow])  # the same key, entries 1 and 3
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f]) == 2
    err = _err(capsys)
    assert "two entries for resnet9 w0.125 b128 fp32: entry 1 (train_step_s=0.01) and entry 3 (train_step_s=5)" in err
    f = _table(tmp_path / "ok.json", [GOOD, (*GOOD[:4], 2, 0.02, 1e-5), (*GOOD[:2], 256, *GOOD[3:])])
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f]) == 0  # other members, other batch: distinct
    assert "time" in capsys.readouterr().out


@pytest.mark.parametrize("doc, said", [
    ({"device": "x", "kind": "cuda", "entries": []}, "no entries"),
    ({"device": "TPU v5", "kind": "tpu", "entries": [dict(zip(
        ("arch", "width", "batch_size", "precision", "members", "train_step_s", "eval_image_s"), GOOD,
        strict=True))]}, "kind 'tpu'"),
    ({"device": "x", "kind": "cuda", "entries": [{"width": 1, "batch_size": 128, "precision": "fp32",
                                                  "train_step_s": 0.1, "eval_image_s": 1e-4}]}, "KeyError: 'arch'"),
    ({"device": "x", "kind": "cuda", "entries": [dict(zip(
        ("arch", "width", "batch_size", "precision", "members", "train_step_s", "eval_image_s"),
        ("resnet7", *GOOD[1:]), strict=True))]}, "arch='resnet7'"),
])
def test_a_table_without_entries_configuration_or_known_device_is_refused(tmp_path, capsys, doc, said):
    (tmp_path / "t.json").write_text(json.dumps(doc))
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", str(tmp_path / "t.json")]) == 2
    assert said in _err(capsys)


@pytest.mark.parametrize("key, hint", [("optimiser", " (did you mean 'optimizer'?)"), ("note", "")])
def test_an_unknown_key_in_an_entry_is_refused_naming_it_and_the_accepted_ones(tmp_path, capsys, key, hint):
    """A misspelt `optimiser` was read as SGD's entry (the key's default); any key that is no field is one line."""
    f = _table(tmp_path / "t.json", [GOOD, (*GOOD[:2], 256, *GOOD[3:])])
    doc = json.loads((tmp_path / "t.json").read_text())
    doc["entries"][1][key] = "adam"
    (tmp_path / "t.json").write_text(json.dumps(doc))
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f]) == 2
    err = _err(capsys)
    assert f"{f!r}, entry 2 has an unknown key {key!r}{hint}: arch, width, batch_size, precision, members, " \
           "train_step_s, eval_image_s, optimizer are accepted" in err
    assert "time" not in capsys.readouterr().out


def test_a_table_of_another_device_kind_is_refused_for_an_explicit_device(tmp_path, capsys):
    f = _table(tmp_path / "t.json", [GOOD])  # measured on a CUDA device
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f, "--device", "cpu"]) == 2
    assert "not on a cpu device" in _err(capsys)
    assert main(["plan", OPT, "--profile", "cpu", "--throughput", f]) == 0  # auto: planning for that device
    assert "time" in capsys.readouterr().out


def test_calibration_checks_its_output_path_before_it_measures(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(calibrate, "calibrate", lambda *a, **k: pytest.fail("measured before the path was checked"))
    (tmp_path / "afile").write_text("x")
    for target in (tmp_path / "afile" / "t.json", tmp_path):
        assert main(["plan", "--calibrate", "--device", "cpu", "--throughput", str(target)]) == 2
        err = _err(capsys)
        assert str(target) in err and ("which is a file" in err or "is a folder" in err)
        assert "calibrating" not in capsys.readouterr().out


def test_calibrate_only_flags_are_refused_without_it_and_bad_ones_before_it_says_anything(tmp_path, capsys):
    for flags, named in ((["--members", "4"], "--members"), (["--steps", "3"], "--steps"),
                         (["--steps", "3", "--members", "2"], "--steps and --members")):
        assert main(["plan", OPT, "--profile", "cpu", *flags]) == 2
        assert f"{named} apply only to --calibrate" in _err(capsys)
    assert main(["plan", "--calibrate", "--device", "cpu", "--steps", "0", "--throughput",
                 str(tmp_path / "t.json")]) == 2
    assert "--steps=0 is invalid: an integer in [1, " in _err(capsys) and "calibrating" not in capsys.readouterr().out
