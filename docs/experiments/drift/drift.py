"""Commit drift: do runs trained at different commits train the same? Every run id found in both trees (run folders
`<tree>/<section>/<run_id>/` or `<tree>/<run_id>/`) is compared column by column, wall_time aside (a measurement of
the machine, not of the run), and the commits of both records are printed. Run from the repository root:

    python docs/experiments/drift/drift.py docs/experiments/drift/runs_29cfd67 results/cpu_w025_lr > drift.txt

runs_29cfd67/ holds the two matched-lr control runs first trained at 29cfd67, before that sweep was restarted at
another commit (the restart retrains them under the same run ids).
"""

import json
import sys
from pathlib import Path

import pandas as pd


def run_folders(tree: Path) -> dict[str, Path]:
    """run id -> its folder, for every finished run (a run.json beside a history.csv) under `tree`."""
    return {p.parent.name: p.parent for p in sorted(tree.glob("**/run.json")) if (p.parent / "history.csv").exists()}


def compare(a: Path, b: Path) -> str:
    ha, hb = pd.read_csv(a / "history.csv"), pd.read_csv(b / "history.csv")
    ca, cb = (json.loads((f / "run.json").read_text())["provenance"]["git_commit"][:10] for f in (a, b))
    cols = [c for c in ha.columns if c != "wall_time" and c in hb.columns]
    only = sorted(set(ha.columns) ^ set(hb.columns))  # e.g. full_test's columns, recorded by one run only
    extra = f" ({', '.join(only)} in one history only, not compared)" if only else ""
    if len(ha) != len(hb):
        return f"{a.name}: {ca} vs {cb}: histories differ in length ({len(ha)} vs {len(hb)} epochs)"
    diff = [c for c in cols if not ha[c].equals(hb[c])]
    if not diff:
        return (f"{a.name}: {ca} vs {cb}: {len(ha)} epochs x {len(cols)} shared columns identical (every value bit "
                f"for bit, wall_time aside){extra}")
    sa, sb = (json.loads((f / "run.json").read_text())["summary"] for f in (a, b))
    first = int(ha["epoch"][~pd.concat([ha[c].eq(hb[c]) | (ha[c].isna() & hb[c].isna()) for c in diff],
                                       axis=1).all(axis=1)].min())
    return (f"{a.name}: {ca} vs {cb}: {len(ha)} epochs x {len(cols)} shared columns differ from epoch {first} in "
            f"{len(diff)} columns ({', '.join(diff[:4])}, ...){extra}; selected epoch {sa['best_epoch']} vs "
            f"{sb['best_epoch']}, test accuracy there {100 * sa['test_acc_at_best']:.2f} vs "
            f"{100 * sb['test_acc_at_best']:.2f} %")


def main(first: str, second: str) -> None:
    a, b = run_folders(Path(first)), run_folders(Path(second))
    common = sorted(set(a) & set(b))
    print(f"{len(common)} run id(s) in both trees")
    for rid in common:
        print(compare(a[rid], b[rid]))


if __name__ == "__main__":
    main(*sys.argv[1:3])
