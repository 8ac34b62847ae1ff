"""argparse the way the `initmem` command wants it: every flag may be given once (a second value is a usage error
naming both, where argparse would keep the last silently), usage errors are one line like every other initmem error,
and an unknown flag is answered with the closest known one."""

from __future__ import annotations

import argparse
import difflib


class Once(argparse.Action):
    """Mixin: a flag given twice is a usage error naming both values (argparse keeps the last one silently)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given", {})
        shown = " ".join([str(option_string), *map(str, values if isinstance(values, list) else [values])])
        if self.dest in given:
            raise argparse.ArgumentError(self, f"given twice ({given[self.dest]}, then {shown}): each flag once is "
                                               "accepted")
        given[self.dest] = shown
        super().__call__(parser, namespace, values, option_string)


class _StoreOnce(Once, argparse._StoreAction):
    pass


class _StoreTrueOnce(Once, argparse._StoreTrueAction):
    pass


class _StoreFalseOnce(Once, argparse._StoreFalseAction):
    pass


class BooleanOnce(Once, argparse.BooleanOptionalAction):
    pass


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are ONE line, like every other initmem error (no usage block), and whose flags
    may be given once (subcommand parsers are Parsers too)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, cls in ((None, _StoreOnce), ("store", _StoreOnce), ("store_true", _StoreTrueOnce),
                          ("store_false", _StoreFalseOnce)):
            self.register("action", name, cls)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def parse_strict(self, argv: list[str] | None = None) -> argparse.Namespace:
        """`parse_args`, with an unknown flag reported by its subcommand's parser together with the closest of that
        subcommand's flags ("did you mean --sigma-w?")."""
        args, extra = self.parse_known_args(argv)
        if extra:
            sub = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
            flags = [s for a in sub._actions for s in a.option_strings if s.startswith("--")]
            close = difflib.get_close_matches(extra[0].split("=")[0], flags, 1, cutoff=0.7)
            sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {close[0]}?)" if close else ""))
        vars(args).pop("_given", None)
        return args
