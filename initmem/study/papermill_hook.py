"""Plain papermill's command line, made to say initmem's one line. papermill loads every installed
`papermill.engine` entry point when it is imported; initmem's (`initmem`, pyproject.toml) is papermill's own
nbclient engine under a second name, and loading it does two things in the `papermill` program only:

- a notebook cell that raised an `InitmemError` (a refused parameter, missing data) ends the program with that
  error's one line and exit 1, instead of papermill's traceback of its own frames (any other error keeps it: a
  bug's traceback is what its reader needs);
- papermill's "Passed unknown parameter" warning is dropped: the notebook checks every name itself and refuses
  an unknown one in one line naming the closest accepted one.

Torch-free; papermill is imported only when papermill asks for the engine."""

import logging
import sys
from pathlib import Path
from typing import Any

from initmem.errors import InitmemError


def _names(kind: type) -> set[str]:
    return {kind.__name__}.union(*(_names(k) for k in kind.__subclasses__()))


def one_line(error: BaseException) -> str | None:
    """`"<ename>: <evalue> (...)"` for a PapermillExecutionError whose cell raised an initmem error, else None."""
    if type(error).__name__ != "PapermillExecutionError" or getattr(error, "ename", None) not in _names(InitmemError):
        return None
    return (f"{error.ename}: {error.evalue} (papermill: the notebook stopped at In [{error.exec_count}]; the "
            "executed notebook holds its cells)")


def _excepthook(kind: type, error: BaseException, tb: Any, previous=sys.excepthook) -> None:
    if (line := one_line(error)) is None:
        previous(kind, error, tb)
    else:
        print(line, file=sys.stderr)  # the interpreter still exits 1 after an uncaught exception


def known_parameters(record: logging.LogRecord) -> bool:
    """Drops papermill's "Passed unknown parameter" warning: the notebook checks every name itself."""
    return not record.getMessage().startswith("Passed unknown parameter")


def is_papermill_program(orig_argv: list[str]) -> bool:
    """`sys.orig_argv` of the `papermill` console script (`python …/bin/papermill …`) or of `python -m papermill`
    (while `-m` imports the package, `sys.argv[0]` is still "-m"); not of another program that imports papermill."""
    options = iter(orig_argv[1:])
    for option in options:
        if option in ("-m", "-c"):
            return option == "-m" and next(options, "") == "papermill"
        if option in ("-X", "-W"):  # the interpreter's options that take a value
            next(options, "")
        elif not option.startswith("-"):
            return Path(option).name == "papermill"
    return False


def __getattr__(name: str):
    if name == "Engine":  # what the entry point names; papermill.engines is mid-import when it asks
        from papermill.engines import NBClientEngine
        return NBClientEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if is_papermill_program(sys.orig_argv):
    sys.excepthook = _excepthook
    logging.getLogger("papermill").addFilter(known_parameters)
