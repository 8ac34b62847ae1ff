"""The next GPU lease as one command: measure what no GPU has measured yet, then train section 01's `lease` profile
(the headline at full data scale) through its notebooks, all inside `--budget-s`.

    python3 -m benchmarks.lease --device cuda --archive data/cifar10-jpeg.tar.gz --out "$OUT"   # make gpu-lease
    python3 -m benchmarks.lease --device cpu --tiny --out /tmp/lease                            # CI: the same, tiny

1. The measurements (`benchmarks.lease_steps`, each in its own process under a limit, as the device check's steps;
   at most `MEASURE_S` in all): the environment (and the data decoded once into $INITMEM_CACHE), tf32 eager epochs,
   populations, compiled against eager, a profiler trace.
2. `initmem sweep params/01_optimizers.yaml --profile lease` (papermill; `--tiny`: the `smoke` profile) with what the
   budget leaves, less `REPORT_S`; at its time limit the sweep and every process under it are killed.
3. The histories of runs it did not finish are salvaged from their newest checkpoint (`salvage`); checkpoints are
   not brought back.

Writes `OUTPUTS` (five files) into `--out`, rewritten after every phase; exit code 0 when every step and point ran.
docs/gpu/lease.md says what each file holds and how the command is sized.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import device_check as dc
from benchmarks import lease_steps as ls

REPO = dc.REPO
OUTPUTS = ("lease.json", "lease.md", "throughput.json", "runs.tar.gz", "logs.tar.gz")
BUDGET_S = 285.0  # as the device check's: start + 2 x (budget + 60 s) fit 15 minutes of device time
MEASURE_S = {"full": 135.0, "tiny": 400.0}  # the measurements' share; the sweep gets the rest
# seconds: (cap on CUDA, cap with --tiny, minimum worth starting)
LIMITS = {"env": (45, 60, 10), "eager": (35, 120, 10), "population": (25, 120, 10), "compiled": (75, 150, 15),
          "trace": (15, 60, 5)}
REPORT_S = 15  # kept back for the salvage and the report
SECTION = ("params/01_optimizers.yaml", "01_optimizers")


def measure(args: argparse.Namespace, settings: dict, logs: Path, t_start: float, save) -> list[dict]:
    """Every step in order, each under min(its cap, the measurements' share left less the later minimums)."""
    steps: list[dict] = []
    mode = settings["mode"]
    for i, name in enumerate(ls.STEPS):
        later = sum(LIMITS[n][2] for n in list(ls.STEPS)[i + 1:])
        left = min(MEASURE_S[mode], args.budget_s - REPORT_S) - (time.time() - t_start)
        limit = min(LIMITS[name][1 if args.tiny else 0], left - later)
        if limit < LIMITS[name][2]:
            rec = dc._skipped(name, f"no time left ({left:.0f} s, {later} s kept for later)", ls.STEPS)
        else:
            print(f"[{time.time() - t_start:5.0f} s] {name} (limit {limit:.0f} s) ...", flush=True)
            rec = dc.run_step(name, settings, limit, logs, False, False, args.launch, ls.STEPS, "benchmarks.lease")
        print(f"[{time.time() - t_start:5.0f} s] {name}: {rec['status']} {rec['error'] or ''}", flush=True)
        steps.append(rec)
        save(steps, None)
    return steps


def descendants(pid: int) -> list[int]:
    """The process ids under `pid` (a sweep's workers and their kernels, which start sessions of their own)."""
    try:
        import psutil

        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except Exception:  # noqa: BLE001 - psutil missing or the process gone: its own group is still killed
        return []


def sweep(args: argparse.Namespace, results: Path, seconds: float, log: Path) -> dict[str, Any]:
    """`initmem sweep` of the profile into `results` for at most `seconds`: then it and every process under it are
    killed by their ids (its kernels run in sessions of their own)."""
    cmd = [sys.executable, "-m", "initmem.cli", "sweep", SECTION[0], "--profile", args.profile, "--results",
           str(results), "--jobs", str(args.jobs)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    t0 = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, seconds))
            stopped = "finished"
        except subprocess.TimeoutExpired:
            for pid in [*descendants(proc.pid), proc.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            rc, stopped = proc.wait(), f"killed at its time limit ({seconds:.0f} s)"
    shown = ["initmem sweep", *cmd[4:7], "--results", "<work>/results", *cmd[9:]]  # no path of this machine
    return {"command": " ".join(shown), "profile": args.profile, "returncode": rc, "stopped": stopped,
            "seconds": round(time.time() - t0, 1), "limit_s": round(seconds, 1)}


def salvage(results: Path, section: str) -> list[dict[str, Any]]:
    """For each run a checkpoint holds (alone or in a population), its history up to the newest checkpoint that
    loads, as `<results>/salvaged/<section>/<run_id>/history.csv` with `partial.json` (the epoch, the checkpoint)."""
    import pandas as pd

    from initmem.engine import checkpoint
    from initmem.errors import CheckpointError
    from initmem.store.folders import checkpoints

    found = []
    for folder in sorted((results / section).glob("**/checkpoints")):
        for path in checkpoints(folder):
            try:
                payload = checkpoint.load(path)
            except CheckpointError as exc:
                print(f"salvage: {exc}; trying an older checkpoint", flush=True)
                continue
            for rid, rows in zip(payload["run_ids"], payload["state"]["histories"], strict=True):
                dest = results / "salvaged" / section / rid
                dest.mkdir(parents=True, exist_ok=True)
                pd.DataFrame(rows).to_csv(dest / "history.csv", index=False)
                info = {"run_id": rid, "epoch": int(payload["epoch"]), "config": payload.get("config"),
                        "population": payload.get("population"), "checkpoint": str(path.relative_to(results)),
                        "saved_at": payload.get("saved_at")}
                (dest / "partial.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
                found.append(info)
            break
    return found


def outcome(results: Path, section: str, salvaged: list[dict]) -> dict[str, Any]:
    """The runs the sweep finished (their epochs) and those salvaged."""
    done = {}
    for p in sorted((results / section).glob("*/run.json")):
        rec = json.loads(p.read_text())
        done[rec["run_id"]] = {"status": rec["status"], "epochs": rec["config"]["epochs"],
                               "optimizer": rec["config"]["optimizer"], "sigma_w": rec["config"]["sigma_w"]}
    return {"complete": done, "salvaged": salvaged}


def tar(out: Path, name: str, root: Path, skip=lambda p: False) -> None:
    """`root`'s files as `out/name` (.tar.gz), paths relative to it, less what `skip` says."""
    with tarfile.open(out / name, "w:gz") as t:
        if root.is_dir():
            for p in sorted(root.rglob("*")):
                if p.is_file() and not skip(p.relative_to(root)):
                    t.add(p, arcname=str(p.relative_to(root)))


def brought_back(rel: Path) -> bool:
    """What of the results tree comes back: not checkpoints, locks nor submitit's folders."""
    return not ({"checkpoints", ".submitit"} & set(rel.parts) or rel.suffix in (".lock", ".tmp"))


# ------------------------------------------------------------------------------------------------ outputs
def throughput(doc: dict[str, Any]):
    """The planner's table (docs/planner.md) from the eager and population epochs (compiled runs are not in its key:
    lease.json holds them)."""
    from initmem.study.throughput import Entry, Throughput

    entries = {}
    for step in ("eager", "population"):
        for r in doc["results"].get(step, {}).get("runs", []):
            e = Entry(r["arch"], float(r["width"]), r["batch_size"], r["precision"], r["members"], r["step_s"],
                      r["eval_image_s"], r["optimizer"])
            entries[e.key] = e
    return Throughput(doc["device_name"] or doc["settings"]["device"], doc["torch"] or "", list(entries.values()),
                      doc["kind"] or doc["settings"]["device"], None, doc["finished"])


def markdown(doc: dict[str, Any]) -> str:
    """The short record: the steps, each timed configuration, the trace, the sweep and its runs."""
    res, lines = doc["results"], [f"# GPU lease: {doc['device_name'] or doc['settings']['device']}", "",
                                  f"{doc['created']} – {doc['finished']}, {doc['seconds']:.0f} s of --budget-s "
                                  f"{doc['args']['budget_s']:g}; torch {doc['torch']}; mode {doc['settings']['mode']}.",
                                  "", "| step | status | s (limit) | error or reason |", "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['status']} | {r['seconds']:.0f} ({r['limit_s']:.0f}) | "
              f"{(r['error'] or r['reason'] or '').replace('|', '/')} |" for r in doc["steps"]]
    runs = [r for s in ("eager", "population", "compiled") for r in res.get(s, {}).get("runs", [])]
    lines += ["", "| arch | b | optimizer | K | precision | compile | step ms | eval µs/img | peak GiB | vs eager | "
              "parity |", "|---" * 11 + "|"]
    lines += [f"| {r['arch']} | {r['batch_size']} | {r['optimizer']} | {r['members']} | {r['precision']} | "
              f"{r['compile']} | {1e3 * r['step_s']:.2f} | {1e6 * r['eval_image_s']:.2f} | "
              f"{r['peak_memory_bytes'] / 2**30:.2f} | {dc._g(r.get('compiled_vs_eager'), '.2f')} | "
              f"{dc._g(r.get('parity_pass'))} |" for r in runs]
    if t := res.get("trace", {}).get("summary"):
        lines += ["", f"Trace ({res['trace']['setup']}): step {1e3 * t['step_s']:.2f} ms, GPU busy "
                  f"{dc._g(t['gpu_busy_fraction'], '.2f')} of the wall time, {t['kernels_per_step']:.0f} kernels and "
                  f"{t['aten_ops_per_step']:.0f} top-level aten ops a step."]
    if sw := doc.get("sweep"):
        o = doc["runs"]
        lines += ["", f"Sweep `{sw['command']}`: {sw['stopped']} after {sw['seconds']:.0f} s (rc {sw['returncode']}); "
                  f"{len(o['complete'])} runs complete, {len(o['salvaged'])} salvaged from checkpoints "
                  f"(epochs: {', '.join(str(s['epoch']) for s in o['salvaged']) or '-'})."]
    return "\n".join(lines) + "\n"


def write(out: Path, doc: dict[str, Any], logs: Path, results: Path | None) -> None:
    """Every file of `OUTPUTS` into `out`, from what is known so far."""
    from initmem.store.files import atomic_write
    from initmem.study.throughput import save_throughput

    doc["finished"], doc["seconds"] = dc._now(), round(time.time() - doc["t_start"], 1)
    save_throughput(throughput(doc), out / "throughput.json")
    tar(out, "logs.tar.gz", logs, lambda p: p.suffix != ".log")
    tar(out, "runs.tar.gz", results or logs / "none", lambda p: not brought_back(p))
    record = {k: v for k, v in doc.items() if k != "t_start"}
    atomic_write(out / "lease.json", json.dumps(dc.portable(record), indent=1, default=str) + "\n")
    atomic_write(out / "lease.md", markdown(doc))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The measurements, the sweep, the salvage; the document (its files rewritten after each phase)."""
    t_start, out = time.time(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="lease-"))
    logs, results = work / "logs", work / "results"
    logs.mkdir()
    settings, notes = dc.settings_for(argparse.Namespace(**{**vars(args), "synthetic": False, "precision": "tf32",
                                                            "paper_epochs": 0, "threads": None, "plant": None,
                                                            "limit": []}))
    doc: dict[str, Any] = {"schema": 1, "tool": "benchmarks/lease.py", "created": dc._now(), "t_start": t_start,
                           "args": vars(args), "settings": settings, "notes": notes, "steps": [], "results": {},
                           "device_name": None, "kind": None, "torch": None}

    def save(steps: list[dict], results_dir: Path | None) -> None:
        env = steps[0]["results"] if steps else {}
        doc.update(steps=steps, results={r["name"]: r["results"] for r in steps}, device_name=env.get("device_name"),
                   kind=env.get("kind"), torch=env.get("env", {}).get("torch"))
        write(out, doc, logs, results_dir)

    steps = measure(args, settings, logs, t_start, save)
    left = args.budget_s - REPORT_S - (time.time() - t_start)
    if args.sweep_s is not None:
        left = min(left, args.sweep_s)
    modules = doc["results"].get("env", {}).get("env", {}).get("modules", {})
    if missing := [m for m in ("papermill", "jupytext") if not modules.get(m, True)]:
        doc["sweep"] = {"command": "initmem sweep", "stopped": f"not run: {', '.join(missing)} missing (carry the "
                        "wheels: make gpu-lease)", "returncode": None, "seconds": 0.0}
    else:
        print(f"[{time.time() - t_start:5.0f} s] sweep --profile {args.profile} (limit {left:.0f} s) ...", flush=True)
        doc["sweep"] = sweep(args, results, left, logs / "sweep.log")
        print(f"[{time.time() - t_start:5.0f} s] sweep: {doc['sweep']['stopped']}", flush=True)
    doc["runs"] = outcome(results, SECTION[1], salvage(results, SECTION[1]))
    doc["exit_code"] = int(any(r["status"] != "ok" for r in steps) or doc["sweep"]["returncode"] != 0)
    save(steps, results)
    shutil.rmtree(work, ignore_errors=True)  # the checkpoints go with it
    return doc


def parser() -> argparse.ArgumentParser:
    from initmem.cli.args import Parser

    ap = Parser(prog="python -m benchmarks.lease", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--archive", default=None, help="CIFAR-10 .tar.gz (default: data/cifar10-jpeg.tar.gz; not read "
                                                    "with --tiny)")
    ap.add_argument("--tiny", action="store_true", help="seconds on a CPU: tiny sizes, the smoke profile (CI)")
    ap.add_argument("--out", default="", help="output folder, outside the repository ($OUT on a GPU box)")
    ap.add_argument("--budget-s", type=dc._seconds, default=BUDGET_S, help="wall-clock budget (default %(default)g)")
    ap.add_argument("--profile", default=None, help="section 01's profile to sweep (default: lease; --tiny: smoke)")
    ap.add_argument("--jobs", type=int, default=None, help="points side by side on the device (default: 3; --tiny 1)")
    ap.add_argument("--sweep-s", type=dc._seconds, default=None, help="test hook: the sweep's most seconds")
    ap.add_argument("--launch", choices=("exec", "fork"), default=None, help="steps as fresh interpreters (default "
                                                                             "with cuda) or forks (default with cpu)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--ctx", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    vars(args).pop("_given", None)
    if args.worker:
        return dc.worker(args.worker, args.ctx, ls.STEPS)
    args.profile = args.profile or ("smoke" if args.tiny else "lease")
    args.jobs = args.jobs or (1 if args.tiny else 3)
    args.launch = args.launch or ("exec" if args.device == "cuda" else "fork")
    if problem := dc.preflight(argparse.Namespace(**{**vars(args), "synthetic": False})):
        parser().error(problem)
    if args.launch == "fork":
        dc.preload()
    doc = run(args)
    print(f"wrote {args.out}/{', '.join(OUTPUTS)} in {doc['seconds']:.0f} s; sweep: {doc['sweep']['stopped']}; "
          f"{len(doc['runs']['complete'])} runs complete, {len(doc['runs']['salvaged'])} salvaged; exit code "
          f"{doc['exit_code']}")
    return doc["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
