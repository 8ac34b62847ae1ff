"""The study's tables T1–T5, from `load_runs` / `load_histories` frames. A *configuration* (one point) is the runs
sharing all but σ_w and seed; its spread is `metrics.point_summary`'s, `<column>_std` its seed std."""

import dataclasses
import math
from collections.abc import Iterable, Sequence
from functools import cache

import numpy as np
import pandas as pd

from initmem import metrics
from initmem.analysis import cells, display
from initmem.analysis.cells import (
    diverged_count,
    diverged_runs,
    finish,
    lead_cells,
    multi_seed,
    sigma_cells,
    spread_cells,
)
from initmem.config import RUN_ID_EXCLUDE, TrainConfig
from initmem.errors import ConfigError, NoResults, ResultsError

CLOCKS = ("T_SGD", "T_L2", "T_adapt")
EFF_CLOCKS = tuple(f"{c}_eff" for c in CLOCKS)  # momentum-aware (metrics.lr_scale); NaN for older runs
OPTIMIZER_ORDER = ("sgd", "sgd_momentum", "adam", "adamw", "muon")
ARCH_ORDER = ("resnet9", "resnet20", "resnet56", "resnet110")
# which varying field names a configuration first (labels are as short as tells them apart)
LABEL_PRIORITY = ("optimizer", "arch", "batch_size", "lr", "weight_decay", "momentum", "width", "epochs",
                  "schedule", "augment", "n_train")
SHORT = {"batch_size": "b", "weight_decay": "wd", "momentum": "mom", "epochs": "ep", "n_train": "n"}
# the paper's spreads (pp; docs/study.md, findings 1, 2) where it reports them: ResNet-9, b = 128, SGD without L2, Muon
PAPER_SPREADS = (({"optimizer": "sgd", "arch": "resnet9", "batch_size": 128, "weight_decay": 0.0}, 26.5),
                 ({"optimizer": "muon", "arch": "resnet9", "batch_size": 128}, 4.0))
PAPER = "arXiv 2605.29152"
CONTRAST = "sgd − max(adaptive)"  # T1's last row: SGD's spread minus the largest of Adam's, AdamW's and Muon's


def paper_spread(config: dict | pd.Series) -> float:
    """The paper's spread (pp, `PAPER_SPREADS`) for a configuration like `config` (a run or row); NaN for none."""
    return next((value for cond, value in PAPER_SPREADS
                 if all(k in config and _hashable(config[k]) == v for k, v in cond.items())), math.nan)


@cache
def _config_key() -> tuple[str, ...]:
    """TrainConfig fields that tell configurations apart: all but σ_w, seed and the result-neutral ones."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig)
                 if f.name not in (*RUN_ID_EXCLUDE, "sigma_w", "seed"))


def _hashable(v):
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(_hashable(x) for x in v)
    if v is None or (np.isscalar(v) and pd.isna(v)):
        return None  # NaN != NaN: a missing value must compare equal to itself to group
    return v.item() if isinstance(v, np.generic) else v


def order_key(column: str, v) -> tuple:
    """Sort key of a config value: None first, optimisers and architectures in study order, numbers, then strings."""
    order = {"optimizer": OPTIMIZER_ORDER, "arch": ARCH_ORDER}.get(column, ())
    if v is None:
        return (0, 0.0, "")
    if v in order or isinstance(v, (bool, int, float)):
        return (1, float(order.index(v) if v in order else v), "")
    return (2, 0.0, str(v))


def fmt_value(v) -> str:
    """A config value as a label shows it: 0.001 → '0.001', 1e-05 → '1e-05', 128.0 → '128'."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def run_histories(runs: pd.DataFrame, histories: pd.DataFrame | None = None, who: str = "",
                  trained: bool = False) -> pd.DataFrame:
    """The rows of `runs` in `histories` (default: their `path`s'); `trained`: epochs >= 1, NoResults for none."""
    if histories is None:
        if "path" not in runs.columns:
            raise ConfigError(f"{who}got runs without a `path` column and no histories: the rows of load_runs are "
                              "accepted")
        from initmem.store.results import load_histories
        frames = [load_histories(p) for p in runs["path"].dropna().unique()]
        histories = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run_id", "epoch"])
    h = histories[histories["run_id"].isin(runs["run_id"])]
    if trained and (h := h[h["epoch"] >= 1]).empty:
        raise NoResults("no training history")
    return h


def configurations(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with a `config` id (0, 1, … in display order) and a `label` as short as tells it apart within its
    section ('adam', 'lr=0.05 wd=0.0001'); `attrs["label_columns"]`: each section's label fields."""
    if runs.empty:
        raise NoResults("no runs")
    cols = ["section", *(c for c in _config_key() if c in runs.columns)]
    keys = [tuple(_hashable(r[c]) for c in cols) for r in runs[cols].to_dict("records")]
    order = sorted(set(keys), key=lambda k: tuple(order_key(c, v) for c, v in zip(cols, k, strict=True)))
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


def label_columns(confs: pd.DataFrame) -> list[str]:
    """The fields the labels of a `configurations` (or `config_spreads`) frame use, over all its sections."""
    return list(dict.fromkeys(c for cs in confs.attrs["label_columns"].values() for c in cs)) or ["label"]


def optimizer_table(runs: pd.DataFrame) -> pd.DataFrame:
    """T1: per configuration the test accuracy (%) at the selected epoch per σ_w, the spread and the paper's (pp), runs
    interpolated and diverged, the median τ_interp, the norm ratio's range and the radial-memory slope."""
    confs = configurations(runs)
    confs[END_TEST] = end_accuracy(confs)
    lead, sigmas, multi = label_columns(confs), sorted(confs["sigma_w"].unique()), multi_seed(confs)
    rows = []
    for _, g in confs.groupby("config", sort=True):
        tau = g["tau_interp"].dropna().astype(float)
        ratio = g["final_weight_norm"].astype(float) / g["init_weight_norm"].astype(float)
        rows.append({**lead_cells(g, lead), **sigma_cells(g, sigmas, multi), **spread_cells(g, multi), **end_cells(g),
                     "paper_spread_pp": paper_spread(g.iloc[0]),
                     "interpolated": f"{len(tau)}/{len(g)}", "diverged": diverged_count(g),
                     "tau_interp": float(tau.median()) if len(tau) else math.nan,
                     "norm_ratio_min": float(ratio.min()), "norm_ratio_max": float(ratio.max()),
                     "radial_slope": radial_slope(g)})
    contrast = cells.contrast_cells(confs)
    if contrast is not None:  # the study's central contrast, its interval from both sides' seeds resampled
        at_end = confs.assign(**{cells.SUBSET_TEST: confs[END_TEST]}).drop(columns=[cells.FULL_TEST], errors="ignore")
        end = cells.contrast_cells(at_end) if confs[END_TEST].notna().all() else None
        rows.append({lead[0]: CONTRAST, **contrast, **{f"end_{k}": v for k, v in (end or {}).items()}})
    out = finish(pd.DataFrame(rows))
    out.attrs["narrowed_note"] = cells.narrowed_note(confs, sigmas)
    return out


def radial_slope(g: pd.DataFrame) -> float:
    """`metrics.radial_memory` slope of final against initial norm over a configuration's runs (NaN: < 2 scales)."""
    ok = g[["init_weight_norm", "final_weight_norm"]].dropna().astype(float)
    ok = ok[(ok > 0).all(axis=1)]
    if ok["init_weight_norm"].nunique() < 2:
        return math.nan
    return metrics.radial_memory(ok["init_weight_norm"].to_numpy(), ok["final_weight_norm"].to_numpy())


def default_marks(max_epoch: int) -> list[int]:
    """1-2-5 epoch marks from max_epoch/50 up, plus max_epoch itself: 200 → [5, 10, 20, 50, 100, 200]."""
    marks = [k * 10**e for e in range(8) for k in (1, 2, 5)]
    return [m for m in marks if max_epoch / 50 <= m < max_epoch] + [int(max_epoch)]


def _check_marks(marks: Sequence[int], longest: int) -> list[int]:
    if (isinstance(marks, (str, bytes)) or not isinstance(marks, Iterable) or not list(marks)
            or any(isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1 for m in marks)):
        raise ConfigError(f"epoch_marks={marks!r} is invalid: a non-empty list of epochs >= 1 is accepted")
    if max(marks) > longest:
        raise ConfigError(f"epoch_marks={list(marks)!r} is invalid: the runs trained {longest} epochs; marks <= "
                          f"{longest} are accepted")
    return sorted({int(m) for m in marks})


def long_training_table(runs: pd.DataFrame, histories: pd.DataFrame | None = None,
                        marks: Sequence[int] | None = None) -> pd.DataFrame:
    """T2: per configuration and epoch mark m (up to its last epoch), the test accuracy (%) per σ_w and the spread had
    training stopped at m, and T_SGD and T_adapt at m (mean over runs). Marks default to `default_marks` of the
    longest history; given ones must be epochs >= 1 some run reached."""
    confs = configurations(runs)
    h = run_histories(confs, histories, "long_training_table ", trained=True)
    by_run = {rid: hh.sort_values("epoch") for rid, hh in h.groupby("run_id")}
    longest = int(h["epoch"].max())
    marks = default_marks(longest) if marks is None else _check_marks(marks, longest)
    lead, sigmas, multi = label_columns(confs), sorted(confs["sigma_w"].unique()), multi_seed(confs)
    rows = []
    for _, g in confs.groupby("config", sort=True):
        g = g[g["run_id"].isin(by_run)]
        if g.empty:
            continue
        last = max(int(by_run[r]["epoch"].max()) for r in g["run_id"])
        at_marks = [m for m in marks if m <= last]
        # `test_at_best(history, upto=m)` at every mark; NaN where no epoch up to m has a finite validation loss
        acc = {r: metrics.test_at_best_by_epoch(by_run[r]).reindex(at_marks, method="ffill") for r in g["run_id"]}
        for m in at_marks:
            at = g.drop(columns=cells.FULL_TEST, errors="ignore").assign(  # per-epoch test: the subset's
                test_acc_at_best=[acc[r][m] for r in g["run_id"]])
            rows.append({**lead_cells(g, lead), "epoch": m, **sigma_cells(at, sigmas, multi), **spread_cells(at, multi),
                         **{c: float(np.mean([by_run[r].loc[by_run[r]["epoch"] <= m, c].iloc[-1] for r in g["run_id"]]))
                            for c in ("T_SGD", "T_adapt") if c in h.columns}})
    return finish(pd.DataFrame(rows))


def config_spreads(runs: pd.DataFrame) -> pd.DataFrame:
    """A row per configuration: its fields, counts, spread, divergences, the clocks at the end of training (median
    over its runs), the measured forgetting (`angle_range_deg`: range over σ_w of the seed-mean angle at the selected
    epoch; `Theta_final`) and the repair gap (pp) over the runs that interpolated."""
    confs = configurations(runs)
    key = [c for c in _config_key() if c in confs.columns]
    rows = []
    for cid, g in confs.groupby("config", sort=True):
        gap = 100 * g["repair_gap"].dropna().astype(float)  # NaN mean, min and max when none interpolated
        rows.append({"section": g["section"].iloc[0], "config": cid, "label": g["label"].iloc[0],
                     **{c: g[c].iloc[0] for c in key},
                     "n_runs": len(g), "n_sigma": g["sigma_w"].nunique(), "n_seeds": g["seed"].nunique(),
                     **spread_cells(g, True), "n_sigma_in_spread": len(cells.sigmas_in_spread(g)),
                     "diverged": diverged_count(g), "n_diverged": int(diverged_runs(g).sum()),
                     **{c: run_median(g, c) for c in (*CLOCKS, *EFF_CLOCKS)},
                     "angle_range_deg": _sigma_range(g, "angle_at_best"), "Theta_final": run_median(g, "Theta_final"),
                     "n_interp": int(g["tau_interp"].notna().sum()), "repair_gap_pp": float(gap.mean()),
                     "repair_gap_pp_min": float(gap.min()), "repair_gap_pp_max": float(gap.max())})
    out = pd.DataFrame(rows)
    out.attrs["label_columns"] = confs.attrs["label_columns"]
    return out


def effective_lr_table(runs: pd.DataFrame, histories: pd.DataFrame | None = None) -> pd.DataFrame:
    """The matched-learning-rate control: per configuration its lr, momentum, effective lr (lr / (1 − β) for heavy-ball
    SGD, `metrics.lr_scale`), momentum-aware T_SGD_eff, seeds, spread (pp) with its 95 % seed-resampled interval at
    the selected and at the last epoch (`rule_spreads`, the last on `last_accuracy`), and how many selected epochs
    come at or after the run's τ_interp (a network that had interpolated when it was selected)."""
    common, last = common_accuracy(runs), last_accuracy(runs, histories)
    rows = []
    for _, g in configurations(runs.assign(**{LAST_TEST: last.to_numpy()})).groupby("config", sort=True):
        r = g.iloc[0]
        beta = float(r["momentum"]) if r["optimizer"] == "sgd_momentum" else 0.0
        after = (pd.to_numeric(g["best_epoch"]) >= pd.to_numeric(g["tau_interp"])).fillna(False)
        rows.append({"optimizer": r["optimizer"], "lr": float(r["lr"]), "momentum": beta,
                     "effective_lr": float(r["lr"]) * metrics.lr_scale(r["optimizer"], beta),
                     "T_SGD_eff": run_median(g, "T_SGD_eff"), "seeds": int(g["seed"].nunique()),
                     "selected_after_tau": f"{int(after.sum())}/{len(g)}", **rule_spreads(g, common)})
    out = finish(pd.DataFrame(rows).sort_values(["effective_lr", "optimizer"], kind="stable").reset_index(drop=True))
    out.attrs.update(accuracy=common, last_accuracy=last.attrs["accuracy"])
    return out


def common_accuracy(runs: pd.DataFrame) -> str:
    """The test accuracy every run of `runs` has: `cells.FULL_TEST` (all 10,000 images) where all have it, else the
    subset's `cells.SUBSET_TEST`, so that rows of one table compare like with like."""
    return cells.FULL_TEST if cells.spread_column(runs) == cells.FULL_TEST else cells.SUBSET_TEST


LAST_TEST = "test_acc_at_last"  # `last_accuracy` as a column of the runs a table groups (read by `rule_spreads`)


def last_accuracy(runs: pd.DataFrame, histories: pd.DataFrame | None = None) -> pd.Series:
    """Every run's test accuracy at its last epoch, indexed like `runs`: on all 10,000 test images (its history's
    test_acc_full there) where every run has it, else the summaries' final_test_acc on the test subset, so that a
    table compares like with like; `attrs["accuracy"]` names which (`cells.FULL_TEST` or `cells.SUBSET_TEST`).
    Histories default to the runs' `path`s; runs without one (and no histories) get the subset."""
    out = pd.to_numeric(runs["final_test_acc"], errors="coerce")
    out.attrs["accuracy"] = cells.SUBSET_TEST
    if histories is None and "path" not in runs.columns:
        return out
    h = run_histories(runs, histories, "last_accuracy: ")
    if "test_acc_full" not in h.columns or h.empty:
        return out
    at_last = h.sort_values(["run_id", "epoch"]).groupby("run_id").tail(1).set_index("run_id")["test_acc_full"]
    full = pd.Series(pd.to_numeric(at_last.reindex(runs["run_id"]), errors="coerce").to_numpy(), index=runs.index)
    if not full.notna().all():  # a run without the whole test set at its last epoch, or without a history
        return out
    full.attrs["accuracy"] = cells.FULL_TEST
    return full


END_TEST = "test_acc_end"  # `end_accuracy` as a column of the runs a table groups


def end_accuracy(runs: pd.DataFrame, histories: pd.DataFrame | None = None) -> pd.Series:
    """Every run's end-of-training reading (`metrics.end_accuracy`: the median test accuracy on the per-epoch test
    subset over its last `metrics.END_WINDOW` epochs), indexed like `runs`; NaN where a run has no history (runs
    without `path`s and no histories: all NaN)."""
    if histories is None and "path" not in runs.columns:
        return pd.Series(math.nan, index=runs.index)
    h = run_histories(runs, histories, "end_accuracy: ")
    by = {rid: metrics.end_accuracy(g) for rid, g in h.groupby("run_id")}
    return pd.Series([by.get(r, math.nan) for r in runs["run_id"]], index=runs.index, dtype=float)


def end_cells(g: pd.DataFrame) -> dict:
    """A configuration's end-of-training spread (pp) and 95 % seed interval (`end_spread_pp*`) over its `END_TEST`
    column; empty where a run lacks it."""
    if END_TEST not in g.columns or g[END_TEST].isna().any():
        return {}
    at_end = g.assign(**{cells.SUBSET_TEST: g[END_TEST]}).drop(columns=[cells.FULL_TEST], errors="ignore")
    return {f"end_{k}": v for k, v in spread_cells(at_end, multi_seed(g)).items()}


def rule_spreads(g: pd.DataFrame, common: str) -> dict:
    """A configuration's spread (pp) and 95 % seed interval on accuracy `common` at the selected epoch (`spread_pp*`)
    and the same at the last epoch (`last_spread_pp*`: every network there has trained as long) on its `LAST_TEST`
    column (`last_accuracy`) where it has one, else the summaries' final_test_acc (the test subset)."""
    at_last = g[LAST_TEST] if LAST_TEST in g.columns else g["final_test_acc"]
    g = g.assign(**{cells.SUBSET_TEST: g[common]}).drop(columns=[cells.FULL_TEST], errors="ignore")
    last_g = g.assign(**{cells.SUBSET_TEST: at_last})
    return {**spread_cells(g, True), **{f"last_{k}": v for k, v in spread_cells(last_g, True).items()}}


def run_median(g: pd.DataFrame, column: str) -> float:
    """Median of a numeric column's values (NaN when the column or every value is missing)."""
    x = pd.to_numeric(g[column], errors="coerce").dropna() if column in g.columns else ()
    return float(np.median(x)) if len(x) else math.nan


def _sigma_range(g: pd.DataFrame, column: str) -> float:
    """max − min over σ_w of the seed-mean of `column`; NaN with fewer than two σ_w that have a value."""
    by = pd.to_numeric(g[column], errors="coerce").groupby(g["sigma_w"]).mean().dropna() if column in g.columns else ()
    return float(by.max() - by.min()) if len(by) >= 2 else math.nan


def spread_pivot(runs: pd.DataFrame, index: str, columns: str) -> pd.DataFrame:
    """Spreads (pp), a row per value of `index` (and other label fields), a column per value of `columns`, and
    `diverged`: the row's 'k/n' runs, then the cells over fewer σ_w than they ran ('3/9 (wd=0.1 without σ_w=2.5)'),
    also in `attrs["narrowed"]` as (row position, column) pairs (F5 stars them)."""
    confs = configurations(runs)
    cs = config_spreads(runs)
    missing = {cid: sorted(set(map(float, g["sigma_w"])) - set(cells.sigmas_in_spread(g)))
               for cid, g in confs.groupby("config")}
    lead = list(dict.fromkeys([index, *(c for c in label_columns(cs) if c != columns and c in cs.columns)]))
    multi = bool((cs["n_seeds"] > 1).any())
    values = sorted(cs[columns].map(_hashable).unique(), key=lambda v: order_key(columns, v))
    name = (lambda v: str(v)) if columns in ("optimizer", "arch") else \
        (lambda v: f"{SHORT.get(columns, columns)}={fmt_value(v)}")
    rows, counts, notes = {}, {}, {}
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
            row[col + "_lo"], row[col + "_hi"] = r["spread_pp_lo"], r["spread_pp_hi"]
        k, n = counts.get(key, (0, 0))
        counts[key] = (k + r["n_diverged"], n + r["n_runs"])
        if missing[r["config"]]:
            notes.setdefault(key, []).append((col, missing[r["config"]]))
    order = sorted(rows, key=lambda k: tuple(order_key(c, v) for c, v in zip(lead, k, strict=True)))
    for key in order:
        k, n = counts[key]
        rows[key]["diverged"] = f"{k}/{n}" + ("" if key not in notes else " (" + "; ".join(
            f"{col} without " + ", ".join(f"σ_w={x:g}" for x in xs) for col, xs in notes[key]) + ")")
    shown = [name(v) + s for v in values for s in (("", "_lo", "_hi") if multi else ("",))]
    df = pd.DataFrame([rows[k] for k in order]).reindex(columns=[*lead, *shown, "diverged"])
    df.attrs["narrowed"] = [(i, col) for i, key in enumerate(order) for col, _ in notes.get(key, ())]
    return finish(df, {name(v) + "*": "percent" for v in values})


def lr_l2_table(runs: pd.DataFrame) -> pd.DataFrame:
    """T3: the spread over learning rate (rows) × weight decay (columns), of the plain-SGD runs when there are any."""
    sgd = runs[runs["optimizer"] == "sgd"]
    return spread_pivot(sgd if len(sgd) else runs, "lr", "weight_decay")


def batch_size_table(runs: pd.DataFrame) -> pd.DataFrame:
    """T4: spread (pp) by batch size (rows) for each optimiser (columns)."""
    return spread_pivot(runs, "batch_size", "optimizer")


def depth_table(runs: pd.DataFrame) -> pd.DataFrame:
    """T5: per architecture × optimiser and σ_w 'test acc % / interpolation epoch' ('never', '(k/n)'), and counts."""
    confs = configurations(runs)
    lead = list(dict.fromkeys(["arch", "optimizer", *label_columns(confs)]))  # always name both
    sigmas, multi = sorted(confs["sigma_w"].unique()), multi_seed(confs)
    rows = []
    for _, g in confs.groupby("config", sort=True):
        row = lead_cells(g, lead)
        for s in sigmas:
            r = g[g["sigma_w"] == s]
            acc = 100 * pd.to_numeric(r["test_acc_at_best"], errors="coerce").mean()
            tau = r["tau_interp"].dropna().astype(float)
            when = "never" if tau.empty else display.number(tau.median(), "count")
            when += f" ({len(tau)}/{len(r)})" if 0 < len(tau) < len(r) else ""
            row[cells.sigma_column(s)] = "" if r.empty else cells.DIVERGED if (
                math.isnan(acc) and diverged_runs(r).any()) else f"{display.number(acc, 'percent')} / {when}"
        rows.append({**row, "interpolated": f"{int(g['tau_interp'].notna().sum())}/{len(g)}",
                     "diverged": diverged_count(g), **spread_cells(g, multi)})
    return finish(pd.DataFrame(rows))
