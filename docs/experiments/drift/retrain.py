"""Retrains the first epochs of committed runs with the initmem on sys.path and says, per run, whether each epoch's
train_loss equals the committed one bit for bit, with full_test off and on (an observation option outside the run
id that must change no training step). Run from the repository root:

    python docs/experiments/drift/retrain.py results/cpu_w025_pilot/01_optimizers/252ae157f1b7 ... > retrain.txt

or against an older commit's engine (before full_test existed, one line a run):

    git worktree add --detach ../old d2b7045 && PYTHONPATH=../old python docs/experiments/drift/retrain.py ...

The constant schedule makes the first epochs independent of the run's length (tests/test_golden.py).
"""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

try:
    from initmem import TrainConfig, train
except ImportError:  # the engine before the top-level API (commits before 55a8bd8)
    from initmem.train import train

    from initmem.config import TrainConfig


def retrain(folder: Path, engine: str, epochs: int = 1) -> list[str]:
    """One line per full_test setting: the run, its commit and date, and each epoch's comparison."""
    record = json.loads((folder / "run.json").read_text())
    committed = pd.read_csv(folder / "history.csv").set_index("epoch")["train_loss"]
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    config = {k: v for k, v in record["config"].items() if k in fields and v is not None}
    lines = []
    for full_test in (False, True) if "full_test" in fields else (None,):
        changes = {"data_root": "data", "epochs": epochs} | ({} if full_test is None else {"full_test": full_test})
        history = train(TrainConfig.from_dict({**config, **changes}), progress=False).history
        got = pd.DataFrame(history).set_index("epoch")["train_loss"]
        same = ", ".join(f"epoch {e}: {'equal' if got[e] == committed[e] else 'differs'} "
                         f"({got[e]:.7g} vs {committed[e]:.7g})" for e in range(1, epochs + 1))
        lines.append(f"{record['run_id']} ({record['provenance']['git_commit'][:7]}, {record['started_at'][:10]}) "
                     f"retrained at {engine}, full_test={full_test}: {same}")
    return lines


if __name__ == "__main__":
    torch.set_num_threads(1)
    where = Path(sys.modules[TrainConfig.__module__].__file__).parent
    engine = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=where, capture_output=True,
                            text=True).stdout.strip() or "?"
    for path in sys.argv[1:]:
        print("\n".join(retrain(Path(path), engine)), flush=True)
