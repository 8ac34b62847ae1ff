"""`initmem train`: flags generated from TrainConfig, one run written end to end, one-line errors with exit 2."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from initmem.cli.commands import _train_value, build_parser, main
from initmem.config import TrainConfig, field_help
from initmem.errors import ConfigError
from initmem.store.results import read_run

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--arch", "resnet9", "--width", "0.0625", "--data", "synthetic", "--n-train", "128", "--n-val", "50",
        "--n-test", "50", "--device", "cpu"]


def test_train_writes_one_run_folder_and_prints_it_with_a_summary(tmp_path, capsys):
    rc = main(["train", *TINY, "--sigma-w", "0.5", "--optimizer", "sgd", "--lr", "0.01", "--batch-size", "64",
               "--epochs", "2", "--out", str(tmp_path), "--seed", "0", "--section", "cli", "--no-progress",
               "--no-channels-last", "--train-eval-size", "None"])
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    folder = Path(out[0])
    assert folder.parent == tmp_path / "cli" and len(out) == 2
    assert out[1].startswith("complete: epochs_run=2 best_epoch=") and "test_acc_at_best=" in out[1]
    rec = read_run(folder)
    cfg = TrainConfig.from_dict(rec["config"])
    assert cfg == TrainConfig(arch="resnet9", width=0.0625, data="synthetic", n_train=128, n_val=50, n_test=50,
                              device="cpu", sigma_w=0.5, lr=0.01, batch_size=64, epochs=2, channels_last=False)
    assert rec["summary"]["steps"] == 4 and (folder / "history.csv").is_file()


def test_every_field_has_a_documented_flag_with_its_default(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["train", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # undo argparse's line wrapping
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        assert flag in text, flag
        if f.type == "bool":
            assert "--no-" + f.name.replace("_", "-") in text
    assert all(field_help(f.name) in text for f in dataclasses.fields(TrainConfig) if "%" not in field_help(f.name))
    assert "(default: 0.9 0.999)" in text and "(default: resnet9)" in text and "(default: per optimizer)" in text


def test_flags_are_converted_to_the_field_types():
    args = build_parser().parse_args(["train", "--betas", "0.8", "0.99", "--n-train", "none", "--epochs", "3",
                                      "--augment", "--width", "0.5"])
    assert vars(args)["betas"] == ["0.8", "0.99"] and args.augment is True
    assert "sigma_w" not in vars(args)  # unset flags keep TrainConfig's defaults
    assert _train_value("betas", "tuple[float, float]", ["0.8", "0.99"]) == (0.8, 0.99)
    assert _train_value("n_train", "int | None", "none") is None
    assert _train_value("epochs", "int", "3") == 3 and _train_value("width", "float", "1") == 1.0
    with pytest.raises(ConfigError, match=r"^TrainConfig\.epochs='3\.5' is invalid: an integer is accepted$"):
        _train_value("epochs", "int", "3.5")


@pytest.mark.parametrize("argv,needle", [
    (["--sigma-w", "-1"], "TrainConfig.sigma_w=-1.0 is invalid"),
    (["--lr", "fast"], "TrainConfig.lr='fast' is invalid"),
    (["--optimizer", "adagrad"], "TrainConfig.optimizer='adagrad' is invalid"),
    (["--lrr", "1"], None),  # an unknown flag is argparse's usage error, also exit 2
])  # fmt: skip
def test_a_bad_value_is_one_error_line_and_exit_2(tmp_path, capsys, argv, needle):
    if needle is None:
        with pytest.raises(SystemExit) as exc:
            main(["train", *argv])
        assert exc.value.code == 2
        return
    assert main(["train", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"initmem train: error: {needle}: ")
    assert not any(tmp_path.iterdir())


def test_the_module_entry_point_exits_2_with_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "initmem.cli", "train", "--batch-size", "0", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "initmem train: error: TrainConfig.batch_size=0 is invalid: an integer in [1, 10000000]"]
