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
    runs = load_runs(ROOT / "results" / "cpu_w025_pilot")
    hist = load_histories(ROOT / "results" / "cpu_w025_pilot")
    below, rows = 0, []
    for rid, h in hist.groupby("run_id"):
        r = runs[runs["run_id"] == rid].iloc[0]
        e = int(r["best_epoch"])  # the summary's selected epoch (lowest validation loss, epochs >= 1)
        tr = float(h.loc[h["epoch"] == e, "train_acc"].item())
        below += tr < metrics.THRESHOLD
        rows.append((r["optimizer"], r["sigma_w"], r["seed"], e, round(100 * tr, 1)))
    print(f"cpu_w025: selected checkpoints below 99.5 % train accuracy: {below} of {len(rows)}")
    print(pd.DataFrame(rows, columns=["optimizer", "sigma_w", "seed", "best_epoch", "train_acc_%"])
          .sort_values(["optimizer", "sigma_w", "seed"]).to_string(index=False))
    print(f"b = 64 on 2,000 images: partial last batch {2000 % 64} images")
    spikes(runs, hist)
    stopped_early(runs, hist)
    partial_batch()


def spikes(runs: pd.DataFrame, hist: pd.DataFrame) -> None:
    """Adam's and AdamW's collapses after interpolating: the first epoch after tau_interp at which eval-mode train
    accuracy is 20 pp or more below its best so far, and the lowest accuracy after it."""
    print("cpu_w025: collapses after tau_interp (train accuracy >= 20 pp below its best so far)")
    rows = []
    for rid, h in hist.groupby("run_id"):
        r = runs[runs["run_id"] == rid].iloc[0]
        if r["optimizer"] not in ("adam", "adamw") or pd.isna(r["tau_interp"]):
            continue
        h = h[h["epoch"] >= 1].sort_values("epoch")
        first = metrics.collapse_epoch(h["train_acc"], int(r["tau_interp"]))
        after = h[h["epoch"] >= r["tau_interp"]]
        rows.append((r["optimizer"], r["sigma_w"], r["seed"], int(r["tau_interp"]), first,
                     None if first is None else round(100 * float(after.loc[after["epoch"] >= first,
                                                                            "train_acc"].min()), 1),
                     int(r["best_epoch"]), None if first is None else int(r["best_epoch"]) - first))
    t = pd.DataFrame(rows, columns=["optimizer", "sigma_w", "seed", "tau_interp", "collapse_epoch",
                                    "lowest_train_acc_%", "best_epoch", "best_after_collapse"])
    for c in ("collapse_epoch", "best_after_collapse"):
        t[c] = t[c].astype("Int64")
    print(t.sort_values(["optimizer", "sigma_w", "seed"]).to_string(index=False, na_rep="-"))
    print(f"  runs that collapse: {t['collapse_epoch'].notna().sum()} of {len(t)}; selected after their collapse: "
          f"{(t['best_after_collapse'] > 0).sum()}")


def stopped_early(runs: pd.DataFrame, hist: pd.DataFrame, stops=(40, 50, 57, 60)) -> None:
    """Each optimiser's spread (pp, the seed-mean test accuracy at the lowest-validation-loss epoch, as T1) had
    training stopped at epoch E: every run's history cut at E and summarised again."""
    print("cpu_w025: spread (pp) with training stopped at epoch E (T1's rule on the histories cut at E)")
    for optimizer, g in runs.groupby("optimizer"):
        line = []
        for stop in stops:
            rows = []
            for _, r in g.iterrows():
                h = hist[(hist["run_id"] == r["run_id"]) & (hist["epoch"] <= stop)]
                rows.append({**r.to_dict(), **metrics.summarize_history(h)})
            line.append(f"E={stop}: {metrics.point_summary(pd.DataFrame(rows))['spread_pp']:.1f}")
        print(f"  {optimizer}: " + ", ".join(line))


def partial_batch() -> None:
    """docs/experiments/partial_batch: tau_interp (eval-mode train accuracy >= 99.5 %) and the largest gap running -
    eval-mode accuracy over epochs with running accuracy >= 90 %, kept and dropped; and cpu_steps' SGD gaps."""
    import json
    here = ROOT / "docs" / "experiments" / "partial_batch"
    for arm in ("keep", "drop"):
        rows = [json.loads(line) for line in (here / f"{arm}.jsonl").read_text().splitlines()]
        tau = metrics.interpolation_epoch([r["eval_run"] for r in rows])
        gaps = [r["running"] - r["eval_run"] for r in rows if r["running"] >= 0.9]
        print(f"partial batch {arm}: tau_interp {tau}, largest gap {max(gaps):.2f}, running accuracy >= 99.5 % at "
              f"{sum(r['running'] >= metrics.THRESHOLD for r in rows)} of {len(rows)} epochs")
    runs = load_runs(ROOT / "results" / "cpu_steps")
    hist = load_histories(ROOT / "results" / "cpu_steps")
    sgd = runs[runs["optimizer"] == "sgd"]
    running = [bool((hist.loc[hist["run_id"] == rid, "train_acc_running"] >= metrics.THRESHOLD).any())
               for rid in sgd["run_id"]]
    print(f"cpu_steps sgd: interpolated (eval-mode, tau_interp) {int(sgd['interpolated'].sum())} of {len(sgd)} runs; "
          f"running minibatch accuracy ever >= 99.5 % in {sum(running)} of {len(sgd)}")
    for (optimizer, sigma_w), g in runs.groupby(["optimizer", "sigma_w"]):
        if optimizer != "sgd":
            continue
        h = hist[hist["run_id"].isin(g["run_id"]) & (hist["train_acc_running"] >= 0.9)]
        gap = f"{(h['train_acc_running'] - h['train_acc']).max():.2f}" if len(h) else "- (no such epoch)"
        print(f"cpu_steps sgd sigma_w {sigma_w}: largest gap running - eval-mode train accuracy over the epochs with "
              f"running accuracy >= 90 %: {gap} ({len(g)} seeds)")


if __name__ == "__main__":
    main()
