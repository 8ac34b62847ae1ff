"""Params files (`params/NN_section.yaml`, strict YAML) → a type-checked `Section` → its grid points. Everything,
every point's TrainConfigs included, is checked when the file is loaded: a typo fails in a second, not after hours."""

import glob
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from initmem.checks import resolve
from initmem.config import point_configs, run_id
from initmem.errors import ConfigError, InitmemError, SweepError
from initmem.study.notebook import SCIENTIFIC, Parameter, check_parameters, notebook_parameters, parameters_digest
from initmem.study.notebook import SECTION_REQUIRED as REQUIRED  # what every section notebook must declare

PROFILE_KEYS = ("fixed", "grid", "points")
SWEEP_SET = ("results_dir", "section")  # set by the sweep, never by a profile


# --- strict YAML -------------------------------------------------------------------------------------------
class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses repeated mapping keys and reads `1e-3`-style numbers as floats."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is repeated (first at line "
                                                            f"{first}): each key once is accepted", key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


StrictLoader.add_implicit_resolver(  # 1e-3, 5E+4, 2.5e-1: floats, as in YAML 1.2 (and Python, and papermill's -p)
    "tag:yaml.org,2002:float", re.compile(f"^{SCIENTIFIC.pattern}$"), list("-+0123456789"))


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: where and what the parser found."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"not valid YAML{where}: {problem or ' '.join(str(exc).split())}"


def load_yaml(text: str) -> Any:
    """`text` parsed with `StrictLoader`; yaml.YAMLError as PyYAML raises it (see `yaml_error_line`)."""
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader


def read_text(path: str | Path, what: str, error: type[InitmemError] = SweepError) -> str:
    """The UTF-8 text of a file; `error` (one line naming it) when it is missing, a folder, unreadable or not UTF-8."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise error(f"{what} {str(path)!r} is a folder: a YAML file is accepted"
                    + (f" (its files: '{path}/*.yaml')" if what == "params file" else "")) from None
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start:exc.start + 1]
        raise error(f"{what} {str(path)!r} is not UTF-8 text (byte {exc.start} is {bad!r}): a UTF-8 YAML file is "
                    "accepted") from None
    except OSError as exc:
        raise error(f"{what} {str(path)!r} is unreadable: {exc.strerror or exc}") from None


def check_section_name(section: Any, where: str = "") -> str:
    """A section is a plain folder name (it becomes `<results>/<section>/`): no path separators, no leading dot."""
    if not isinstance(section, str) or not section or section != Path(section).name or section.startswith(".") \
            or "\\" in section:
        raise ConfigError(f"{where}section={section!r} is invalid: a plain folder name is accepted "
                          "(like 01_optimizers)")
    return section


def params_files(patterns: list[str]) -> list[str]:
    """Glob patterns (and plain paths) → paths, in order; SweepError naming a pattern that matches no file."""
    paths = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not found:
            raise SweepError(f"params pattern {pattern!r} matches no file: a params file or a glob pattern that "
                             "matches some (like 'params/*.yaml') is accepted")
        paths += found
    return paths


# --- sections and points -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One configuration (all but σ_w and seed) of a section: what one notebook execution trains."""

    section: str
    point_id: str
    parameters: dict[str, Any]  # injected into the notebook: fixed ∪ grid values ∪ results_dir, section
    grid: dict[str, Any]  # the grid values that tell this point from the others


@dataclass
class Section:
    """A parsed and type-checked params file."""

    name: str
    path: Path  # the params file
    notebook: Path  # absolute
    root: Path  # repository root: the notebooks' working folder
    description: str
    profiles: dict[str, dict[str, dict[str, Any]]]
    declared: dict[str, Parameter]  # what the notebook accepts: its parameters cell, then every TrainConfig field

    def results_for(self, profile: str, results: str | Path | None = None) -> Path:
        """Absolute results folder: `results`, or `<root>/results/<profile>` by default."""
        return resolve("results", results, "a results folder") if results is not None else (
            self.root / "results" / profile)  # '' (the working folder, silently) and a symlink loop: one line

    def points(self, profile: str, results: str | Path | None = None) -> list[Point]:
        """The cartesian product of the profile's grid (with each of its `points` entries, if any), each point with
        `fixed` values and where to write."""
        if profile not in self.profiles:
            raise SweepError(f"{self.path}: unknown profile {profile!r}; profiles: {', '.join(self.profiles)}")
        spec, out = self.profiles[profile], self.results_for(profile, results)
        results_dir = str(out.relative_to(self.root)) if out.is_relative_to(self.root) else str(out)
        defaults, points = {k: p.default for k, p in self.declared.items()}, []
        for combo, extra in itertools.product(itertools.product(*spec["grid"].values()), spec.get("points") or [{}]):
            values = {**dict(zip(spec["grid"], combo, strict=True)), **extra}
            params = {**spec["fixed"], **values, "results_dir": results_dir, "section": self.name}
            label = re.sub(r"[^A-Za-z0-9._+-]+", "-", "_".join(f"{k}-{_fmt(v)}" for k, v in values.items()) or "base")
            points.append(Point(self.name, f"{label[:80]}_{parameters_digest({**defaults, **params})}", params, values))
        return points

    def effective(self, point: Point) -> dict[str, Any]:
        """The notebook's defaults overridden by the point's parameters: what the notebook actually sees."""
        return {**{k: p.default for k, p in self.declared.items()}, **point.parameters}

    def profiles_holding(self, run_ids: set[str]) -> list[str]:
        """The profiles whose points' runs include every one of `run_ids`: which profile a results tree was swept with
        (a run records its configuration, not the profile that asked for it)."""
        return [p for p in self.profiles
                if run_ids <= {run_id(c) for pt in self.points(p) for c in point_configs(self.effective(pt))}]


def _fmt(v: Any) -> str:
    return ",".join(map(_fmt, v)) if isinstance(v, (list, tuple)) else f"{v:g}" if isinstance(v, float) else str(v)


def _key(v: Any) -> str:
    return repr(v) if not isinstance(v, (list, tuple, dict)) else repr(sorted(v.items()) if isinstance(v, dict) else
                                                                          [_key(x) for x in v])


def _check_profile(path: Path, name: Any, spec: Any, declared: dict[str, Parameter]) -> dict[str, dict[str, Any]]:
    where = f"{path.name} profile {name!r}: "
    spec = spec or {}
    if not isinstance(spec, dict) or set(spec) - set(PROFILE_KEYS):
        raise SweepError(f"{where}a profile holds only {PROFILE_KEYS}; found "
                         f"{sorted(spec) if isinstance(spec, dict) else type(spec).__name__}")
    fixed, grid = spec.get("fixed") or {}, spec.get("grid") or {}
    if not isinstance(fixed, dict) or not isinstance(grid, dict):
        raise SweepError(f"{where}'fixed' and 'grid' must be mappings")
    points = _check_points(where, spec.get("points"), fixed, grid, declared)
    if ours := [k for k in (*fixed, *grid, *(k for p in points for k in p)) if k in SWEEP_SET]:
        raise SweepError(f"{where}{ours[0]!r} is set by the sweep (--results / the section name), not by a profile")
    if both := set(fixed) & set(grid):
        raise SweepError(f"{where}{sorted(both)} are both fixed and in the grid; keep each in one place")
    fixed = check_parameters(fixed, declared, where)
    new_grid = {}
    for k, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"{where}grid {k!r} must be a non-empty list of values, got {values!r}: "
                             "the grid would expand to no point")
        new_grid[k] = [check_parameters({k: v}, declared, where)[k] for v in values]
        keys = [_key(v) for v in new_grid[k]]  # after conversion: 1 and 1.0 are one float
        if repeat := next((i for i in range(1, len(keys)) if keys[i] in keys[:i]), None):
            raise SweepError(f"{where}grid {k!r} repeats {values[repeat]!r} (in {values!r}): distinct values are "
                             "accepted; a repeated one would run the same point twice")
    return {"fixed": fixed, "grid": new_grid, **({"points": points} if points else {})}


def _check_points(where: str, points: Any, fixed: dict, grid: dict, declared: dict[str, Parameter]) -> list[dict]:
    """A profile's `points`: points that are no product (two (optimizer, lr) pairs), each a mapping of parameters
    set in neither `fixed` nor `grid`, all distinct; the profile runs the grid's product with each of them."""
    if points is None:
        return []
    if not isinstance(points, list) or not points or not all(isinstance(p, dict) and p for p in points):
        raise SweepError(f"{where}points={points!r} is invalid: a non-empty list of non-empty mappings (parameter: "
                         "value) is accepted")
    if both := sorted({k for p in points for k in p} & {*fixed, *grid}):
        raise SweepError(f"{where}{both} are both in points and fixed or in the grid; keep each in one place")
    checked = [check_parameters(p, declared, where) for p in points]
    keys = [_key(p) for p in checked]
    if repeat := next((i for i in range(1, len(keys)) if keys[i] in keys[:i]), None):
        raise SweepError(f"{where}points repeats {points[repeat]!r}: distinct points are accepted; a repeated one "
                         "would run the same point twice")
    return checked


def load_section(path: str | Path) -> Section:
    """A params file parsed, every profile type-checked against its notebook and every point's TrainConfigs built;
    else SweepError/ConfigError naming the file, the profile and the value."""
    path = Path(path).resolve()
    try:
        doc = load_yaml(read_text(path, "params file"))
    except yaml.YAMLError as exc:
        raise SweepError(f"{path}: {yaml_error_line(exc)}; a params file is a YAML mapping like "
                         "params/01_optimizers.yaml") from None
    keys = ("section", "notebook", "description", "profiles")
    if not isinstance(doc, dict) or set(doc) - set(keys) or not {"section", "notebook", "profiles"} <= set(doc):
        raise SweepError(f"{path}: a params file is a mapping with keys {', '.join(keys)} (description optional); "
                         f"found {sorted(doc, key=str) if isinstance(doc, dict) else type(doc).__name__}")
    name, root = check_section_name(doc["section"], f"{path}: "), path.parent.parent  # params/ is in the repository
    notebook = (root / str(doc["notebook"])).resolve()
    if not notebook.is_file():
        raise SweepError(f"{path}: notebook {doc['notebook']!r} does not exist (relative to {root})")
    declared = notebook_parameters(notebook)
    if missing := [k for k in REQUIRED if k not in declared]:
        raise SweepError(f"{notebook}: the parameters cell lacks {missing}; a section notebook declares {REQUIRED}")
    if not isinstance(profiles := doc["profiles"], dict) or not profiles:
        raise SweepError(f"{path}: 'profiles' must map profile names to {{fixed: ..., grid: ...}}")
    checked = {pname: _check_profile(path, pname, spec, declared) for pname, spec in profiles.items()}
    section = Section(name, path, notebook, root, str(doc.get("description") or "").strip(), checked, declared)
    for pname in checked:  # every run of every point is a valid TrainConfig, or the file fails now
        for point in section.points(pname):
            try:
                point_configs(section.effective(point))
            except ConfigError as exc:
                raise ConfigError(f"{path.name} profile {pname!r} point {point.point_id}: {exc}") from None
    return section
