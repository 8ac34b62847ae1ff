"""The `initmem` command. Thin: each subcommand (`_add_<name>`, `_cmd_<name>`) parses flags that mirror a library
function's keyword arguments, calls it, and turns an `InitmemError` into one line on stderr and a non-zero exit."""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import yaml

from initmem.checks import check_int, check_results_arg
from initmem.cli.args import BooleanOnce, Parser
from initmem.config import TrainConfig, field_help, point_configs
from initmem.errors import ConfigError, InitmemError, invalid
from initmem.study.notebook import check_parameters, notebook_parameters, run_notebook
from initmem.study.params import REQUIRED, check_section_name, load_yaml, params_files, read_text, yaml_error_line


def _add_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="put CIFAR-10 into data/, where every profile reads it (checked by its hash)",
                       description="Put CIFAR-10 into the git-ignored data/ folder: copied from --from PATH (the "
                       "study's cifar10-jpeg.tar.gz, checked by sha256; a train/+test/ folder of class folders, packed "
                       "into one archive; or torchvision's cifar-10-python.tar.gz, checked by md5) or --download-ed "
                       "from torchvision's URL (every network wait bounded; progress on stderr). A second run finds it "
                       "and does nothing; a corrupt or partial file is named and never used.")
    p.add_argument("--from", dest="source", metavar="PATH", help="archive or folder to import (default: none)")
    p.add_argument("--download", action="store_true", help="download torchvision's CIFAR-10 (needs internet; "
                   "default: off)")
    p.add_argument("--dest", help="folder to put it in (default: the repository's data/, whatever the current folder: "
                   "what every profile reads; a folder outside the repository is accepted too, found by data: auto "
                   "through INITMEM_DATA)")
    p.add_argument("--sha256", help="expected sha256 of a JPEG archive other than the study's (default: the study's)")


def _cmd_data(args: argparse.Namespace) -> int:
    from initmem.data.fetch import fetch_data
    print(fetch_data(source=args.source, dest=args.dest, download=args.download, sha256=args.sha256).line())
    return 0


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train one run and write its folder", description="Train one run and write "
                       "<out>/<section>/<run_id>/{history.csv,run.json}. Every TrainConfig field has a flag; unset "
                       "flags keep the TrainConfig default.")
    for f in dataclasses.fields(TrainConfig):
        shown = "per optimizer" if f.name in ("lr", "momentum", "weight_decay") else (
            " ".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default)
        kw = dict(dest=f.name, default=argparse.SUPPRESS, help=f"{field_help(f.name)} (default: {shown})".replace(
            "%", "%%"))
        if f.type != "bool":  # strings here; _cmd_train converts them so that a bad value is one ConfigError line
            kw.update(nargs="+" if f.type.startswith("tuple") else None, metavar=f.name.upper())
        p.add_argument("--" + f.name.replace("_", "-"), action=BooleanOnce if f.type == "bool" else None, **kw)
    p.add_argument("--out", default="results", help="results folder (default: results)")
    p.add_argument("--section", default="adhoc", help="section folder under --out (default: adhoc)")
    p.add_argument("--progress", action=BooleanOnce, default=True, help="per-epoch progress (default: on)")


def _train_value(name: str, kind: str, raw):
    """A flag's string(s) → the TrainConfig field's type; ConfigError in TrainConfig's own format."""
    if isinstance(raw, bool) or kind == "str":
        return raw
    if isinstance(raw, list):
        return tuple(_train_value(name, "float", r) for r in raw)
    if kind.endswith("| None") and raw.strip().lower() in ("none", "null"):
        return None
    try:
        return int(raw) if kind.startswith("int") else float(raw)
    except ValueError:
        raise invalid(f"TrainConfig.{name}", raw, ("an integer" if kind.startswith("int") else "a real number")
                      + (" or None" if kind.endswith("| None") else "")) from None


def _cmd_train(args: argparse.Namespace) -> int:
    kinds = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    config = TrainConfig(**{k: _train_value(k, kinds[k], v) for k, v in vars(args).items() if k in kinds})
    from initmem.engine.trainer import train  # after the config is checked: a bad flag is answered before torch loads
    result = train(config, out_dir=args.out, section=args.section, progress=args.progress)
    s = result.summary
    print(result.path)
    print(f"{result.status}: " + " ".join(f"{k}={s[k]:.4g}" if isinstance(s[k], float) else f"{k}={s[k]}" for k in (
        "epochs_run", "best_epoch", "test_acc_at_best", "tau_interp", "final_train_acc", "init_weight_norm",
        "final_weight_norm", "T_SGD", "T_adapt")))
    return 0


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute one notebook with papermill", description="Execute a notebook (a "
                       "jupytext .py or an .ipynb) with papermill (kernel python3); parameters are type-checked "
                       "against its parameters cell first.")
    p.add_argument("notebook", help="a jupytext .py notebook, e.g. notebooks/01_optimizers.py, or an .ipynb (the one "
                   "jupytext pairs with it)")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="set a parameter; VALUE is read as YAML (0.01, [0.1, 1.0], null, true), as papermill's -p")
    p.add_argument("-f", "--parameters-file", help="YAML mapping of parameters (-p values override it)")
    p.add_argument("--output", help="executed notebook (default: <cwd>/results/notebooks/<name>.ipynb)")
    p.add_argument("--cwd", help="working folder of the kernel (default: the current folder)")
    p.add_argument("--quiet", action="store_true", help="do not stream the cells' output")


def _cmd_run(args: argparse.Namespace) -> int:
    params: dict = {}
    if args.parameters_file:
        try:
            params = load_yaml(read_text(args.parameters_file, "parameters file", ConfigError)) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"parameters file {args.parameters_file!r}: {yaml_error_line(exc)}") from None
        if not isinstance(params, dict) or "profiles" in params:
            raise ConfigError(f"{args.parameters_file!r} must be a flat mapping of parameters "
                              "(a section params file with profiles is run with `initmem sweep`)")
    for i, (name, value) in enumerate(args.parameter):
        if name in (earlier := dict(args.parameter[:i])):
            raise ConfigError(f"-p {name} is given twice ({earlier[name]!r}, then {value!r}): each parameter once is "
                              "accepted")
        try:
            params[name] = load_yaml(value)  # 1e-3 is a float here, as in papermill's -p
        except yaml.YAMLError as exc:
            raise ConfigError(f"-p {name} {value!r} is not a YAML value: {yaml_error_line(exc)}") from None
    declared = notebook_parameters(args.notebook)
    effective = {**{k: p.default for k, p in declared.items()}, **check_parameters(params, declared,
                                                                                      f"{args.notebook}: ")}
    configs = None
    if all(k in declared for k in REQUIRED):  # a section notebook: every run's TrainConfig checked before the kernel
        check_section_name(effective["section"])
        configs = point_configs(effective)
    out = run_notebook(args.notebook, params, output=args.output, cwd=args.cwd, log_output=not args.quiet)
    if configs is not None:
        from initmem.analysis.point_report import sweep_row
        from initmem.store.results import load_runs, run_id
        runs = load_runs(Path(args.cwd or ".") / effective["results_dir"] / effective["section"])
        row = sweep_row(runs, out.stem, [run_id(c) for c in configs])
        print(f"point {row.pop('point')}: " + " ".join(f"{k}={v}" for k, v in row.items()))
    print(f"executed notebook: {out}")
    return 0


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run every point of a section's grid", description="Expand params files' grids "
                       "and execute each incomplete point's notebook. Every file is loaded and checked (every point's "
                       "runs) before the first point runs.")
    p.add_argument("params", nargs="+", help="params files or glob patterns, e.g. params/01_optimizers.yaml or "
                   "'params/*.yaml' (no default; a pattern that matches no file is an error)")
    p.add_argument("--profile", required=True, help="profile of the params files: smoke, cpu, paper, ... "
                   "(required, no default)")
    p.add_argument("--results", help="results folder (default: <repo>/results/<profile>, the repo being the "
                   "parent of params/)")
    p.add_argument("--executor", choices=("local", "slurm"), default="local",
                   help="local: points run on this machine; slurm: one array task per point (default: local)")
    p.add_argument("--jobs", type=int, default=1, help="local executor: points run in parallel, one GPU each "
                   "(default: 1)")
    p.add_argument("--dry-run", action="store_true", help="list the points and what would run, run nothing "
                   "(default: off)")
    p.add_argument("--quiet", action="store_true", help="do not stream the notebooks' output (default: off, streamed)")
    g = p.add_argument_group("slurm executor")
    g.add_argument("--partition", help="Slurm partition (default: the cluster's default partition)")
    g.add_argument("--gpus", type=int, dest="gpus_per_node", help="GPUs per job (default: the cluster's default)")
    g.add_argument("--time", type=int, help="minutes per job (default: 1440)")
    g.add_argument("--mem", type=float, dest="mem_gb", help="GB of memory per job (default: the cluster's default)")
    g.add_argument("--cpus-per-task", type=int, help="CPUs per job (default: the cluster's default)")
    g.add_argument("--array-parallelism", type=int, help="at most this many jobs at once (default: submitit's, 256)")


def _cmd_sweep(args: argparse.Namespace) -> int:
    from initmem.study import sweep
    sections = [sweep.load_section(path) for path in sweep.params_files(args.params)]  # all checked before any runs
    for section in sections:
        section.points(args.profile, args.results)  # an unknown profile in any file fails now
        sweep.refuse_older(section.results_for(args.profile, args.results), section.name)  # before any point trains
    from initmem.study.preflight import preflight
    if problems := preflight(sections, args.profile, args.results, args.executor):  # once, before any point starts
        for line in problems:
            print(f"initmem sweep: error: {line}", file=sys.stderr)
        if not args.dry_run:
            return 2
    counted: set = set()
    overall = None if args.dry_run else sweep.Progress(sum(sweep.points_to_run(s, args.profile, args.results, counted)
                                                           for s in sections))
    slurm = {k: getattr(args, k) for k in sweep.SLURM_OPTIONS if getattr(args, k, None) is not None}
    seen: set = set()
    return max(sweep.run_sweep(s, profile=args.profile, results=args.results, executor=args.executor, jobs=args.jobs,
                               dry_run=args.dry_run, slurm=slurm, progress=not args.quiet, overall=overall,
                               seen=seen).exit_code for s in sections) or (2 if problems else 0)


def _add_figures(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("figures", help="regenerate every table and figure from a results folder (default: every "
                       "committed one: results/cpu -> figures, results/<profile> -> figures/<profile> for cpu_steps "
                       "and cpu_w025)")
    p.add_argument("--results", default=None, help="results tree to read, relative to the current folder (default: "
                   "results/cpu of this repository when --out or --notebooks is given, else every committed tree)")
    p.add_argument("--out", default=None, help="folder for the figures, tables/ and README.md, relative to the "
                   "current folder (default: a committed tree's own figure set, else <results>/figures; executed "
                   "notebooks go to <out>/.executed/)")
    p.add_argument("--notebooks", nargs="+", default=None, metavar="NAME",
                   help="only these figure notebooks (stems like 01_optimizers or clock_experiment, or .py "
                   "paths; default: a committed set's own, else every section's)")
    p.add_argument("--overwrite", action="store_true", help="write into a committed figure set from another results "
                   "tree, or into a folder holding other files (default: refused)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="do not stream notebook output")
    p.add_argument("--check-layout", action="store_true", help="fail, naming it, on a figure with text outside its "
                   "canvas, under a legend, on another text or an annotation over its data, a legend over a data line, "
                   "a title of more than one line or wider than the figure, or a legend entry for nothing drawn "
                   "(default: off)")


def _cmd_figures(args: argparse.Namespace) -> int:
    from initmem.figures.artefacts import ROOT, make_figures, make_study_figures
    if args.results is args.out is args.notebooks is None:
        written = make_study_figures(progress=args.progress, check_layout=args.check_layout)
        print(f"initmem figures: {len(written)} files written; indexes: "
              + ", ".join(str(f) for f in written if f.name == "README.md"))
        return 0
    results = ROOT / "results" / "cpu" if args.results is None else args.results  # '' is refused, not the default
    written = make_figures(results, args.out, notebooks=args.notebooks, progress=args.progress,
                           overwrite=args.overwrite, check_layout=args.check_layout)
    print(f"initmem figures: {len(written)} files written; index: {written[-1]}")
    return 0


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="export the executed notebooks of a results tree to HTML")
    p.add_argument("--results", default="results/smoke", help="results tree to read (default: %(default)s, where "
                   "`make smoke` writes its executed notebooks)")
    p.add_argument("--out", default="reports", help="folder for the HTML pages and index.html (default: %(default)s)")


def _cmd_report(args: argparse.Namespace) -> int:
    from initmem.figures.report import export_reports
    written = export_reports(results=args.results, out=args.out)
    print(f"initmem report: {len(written) - 1} notebooks exported; open {written[-1]}")
    return 0


def _add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="what a profile costs before anything trains: runs, steps, clocks, time",
                       description="Per point and in total: runs, optimiser steps, the forgetting clocks at the end of "
                       "training, evaluation work and the expected wall time from a throughput table (docs/planner.md)"
                       ". --calibrate times the configurations on this device and stores the table.")
    p.add_argument("params", nargs="*", help="params files (or glob patterns), e.g. params/*.yaml")
    p.add_argument("--profile", help="profile of the params files: smoke, cpu, paper, ...")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N: the device whose table is read "
                   "from the cache (and, with --calibrate, timed) (default: %(default)s)")
    p.add_argument("--throughput", metavar="FILE", help="throughput table to read (with --calibrate: to write) "
                   "instead of <cache>/throughput-<device>.json")
    p.add_argument("--results", help="results tree whose complete runs are counted, as `initmem sweep --results` "
                   "(default: none, the whole cost): adds each point's runs done and the time of those left")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.add_argument("--capture", action="store_true", help="price each step as one captured CUDA graph (the whole "
                   "step compiled): its GPU work + one replay, modelled from the H200's compiled steps (docs/planner."
                   "md); needs a measured GPU table")
    p.add_argument("--calibrate", action="store_true", help="time the (arch, width, batch size, precision, "
                   "optimiser) the params need (default: the paper profiles' set) on --device and store the table")
    p.add_argument("--steps", type=int, default=None, help="--calibrate: timed optimiser steps each (default: 5)")
    p.add_argument("--members", type=int, action="append", metavar="K", help="--calibrate: time populations of K "
                   "networks trained as one (a point's sigma_w x seed runs); repeat for several (default: 1)")


def _cmd_plan(args: argparse.Namespace) -> int:
    from initmem.study import calibrate, plan, plan_report, stepmodel, throughput
    paths = params_files(args.params)  # a pattern that matches no file is an error, as in `initmem sweep`
    if (paths or not args.calibrate) and not args.profile:
        raise ConfigError("plan needs params files and --profile (or --calibrate alone for the default set)")
    if not paths and not args.calibrate:
        raise ConfigError("plan needs at least one params file")
    if args.calibrate and args.capture:
        raise ConfigError("--capture prices a plan and --calibrate times eager steps: give one of them")
    if not args.calibrate and (args.steps is not None or args.members is not None):
        given = " and ".join(f for f, v in (("--steps", args.steps), ("--members", args.members)) if v is not None)
        raise ConfigError(f"{given} apply only to --calibrate (they set what it times): `initmem plan --calibrate "
                          f"{given.split()[0]} ...` is accepted, or drop them")
    plans = [plan.plan_section(p, args.profile) for p in paths]  # a bad params file fails before the device is asked
    if args.calibrate:
        from initmem.study.throughput import check_table_path
        steps = check_int("--steps", 5 if args.steps is None else args.steps, 1, 10**6)
        members = [check_int("--members", k, 1, 2**16) for k in args.members or [1]]
        name, _ = plan.device_name(args.device)
        where = check_table_path(args.throughput or plan.default_table_path(name))  # before minutes of timing
        keys = calibrate.calibration_keys(plans) if plans else list(plan.DEFAULT_SET)
        print(f"calibrating {len(keys)} configuration(s) on {name} ({steps} steps each)", flush=True)
        table = calibrate.calibrate(keys, args.device, steps=steps, members=tuple(members))
        print(f"initmem plan: {len(table.entries)} entries written to {throughput.save_throughput(table, where)}")
        return 0
    if args.results is not None:  # a tree not there yet is fine: nothing is done in it
        check_results_arg("--results", args.results)
    table, note = calibrate.choose_table(args.device, args.throughput)
    if table is not None and table.kind == "cpu" and any(p.key["precision"] == "tf32" for s in plans for p in s.points):
        table, note = None, (f"throughput: none: profile {args.profile!r} trains at tf32, on a GPU, so no CPU time "
                             "is given; `--device cuda` prices it on the reference GPU table, `--throughput FILE` "
                             "on another")  # not thousands of hours of a CPU's extrapolation
        if args.json:
            print(f"initmem plan: {note}", file=sys.stderr)
    if args.capture and (table is None or stepmodel.fit(table) is None):
        raise ConfigError(f"--capture needs a GPU table the host-floor model fits (here: "
                          f"{'none' if table is None else table.device}): `--device cuda` reads the reference H200 one")
    plans = plan.share_runs([plan.plan_section(p, args.profile, table, args.results, args.capture) for p in paths])
    print(json.dumps(plan_report.plan_json(plans, table, args.capture), indent=1) if args.json
          else plan_report.format_plan(plans, table, note, args.capture))
    return 0


def _add_migrate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("migrate", help="upgrade a results tree's run records to the current schema, then verify it",
                       description="Upgrade every schema-1 run.json under PATH to schema 2 in place (amp -> precision, "
                       "the newer config fields at their defaults, the sha256, rows and columns of history.csv), "
                       "keeping every number; history.csv is not touched and a second run changes nothing. Then "
                       "verify every run under PATH.")
    p.add_argument("path", metavar="PATH", help="results tree, section or run folder, e.g. results/cpu")


def _cmd_migrate(args: argparse.Namespace) -> int:
    from initmem.store.migrate import migrate
    from initmem.store.record import SCHEMA
    from initmem.store.results import load_runs
    upgraded = migrate(args.path)
    for file in upgraded:
        print(f"upgraded {file}")
    runs = load_runs(args.path)  # every run verifies, or one line naming the damaged one
    print(f"initmem migrate: {len(upgraded)} run record(s) upgraded to schema {SCHEMA}; all {len(runs)} runs under "
          f"{args.path} verify")
    return 0


def build_parser() -> Parser:
    """The `initmem` argument parser, one subparser per subcommand."""
    parser = Parser(prog="initmem", description="Do deep networks forget initialization?")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_data, _add_train, _add_run, _add_sweep, _add_figures, _add_report, _add_plan, _add_migrate):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The `initmem` command: its exit status (2 with one line on stderr for an InitmemError or out of memory)."""
    args = build_parser().parse_strict(argv)
    try:
        return int(globals()[f"_cmd_{args.command}"](args) or 0)  # the naming rule above
    except InitmemError as exc:
        print(f"initmem {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as exc:  # torch's OutOfMemoryError (CUDA), the CPU allocator's RuntimeError
        if not (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or any(s in str(exc).lower()
                for s in ("not enough memory", "can't allocate memory", "out of memory", "cannot allocate memory"))):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"initmem {args.command}: error: out of memory ({type(exc).__name__}: {first}): a smaller --width, "
              "--batch-size or --eval-batch-size is accepted", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"initmem {args.command}: interrupted", file=sys.stderr)
        return 130

