"""The training engine: TrainConfig validation, the history contract, clocks, divergence, determinism, precision,
evaluation every N epochs, progress.

Runs are tiny (ResNet-9 at width 1/16, 256 synthetic training images, 2 epochs: about a second each on one CPU).
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pandas as pd
import pytest
import torch

from initmem import config as config_mod
from initmem import metrics
from initmem.config import RUN_ID_EXCLUDE, TrainConfig
from initmem.engine import models, optim, runtime
from initmem.engine import trainer as train_mod
from initmem.engine.trainer import _progress_mode, train
from initmem.errors import ConfigError, ResultsError
from initmem.store.folders import RunFolders
from initmem.store.record import HISTORY_COLUMNS
from initmem.store.results import load_histories, load_runs, read_run, run_id

TINY = dict(arch="resnet9", width=0.0625, sigma_w=1.0, optimizer="sgd", lr=0.05, weight_decay=5e-4, batch_size=64,
            epochs=2, data="synthetic", n_train=256, n_val=100, n_test=100, device="cpu")
STEPS_PER_EPOCH = 4  # 256 / 64
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # 2 shared cores: one thread is faster under load
LAYERS = models.layer_names(models.build_model("resnet9", 1.0, 0.0625))
DIAGNOSTICS = [f"{kind}{suffix}" for kind in ("angle", "disp", "step_angle")
               for suffix in ("", *(f":{n}" for n in LAYERS))] + ["Theta"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    return train(TrainConfig(**TINY), out_dir=out, section="sec", progress=False), out


# ------------------------------------------------------------------------------------------------ the history
def test_history_has_the_contract_columns_and_an_epoch_zero_row(run):
    result, _ = run
    h = result.history
    assert list(h.columns) == [*HISTORY_COLUMNS, *metrics.EXTRA_CLOCKS, *(f"norm:{n}" for n in LAYERS), *DIAGNOSTICS]
    assert h["epoch"].tolist() == [0, 1, 2]
    first = h.iloc[0]
    assert first["step"] == 0 and math.isnan(first["train_loss"]) and math.isnan(first["train_acc_running"])
    assert math.isnan(first["lr"])  # no step taken yet
    assert (first[["T_SGD", "T_L2", "T_adapt", *metrics.EXTRA_CLOCKS, "Theta"]] == 0).all()
    assert (first[[c for c in DIAGNOSTICS if c.startswith(("angle", "disp"))]] == 0).all()  # at initialisation
    assert first[[c for c in DIAGNOSTICS if c.startswith("step_angle")]].isna().all()  # no step yet
    later = h.iloc[1:][DIAGNOSTICS]
    assert np.isfinite(later.to_numpy()).all() and (later > 0).all().all()  # every layer moved
    for col in ("val_loss", "test_loss", "train_acc", "weight_norm"):
        assert math.isfinite(first[col]), col  # measured at initialisation
    assert h["wall_time"].is_monotonic_increasing and (h["wall_time"] >= 0).all()


def test_clocks_and_steps_follow_the_closed_form_for_a_constant_lr(run):
    h, cfg = run[0].history, run[0].config
    steps = np.array([0, 1, 2]) * STEPS_PER_EPOCH
    assert h["step"].tolist() == steps.tolist()
    assert h["lr"].iloc[1:].tolist() == [cfg.lr, cfg.lr]
    np.testing.assert_allclose(h["T_adapt"], cfg.lr * steps, rtol=1e-12)
    np.testing.assert_allclose(h["T_SGD"], cfg.lr**2 * steps / cfg.batch_size, rtol=1e-12)
    np.testing.assert_allclose(h["T_L2"], cfg.weight_decay * cfg.lr * steps, rtol=1e-12)
    for clock in ("T_SGD", "T_L2", "T_adapt"):  # plain SGD: the momentum-aware clocks are the plain ones
        assert h[f"{clock}_eff"].tolist() == h[clock].tolist()


def test_accuracies_are_fractions_and_weight_norm_is_the_norm_of_the_layer_norms(run):
    h = run[0].history
    for col in ("train_acc_running", "train_acc", "val_acc", "test_acc"):
        vals = h[col].dropna()
        assert ((vals >= 0) & (vals <= 1)).all(), col
    # 256 train, 100 val/test images: every accuracy is a whole number of images
    np.testing.assert_allclose(h["val_acc"] * 100, np.round(h["val_acc"] * 100), atol=1e-9)
    layer_cols = [c for c in h.columns if c.startswith("norm:")]
    np.testing.assert_allclose(h["weight_norm"], np.sqrt((h[layer_cols] ** 2).sum(axis=1)), rtol=1e-6)
    assert h["weight_norm"].iloc[2] != h["weight_norm"].iloc[0]  # training moved the weights


def test_epoch_zero_norms_are_those_of_the_seeded_initialisation(run):
    torch.manual_seed(0)  # TrainConfig's default seed
    model = models.build_model("resnet9", TINY["sigma_w"], TINY["width"])
    h = run[0].history
    norms = {name: model.get_submodule(name).weight.double().norm().item() for name in models.layer_names(model)}
    assert h["weight_norm"].iloc[0] == pytest.approx(math.sqrt(sum(v * v for v in norms.values())), rel=1e-6)
    for name, norm in norms.items():
        assert h[f"norm:{name}"].iloc[0] == pytest.approx(norm, rel=1e-6)


def test_summary_is_summarize_history_of_the_history(run):
    result = run[0]
    assert result.status == "complete"
    assert list(result.summary) == [*metrics.SUMMARY_KEYS, *metrics.DIAGNOSTIC_KEYS]
    assert result.summary == metrics.summarize_history(result.history)
    assert result.summary["epochs_run"] == 2 and result.summary["steps"] == 2 * STEPS_PER_EPOCH
    assert result.summary["diverged_epoch"] is None


def test_the_written_run_reads_back_through_load_runs_and_load_histories(run):
    result, out = run
    assert result.path == out / "sec" / result.run_id and RunFolders(out, "sec").run(result.config).is_complete()
    runs = load_runs(out)
    assert len(runs) == 1
    row = runs.iloc[0]
    assert (row["run_id"], row["section"], row["status"]) == (result.run_id, "sec", "complete")
    assert row["sigma_w"] == 1.0 and row["lr"] == 0.05 and row["betas"] == (0.9, 0.999)
    assert row["data_source"].startswith("synthetic:") and row["T_adapt"] == pytest.approx(0.05 * 8)
    assert row["test_acc_at_best"] == result.summary["test_acc_at_best"]
    hist = load_histories(out)
    assert hist["epoch"].tolist() == [0, 1, 2] and (hist["run_id"] == result.run_id).all()
    assert (hist["lr"] == 0.05).all() and (hist["sigma_w"] == 1.0).all()  # the config's lr, constant per run
    back = hist.drop(columns=["run_id", "section", "arch", "width", "sigma_w", "optimizer", "lr", "weight_decay",
                              "batch_size", "seed", "epochs"]).rename(columns={"lr_epoch": "lr"})
    pd.testing.assert_frame_equal(back, result.history, check_dtype=False, check_exact=True)  # CSV keeps every bit
    rec = read_run(result.path)
    assert rec["provenance"]["data_source"] == row["data_source"] and rec["started_at"] <= rec["finished_at"]


def test_a_scheduled_muon_run_logs_the_lr_of_each_epochs_last_step_and_sums_the_clocks_step_by_step():
    cfg = TrainConfig(**{**TINY, "optimizer": "muon", "lr": 0.02, "weight_decay": 0.01, "schedule": "cosine",
                         "warmup_epochs": 0.5, "epochs": 2})
    h = train(cfg, progress=False).history
    total = 2 * STEPS_PER_EPOCH
    lrs = [cfg.lr * optim.lr_factor("cosine", k, total, warmup_steps=2) for k in range(total)]
    assert h["lr"].iloc[1:].tolist() == pytest.approx([lrs[STEPS_PER_EPOCH - 1], lrs[-1]], rel=1e-12)
    expected = metrics.forgetting_clocks(lrs, cfg.batch_size, cfg.weight_decay)
    assert {k: h[k].iloc[-1] for k in expected} == pytest.approx(expected, rel=1e-12)
    assert h["train_loss"].iloc[1:].map(math.isfinite).all()


# ------------------------------------------------------------------------------------------------ determinism
def test_the_same_seed_gives_the_same_history_and_another_seed_another(run):
    again = train(TrainConfig(**TINY), progress=False)
    pd.testing.assert_frame_equal(again.history.drop(columns="wall_time"), run[0].history.drop(columns="wall_time"))
    other = train(TrainConfig(**{**TINY, "seed": 1, "epochs": 1}), progress=False)
    assert other.history["weight_norm"].iloc[0] != run[0].history["weight_norm"].iloc[0]  # another init
    assert not other.history["train_loss"].iloc[1:].equals(run[0].history["train_loss"].iloc[1:2])


def test_amsgrad_reaches_the_optimiser_the_loop_builds():
    """The same Adam run with and without AMSGrad: the same start, other steps (a loop that dropped the field would
    train plain Adam under an amsgrad run id)."""
    adam = {**TINY, "optimizer": "adam", "lr": 1e-2, "weight_decay": 0.0, "epochs": 2}
    plain, ams = (train(TrainConfig(**adam, amsgrad=a), progress=False).history for a in (False, True))
    assert plain["weight_norm"].iloc[0] == ams["weight_norm"].iloc[0]
    assert not plain["weight_norm"].iloc[1:].equals(ams["weight_norm"].iloc[1:])


def test_augmentation_is_seeded_and_changes_training(run):
    cfg = TrainConfig(**{**TINY, "epochs": 1, "augment": True, "channels_last": False})
    a, b = train(cfg, progress=False), train(cfg, progress=False)
    pd.testing.assert_frame_equal(a.history.drop(columns="wall_time"), b.history.drop(columns="wall_time"))
    plain = run[0].history  # the same recipe without augmentation (its epoch 1 does not depend on `epochs`)
    assert a.history["val_loss"].iloc[0] == pytest.approx(plain["val_loss"].iloc[0], rel=1e-5)  # same init
    assert a.history["train_loss"].iloc[1] != pytest.approx(plain["train_loss"].iloc[1], rel=1e-3)


# ------------------------------------------------------------------------------------------------ divergence
def test_a_huge_learning_rate_is_recorded_as_diverged_and_returns(tmp_path):
    cfg = TrainConfig(**{**TINY, "lr": 1e20, "epochs": 3})
    result = train(cfg, out_dir=tmp_path, progress=False)
    assert result.status == "diverged" and result.summary["diverged_epoch"] == 1
    assert result.history["epoch"].tolist() == [0, 1]  # kept up to and including the diverged epoch
    assert not math.isfinite(result.history["train_loss"].iloc[1])
    assert read_run(result.path)["status"] == "diverged" and RunFolders(tmp_path, "adhoc").run(cfg).is_complete()


# ------------------------------------------------------------------------------------------------ progress
def test_progress_lines_print_one_line_per_epoch_and_progress_false_prints_nothing(capsys, monkeypatch):
    monkeypatch.setenv("INITMEM_PROGRESS", "lines")
    cfg = TrainConfig(**{**TINY, "epochs": 2})
    train(cfg, progress=True)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("run ")  # a header, then one line per epoch
    assert "epoch 1/2 " in lines[1] and "epoch 2/2 " in lines[2] and " val " in lines[2] and " norm " in lines[2]
    train(cfg.replace(epochs=1), progress=False)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


@pytest.mark.parametrize("env,tty,expected", [("", True, "bar"), ("", False, "lines"), ("lines", True, "lines"),
                                              ("bar", False, "bar"), ("off", True, None)])
def test_progress_mode_follows_the_terminal_unless_initmem_progress_says_otherwise(monkeypatch, env, tty, expected):
    monkeypatch.setenv("INITMEM_PROGRESS", env)
    monkeypatch.setattr("sys.stderr.isatty", lambda: tty)
    assert _progress_mode(True) == expected and _progress_mode(False) is None


# ------------------------------------------------------------------------------------------------ refusals
def test_an_unwritable_results_folder_fails_before_any_data_is_loaded(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")

    def no_loading(*a, **k):
        raise AssertionError("data were loaded before the results folder was checked")

    monkeypatch.setattr("initmem.engine.trainer._data.load_cifar10", no_loading)
    with pytest.raises(ResultsError, match=str(blocker)):
        train(TrainConfig(**TINY), out_dir=blocker, progress=False)


def test_a_bf16_cpu_run_trains_and_differs_from_fp32_only_slightly(run):
    """bf16 autocast on the CPU: the forward runs in bfloat16, weights and metrics stay fp32. Measured after one
    epoch: losses within 0.5 % of the fp32 run's, the weight norm within 1e-5."""
    fp32 = run[0].history  # epoch 1 of the 2-epoch fp32 run is what a 1-epoch run measures (constant lr)
    result = train(TrainConfig(**{**TINY, "epochs": 1, "precision": "bf16"}), progress=False)
    h = result.history
    assert result.status == "complete" and result.provenance["precision"] == "bf16"
    assert run[0].provenance["precision"] == "fp32" and run[0].provenance["allow_tf32"] is False
    assert h["weight_norm"].iloc[0] == fp32["weight_norm"].iloc[0]  # the same fp32 initialisation
    for col in ("train_loss", "val_loss", "test_loss"):
        assert h[col].iloc[1] == pytest.approx(fp32[col].iloc[1], rel=3e-2), col
        assert h[col].iloc[1] != fp32[col].iloc[1], col  # bfloat16 really ran
    assert h["weight_norm"].iloc[1] == pytest.approx(fp32["weight_norm"].iloc[1], rel=1e-4)
    assert h["angle"].iloc[1] == pytest.approx(fp32["angle"].iloc[1], rel=3e-2)


def test_tf32_is_cuda_only():
    with pytest.raises(ConfigError, match=r"^TrainConfig\.precision='tf32' is invalid: .*CUDA only") as err:
        TrainConfig(**{**TINY, "precision": "tf32"})  # device="cpu" explicitly: refused at construction
    assert "\n" not in str(err.value)
    if not torch.cuda.is_available():  # device="auto" resolves to the CPU here: refused before training
        with pytest.raises(ConfigError, match=r"^TrainConfig\.precision='tf32' is invalid: .*CUDA only") as err:
            train(TrainConfig(**{**TINY, "device": "auto", "precision": "tf32"}), progress=False)
        assert "\n" not in str(err.value)


def test_engine_settings_are_recorded_in_the_provenance(run):
    prov = run[0].provenance
    assert {k: prov[k] for k in ("precision", "deterministic", "allow_tf32", "cudnn_benchmark")} == {
        "precision": "fp32", "deterministic": False, "allow_tf32": False, "cudnn_benchmark": False}
    assert runtime.run_device(TrainConfig(**TINY)) == torch.device("cpu")


# ------------------------------------------------------------------------------------------------ eval_every
def test_eval_every_measures_every_nth_epoch_and_trains_the_same(run):
    base = TrainConfig(**{**TINY, "epochs": 4})
    every = train(base, progress=False).history
    sparse = train(base.replace(eval_every=2), progress=False).history
    assert sparse["epoch"].tolist() == [0, 2, 4] and sparse["step"].tolist() == [0, 8, 16]
    same = every[every["epoch"].isin([0, 2, 4])].reset_index(drop=True)
    clocks = ["T_SGD", "T_L2", "T_adapt", *metrics.EXTRA_CLOCKS, "step", "lr"]
    assert sparse[clocks].iloc[-1].tolist() == same[clocks].iloc[-1].tolist()
    # evaluation does not touch training: every measured value is the every-epoch run's, bit for bit, except the
    # per-step angle, which is averaged over the steps since the last measured epoch (two epochs here)
    steps = [c for c in sparse.columns if c.startswith("step_angle")]
    keep = [c for c in sparse.columns if c not in steps and c != "wall_time"]
    pd.testing.assert_frame_equal(sparse[keep], same[keep], check_exact=True)
    for epoch, row in ((2, 1), (4, 2)):
        pair = every[every["epoch"].isin([epoch - 1, epoch])][steps].mean()  # equal steps per epoch
        np.testing.assert_allclose(sparse[steps].iloc[row], pair, rtol=1e-12)
    assert run_id(base.replace(eval_every=2)) != run_id(base) == run_id(base.replace(eval_every=1))


def test_time_steps_returns_seconds_per_step():
    t = train_mod.time_steps(TrainConfig(**TINY), steps=3, warmup=1)
    assert isinstance(t, float) and 0 < t < 60
    t2 = train_mod.time_steps(TrainConfig(**TINY), steps=3, warmup=1, population=2)
    assert isinstance(t2, float) and 0 < t2 < 60


# ------------------------------------------------------------------------------------------------ TrainConfig
@pytest.mark.parametrize("name,value", [
    ("arch", "resnet18"), ("width", 0), ("width", True), ("sigma_w", -1.0), ("sigma_w", float("nan")),
    ("sigma_w", "1.0"), ("optimizer", "adagrad"), ("lr", 0.0), ("lr", float("inf")), ("momentum", 1.0),
    ("weight_decay", -1e-4), ("betas", (0.9,)), ("betas", (0.9, 1.0)), ("eps", 0), ("ns_steps", 0),
    ("ns_steps", 5.0), ("schedule", "linear"), ("warmup_epochs", -1), ("step_milestones", (0.75, 0.5)),
    ("step_milestones", (1.5,)), ("step_gamma", 0.0), ("data", "mnist"), ("data_root", ""), ("n_train", 0),
    ("n_val", None), ("n_test", 2.5), ("split_seed", -1), ("augment", 1), ("train_eval_size", 0),
    ("batch_size", 0), ("batch_size", 32.0), ("epochs", True), ("seed", -3), ("device", "gpu"),
    ("device", "cuda:x"), ("eval_batch_size", 0), ("checkpoint_every", -1), ("channels_last", "yes"),
    ("precision", "fp16"), ("precision", "amp"), ("compile", None), ("eval_every", 0), ("eval_every", 3),
    ("deterministic", 1), ("amsgrad", 1),
])  # fmt: skip
def test_a_bad_field_is_a_one_line_config_error_naming_field_and_value(name, value):
    with pytest.raises(ConfigError) as err:
        TrainConfig(**{**TINY, name: value})
    msg = str(err.value)
    assert msg.startswith(f"TrainConfig.{name}={value!r} is invalid: ") and "\n" not in msg
    assert isinstance(err.value, ValueError)


def test_none_defaults_resolve_per_optimizer_and_ints_become_floats():
    assert (TrainConfig().lr, TrainConfig().momentum, TrainConfig().weight_decay) == (0.01, 0.0, 0.0)
    assert TrainConfig(optimizer="sgd_momentum").momentum == 0.9
    assert (TrainConfig(optimizer="adamw").lr, TrainConfig(optimizer="adamw").weight_decay) == (1e-3, 1e-2)
    assert (TrainConfig(optimizer="muon").lr, TrainConfig(optimizer="muon").momentum) == (0.02, 0.95)
    c = TrainConfig(optimizer="adam", width=1, sigma_w=2, betas=[0, 0.5])
    assert type(c.width) is float and type(c.sigma_w) is float and c.betas == (0.0, 0.5)
    assert run_id(c) == run_id(TrainConfig(optimizer="adam", width=1.0, sigma_w=2.0, betas=(0.0, 0.5)))


def test_an_unused_hyper_parameter_must_keep_its_neutral_value():
    with pytest.raises(ConfigError, match=r"TrainConfig\.momentum=0\.9 is invalid: optimizer='sgd' does not use"):
        TrainConfig(optimizer="sgd", momentum=0.9)
    assert TrainConfig(optimizer="muon", ns_steps=3).ns_steps == 3
    with pytest.raises(ConfigError, match=r"TrainConfig\.amsgrad=True is invalid: optimizer='muon' does not use"):
        TrainConfig(optimizer="muon", amsgrad=True)
    assert TrainConfig(optimizer="adamw", amsgrad=True).replace(optimizer="sgd").amsgrad is False


def test_every_field_has_its_help_beside_it():
    for f in dataclasses.fields(TrainConfig):
        assert config_mod.field_help(f.name) == f.metadata["help"] and f.metadata["help"].strip(), f.name
    assert "sigma_w" in config_mod.field_help("sigma_w") and "CUDA only" in config_mod.field_help("precision")


def test_to_dict_from_dict_round_trip_and_unknown_keys():
    c = TrainConfig(optimizer="adam", schedule="step", step_milestones=(0.3,), n_train=1000)
    d = c.to_dict()
    assert d["step_milestones"] == [0.3] and d["betas"] == [0.9, 0.999]
    assert TrainConfig.from_dict(d) == c
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_dict({**d, "lrr": 0.1, "sigma": 1.0})
    msg = str(err.value)
    assert "'lrr' (did you mean 'lr'?)" in msg and "'sigma' (did you mean 'sigma_w'?)" in msg
    assert "accepted fields are arch, width, sigma_w" in msg and "\n" not in msg


def test_replace_revalidates_and_moves_optimizer_defaults_with_the_optimizer():
    sgd = TrainConfig()
    assert sgd.replace(optimizer="adam").lr == 1e-3  # followed the optimiser: it was sgd's default
    assert sgd.replace(lr=0.1).replace(optimizer="adam").lr == 0.1  # an explicit choice is kept
    assert TrainConfig(optimizer="muon").replace(optimizer="sgd").momentum == 0.0
    with pytest.raises(ConfigError, match="TrainConfig.sigma_w=0.0"):
        sgd.replace(sigma_w=0.0)
    with pytest.raises(ConfigError, match="did you mean 'sigma_w'"):
        sgd.replace(sigma=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sgd.lr = 1.0


def test_run_id_excludes_only_fields_that_cannot_change_the_result():
    base = TrainConfig(**TINY)
    assert run_id(base) == run_id(TrainConfig(**TINY)) and len(run_id(base)) == 12
    int(run_id(base), 16)
    same = base.replace(device="auto", eval_batch_size=7, checkpoint_every=3, data_root="x", channels_last=False,
                        compile=True, deterministic=True, full_test=True)
    assert run_id(same) == run_id(base)
    assert RUN_ID_EXCLUDE == {"device", "eval_batch_size", "checkpoint_every", "data_root", "channels_last",
                              "compile", "deterministic", "full_test"}  # full_test: tests/test_full_test.py
    for change in (dict(sigma_w=2.0), dict(seed=1), dict(lr=0.1), dict(augment=True), dict(precision="bf16"),
                   dict(eval_every=2)):
        assert run_id(base.replace(**change)) != run_id(base), change
    adam = base.replace(optimizer="adam")  # a field added later renames no run at its id_default
    before_amsgrad = {k: v for k, v in adam.to_dict().items() if k != "amsgrad"}  # a record written before it
    assert run_id(adam.replace(amsgrad=True)) != run_id(adam) == run_id(before_amsgrad)
    assert config_mod.LATER_FIELDS["amsgrad"] is False
    muon = base.replace(optimizer="muon")  # ns_dtype too: the recipe's bfloat16 keeps every Muon run's id
    before_ns_dtype = {k: v for k, v in muon.to_dict().items() if k != "ns_dtype"}
    assert run_id(muon.replace(ns_dtype="float32")) != run_id(muon) == run_id(before_ns_dtype)
    with pytest.raises(ConfigError, match=r"ns_dtype='float16'.*bfloat16"):
        muon.replace(ns_dtype="float16")
    with pytest.raises(ConfigError, match=r"ns_dtype='float32'.*optimizer='adam'"):
        adam.replace(ns_dtype="float32")
    assert muon.replace(ns_dtype="float32").replace(optimizer="adam").ns_dtype == "bfloat16"  # back to neutral


# ------------------------------------------------------------------------------------------------ real data
@pytest.mark.cifar10
def test_one_epoch_on_real_cifar10_images(cifar10_real, monkeypatch):
    monkeypatch.setenv("INITMEM_CACHE", str(cifar10_real.cache_dir))  # the archive decoded once per session
    cfg = TrainConfig(**{**TINY, "data": "imagefolder", "data_root": str(cifar10_real.archive), "epochs": 1,
                         "n_train": 500, "batch_size": 100, "train_eval_size": 200})
    result = train(cfg, progress=False)
    assert result.status == "complete" and result.provenance["data_source"].startswith("imagefolder-tar:")
    assert result.provenance["data_hash"] and result.summary["steps"] == 5
    assert 0 <= result.history["val_acc"].iloc[1] <= 1


# ------------------------------------------------------------------------------------------------ compile
def _compiled_rows(compiled: pd.DataFrame, plain: pd.DataFrame) -> None:
    """A compiled run's history against its uncompiled run's: epoch 0 (initialisation and evaluation, no step yet) to
    float32 rounding, the trained rows loosely. The compiled step rounds otherwise (its lr is a tensor: no fused
    multiply-add), which this tiny run on noise amplifies at some seeds to a few % and an image's accuracy
    (tests/test_compiled_step.py holds the step to rounding); a population not reset (weights, W_0, optimiser
    state) is off by far more."""
    h, g = compiled.drop(columns="wall_time"), plain.drop(columns="wall_time")
    pd.testing.assert_frame_equal(h.iloc[:1], g.iloc[:1], check_exact=False, rtol=1e-6, atol=1e-9)
    pd.testing.assert_frame_equal(h, g, check_exact=False, rtol=0.1, atol=0.05)


def test_compile_compiles_a_network_shape_once_and_each_run_equals_its_uncompiled_run(monkeypatch):
    """The runs of a point share one compiled evaluation network and one compiled whole training step
    (`engine.capture`), re-initialised in place. torch's 'eager' backend stands in for inductor (no C++ toolchain
    needed), so what is tested is ours: one compilation of each, fresh weights, like histories (`_compiled_rows`)."""
    compiled, real = [], torch.compile

    def counting_compile(model, **kwargs):
        compiled.append(model)
        return real(model, backend="eager")

    monkeypatch.setattr(runtime.torch, "compile", counting_compile)
    monkeypatch.setattr(runtime, "_COMPILED", {})
    monkeypatch.setenv(runtime.INDUCTOR_CACHE_ENV, "unused")  # no inductor here: nothing of the test's environment
    base = TrainConfig(**{**TINY, "epochs": 1})
    runs = [train(base.replace(sigma_w=s, seed=seed, compile=True), progress=False)
            for s, seed in ((0.5, 0), (2.0, 1), (1.0, 0))]
    assert len(compiled) == 2  # three runs: one compiled network (evaluation), one compiled step (training)
    for r in runs:
        plain = train(r.config.replace(compile=False), progress=False)
        assert r.history["weight_norm"].iloc[0] == plain.history["weight_norm"].iloc[0]  # bitwise: fresh weights
        _compiled_rows(r.history, plain.history)
    assert runs[0].history["weight_norm"].iloc[0] != runs[1].history["weight_norm"].iloc[0]
    train(base.replace(width=0.125, n_train=64, compile=True), progress=False)  # another shape: compiled anew
    assert len(compiled) == 4


def test_a_partial_last_batch_under_compile_adds_no_compiled_shape_and_the_cache_folder_is_shared(monkeypatch,
                                                                                                  tmp_path):
    """drop_last false, 250 = 3 x 64 + 58 images: the partial batch runs uncompiled (padding it would put its rows
    into BatchNorm's batch statistics), so dynamo compiles the same graphs as for 256 images (dynamo's CompileCounter
    backend counts them, no C++ toolchain needed): the evaluation network's and the whole training step's, which no
    change of lr recompiles; inductor's cache folder is set under the initmem cache."""
    from torch._dynamo.testing import CompileCounter

    counters, real = [], torch.compile

    def counting_compile(model, **kwargs):
        counters.append(CompileCounter())
        return real(model, backend=counters[-1], dynamic=kwargs.get("dynamic"))

    monkeypatch.setattr(runtime.torch, "compile", counting_compile)
    monkeypatch.setattr(runtime, "_COMPILED", {})
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path))
    monkeypatch.setenv(runtime.INDUCTOR_CACHE_ENV, "set")
    monkeypatch.delenv(runtime.INDUCTOR_CACHE_ENV)  # unset now, restored after the test
    full = train(TrainConfig(**{**TINY, "compile": True, "schedule": "cosine"}), progress=False)
    graphs = [c.frame_count for c in counters]
    assert len(counters) == 2 and graphs[0] >= 1 and graphs[1] == 1  # evaluation; training, for every lr
    cfg = TrainConfig(**{**TINY, "compile": True, "n_train": 250, "schedule": "cosine"})
    partial = train(cfg, progress=False)
    assert [c.frame_count for c in counters] == graphs  # the 58-image batch compiled nothing
    assert partial.summary["steps"] == 8 and full.summary["steps"] == 8
    assert partial.provenance["compile_partial_batch"] == "eager" and partial.provenance["inductor_cache"] == "shared"
    assert os.environ[runtime.INDUCTOR_CACHE_ENV] == str(tmp_path / "inductor")
    _compiled_rows(partial.history, train(cfg.replace(compile=False), progress=False).history)
    monkeypatch.setenv(runtime.INDUCTOR_CACHE_ENV, str(tmp_path / "mine"))  # the user's folder is kept
    assert runtime.engine_settings(cfg, torch.device("cpu"))["inductor_cache"] == "user"
    assert os.environ[runtime.INDUCTOR_CACHE_ENV] == str(tmp_path / "mine")


def test_the_compiled_network_cache_is_cleared_with_dynamos(monkeypatch):
    monkeypatch.setattr(runtime.torch, "compile", lambda model, **kw: model)  # no compilation: the cache is tested
    monkeypatch.setattr(runtime, "_COMPILED", {})
    resets = []
    monkeypatch.setattr(runtime.torch._dynamo, "reset", lambda: resets.append(1))
    cfg = TrainConfig(**{**TINY, "compile": True})
    dev = torch.device("cpu")
    first, _ = runtime.network([cfg], dev)
    assert runtime.network([cfg.replace(sigma_w=2.0)], dev)[0] is first  # cached: re-initialised in place
    runtime.reset_compiled()
    assert resets == [1] and runtime._COMPILED == {}
    assert runtime.network([cfg], dev)[0] is not first  # nothing of the previous model is kept


# ------------------------------------------------------------------------------------------------ GPU-path items
def test_the_cublas_workspace_is_set_when_the_engine_is_imported_and_a_users_value_is_kept():
    import subprocess
    import sys

    code = "import os, initmem.engine.trainer; print(os.environ.get('CUBLAS_WORKSPACE_CONFIG'))"
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    for given, expected in ((None, ":4096:8"), (":16:8", ":16:8")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**env, **({"CUBLAS_WORKSPACE_CONFIG": given} if given else {})})
        assert out.returncode == 0 and out.stdout.strip() == expected, out.stderr[-2000:]


def test_tf32_uses_fp32_precision_where_torch_has_it_after_the_legacy_setters_and_those_alone_where_not(monkeypatch):
    import types
    import warnings

    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    saved = (matmul.fp32_precision, conv.fp32_precision)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the deprecated setters would warn on torch >= 2.9
            assert runtime.set_tf32(True) == "fp32_precision"
            assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", "tf32")
            assert torch.backends.cudnn.allow_tf32 and matmul.allow_tf32  # the legacy getters read it too
            runtime.engine_settings(TrainConfig(**TINY), torch.device("cpu"))  # fp32: strict IEEE
            assert (matmul.fp32_precision, conv.fp32_precision) == ("ieee", "ieee")
    finally:
        matmul.fp32_precision, conv.fp32_precision = saved
    old_matmul, old_cudnn = types.SimpleNamespace(allow_tf32=None), types.SimpleNamespace(allow_tf32=None)
    monkeypatch.setattr(runtime.torch.backends.cuda, "matmul", old_matmul)  # a torch before fp32_precision
    monkeypatch.setattr(runtime.torch.backends, "cudnn", old_cudnn)
    assert runtime.set_tf32(True) == "allow_tf32" and old_matmul.allow_tf32 is True and old_cudnn.allow_tf32 is True
    assert not hasattr(old_matmul, "fp32_precision") and not hasattr(old_cudnn, "conv")


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_every_tf32_getter_is_readable_and_agrees_after_the_engine_settings(precision):
    """torch 2.14: after the new `fp32_precision` setters alone, `cudnn.allow_tf32`, `matmul.allow_tf32` and
    `get_float32_matmul_precision()` (which inductor reads when it compiles) raise RuntimeError. The setters work
    without a GPU, so every precision is set here (tf32 on a stand-in device: the CUDA-only check is run_device's)."""
    on = precision == "tf32"
    try:
        config = TrainConfig(**{**TINY, "device": "auto" if on else "cpu", "precision": precision})
        runtime.engine_settings(config, torch.device("cpu"))
        state = runtime.tf32_state()  # raises if any getter does
        assert state["cudnn.allow_tf32"] is on and state["cuda.matmul.allow_tf32"] is on
        assert state["float32_matmul_precision"] == ("high" if on else "highest")
        news = {key: v for key, v in state.items() if key.endswith("fp32_precision")}
        assert len(news) >= 2 or not hasattr(torch.backends.cuda.matmul, "fp32_precision")
        assert set(news.values()) <= {"tf32" if on else "ieee"}, news
    finally:
        runtime.engine_settings(TrainConfig(**TINY), torch.device("cpu"))
    assert runtime.tf32_state()["float32_matmul_precision"] == "highest"


def test_a_rows_wall_time_is_read_after_the_host_sync(monkeypatch):
    """On a GPU the evaluation is queued work until `.tolist()` waits for it: the row's wall_time must include it.
    Here the sync is made slow (0.3 s) and must show in the epoch-0 row."""
    import time as _time

    real = torch.Tensor.tolist

    def slow_tolist(self):
        _time.sleep(0.3)
        return real(self)

    monkeypatch.setattr(torch.Tensor, "tolist", slow_tolist)
    h = train(TrainConfig(**{**TINY, "epochs": 1}), progress=False).history
    assert h["wall_time"].iloc[0] >= 0.3 and h["wall_time"].iloc[1] - h["wall_time"].iloc[0] >= 0.3


def test_the_loop_trains_muon_with_the_configs_ns_dtype():
    """The config's ns_dtype reaches Muon's step: float32 trains the same network to a different history (bfloat16
    rounding is gone), and the record keeps it."""
    base = TrainConfig(**{**TINY, "optimizer": "muon", "lr": None, "weight_decay": None, "epochs": 1})
    h16, r32 = train(base, progress=False).history, train(base.replace(ns_dtype="float32"), progress=False)
    assert r32.config.ns_dtype == "float32"
    assert h16["val_loss"].iloc[0] == r32.history["val_loss"].iloc[0]  # epoch 0: no step taken yet
    assert h16["val_loss"].iloc[1] != r32.history["val_loss"].iloc[1]
