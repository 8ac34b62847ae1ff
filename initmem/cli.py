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
    import dataclasses

    from initmem.config import TrainConfig, field_help

    p = sub.add_parser("train", help="train one run and write its folder",
                       description="Train one run and write <out>/<section>/<run_id>/{history.csv,run.json}. "
                                   "Every TrainConfig field has a flag; unset flags keep the TrainConfig default.")
    for f in dataclasses.fields(TrainConfig):
        flag, default = "--" + f.name.replace("_", "-"), f.default
        shown = "per optimizer" if f.name in ("lr", "momentum", "weight_decay") else (
            " ".join(map(str, default)) if isinstance(default, tuple) else default)
        kw = dict(dest=f.name, default=argparse.SUPPRESS, help=f"{field_help(f.name)} (default: {shown})".replace(
            "%", "%%"))
        if f.type == "bool":
            p.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
        else:  # strings here; _cmd_train converts them so that a bad value is one ConfigError line
            p.add_argument(flag, nargs="+" if f.type.startswith("tuple") else None,
                           metavar=f.name.upper(), **kw)
    p.add_argument("--out", default="results", help="results folder (default: results)")
    p.add_argument("--section", default="adhoc", help="section folder under --out (default: adhoc)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="per-epoch progress (default: on)")
    p.set_defaults(func=_cmd_train)


def _train_value(name: str, kind: str, raw):
    """A flag's string(s) → the TrainConfig field's type; ConfigError in TrainConfig's own format."""
    from initmem.errors import ConfigError

    if isinstance(raw, bool) or kind == "str":
        return raw
    if isinstance(raw, list):
        return tuple(_train_value(name, "float", r) for r in raw)
    if kind.endswith("| None") and raw.strip().lower() in ("none", "null"):
        return None
    try:
        return int(raw) if kind.startswith("int") else float(raw)
    except ValueError:
        what = "an integer" if kind.startswith("int") else "a real number"
        raise ConfigError(f"TrainConfig.{name}={raw!r} is invalid: {what}"
                          + (" or None" if kind.endswith("| None") else "") + " is accepted") from None


def _cmd_train(args: argparse.Namespace) -> int:
    import dataclasses

    from initmem.config import TrainConfig
    from initmem.train import train

    kinds = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    config = TrainConfig(**{k: _train_value(k, kinds[k], v) for k, v in vars(args).items() if k in kinds})
    result = train(config, out_dir=args.out, section=args.section, progress=args.progress)
    s = result.summary

    def fmt(v) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    print(result.path)
    print(f"{result.status}: " + " ".join(f"{k}={fmt(s[k])}" for k in (
        "epochs_run", "best_epoch", "test_acc_at_best", "tau_interp", "final_train_acc", "init_weight_norm",
        "final_weight_norm", "T_SGD", "T_adapt")))
    return 0


# --- run ---------------------------------------------------------------------------------------------------
def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute one notebook with papermill",
                       description="Execute a jupytext notebook with papermill (kernel python3); parameters are "
                                   "type-checked against its parameters cell first.")
    p.add_argument("notebook", help="a jupytext .py notebook, e.g. notebooks/01_optimizers.py")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="set a parameter; VALUE is read as YAML (0.01, [0.1, 1.0], null, true), as papermill's -p")
    p.add_argument("-f", "--parameters-file", help="YAML mapping of parameters (-p values override it)")
    p.add_argument("--output", help="executed notebook (default: <cwd>/results/notebooks/<name>.ipynb)")
    p.add_argument("--cwd", help="working folder of the kernel (default: the current folder)")
    p.add_argument("--quiet", action="store_true", help="do not stream the cells' output")
    p.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    import yaml

    from initmem.errors import ConfigError
    from initmem.notebook import check_parameters, notebook_parameters, run_notebook
    from initmem.sweep import REQUIRED, point_configs

    params: dict = {}
    if args.parameters_file:
        try:
            params = yaml.safe_load(open(args.parameters_file, encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read parameters file {args.parameters_file!r}: "
                              + " ".join(str(exc).split())) from None
        if not isinstance(params, dict) or "profiles" in params:
            raise ConfigError(f"{args.parameters_file!r} must be a flat mapping of parameters "
                              "(a section params file with profiles is run with `initmem sweep`)")
    for name, value in args.parameter:
        try:
            params[name] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"-p {name} {value!r} is not a YAML value: " + " ".join(str(exc).split())) from None
    declared = notebook_parameters(args.notebook)
    if all(k in declared for k in REQUIRED):  # a section notebook: every run's TrainConfig checked before the kernel
        checked = check_parameters(params, declared, f"{args.notebook}: ")
        point_configs({**{k: p.default for k, p in declared.items()}, **checked})
    run_notebook(args.notebook, params, output=args.output, cwd=args.cwd, log_output=not args.quiet)
    return 0


# --- sweep -------------------------------------------------------------------------------------------------
def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run every point of a section's grid",
                       description="Expand params files' grids and execute each incomplete point's notebook.")
    p.add_argument("params", nargs="+", help="params files (or glob patterns), e.g. params/01_optimizers.yaml")
    p.add_argument("--profile", required=True, help="profile of the params file: smoke, cpu, paper, ...")
    p.add_argument("--results", help="results folder (default: <repo>/results/<profile>)")
    p.add_argument("--executor", choices=("local", "slurm"), default="local")
    p.add_argument("--jobs", type=int, default=1, help="local executor: points run in parallel (one GPU each)")
    p.add_argument("--dry-run", action="store_true", help="list the points and what would run")
    p.add_argument("--quiet", action="store_true", help="do not stream the notebooks' output")
    g = p.add_argument_group("slurm executor")
    g.add_argument("--partition")
    g.add_argument("--gpus", type=int, dest="gpus_per_node", help="GPUs per job")
    g.add_argument("--time", type=int, help="minutes per job (default 1440)")
    g.add_argument("--mem", type=float, dest="mem_gb", help="GB of memory per job")
    g.add_argument("--cpus-per-task", type=int)
    g.add_argument("--array-parallelism", type=int, help="at most this many jobs at once")
    p.set_defaults(func=_cmd_sweep)


def _cmd_sweep(args: argparse.Namespace) -> int:
    import glob

    from initmem.sweep import SLURM_OPTIONS, run_sweep

    paths = [m for pat in args.params for m in (sorted(glob.glob(pat)) if glob.has_magic(pat) else [pat])]
    slurm = {k: getattr(args, k) for k in SLURM_OPTIONS if getattr(args, k, None) is not None}
    code = 0
    for path in paths:
        report = run_sweep(path, profile=args.profile, results=args.results, executor=args.executor, jobs=args.jobs,
                           dry_run=args.dry_run, slurm=slurm, progress=not args.quiet)
        code = max(code, report.exit_code)
    return code


# --- figures -----------------------------------------------------------------------------------------------
def _add_figures(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("figures", help="regenerate every table and figure from a results folder")
    p.add_argument("--results", default="results/cpu", help="results tree to read (default: %(default)s)")
    p.add_argument("--out", default="figures", help="folder for the figures, tables/ and README.md "
                   "(default: %(default)s; executed notebooks go to <out>/.executed/)")
    p.add_argument("--notebooks", nargs="+", default=None, metavar="NAME",
                   help="only these figure notebooks (stems like 01_optimizers, or .py paths; default: all)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="do not stream notebook output")
    p.set_defaults(func=_cmd_figures)


def _cmd_figures(args: argparse.Namespace) -> int:
    from initmem.figures import make_figures

    written = make_figures(args.results, args.out, notebooks=args.notebooks, progress=args.progress)
    print(f"initmem figures: {len(written)} files written; index: {written[-1]}")
    return 0


# --- report ------------------------------------------------------------------------------------------------
def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="export the executed notebooks of a results tree to HTML")
    p.add_argument("--results", default="results/cpu", help="results tree to read (default: %(default)s)")
    p.add_argument("--out", default="reports", help="folder for the HTML pages and index.html (default: %(default)s)")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from initmem.report import export_reports

    written = export_reports(results=args.results, out=args.out)
    print(f"initmem report: {len(written) - 1} notebooks exported; open {written[-1]}")
    return 0


# -----------------------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are ONE line, like every other initmem error (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="initmem", description="Do deep networks forget initialization?")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_train, _add_run, _add_sweep, _add_figures, _add_report):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported by the subcommand's parser, with the closest of its flags
        import difflib

        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
        flags = [s for a in sub._actions for s in a.option_strings if s.startswith("--")]
        close = difflib.get_close_matches(extra[0].split("=")[0], flags, 1, cutoff=0.7)
        sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {close[0]}?)" if close else ""))
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
