"""initmem: how much does a trained network remember the scale of its random initialisation?

Reproducible research package for "Do Deep Networks Forget Initialization?" (Das et al., 2026). The names below are
what a notebook or a reader needs (docs/api.md); each is imported on first use, so `initmem.load_runs` reads a
results tree without loading torch. The package's layers (docs/architecture.md): the vocabulary on top (`errors`,
`config`, `metrics`), then `store`, `data`, `engine`, `analysis`, `study`, `figures`, `cli`.
"""

import importlib
from collections.abc import Callable

__version__ = "0.1.0"


def lazy_face(package: str, names: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` (PEP 562) for `names` (name -> the module, relative to `package`,
    that defines it): a name is imported on first use, so a face never loads what its caller does not touch, and
    an unknown name falls through to the import system (a subpackage's own modules)."""
    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(names[name], package), name)

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__


API = {
    **dict.fromkeys(["InitmemError", "ConfigError", "DataError", "ResultsError"], ".errors"),
    **dict.fromkeys(["TrainConfig", "run_id", "point_configs"], ".config"),
    **dict.fromkeys(["spread", "interpolation_epoch", "best_epoch", "test_at_best", "repair_gap", "radial_memory",
                     "forgetting_clocks", "summarize_history", "point_summary", "SELECTION_RULES"], ".metrics"),
    **dict.fromkeys(["RunResult", "load_runs", "load_histories"], ".store.results"),
    "load_cifar10": ".data.sources",
    "train": ".engine.trainer",
    "run_point": ".study.point",
    "checked_parameters": ".study.notebook",
    "show_point": ".analysis.point_report",
    "what_we_found": ".analysis.findings",
    **dict.fromkeys(["FigureBook", "make_figures"], ".figures.artefacts"),
}
__all__ = sorted(API)
__getattr__, __dir__ = lazy_face(__name__, API)
