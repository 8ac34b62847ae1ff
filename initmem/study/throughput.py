"""Torch-free checks of a throughput table (docs/planner.md): what `plan.load_throughput` reads, --calibrate writes;
and how a GPU table's step time grows with the batch size, as the table itself measured it."""

import dataclasses
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from initmem.checks import check_int, check_real
from initmem.config import ARCHS, PRECISIONS
from initmem.errors import ConfigError

KINDS = ("cpu", "cuda")


MAX_SECONDS = 86400.0  # a step (or an image) slower than a day is no measurement: a typo, or a unit mixed up
ENTRY_CHECKS: dict[str, Callable[[str, Any], Any]] = {  # each entry field's one check (`checks`): exact types
    "width": lambda k, v: check_real(k, v, 0, 64, above=True),
    "batch_size": lambda k, v: check_int(k, v, 1, 2**31),
    "members": lambda k, v: check_int(k, v, 1, 2**16),
    "train_step_s": lambda k, v: check_real(k, v, 0, MAX_SECONDS, above=True, why=" (seconds)"),
    "eval_image_s": lambda k, v: check_real(k, v, 0, MAX_SECONDS, above=True, why=" (seconds)"),
}


def check_table(table: Any, kind: str | None, describe: Callable[[Any], str]) -> Any:
    """`table` (a `plan.Throughput`) once every entry's numbers have their exact types, are finite, positive and
    below `MAX_SECONDS`, its arch and precision are known, no configuration has two entries, and its device is a CPU
    or CUDA one (of `kind`, if given); its entries' reals as floats. Else ConfigError naming the file, entry, value."""
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
        try:
            table.entries[i] = e = dataclasses.replace(e, **{k: check(k, getattr(e, k)) for k, check in
                                                              ENTRY_CHECKS.items()})
        except ConfigError as exc:
            raise ConfigError(f"{where}, entry {i + 1} ({e.arch} {e.precision}): {exc}") from None
        key = (e.arch, e.width, e.batch_size, e.precision, e.members)
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
