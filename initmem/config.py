"""What defines a run, torch-free (reading results imports it, never the training stack): `TrainConfig`, its
validation, `run_id`, the accepted values, and `point_configs` (a point's runs from its parameters: the one function
the notebooks, the sweep, the planner and `initmem run` use). Each field's help lives beside it: `--help`,
docs/fields.md (`python -m initmem.config`) and the notebooks read it there.

A setting the recipe would silently ignore (an optimiser hyper-parameter the optimiser does not use, a schedule
parameter of another schedule) is accepted only at its neutral value (`NEUTRAL_HPARAMS`); `None` lr, momentum and
weight_decay resolve to the optimiser's default, so a stored config is concrete. Errors are one line
(`field_error`). `run_id`: sha256 of the canonical JSON minus `RUN_ID_EXCLUDE` and minus `LATER_FIELDS` at their
`id_default` (`precision` hashed as the `amp` it replaced), so every committed run keeps its name. Adding a sweepable
field is one edit: the field with its default, help and check here (with `id_default=<old behaviour>` when it
changes results); notebooks, params files, the CLI and docs/fields.md read the dataclass."""

from __future__ import annotations  # TrainConfig's field types stay strings: the CLI and docs/fields.md read them

import dataclasses
import difflib
import hashlib
import json
import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Self

from initmem.errors import ConfigError, invalid

# ---------------------------------------------------------------------------------------------- accepted values
ARCHS = ("resnet9", "resnet20", "resnet56", "resnet110")
OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw", "muon")
SCHEDULES = ("constant", "cosine", "step")
NS_DTYPES = ("bfloat16", "float32")  # Muon's Newton-Schulz arithmetic (`ns_dtype`)
SOURCES = ("auto", "torchvision", "imagefolder", "synthetic")
PRECISIONS = ("fp32", "tf32", "bf16")
NUM_CLASSES = 10
MIN_CHANNELS = {"resnet9": 64, "resnet20": 16, "resnet56": 16, "resnet110": 16}  # each network's narrowest layer
MAX_SEED = 2**63 - 1  # torch generators take 64-bit seeds; the sign bit stays clear for every stream derived from it

# Every optimiser hyper-parameter (but lr) at its neutral value: the value of one an optimiser does not use (not in
# OPTIMIZER_HPARAMS[name]), the only one accepted there. OPTIMIZER_DEFAULTS: each optimiser's values, lr included.
NEUTRAL_HPARAMS = dict(momentum=0.0, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8, amsgrad=False, nesterov=False,
                ns_steps=5, ns_dtype="bfloat16", muon_aux_lr=1e-3)
OPTIMIZER_DEFAULTS: dict[str, dict] = {
    "sgd": {**NEUTRAL_HPARAMS, "lr": 0.01},
    "sgd_momentum": {**NEUTRAL_HPARAMS, "lr": 0.01, "momentum": 0.9},
    "adam": {**NEUTRAL_HPARAMS, "lr": 1e-3},  # weight_decay: coupled L2 (added to the gradient)
    "adamw": {**NEUTRAL_HPARAMS, "lr": 1e-3, "weight_decay": 1e-2},  # decoupled
    "muon": {**NEUTRAL_HPARAMS, "lr": 0.02, "momentum": 0.95, "nesterov": True},  # decoupled; aux AdamW lr muon_aux_lr
}
OPTIMIZER_HPARAMS: dict[str, tuple[str, ...]] = {
    "sgd": ("weight_decay",),
    "sgd_momentum": ("momentum", "weight_decay", "nesterov"),
    "adam": ("weight_decay", "betas", "eps", "amsgrad"),
    "adamw": ("weight_decay", "betas", "eps", "amsgrad"),
    "muon": ("momentum", "weight_decay", "nesterov", "ns_steps", "ns_dtype", "betas", "eps", "muon_aux_lr"),
}
SCHEDULE_HPARAMS = {"step": ("step_milestones", "step_gamma")}  # used by that schedule only
_OPT_FIELDS = ("lr", "momentum", "weight_decay")  # None → the optimiser's default (docs/study.md)

# Fields that cannot change a result beyond float rounding: not in the run id, so a rerun elsewhere is the same run.
RUN_ID_EXCLUDE = frozenset({"device", "eval_batch_size", "checkpoint_every", "data_root", "channels_last", "compile",
                            "deterministic", "full_test"})
MEMBER_FIELDS = ("sigma_w", "seed")  # the fields the members of one population may differ in


def _f(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field with its help (and `id_default` for a field added after the first results: `LATER_FIELDS`)."""
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines one run. Validated on construction; `None` optimiser hyper-parameters are resolved
    to the optimiser's default (docs/study.md), so a stored config is always concrete."""

    # model
    arch: str = _f("resnet9", "network: " + " | ".join(ARCHS))
    width: float = _f(1.0, "channel multiplier of the network")
    sigma_w: float = _f(1.0, "init scale: every conv/linear weight ~ N(0, sigma_w^2 / fan_in)")
    # optimiser
    optimizer: str = _f("sgd", "optimiser: " + " | ".join(OPTIMIZERS))
    lr: float | None = _f(None, "learning rate; default per optimiser: sgd/sgd_momentum 0.01, adam/adamw 1e-3, "
                                "muon 0.02")
    momentum: float | None = _f(None, "momentum; default sgd_momentum 0.9, muon 0.95, others 0 (unused)")
    weight_decay: float | None = _f(None, "L2: coupled for sgd*/adam, decoupled for adamw (default 1e-2) and muon; "
                                          "default 0")
    betas: tuple[float, float] = _f((0.9, 0.999), "Adam betas (adam/adamw and muon's AdamW part)")
    eps: float = _f(1e-8, "Adam epsilon (adam/adamw and muon's AdamW part)")
    amsgrad: bool = _f(False, "adam/adamw divide by the running maximum of the second moment, not its decaying "
                              "average (AMSGrad): a coordinate's step does not grow back when its gradients "
                              "shrink", id_default=False)
    muon_aux_lr: float = _f(1e-3, "AdamW lr for BatchNorm params, biases and the head under muon")
    ns_steps: int = _f(5, "Newton-Schulz iterations (muon)")
    ns_dtype: str = _f("bfloat16", "Newton-Schulz arithmetic (muon): " + " | ".join(NS_DTYPES) + "; bfloat16 as "
                       "torch.optim.Muon; float32, the same iteration without its rounding, makes a Muon step ~4x "
                       "faster on a CPU without native bfloat16 (docs/performance.md)", id_default="bfloat16")
    # schedule
    schedule: str = _f("constant", "lr schedule: " + " | ".join(SCHEDULES))
    warmup_epochs: float = _f(0.0, "linear lr warm-up length in epochs (may be fractional)")
    step_milestones: tuple[float, ...] = _f((0.5, 0.75), "fractions of training at which the step schedule "
                                                         "multiplies the lr by step_gamma (schedule 'step' only)")
    step_gamma: float = _f(0.1, "lr multiplier at each step-schedule milestone (schedule 'step' only)")
    # data
    data: str = _f("auto", "data source: " + " | ".join(SOURCES) + " (synthetic: tests and smoke runs only)")
    data_root: str = _f("data", "CIFAR-10 folder or .tar.gz (see data.load_cifar10)")
    n_train: int | None = _f(None, "training images (stratified subset); None: all 45,000 left after the "
                                   "validation split")
    n_val: int = _f(5000, "validation images split off the training set (stratified, by split_seed)")
    n_test: int | None = _f(None, "test images (stratified subset); None: all 10,000")
    split_seed: int = _f(0, "seed of the train/validation split and of the subsets")
    augment: bool = _f(False, "random crop (pad 4) and horizontal flip")
    drop_last: bool = _f(False, "drop each epoch's partial last minibatch (n_train mod batch_size images, a new random "
                         "set every epoch): a step on a few images, taken right before every measurement, jolts a "
                         "fast-moving network (docs/findings.md, tau_interp)", id_default=False)
    train_eval_size: int | None = _f(None, "clean eval-mode train accuracy on a fixed stratified subset of this "
                                           "size; None: the whole split")
    exact_tau: bool = _f(False, "with train_eval_size, tau_interp of the whole train split all the same: the whole "
                                "split is evaluated too at each epoch where the subset's accuracy is high enough for "
                                "the whole split to have interpolated (metrics.subset_bound), until it has (history "
                                "column train_acc_full, NaN elsewhere): a few whole-split evaluations a run; without "
                                "train_eval_size, does nothing", id_default=False)
    eval_every: int = _f(1, "measure train/val/test every N epochs (and at the last): tau_interp and the best "
                            "epoch are then read on that grid", id_default=1)
    full_test: bool = _f(False, "at every epoch a selection rule can pick (metrics.selectable), also evaluate the "
                                "whole test set of the source (all 10,000 CIFAR-10 test images), not only the n_test "
                                "subset: history columns test_loss_full/test_acc_full (NaN at other epochs); changes "
                                "no training step", id_default=False)
    # run
    batch_size: int = _f(128, "minibatch size b (enters T_SGD)")
    epochs: int = _f(200, "training epochs")
    seed: int = _f(0, "seed of the initialisation, minibatch order and augmentation")
    device: str = _f("auto", "auto | cpu | cuda | cuda:N")
    eval_batch_size: int = _f(1024, "batch size for evaluation (no effect on results)")
    checkpoint_every: int = _f(0, "epochs between checkpoints; 0: none")
    # engine
    precision: str = _f("fp32", "fp32 (strict IEEE, TF32 off) | tf32 (CUDA only) | bf16 (autocast; weights, loss, "
                                "norms and metrics in fp32)")
    deterministic: bool = _f(False, "deterministic kernels (CUDA: bit-identical reruns and resumes; off: "
                                    "cudnn.benchmark)")
    channels_last: bool = _f(True, "channels-last memory format (speed only)")
    compile: bool = _f(False, "torch.compile the whole training step, optimiser and instruments in (speed only: equal "
                              "to rounding; compiled once per process and shape)")

    def __post_init__(self) -> None:
        _check_recipe(self, check := _Check(self))
        _check_inapplicable(self)
        _check_data_and_engine(self, check)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples → lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        """Inverse of `to_dict`; unknown keys are a ConfigError naming them (and the closest field)."""
        if not isinstance(d, dict):
            raise ConfigError(f"TrainConfig.from_dict got {type(d).__name__}: a dict of fields is accepted")
        _known(d)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes`; with a new optimiser, hyper-parameters at the old one's defaults (and not in
        `changes`) take the new one's (an sgd config's adam copy gets lr 1e-3), unused ones go back to neutral."""
        _known(changes)
        new = changes.get("optimizer", self.optimizer)
        if new != self.optimizer and new in OPTIMIZER_DEFAULTS:
            old = OPTIMIZER_DEFAULTS[self.optimizer]
            changes = {**{k: None for k in _OPT_FIELDS if getattr(self, k) == old[k]}, **changes}
            for k in (k for k in _HPARAM_FIELDS if k not in _OPT_FIELDS):
                if k not in changes and k not in OPTIMIZER_HPARAMS[new]:
                    changes[k] = OPTIMIZER_DEFAULTS[new][k]
        return dataclasses.replace(self, **changes)


_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
_HPARAM_FIELDS = tuple(k for k in NEUTRAL_HPARAMS if k in _FIELDS)  # the optimiser hyper-parameters a config sets


def field_help(name: str) -> str:
    """The one-line help of a TrainConfig field."""
    return _FIELDS[name].metadata["help"]


def field_error(name: str, value: Any, accepted: str) -> ConfigError:
    """The one-line error of a bad TrainConfig field: "TrainConfig.<name>=<value!r> is invalid: <accepted>"."""
    return ConfigError(f"TrainConfig.{name}={value!r} is invalid: {accepted}")


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _reals(name: str, v: Any, n: int | None, ok, accepted: str, ordered: bool = False) -> tuple[float, ...]:
    if isinstance(v, (str, bytes)) or not isinstance(v, (tuple, list)) or (n is not None and len(v) != n) or not all(
            _is_real(x) and ok(x) for x in v) or (ordered and list(v) != sorted(v)):
        raise field_error(name, v, accepted)
    return tuple(float(x) for x in v)


class _Check:
    """`__post_init__`'s field checks: each error names the field and what is accepted; reals are stored as floats."""

    def __init__(self, config: TrainConfig):
        self.c = config

    def put(self, name: str, value: Any) -> None:
        object.__setattr__(self.c, name, value)

    def choice(self, name: str, options: tuple[str, ...]) -> None:
        if not isinstance(v := getattr(self.c, name), str) or v not in options:
            raise field_error(name, v, "one of " + ", ".join(repr(o) for o in options))

    def real(self, name: str, ok, accepted: str) -> None:
        if not _is_real(v := getattr(self.c, name)) or not ok(float(v)):
            raise field_error(name, v, accepted)
        self.put(name, float(v))

    def integer(self, name: str, lo: int, optional: bool = False, hi: int = MAX_SEED) -> None:
        v = getattr(self.c, name)
        if v is None and optional:
            return
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or not lo <= v <= hi:
            raise field_error(name, v, f"an integer in [{lo}, {hi}]" + (" or None" if optional else ""))
        self.put(name, int(v))

    def flag(self, *names: str) -> None:
        for name in names:
            if not isinstance(getattr(self.c, name), bool):
                raise field_error(name, getattr(self.c, name), "True or False")


def _check_recipe(c: TrainConfig, check: _Check) -> None:
    """The network, the optimiser (None hyper-parameters resolved to its defaults) and the schedule."""
    check.choice("arch", ARCHS)
    check.real("width", lambda v: 0 < v <= 64, "a real in (0, 64]")
    if round(MIN_CHANNELS[c.arch] * c.width) < 1:  # models rounds channel counts: none may round to 0
        raise field_error("width", c.width, f"arch={c.arch!r} needs width > {0.5 / MIN_CHANNELS[c.arch]:.4g} (its "
                          f"narrowest layer, {MIN_CHANNELS[c.arch]} channels at width 1, must keep one)")
    check.real("sigma_w", lambda v: v > 0, "a finite real > 0")
    check.choice("optimizer", OPTIMIZERS)
    for name in _OPT_FIELDS:
        if getattr(c, name) is None:
            check.put(name, OPTIMIZER_DEFAULTS[c.optimizer][name])
    check.real("lr", lambda v: v > 0, "a finite real > 0 (or None: the optimiser's default)")
    check.real("momentum", lambda v: 0 <= v < 1, "a real in [0, 1) (or None: the optimiser's default)")
    check.real("weight_decay", lambda v: v >= 0, "a finite real >= 0 (or None: the optimiser's default)")
    check.put("betas", _reals("betas", c.betas, 2, lambda x: 0 <= x < 1, "a pair of reals in [0, 1)"))
    check.real("eps", lambda v: v > 0, "a finite real > 0")
    check.flag("amsgrad")
    check.real("muon_aux_lr", lambda v: v > 0, "a finite real > 0")
    check.integer("ns_steps", 1, hi=99)
    check.choice("ns_dtype", NS_DTYPES)
    check.choice("schedule", SCHEDULES)
    check.integer("epochs", 1, hi=10**7)
    check.real("warmup_epochs", lambda v: 0 <= v <= c.epochs, f"a real in [0, epochs={c.epochs}]")
    check.put("step_milestones", _reals("step_milestones", c.step_milestones, None, lambda x: 0 < x <= 1,
                                        "a non-decreasing sequence of fractions in (0, 1]", ordered=True))
    check.real("step_gamma", lambda v: v > 0, "a finite real > 0")


def _check_inapplicable(c: TrainConfig) -> None:
    """One rule for every inapplicable setting: a value the recipe would silently ignore is a lie in every table
    that lists it, so only the neutral value is accepted."""
    defaults, used = OPTIMIZER_DEFAULTS[c.optimizer], OPTIMIZER_HPARAMS[c.optimizer]
    for name in _HPARAM_FIELDS:
        if name not in used and getattr(c, name) != defaults[name]:
            raise field_error(name, getattr(c, name), f"optimizer={c.optimizer!r} does not use it; only its "
                                                         f"default {defaults[name]!r} is accepted")
    for schedule, names in SCHEDULE_HPARAMS.items():
        for name in names:
            if c.schedule != schedule and getattr(c, name) != (default := _FIELDS[name].default):
                raise field_error(name, getattr(c, name), f"schedule={c.schedule!r} does not use it (only schedule="
                                                             f"{schedule!r} does); only {default!r} is accepted")


def _check_data_and_engine(c: TrainConfig, check: _Check) -> None:
    """The data and its splits, then how the engine runs (device, precision, checkpoints)."""
    check.choice("data", SOURCES)
    if not isinstance(c.data_root, str) or not c.data_root:
        raise field_error("data_root", c.data_root, "a non-empty path string")
    # the splits are stratified: at least one image per class, or make_splits fails on a *different* field
    check.integer("n_train", NUM_CLASSES, optional=True, hi=10**7)
    check.integer("n_val", NUM_CLASSES, hi=10**7)
    check.integer("n_test", NUM_CLASSES, optional=True, hi=10**7)
    check.integer("split_seed", 0)
    check.flag("augment", "drop_last", "full_test", "exact_tau")
    check.integer("train_eval_size", NUM_CLASSES, optional=True, hi=10**7)
    check.integer("eval_every", 1, hi=c.epochs)
    check.integer("batch_size", 1, hi=10**7)
    check.integer("seed", 0)
    if not isinstance(c.device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", c.device):
        raise field_error("device", c.device, "'auto', 'cpu', 'cuda' or 'cuda:N'")
    check.integer("eval_batch_size", 1, hi=10**7)
    check.integer("checkpoint_every", 0, hi=10**7)
    check.choice("precision", PRECISIONS)
    if c.precision == "tf32" and c.device == "cpu":
        raise field_error("precision", c.precision,
                          "'tf32' is CUDA only; 'fp32' or 'bf16' is accepted with device='cpu'")
    check.flag("deterministic", "channels_last", "compile")


def _known(names: dict[str, Any]) -> None:
    if hints := [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, list(_FIELDS), 1))
                 else repr(k) for k in names if k not in _FIELDS]:
        raise ConfigError(f"TrainConfig has no field {', '.join(hints)}: accepted fields are {', '.join(_FIELDS)}")


# fields added after the first results, with the value that reproduces the behaviour before them: a record without
# one was trained that way (record.check_record fills it in), and the run id leaves them out at that value
LATER_FIELDS = {f.name: f.metadata["id_default"] for f in dataclasses.fields(TrainConfig) if "id_default" in f.metadata}


# ---------------------------------------------------------------------------------------------- run identity
_AMP = {"fp32": "off", "bf16": "bf16"}  # precision replaced the field `amp` after the first results were committed


def run_id(config: TrainConfig | dict) -> str:
    """First 12 hex chars of sha256 over the canonical JSON of the config minus `RUN_ID_EXCLUDE` and `LATER_FIELDS`
    at their `id_default`: the same recipe on another device is the same run, and a later field renames no earlier
    run; for that reason too `precision` is hashed as the field it replaced, `amp` (fp32 = "off"), where it can be."""
    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)
    d = {k: v for k, v in config.to_dict().items()
         if k not in RUN_ID_EXCLUDE and not (k in LATER_FIELDS and v == LATER_FIELDS[k])}
    if d["precision"] in _AMP:
        d["amp"] = _AMP[d.pop("precision")]
    return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]


def prefix_id(config: TrainConfig) -> str | None:
    """The id `config` shares with every run that differs only in its epochs, where its first epochs are the same
    run: a constant lr without warm-up, measured at its last epoch as a longer run measures it; else None."""
    if config.schedule != "constant" or config.warmup_epochs or config.epochs % config.eval_every:
        return None
    return run_id(config.replace(epochs=config.eval_every))


def shared_fields(config: TrainConfig) -> dict[str, Any]:
    """What the members of a population share: every result-changing field but `MEMBER_FIELDS`."""
    return {k: v for k, v in config.to_dict().items() if k not in RUN_ID_EXCLUDE and k not in MEMBER_FIELDS}


def check_members(configs: list[TrainConfig]) -> list[TrainConfig]:
    """`configs` as a list, or ConfigError unless they are distinct TrainConfigs that differ only in MEMBER_FIELDS."""
    if isinstance(configs, TrainConfig) or not isinstance(configs, (list, tuple)) or not configs or not all(
            isinstance(c, TrainConfig) for c in configs):
        raise ConfigError(f"configs={type(configs).__name__} is invalid: a TrainConfig or a non-empty list of "
                          "TrainConfig is accepted")
    base = configs[0].to_dict()
    for key, v in ((k, v) for c in configs[1:] for k, v in c.to_dict().items() if k not in MEMBER_FIELDS):
        if v != base[key]:
            raise ConfigError(f"TrainConfig.{key}={v!r} differs from the first member's {base[key]!r}: the members of "
                              f"a population may differ only in {' and '.join(MEMBER_FIELDS)}")
    if len({run_id(c) for c in configs}) != len(configs):
        raise ConfigError("configs repeat a (sigma_w, seed) pair: distinct members are accepted")
    return list(configs)


# ---------------------------------------------------------------------------------------------- a point's runs
def point_configs(params: dict[str, Any]) -> list[TrainConfig]:
    """The one derivation of a point's runs, in (sigma_w, seed) order, from its parameters (a notebook's namespace, a
    params file's point): TrainConfig-named entries make the base config, `sigma_ws` x `seeds` expand it."""
    sigma_ws, seeds = params.get("sigma_ws"), params.get("seeds", [0])
    for name, values, what in (("sigma_ws", sigma_ws, "positive reals"), ("seeds", seeds, "integers >= 0")):
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)) or not values:
            raise invalid(name, values, f"a non-empty list of {what}")
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"{name}={list(values)!r} is invalid: it repeats a value; distinct values are accepted")
    base = TrainConfig(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items() if k in _FIELDS
                          and k not in MEMBER_FIELDS})
    configs = [base.replace(sigma_w=s, seed=seed) for s in sigma_ws for seed in seeds]  # each one validated
    if len({run_id(c) for c in configs}) != len(configs):  # 1 and 1.0 are one sigma_w
        raise ConfigError(f"sigma_ws={list(sigma_ws)!r}, seeds={list(seeds)!r} are invalid: they repeat a run; "
                          "distinct values are accepted")
    return configs


def fields_markdown() -> str:
    """The field list of docs/fields.md: `name: type = default — help`, grouped as in the dataclass."""
    lines = ["# TrainConfig fields", "", "Generated from `initmem/config.py` by `python -m initmem.config > "
             "docs/fields.md`; do not edit.", "", "| field | type | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{f.name}` | `{f.type}` | `{'per optimizer' if f.name in _OPT_FIELDS else repr(f.default)}` | "
              f"{f.metadata['help'].replace('|', '/')} |" for f in _FIELDS.values()]
    excluded = ", ".join(f"`{n}`" for n in sorted(RUN_ID_EXCLUDE))
    return "\n".join([*lines, "", f"Not part of the run id (cannot change a result): {excluded}.", ""])


if __name__ == "__main__":
    print(fields_markdown(), end="")
