"""Recomputes numbers a review questioned, from the committed results (run from the repository root:
`python docs/experiments/recompute/recompute.py > docs/experiments/recompute/recompute.txt`)."""

from pathlib import Path

import pandas as pd

from initmem import metrics
from initmem.store.results import load_histories, load_runs

ROOT = Path(__file__).resolve().parents[3]


def main() -> None:
    for profile in ("cpu", "cpu_steps", "cpu_w025"):
        runs = load_runs(ROOT / "results" / profile)
        by = runs.groupby("section")["wall_time_s"].sum() / 3600
        print(f"{profile}: wall_time_s per section (h): " + ", ".join(f"{k} {v:.2f}" for k, v in by.items())
              + f"; total {by.sum():.2f} h ({len(runs)} runs)")
    runs = load_runs(ROOT / "results" / "cpu_w025")
    hist = load_histories(ROOT / "results" / "cpu_w025")
    below, rows = 0, []
    for rid, h in hist.groupby("run_id"):
        e = metrics.best_epoch(h["val_loss"].to_numpy())
        tr = float(h["train_acc"].iloc[e - 1]) if "train_acc" in h.columns else float("nan")
        below += tr < 0.995
        r = runs[runs["run_id"] == rid].iloc[0]
        rows.append((r["optimizer"], r["sigma_w"], r["seed"], e, round(100 * tr, 1)))
    print(f"cpu_w025: selected checkpoints below 99.5 % train accuracy: {below} of {len(rows)}")
    print(pd.DataFrame(rows, columns=["optimizer", "sigma_w", "seed", "best_epoch", "train_acc_%"])
          .sort_values(["optimizer", "sigma_w", "seed"]).to_string(index=False))
    print(f"b = 64 on 2,000 images: partial last batch {2000 % 64} images")


if __name__ == "__main__":
    main()
