"""The `initmem` command. Thin: every subcommand parses flags that mirror a library function's keyword arguments
one to one, calls it, and turns an `InitmemError` into one line on stderr and a non-zero exit.

Each subcommand has its own `_add_<name>(subparsers)` and `_cmd_<name>(args) -> int` pair below.
"""

from __future__ import annotations

import argparse
import sys

from initmem.errors import InitmemError


# --- train -------------------------------------------------------------------------------------------------
def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train one run and write its folder")
    p.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    raise NotImplementedError


# --- run ---------------------------------------------------------------------------------------------------
def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute one notebook with papermill")
    p.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    raise NotImplementedError


# --- sweep -------------------------------------------------------------------------------------------------
def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run every point of a section's grid")
    p.set_defaults(func=_cmd_sweep)


def _cmd_sweep(args: argparse.Namespace) -> int:
    raise NotImplementedError


# --- figures -----------------------------------------------------------------------------------------------
def _add_figures(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("figures", help="regenerate every table and figure from a results folder")
    p.set_defaults(func=_cmd_figures)


def _cmd_figures(args: argparse.Namespace) -> int:
    raise NotImplementedError


# --- report ------------------------------------------------------------------------------------------------
def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="export the executed notebooks of a results tree to HTML")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    raise NotImplementedError


# -----------------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="initmem", description="Do deep networks forget initialization?")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_train, _add_run, _add_sweep, _add_figures, _add_report):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InitmemError as exc:
        print(f"initmem {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"initmem {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
