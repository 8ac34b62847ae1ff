"""initmem's exceptions: a user error is an `InitmemError` (the CLI prints one line); any other is a bug."""


class InitmemError(Exception):
    """Base class of every error initmem raises on purpose."""


class ConfigError(InitmemError, ValueError):
    """A parameter has a bad name, type or value. The message names it, its value and what is accepted."""


class DataError(InitmemError):
    """A data source is missing, unreadable or malformed."""


class ResultsError(InitmemError):
    """A results folder or file is missing, unwritable or corrupt."""


class CheckpointError(InitmemError):
    """A checkpoint is truncated, corrupt or does not belong to the run."""


class NotebookError(InitmemError):
    """A notebook failed to execute; the message names the notebook, the cell and the error (`ename`, `evalue`: the
    type and message the failing cell raised, "" when the kernel failed before any cell did)."""

    ename: str = ""
    evalue: str = ""


class SweepError(InitmemError):
    """A sweep could not be planned or run (bad params file, unknown profile, missing executor)."""


class PointDeferred(SweepError):
    """A sweep's point put off, its free runs trained: its other runs are being trained by another process (a second
    sweep, `initmem run`); the sweep comes back to it after its other points, and then waits for those runs."""

    env = "INITMEM_DEFER_LOCKED"  # "1" in the kernels of a local sweep's first pass: `point.train_point` defers


class NoResults(ResultsError):
    """A table or figure has nothing to show; a figure notebook makes it a 'no results' placeholder saying why."""


def invalid(name: str, value: object, accepted: str) -> ConfigError:
    """The one-line error of a bad argument: "name=value is invalid: <accepted> is accepted"."""
    return ConfigError(f"{name}={value!r} is invalid: {accepted} is accepted")

