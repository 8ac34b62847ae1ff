"""Torch-free checks of a throughput table (docs/planner.md): what `plan.load_throughput` reads, --calibrate writes."""

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from initmem.config import ARCHS, PRECISIONS
from initmem.errors import ConfigError

KINDS = ("cpu", "cuda")


def check_table(table: Any, kind: str | None, describe: Callable[[Any], str]) -> Any:
    """`table` (a `plan.Throughput`) once every entry's numbers are finite and positive, its arch and precision known
    and its device a CPU or CUDA one (of `kind`, if given); else ConfigError naming the file, entry and value."""
    where = f"throughput table {str(table.path)!r}"
    if not table.entries or not table.device.strip() or table.kind not in KINDS:
        what = "no entries" if not table.entries else f"device {table.device!r} of kind {table.kind!r}"
        raise ConfigError(f"{where} is invalid ({what}): a device of kind {' or '.join(KINDS)} with at least one "
                          "entry is accepted")
    for e in table.entries:
        if bad := next(((k, v) for k in ("train_step_s", "eval_image_s", "width", "batch_size", "members")
                        if not math.isfinite(v := getattr(e, k)) or v <= 0), None):
            raise ConfigError(f"{where} has {bad[0]}={bad[1]!r} for {describe(e)}: a finite positive number is "
                              "accepted")
        if e.arch not in ARCHS or e.precision not in PRECISIONS:
            raise ConfigError(f"{where} has arch={e.arch!r}, precision={e.precision!r}: one of {', '.join(ARCHS)} "
                              f"and one of {', '.join(PRECISIONS)} are accepted")
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
