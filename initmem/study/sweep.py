"""Sweeps: each grid point of a params file (`initmem.study.params`) is one papermill run of its section notebook in the
repository root, complete when all its runs are (a finished sweep run again executes nothing). Executors: `local`
(in-process, or `jobs` processes with one GPU each, dying with their parent), `slurm` (an array task per point)."""

import collections
import concurrent.futures as cf
import contextlib
import datetime
import difflib
import json
import multiprocessing as mp
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from submitit.helpers import Checkpointable

from initmem.config import point_configs
from initmem.errors import InitmemError, NoResults, NotebookError, PointDeferred, SweepError
from initmem.store.folders import RunFolders
from initmem.store.results import load_runs, run_id
from initmem.study.notebook import execute_notebook
from initmem.study.params import Point, Section, load_section, params_files  # noqa: F401 - the CLI's, through here
from initmem.study.preflight import point_progress, section_problems

SLURM_OPTIONS = ("partition", "gpus_per_node", "time", "mem_gb", "cpus_per_task", "array_parallelism", "extra")
_SUBMITIT = {"partition": "slurm_partition", "array_parallelism": "slurm_array_parallelism",
             "extra": "slurm_additional_parameters"}  # submitit's names where they are not ours


@dataclass
class PointReport:
    point_id: str
    status: str  # skipped | would-run | ran | failed (deferred: a local sweep's first pass only, `_run_local`)
    message: str = ""
    notebook: str = ""  # the executed notebook
    seconds: float = 0.0
    runs: str = ""  # "complete/total" before the sweep
    served: int = 0  # its runs the tree holds elsewhere before the sweep: copied, not trained (`store.serve`)


def execute_point(point: Point, notebook: str, cwd: str, output: str, parameters: dict[str, Any],
                  log_output: bool = True, defer: bool = False) -> PointReport:
    """One point's notebook executed (a Slurm task's work); a failure is a `failed` report, so the others go on.
    `defer`: a point some of whose runs another process is training is a `deferred` report once its free runs are
    trained, not a wait (`point.train_point`)."""
    t0 = time.perf_counter()
    try:
        execute_notebook(notebook, output, parameters, cwd=cwd, log_output=log_output,
                         env={PointDeferred.env: "1" if defer else "0"})
        status, message = "ran", ""
    except NotebookError as exc:
        status = "deferred" if exc.ename == PointDeferred.__name__ else "failed"
        message = exc.evalue if status == "deferred" else str(exc)
    except Exception as exc:  # noqa: BLE001 - reported per point, an unexpected one with its type
        status, message = "failed", str(exc) if isinstance(exc, InitmemError) else f"{type(exc).__name__}: {exc}"
    return PointReport(point.point_id, status, message, output, time.perf_counter() - t0)


class PointJob(Checkpointable):
    """A Slurm array task: `execute_point(*task)`, resubmitted as is when preempted or out of time (submitit): complete
    runs are skipped, a cut one resumes from its newest checkpoint, and its run lock died with the job."""

    def __call__(self, *task: Any) -> PointReport:
        return execute_point(*task)


def _visible_gpus() -> list[str]:
    if (env := os.environ.get("CUDA_VISIBLE_DEVICES")) is not None:
        return [g for g in env.split(",") if g.strip() not in ("", "-1")]
    try:
        import torch
        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no torch or no driver: no GPUs
        return []


def _die_with_parent(parent: int) -> None:
    """This pool worker dies with its sweep, even a SIGKILLed one (whose ProcessPool workers would live on): Linux's
    PR_SET_PDEATHSIG, and a watchdog polling the parent elsewhere or if it died first. Its kernels follow it."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no libc prctl: the watchdog alone
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="initmem-parent-watchdog", daemon=True).start()


def _init_worker(gpus: mp.Queue, parent: int) -> None:
    _die_with_parent(parent)
    if (gpu := gpus.get()) is not None:  # one GPU per worker process: the kernels it starts inherit the variable
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu


def _run_local(tasks: list[tuple], jobs: int, on_done) -> list[PointReport]:
    """Every task's report, `jobs` at a time. A first pass defers a point some of whose runs another process is
    training (a second sweep over the same results): it goes to the back of the queue, then waits."""
    done, queue = {}, collections.deque((t, True) for t in tasks)

    def finish(task: tuple, report: PointReport) -> tuple | None:
        """`report` handed to `on_done`; the task to queue again when it was deferred."""
        done[task[0].point_id] = on_done(report)
        return task if report.status == "deferred" else None

    if jobs <= 1 or len(tasks) <= 1:
        while queue:
            task, defer = queue.popleft()
            if finish(task, execute_point(*task, defer=defer)):
                queue.append((task, False))
        return [done[t[0].point_id] for t in tasks]
    ctx = mp.get_context("spawn")  # the parent may hold torch/CUDA state that a fork must not copy
    gpus, slots, n = _visible_gpus(), ctx.Queue(), min(jobs, len(tasks))
    for i in range(n):
        slots.put(gpus[i % len(gpus)] if gpus else None)
    with cf.ProcessPoolExecutor(n, mp_context=ctx, initializer=_init_worker, initargs=(slots, os.getpid())) as pool:
        running = {pool.submit(execute_point, *t, defer=d): t for t, d in queue}  # the pool queues what waits
        while running:
            for fut in cf.wait(running, return_when=cf.FIRST_COMPLETED)[0]:
                task = running.pop(fut)
                try:
                    report = fut.result()
                except Exception as exc:  # noqa: BLE001 - a worker that died (e.g. killed for memory)
                    report = PointReport(task[0].point_id, "failed", f"worker died: {exc!r}")
                if finish(task, report):
                    running[pool.submit(execute_point, *task, defer=False)] = task
    return [done[t[0].point_id] for t in tasks]


def slurm_parameters(section: str, options: dict[str, Any]) -> dict[str, Any]:
    """The submitit parameters of a sweep's Slurm array (what `--dry-run` prints); unset: the cluster's default."""
    return {"name": f"initmem-{section}", "timeout_min": int(options.get("time") or 24 * 60),
            **{_SUBMITIT.get(k, k): options[k] for k in SLURM_OPTIONS if k != "time" and options.get(k) is not None}}


def _run_slurm(tasks: list[tuple], folder: Path, section: str, options: dict[str, Any], on_done) -> list[PointReport]:
    import submitit
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(**slurm_parameters(section, options))
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


@dataclass
class SweepReport:
    section: str
    profile: str
    results: Path
    executor: str
    points: list[PointReport] = field(default_factory=list)
    summary: pd.DataFrame | None = None  # one row per point

    @property
    def exit_code(self) -> int:
        return int(any(p.status == "failed" for p in self.points))


def summarize(section: Section, points: list[Point]) -> pd.DataFrame:
    """The end-of-run table: one row per point (`point_report.sweep_row`)."""
    from initmem.analysis.point_report import sweep_row  # matplotlib: only once the sweep has run
    folder = section.root / points[0].parameters["results_dir"] / section.name if points else None
    runs = None  # no section folder, or one holding no run yet (every point failed): the table counts 0 runs
    with warnings.catch_warnings(), contextlib.suppress(NoResults):  # damaged runs: said below in one line each
        warnings.simplefilter("ignore")
        if folder is not None and folder.is_dir():
            runs = load_runs(folder, damaged="skip")
    for why in (runs.attrs.get("damaged", {}) if runs is not None else {}).values():
        print(f"{section.name}: skipping a damaged run in the summary: {why}", flush=True)
    return pd.DataFrame([sweep_row(runs, p.point_id, [run_id(c) for c in point_configs(section.effective(p))])
                         for p in points])


class Progress:
    """Points finished of all a command's points (every params file), with an ETA from the wall time per point."""

    def __init__(self, total: int):
        self.total, self.done, self.t0 = total, 0, time.monotonic()

    def step(self) -> str:
        self.done += 1
        s = round((time.monotonic() - self.t0) / self.done * max(self.total - self.done, 0))
        return f"[{self.done}/{self.total} points] ETA {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def refuse_older(out: Path, section: str) -> None:
    """SweepError naming `initmem migrate` when `<out>/<section>` holds run records of an older schema."""
    if old := RunFolders(out, section).older_records():
        raise SweepError(f"{len(old)} run record(s) of section {section} are of an older schema (first: {old[0]}): run "
                         f"`initmem migrate {out}` to upgrade them (every number kept); nothing was trained or moved")


def points_to_run(section: Section, profile: str, results: str | Path | None = None, seen: set | None = None) -> int:
    """How many of a profile's points a sweep would execute, less those in `seen` (which gets this file's added)."""
    points = _once(section, section.points(profile, results), profile, results, seen)
    return sum(done < total for done, _, total in (point_progress(section, p) for p in points))


def _once(section: Section, points: list[Point], profile: str, results: str | Path | None,
          seen: set | None) -> list[Point]:
    """`points` less those already in `seen` (keys: results folder, section, point id), which gets these added."""
    if seen is None:
        return points
    out = str(section.results_for(profile, results))
    fresh = [p for p in points if (out, section.name, p.point_id) not in seen]
    seen.update((out, section.name, p.point_id) for p in points)
    return fresh


def _check_options(executor: str, jobs: int, slurm: dict[str, Any] | None, dry_run: bool) -> dict[str, Any]:
    """The executor's options, checked before any params file is read; the Slurm options as a dict."""
    if executor not in ("local", "slurm"):
        raise SweepError(f"executor {executor!r} is unknown; accepted: local, slurm")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SweepError(f"jobs={jobs!r} is invalid: a positive integer is accepted")
    slurm = dict(slurm or {})
    if bad := [k for k in slurm if k not in SLURM_OPTIONS]:
        close = difflib.get_close_matches(bad[0], SLURM_OPTIONS, n=1)
        raise SweepError(f"unknown Slurm option {bad[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                         + f"; accepted: {', '.join(SLURM_OPTIONS)}")
    if executor == "slurm" and not dry_run and shutil.which("sbatch") is None:
        raise SweepError("--executor slurm needs Slurm's sbatch on PATH; it was not found")
    return slurm


def _plan(section: Section, points: list[Point], out: Path, dry_run: bool,
          progress: bool) -> tuple[list[tuple], dict[str, PointReport]]:
    """Each point's status (its TrainConfigs built: a bad value fails now) and the pending ones' notebook runs."""
    tasks, plan = [], {}
    extra = {"progress": progress} if "progress" in section.declared else {}
    for p in points:
        done, served, total = point_progress(section, p)
        status = "skipped" if done == total else "would-run" if dry_run else "pending"
        nb_out = out / section.name / "notebooks" / f"{p.point_id}.ipynb"
        plan[p.point_id] = PointReport(p.point_id, status, notebook=str(nb_out), runs=f"{done}/{total}", served=served)
        if status == "pending":
            tasks.append((p, str(section.notebook), str(section.root), str(nb_out), {**p.parameters, **extra},
                          progress))
    if tasks:
        RunFolders(out, section.name).writable()  # a bad results folder fails now, not once per point
    return tasks, plan


def _print_dry_run(section: Section, points: list[Point], plan: dict[str, PointReport]) -> None:
    """A dry run's table: each point's runs, epochs and steps, what is complete, and the totals."""
    from initmem.study.plan import plan_point, plural
    n = collections.Counter()
    for p in points:
        r, pp = plan[p.point_id], plan_point(p.point_id, p.grid, section.effective(p))
        what = "skip (complete)" if r.status == "skipped" else f"run ({r.runs} runs complete" + (
            f", {r.served} served)" if r.served else ")")
        todo = pp.runs - int(r.runs.split("/")[0]) - r.served
        n.update(runs=pp.runs, epochs=pp.runs * pp.run["epochs"], steps=pp.steps, todo_runs=todo,
                 todo_steps=todo * pp.run["steps"], served=r.served)
        print(f"  {p.point_id:<48} {what:<28} {plural(pp.runs, 'run')} x {plural(pp.run['epochs'], 'epoch')} x "
              f"{plural(pp.run['steps_per_epoch'], 'step')} = {plural(pp.steps, 'step')} "
              f"{json.dumps(p.grid, default=str)}")
    served = f"; served: {plural(n['served'], 'run')} (copied from elsewhere in the tree)" if n["served"] else ""
    print(f"  total: {plural(n['runs'], 'run')}, {plural(n['epochs'], 'epoch')}, {plural(n['steps'], 'step')}; to run: "
          f"{plural(n['todo_runs'], 'run')}, {plural(n['todo_steps'], 'step')}{served} (`initmem plan` adds clocks and "
          "time)")


def run_sweep(params_path: str | Path | Section, *, profile: str, results: str | Path | None = None,
              executor: str = "local", jobs: int = 1, dry_run: bool = False, slurm: dict[str, Any] | None = None,
              progress: bool = True, overall: Progress | None = None, seen: set | None = None) -> SweepReport:
    """Run every incomplete point of a section's profile (`params_path`: a params file or a `Section`) into `results`
    (default `<repo>/results/<profile>`, notebooks in `<section>/notebooks/`); per-point statuses and a summary table.
    `executor`: `local` (`jobs` points at a time) or `slurm` (`slurm`: `SLURM_OPTIONS`, `time` in minutes); `progress`
    streams output; `overall` counts one command's points and `seen` (shared) runs a point two files share once."""
    slurm = _check_options(executor, jobs, slurm, dry_run)
    section = params_path if isinstance(params_path, Section) else load_section(params_path)
    points = _once(section, every := section.points(profile, results), profile, results, seen)
    if len(points) < len(every):
        print(f"{section.path}: {len(every) - len(points)} point(s) already listed by an earlier params file of this "
              "command, counted once", flush=True)
    out = section.results_for(profile, results)
    report = SweepReport(section.name, profile, out, executor)
    refuse_older(out, section.name)  # readable records: never moved aside nor trained again
    if not dry_run and (problems := section_problems(section, profile, results, executor)):
        raise SweepError("; ".join(problems) + " (nothing was run)")
    for line in RunFolders(out, section.name).tidy_copies(dry_run=dry_run):  # copies and renamed run folders
        print(line, flush=True)
    tasks, plan = _plan(section, points, out, dry_run, progress)
    to_run = sum(r.status in ("pending", "would-run") for r in plan.values())
    print(f"== {section.name} [{profile}] {len(points)} point(s), {to_run} to run, "
          f"{sum(r.status == 'skipped' for r in plan.values())} complete; results: {out}", flush=True)
    if dry_run:
        _print_dry_run(section, points, plan)
        if executor == "slurm":
            req = slurm_parameters(section.name, slurm)
            left = ", ".join(k for k in ("slurm_partition", "gpus_per_node", "mem_gb", "cpus_per_task") if k not in req)
            print(f"  slurm: an array of {to_run} task(s) (one per point to run), each requesting " + ", ".join(
                f"{k}={v}" for k, v in req.items()) + f"; {left or 'nothing'} left to the cluster's defaults")
    else:
        counter = overall if overall is not None else Progress(len(tasks))

        def on_done(r: PointReport) -> PointReport:
            if r.status == "deferred":  # not finished: counted when it comes back
                print(f"{section.name} {r.point_id}: deferred after {r.seconds:.1f} s: {r.message}", flush=True)
                return r
            print(f"{counter.step()} {section.name} {r.point_id}: {r.status} in {r.seconds:.1f} s"
                  + (f"\n    {r.message}" if r.message else ""), flush=True)
            return r

        if tasks and executor == "local":
            finished = _run_local(tasks, jobs, on_done)
        elif tasks:  # every sweep its own submitit folder: job ids restart after a Slurm reset
            folder = out / ".submitit" / f"{section.name}-{datetime.datetime.now():%Y%m%d-%H%M%S-%f}"
            finished = _run_slurm(tasks, folder, section.name, slurm, on_done)
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
    counts = {s: sum(p.status == s for p in report.points) for s in ("skipped", "would-run", "ran", "failed")}
    print(f"== {section.name} [{profile}]: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v), flush=True)
    return report
