"""Sweeps: a section's params file → grid points → one papermill execution of the section notebook per point.

A params file `params/NN_section.yaml` is `{section, notebook, description, profiles: {name: {fixed, grid}}}`; a
point's parameters are `fixed` ∪ one element of the cartesian product of `grid`, plus `results_dir` and
`section`. A point is one configuration of everything except σ_w and seed (its notebook trains every σ_w × seed
through `experiment.run_sigma_sweep`), so it is complete when all of its runs are: a re-run of a finished sweep
executes nothing. Every value is type-checked against the notebook's parameters cell when the file is loaded,
and every point's TrainConfigs are built before the first execution, so a typo fails in a second, not after
hours. Executors: `local` (in-process, or a pool of `jobs` processes with one GPU each) and `slurm` (submitit,
one array task per point). Notebooks run with the repository root (the parent of `params/`) as working folder.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime
import difflib
import hashlib
import itertools
import json
import multiprocessing as mp
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from submitit.helpers import Checkpointable

from initmem.config import point_configs
from initmem.errors import InitmemError, SweepError
from initmem.notebook import Parameter, check_parameters, execute_notebook, notebook_parameters

PROFILE_KEYS = ("fixed", "grid")
SWEEP_SET = ("results_dir", "section")  # set by the sweep, never by a profile
REQUIRED = ("results_dir", "section", "sigma_ws", "seeds")  # what every section notebook must declare
SLURM_OPTIONS = ("partition", "gpus_per_node", "time", "mem_gb", "cpus_per_task", "array_parallelism", "extra")
_NOT_IN_ID = ("results_dir", "section", "progress")  # where and how verbosely, not what


# --- params files ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One configuration (all but σ_w and seed) of a section: what one notebook execution trains."""

    section: str
    point_id: str
    parameters: dict[str, Any]  # injected into the notebook: fixed ∪ grid values ∪ results_dir, section
    grid: dict[str, Any]  # the grid values that tell this point from the others


@dataclass
class Section:
    """A parsed and type-checked params file."""

    name: str
    path: Path  # the params file
    notebook: Path  # absolute
    root: Path  # repository root: the notebooks' working folder
    description: str
    profiles: dict[str, dict[str, dict[str, Any]]]
    declared: dict[str, Parameter]  # the notebook's parameters cell

    def results_for(self, profile: str, results: str | Path | None = None) -> Path:
        """Absolute results folder: `results`, or `<root>/results/<profile>` by default."""
        return Path(results).resolve() if results is not None else self.root / "results" / profile

    def points(self, profile: str, results: str | Path | None = None) -> list[Point]:
        """The cartesian product of the profile's grid, each point with `fixed` values and where to write."""
        if profile not in self.profiles:
            raise SweepError(f"{self.path}: unknown profile {profile!r}; profiles: {', '.join(self.profiles)}")
        spec = self.profiles[profile]
        out = self.results_for(profile, results)
        results_dir = str(out.relative_to(self.root)) if out.is_relative_to(self.root) else str(out)
        defaults = {k: p.default for k, p in self.declared.items()}
        grid = spec["grid"]
        points = []
        for combo in itertools.product(*grid.values()):
            values = dict(zip(grid, combo, strict=True))
            params = {**spec["fixed"], **values, "results_dir": results_dir, "section": self.name}
            key = {k: v for k, v in {**defaults, **params}.items() if k not in _NOT_IN_ID}
            digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:6]
            label = "_".join(f"{k}-{_fmt(v)}" for k, v in values.items()) or "base"
            points.append(Point(self.name, f"{re.sub(r'[^A-Za-z0-9._+-]+', '-', label)[:80]}_{digest}", params, values))
        return points

    def effective(self, point: Point) -> dict[str, Any]:
        """The notebook's defaults overridden by the point's parameters: what the notebook actually sees."""
        return {**{k: p.default for k, p in self.declared.items()}, **point.parameters}


def _fmt(v: Any) -> str:
    return ",".join(map(_fmt, v)) if isinstance(v, (list, tuple)) else f"{v:g}" if isinstance(v, float) else str(v)


def load_section(path: str | Path) -> Section:
    """Parse a params file and type-check every profile against the notebook's parameters cell."""
    path = Path(path).resolve()
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepError(f"params file {str(path)!r} does not exist") from None
    except yaml.YAMLError as exc:  # one line: where, and what the parser expected
        mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SweepError(f"{path}: not valid YAML{where}: {problem or ' '.join(str(exc).split())}; a params file "
                         "is a YAML mapping like params/01_optimizers.yaml") from None
    keys = ("section", "notebook", "description", "profiles")
    if not isinstance(doc, dict) or set(doc) - set(keys) or not {"section", "notebook", "profiles"} <= set(doc):
        raise SweepError(f"{path}: a params file is a mapping with keys {', '.join(keys)} (description optional); "
                         f"found {sorted(doc) if isinstance(doc, dict) else type(doc).__name__}")
    root = path.parent.parent  # params/ lives in the repository root
    notebook = (root / doc["notebook"]).resolve()
    if not notebook.is_file():
        raise SweepError(f"{path}: notebook {doc['notebook']!r} does not exist (relative to {root})")
    declared = notebook_parameters(notebook)
    missing = [k for k in REQUIRED if k not in declared]
    if missing:
        raise SweepError(f"{notebook}: the parameters cell lacks {missing}; a section notebook declares {REQUIRED}")
    profiles = doc["profiles"]
    if not isinstance(profiles, dict) or not profiles:
        raise SweepError(f"{path}: 'profiles' must map profile names to {{fixed: ..., grid: ...}}")
    checked = {}
    for name, spec in profiles.items():
        where = f"{path.name} profile {name!r}: "
        spec = spec or {}
        if not isinstance(spec, dict) or set(spec) - set(PROFILE_KEYS):
            raise SweepError(f"{where}a profile holds only {PROFILE_KEYS}; found "
                             f"{sorted(spec) if isinstance(spec, dict) else type(spec).__name__}")
        fixed, grid = spec.get("fixed") or {}, spec.get("grid") or {}
        if not isinstance(fixed, dict) or not isinstance(grid, dict):
            raise SweepError(f"{where}'fixed' and 'grid' must be mappings")
        for k in (*fixed, *grid):
            if k in SWEEP_SET:
                raise SweepError(f"{where}{k!r} is set by the sweep (--results / the section name), not by a profile")
        both = set(fixed) & set(grid)
        if both:
            raise SweepError(f"{where}{sorted(both)} are both fixed and in the grid; keep each in one place")
        fixed = check_parameters(fixed, declared, where)
        new_grid = {}
        for k, values in grid.items():
            if not isinstance(values, list) or not values:
                raise SweepError(f"{where}grid {k!r} must be a non-empty list of values, got {values!r}: "
                                 "the grid would expand to no point")
            new_grid[k] = [check_parameters({k: v}, declared, where)[k] for v in values]
        checked[name] = {"fixed": fixed, "grid": new_grid}
    return Section(str(doc["section"]), path, notebook, root, str(doc.get("description") or "").strip(), checked,
                   declared)


# --- completion: the same TrainConfigs the notebook builds (config.point_configs) ----------------------
def _results_path(section: Section, point: Point) -> Path:
    return section.root / point.parameters["results_dir"]  # an absolute results_dir wins the join


def point_progress(section: Section, point: Point) -> tuple[int, int]:
    """(complete runs, runs) of a point."""
    from initmem.results import is_complete

    configs = point_configs(section.effective(point))
    results = _results_path(section, point)
    return sum(is_complete(results, section.name, c) for c in configs), len(configs)


# --- executing one point (also what a Slurm array task runs) -----------------------------------------------
@dataclass
class PointReport:
    point_id: str
    status: str  # skipped | would-run | ran | failed
    message: str = ""
    notebook: str = ""  # the executed notebook
    seconds: float = 0.0
    runs: str = ""  # "complete/total" before the sweep


def execute_point(point: Point, notebook: str, cwd: str, output: str, parameters: dict[str, Any],
                  log_output: bool = True) -> PointReport:
    """Execute one point's notebook; a failure becomes a `failed` report, never an exception (one bad point must
    not stop the others, and a Slurm job's result should carry a readable message, not a pickled traceback)."""
    t0 = time.perf_counter()
    try:
        execute_notebook(notebook, output, parameters, cwd=cwd, log_output=log_output)
        status, message = "ran", ""
    except InitmemError as exc:
        status, message = "failed", str(exc)
    except Exception as exc:  # noqa: BLE001 - reported per point, with its type
        status, message = "failed", f"{type(exc).__name__}: {exc}"
    return PointReport(point.point_id, status, message, output, time.perf_counter() - t0)


class PointJob(Checkpointable):
    """A Slurm array task: `execute_point(*task)`. Checkpointable, so when Slurm preempts the job or its time runs
    out, submitit calls `checkpoint(*task)`, which resubmits this same point (submitit's default: the callable with
    the same arguments) and requeues the job. The point's runs make the resume exact: complete runs are skipped,
    a run cut short resumes from its newest checkpoint (`checkpoint_every`), and its run lock died with the job."""

    def __call__(self, *task: Any) -> PointReport:
        return execute_point(*task)


def _visible_gpus() -> list[str]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in env.split(",") if g.strip() not in ("", "-1")]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no torch or no driver: no GPUs
        return []


def _init_worker(gpus: mp.Queue) -> None:
    # One GPU per worker process: the kernels it starts inherit the variable.
    gpu = gpus.get()
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu


def _run_local(tasks: list[tuple], jobs: int, on_done) -> list[PointReport]:
    if jobs <= 1 or len(tasks) <= 1:
        return [on_done(execute_point(*t)) for t in tasks]
    ctx = mp.get_context("spawn")  # the parent may hold torch/CUDA state that a fork must not copy
    gpus, queue = _visible_gpus(), ctx.Queue()
    n = min(jobs, len(tasks))
    for i in range(n):
        queue.put(gpus[i % len(gpus)] if gpus else None)
    with cf.ProcessPoolExecutor(n, mp_context=ctx, initializer=_init_worker, initargs=(queue,)) as pool:
        futures = {pool.submit(execute_point, *t): t[0] for t in tasks}
        done = {}
        for fut in cf.as_completed(futures):
            point = futures[fut]
            try:
                done[point.point_id] = on_done(fut.result())
            except Exception as exc:  # noqa: BLE001 - a worker that died (e.g. killed for memory)
                done[point.point_id] = on_done(PointReport(point.point_id, "failed", f"worker died: {exc!r}"))
    return [done[t[0].point_id] for t in tasks]


def _run_slurm(tasks: list[tuple], folder: Path, section: str, options: dict[str, Any], on_done) -> list[PointReport]:
    import submitit

    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    params: dict[str, Any] = {"name": f"initmem-{section}", "timeout_min": int(options.get("time") or 24 * 60)}
    for ours, theirs in (("partition", "slurm_partition"), ("gpus_per_node", "gpus_per_node"),
                         ("mem_gb", "mem_gb"), ("cpus_per_task", "cpus_per_task"),
                         ("array_parallelism", "slurm_array_parallelism"),
                         ("extra", "slurm_additional_parameters")):
        if options.get(ours) is not None:
            params[theirs] = options[ours]
    ex.update_parameters(**params)
    jobs = ex.map_array(PointJob(), *zip(*tasks, strict=True))
    print(f"submitted {len(jobs)} Slurm array task(s) (job {jobs[0].job_id.split('_')[0]}); logs in {folder}",
          flush=True)
    reports = []
    for task, job in zip(tasks, jobs, strict=True):
        try:
            reports.append(on_done(job.result()))
        except Exception as exc:  # noqa: BLE001 - the job crashed, timed out or was cancelled
            last = str(exc).strip().splitlines()[-1:] or [repr(exc)]
            reports.append(on_done(PointReport(task[0].point_id, "failed",
                                               f"Slurm job {job.job_id}: {type(exc).__name__}: {last[0]}")))
    return reports


# --- the sweep ---------------------------------------------------------------------------------------------
@dataclass
class SweepReport:
    section: str
    profile: str
    results: Path
    executor: str
    points: list[PointReport] = field(default_factory=list)
    summary: Any = None  # pandas DataFrame: one row per point

    @property
    def exit_code(self) -> int:
        return int(any(p.status == "failed" for p in self.points))

    def counts(self) -> dict[str, int]:
        return {s: sum(p.status == s for p in self.points) for s in ("skipped", "would-run", "ran", "failed")}


def summarize(section: Section, points: list[Point]) -> Any:
    """One row per point: test accuracy at the best-validation epoch (%) per σ_w (mean over seeds), the spread
    across σ_w (pp, `experiment.point_summary`'s), how many runs interpolated, and the largest tau_interp."""
    import pandas as pd

    from initmem.metrics import point_summary
    from initmem.results import load_runs, run_id

    runs = load_runs(_results_path(section, points[0]) / section.name) if points else None
    rows = []
    for p in points:
        ids = {run_id(c) for c in point_configs(section.effective(p))}
        r = runs[runs["run_id"].isin(ids)]
        row: dict[str, Any] = {"point": p.point_id, "runs": f"{len(r)}/{len(ids)}"}
        if len(r):
            s = point_summary(r)
            row.update({f"acc@{k:g}": round(100 * v, 1) for k, v in s["test_acc_by_sigma_w"].items()})
            row["spread_pp"] = round(s["spread_pp"], 1) if s["spread_pp"] is not None else None
            row["interpolated"] = f"{s['n_interpolated']}/{s['n_runs']}"
            row["max_tau_interp"] = r["tau_interp"].max()
        rows.append(row)
    return pd.DataFrame(rows)


def run_sweep(params_path: str | Path, *, profile: str, results: str | Path | None = None, executor: str = "local",
              jobs: int = 1, dry_run: bool = False, slurm: dict[str, Any] | None = None,
              progress: bool = True) -> SweepReport:
    """Run every incomplete point of a section's profile; return per-point statuses and a summary table.

    `results` defaults to `<repo>/results/<profile>`; executed notebooks go to
    `<results>/<section>/notebooks/<point_id>.ipynb`. `executor`: `local` (`jobs` points at a time, one GPU per
    worker) or `slurm` (submitit job array; `slurm` options: partition, gpus_per_node, time (minutes), mem_gb,
    cpus_per_task, array_parallelism, extra). `progress` streams the notebooks' output.
    """
    if executor not in ("local", "slurm"):
        raise SweepError(f"executor {executor!r} is unknown; accepted: local, slurm")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SweepError(f"jobs={jobs!r} is invalid: a positive integer is accepted")
    slurm = dict(slurm or {})
    bad = [k for k in slurm if k not in SLURM_OPTIONS]
    if bad:
        close = difflib.get_close_matches(bad[0], SLURM_OPTIONS, n=1)
        raise SweepError(f"unknown Slurm option {bad[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                         + f"; accepted: {', '.join(SLURM_OPTIONS)}")
    if executor == "slurm" and not dry_run and shutil.which("sbatch") is None:
        raise SweepError("--executor slurm needs Slurm's sbatch on PATH; it was not found")
    section = load_section(params_path)
    points = section.points(profile, results)
    out = section.results_for(profile, results)
    report = SweepReport(section.name, profile, out, executor)
    tasks, plan = [], {}
    extra = {"progress": progress} if "progress" in section.declared else {}
    for p in points:  # builds every TrainConfig first: a bad value fails here, before anything runs
        done, total = point_progress(section, p)
        status = "skipped" if done == total else "would-run" if dry_run else "pending"
        nb_out = out / section.name / "notebooks" / f"{p.point_id}.ipynb"
        plan[p.point_id] = PointReport(p.point_id, status, notebook=str(nb_out), runs=f"{done}/{total}")
        if status == "pending":
            tasks.append((p, str(section.notebook), str(section.root), str(nb_out), {**p.parameters, **extra},
                          progress))
    if tasks:  # every config is valid; a bad --results fails now, not as one failed notebook per point
        from initmem.results import check_writable

        check_writable(out / section.name)
    to_run = sum(r.status in ("pending", "would-run") for r in plan.values())
    print(f"== {section.name} [{profile}] {len(points)} point(s), {to_run} to run, "
          f"{sum(r.status == 'skipped' for r in plan.values())} complete; results: {out}", flush=True)
    if dry_run:
        for p in points:
            r = plan[p.point_id]
            what = "skip (complete)" if r.status == "skipped" else f"run ({r.runs} runs complete)"
            print(f"  {p.point_id:<48} {what:<28} {json.dumps(p.grid, default=str)}")
    else:
        counter = itertools.count(1)

        def on_done(r: PointReport) -> PointReport:
            print(f"[{next(counter)}/{len(tasks)}] {r.point_id}: {r.status} in {r.seconds:.1f} s"
                  + (f"\n    {r.message}" if r.message else ""), file=sys.stdout, flush=True)
            return r

        if tasks and executor == "local":
            finished = _run_local(tasks, jobs, on_done)
        elif tasks:  # every sweep its own submitit folder: job ids restart after a Slurm reset
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
            finished = _run_slurm(tasks, out / ".submitit" / f"{section.name}-{stamp}", section.name, slurm, on_done)
        else:
            finished = []
        for r in finished:
            r.runs = plan[r.point_id].runs
            plan[r.point_id] = r
    report.points = [plan[p.point_id] for p in points]
    if not dry_run:
        report.summary = summarize(section, points)
        if len(report.summary):
            print(report.summary.to_string(index=False), flush=True)
    c = report.counts()
    print(f"== {section.name} [{profile}]: " + ", ".join(f"{v} {k}" for k, v in c.items() if v), flush=True)
    return report
