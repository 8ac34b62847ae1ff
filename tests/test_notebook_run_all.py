"""A normal Run All of notebooks/01_optimizers.py at its default (smoke) parameters, in a kernel the way JupyterLab
runs it (tqdm's notebook bar, not the per-epoch lines initmem's runner asks for): nothing on stderr (JupyterLab
paints it red, a newcomer reads it as an error: tqdm's "IProgress not found" warning without ipywidgets was one),
the bar is a widget whose postfix says what its numbers are (a single run's bar too), and the point's table
shows the norm ratio to 4 significant digits (table_text's display rule). tests/test_jupyterlab.py does the same
Run All in a browser."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from initmem.analysis.point_report import point_table
from initmem.store.results import load_runs
from initmem.study.notebook import execute_notebook

REPO = Path(__file__).resolve().parent.parent


def test_run_all_writes_nothing_to_stderr_and_labels_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.setenv("INITMEM_PROGRESS", "bar")  # a JupyterLab kernel's mode (the runner's default is lines)
    nb = execute_notebook(REPO / "notebooks" / "01_optimizers.py", tmp_path / "out.ipynb", cwd=tmp_path,
                          log_output=False)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert [o["text"] for o in outputs if o.get("name") == "stderr"] == []
    assert not [o for o in outputs if o["output_type"] == "error"]
    # the progress bar is a widget (ipywidgets is there), and its postfix names the number: test accuracy in %
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    texts = [str(m["state"].get("value", "")).replace("\u2007", " ")
             for m in nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"].values()]
    assert any(re.search(r"test acc: sigma_w=0\.1 seed=0 \d+\.\d %, sigma_w=1 seed=0 \d+\.\d %", t) for t in texts)
    # the point table shown is point_table of the runs written, its norm ratios to 4 significant digits
    runs = load_runs(tmp_path / "results" / "adhoc" / "01_optimizers")
    table = point_table(runs)
    shown = [o["data"]["text/plain"] for o in outputs if "angle at best" in o.get("data", {}).get("text/plain", "")]
    with pd.option_context("display.max_columns", 20, "display.width", 80):  # a kernel's defaults
        assert shown == [repr(table)]
    digits = [len(v.replace(".", "").lstrip("0")) for v in table["norm ratio"]]  # significant: 1.004, 0.9998
    assert digits == [4] * len(table), table["norm ratio"].tolist()
    # and the run table: accuracies in percent, not fractions
    html = next(o["data"]["text/html"] for o in outputs if "repair gap (pp)" in o.get("data", {}).get("text/html", ""))
    assert "test acc (%)" in html and "test_acc_at_best" not in html


def test_a_single_runs_bar_labels_its_numbers(monkeypatch, capsys):
    from initmem.engine.trainer import TrainConfig, train

    monkeypatch.setenv("INITMEM_PROGRESS", "bar")
    train(TrainConfig(data="synthetic", width=0.0625, epochs=1, batch_size=32, n_train=64, n_val=32, n_test=32,
                      device="cpu"), progress=True)
    err = capsys.readouterr().err.replace("\r", "\n")
    assert re.search(r"test acc \d+\.\d %, train acc \d+\.\d %, loss \S+", err), err[-400:]
