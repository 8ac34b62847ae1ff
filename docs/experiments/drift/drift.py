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
    cols = [c for c in ha.columns if c != "wall_time"]
    if list(ha.columns) != list(hb.columns) or ha.shape != hb.shape:
        return f"{a.name}: {ca} vs {cb}: histories differ in shape or columns ({ha.shape} vs {hb.shape})"
    diff = [c for c in cols if not ha[c].equals(hb[c])]
    return (f"{a.name}: {ca} vs {cb}: {len(ha)} epochs x {len(cols)} columns "
            + ("identical (every value bit for bit, wall_time aside)" if not diff else f"differ in {diff}"))


def main(first: str, second: str) -> None:
    a, b = run_folders(Path(first)), run_folders(Path(second))
    common = sorted(set(a) & set(b))
    print(f"{len(common)} run id(s) in both trees")
    for rid in common:
        print(compare(a[rid], b[rid]))


if __name__ == "__main__":
    main(*sys.argv[1:3])
