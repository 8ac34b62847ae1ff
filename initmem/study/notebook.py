"""Notebooks: jupytext `.py` files run by papermill (kernel `python3`). Parameters cells (`name = literal` lines) are
read with `ast`; values are checked before the kernel starts and again inside it (`checked_parameters`): papermill
only warns on an unknown name and injects a YAML `1e-3` as a string. Torch-, papermill- and jupytext-free at import."""

import ast
import contextlib
import dataclasses
import difflib
import hashlib
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from initmem.config import MEMBER_FIELDS, TrainConfig, point_configs
from initmem.errors import ConfigError, InitmemError, NotebookError, ResultsError
from initmem.study.papermill_hook import known_parameters

# nbformat (under papermill and jupytext) validates with jsonschema, whose format checkers import rfc3987_syntax when
# it is installed (jupyterlab's jupyter-events asks for it). That module compiles a Lark grammar at import: 1.3-2.5 s
# in every process that reads a notebook (`initmem run`, `sweep`, `figures`, each sweep worker) for the "iri"
# formats, which no notebook schema uses. Marked absent in the processes that import this module (jsonschema then
# leaves those two formats unchecked), unless something imported it first.
sys.modules.setdefault("rfc3987_syntax", None)
# Kernel start-up failures worth a retry: parallel kernels can race for the same ports.
_RETRYABLE = ("address already in use", "zmqerror", "kernel didn't respond", "kernel died before replying",
              "timeout waiting for kernel", "kernel_info")
# silences what the kernel logs to the inherited stderr at every start and some normal shutdowns (no run's problem)
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]
SECTION_REQUIRED = ("results_dir", "section", "sigma_ws", "seeds")  # what every section notebook declares
# a section notebook's TrainConfig fields that nothing sets: seconds on a laptop (every params/ profile sets them)
SMOKE = {"data": "synthetic", "width": 0.0625, "epochs": 2, "n_train": 256, "n_val": 128, "n_test": 128}
NOT_IN_ID = ("results_dir", "section", "progress")  # where and how verbosely, not what: not in a point's digest
INJECTED = "# Parameters\n"  # the first line of papermill's injected-parameters cell (python translator)
SCIENTIFIC = re.compile(r"[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+")  # YAML 1.1 reads these as strings


class Parameter(NamedTuple):
    """One name a notebook accepts: its type, default and whether its parameters cell lists it (`in_cell`)."""

    type: str
    default: Any
    in_cell: bool = True


# --- the parameters cell -----------------------------------------------------------------------------------
def _checked(path: str | Path) -> Path:
    if (path := Path(path)).is_dir():
        raise NotebookError(f"notebook {str(path)!r} is a folder: a jupytext .py notebook or an .ipynb is accepted, "
                            "e.g. notebooks/01_optimizers.py")
    if not path.is_file():
        raise NotebookError(f"notebook {str(path)!r} does not exist")
    return path


def _read(path: str | Path):
    import jupytext
    return jupytext.read(_checked(path))  # by its extension: an .ipynb as JSON, a .py as percent text


_CELL = re.compile(r"^# %%(?:\s+\[\w+\])?(.*)$")  # a percent-format cell marker: `# %% [markdown] tags=[...]`


def _percent_cells(text: str) -> list[tuple[list[str], str]]:
    """(tags, source) of each cell of a jupytext percent notebook's text."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if m := _CELL.match(line):
            cells.append((m.group(1), []))
        elif cells:
            cells[-1][1].append(line)
    tags = [re.search(r"tags\s*=\s*(\[[^\]]*\])", meta) for meta, _ in cells]
    return [(json.loads(t.group(1)) if t else [], "\n".join(lines).strip("\n")) for t, (_, lines) in zip(
        tags, cells, strict=True)]


def _ipynb_cells(text: str, path: Path) -> list[tuple[list[str], str]]:
    """(tags, source) of each cell of an .ipynb (nbformat 4 JSON, e.g. the one jupytext pairs with a .py)."""
    try:
        cells = json.loads(text)["cells"]
        return [(list(c.get("metadata", {}).get("tags", [])), "".join(c["source"]) if isinstance(c["source"], list)
                 else c["source"]) for c in cells]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NotebookError(f"notebook {str(path)!r} is not an nbformat 4 .ipynb ({type(exc).__name__}: {exc}): a "
                            "notebook saved by Jupyter or jupytext is accepted") from None


def tagged_cells(path: str | Path, tag: str) -> list[str]:
    """The sources of a notebook's cells whose metadata tags include `tag`: a jupytext percent `.py` or an `.ipynb`,
    read without jupytext (so `initmem plan` and `--calibrate` run where only torch, numpy, pandas and yaml are
    installed; a test checks that jupytext reads the same cells)."""
    text = (path := _checked(path)).read_text(encoding="utf-8")
    cells = _ipynb_cells(text, path) if path.suffix == ".ipynb" else _percent_cells(text)
    return [source.strip("\n") for tags, source in cells if tag in tags]


def _infer_type(value: Any) -> str:
    if isinstance(value, (bool, int, float, str)):
        return type(value).__name__
    if isinstance(value, (list, tuple)):
        kinds = {_infer_type(v) for v in value}
        elem = kinds.pop() if len(kinds) == 1 else "float" if kinds <= {"int", "float"} else "Any"
        return f"list[{elem}]" if isinstance(value, list) else f"tuple[{elem}, ...]"
    return "dict" if isinstance(value, dict) else "Any"


def notebook_parameters(path: str | Path) -> dict[str, Parameter]:
    """What a notebook accepts: the names of its cell tagged `parameters` in order, typed by their annotation or
    default (an untyped `None` is `Any`), then, for a section notebook, the other TrainConfig fields."""
    cells = tagged_cells(path, "parameters")
    if len(cells) != 1:
        raise NotebookError(f"{path}: expected exactly one cell tagged 'parameters', found {len(cells)}")
    return accepted_parameters(_parse_parameters(cells[0], str(path)))


def accepted_parameters(cell: dict[str, Parameter]) -> dict[str, Parameter]:
    """A cell's names and, for a section notebook (`SECTION_REQUIRED`), every TrainConfig field but `MEMBER_FIELDS`,
    typed by the dataclass, defaulting to the cell's value, else `SMOKE`'s, else TrainConfig's."""
    out, section = dict(cell), all(k in cell for k in SECTION_REQUIRED)
    for f in dataclasses.fields(TrainConfig):
        if section and f.name not in MEMBER_FIELDS:
            default = cell[f.name].default if f.name in cell else SMOKE.get(f.name, f.default)
            out[f.name] = Parameter(str(f.type), default, f.name in cell)
    return out


def _parse_parameters(source: str, path: str) -> dict[str, Parameter]:
    try:
        body = ast.parse(source).body
    except SyntaxError as exc:
        raise NotebookError(f"{path}: the parameters cell is not valid Python: line {exc.lineno}: {exc.msg} "
                            f"({(exc.text or '').strip()!r}); `name = literal` lines are accepted") from None
    out: dict[str, Parameter] = {}
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, annotation, value = node.targets[0].id, None, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, annotation, value = node.target.id, ast.unparse(node.annotation), node.value
        else:
            raise NotebookError(f"{path}: the parameters cell may hold only `name = literal` lines; "
                                f"line {node.lineno} is {ast.unparse(node)!r}")
        try:
            default = ast.literal_eval(value)
        except ValueError:
            raise NotebookError(f"{path}: parameter {name!r} needs a literal default, "
                                f"not {ast.unparse(value)!r}") from None
        out[name] = Parameter(annotation or _infer_type(default), default)
    return out


# --- type checking against the declared types --------------------------------------------------------------
_IS = {"Any": lambda v: True, "bool": lambda v: isinstance(v, bool), "str": lambda v: isinstance(v, str),
       "int": lambda v: isinstance(v, int) and not isinstance(v, bool), "dict": lambda v: isinstance(v, dict)}


def _coerce(value: Any, node: ast.expr) -> tuple[bool, Any]:
    """(ok, value converted) for a value against an annotation's AST. int is accepted (and converted) for float,
    lists for tuples; bool is not an int here."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return next((r for r in (_coerce(value, side) for side in (node.left, node.right)) if r[0]), (False, value))
    if isinstance(node, ast.Constant) and node.value is None:
        return value is None, value
    if isinstance(node, ast.Name) and node.id in _IS:
        return _IS[node.id](value), value
    if isinstance(node, ast.Name) and node.id == "float":
        if isinstance(value, str) and SCIENTIFIC.fullmatch(value.strip()):  # YAML 1.1's "1e-3"
            return True, float(value.replace("_", ""))
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if isinstance(node, ast.Name) and node.id in ("list", "tuple"):  # bare: list[Any], tuple[Any, ...]
        outer, args = node.id, [ast.Name("Any"), ast.Constant(...)]
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in (
            "list", "tuple", "dict"):
        outer, args = node.value.id, node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    else:
        raise NotebookError(f"unsupported parameters-cell annotation {ast.unparse(node)!r}")
    if outer == "dict":
        if not isinstance(value, dict):
            return False, value
        pairs = {k: _coerce(v, args[-1]) for k, v in value.items()}
        ok = all(p[0] for p in pairs.values()) and all(_coerce(k, args[0])[0] for k in value)
        return ok, {k: p[1] for k, p in pairs.items()} if ok else value
    variadic = outer == "list" or (len(args) == 2 and isinstance(args[1], ast.Constant) and args[1].value is ...)
    if not isinstance(value, (list, tuple)) or (not variadic and len(args) != len(value)):
        return False, value
    pairs = [_coerce(v, a) for v, a in zip(value, args[:1] * len(value) if variadic else args, strict=True)]
    items = [p[1] for p in pairs]
    ok = all(p[0] for p in pairs)
    return ok, (tuple(items) if outer == "tuple" else items) if ok else value


def check_value(name: str, value: Any, type_: str, where: str = "") -> Any:
    """`value` converted to `type_` (int → float, list → tuple), or ConfigError naming key, value and type."""
    ok, converted = _coerce(value, ast.parse(type_, mode="eval").body)
    if not ok:
        raise ConfigError(f"{where}parameter {name}={value!r} has type {type(value).__name__}; expected {type_}")
    return converted


def check_parameters(params: dict[str, Any], declared: dict[str, Parameter], where: str = "") -> dict[str, Any]:
    """`params` type-checked and converted; an unknown name is a ConfigError naming the accepted and closest ones."""
    for name in params:
        if name not in declared:
            close = difflib.get_close_matches(name, declared, n=1)
            cell = [k for k, p in declared.items() if p.in_cell]
            fields = f" and every TrainConfig field but {', '.join(MEMBER_FIELDS)} (docs/fields.md)" \
                if len(cell) < len(declared) else ""
            raise ConfigError(f"{where}unknown parameter {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                              + f"; accepted: {', '.join(cell)}{fields}")
    return {k: check_value(k, v, declared[k].type, where) for k, v in params.items()}


def parameters_digest(effective: dict[str, Any]) -> str:
    """Six hex digits naming a point (sweep point ids end with it): the sha256 of its effective parameters without
    `NOT_IN_ID` and TrainConfig fields at their default (so neither a new field nor one more cell line renames it)."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    key = {k: v for k, v in effective.items() if k not in NOT_IN_ID and not (k in defaults and v == defaults[k])}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:6]


# --- inside the kernel -------------------------------------------------------------------------------------
def _one_line(shell, etype, value, tb, tb_offset=None):  # noqa: ARG001 - IPython's custom-exception signature
    """IPython shows an InitmemError as its one line, as the CLI does (its message names the value and the fix)."""
    stb = [f"{etype.__name__}: {value}"]
    shell._showtraceback(etype, value, stb)  # how IPython (and ipykernel: an error output) shows a traceback
    return stb


def checked_parameters(namespace: dict[str, Any]) -> dict[str, Any]:
    """Check, in the kernel, what papermill injected; returns `namespace` (`checked_parameters(globals())`). When the
    cell before this one in IPython's `In` is papermill's (`INJECTED`), every name it sets must be accepted by the cell
    before that, converted as `check_parameters` does. A section notebook gets the `SMOKE` fields nothing set (printed)
    and builds its runs, so a bad value fails here; a later InitmemError shows as one line, as in `initmem`."""
    if callable(shell := namespace.get("get_ipython")) and hasattr(ip := shell(), "set_custom_exc"):
        ip.set_custom_exc((InitmemError,), _one_line)
    if isinstance(sources := namespace.get("In"), list) and len(sources) >= 3 and str(sources[-2]).startswith(INJECTED):
        accepted = accepted_parameters(_parse_parameters(str(sources[-3]), "the parameters cell"))
        names = [t.id for node in ast.parse(str(sources[-2])).body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)]
        namespace.update(check_parameters({n: namespace[n] for n in names if n in namespace}, accepted,
                                          "papermill parameters: "))
    if all(k in namespace for k in SECTION_REQUIRED):
        if unset := {k: v for k, v in SMOKE.items() if k not in namespace}:
            namespace.update(unset)
            print("at the smoke scale (initmem.study.notebook.SMOKE; set them in the parameters cell or with -p): "
                  + ", ".join(f"{k}={v!r}" for k, v in unset.items()), flush=True)
        point_configs(namespace)
    return namespace


# --- execution ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _environ(values: dict[str, str]):
    """`values` set in os.environ for the block (a kernel inherits it at start-up), then only those keys restored."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _is_retryable(exc: BaseException) -> bool:
    from nbclient.exceptions import DeadKernelError
    # a kernel that died mid-cell (e.g. out of memory) would die again
    return not isinstance(exc, DeadKernelError) and any(s in f"{type(exc).__name__}: {exc}".lower() for s in _RETRYABLE)


def execute_notebook(path: str | Path, output_path: str | Path, parameters: dict[str, Any] | None = None,
                     cwd: str | Path | None = None, log_output: bool = True, kernel_name: str = "python3",
                     start_timeout: int = 60, retries: int = 2, env: dict[str, str] | None = None):
    """The executed notebook (`nbformat.NotebookNode`, also at `output_path` when a cell fails: NotebookError naming
    it); a kernel start is retried on port clashes; the kernel gets `env` and `INITMEM_PROGRESS=lines`."""
    import papermill
    from papermill.exceptions import PapermillExecutionError
    logging.getLogger("papermill").addFilter(known_parameters)  # once: addFilter skips a filter it holds
    path, output_path = Path(path), Path(output_path)
    parameters = check_parameters(dict(parameters or {}), notebook_parameters(path), f"{path.name}: ")
    if cwd is not None and not Path(cwd).is_dir():
        raise ConfigError(f"cwd={str(cwd)!r} is invalid: an existing folder is accepted (it is not created)")
    if (above := next((a for a in output_path.parents if a.exists()), None)) is not None and not above.is_dir():
        raise ResultsError(f"executed-notebook path {str(output_path)!r} is under {str(above)!r}, which is a file: a "
                           "path under a folder is accepted")
    try:
        output_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(f"executed-notebook path {str(output_path)!r} is not writable: {exc.strerror or exc} "
                           f"({exc.filename}); a path under a writable folder is accepted") from None
    streams = {"stdout_file": sys.stdout, "stderr_file": sys.stderr} if log_output else {}
    kernel_env = {"INITMEM_PROGRESS": os.environ.get("INITMEM_PROGRESS", "lines"), **(env or {})}
    for attempt in range(retries + 1):
        try:
            with _environ(kernel_env):
                return papermill.execute_notebook(
                    _read(path), str(output_path), parameters=parameters, kernel_name=kernel_name,
                    language="python", cwd=str(cwd) if cwd is not None else None, progress_bar=False,
                    start_timeout=start_timeout, extra_arguments=KERNEL_ARGUMENTS, **streams)
        except PapermillExecutionError as exc:
            first = next((ln for ln in exc.source.splitlines() if ln.strip()), "")
            err = NotebookError(f"{path}: cell {exc.cell_index} (In [{exc.exec_count}], {first.strip()!r}) raised "
                                f"{exc.ename}: {exc.evalue}; executed notebook: {output_path}")
            err.ename, err.evalue = exc.ename, exc.evalue
            raise err from None
        except Exception as exc:
            if attempt < retries and _is_retryable(exc):
                time.sleep(0.5 + attempt)
                continue
            raise NotebookError(f"{path}: execution failed before finishing ({type(exc).__name__}: {exc}); "
                                f"executed notebook: {output_path}") from exc


def run_notebook(path: str | Path, parameters: dict[str, Any] | None = None, *, output: str | Path | None = None,
                 cwd: str | Path | None = None, log_output: bool = True) -> Path:
    """`initmem run`: one notebook executed in `cwd` (default: here); returns `output`, by default
    `<cwd>/results/notebooks/<stem>-<digest>.ipynb`, the digest naming the point so that points never overwrite."""
    path, cwd = Path(path), Path(cwd) if cwd is not None else Path.cwd()
    if output is None:
        declared = notebook_parameters(path)
        digest = parameters_digest({**{k: p.default for k, p in declared.items()},
                                    **check_parameters(dict(parameters or {}), declared, f"{path.name}: ")})
        output = cwd / "results" / "notebooks" / f"{path.stem}-{digest}.ipynb"
    execute_notebook(path.resolve(), Path(output), parameters, cwd=cwd, log_output=log_output)
    return Path(output)
