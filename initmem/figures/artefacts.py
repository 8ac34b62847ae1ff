"""Writing the study's artefacts (atomic, byte-stable: no timestamp, no path of the machine for results inside the
repository), and the command for all of them. A figure notebook (`FigureBook`) reads relative paths against the
repository root wherever its kernel runs; `make_figures` against the working folder, as a shell does."""

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from initmem.analysis import cells, display, style
from initmem.checks import RESULTS_ROOT
from initmem.errors import ConfigError, InitmemError, NoResults, ResultsError
from initmem.figures import layout
from initmem.figures.paths import (  # re-exported: figures.COMMITTED_SETS is what `make figures` makes
    COMMITTED_SETS,
    EXECUTED,
    INDEX_HEAD,
    MARKER,
    OVERWRITE_ENV,
    ROOT,
    caption_links,
    check_folders,
    check_out,
    clear_set,
    committed_set,
    default_out,
    display_path,
    repo_path,
    resolve,
    sidecars,
)
from initmem.store.files import atomic_write

NOTEBOOK_DIR = ROOT / "notebooks" / "figures"
PDF_METADATA = {"Creator": None, "Producer": None, "CreationDate": None, "ModDate": None}  # no dates: same bytes
write_text = atomic_write  # text (UTF-8, its own line ends) written atomically


PROVENANCE_DOC = "docs/results.md#provenance"  # what a run's provenance records and what a modified tree means
DATA_KINDS = {"imagefolder-tar": "CIFAR-10 (JPEG archive)", "imagefolder": "CIFAR-10 (JPEG folder)",
              "torchvision": "CIFAR-10 (torchvision)"}


def data_name(source: str) -> str:
    """A run's `data_source` as a reader names it, without the machine's path: 'CIFAR-10 (JPEG archive)'."""
    kind, _, rest = source.partition(":")
    if kind in DATA_KINDS:
        return DATA_KINDS[kind]
    return source if "/" not in rest and "\\" not in rest else kind


def tree_profile(runs: pd.DataFrame, results_dir: str | Path, sections: Sequence[str]) -> str:
    """The profile a results tree's runs were swept with (runs do not record it): the tree's folder name where that
    profile holds them all, or where no profile of their sections' params files does (a tree of hand-made runs),
    else the profile that holds them all (`Section.profiles_holding`), e.g. cpu_w025 for results/cpu_w025.
    No `sections`: every section of the runs (a notebook reading the whole tree)."""
    from initmem.study.params import load_section
    name = repo_path(results_dir).name
    try:
        held = [set(load_section(ROOT / "params" / f"{s}.yaml").profiles_holding(set(g["run_id"])))
                for s, g in runs.groupby("section") if not sections or s in sections]
    except (InitmemError, OSError):  # a section without a params file here: nothing to match against
        return name
    common = set.intersection(*held) if held else set()
    return name if name in common or not common else sorted(common)[0]


@dataclass(frozen=True)
class Stamp:
    """Where an artefact's numbers came from: printed as its caption and stored in its sidecar JSON."""

    profile: str
    n_runs: int
    data_sources: tuple[str, ...]
    git_commits: tuple[str, ...]
    results_dir: str
    sections: tuple[str, ...]
    modified: int = 0  # runs trained from a modified working tree
    modified_unknown: int = 0  # ... of which the modification was not recorded (provenance.UNKNOWN_DIFF)

    @classmethod
    def of(cls, runs: pd.DataFrame, results_dir: str | Path, sections: Sequence[str]) -> Self:
        """Profile: the runs' `profile` column, else `tree_profile`; a data source with its `data_hash`."""
        def values(col: str) -> tuple[str, ...]:
            return tuple(sorted({str(v) for v in runs[col].dropna()})) if col in runs.columns else ()

        def source(row) -> str:
            h = row.get("data_hash")
            return data_name(str(row["data_source"])) + (f" sha256:{h[:12]}" if isinstance(h, str) and h else "")

        sources = tuple(sorted({source(r) for _, r in runs.iterrows() if pd.notna(r["data_source"])})) if (
            "data_source" in runs.columns) else ()
        dirty = runs["git_dirty"].eq(True) if "git_dirty" in runs.columns else pd.Series(False, index=runs.index)
        unknown = dirty & ~runs["git_diff_known"].astype(bool) if "git_diff_known" in runs.columns else dirty
        profile = ", ".join(values("profile")) or tree_profile(runs, results_dir, sections)
        return cls(profile, len(runs), sources, values("git_commit"), display_path(results_dir), tuple(sections),
                   int(dirty.sum()), int(unknown.sum()))

    def caption(self) -> str:
        """One line a reader can use: the data (what it is, its hash), profile, runs, code, where the runs are."""
        commits = ", ".join(c[:10] for c in self.git_commits[:3]) or "unknown"
        if len(self.git_commits) > 3:
            commits += f" (+{len(self.git_commits) - 3} more)"
        code = f"code {commits}"
        if self.modified:  # which code made them: the commit, and whether the change on top of it is recorded
            code += f"; {self.modified} of {self.n_runs} runs trained with uncommitted changes" + self._changes()
        return (f"data {', '.join(self.data_sources) or 'unknown'} · profile {self.profile}, {self.n_runs} runs "
                f"({', '.join(self.sections) or 'all sections'}) · {code} · {self.results_dir}")

    def _changes(self) -> str:
        """What a reader can know of the modified-tree runs' code: each change in its run.json, or not recorded
        (`provenance.UNKNOWN_DIFF`: that code is no commit's, said with where to read more)."""
        known = self.modified - self.modified_unknown
        if not self.modified_unknown:
            return ", each recorded in its run.json (provenance.git_diff)"
        return ((f": {known} recorded in run.json, {self.modified_unknown} not, whose" if known
                 else " that were not recorded, so their") + f" code is not exactly these commits ({PROVENANCE_DOC})")

    def sidecar(self, name: str, kind: str, title: str, files: Sequence[str], missing: bool = False,
                description: str = "") -> dict:
        """One artefact's sidecar record (no generation time: the same results give the same bytes); `description`:
        the caption a paper prints beside a figure (its PNG holds only the one-line `title`)."""
        return {"name": name, "kind": kind, "title": title, "description": description, "caption": self.caption(),
                "profile": self.profile,
                "n_runs": self.n_runs, "sections": list(self.sections), "data_sources": list(self.data_sources),
                "git_commits": list(self.git_commits), "modified_tree_runs": self.modified,
                "modified_unknown_runs": self.modified_unknown, "results_dir": self.results_dir,
                "files": list(files), "missing": missing}


def write_sidecar(path: str | Path, record: dict) -> Path:
    """Write an artefact's sidecar JSON atomically."""
    return atomic_write(path, json.dumps(record, indent=2) + "\n")


def _remove_temp_files(out: Path) -> None:
    """Temp files a killed run left behind (`.<name>.<random>.tmp`)."""
    for tmp in [*out.glob(".*.tmp"), *(out / "tables").glob(".*.tmp")]:
        tmp.unlink(missing_ok=True)


def save_table(df: pd.DataFrame | None, name: str, out_dir: str | Path, stamp: Stamp, title: str,
               message: str | None = None) -> list[Path]:
    """Write `<out_dir>/tables/<name>.{md,tex,csv,json}` (with `message`, a table saying only that); the paths."""
    folder = Path(out_dir) / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    caption = f"{caption_links(title, 'text')} [{stamp.caption()}]"
    md, tex, csv, meta = (folder / f"{name}.{ext}" for ext in ("md", "tex", "csv", "json"))
    if message is not None:
        body, table = message, (f"% {name}: {message}\n\\begin{{table}}[htbp]\\centering\n"
                                f"\\caption{{{display.tex_escape(caption)}}}\\label{{tab:{name}}}\n"
                                f"\\emph{{{display.tex_escape(message)}}}\n\\end{{table}}\n")
        data = pd.DataFrame({"message": [message]}).to_csv(index=False, lineterminator="\n")
    else:
        headers, rows = display.display_rows(df)
        body = display.markdown_table(headers, rows)
        table = (f"% {name}: generated by initmem.figures from {stamp.results_dir}; do not edit\n"
                 + display.tex_table(headers, rows, caption, name))
        data = df.to_csv(index=False, float_format="%.6g", lineterminator="\n")
    atomic_write(md, f"**{name}.** {caption_links(title, 'md', folder)}\n\n{body}\n\n*{stamp.caption()}*\n")
    atomic_write(tex, table)
    atomic_write(csv, data)
    write_sidecar(meta, stamp.sidecar(name, "table", title, [md.name, tex.name, csv.name], missing=message is not None))
    return [md, tex, csv, meta]


def _savefig(fig: Figure, fmt: str) -> Callable[[IO[bytes]], None]:
    meta = style.PNG_METADATA if fmt == "png" else PDF_METADATA
    return lambda f: fig.savefig(f, format=fmt, dpi=style.DPI, metadata=meta)


def _freeze_layout(fig: Figure) -> None:
    """Solve the constrained layout once and fix every axes at its position rounded to 1e-6: the solver's last-bit
    noise differs between processes and, on a rounding boundary of the PDF's decimals, changes the bytes."""
    if fig.get_layout_engine() is None:
        return
    fig.set_dpi(style.DPI)  # text is measured at the DPI it is drawn at (hinting makes widths differ per DPI)
    fig.draw_without_rendering()
    for ax in fig.axes:
        ax.set_position([round(v, 6) for v in ax.get_position().bounds])
    fig.set_layout_engine("none")


def save_figure(fig: Figure, name: str, out_dir: str | Path, stamp: Stamp, title: str, missing: bool = False,
                description: str = "") -> list[Path]:
    """Title and stamp `fig`, write `<out_dir>/<name>.{png,pdf,json}` atomically (`description` in the sidecar and
    under the figure inline); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    style.caption_figure(fig, caption_links(title, "text"), f"{name} · {stamp.caption()}")
    fig.description, fig.caption_html = description, caption_links(description, "html", NOTEBOOK_DIR)
    png, pdf, meta = (out / f"{name}.{ext}" for ext in ("png", "pdf", "json"))
    with matplotlib.rc_context(style.STYLE):
        _freeze_layout(fig)
        atomic_write(png, _savefig(fig, "png"))
        atomic_write(pdf, _savefig(fig, "pdf"))
    write_sidecar(meta, stamp.sidecar(name, "figure", title, [png.name, pdf.name], missing=missing,
                                      description=description))
    return [png, pdf, meta]


class FigureBook:
    """One figure notebook's view of a results tree: the runs of `sections` (all when None), their `histories`, the
    `stamp` (printed on opening), and `table`/`show_table`/`figure`, which build (a zero-argument lambda), save and
    return an artefact; no runs, or a builder's `NoResults`, gives a printed placeholder. Bad folders raise first."""

    def __init__(self, results_dir: str | Path, out_dir: str | Path, sections: str | Sequence[str] | None = None):
        from initmem.store.results import load_runs
        self.results_dir, self.out_dir = check_folders(repo_path(results_dir, "results_dir", RESULTS_ROOT),
                                                       repo_path(out_dir, "out_dir"))
        check_out(self.results_dir, self.out_dir, os.environ.get(OVERWRITE_ENV) == "1", committed_only=True)
        self.sections = (sections,) if isinstance(sections, str) else tuple(sections or ())
        runs = load_runs(self.results_dir)
        self.runs = (runs[runs["section"].isin(self.sections)] if self.sections else runs).reset_index(drop=True)
        self.stamp = Stamp.of(self.runs, results_dir, self.sections)
        where = f"section {', '.join(self.sections)}" if self.sections else "any section"
        self.message = None if len(self.runs) else f"no results for {where} in {self.stamp.results_dir}"
        print(self.stamp.caption())  # where the numbers come from, atop the notebook
        if self.message:
            print(self.message)
        self._histories: pd.DataFrame | None = None
        self.written: list[Path] = []  # figures show inline by themselves (`style.StudyFigure`)
        self.figures: dict[str, Figure] = {}  # what `figure` built, by name (tests check their layout)
        self.tables: dict[str, pd.DataFrame | str] = {}  # what `table` built (or its placeholder), by name
        self._titles: dict[str, str] = {}
        if os.environ.get(layout.CHECK_ENV) == "1":  # make_figures(check_layout=True): legends judged by their handles
            layout.record_legend_handles()

    def param(self, name: str, default=None):
        """A `fixed` value of `params/<section>.yaml` in the results' profile (not in run.json), else `default`."""
        import yaml
        try:
            doc = yaml.safe_load((ROOT / "params" / f"{self.sections[0]}.yaml").read_text(encoding="utf-8"))
            return doc["profiles"][self.stamp.profile]["fixed"].get(name, default)
        except (OSError, IndexError, KeyError, TypeError, AttributeError, yaml.YAMLError):
            return default

    @property
    def histories(self) -> pd.DataFrame:
        """The history rows of `self.runs` (`results.load_histories`)."""
        if self._histories is None:
            from initmem.store.results import load_histories
            folders = [self.results_dir / s for s in self.sections] or [self.results_dir]
            frames = [load_histories(f) for f in folders if f.is_dir()]
            h = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run_id", "epoch"])
            self._histories = h[h["run_id"].isin(self.runs["run_id"])]
        return self._histories

    def _build(self, name: str, build: Callable):
        if self.message:
            return None, self.message
        try:
            return build(), None
        except NoResults as exc:
            msg = f"{name}: {exc} in {self.stamp.results_dir} ({', '.join(self.sections) or 'all sections'})"
            print(msg)
            return None, msg

    def table(self, name: str, build: Callable[[], pd.DataFrame], title: str) -> pd.DataFrame | str:
        """Build and save table `name` (`save_table`); returns the DataFrame (or the placeholder message)."""
        df, msg = self._build(name, build)
        title += "" if msg is not None else cells.interval_note(df, title)
        self.written += save_table(df, name, self.out_dir, self.stamp, title, message=msg)
        self.tables[name] = df if msg is None else msg
        self._titles[name] = title
        return self.tables[name]

    def show_table(self, name: str, build: Callable[[], pd.DataFrame], title: str):
        """`table`, returned as the notebook shows it (`show`)."""
        self.table(name, build, title)
        return self.show(name)

    def show(self, name: str):
        """Table `name` (built by `table`) as the notebook shows it: the written file's cells with its title under
        them (`display.captioned`), a cell on one line; a placeholder message as it is."""
        title = caption_links(f"{name}. {self._titles[name]}", "html", NOTEBOOK_DIR)  # its links as anchors
        return display.captioned(display.display_frame(self.tables[name]), title)

    def figure(self, name: str, build: Callable[[], Figure], title: str, description: str = "") -> Figure:
        """Build and save figure `name` (`save_figure`: `title` one line in the PNG, `description` beside it); returns
        the Figure (or the placeholder) to show inline, the description under it (`style.StudyFigure`)."""
        with matplotlib.rc_context(style.STYLE):
            fig, msg = self._build(name, build)
            if msg is not None:
                fig = style.message_figure(msg)
        self.written += save_figure(fig, name, self.out_dir, self.stamp, title, missing=msg is not None,
                                    description=description)
        self.figures[name] = fig
        if os.environ.get(layout.CHECK_ENV) == "1" and msg is None and (problems := layout.layout_problems(fig)):
            raise ResultsError(f"figure {name} in {display_path(self.out_dir)} has {len(problems)} layout "
                               f"problem(s): {'; '.join(problems)}")
        return fig


FIGURES_SUFFIX = "_figures"  # 01_optimizers_figures.py: its own tab title beside the section's 01_optimizers.py


def figure_notebooks() -> list[Path]:
    """The figure notebooks, in order."""
    return sorted(NOTEBOOK_DIR.glob("[0-9]*.py"))


def _select(notebooks: list[str | Path] | None) -> list[Path]:
    """Figure notebooks by stem ('01_optimizers_figures'), by their section ('01_optimizers') or as .py paths."""
    by_name = {name: p for p in figure_notebooks() for name in (p.stem, p.stem.removesuffix(FIGURES_SUFFIX))}
    if notebooks is None:
        return figure_notebooks()
    if unknown := [str(nb) for nb in notebooks if str(nb) not in by_name and not (
            Path(nb).suffix == ".py" and Path(nb).is_file())]:
        raise ConfigError(f"figure notebook {unknown[0]!r} is unknown: accepted are a .py path or one of "
                          f"{', '.join(p.stem.removesuffix(FIGURES_SUFFIX) for p in figure_notebooks())}")
    return [by_name[str(nb)] if str(nb) in by_name else Path(nb).resolve() for nb in notebooks]


def figure_order(name: str) -> tuple:
    """Sort key of an artefact name in reading order: F2 before F10, T1_optimizers before T9_selection_rules."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def write_index(out: str | Path) -> Path:
    """`<out>/README.md`: every artefact (from its sidecar) with its title and caption, tables first, each group in
    figure order (`figure_order`); no timestamp."""
    out = Path(out)
    recs = sidecars(out)
    lines = [INDEX_HEAD + " (`initmem.figures.make_figures`) from the figure notebooks in",
             "`notebooks/figures/`; do not edit by hand. Each artefact has a sidecar `<name>.json` with its",
             "provenance (profile, runs, data source, git commits of the results).", ""]
    for kind, heading in (("table", "Tables"), ("figure", "Figures")):
        group = sorted((r for r in recs if r["kind"] == kind), key=lambda r: figure_order(r["name"]))
        if not group:
            continue
        lines += [f"## {heading}", ""]
        for r in group:
            rel = r["_dir"].relative_to(out)
            links = ", ".join(f"[{Path(f).suffix[1:]}]({(rel / Path(f).name).as_posix()})" for f in r["files"])
            flag = " **(no results)**" if r.get("missing") else ""
            about = caption_links(f"{r.get('title', '')}. {r.get('description', '')}".rstrip(), "md", out)
            lines += [f"- **{r['name']}**{flag} ({links}): {about}", f"  <br>*{r['caption']}*"]
            png = next((f for f in r["files"] if f.endswith(".png")), None) if kind == "figure" else None
            if png:
                lines += ["", f"  ![{r['name']}]({(rel / png).as_posix()})"]
        lines.append("")
    return atomic_write(out / "README.md", "\n".join(lines))


def make_study_figures(progress: bool = True, check_layout: bool = False) -> list[Path]:
    """`make_figures` for every entry of `COMMITTED_SETS`, in order; the files written, each set's index last."""
    return [f for results, out, nbs in COMMITTED_SETS
            for f in make_figures(ROOT / results, ROOT / out, notebooks=list(nbs) if nbs else None, progress=progress,
                                  check_layout=check_layout)]


def make_figures(results: str | Path = ROOT / "results/cpu", out: str | Path | None = None,
                 notebooks: list[str | Path] | None = None, progress: bool = True, overwrite: bool = False,
                 check_layout: bool = False) -> list[Path]:
    """Execute the figure notebooks (stems or .py paths; default: a committed set's own) over `results` into `out`;
    the files written, the index last. A failing notebook raises NotebookError (its copy in `<out>/.executed/`);
    with `check_layout`, so does a figure with a layout defect (`figures.layout`), naming it."""
    from initmem.study.notebook import execute_notebook
    chosen = _select(notebooks) if notebooks is not None else None  # a bad name first: it needs no folder
    results = resolve("results", results, RESULTS_ROOT)
    results, out = check_folders(results, default_out(results) if out is None else out)
    replace = check_out(results, out, overwrite)  # True: out holds another tree's set, replaced whole (never a mix)
    own = committed_set(results, out)
    chosen = chosen if chosen is not None else _select(list(own) if own else None)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(f"cannot create the figures folder {str(out)!r}: {exc.strerror or exc}") from None
    _remove_temp_files(out)
    if replace:
        clear_set(out)
    atomic_write(out / MARKER, display_path(results) + "\n")  # first: an interrupted run's folder is known as its own
    start = time.time()
    env = {OVERWRITE_ENV: "1"} if overwrite else {}  # the notebooks' own FigureBook check is asked away too
    env |= {layout.CHECK_ENV: "1"} if check_layout else {}
    for nb in chosen:
        t = time.time()
        execute_notebook(nb, out / EXECUTED / f"{nb.stem}.ipynb", {"results_dir": str(results), "out_dir": str(out)},
                         cwd=ROOT, log_output=progress, env=env)
        if progress:
            print(f"figures: {nb.stem} done in {time.time() - t:.1f} s", flush=True)
    files = [*sorted({r["_dir"] / f for r in sidecars(out) for f in [*r["files"], f"{r['name']}.json"]
                      if (r["_dir"] / f).stat().st_mtime >= start - 1}), write_index(out)]
    (out / MARKER).unlink(missing_ok=True)  # the index and the sidecars now say whose set it is
    if progress:
        print(f"figures: {len(chosen)} notebook(s), {len(files)} files (index included) in {display_path(out)} "
              f"({time.time() - start:.1f} s)")
    return files
