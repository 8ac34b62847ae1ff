"""Device check: is initmem's engine right and fast on this device? One command, at most `--budget-s` seconds.

    python3 -m benchmarks.device_check --device cuda --out /tmp/dc         # a GPU box: <= 285 s (--budget-s)
    python3 -m benchmarks.device_check --device cpu --tiny --out /tmp/dc   # CI: seconds a step

Run from the repository root (nothing to install beyond torch, numpy, pandas, pyyaml, tqdm, Pillow). Each step
(`benchmarks.device_steps`) runs in its own process under a time limit; a step that fails or times out is recorded
and the others go on. The steps, the flags, the four files written to `--out` (the JSON's schema) and the exit
codes: docs/gpu/device_check.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks import device_steps as ds
from benchmarks import parity
from initmem.store.files import atomic_write, ensure_writable

REPO = ds.ROOT
SCHEMA = 1
ARCHIVE = REPO / "data" / "cifar10-jpeg.tar.gz"  # where benchmarks/gpu_prepare.sh lays it (git-ignored, carried)
# seconds: (cap on CUDA, cap with --tiny, minimum worth starting); "paper" takes what is left
# The correctness steps first (they decide whether the GPU computes what the CPU does), the measurements after them,
# the optional ones last; docs/gpu/device_check.md gives each step's time measured on an H200 (correctness: 97 s).
LIMITS = {"env": (120, 60, 10), "parity_fp32": (60, 60, 10), "population_vs_separate": (60, 60, 10),
          "resume": (60, 90, 15), "rerun": (60, 60, 10), "parity_bf16": (45, 60, 10), "parity_muon": (45, 60, 10),
          "parity_tf32": (45, 60, 10), "epoch_eager": (100, 90, 20), "population": (90, 120, 20),
          "epoch_compile": (240, 120, 60), "paper": (math.inf, 60, 30)}
OPTIONAL = ("epoch_compile", "paper")  # take what is left: no earlier step keeps time back for them
OUTPUTS = ("device_check.json", "device_check.md", "throughput.json", "logs.tar.gz")  # all that --out holds
# start (<= 180 s) + 2 x (budget + 45 s: interpreter, report, transfer) + 60 s between them <= 900 s of device time
BUDGET_S = 285.0
REPORT_S = 5  # kept back for writing the report
GRACE_S = 3  # a step's own deadline is its limit minus this: it stops starting new work, then it is killed


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------------ one step
def _fork(name: str, ctxfile: Path, log: Path, steps: dict | None = None) -> int:
    """Fork the step `name` (own session and log; exits without running this process's exit handlers)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        code = worker(name, str(ctxfile), steps)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_step(name: str, settings: dict, limit: float, logs: Path, hang: bool, fail: bool,
             launch: str = "exec", steps: dict | None = None,
             module: str = "benchmarks.device_check") -> dict[str, Any]:
    """Run one step in its own process and session (killed with its helpers at `limit`); its record. `logs`: the
    work folder of its context, results file and log. `launch`: "exec" a fresh interpreter, or "fork" this one
    (which has imported torch, never CUDA: a step starts at once). `steps`, `module`: another runner's steps (default
    `device_steps.STEPS`) and the module whose `--worker` runs them (`benchmarks.lease`)."""
    steps = steps or ds.STEPS
    result, ctxfile = logs / f"{name}.result.json", logs / f"{name}.ctx.json"
    result.unlink(missing_ok=True)
    ctxfile.write_text(json.dumps({"settings": settings, "deadline": time.time() + limit - GRACE_S,
                                   "result": str(result), "args": {"hang": hang, "fail": fail}}), encoding="utf-8")
    t0 = time.time()
    if launch == "fork":
        pid = _fork(name, ctxfile, logs / f"{name}.log", steps)
    else:
        cmd, env = ds.worker_command(name, ctxfile, module)
        with open(logs / f"{name}.log", "w") as log:
            pid = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env).pid
    rc: int | None = None
    while rc is None and time.time() - t0 < limit:
        done, status = os.waitpid(pid, os.WNOHANG)
        rc = os.waitstatus_to_exitcode(status) if done else None
        time.sleep(0.02 if rc is None else 0)
    if rc is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    doc = json.loads(result.read_text(encoding="utf-8")) if result.is_file() else {}
    rec = {"name": name, "title": steps[name][0], "status": doc.get("status", "failed"), "pass": doc.get("pass"),
           "seconds": round(time.time() - t0, 2), "limit_s": round(limit, 1), "error": doc.get("error"),
           "reason": doc.get("reason"), "results": doc.get("results", {})}
    if rc is None:
        rec.update(status="timed_out", error=f"timed out: exceeded its limit of {limit:.0f} s (killed)")
    elif rc != 0 and rec["status"] == "ok":
        rec.update(status="failed", error=f"exit code {rc}")
    elif rc != 0 and not rec["error"]:
        tail = (logs / f"{name}.log").read_text(errors="replace").strip().splitlines()[-3:]
        rec["error"] = f"exit code {rc}: " + " | ".join(tail)
    return rec


def worker(name: str, ctxfile: str, steps: dict | None = None) -> int:
    """The step (or helper) `name` of `steps` (default `device_steps.STEPS`) in this process; writes its status into
    its results file."""
    ctx, steps = ds.Ctx(ctxfile), steps or ds.STEPS
    if threads := ctx.s.get("threads"):
        import torch

        torch.set_num_threads(threads)
    if name in ds.HELPERS:
        ds.HELPERS[name](ctx)
        return 0
    try:
        if ctx.args.get("fail"):
            raise RuntimeError(f"injected failure (--fail {name})")
        if ctx.args.get("hang"):
            time.sleep(10**6)
        verdict = steps[name][1](ctx)
        ctx.write(status="ok", **({"pass": verdict} if verdict is not None else {}))
    except ds.Skip as why:
        ctx.write(status="skipped", reason=str(why))
    except Exception as exc:  # noqa: BLE001 - recorded; the runner goes on with the next step
        traceback.print_exc()
        ctx.write(status="failed", error=f"{type(exc).__name__}: {exc}")
        return 1
    return 0


# ------------------------------------------------------------------------------------------------ all steps
def preload() -> None:
    """Import what every step needs once, here, so that forked steps start at once (never initialises CUDA)."""
    import torch  # noqa: F401

    import initmem.engine.checkpoint  # noqa: F401
    import initmem.engine.trainer  # noqa: F401
    import initmem.metrics  # noqa: F401
    import initmem.study.plan  # noqa: F401

    with contextlib.suppress(Exception):  # torch.use_deterministic_algorithms imports it: seconds, once
        import torch._inductor  # noqa: F401


def settings_for(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The steps' settings and the report's notes (`preflight` has checked that the archive exists)."""
    notes = []
    mode = "tiny" if args.tiny else "full"
    if args.tiny or args.synthetic:
        data, root = "synthetic", "data"
        if not args.tiny:
            notes.append("--synthetic: synthetic data of the full split's sizes (no CIFAR-10): speeds only")
    else:
        data, root = "auto", str(Path(args.archive or ARCHIVE).resolve())
    s = {"device": args.device, "mode": mode, "data": data, "data_root": root, "precision": args.precision,
         "paper_epochs": args.paper_epochs, "threads": args.threads or (1 if args.tiny else None),
         "plant": args.plant,  # `--limit paper=S`: the paper step trains for all of its S, as on a GPU
         "paper_cap_s": None if "paper" in dict(args.limit) else ds.SIZES[mode]["paper_cap_s"]}
    return s, notes


def _skipped(name: str, why: str, steps: dict | None = None) -> dict[str, Any]:
    return {"name": name, "title": (steps or ds.STEPS)[name][0], "status": "skipped", "pass": None, "seconds": 0.0,
            "limit_s": 0.0, "error": None, "reason": why, "results": {}}


def default_out(device: str, tiny: bool) -> str:
    """`docs/gpu/<date>-<device>`: the GPU's name from nvidia-smi (nothing here initialises CUDA), or cpu."""
    name = "cpu-tiny" if tiny else "cpu"
    if device == "cuda":
        try:
            name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=20).stdout.splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            name = "cuda"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-") or "cuda"
    return str(REPO / "docs" / "gpu" / f"{dt.date.today().isoformat()}-{slug}")


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every selected step in order under the budget; the report document, rewritten in `--out` after every step
    (so a check killed from outside still leaves what it found)."""
    t_start, created = time.time(), _now()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="device-check-"))  # contexts, results files, logs: tarred into --out
    settings, notes = settings_for(args)
    if args.launch == "fork":
        preload()
    names = [n for n in ds.STEPS if n == "env" or not args.only or n in args.only]  # what runs; all are reported
    overrides = dict(args.limit)
    steps: list[dict[str, Any]] = []
    stop: str | None = None
    for name in ds.STEPS:
        if name not in names:
            steps.append(_skipped(name, "not selected (--only)"))
            continue
        i = names.index(name)
        cap = overrides.get(name, LIMITS[name][1 if args.tiny else 0])
        later = sum(LIMITS[n][2] for n in names[i + 1:] if n not in OPTIONAL)
        left = args.budget_s - (time.time() - t_start) - REPORT_S
        limit = min(cap, left - later if name != "paper" else left)
        if stop or limit < min(LIMITS[name][2], cap):
            why = stop or f"no time left in --budget-s {args.budget_s:g} ({left:.0f} s left, {later} s kept for later)"
            steps.append(_skipped(name, why))
        else:
            print(f"[{time.time() - t_start:5.0f} s] {name} (limit {limit:.0f} s) ...", flush=True)
            steps.append(run_step(name, settings, limit, logs, name in args.hang, name in args.fail, args.launch))
        rec = steps[-1]
        print(f"[{time.time() - t_start:5.0f} s] {name}: {outcome(rec)}", flush=True)
        if name == "env":
            res = rec["results"]
            if res.get("device_ok") is False:
                stop = f"the device is not usable: {rec['error']}"
            if res.get("data_error") and settings["data"] != "synthetic":
                settings.update(data="synthetic", data_root="data")
                notes.append(f"the archive did not load ({res['data_error']}): synthetic data for the other steps")
        doc = report(args, steps, settings, notes, created, t_start, out, logs)
    shutil.rmtree(logs, ignore_errors=True)
    return doc


def report(args: argparse.Namespace, steps: list[dict], settings: dict, notes: list[str], created: str,
           t_start: float, out: Path, logs: Path) -> dict[str, Any]:
    """Write the report of the steps so far into `out` (OUTPUTS: JSON, Markdown, throughput table, the logs as one
    .tar.gz); the document."""
    env = steps[0]["results"]
    steps = steps + [_skipped(n, "not reached yet") for n in ds.STEPS if n not in {r["name"] for r in steps}]
    doc = {"schema": SCHEMA, "tool": "benchmarks/device_check.py", "created": created, "finished": _now(),
           "seconds": round(time.time() - t_start, 1),
           "args": {k: v for k, v in vars(args).items() if k not in ("worker", "ctx")}, "settings": settings,
           "notes": notes, "device_name": env.get("device_name"), "kind": env.get("kind"),
           "torch": env.get("env", {}).get("torch"),
           "stand_in": None if args.device == "cuda" else "CPU stands in for CUDA: every device-vs-CPU comparison "
                                                          "is CPU against CPU; tf32 is skipped",
           "counts": {s: sum(r["status"] == s for r in steps) for s in ("ok", "failed", "timed_out", "skipped")},
           "checks": {"passed": [r["name"] for r in steps if r["pass"] is True],
                      "failed": [r["name"] for r in steps if r["pass"] is False]},
           "steps": steps}
    doc["exit_code"] = exit_code(doc)
    doc = portable(doc)
    from initmem.study.throughput import save_throughput

    table = throughput(doc)
    doc["throughput"] = {"path": "throughput.json", "entries": len(table.entries)}
    save_throughput(table, out / "throughput.json")

    def tar_logs(f) -> None:  # the step logs (helpers' logs are named in them)
        with tarfile.open(fileobj=f, mode="w:gz") as tar:
            for log in sorted(logs.glob("*.log")):
                tar.add(log, arcname=f"logs/{log.name}")

    atomic_write(out / "logs.tar.gz", tar_logs)
    atomic_write(out / "device_check.json", json.dumps(doc, indent=1, default=str) + "\n")
    atomic_write(out / "device_check.md", markdown(doc))
    return doc


def portable(doc: Any, root: Path = REPO) -> Any:
    """`doc` with no path of the machine it ran on: paths in the repository `root` relative to it (the archive:
    `data/cifar10-jpeg.tar.gz`), an `--out` outside it by its name alone; the folder is committed as it is."""
    if isinstance(doc, dict):
        new = {k: portable(v, root) for k, v in doc.items()}
        if isinstance(out := new.get("out"), str) and Path(out).is_absolute():
            new["out"] = Path(out).name
        return new
    if isinstance(doc, list):
        return [portable(v, root) for v in doc]
    return doc.replace(f"{root}{os.sep}", "") if isinstance(doc, str) else doc


def _engine_checks(doc: dict[str, Any]) -> list[str]:
    """The checks that ran, but env's (it checks the machine, not the engine)."""
    return [c for c in doc["checks"]["passed"] + doc["checks"]["failed"] if c != "env"]


def exit_code(doc: dict[str, Any]) -> int:
    """0 when at least one check ran, none missed its tolerance and no step failed or timed out; 1 otherwise (a
    check that checked nothing is no pass; steps skipped for --only or the budget do not fail it by themselves)."""
    failed = doc["counts"]["failed"] or doc["counts"]["timed_out"] or doc["checks"]["failed"]
    return int(bool(failed or not _engine_checks(doc)))


def exit_reason(doc: dict[str, Any]) -> str:
    """Why `exit_code` is 1, in one line ("" when it is 0): each failed or timed-out step with its error, each check
    that missed with what it found, or that no check of the engine ran (and why: --only, or the budget)."""
    why = [f"{r['name']} {r['status']}: {r['error']}" for r in doc["steps"] if r["status"] in ("failed", "timed_out")]
    why += [f"{r['name']} failed its check: {headline(r)}" for r in doc["steps"] if r["pass"] is False]
    if not _engine_checks(doc):
        only = doc["args"].get("only")
        why.append("no check of the engine ran (" + (
            f"--only {' --only '.join(only)} selects none: add a check, e.g. --only parity_fp32" if only else
            "every check was skipped: see the steps above") + ")")
    return "; ".join(why)


def outcome(rec: dict[str, Any]) -> str:
    """A step's status in one line: with its error or reason when it is not ok, what it found when it missed."""
    text = rec["status"] + (f", pass={rec['pass']}" if rec["pass"] is not None else "")
    if rec["status"] != "ok":
        return f"{text}: {rec['error'] or rec['reason']}"
    return f"{text}: {headline(rec)}" if rec["pass"] is False else text


# ------------------------------------------------------------------------------------------------ outputs
def throughput(doc: dict[str, Any]):
    """The planner's table (docs/planner.md, `initmem.study.throughput.Throughput`) from the eager epoch times
    (members 1) and the population step (members K and 1; eval time K times the same-precision ResNet-9 entry's)."""
    from initmem.study.throughput import Entry, Throughput

    step = {r["name"]: r["results"] for r in doc["steps"]}
    entries: dict[tuple, Entry] = {}
    eval_of: dict[tuple, float] = {}
    for r in step.get("epoch_eager", {}).get("runs", []):
        e = Entry(r["arch"], float(r["width"]), r["batch_size"], r["precision"], 1, r["step_s"], r["eval_image_s"])
        entries[(e.arch, e.width, e.batch_size, e.precision, 1)] = e
        eval_of.setdefault((e.arch, e.width, e.precision), e.eval_image_s)
    pop = step.get("population", {})
    setup = pop.get("setup", {})
    for r in pop.get("rows", []):
        ev = eval_of.get((setup["arch"], float(setup["width"]), setup["precision"]))
        if ev is None:
            continue
        for k, s in ((setup["members"], r["population_step_s"]), (1, r["single_step_s"])):
            key = (setup["arch"], float(setup["width"]), r["batch_size"], setup["precision"], k)
            entries.setdefault(key, Entry(*key, s, k * ev))
    return Throughput(doc["device_name"] or doc["settings"]["device"], doc["torch"] or "", list(entries.values()),
                      doc["kind"] or doc["settings"]["device"], None, doc["finished"])


def _g(x: Any, fmt: str = ".3g") -> str:
    if x is None or isinstance(x, bool):
        return {None: "–", True: "yes", False: "**no**"}[x]
    return format(x, fmt) if isinstance(x, (int, float)) else str(x)


def headline(rec: dict[str, Any]) -> str:
    """One line of what a step found."""
    r, n = rec["results"], rec["name"]
    if rec["status"] == "skipped":
        return rec["reason"] or ""
    if n == "env":
        data = r.get("data", {})
        loaded = f"data error: {r['data_error']}" if "data_error" in r else (
            f"data {data.get('source')} ({_g(data.get('load_s'), '.1f')} s)")
        return f"{r.get('device_name')}, torch {r.get('env', {}).get('torch')}, {loaded}"
    if n.startswith("parity") and "verdict" in r:
        d, s, v = r["differences"], r["setup"], r["verdict"]
        return (f"{s['target']} vs {s['reference']}: epoch 0 max rel diff {_g(v['epoch0']['max'])} (tolerance "
                f"{v['epoch0']['tolerance']:g}); trained max rel loss diff {_g(v['trained']['max'])} (tolerance "
                f"{v['trained']['tolerance']:g}), BatchNorm statistics {_g(v['trained'].get('buffers_rel'))} "
                f"(tolerance {_g(v['trained'].get('tolerance_buffers'))}); test acc {_g(d['test_acc'])}")
    if n == "population_vs_separate" and "members" in r:
        each = [f"sigma_w {m['sigma_w']:g}: max rel loss diff {_g(m['loss_rel_max'])}" for m in r["members"]]
        return "; ".join(each) + (f" (tolerance {r['setup']['tolerance_loss_rel']:g}; population of "
                                  f"{r.get('population_provenance')})")
    if n == "rerun" and "deterministic" in r:
        return (f"deterministic: identical={r['deterministic']['identical']}; 2-member population: identical="
                f"{r.get('population_deterministic', {}).get('identical')}; deterministic=False: identical="
                f"{r.get('nondeterministic', {}).get('identical')}")
    if n == "resume" and "resumed_vs_straight" in r:
        k = r["killed"]
        return (f"SIGKILL at epoch 2's checkpoint (rc {k['returncode']}), left {k['left_behind']}; resumed "
                f"identical={r['resumed_vs_straight']['identical']}")
    if n == "epoch_compile" and "graphs" in r:
        used = [x.get("cuda_graphs_used") for x in r.get("runs", [])]
        return (f"{len(r.get('runs', []))} configs timed, {len(r['graphs'])} graph timings recorded; "
                f"backend {r.get('compile_backend')}; CUDA graphs used: {_g(used[0] if used else None)}")
    if n.startswith("epoch") and "runs" in r:
        return f"{len(r['runs'])} configs timed, {len(r.get('not_reached', []))} not reached"
    if n == "population" and "rows" in r:
        return "; ".join(f"b={x['batch_size']}: population {x['population_vs_separate']:.2f}x separate" + (
            f", concurrent {x['concurrent_vs_separate']:.2f}x" if "concurrent_vs_separate" in x else "")
            for x in r["rows"]) + (f"; {len(r['not_reached'])} not reached" if r.get("not_reached") else "")
    if n == "paper" and "populations" in r:
        return "; ".join(f"{p['optimizer']}: {p['epochs']} epochs, spread {_g(p['spread_pp_at_best'], '.1f')} pp"
                         for p in r["populations"])
    return rec["error"] or ""


def markdown(doc: dict[str, Any]) -> str:
    """The Markdown summary: the step table, then each measurement's table."""
    st = {r["name"]: r for r in doc["steps"]}
    lines = [f"# Device check: {doc['device_name'] or doc['settings']['device']}", "",
             f"{doc['created']} – {doc['finished']}, {doc['seconds']:.0f} s of --budget-s {doc['args']['budget_s']:g}; "
             f"torch {doc['torch']}; mode {doc['settings']['mode']}, data {doc['settings']['data']}, "
             f"speed precision {doc['settings']['precision']}.", ""]
    lines += [f"> {x}" for x in ([doc["stand_in"]] if doc["stand_in"] else []) + doc["notes"]]
    c = doc["counts"]
    lines += ["", f"Steps: {c['ok']} ok, {c['failed']} failed, {c['timed_out']} timed out, {c['skipped']} skipped; "
              f"checks passed: {', '.join(doc['checks']['passed']) or 'none'}; failed: "
              f"{', '.join(doc['checks']['failed']) or 'none'}." + (
                  " **No check of the engine ran: exit code 1.**" if not set(doc["checks"]["passed"] + doc["checks"][
                      "failed"]) - {"env"} else ""),
              "",
              "| step | status | pass | s (limit) | result |", "|---|---|---|---|---|"]
    for r in doc["steps"]:
        text = headline(r) if r["status"] in ("ok", "skipped") else f"**{r['error']}** " + headline(r)
        lines.append(f"| {r['name']} | {r['status']} | {_g(r['pass'])} | {r['seconds']:.0f} ({r['limit_s']:.0f}) | "
                     f"{text.replace('|', '/')} |")
    runs = [x for n in ("epoch_eager", "epoch_compile") for x in st.get(n, {}).get("results", {}).get("runs", [])]
    if runs:
        lines += ["", "## Epoch times (full split)", "", "| arch | b | precision | compile | train epoch s | "
                  "eval s (images) | epoch s | first epoch s | train img/s | peak memory GiB |", "|---|---|---|---|"
                  "---|---|---|---|---|---|"]
        lines += [f"| {x['arch']} | {x['batch_size']} | {x['precision']} | {x['compile']} | {x['train_epoch_s']:.2f} | "
                  f"{x['eval_s']:.2f} ({x['eval_images']}) | {x['epoch_s']:.2f} | {x['first_epoch_s']:.2f} | "
                  f"{x['train_images_per_s']:.0f} | {x['peak_memory_bytes'] / 2**30:.2f} |" for x in runs]
    graphs = st.get("epoch_compile", {}).get("results", {}).get("graphs", [])
    if graphs:
        lines += ["", "## Compiled graphs (each recorded as it finished)", "", "| arch | b | precision | what | s |",
                  "|---|---|---|---|---|"]
        lines += [f"| {g['arch']} | {g['batch_size']} | {g['precision']} | {g['what']} | {g['seconds']:.2f} |"
                  for g in graphs]
    rows = st.get("population", {}).get("results", {}).get("rows", [])
    if rows:
        k = st["population"]["results"]["setup"]["members"]
        lines += ["", f"## K = {k}: member-steps per second", "", "| b | population | separate | concurrent "
                  "(overlap) | population / separate | concurrent / separate |", "|---|---|---|---|---|---|"]
        lines += [f"| {x['batch_size']} | {x['population_member_steps_per_s']:.1f} | "
                  f"{x['separate_member_steps_per_s']:.1f} | {_g(x.get('concurrent_member_steps_per_s'), '.1f')} "
                  f"({_g(x.get('concurrent_overlap'), '.2f')}) | {x['population_vs_separate']:.2f} | "
                  f"{_g(x.get('concurrent_vs_separate'), '.2f')} |" for x in rows]
    pops = st.get("paper", {}).get("results", {}).get("populations", [])
    if pops:
        lines += ["", "## Paper-scale point", "", "| optimizer | sigma_w | epochs | best epoch | test acc at best | "
                  "final test acc | final train acc | norm ratio | angle (deg) |", "|---" * 9 + "|"]
        for p in pops:
            lines += [f"| {p['optimizer']} | {m['sigma_w']:g} | {m['epochs']} | {_g(m['best_epoch'])} | "
                      f"{_g(m['test_acc_at_best'], '.4f')} | {_g(m['final_test_acc'], '.4f')} | "
                      f"{_g(m['final_train_acc'], '.4f')} | {_g(m['norm_ratio'])} | {_g(m['angle'], '.1f')} |"
                      for m in p["members"]]
        lines += [""] + [f"- {p['optimizer']}: spread {_g(p['spread_pp_at_best'], '.1f')} pp at the best val loss, "
                         f"{_g(p['spread_pp_final'], '.1f')} pp at the last epoch; angle gap "
                         f"{_g(p['angle_gap_deg'], '.1f')} deg; {p['stopped']} after {p['seconds']:.0f} s"
                         for p in pops]
    return "\n".join(lines) + "\n"


def _seconds(text: str, name: str = "--budget-s") -> float:
    """A finite number of seconds > 0 (argparse type), else a one-line usage error naming the value."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{name}={text!r} is invalid: a finite number of seconds > 0 is accepted")
    return value


def _threads(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--threads={text!r} is invalid: an integer >= 1 is accepted")
    return int(text)


def _limit(text: str) -> tuple[str, float]:
    step, eq, seconds = text.partition("=")
    if not eq or step not in ds.STEPS:
        raise argparse.ArgumentTypeError(f"--limit={text!r} is invalid: STEP=SECONDS with STEP one of "
                                         f"{', '.join(ds.STEPS)} is accepted")
    return step, _seconds(seconds, f"--limit {step}=")


def preflight(args: argparse.Namespace) -> str | None:
    """Why the check cannot start (one line), or None: the archive exists unless --tiny/--synthetic, and --out is a
    folder this process can write (created if missing; a file, or a read-only place, is refused before any step)."""
    if not (args.tiny or args.synthetic) and not Path(args.archive or ARCHIVE).exists():
        return (f"--archive={str(args.archive or ARCHIVE)!r} does not exist: a CIFAR-10 .tar.gz is accepted "
                "(make gpu-prepare lays data/cifar10-jpeg.tar.gz), or --synthetic for speeds without it")
    if not args.out.strip():
        return (f"--out={args.out!r} is empty (an unset variable?): a folder is accepted (without --out: "
                "docs/gpu/<date>-<gpu name>)")
    out, records = Path(args.out), REPO / "docs" / "gpu"
    where = out.resolve()
    if where.is_relative_to(REPO) and (where == records or not where.is_relative_to(records)):
        return (f"--out={args.out!r} is inside the repository but not a folder under docs/gpu/: a folder outside the "
                "repository, or docs/gpu/<date>-<gpu>/ (a record to commit), is accepted")
    if out.exists() and not out.is_dir():
        return f"--out={str(out)!r} is a file: a folder (created if missing) is accepted"
    try:
        ensure_writable(out)  # os.access says yes to root on a read-only mount
    except OSError as exc:
        return f"--out={str(out)!r} is not a writable folder ({exc.strerror or exc}): a writable folder is accepted"
    return None


def parser() -> argparse.ArgumentParser:
    from initmem.cli.args import Parser

    ap = Parser(prog="python -m benchmarks.device_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--archive", default=None, help=f"CIFAR-10 .tar.gz (default: {ARCHIVE.relative_to(REPO)}); "
                                                    "missing: an error unless --tiny or --synthetic")
    ap.add_argument("--synthetic", action="store_true", help="synthetic data of the full split's sizes (no archive: "
                                                             "speeds only)")
    ap.add_argument("--tiny", action="store_true", help="seconds on a CPU: synthetic data, width 1/16, few steps")
    ap.add_argument("--out", default=None, help="output folder (default: docs/gpu/<date>-<gpu name>)")
    ap.add_argument("--budget-s", type=_seconds, default=BUDGET_S, help="wall-clock budget of the whole check "
                    "(default %(default)g: start + two runs fit 15 minutes of device time, docs/gpu/device_check.md)")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32",
                    help="precision of the population and paper steps (the study's default fp32)")
    ap.add_argument("--paper-epochs", type=int, default=200,
                    help="most epochs of the paper step (it stops when its time is up)")
    ap.add_argument("--threads", type=_threads, default=None, help="torch threads per step (--tiny: 1)")
    ap.add_argument("--only", action="append", default=[], help="run only this step (repeatable; env always runs)")
    ap.add_argument("--fail", action="append", default=[], help="test hook: this step raises at once")
    ap.add_argument("--hang", action="append", default=[], help="test hook: this step sleeps past its limit")
    ap.add_argument("--limit", action="append", default=[], type=_limit, help="STEP=SECONDS: this step's cap")
    ap.add_argument("--plant", choices=parity.PLANTS, default=None, help="test hook: the parity and population "
                    "steps' target runs with a rounding change (must pass) or a bug (must fail) planted")
    ap.add_argument("--launch", choices=("exec", "fork"), default=None,
                    help="how each step starts: a fresh interpreter (default with cuda: CUDA is not fork-safe) or a "
                         "fork of this one (default with cpu: no per-step import time)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--ctx", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    vars(args).pop("_given", None)
    if args.worker:
        return worker(args.worker, args.ctx)
    if args.out is None:
        args.out = default_out(args.device, args.tiny)
    args.launch = args.launch or ("exec" if args.device == "cuda" else "fork")
    if unknown := [n for n in [*args.only, *args.fail, *args.hang] if n not in ds.STEPS]:
        ap.error(f"unknown step(s) {unknown}: one of {', '.join(ds.STEPS)}")
    if problem := preflight(args):
        ap.error(problem)
    if Path(args.out).resolve().is_relative_to(REPO):
        print(f"writing into the repository: {Path(args.out).resolve().relative_to(REPO)} (a record to commit, "
              "docs/gpu/README.md; elsewhere: --out DIR)", flush=True)
    doc = run_all(args)
    print(f"wrote {args.out}/{', '.join(OUTPUTS)} (throughput: {doc['throughput']['entries']} entries) in "
          f"{doc['seconds']:.0f} s: {doc['counts']}; checks passed: {doc['checks']['passed'] or 'none'}, failed: "
          f"{doc['checks']['failed'] or 'none'}; exit code {doc['exit_code']}" + (
              f": {exit_reason(doc)}" if doc["exit_code"] else ""))
    return doc["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
