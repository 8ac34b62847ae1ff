"""A section's grid trained without notebooks, for a bare GPU image (no papermill, jupytext or submitit): every point
of a profile through `point.train_point`, into the run folders `initmem sweep` writes, one worker process per point,
side by side on one device. The figures are made elsewhere: `initmem figures --results DIR` where papermill is.

    python3 -m benchmarks.gpu_sweep params/01_optimizers.yaml --profile cpu_w025 --results results/h200_w025 \\
        --device cuda --population
    python3 -m benchmarks.gpu_sweep params/01_optimizers.yaml --profile smoke --results /tmp/s --device cpu

Run from the repository root (the checkout on the path: nothing installed but torch, numpy, pandas and pyyaml).

The profile's `device` is replaced by `--device` (not part of the run id: a GPU tree is its own tree, never mixed
into a CPU one: `--results` must not hold runs trained on another device). `--population` trains each point's runs
as one population (the H200's population at b = 32 gave 1.98x separate runs' rate), else the profile's `population`.
Complete runs are skipped, so the same command resumes; each point's log is `<results>/<section>/notebooks/<point
id>.log`, where a sweep keeps each point's executed notebook.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

from initmem.config import point_configs
from initmem.errors import InitmemError
from initmem.study.params import load_section


def _point(job: dict) -> dict:
    """Train one point (a worker process): its configs from the params file, with the device replaced."""
    import contextlib

    from initmem.study.point import train_point

    section = load_section(job["params"])
    point = next(p for p in section.points(job["profile"], job["results"]) if p.point_id == job["point_id"])
    params = section.effective(point)
    configs = [c.replace(device=job["device"]) for c in point_configs(params)]
    population = params.get("population", True) if job["population"] is None else job["population"]
    t0, results = time.time(), params["results_dir"]
    log = Path(results) / section.name / "notebooks" / f"{point.point_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            train_point(configs, results=results, section=section.name, population=population, progress=False)
            status = "ok"
        except Exception as exc:  # noqa: BLE001 - one point's failure is reported; the others go on
            print(f"{type(exc).__name__}: {exc}", flush=True)
            status = f"failed: {type(exc).__name__}: {exc}"
    return {"point_id": point.point_id, "runs": len(configs), "seconds": round(time.time() - t0, 1),
            "status": status}


def _foreign(results: Path, device: str) -> list[str]:
    """Run folders under `results` trained on another device kind than `device` (their run.json's config), or whose
    run.json cannot be read (named: the sweep sets such a run aside and trains it again, `train_point`)."""
    kind, found = device.split(":")[0], []
    for p in results.glob("*/*/run.json"):
        try:
            other = json.loads(p.read_text()).get("config", {}).get("device", "").split(":")[0] != kind
        except (OSError, ValueError, AttributeError) as exc:
            print(f"gpu_sweep.py: {p} is unreadable ({type(exc).__name__}); train_point sets it aside", flush=True)
            continue
        if other:
            found.append(str(p.parent))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("params")
    ap.add_argument("--profile", required=True)
    ap.add_argument("--results", required=True, help="the results tree (its own: one device kind)")
    ap.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu (default: %(default)s)")
    ap.add_argument("--population", action=argparse.BooleanOptionalAction, default=None,
                    help="train each point as one population (default: the profile's `population`)")
    ap.add_argument("--workers", type=int, default=0, help="worker processes (default: one per point)")
    ap.add_argument("--point", action="append", default=[], help="only this point id (repeatable; default: all)")
    args = ap.parse_args(argv)
    try:
        section = load_section(args.params)
        points = section.points(args.profile, args.results)
    except InitmemError as exc:
        print(f"gpu_sweep.py: {exc}", file=sys.stderr)
        return 2
    results = args.results
    if unknown := sorted(set(args.point) - {p.point_id for p in points}):
        print(f"gpu_sweep.py: --point={unknown[0]!r} is not a point of {args.profile}: "
              f"{', '.join(p.point_id for p in points)} are accepted", file=sys.stderr)
        return 2
    points = [p for p in points if not args.point or p.point_id in args.point]
    try:  # a bad --device is one line here, not a failure in every worker
        point_configs(section.effective(points[0]))[0].replace(device=args.device)
    except InitmemError as exc:
        print(f"gpu_sweep.py: --device={args.device!r}: {exc}", file=sys.stderr)
        return 2
    if foreign := _foreign(Path(args.results), args.device):
        print(f"gpu_sweep.py: --results={args.results!r} holds runs trained on another device ({foreign[0]}, "
              f"{len(foreign)} in all): give this device its own tree", file=sys.stderr)
        return 2
    if args.workers < 0:
        print(f"gpu_sweep.py: --workers={args.workers} is invalid: 0 (one per point) or more is accepted",
              file=sys.stderr)
        return 2
    jobs = [{"params": args.params, "profile": args.profile, "results": args.results, "point_id": p.point_id,
             "device": args.device, "population": args.population} for p in points]
    print(f"{section.name} [{args.profile}]: {len(jobs)} point(s) on {args.device} into {results}", flush=True)
    t0 = time.time()
    with mp.get_context("spawn").Pool(args.workers or len(jobs)) as pool:  # spawn: CUDA is not fork-safe
        done = []
        for rec in pool.imap_unordered(_point, jobs):
            done.append(rec)
            print(f"[{time.time() - t0:6.0f} s] {rec['point_id']}: {rec['status']} ({rec['runs']} runs, "
                  f"{rec['seconds']} s)", flush=True)
    failed = [r for r in done if r["status"] != "ok"]
    print(f"{len(done) - len(failed)} of {len(done)} point(s) ok in {time.time() - t0:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
