"""Which throughput table `initmem plan` times a profile with (docs/planner.md): one named with `--throughput`, else
this machine's calibrated one (`plan.default_table_path`), else, on a CPU, the reference CPU's table shipped with
the package (`REFERENCE_CPU`), so that a fresh clone answers "how long" before any calibration; else none: a GPU
without a table of its own gets no time (none is guessed from another device)."""

from __future__ import annotations

from pathlib import Path

from initmem import plan

# Measured with `initmem plan --calibrate` on one of the project's 2-core machines (an AMD EPYC; the committed runs
# were trained on such machines, Intel Xeon or AMD EPYC, one torch thread a run): the cpu profiles' configurations
# (docs/planner.md says when and how). No GPU table yet.
REFERENCE_CPU = Path(__file__).resolve().parent / "throughput" / "reference-cpu.json"
REFERENCE_MACHINE = "2 cores, one torch thread a run"


def _shown(path: Path) -> str:
    """`path` relative to the repository when it is inside it (the shipped table), else as it is."""
    try:
        return path.resolve().relative_to(REFERENCE_CPU.parents[2]).as_posix()
    except ValueError:
        return str(path)


def choose_table(device: str = "auto", path: str | Path | None = None) -> tuple[plan.Throughput | None, str]:
    """The table for `device` ("auto" | "cpu" | "cuda" | "cuda:N") or the one at `path`, and the line that says
    which (the first line `initmem plan` prints)."""
    if path is not None:
        table = plan.load_throughput(path)
        return table, f"throughput: {table.device}, from {path}"
    name, kind = plan.device_name(device)
    cached = plan.default_table_path(name)
    if cached.is_file():
        return plan.load_throughput(cached), f"throughput: {name}, calibrated on this machine ({cached})"
    if kind == "cpu" and REFERENCE_CPU.is_file():
        table = plan.load_throughput(REFERENCE_CPU)
        when = f", measured {table.created[:10]}" if table.created else ""
        return table, (f"throughput: the reference CPU's table ({table.device}, {REFERENCE_MACHINE}{when}; "
                       f"{_shown(REFERENCE_CPU)}): times are for that machine; `initmem plan --calibrate --device "
                       f"cpu` measures this one ({name})")
    return None, (f"throughput: no table for {name} yet, so no time is given (none is guessed from another "
                  f"device): measure one with `initmem plan --calibrate --device {device}` (looked for {cached})")
