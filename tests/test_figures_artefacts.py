"""Writing the artefacts (`figures.artefacts`): stamps that do not depend on the machine, atomic files that a SIGKILL
cannot truncate, footers that fit, loud failures for a results folder that is not there or is damaged, and figure
notebooks that show their figures inline (image/png) and read relative paths against the repository root."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import matplotlib
import nbformat
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from test_figures import FIGURES, _runs, write_fake_results

from initmem.analysis import plots, style, tables
from initmem.errors import ConfigError, ResultsError
from initmem.figures import artefacts

ROOT = artefacts.ROOT


@pytest.fixture
def runs() -> pd.DataFrame:
    return _runs([{"optimizer": o, "sigma_w": s, "seed": k, "test_acc_at_best": 0.5 + 0.1 * s * (o == "sgd") + 0.01 * k,
                   "init_weight_norm": 10 * s, "final_weight_norm": 10 * s if o == "sgd" else 30.0}
                  for o in ("sgd", "adam") for s in (0.5, 1.0, 2.0) for k in (0, 1)])


# --- stamps and paths --------------------------------------------------------------------------------------
def test_relative_paths_mean_the_repository_root_wherever_the_caller_is(tmp_path, monkeypatch, runs):
    monkeypatch.chdir(tmp_path)
    assert artefacts.repo_path("results/cpu") == ROOT / "results" / "cpu"
    assert artefacts.repo_path(tmp_path / "x") == tmp_path / "x"
    assert artefacts.display_path(ROOT / "results" / "cpu") == "results/cpu" == artefacts.display_path("results/cpu")
    assert artefacts.display_path(tmp_path / "smoke") == str(tmp_path / "smoke")  # outside: as given
    stamp = artefacts.Stamp.of(runs, ROOT / "results" / "cpu", ["01_optimizers"])
    assert stamp.results_dir == "results/cpu" and stamp.profile == "cpu"
    assert str(ROOT) not in json.dumps(stamp.sidecar("F1", "figure", "t", ["F1.png"]))


def test_a_stamp_over_shared_trees_counts_each_trees_runs(runs):
    """An experiment reading committed runs from other trees says how many came from each, not one total."""
    tree = pd.Series([0] * 8 + [1] * 3 + [2], index=runs.index)
    stamp = artefacts.Stamp.of(runs, ROOT / "results" / "mine", [], shared=["results/a", "results/b"], tree=tree)
    assert stamp.caption().endswith("· results/mine (8) + results/a (3) + results/b (1)")
    assert stamp.sidecar("F", "figure", "t", [])["runs_per_tree"] == [8, 3, 1]
    assert artefacts.Stamp.of(runs, ROOT / "results" / "mine", []).caption().endswith("· results/mine")


def test_a_tree_named_otherwise_is_stamped_with_the_profile_its_runs_belong_to():
    """Runs do not record their profile: the stamp names the one whose points hold every run, so the five-seed grid
    in results/cpu_w025 (swept with --profile cpu_w025) is not called 'profile cpu_w025'."""
    from initmem.store.results import load_runs
    grid = load_runs(ROOT / "results" / "cpu_w025")
    assert artefacts.Stamp.of(grid, ROOT / "results" / "cpu_w025", ["01_optimizers"]).profile == "cpu_w025"
    assert artefacts.tree_profile(grid, ROOT / "results" / "anything", ["01_optimizers"]) == "cpu_w025"
    assert artefacts.Stamp.of(grid, ROOT / "results" / "cpu_w025", []).profile == "cpu_w025"  # all sections
    committed = load_runs(ROOT / "results" / "cpu_steps")  # a committed tree keeps its own name
    assert artefacts.tree_profile(committed, ROOT / "results" / "cpu_steps", ["01_optimizers"]) == "cpu_steps"
    mixed = pd.concat([grid, committed])  # no one profile holds both: the folder's name, as before
    assert artefacts.tree_profile(mixed, ROOT / "results" / "mine", ["01_optimizers"]) == "mine"


def test_artefacts_are_byte_stable_and_leave_no_temp_files(tmp_path, runs):
    stamp = artefacts.Stamp.of(runs, ROOT / "results" / "cpu", ["01_optimizers"])
    blobs = []
    for k in range(2):
        out = tmp_path / f"o{k}"
        paths = artefacts.save_table(tables.optimizer_table(runs), "T1", out, stamp, "t")
        paths += artefacts.save_figure(plots.radial_memory_plot(runs), "F3", out, stamp, "t")
        artefacts.write_index(out)
        blobs.append({p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    assert blobs[0] == blobs[1] and len(blobs[0]) == 4 + 3 + 1
    assert not [p for p in blobs[0] if p.name.startswith(".")]
    assert all(oct(p.stat().st_mode)[-3:] == "644" for p in (tmp_path / "o0").rglob("*.*"))


def test_the_index_is_in_figure_order_and_caption_links_work_where_each_file_is(tmp_path, runs):
    """F2 before F10 (not as strings sort), tables first; a caption's link, written relative to the repository root,
    points from the index, a table's .md and the notebook's HTML to the same file, and is plain text in LaTeX."""
    stamp = artefacts.Stamp.of(runs, ROOT / "results" / "cpu", ["01_optimizers"])
    out = tmp_path / "set"
    linked = "A [spread](docs/study.md#metrics) table"
    artefacts.save_table(tables.optimizer_table(runs), "T1", out, stamp, linked)
    for name in ("F10", "F2", "F1"):
        artefacts.save_figure(plots.radial_memory_plot(runs), name, out, stamp, "t", description=linked)
    index = artefacts.write_index(out).read_text(encoding="utf-8")
    assert [index.index(f"**{n}**") for n in ("T1", "F1", "F2", "F10")] == sorted(
        index.index(f"**{n}**") for n in ("T1", "F1", "F2", "F10"))
    docs = Path(os.path.relpath(ROOT / "docs", out)).as_posix()
    assert f"[spread]({docs}/study.md#metrics)" in index
    assert f"[spread](../{docs}/study.md#metrics)" in (out / "tables" / "T1.md").read_text(encoding="utf-8")
    assert "A spread table" in (out / "tables" / "T1.tex").read_text(encoding="utf-8")
    fig = plots.radial_memory_plot(runs)
    artefacts.save_figure(fig, "F3", out, stamp, "t", description=linked)
    assert '<a href="../../docs/study.md#metrics">spread</a>' in fig._repr_html_()  # from notebooks/figures/


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = artefacts.write_text(tmp_path / "T1.md", "old\n")

    def half(f):
        f.write(b"new, half written")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        artefacts.atomic_write(path, half)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["T1.md"]


def test_a_sigkill_mid_write_never_leaves_a_truncated_pdf(tmp_path, runs):
    """A child writing F3.pdf over an old one is SIGKILLed half way: the old PDF stays whole; the next run of
    make_figures removes the temp file the child left."""
    stamp = artefacts.Stamp.of(runs, tmp_path / "cpu", ["01_optimizers"])
    pdf = artefacts.save_figure(plots.radial_memory_plot(runs), "F3", tmp_path, stamp, "t")[1]
    old = pdf.read_bytes()
    child = ("import os, signal, sys\nfrom initmem.figures import artefacts\n"
             "def half(f):\n    f.write(b'%PDF-1.4 half'); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
             "artefacts.atomic_write(sys.argv[1], half)\n")
    proc = subprocess.run([sys.executable, "-c", child, str(pdf)], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert pdf.read_bytes() == old
    left = list(tmp_path.glob(".F3.pdf.*.tmp"))
    assert len(left) == 1 and left[0].read_bytes() == b"%PDF-1.4 half"
    artefacts._remove_temp_files(tmp_path)
    assert not list(tmp_path.glob(".*.tmp"))


def _footer_fits(fig) -> None:
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    footer = fig.texts[-1]
    box, page = footer.get_window_extent(renderer), fig.bbox
    assert box.x0 >= page.x0 and box.x1 <= page.x1 + 0.5 and box.y0 >= page.y0, footer.get_text()
    axes_bottom = min(ax.get_tightbbox(renderer).y0 for ax in fig.axes if ax.get_visible())
    assert box.y1 <= axes_bottom + 1, "footer runs into the axes"


def test_the_provenance_footer_fits_every_figure(runs):
    """F1, F3, F4, F8 (and the others) with a long caption: the footer is wrapped inside the figure, under the axes."""
    long = runs.assign(data_source="imagefolder-tar:/a/rather/long/path/to/the/shared/data/cifar10-jpeg.tar.gz",
                       git_commit=[f"{k:040x}" for k in range(len(runs))])
    stamp = artefacts.Stamp.of(long, "/a/results/folder/outside/the/repository/cpu", ["01_optimizers"])
    b = long.assign(section="04_batch_size", batch_size=[32 if k % 2 else 128 for k in range(len(long))])
    with matplotlib.rc_context(style.STYLE):
        built = {"F1": plots.accuracy_vs_sigma(long), "F3": plots.radial_memory_plot(long),
                 "F4": plots.spread_vs_batch_size(b), "F7": plots.spread_vs_clocks(long),
                 "F8": plots.repair_gap_bars(long), "msg": style.message_figure("no results for section 05_depth")}
    for name, fig in built.items():
        title = "a title that is long enough to need wrapping " * 3
        style.caption_figure(fig, title, f"{name}: {stamp.caption()}")
        if fig.get_figwidth() < 7:
            assert "\n" in fig.texts[-1].get_text(), name  # this caption needs more than one line there
        assert "/a/rather" not in fig.texts[-1].get_text() and "CIFAR-10 (JPEG archive)" in fig.texts[-1].get_text()
        with matplotlib.rc_context(style.STYLE):
            _footer_fits(fig)


# --- loud failures -----------------------------------------------------------------------------------------
def test_a_results_folder_that_is_not_there_fails_in_one_line_and_writes_nothing(tmp_path, capsys):
    from initmem.cli.commands import main

    out = tmp_path / "figures"
    out.mkdir()
    (out / "F1_accuracy_vs_sigma.png").write_bytes(b"the committed figure")
    missing = tmp_path / "no" / "such" / "results"
    assert main(["figures", "--results", str(missing), "--out", str(out), "--no-progress"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(missing) in err and "does not exist" in err
    assert [p.name for p in out.iterdir()] == ["F1_accuracy_vs_sigma.png"]
    assert (out / "F1_accuracy_vs_sigma.png").read_bytes() == b"the committed figure"
    with pytest.raises(ResultsError, match=re.escape(str(missing))):
        artefacts.FigureBook(missing, out, "01_optimizers")
    assert [p.name for p in out.iterdir()] == ["F1_accuracy_vs_sigma.png"]
    (tmp_path / "afile").write_text("x")
    assert main(["figures", "--results", str(tmp_path), "--out", str(tmp_path / "afile"), "--no-progress"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "afile" in err and "is a file" in err
    with pytest.raises(ConfigError, match="is a file"):
        artefacts.FigureBook(tmp_path, tmp_path / "afile")


def test_a_shared_tree_that_is_not_there_is_named_as_the_parameter_it_came_from(tmp_path):
    root = write_fake_results(tmp_path / "cpu", sections=("03_lr_l2",))
    with pytest.raises(ResultsError, match=r"^also \(.*shared_dirs\): no folder '.*nope'; name existing"):
        artefacts.FigureBook(root, tmp_path / "out", also=[root, tmp_path / "nope"])
    assert not (tmp_path / "out").exists()


def test_a_damaged_results_tree_is_an_error_not_a_placeholder(tmp_path):
    root = write_fake_results(tmp_path / "cpu", sections=("03_lr_l2",))
    victim = next(root.rglob("run.json"))
    victim.write_text(victim.read_text()[:50])  # truncated
    with pytest.raises(ResultsError, match=re.escape(victim.parent.name)):
        artefacts.FigureBook(root, tmp_path / "out", "03_lr_l2")
    assert not (tmp_path / "out").exists()


# --- the notebooks -----------------------------------------------------------------------------------------
def _png_outputs(ipynb: Path) -> int:
    nb = nbformat.read(ipynb, as_version=4)
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_make_figures_shows_figures_inline_and_counts_its_files_once(tmp_path, capsys):
    """The executed notebook holds image/png outputs (one per figure), and `initmem figures` prints one count."""
    from initmem.cli.commands import main

    root = write_fake_results(tmp_path / "cpu", sections=("01_optimizers", "02_long_training", "03_lr_l2",
                                                          "04_batch_size", "05_depth"))
    out = tmp_path / "figs"
    assert main(["figures", "--results", str(root), "--out", str(out), "--notebooks", "06_forgetting_clocks"]) == 0
    text = capsys.readouterr().out
    counts = re.findall(r"(\d+) files", text)
    # F7, F8, F11, F12, F13 (png, pdf, json each), T6, T7, T8 (md, tex, csv, json) and the index, said the same way
    assert counts == ["28", "28"], text
    assert _png_outputs(out / artefacts.EXECUTED / "06_forgetting_clocks_figures.ipynb") == 5
    for f in FIGURES[6:8]:
        assert not json.loads((out / f"{f}.json").read_text())["missing"]


def test_a_notebook_opened_where_jupyterlab_opens_it_reads_paths_against_the_repository_root(tmp_path):
    """JupyterLab's kernel runs in notebooks/figures/: relative results_dir/out_dir still mean the repository root."""
    from initmem.study.notebook import execute_notebook

    root = write_fake_results(tmp_path / "cpu", sections=("03_lr_l2",))
    out = tmp_path / "out"
    rel = {"results_dir": os.path.relpath(root, ROOT), "out_dir": os.path.relpath(out, ROOT)}
    assert not rel["results_dir"].startswith("/")
    execute_notebook(artefacts.NOTEBOOK_DIR / "03_lr_l2_figures.py", tmp_path / "executed.ipynb", rel,
                     cwd=artefacts.NOTEBOOK_DIR, log_output=False)
    assert (out / "F5_spread_lr_l2.png").is_file() and (out / "tables" / "T3_lr_l2.csv").is_file()
    assert not (artefacts.NOTEBOOK_DIR / rel["out_dir"]).exists()
    assert _png_outputs(tmp_path / "executed.ipynb") == 1
    assert json.loads((out / "F5_spread_lr_l2.json").read_text())["results_dir"] == rel["results_dir"]


def test_every_figure_notebook_says_how_its_paths_are_read():
    import jupytext

    for path in artefacts.figure_notebooks():
        first = next(c for c in jupytext.read(path).cells if c.cell_type == "markdown")
        assert "relative to the repository root" in " ".join(first.source.split()), path.name


def test_compute_is_apart_from_writing_and_imports_no_torch():
    """tables/plots compute (no writer, no stamp, no notebook helper, no torch, nothing of figures); figures writes."""
    code = ("import sys, initmem.analysis.plots as p, initmem.analysis.tables as t\n"
            "assert not {'torch', 'initmem.engine.trainer', 'initmem.figures.artefacts'} & set(sys.modules), \\\n"
            "    sorted(sys.modules)\n"
            "for m in (t, p):\n"
            "    assert not [n for n in ('Stamp', 'save_table', 'save_figure', 'Section', 'write_sidecar',\n"
            "                            'markdown_table', 'tex_table', 'FigureBook') if hasattr(m, n)], m\n"
            "import initmem.figures.artefacts as f\n"
            "assert 'torch' not in sys.modules\n"
            "assert all(hasattr(f, n) for n in ('Stamp', 'save_table', 'save_figure', 'FigureBook', 'write_index'))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("plots", "instrument_plots", "instrument_tables", "point_report"):  # what they use of each other
        text = (ROOT / "initmem" / "analysis" / f"{name}.py").read_text()  # is public
        assert not re.search(r"\b(tables|plots)\._", text), name


def test_the_stamp_names_the_data_by_what_it_is_and_a_modified_tree_only_when_true(runs):
    assert artefacts.data_name("imagefolder-tar:../datasets/cifar10-jpeg.tar.gz") == "CIFAR-10 (JPEG archive)"
    assert artefacts.data_name("torchvision:/home/me/data") == "CIFAR-10 (torchvision)"
    assert artefacts.data_name("synthetic:2000+500:seed0") == "synthetic:2000+500:seed0"
    assert artefacts.data_name("elsewhere:/home/me/x.npz") == "elsewhere"  # never a path of the machine
    r = runs.assign(data_source="imagefolder-tar:/home/me/cifar10-jpeg.tar.gz", data_hash="1a2b3c4d5e6f7a8b",
                    git_commit="abcdef0123456789", git_dirty=False, git_diff_known=True)
    clean = artefacts.Stamp.of(r, "results/cpu", ["01_optimizers"]).caption()
    assert "data CIFAR-10 (JPEG archive) sha256:1a2b3c4d5e6f" in clean and "/home/me" not in clean
    assert "uncommitted" not in clean
    dirty = r.assign(git_dirty=[k < 3 for k in range(len(r))], git_diff_known=[k < 1 for k in range(len(r))])
    caption = artefacts.Stamp.of(dirty, "results/cpu", ["01_optimizers"]).caption()
    assert (f"3 of {len(r)} runs trained with uncommitted changes: 1 recorded in run.json, 2 not, whose code is not "
            "exactly these commits (docs/results.md#provenance)") in caption  # what it means, where to read more
    unknown = artefacts.Stamp.of(dirty.assign(git_diff_known=False), "results/cpu", ["01_optimizers"]).caption()
    assert "3 of 12 runs trained with uncommitted changes that were not recorded, so their code" in unknown
    known = artefacts.Stamp.of(dirty.assign(git_diff_known=True), "results/cpu", ["01_optimizers"]).caption()
    assert "uncommitted changes, each recorded in its run.json" in known and "not exactly" not in known
