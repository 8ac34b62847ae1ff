"""The study's tables: pure functions from `results.load_runs` / `load_histories` frames to DataFrames, and the
writer that turns one into `<out>/tables/<name>.{md,tex,csv,json}`, stamped with where its numbers came from.

Vocabulary. A *configuration* is a set of runs sharing everything but σ_w and seed (and the fields that cannot
change a result, `train.RUN_ID_EXCLUDE`): one sweep point. Its *spread* is `experiment.point_summary`'s, so the
figures and the section notebooks agree: best minus worst across σ_w of the per-σ_w mean over seeds (pp), with
the seed-to-seed standard deviation of the per-seed spreads in a `<column>_std` companion when there is more than
one seed. Accuracies in tables are percentages. Every column `c` with a `c_std` companion is
printed as "c ± c_std" in the md/tex files; the csv keeps the numbers.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from initmem import metrics
from initmem.errors import ResultsError

CLOCKS = ("T_SGD", "T_L2", "T_adapt")
OPTIMIZER_ORDER = ("sgd", "sgd_momentum", "adam", "adamw", "muon")
ARCH_ORDER = ("resnet9", "resnet20", "resnet56", "resnet110")
# which varying field names a configuration first (labels are as short as tells them apart)
LABEL_PRIORITY = ("optimizer", "arch", "batch_size", "lr", "weight_decay", "momentum", "width", "epochs",
                  "schedule", "augment", "n_train")
SHORT = {"batch_size": "b", "weight_decay": "wd", "momentum": "mom", "epochs": "ep", "n_train": "n"}


class NoResults(ResultsError):
    """A table or figure has nothing to show; the artefact becomes a 'no results' placeholder saying why."""


@cache
def _config_key() -> tuple[str, ...]:
    """TrainConfig fields that tell configurations apart: all but σ_w, seed and the result-neutral ones."""
    import dataclasses

    from initmem.config import RUN_ID_EXCLUDE, TrainConfig

    return tuple(f.name for f in dataclasses.fields(TrainConfig)
                 if f.name not in (*RUN_ID_EXCLUDE, "sigma_w", "seed"))


def _hashable(v):
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(_hashable(x) for x in v)
    if v is None or (np.isscalar(v) and pd.isna(v)):
        return None  # NaN != NaN: a missing value must compare equal to itself to group
    return v.item() if isinstance(v, np.generic) else v


def _rank(column: str, v) -> tuple:
    order = {"optimizer": OPTIMIZER_ORDER, "arch": ARCH_ORDER}.get(column, ())
    if v is None:
        return (0, 0.0, "")
    if v in order:
        return (1, float(order.index(v)), "")
    if isinstance(v, (bool, int, float)):
        return (1, float(v), "")
    return (2, 0.0, str(v))


def fmt_value(v) -> str:
    """A config value as a label shows it: 0.001 → '0.001', 1e-05 → '1e-05', 128.0 → '128'."""
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def configurations(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with a `config` id (0, 1, … in display order: section, then optimiser/arch order, then values) and a
    short `label` naming what tells it apart from the other configurations of its section ('adam',
    'lr=0.05 wd=0.0001'). `attrs["label_columns"]` maps each section to the fields its labels use."""
    if runs.empty:
        raise NoResults("no runs")
    cols = ["section", *(c for c in _config_key() if c in runs.columns)]
    keys = [tuple(_hashable(r[c]) for c in cols) for r in runs[cols].to_dict("records")]
    order = sorted(set(keys), key=lambda k: tuple(_rank(c, v) for c, v in zip(cols, k, strict=True)))
    ids = {k: i for i, k in enumerate(order)}
    labels, label_columns = {}, {}
    for section in dict.fromkeys(k[0] for k in order):
        ks = [k for k in order if k[0] == section]
        chosen, distinct = [], 1
        for c in [*LABEL_PRIORITY, *sorted(cols)]:
            if c not in cols[1:] or c in chosen or len({k[cols.index(c)] for k in ks}) < 2:
                continue
            n = len({tuple(k[cols.index(x)] for x in [*chosen, c]) for k in ks})
            if n > distinct:
                chosen, distinct = [*chosen, c], n
            if distinct == len(ks):
                break
        if not chosen and "optimizer" in cols:
            chosen = ["optimizer"]
        chosen = [c for c in cols if c in chosen]  # table columns in config-field order (arch before optimizer)
        label_columns[section] = chosen
        for k in ks:
            labels[k] = " ".join(fmt_value(k[cols.index(c)]) if c in ("optimizer", "arch")
                                 else f"{SHORT.get(c, c)}={fmt_value(k[cols.index(c)])}" for c in chosen) or section
    out = runs.assign(config=[ids[k] for k in keys], label=[labels[k] for k in keys])
    out = out.sort_values(["config", "sigma_w", "seed"], kind="stable").reset_index(drop=True)
    out.attrs["label_columns"] = label_columns
    return out


def _label_columns(confs: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(c for cs in confs.attrs["label_columns"].values() for c in cs)) or ["label"]


def sigma_column(sigma_w: float) -> str:
    return f"sigma_w={sigma_w:g}"


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    xs = [float(x) for x in xs if x is not None and not math.isnan(float(x))]
    if not xs:
        return math.nan, math.nan
    return float(np.mean(xs)), float(np.std(xs, ddof=1)) if len(xs) > 1 else math.nan


def point_spread(group: pd.DataFrame) -> tuple[float, float]:
    """(spread_pp, seed-to-seed std) of one configuration's runs, from `experiment.point_summary`; NaN where it
    has none (no accuracy, or a single seed)."""
    s = metrics.point_summary(group)
    return tuple(math.nan if s[k] is None else float(s[k]) for k in ("spread_pp", "spread_seed_std_pp"))


def _multi_seed(confs: pd.DataFrame) -> bool:
    return bool(confs.groupby(["config", "sigma_w"])["seed"].nunique().max() > 1)


def _sigma_cells(g: pd.DataFrame, sigmas: Iterable[float], multi: bool, value: str = "test_acc_at_best") -> dict:
    """Per σ_w: the mean over seeds of `value` in % (and its std when `multi`)."""
    row = {}
    for s in sigmas:
        m, sd = _mean_std(100 * g.loc[g["sigma_w"] == s, value].astype(float))
        row[sigma_column(s)] = m
        if multi:
            row[sigma_column(s) + "_std"] = sd
    return row


def _spread_cells(g: pd.DataFrame, multi: bool) -> dict:
    m, sd = point_spread(g)
    return {"spread_pp": m, "spread_pp_std": sd} if multi else {"spread_pp": m}


def _lead(g: pd.DataFrame, columns: list[str]) -> dict:
    first = g.iloc[0]
    return {c: (first[c] if c in g.columns else first["label"]) for c in columns}


_FORMATS = {"sigma_w=*": "{:.1f}", "spread_pp*": "{:.1f}", "*_pp*": "{:.1f}", "tau_interp": "{:.0f}",
            "norm_ratio*": "{:.3g}", "radial_slope": "{:.2f}", "epoch": "{:.0f}"}


def _finish(df: pd.DataFrame, formats: dict | None = None) -> pd.DataFrame:
    df.attrs["formats"] = {**_FORMATS, **(formats or {})}
    return df


# --- T1 ----------------------------------------------------------------------------------------------------
def optimizer_table(runs: pd.DataFrame) -> pd.DataFrame:
    """T1: per configuration (section 01: per optimiser) the test accuracy (%) at the best-validation-loss epoch
    per σ_w, the spread (pp), how many runs interpolated, the median interpolation epoch, the range of the
    final-to-initial weight-norm ratio and the radial-memory slope (`metrics.radial_memory`)."""
    confs = configurations(runs)
    lead, sigmas, multi = _label_columns(confs), sorted(confs["sigma_w"].unique()), _multi_seed(confs)
    rows = []
    for _, g in confs.groupby("config", sort=True):
        tau = g["tau_interp"].dropna().astype(float)
        ratio = g["final_weight_norm"].astype(float) / g["init_weight_norm"].astype(float)
        rows.append({**_lead(g, lead), **_sigma_cells(g, sigmas, multi), **_spread_cells(g, multi),
                     "interpolated": f"{len(tau)}/{len(g)}",
                     "tau_interp": float(tau.median()) if len(tau) else math.nan,
                     "norm_ratio_min": float(ratio.min()), "norm_ratio_max": float(ratio.max()),
                     "radial_slope": _radial_slope(g)})
    return _finish(pd.DataFrame(rows))


def _radial_slope(g: pd.DataFrame) -> float:
    ok = g[["init_weight_norm", "final_weight_norm"]].dropna().astype(float)
    ok = ok[(ok > 0).all(axis=1)]
    if ok["init_weight_norm"].nunique() < 2:
        return math.nan  # a slope needs two initial scales
    return metrics.radial_memory(ok["init_weight_norm"].to_numpy(), ok["final_weight_norm"].to_numpy())


# --- T2 ----------------------------------------------------------------------------------------------------
def default_marks(max_epoch: int) -> list[int]:
    """1-2-5 epoch marks from max_epoch/50 up, plus max_epoch itself: 200 → [5, 10, 20, 50, 100, 200]."""
    marks = [k * 10**e for e in range(8) for k in (1, 2, 5)]
    return [m for m in marks if max_epoch / 50 <= m < max_epoch] + [int(max_epoch)]


def long_training_table(runs: pd.DataFrame, histories: pd.DataFrame, marks: Sequence[int] | None = None
                        ) -> pd.DataFrame:
    """T2: per configuration and epoch mark m, the test accuracy (%) per σ_w and the spread (pp), as if training
    had stopped at m: each run's accuracy is `metrics.test_at_best(history, upto=m)` (best validation loss among
    epochs 1..m), and T_SGD and T_adapt are the clocks reached at m (mean over runs): time in epochs grows, T_SGD
    stays small.
    Marks default to `default_marks` of the longest history; a configuration gets the marks up to its own last
    epoch."""
    confs = configurations(runs)
    h = histories[histories["run_id"].isin(confs["run_id"]) & (histories["epoch"] >= 1)]
    if h.empty:
        raise NoResults("no training history")
    by_run = {rid: hh.sort_values("epoch") for rid, hh in h.groupby("run_id")}
    marks = default_marks(int(h["epoch"].max())) if marks is None else sorted({int(m) for m in marks})
    lead, sigmas, multi = _label_columns(confs), sorted(confs["sigma_w"].unique()), _multi_seed(confs)
    rows = []
    for _, g in confs.groupby("config", sort=True):
        g = g[g["run_id"].isin(by_run)]
        if g.empty:
            continue
        last = max(int(by_run[r]["epoch"].max()) for r in g["run_id"])
        for m in [m for m in marks if m <= last]:
            at = g.assign(test_acc_at_best=[metrics.test_at_best(by_run[r], upto=m) for r in g["run_id"]])
            row = {**_lead(g, lead), "epoch": m, **_sigma_cells(at, sigmas, multi), **_spread_cells(at, multi)}
            for clock in ("T_SGD", "T_adapt"):
                if clock in h.columns:
                    row[clock] = float(np.mean([by_run[r].loc[by_run[r]["epoch"] <= m, clock].iloc[-1]
                                                for r in g["run_id"]]))
            rows.append(row)
    return _finish(pd.DataFrame(rows), {"T_SGD": "{:.3g}", "T_adapt": "{:.3g}"})


# --- per-configuration spreads: T3, T4, F4, F5, F7, F8 ------------------------------------------------------
def config_spreads(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: section, config, label, its config fields, n_runs, n_sigma, n_seeds, spread_pp
    and spread_pp_std (`point_spread`), the clocks (T_SGD, T_L2, T_adapt: the median over its runs of
    the clock at the end of training, identical across σ_w unless a run diverged early), n_interp and the repair
    gap in pp over the runs that interpolated (mean, min, max; NaN when none did)."""
    confs = configurations(runs)
    key = [c for c in _config_key() if c in confs.columns]
    rows = []
    for cid, g in confs.groupby("config", sort=True):
        m, sd = point_spread(g)
        gap = 100 * g["repair_gap"].dropna().astype(float)
        row = {"section": g["section"].iloc[0], "config": cid, "label": g["label"].iloc[0],
               **{c: g[c].iloc[0] for c in key},
               "n_runs": len(g), "n_sigma": g["sigma_w"].nunique(), "n_seeds": g["seed"].nunique(),
               "spread_pp": m, "spread_pp_std": sd,
               **{c: float(g[c].astype(float).median()) if c in g else math.nan for c in CLOCKS},
               "n_interp": int(g["tau_interp"].notna().sum()),
               "repair_gap_pp": float(gap.mean()) if len(gap) else math.nan,
               "repair_gap_pp_min": float(gap.min()) if len(gap) else math.nan,
               "repair_gap_pp_max": float(gap.max()) if len(gap) else math.nan}
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["label_columns"] = confs.attrs["label_columns"]
    return out


def spread_pivot(runs: pd.DataFrame, index: str, columns: str) -> pd.DataFrame:
    """Spreads (pp) with one row per value of the config field `index` (and of any other field that tells the
    section's configurations apart) and one column per value of `columns` ('wd=0.0001', or the optimiser's name);
    `_std` companions with several seeds."""
    cs = config_spreads(runs)
    lead = list(dict.fromkeys([index, *(c for c in _label_columns(cs) if c != columns and c in cs.columns)]))
    multi = bool((cs["n_seeds"] > 1).any())
    values = sorted(cs[columns].map(_hashable).unique(), key=lambda v: _rank(columns, v))
    name = (lambda v: str(v)) if columns in ("optimizer", "arch") else \
        (lambda v: f"{SHORT.get(columns, columns)}={fmt_value(v)}")
    rows = {}
    for r in cs.to_dict("records"):
        key = tuple(_hashable(r[c]) for c in lead)
        row = rows.setdefault(key, {c: r[c] for c in lead})
        col = name(_hashable(r[columns]))
        if col in row:
            where = dict(zip(lead, key, strict=True))
            raise ResultsError(f"two configurations share {where} and {columns}={r[columns]!r}; a spread table "
                               "needs one per cell")
        row[col] = r["spread_pp"]
        if multi:
            row[col + "_std"] = r["spread_pp_std"]
    order = sorted(rows, key=lambda k: tuple(_rank(c, v) for c, v in zip(lead, k, strict=True)))
    cells = [name(v) + s for v in values for s in (("", "_std") if multi else ("",))]
    df = pd.DataFrame([rows[k] for k in order]).reindex(columns=[*lead, *cells])
    return _finish(df, {name(v) + "*": "{:.1f}" for v in values})


def lr_l2_table(runs: pd.DataFrame) -> pd.DataFrame:
    """T3: SGD spread (pp) over the learning-rate × L2 (weight_decay) grid: rows lr, columns weight decay.
    Only plain-SGD runs when there are any (the section's subject)."""
    sgd = runs[runs["optimizer"] == "sgd"]
    return spread_pivot(sgd if len(sgd) else runs, "lr", "weight_decay")


def batch_size_table(runs: pd.DataFrame) -> pd.DataFrame:
    """T4: spread (pp) by batch size (rows) for each optimiser (columns)."""
    return spread_pivot(runs, "batch_size", "optimizer")


# --- T5 ----------------------------------------------------------------------------------------------------
def depth_table(runs: pd.DataFrame) -> pd.DataFrame:
    """T5: per architecture × optimiser and σ_w, 'test acc % / interpolation epoch' ('never' when no seed
    interpolated; the median epoch and 'k/n seeds' when only some did), with the count of interpolating runs and
    the spread (pp)."""
    confs = configurations(runs)
    lead = list(dict.fromkeys(["arch", "optimizer", *_label_columns(confs)]))  # always name both
    sigmas, multi = sorted(confs["sigma_w"].unique()), _multi_seed(confs)
    rows = []
    for _, g in confs.groupby("config", sort=True):
        row = _lead(g, lead)
        for s in sigmas:
            r = g[g["sigma_w"] == s]
            if r.empty:
                row[sigma_column(s)] = ""
                continue
            acc, tau = 100 * r["test_acc_at_best"].astype(float).mean(), r["tau_interp"].dropna().astype(float)
            when = "never" if tau.empty else f"{tau.median():.0f}"
            if 0 < len(tau) < len(r):
                when += f" ({len(tau)}/{len(r)})"
            row[sigma_column(s)] = f"{acc:.1f} / {when}"
        n = int(g["tau_interp"].notna().sum())
        rows.append({**row, "interpolated": f"{n}/{len(g)}", **_spread_cells(g, multi)})
    return _finish(pd.DataFrame(rows))


# --- stamps ------------------------------------------------------------------------------------------------
def _display_path(path: str | Path) -> str:
    """`path` relative to the working folder when inside it (captions must not depend on the machine)."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(p)


@dataclass(frozen=True)
class Stamp:
    """Where an artefact's numbers came from: printed as its caption and stored in its sidecar JSON."""

    profile: str
    n_runs: int
    data_sources: tuple[str, ...]
    git_commits: tuple[str, ...]
    results_dir: str
    sections: tuple[str, ...]

    @classmethod
    def of(cls, runs: pd.DataFrame, results_dir: str | Path, sections: Sequence[str]) -> Stamp:
        """Profile = a `profile` column when load_runs has one, else the results folder's name."""
        def values(col: str) -> tuple[str, ...]:
            return tuple(sorted({str(v) for v in runs[col].dropna()})) if col in runs.columns else ()

        profile = ", ".join(values("profile")) or Path(results_dir).resolve().name
        return cls(profile, len(runs), values("data_source"), values("git_commit"), _display_path(results_dir),
                   tuple(sections))

    def caption(self) -> str:
        commits = ", ".join(c[:10] for c in self.git_commits[:3]) or "unknown"
        if len(self.git_commits) > 3:
            commits += f" (+{len(self.git_commits) - 3} more)"
        return (f"profile {self.profile}; {self.n_runs} runs ({', '.join(self.sections) or 'all sections'}); "
                f"data {', '.join(self.data_sources) or 'unknown'}; commit {commits}; source {self.results_dir}")

    def sidecar(self, name: str, kind: str, title: str, files: Sequence[str], missing: bool = False) -> dict:
        return {"name": name, "kind": kind, "title": title, "caption": self.caption(), "profile": self.profile,
                "n_runs": self.n_runs, "sections": list(self.sections), "data_sources": list(self.data_sources),
                "git_commits": list(self.git_commits), "results_dir": self.results_dir, "files": list(files),
                "missing": missing, "generated_at": datetime.now(UTC).isoformat(timespec="seconds")}


def write_sidecar(path: Path, record: dict) -> None:
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


# --- writing -----------------------------------------------------------------------------------------------
_HEADERS = {"sigma_w": "σ_w", "tau_interp": "τ_interp", "weight_decay": "wd", "batch_size": "b",
            "spread_pp": "spread (pp)", "norm_ratio_min": "norm ratio min", "norm_ratio_max": "norm ratio max",
            "radial_slope": "radial slope"}


def _header(col: str) -> str:
    if col.startswith("sigma_w="):
        return "σ_w=" + col.split("=", 1)[1]
    return _HEADERS.get(col, col)


def _cell(v, fmt: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (bool, np.bool_, str)):
        return str(v)
    if isinstance(v, (int, np.integer)) or (isinstance(v, float) and v.is_integer() and fmt == "{:.4g}"):
        return str(int(v))
    return fmt.format(v)


def display_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and string cells as the md/tex files show them: `c_std` companions folded into 'c ± std'."""
    formats = df.attrs.get("formats", {})
    cols = [c for c in df.columns if not (c.endswith("_std") and c[:-4] in df.columns)]

    def fmt(c: str) -> str:
        return next((f for pat, f in formats.items() if fnmatch.fnmatchcase(c, pat)), "{:.4g}")

    rows = []
    for r in df.to_dict("records"):
        cells = []
        for c in cols:
            s = _cell(r[c], fmt(c))
            sd = r.get(c + "_std")
            if sd is not None and not (isinstance(sd, float) and math.isnan(sd)) and s != "–":
                s += " ± " + _cell(sd, fmt(c))
            cells.append(s)
        rows.append(cells)
    return [_header(c) for c in cols], rows


_TEX = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
        "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}", "σ_w": r"$\sigma_w$",
        "τ_interp": r"$\tau_\mathrm{interp}$", "σ": r"$\sigma$", "τ": r"$\tau$", "λ": r"$\lambda$", "η": r"$\eta$",
        "±": r"$\pm$", "×": r"$\times$", "–": "--", "—": "---"}
_TEX_RE = re.compile("|".join(re.escape(k) for k in sorted(_TEX, key=len, reverse=True)))


def tex_escape(text: str) -> str:
    """LaTeX-safe text: special characters escaped, the study's Greek letters and dashes as LaTeX."""
    return _TEX_RE.sub(lambda m: _TEX[m.group(0)], str(text))


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), "|" + "|".join("---" for _ in headers) + "|", *map(line, rows)])


def tex_table(headers: list[str], rows: list[list[str]], caption: str, label: str) -> str:
    """A booktabs table (needs \\usepackage{booktabs}); first column left-aligned, the others right."""
    spec = "l" + "r" * (len(headers) - 1)
    return "\n".join([
        r"\begin{table}[htbp]", r"\centering", r"\small", rf"\caption{{{tex_escape(caption)}}}",
        rf"\label{{tab:{label}}}", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
        " & ".join(map(tex_escape, headers)) + r" \\", r"\midrule",
        *(" & ".join(map(tex_escape, r)) + r" \\" for r in rows),
        r"\bottomrule", r"\end{tabular}", r"\end{table}", ""])


def save_table(df: pd.DataFrame | None, name: str, out_dir: str | Path, stamp: Stamp, title: str,
               message: str | None = None) -> list[Path]:
    """Write `<out_dir>/tables/<name>.{md,tex,csv,json}`; with `message` (and no df) a table that says only that.
    Returns the paths written."""
    folder = Path(out_dir) / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    caption = f"{title} [{stamp.caption()}]"
    paths = [folder / f"{name}.{ext}" for ext in ("md", "tex", "csv", "json")]
    if message is not None:
        paths[0].write_text(f"**{name}.** {title}\n\n{message}\n\n*{stamp.caption()}*\n", encoding="utf-8")
        paths[1].write_text(f"% {name}: {message}\n\\begin{{table}}[htbp]\\centering\n"
                            f"\\caption{{{tex_escape(caption)}}}\\label{{tab:{name}}}\n"
                            f"\\emph{{{tex_escape(message)}}}\n\\end{{table}}\n", encoding="utf-8")
        pd.DataFrame({"message": [message]}).to_csv(paths[2], index=False, lineterminator="\n")
    else:
        headers, rows = display_rows(df)
        paths[0].write_text(f"**{name}.** {title}\n\n{markdown_table(headers, rows)}\n\n*{stamp.caption()}*\n",
                            encoding="utf-8")
        paths[1].write_text(f"% {name}: generated by initmem.tables from {stamp.results_dir}; do not edit\n"
                            + tex_table(headers, rows, caption, name), encoding="utf-8")
        df.to_csv(paths[2], index=False, float_format="%.6g", lineterminator="\n")
    write_sidecar(paths[3], stamp.sidecar(name, "table", title, [p.name for p in paths[:3]],
                                          missing=message is not None))
    return paths
