"""Small per-section helpers the experiment notebooks call, so the notebooks stay free of logic.

Each takes the rows `experiment.run_sigma_sweep` returns (one per σ_w × seed run, `load_runs` columns).
"""

from __future__ import annotations

import pandas as pd

from initmem import metrics
from initmem.errors import ConfigError
from initmem.metrics import point_summary
from initmem.results import load_histories

RUN_COLUMNS = ("sigma_w", "seed", "status", "test_acc_at_best", "best_epoch", "tau_interp", "repair_gap",
               "init_weight_norm", "final_weight_norm", "norm_ratio", "T_SGD", "T_L2", "T_adapt", "wall_time_s")


def _check_runs(runs: pd.DataFrame, need: tuple[str, ...]) -> None:
    if not isinstance(runs, pd.DataFrame) or (missing := set(need) - set(runs.columns)):
        raise ConfigError(f"got {type(runs).__name__} lacking columns "
                          f"{sorted(missing) if isinstance(runs, pd.DataFrame) else list(need)}: "
                          "the rows of run_sigma_sweep (or load_runs) are accepted")


def run_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The columns a reader checks first, one row per run, sorted by σ_w then seed."""
    _check_runs(runs, RUN_COLUMNS)
    return runs[list(RUN_COLUMNS)].sort_values(["sigma_w", "seed"]).reset_index(drop=True)


def spread_at_marks(runs: pd.DataFrame, marks: list[int]) -> pd.DataFrame:
    """The test-accuracy spread across σ_w as if training had stopped at each epoch mark.

    For mark m, each run's test accuracy is read at its best-validation epoch among epochs 1..m (the study's
    selection rule, truncated), and the spread is `point_summary`'s (pp, of the per-σ_w mean over seeds). One row
    per mark: epoch, spread_pp, spread_seed_std_pp, T_SGD (mean over runs, cumulative at m), then `acc@<σ_w>` (%).
    """
    _check_runs(runs, ("run_id", "path", "sigma_w", "seed", "status", "interpolated", "epochs_run"))
    if not marks or any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in marks):
        raise ConfigError(f"epoch_marks={marks!r} is invalid: a non-empty list of epochs >= 1 is accepted")
    longest = int(runs["epochs_run"].max())
    if max(marks) > longest:
        raise ConfigError(f"epoch_marks={marks!r} is invalid: the runs trained {longest} epochs; marks <= {longest} "
                          "are accepted")
    hist = pd.concat([load_histories(p) for p in runs["path"]], ignore_index=True)
    rows = []
    for m in sorted(set(marks)):
        per_run = []
        for r in runs.itertuples():
            h = hist[hist["run_id"] == r.run_id]
            reached = h[h["epoch"] <= m]
            per_run.append({"sigma_w": r.sigma_w, "seed": r.seed, "status": r.status,
                            "test_acc_at_best": metrics.test_at_best(h, upto=m) if len(reached) > 1 else float("nan"),
                            "interpolated": bool((reached["train_acc"] >= 0.995).any()),
                            "T_SGD": reached["T_SGD"].iloc[-1] if len(reached) else float("nan")})
        at = pd.DataFrame(per_run)
        s = point_summary(at)
        row = {"epoch": m, "spread_pp": s["spread_pp"], "spread_seed_std_pp": s["spread_seed_std_pp"],
               "T_SGD": float(at["T_SGD"].mean())}
        row.update({f"acc@{k:g}": round(100 * v, 2) for k, v in s["test_acc_by_sigma_w"].items()})
        rows.append(row)
    return pd.DataFrame(rows)


def interpolation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Which runs interpolate (train accuracy >= 99.5 %) and which fail to: one row per run, sorted by σ_w.

    `failed_to_interpolate` is True for a run that never reached the threshold (a diverged run included): in
    deep ResNets a large σ_w shows as failure to train rather than as a worse interpolating solution.
    """
    cols = ("arch", "sigma_w", "seed", "status", "interpolated", "tau_interp", "final_train_acc", "test_acc_at_best")
    _check_runs(runs, cols)
    t = runs[list(cols)].sort_values(["arch", "sigma_w", "seed"]).reset_index(drop=True)
    return t.assign(failed_to_interpolate=~t["interpolated"].eq(True))
