"""argparse the `initmem` way: usage errors in one line like every initmem error, every flag given once (argparse
would keep the last value silently), and an unknown flag answered with the closest known one."""

import argparse
import difflib


class Once(argparse.Action):
    """Mixin: a flag given twice is a usage error naming both values."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given", {})
        shown = " ".join([str(option_string), *map(str, values if isinstance(values, list) else [values])])
        if self.dest in given:
            raise argparse.ArgumentError(self, f"given twice ({given[self.dest]}, then {shown}): each flag once is "
                                               "accepted")
        given[self.dest] = shown
        super().__call__(parser, namespace, values, option_string)


class BooleanOnce(Once, argparse.BooleanOptionalAction):
    pass


# argparse's store actions as `Once`, registered by `Parser` under their names (None: a plain `add_argument`)
_ONCE_ACTIONS = {name: type(f"Once_{name}", (Once, base), {}) for name, base in (("store", argparse._StoreAction),
                 ("store_true", argparse._StoreTrueAction), ("store_false", argparse._StoreFalseAction))}


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (no usage block) and `Once` flags (subcommand parsers are Parsers too)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, cls in {None: _ONCE_ACTIONS["store"], **_ONCE_ACTIONS}.items():
            self.register("action", name, cls)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def parse_strict(self, argv: list[str] | None = None) -> argparse.Namespace:
        """`parse_args`, an unknown flag reported by its subcommand's parser with that subcommand's closest flag."""
        args, extra = self.parse_known_args(argv)
        if extra:
            sub = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
            flags = [s for a in sub._actions for s in a.option_strings if s.startswith("--")]
            close = difflib.get_close_matches(extra[0].split("=")[0], flags, 1, cutoff=0.7)
            sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {close[0]}?)" if close else ""))
        vars(args).pop("_given", None)
        return args
