"""One way to check an input, before any work: exact types (an integer field gets an int, a bool is no number), finite
values in range, and paths of the kind expected (a results tree at its root level, an output folder that is not the
repository's). Each refusal is one line naming the value and what is accepted (`errors.invalid`); the CLI, the
planner's tables and the figures all check here. Torch-free; imports only `errors`."""

import math
import numbers
import os
from pathlib import Path

from initmem.errors import ConfigError, invalid

REPOSITORY = Path(__file__).resolve().parent.parent  # the checkout holding the package (params/, results/, figures/)
RECORD = "run.json"  # what makes a folder a run folder
RESULTS_ROOT = ("a results tree root (the folder holding section folders NN_name/, each holding run folders "
                "<run_id>/run.json)")
SOURCE_FILES = (".git", "pyproject.toml", "setup.py", "__init__.py")  # a folder holding one is code, never an output


def check_int(name: str, value: object, lo: int, hi: int, why: str = "") -> int:
    """`value` if it is an int (not a bool) in [lo, hi]; else `invalid(...)`, `why` appended to what is accepted."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid(name, value, f"an integer in [{lo}, {hi}]{why}")
    return value


def check_real(name: str, value: object, lo: float = -math.inf, hi: float = math.inf, *, above: bool = False,
               below: bool = False, why: str = "") -> float:
    """`value` as a float if it is a finite real (an int counts, a bool does not) in [lo, hi] (`above`: lo excluded,
    `below`: hi excluded); else `invalid(...)` saying the range, `why` appended."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and (
        lo < value if above else lo <= value) and (value < hi if below else value <= hi)
    if not ok:
        raise invalid(name, value, _real_range(lo, hi, above, below) + why)
    return float(value)


def _real_range(lo: float, hi: float, above: bool, below: bool) -> str:
    """What `check_real` accepts, in words: "a finite positive number up to 64", "a finite number in [0, 1)"."""
    if above and lo == 0:
        return "a finite positive number" + ("" if math.isinf(hi) else f" {'below' if below else 'up to'} {hi:g}")
    if math.isinf(hi):
        return "a finite number" + ("" if math.isinf(lo) else f" {'>' if above else '>='} {lo:g}")
    return f"a finite number in {'(' if above else '['}{lo:g}, {hi:g}{')' if below else ']'}"


def check_reals(name: str, value: object, n: int, lo: float = -math.inf, hi: float = math.inf, *,
                above: bool = False, below: bool = False) -> tuple[float, ...]:
    """`value` as a tuple of `n` floats, each one `check_real` accepts; a string, or another length, is refused."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or len(value) != n:
        raise invalid(name, value, f"a sequence of {n} numbers, each {_real_range(lo, hi, above, below)}")
    return tuple(check_real(f"{name}[{i}]", v, lo, hi, above=above, below=below) for i, v in enumerate(value))


def check_bool(name: str, value: object) -> bool:
    """`value` if it is True or False (not 0, 1 or "true")."""
    if not isinstance(value, bool):
        raise invalid(name, value, "true or false")
    return value


def resolve(name: str, path: str | Path, accepted: str) -> Path:
    """`path` absolute, links followed; '' (which would mean the working folder silently) and a symlink loop are
    one line saying what is accepted."""
    if not isinstance(path, (str, os.PathLike)) or str(path).strip() == "":
        raise invalid(name, path if not isinstance(path, str) else str(path), accepted)
    try:
        return Path(path).expanduser().resolve()
    except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError("Symlink loop ..."), 3.13 an OSError
        why = "a symlink loop" if "loop" in str(exc).lower() else f"unreadable ({exc})"
        raise ConfigError(f"{name}={str(path)!r} is {why}: {accepted} is accepted") from None


def run_folders(root: Path) -> list[Path]:
    """The folders at or under `root` holding a run.json, hidden ones (and anything under them) left out."""
    return [f.parent for f in sorted(root.rglob(RECORD))
            if not any(p.startswith(".") for p in f.relative_to(root).parts[:-1])]


def check_results_root(name: str, root: Path) -> Path:
    """`root` if every run under it sits at `<root>/<section>/<run_id>/` (or it holds none: the caller says so);
    else one line saying which level it is (a run folder, a section folder, a folder of results trees)."""
    runs = run_folders(root)
    depths = {len(f.relative_to(root).parts) for f in runs}
    if not runs or depths == {2}:
        return root
    if depths == {0}:
        what, hint = "is a run folder", f" (its tree: {root.parent.parent})"
    elif depths == {1}:
        what, hint = "is a section folder (run folders sit directly in it)", f" (its tree: {root.parent})"
    else:
        deep = sorted({f.relative_to(root).parts[0] + "/" for f in runs if len(f.relative_to(root).parts) != 2})
        shown = ", ".join(deep[:4]) + (" ..." if len(deep) > 4 else "")
        what = (f"holds results trees ({shown})" if min(depths) > 2 else
                f"holds run folders at several levels ({shown} not at <section>/<run_id>/)")
        hint = "; pass one of them" if min(depths) > 2 else ""
    raise ConfigError(f"{name}={str(root)!r} {what}: {RESULTS_ROOT} is accepted{hint}")


def check_results_arg(name: str, path: str | Path) -> Path:
    """`path` resolved, once runs can be written under it as a tree: a folder not there yet, or one at the tree's
    level (`check_results_root`); a file, or a section or run folder (runs would land a level down), is one line."""
    tree = resolve(name, path, RESULTS_ROOT)
    if tree.exists() and not tree.is_dir():
        raise invalid(name, str(path), f"a folder, not a file: {RESULTS_ROOT}")
    return check_results_root(name, tree) if tree.is_dir() else tree


def check_output_folder(name: str, path: str | Path, root: Path = REPOSITORY) -> Path:
    """`path` resolved, once it can be an output folder: not a file, not the repository `root` or a folder above it,
    not a folder of code (`SOURCE_FILES`, a .py file), and creatable and writable; else one line. No overwrite flag
    asks these away: they protect what no command wrote."""
    accepted = "a folder of its own (new, empty, or one this command wrote)"
    out = resolve(name, path, accepted)
    if out == root or out in root.parents:
        where = "is the repository root" if out == root else f"holds the repository {str(root)!r}"
        raise ConfigError(f"{name}={str(path)!r} {where}: {accepted}, e.g. a folder under figures/, is accepted")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{name}={str(path)!r} is a file: {accepted} is accepted")
    if out.is_dir() and (code := [s for s in SOURCE_FILES if (out / s).exists()] or sorted(
            p.name for p in out.glob("*.py"))):
        raise ConfigError(f"{name}={str(path)!r} holds code ({', '.join(code[:3])}): {accepted} is accepted")
    above = next((a for a in (out, *out.parents) if a.exists()), None)
    if above is None or not above.is_dir() or not os.access(above, os.W_OK | os.X_OK):
        raise ConfigError(f"{name}={str(path)!r} cannot be written ({str(above)!r} is "
                          f"{'a file' if above is not None and not above.is_dir() else 'not writable'}): {accepted} "
                          "in a writable place is accepted")
    return out
