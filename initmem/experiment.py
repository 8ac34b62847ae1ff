"""One sweep point: a configuration trained across sigma_w × seeds. This is what a section notebook calls.

A point is exactly what a spread is computed over, so the notebook trains it in one call, the results tree makes
the call idempotent (complete runs are skipped: a re-executed notebook only trains what is missing), and
`point_summary` turns its rows into the numbers the section reports.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from initmem import metrics
from initmem import results as _results
from initmem.errors import ConfigError
from initmem.train import TrainConfig, train


def _configs(base: TrainConfig, sigma_ws: list[float], seeds: list[int]) -> list[TrainConfig]:
    if isinstance(sigma_ws, (str, bytes)) or not isinstance(sigma_ws, (list, tuple)) or not sigma_ws:
        raise ConfigError(f"sigma_ws={sigma_ws!r} is invalid: a non-empty list of positive reals is accepted")
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, (list, tuple)) or not seeds:
        raise ConfigError(f"seeds={seeds!r} is invalid: a non-empty list of integers >= 0 is accepted")
    configs = [base.replace(sigma_w=s, seed=seed) for s in sigma_ws for seed in seeds]  # each one validated
    ids = [_results.run_id(c) for c in configs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"sigma_ws={list(sigma_ws)!r}, seeds={list(seeds)!r} are invalid: they repeat a run; "
                          "distinct values are accepted")
    return configs


def run_sigma_sweep(base: TrainConfig | dict, *, sigma_ws: list[float], seeds: list[int] = (0,),
                    results: str | Path, section: str, ensemble: bool = False, progress: bool = True) -> pd.DataFrame:
    """Train `base` at every sigma_w × seed that is not already complete under `results/section`, sequentially;
    return the `load_runs` rows of exactly these runs (in sigma_w, seed order). A diverged run is a result (its
    row says so) and the sweep goes on."""
    base = TrainConfig.from_dict(base) if isinstance(base, dict) else base
    if not isinstance(base, TrainConfig):
        raise ConfigError(f"base={type(base).__name__} is invalid: a TrainConfig or a dict of its fields is accepted")
    configs = _configs(base, sigma_ws, seeds)
    todo = [c for c in configs if not _results.is_complete(results, section, c)]
    done = [c for c in configs if c not in todo]
    if done:
        print(f"skipping {len(done)} complete run(s): "
              + ", ".join(f"sigma_w={c.sigma_w:g} seed={c.seed} ({_results.run_id(c)})" for c in done), flush=True)
    if ensemble and todo:
        print("ensemble training is not available yet: training the runs one after the other", flush=True)
    for i, c in enumerate(todo, 1):
        if progress:
            print(f"[{i}/{len(todo)}] sigma_w={c.sigma_w:g} seed={c.seed}", flush=True)
        train(c, out_dir=results, section=section, progress=progress)
    frames = [_results.load_runs(_results.run_dir(results, section, c)) for c in configs]
    return pd.concat(frames, ignore_index=True)


def point_summary(df: pd.DataFrame) -> dict:
    """The point's numbers from its `run_sigma_sweep` rows: the test-accuracy spread across sigma_w (pp, of the
    per-sigma_w mean over seeds), its seed-to-seed std when there is more than one seed (the spread computed within
    each seed), which sigma_w is best and worst, and how many runs interpolated or diverged."""
    need = {"sigma_w", "seed", "status", "test_acc_at_best", "interpolated"}
    missing = sorted(need - set(df.columns)) if isinstance(df, pd.DataFrame) else sorted(need)
    if missing:
        raise ConfigError(f"point_summary got rows missing the columns {missing}: the rows of run_sigma_sweep (or "
                          "load_runs) are accepted")
    acc = pd.to_numeric(df["test_acc_at_best"], errors="coerce")
    by_sigma = acc.groupby(df["sigma_w"]).mean().dropna()
    per_seed = [metrics.spread(g) for _, g in acc.groupby(df["seed"]) if g.notna().sum() >= 2]
    return {
        "n_runs": len(df),
        "sigma_ws": sorted(df["sigma_w"].unique().tolist()),
        "seeds": sorted(df["seed"].unique().tolist()),
        "spread_pp": metrics.spread(by_sigma.to_numpy()) if len(by_sigma) else None,
        "spread_seed_std_pp": float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else None,
        "best_sigma_w": float(by_sigma.idxmax()) if len(by_sigma) else None,
        "worst_sigma_w": float(by_sigma.idxmin()) if len(by_sigma) else None,
        "test_acc_by_sigma_w": {float(k): float(v) for k, v in by_sigma.items()},
        "n_interpolated": int(df["interpolated"].eq(True).sum()),
        "n_diverged": int((df["status"] == "diverged").sum()),
        "n_complete": int((df["status"] == "complete").sum()),
    }
