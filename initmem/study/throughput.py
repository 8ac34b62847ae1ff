"""A throughput table, torch-free (docs/planner.md): its entries, reading and writing one (what `initmem plan` reads
and --calibrate writes), its checks, and how a GPU table's step time grows with the batch size, as the table itself
measured it."""

import dataclasses
import difflib
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from initmem.checks import check_int, check_real
from initmem.config import ARCHS, NS_DTYPES, OPTIMIZERS, PRECISIONS, TrainConfig
from initmem.errors import ConfigError
from initmem.store.files import atomic_write

KINDS = ("cpu", "cuda")
# What a step was timed with: the optimiser, and for Muon at a Newton-Schulz arithmetic other than the default
# "muon/<ns_dtype>" (on a CPU without native bfloat16 its step costs 4x SGD's in bfloat16, 1.04x in float32)
STEP_OPTIMIZERS = (*OPTIMIZERS, *(f"muon/{d}" for d in NS_DTYPES[1:]))
# Optimisers whose update is elementwise: their steps took 0.94-0.97x SGD's (docs/experiments/performance/,
# docs/performance.md), within the noise, so a table without an entry of their own times them as SGD's, silently
SGD_COST = ("sgd", "sgd_momentum", "adam", "adamw")


def step_optimizer(config: TrainConfig) -> str:
    """The `Entry.optimizer` that times `config`'s step: its optimiser ("muon/float32" for Muon at ns_dtype float32)."""
    return (f"muon/{config.ns_dtype}" if config.optimizer == "muon" and config.ns_dtype != NS_DTYPES[0]
            else config.optimizer)


def optimizer_fields(label: str) -> dict[str, str]:
    """The config fields a `step_optimizer` label stands for: {"optimizer"} and, for "muon/<d>", {"ns_dtype": d}."""
    name, _, ns = label.partition("/")
    return {"optimizer": name, **({"ns_dtype": ns} if ns else {})}


@dataclass(frozen=True)
class Entry:
    """One timed (arch, width, batch size, precision, members, optimiser): seconds per optimiser step, per evaluated
    image. Tables written before the optimiser was part of the key timed plain SGD, the config's default."""

    arch: str
    width: float
    batch_size: int
    precision: str
    members: int
    train_step_s: float
    eval_image_s: float
    optimizer: str = "sgd"

    @property
    def key(self) -> tuple:
        return self.arch, self.width, self.batch_size, self.precision, self.members, self.optimizer


@dataclass
class Throughput:
    """A throughput table: the device it was measured on and its entries (docs/planner.md)."""

    device: str
    torch: str
    entries: list[Entry]
    kind: str = "cpu"  # cpu | cuda
    path: str | None = None
    created: str | None = None
    roofline: bool = False  # no entries: every time is `plan.roofline_entry`'s estimate


ENTRY_KEYS = tuple(f.name for f in dataclasses.fields(Entry))  # what an entry of a table file may hold


def describe(e: Entry) -> str:
    """"resnet9 w0.25 b32 fp32", with " x<members>" for a population and " <optimizer>" for all but SGD."""
    return (f"{e.arch} w{e.width:g} b{e.batch_size} {e.precision}" + (f" x{e.members}" if e.members != 1 else "")
            + (f" {e.optimizer}" if e.optimizer != "sgd" else ""))


def load_throughput(path: str | Path, kind: str | None = None) -> Throughput:
    """A throughput table; ConfigError when it is missing, malformed or untrustworthy (`check_table`)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        _known_keys(path, doc["entries"])
        entries = [Entry(str(e["arch"]), e["width"], e["batch_size"], str(e["precision"]), e.get("members", 1),
                         e["train_step_s"], e["eval_image_s"], str(e.get("optimizer", "sgd")))
                   for e in doc["entries"]]  # as read: check_table checks
        device = str(doc["device"])
    except ConfigError:
        raise
    except FileNotFoundError:
        raise ConfigError(f"throughput table {str(path)!r} does not exist (make one with `initmem plan "
                          "--calibrate`)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"throughput table {str(path)!r} is invalid ({type(exc).__name__}: {exc}): "
                          '{"device", "torch", "entries": [{"arch", "width", "batch_size", "precision", '
                          '"members", "train_step_s", "eval_image_s", "optimizer"}]} is accepted') from None
    return check_table(Throughput(device, str(doc.get("torch", "")), entries, str(doc.get("kind") or (
        "cpu" if device.lower().startswith("cpu") else "cuda")), str(path), doc.get("created")), kind)


def _known_keys(path: str | Path, entries: list) -> None:
    """ConfigError naming the first entry key that is no `Entry` field (a misspelt "optimiser" would be read as SGD's
    entry), with the closest field."""
    for i, e in enumerate(entries):
        if isinstance(e, dict) and (unknown := [k for k in e if k not in ENTRY_KEYS]):
            close = difflib.get_close_matches(str(unknown[0]), ENTRY_KEYS, 1)
            raise ConfigError(f"throughput table {str(path)!r}, entry {i + 1} has an unknown key {unknown[0]!r}"
                              + (f" (did you mean {close[0]!r}?)" if close else "")
                              + f": {', '.join(ENTRY_KEYS)} are accepted")


def save_throughput(table: Throughput, path: str | Path) -> Path:
    """Write `table` as JSON (atomically); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"device": table.device, "kind": table.kind, "torch": table.torch, "created": table.created,
           "entries": [asdict(e) for e in table.entries]}
    return atomic_write(path, json.dumps(doc, indent=1) + "\n")


MAX_SECONDS = 86400.0  # a step (or an image) slower than a day is no measurement: a typo, or a unit mixed up
ENTRY_CHECKS: dict[str, Callable[[str, Any], Any]] = {  # each entry field's one check (`checks`): exact types
    "width": lambda k, v: check_real(k, v, 0, 64, above=True),
    "batch_size": lambda k, v: check_int(k, v, 1, 2**31),
    "members": lambda k, v: check_int(k, v, 1, 2**16),
    "train_step_s": lambda k, v: check_real(k, v, 0, MAX_SECONDS, above=True, why=" (seconds)"),
    "eval_image_s": lambda k, v: check_real(k, v, 0, MAX_SECONDS, above=True, why=" (seconds)"),
}


def check_table(table: Throughput, kind: str | None) -> Throughput:
    """`table` once every entry's numbers have their exact types, are finite, positive and below `MAX_SECONDS`, its
    arch, precision and optimiser are known, no configuration has two entries, and its device is a CPU or CUDA one
    (of `kind`, if given); its entries' reals as floats. Else ConfigError naming the file, entry, value."""
    where = f"throughput table {str(table.path)!r}"
    if not table.entries or not table.device.strip() or table.kind not in KINDS:
        what = "no entries" if not table.entries else f"device {table.device!r} of kind {table.kind!r}"
        raise ConfigError(f"{where} is invalid ({what}): a device of kind {' or '.join(KINDS)} with at least one "
                          "entry is accepted")
    seen: dict[tuple, int] = {}
    for i, e in enumerate(table.entries):
        if e.arch not in ARCHS or e.precision not in PRECISIONS:
            raise ConfigError(f"{where} has arch={e.arch!r}, precision={e.precision!r}: one of {', '.join(ARCHS)} "
                              f"and one of {', '.join(PRECISIONS)} are accepted")
        if e.optimizer not in STEP_OPTIMIZERS:
            raise ConfigError(f"{where}, entry {i + 1} has optimizer={e.optimizer!r}: one of "
                              f"{', '.join(STEP_OPTIMIZERS)} is accepted")
        try:
            table.entries[i] = e = dataclasses.replace(e, **{k: check(k, getattr(e, k)) for k, check in
                                                              ENTRY_CHECKS.items()})
        except ConfigError as exc:
            raise ConfigError(f"{where}, entry {i + 1} ({e.arch} {e.precision}): {exc}") from None
        key = e.key
        if (first := seen.setdefault(key, i)) != i:
            raise ConfigError(f"{where} has two entries for {describe(e)}: entry {first + 1} (train_step_s="
                              f"{table.entries[first].train_step_s:g}) and entry {i + 1} (train_step_s="
                              f"{e.train_step_s:g}): one entry per configuration is accepted")
    if kind is not None and table.kind != kind:
        raise ConfigError(f"{where} was measured on {table.device} ({table.kind}), not on a {kind} device: a {kind} "
                          f"table is accepted (`initmem plan --calibrate --device {kind}` makes one)")
    return table


def check_table_path(path: str | Path) -> Path:
    """`path` once a table can be written there (its folder created), else ConfigError saying why; before timing."""
    path = Path(path)
    above = next((a for a in path.parents if a.exists()), None)
    problem = ("is a folder" if path.is_dir() else f"lies under {str(above)!r}, which is a file"
               if above is not None and not above.is_dir() else None)
    if problem is None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = f"cannot be created ({exc.strerror or exc})"
        else:
            problem = None if os.access(path.parent, os.W_OK) else "lies in a folder that is not writable"
    if problem:
        raise ConfigError(f"throughput table path {str(path)!r} {problem}: a file path in a writable folder is "
                          "accepted")
    return path


def batch_exponent(singles: list[Any], near: Any, batch_size: int) -> tuple[float, str]:
    """How a GPU's step time grows with the batch size, step ~ b^alpha: alpha from `near` and the entry of the same
    network (arch, width) whose batch size is closest to `batch_size`, at near's precision if it has one, clamped to
    [0, 1]; (1, "") without such an entry. On the H200 a ResNet-9 fp32 step took b^0.38 from b = 32 to 128: small
    batches are bound by kernel launches, so images per step alone would plan them far too fast."""
    pairs = [(e.precision != near.precision, abs(math.log(batch_size / e.batch_size)), e, o) for e in singles
             for o in singles if (e.arch, e.width) == (o.arch, o.width) == (near.arch, near.width)
             and e.precision == o.precision and e.batch_size != near.batch_size == o.batch_size]
    if not pairs or batch_size == near.batch_size:
        return 1.0, ""
    _, _, e, o = min(pairs, key=lambda t: t[:2])
    alpha = min(1.0, max(0.0, math.log(e.train_step_s / o.train_step_s) / math.log(e.batch_size / o.batch_size)))
    return alpha, f", step ~ b^{alpha:.2f} as {e.precision} b{min(e.batch_size, o.batch_size)}-" \
                  f"{max(e.batch_size, o.batch_size)}"
