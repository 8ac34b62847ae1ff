"""The numbers docs/findings.md quotes for the hypothesis runs: per candidate and optimiser, test accuracy at the
selected (lowest validation loss) epoch at each sigma_w, the spread, the selected epoch, tau_interp, and at
sigma_w 2.5 the angle from initialisation and Theta at the selected epoch; the last-epoch spread beside it.

    python docs/experiments/hypotheses/summary.py            # reads results/hypotheses and results/cpu_w025_pilot
"""

from __future__ import annotations

import sys
import warnings

import pandas as pd

from initmem.store.results import load_histories, load_runs


def summary(*trees: str) -> pd.DataFrame:
    trees = trees or ("results/hypotheses", "results/cpu_w025_pilot")
    runs = pd.concat([load_runs(t) for t in trees], ignore_index=True)
    hist = pd.concat([load_histories(t) for t in trees], ignore_index=True)
    runs["candidate"] = runs.path.map(lambda p: p.split("/")[-3])
    runs = runs[runs.status == "complete"]
    rows = []
    for (cand, opt), g in runs.groupby(["candidate", "optimizer"]):
        row = {"candidate": cand, "optimizer": opt, "lr": g.lr.iloc[0], "runs": len(g)}
        for s, r in g.groupby("sigma_w"):
            tag = f"{s:g}"
            row[f"test@best {tag}"] = round(100 * r.test_acc_at_best.mean(), 1)
            row[f"test@last {tag}"] = round(100 * r.final_test_acc.mean(), 1)
            row[f"best_epoch {tag}"] = "/".join(str(int(e)) for e in r.best_epoch)
            row[f"tau {tag}"] = "/".join("-" if pd.isna(t) else str(int(t)) for t in r.tau_interp)
        big = g[g.sigma_w == g.sigma_w.max()]
        h = hist[hist.run_id.isin(big.run_id)].merge(big[["run_id", "best_epoch"]], on="run_id")
        at = h[h.epoch == h.best_epoch]
        row["angle@best max-sigma"] = round(at.angle.mean(), 1)
        row["Theta@best max-sigma"] = round(at.Theta.mean(), 2)
        sel = g.groupby("sigma_w")
        row["spread_pp"] = round(100 * (sel.test_acc_at_best.mean().max() - sel.test_acc_at_best.mean().min()), 1)
        row["spread_last_pp"] = round(100 * (sel.final_test_acc.mean().max() - sel.final_test_acc.mean().min()), 1)
        row["sigma_ws"] = "/".join(f"{s:g}" for s in sorted(g.sigma_w.unique()))
        rows.append(row)
    return pd.DataFrame(rows)


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    pd.set_option("display.width", 250)
    print(summary(*sys.argv[1:]).T.to_string())
