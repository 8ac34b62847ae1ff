"""cli: the `initmem` command (`initmem --help`); each subcommand's flags mirror a function's keyword arguments."""

from initmem import lazy_face

API = {"main": ".commands"}
__all__ = sorted(API)
__getattr__, __dir__ = lazy_face(__name__, API)
